// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Recovery of background copy-ups a killed daemon left (bgfill.h,
 * ovl_bgfill_recover()), before the mount: one walk of the upper, run only
 * when the state dir's flag says a fill may have been cut short.
 * Single-threaded, hence the file-scope walk state.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
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
 * The chunk map beside @fd (OVL_XATTR_BGFILL_MAP): the fill end, the chunk
 * size and *@ret_map (a bit per chunk below the end, malloc'ed). Returns 0,
 * or -ENODATA when there is none or it does not make sense (then the file
 * is filled whole, as before maps were kept).
 */
static int map_load(int fd, off_t *ret_end, off_t *ret_chunk, uint8_t **ret_map)
{
	struct ovl_bgfill_map_hdr h;
	_cleanup_free_ uint8_t *v = NULL;
	uint64_t end, chunk, n;
	ssize_t len;

	len = fgetxattr(fd, OVL_XATTR_BGFILL_MAP, NULL, 0);
	if (len < (ssize_t)sizeof(h))
		return -ENODATA;
	v = malloc((size_t)len);
	if (!v)
		return -ENOMEM;
	len = fgetxattr(fd, OVL_XATTR_BGFILL_MAP, v, (size_t)len);
	if (len < (ssize_t)sizeof(h))
		return -ENODATA;
	memcpy(&h, v, sizeof(h));
	end = le64toh(h.end);
	chunk = le64toh(h.chunk);
	if (chunk == 0 || (chunk & (chunk - 1)) || end > (uint64_t)INT64_MAX / 2)
		return -ENODATA;
	n = (end + chunk - 1) / chunk;
	if (n > ((uint64_t)len - sizeof(h)) * 8)
		return -ENODATA;
	memmove(v, v + sizeof(h), (size_t)len - sizeof(h));
	*ret_end = (off_t)end;
	*ret_chunk = (off_t)chunk;
	*ret_map = TAKE_PTR(v);
	return 0;
}

/*
 * A metacopy a killed daemon was filling in the background (its marker of
 * this boot, and no fill marker): the page cache holds its chunks copied
 * so far, with what the view wrote to them and past the lower file's end.
 * Copy in the chunks its map says are not (without a map, all of them),
 * keeping its size (a dir_usage_bytes_fn).
 */
static uint64_t recover_one(int dir_fd, const char *name, const struct stat *st)
{
	_cleanup_data_loc_ struct ovl_data_loc loc = { 0 };
	_cleanup_close_ int fd = -1, data = -1;
	_cleanup_free_ uint8_t *map = NULL;
	char v[OVL_BOOT_ID_LEN + 1];
	off_t end, chunk;
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
		(void)fremovexattr(fd, OVL_XATTR_BGFILL_MAP);
		return 0;
	}
	if (r >= 0)
		r = data = ovl_upper_data_open(recover_layers, &loc, O_NONBLOCK, NULL);
	if (r >= 0 && map_load(fd, &end, &chunk, &map) >= 0)
		r = ovl_metacopy_fill_chunks(fd, data, MIN(end, st->st_size), chunk, map);
	else if (r >= 0)
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
