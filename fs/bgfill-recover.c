// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Recovery of background copy-ups a killed daemon left (bgfill.h,
 * ovl_bgfill_recover()), before the mount: one walk of the upper, run only
 * when the state dir's flag says a fill may have been cut short.
 * Single-threaded, hence the file-scope walk state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "bgfill.h"
#include "ctl-data.h"
#include "fdpath.h"
#include "log.h"
#include "macro.h"
#include "metacopy.h"

static const struct ovl_layers *recover_layers;
static unsigned recovered, unrecovered;
static bool recover_fsync;

/*
 * A metacopy a killed daemon was filling in the background (its marker of
 * this boot, and no fill marker): the page cache holds what the view wrote
 * past the lower file's end, not which chunks were copied. Fill it whole
 * from below, keeping its size (a dir_usage_bytes_fn).
 */
static uint64_t recover_one(int dir_fd, const char *name, const struct stat *st)
{
	_cleanup_data_loc_ struct ovl_data_loc loc = { 0 };
	_cleanup_close_ int fd = -1, data = -1;
	char v[OVL_BOOT_ID_LEN + 1];
	ssize_t n;
	int r;

	/* By name first: the walk opens only the files that carry the marker. */
	if (!S_ISREG(st->st_mode) || (n = ovl_xattr_at(dir_fd, name, OVL_XATTR_BGFILL, v, sizeof(v))) < 0)
		return 0;
	fd = openat(dir_fd, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	r = ovl_fill_marker_is_current(v, n) ? ovl_upper_data_locate_fd(recover_layers, fd, name, &loc, NULL) : 0;
	if (r >= 0 && !loc.metacopy) {
		/* another boot's (the page cache is gone: a plain metacopy), or filled and marked since */
		(void)fremovexattr(fd, OVL_XATTR_BGFILL);
		return 0;
	}
	if (r >= 0)
		r = data = ovl_upper_data_open(recover_layers, &loc, O_NONBLOCK, NULL);
	if (r >= 0)
		r = ovl_metacopy_fill(fd, data, st->st_size, false);
	if (r >= 0)
		r = ovl_metacopy_make_plain(fd, recover_fsync);
	if (r < 0) {
		unrecovered++;
		log_error_errno(r, "cannot finish the background copy-up of '%s' a killed daemon left: it stays a metacopy",
		                name);
	} else {
		recovered++;
	}
	return 0;
}

int ovl_bgfill_recover(const struct ovl_layers *l, bool fsync)
{
	uint64_t inodes, bytes;
	int r;

	if (faccessat(l->state_fd, OVL_BGFILL_FLAG, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	recover_layers = l;
	recover_fsync = fsync;
	recovered = unrecovered = 0;
	r = dir_usage_at(l->upper_fd, recover_one, &inodes, &bytes);
	if (r < 0)
		return r;
	if (recovered)
		log_info("finished %u background copy-up(s) a killed daemon left", recovered);
	if (!unrecovered && unlinkat(l->state_fd, OVL_BGFILL_FLAG, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}
