// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Reading the metacopy format (metacopy.h). Both xattrs are read in one
 * call each, without a size probe; a file without trusted.overlay.metacopy
 * costs one getxattr.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fdpath.h"
#include "metacopy.h"

/* getxattr on any fd: an O_PATH fd is refused by fgetxattr(), its magic link is not. */
static ssize_t get_xattr(int fd, const char *name, void *value, size_t size)
{
	char p[64];
	ssize_t n;

	n = fgetxattr(fd, name, value, size);
	if (n >= 0 || errno != EBADF)
		return n < 0 ? -errno : n;
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	n = getxattr(p, name, value, size);
	return n < 0 ? -errno : n;
}

int ovl_metacopy_get(int fd, char data_path[static PATH_MAX])
{
	char buf[PATH_MAX + 1];
	const char *p;
	ssize_t n;

	/* The kernel's value is empty (old format) or a versioned header (with an fs-verity digest); either marks it. */
	n = get_xattr(fd, OVL_XATTR_METACOPY, buf, sizeof(buf));
	if (n == -ENODATA || n == -EOPNOTSUPP)
		return 0;
	if (n < 0 && n != -ERANGE)
		return (int)n;

	data_path[0] = '\0';
	n = get_xattr(fd, OVL_XATTR_MC_REDIRECT, buf, sizeof(buf) - 1);
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
 * One syscall: getxattrat() where the kernel has it (a diff asks this of
 * every upper file; a path through /proc/self/fd costs more than the rest
 * of the walk), else lgetxattr() through /proc.
 */
int ovl_metacopy_at(int dir_fd, const char *name)
{
	static atomic_bool no_getxattrat;
	char p[PATH_MAX];
	long n = -1;

	if (!atomic_load(&no_getxattrat)) {
		struct getxattrat_args args = { 0 };

		n = syscall(SYS_getxattrat, dir_fd, name, AT_SYMLINK_NOFOLLOW, OVL_XATTR_METACOPY, &args, sizeof(args));
		if (n < 0 && (errno == ENOSYS || errno == EPERM)) /* EPERM: a seccomp filter that does not know it */
			atomic_store(&no_getxattrat, true);
	}
	if (atomic_load(&no_getxattrat)) {
		snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", dir_fd, name);
		n = lgetxattr(p, OVL_XATTR_METACOPY, NULL, 0);
	}
	if (n >= 0)
		return 1;
	return errno == ENODATA || errno == ENOTSUP ? 0 : -errno;
}

uint64_t ovl_upper_file_bytes(int dir_fd, const char *name, const struct stat *st)
{
	return ovl_metacopy_at(dir_fd, name) > 0 ? 0 : (uint64_t)st->st_size;
}
