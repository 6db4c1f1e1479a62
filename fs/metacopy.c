// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Reading the metacopy format (metacopy.h). Both xattrs are read in one
 * call each, without a size probe; a file without trusted.overlay.metacopy
 * costs one getxattr. A metacopy also costs a read of the fill marker,
 * and, without one, a second read of trusted.overlay.metacopy: the
 * finalizer removes that xattr first and the marker last, so a metacopy
 * whose marker is gone is either a real one or one finalized between
 * the two reads (its metacopy xattr is gone too by then).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fdpath.h"
#include "metacopy.h"

/*
 * getxattr on any fd: an O_PATH fd is refused by fgetxattr(), its magic
 * link is not. *@opath: @fd is known to be O_PATH (set on the first
 * refusal, so the calls after it go straight to the link).
 */
static ssize_t get_xattr(int fd, bool *opath, const char *name, void *value, size_t size)
{
	char p[64];
	ssize_t n;

	if (!*opath) {
		n = fgetxattr(fd, name, value, size);
		if (n >= 0 || errno != EBADF)
			return n < 0 ? -errno : n;
		*opath = true;
	}
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	n = getxattr(p, name, value, size);
	return n < 0 ? -errno : n;
}

static char boot_id[40];

static void read_boot_id(void)
{
	char buf[64];
	ssize_t n;
	int fd;

	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	if (n == OVL_BOOT_ID_LEN)
		memcpy(boot_id, buf, (size_t)n);
}

const char *ovl_boot_id(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, read_boot_id);
	return boot_id[0] ? boot_id : NULL;
}

bool ovl_fill_marker_is_current(const char *value, ssize_t n)
{
	const char *id = ovl_boot_id();

	return id && n == OVL_BOOT_ID_LEN && memcmp(value, id, OVL_BOOT_ID_LEN) == 0;
}

/* True if @fd carries a fill marker of this boot (its data is in the file, metacopy or not). */
static bool filled_now(int fd, bool *opath)
{
	char v[OVL_BOOT_ID_LEN + 1];

	return ovl_fill_marker_is_current(v, get_xattr(fd, opath, OVL_XATTR_FILLED, v, sizeof(v)));
}

/* The metacopy state of @fd before the fill marker is considered. */
static int metacopy_get_raw(int fd, bool *opath, char data_path[static PATH_MAX])
{
	char buf[PATH_MAX + 1];
	const char *p;
	ssize_t n;

	/* The kernel's value is empty (old format) or a versioned header (with an fs-verity digest); either marks it. */
	n = get_xattr(fd, opath, OVL_XATTR_METACOPY, buf, sizeof(buf));
	if (n == -ENODATA || n == -EOPNOTSUPP)
		return 0;
	if (n < 0 && n != -ERANGE)
		return (int)n;

	data_path[0] = '\0';
	n = get_xattr(fd, opath, OVL_XATTR_REDIRECT, buf, sizeof(buf) - 1);
	if (n == -ENODATA)
		return 1;
	if (n == -ERANGE)
		return -EBADMSG;
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	if (n == 0 || (size_t)n != strlen(buf))
		return -EBADMSG; /* empty, or a NUL inside */
	if (buf[0] != '/') {
		if (n > NAME_MAX || strchr(buf, '/') || strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0)
			return -EBADMSG;
		memcpy(data_path, buf, (size_t)n + 1);
		return 2;
	}
	p = buf + 1;
	if (!*p || path_check_relative(p) < 0)
		return -EBADMSG;
	memcpy(data_path, p, (size_t)n); /* n - 1 bytes and the NUL */
	return 1;
}

int ovl_metacopy_get(int fd, char data_path[static PATH_MAX])
{
	bool opath = false;
	int r;

	r = metacopy_get_raw(fd, &opath, data_path);
	if (r <= 0 && r != -EBADMSG)
		return r;
	if (filled_now(fd, &opath))
		return 0;
	/* Finalized since the first read (see the top of the file)? */
	if (get_xattr(fd, &opath, OVL_XATTR_METACOPY, NULL, 0) == -ENODATA)
		return 0;
	return r;
}

/* getxattrat(2), Linux 6.13; the C library does not have it yet */
#ifndef SYS_getxattrat
#define SYS_getxattrat 464
#endif

struct getxattrat_args {
	uint64_t value;
	uint32_t size;
	uint32_t flags;
};

/*
 * getxattr of entry @name of @dir_fd, not followed, in one syscall:
 * getxattrat() where the kernel has it (a diff asks this of every upper
 * file; a path through /proc/self/fd costs more than the rest of the
 * walk), else lgetxattr() through /proc. Returns the size or -errno.
 */
ssize_t ovl_xattr_at(int dir_fd, const char *name, const char *xname, void *value, size_t size)
{
	static atomic_bool no_getxattrat;
	char p[PATH_MAX];
	long n = -1;

	if (!atomic_load(&no_getxattrat)) {
		struct getxattrat_args args = { .value = (uint64_t)(uintptr_t)value, .size = (uint32_t)size };

		n = syscall(SYS_getxattrat, dir_fd, name, AT_SYMLINK_NOFOLLOW, xname, &args, sizeof(args));
		if (n < 0 && (errno == ENOSYS || errno == EPERM)) /* EPERM: a seccomp filter that does not know it */
			atomic_store(&no_getxattrat, true);
	}
	if (atomic_load(&no_getxattrat)) {
		snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", dir_fd, name);
		n = lgetxattr(p, xname, value, size);
	}
	return n < 0 ? -errno : n;
}

static int present(ssize_t n)
{
	if (n >= 0 || n == -ERANGE)
		return 1;
	return n == -ENODATA || n == -ENOTSUP ? 0 : (int)n;
}

/* filled_now() by name. */
static bool filled_now_at(int dir_fd, const char *name)
{
	char v[OVL_BOOT_ID_LEN + 1];

	return ovl_fill_marker_is_current(v, ovl_xattr_at(dir_fd, name, OVL_XATTR_FILLED, v, sizeof(v)));
}

int ovl_metacopy_at(int dir_fd, const char *name)
{
	int r;

	r = present(ovl_xattr_at(dir_fd, name, OVL_XATTR_METACOPY, NULL, 0));
	if (r <= 0)
		return r;
	if (filled_now_at(dir_fd, name))
		return 0;
	return present(ovl_xattr_at(dir_fd, name, OVL_XATTR_METACOPY, NULL, 0));
}

int ovl_metacopy_filled_at(int dir_fd, const char *name)
{
	return present(ovl_xattr_at(dir_fd, name, OVL_XATTR_METACOPY, NULL, 0)) > 0 && filled_now_at(dir_fd, name);
}

uint64_t ovl_upper_file_bytes(int dir_fd, const char *name, const struct stat *st)
{
	return ovl_metacopy_at(dir_fd, name) > 0 ? 0 : (uint64_t)st->st_size;
}
