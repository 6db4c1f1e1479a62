// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of fdpath.h: name and path validation and symlink-free
 * walks below a directory fd.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdpath.h"
#include "macro.h"

bool name_is_valid(const char *name)
{
	size_t len;

	if (!name || !*name)
		return false;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return false;
	if (strchr(name, '/'))
		return false;
	len = strlen(name);
	return len <= NAME_MAX;
}

int path_check_relative(const char *path)
{
	const char *p = path;
	size_t total;

	if (!path)
		return -EINVAL;
	total = strlen(path);
	if (total == 0)
		return 0;
	if (total >= PATH_MAX)
		return -ENAMETOOLONG;
	if (path[0] == '/')
		return -EINVAL;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);

		if (len == 0)
			return -EINVAL;
		if (len > NAME_MAX)
			return -ENAMETOOLONG;
		if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return -EINVAL;
		if (!slash)
			break;
		p = slash + 1;
		if (!*p)
			return -EINVAL; /* trailing slash */
	}
	return 0;
}

int path_normalize_relative(const char *path, size_t len, char **ret)
{
	_cleanup_free_ char *out = NULL;
	size_t i = 0, o = 0;

	if (!path || memchr(path, '\0', len))
		return -EINVAL;
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	out = malloc(len + 1);
	if (!out)
		return -ENOMEM;
	while (i < len) {
		size_t start, clen;

		while (i < len && path[i] == '/')
			i++;
		start = i;
		while (i < len && path[i] != '/')
			i++;
		clen = i - start;
		if (clen == 0)
			break;
		if (clen == 1 && path[start] == '.')
			continue;
		if (clen == 2 && path[start] == '.' && path[start + 1] == '.')
			return -EINVAL;
		if (clen > NAME_MAX)
			return -ENAMETOOLONG;
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, path + start, clen);
		o += clen;
	}
	out[o] = '\0';
	*ret = TAKE_PTR(out);
	return 0;
}

static atomic_int openat2_state; /* 0 unknown, 1 yes, -1 no */

bool have_openat2(void)
{
	int s = atomic_load(&openat2_state);

	if (s == 0) {
		struct open_how how = { .flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_BENEATH };
		int fd = (int)syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how));

		if (fd >= 0) {
			close(fd);
			s = 1;
		} else {
			s = (errno == ENOSYS || errno == EPERM) ? -1 : 1;
		}
		atomic_store(&openat2_state, s);
	}
	return s > 0;
}

/* Walks @path component by component with O_NOFOLLOW; the fallback when openat2 is missing. */
static int walk_nofollow(int dir_fd, const char *path, int flags, mode_t mode)
{
	_cleanup_close_ int cur = -1;
	_cleanup_free_ char *copy = strdup(path);
	char *p, *slash;
	int fd;

	if (!copy)
		return -ENOMEM;
	cur = openat(dir_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return -errno;
	p = copy;
	while ((slash = strchr(p, '/'))) {
		*slash = '\0';
		fd = openat(cur, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno == ENOTDIR ? -ELOOP : -errno;
		safe_close(cur);
		cur = fd;
		p = slash + 1;
	}
	fd = openat(cur, p, flags | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	return fd;
}

int openat_beneath(int dir_fd, const char *path, int flags, mode_t mode)
{
	int r;

	r = path_check_relative(path);
	if (r < 0)
		return r;
	if (!*path)
		path = ".";

	if (have_openat2()) {
		struct open_how how = {
			.flags = (unsigned)(flags | O_NOFOLLOW | O_CLOEXEC),
			.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
			.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
		};
		/* The kernel answers EAGAIN when a rename or mount raced a ".." walk;
		 * our paths have no "..", but retry anyway, then fall back to the walk. */
		for (int attempt = 0; attempt < 8; attempt++) {
			int fd = (int)syscall(SYS_openat2, dir_fd, path, &how, sizeof(how));

			if (fd >= 0)
				return fd;
			if (errno != EAGAIN)
				return -errno;
		}
	}
	return walk_nofollow(dir_fd, path, flags, mode);
}

int openat_beneath_parent(int dir_fd, const char *path, const char **ret_name)
{
	_cleanup_free_ char *parent = NULL;
	const char *slash;
	int r;

	r = path_check_relative(path);
	if (r < 0)
		return r;
	if (!*path)
		return -EINVAL;
	slash = strrchr(path, '/');
	if (!slash) {
		r = openat(dir_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (r < 0)
			return -errno;
		*ret_name = path;
		return r;
	}
	parent = strndup(path, (size_t)(slash - path));
	if (!parent)
		return -ENOMEM;
	r = openat_beneath(dir_fd, parent, O_PATH | O_DIRECTORY, 0);
	if (r < 0)
		return r;
	*ret_name = slash + 1;
	return r;
}

int mkdirat_beneath_p(int dir_fd, const char *path, mode_t mode)
{
	_cleanup_close_ int cur = -1;
	_cleanup_free_ char *copy = NULL;
	char *p, *slash;
	int r;

	r = path_check_relative(path);
	if (r < 0)
		return r;
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	cur = openat(dir_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return -errno;
	p = copy;
	while (*p) {
		int fd;

		slash = strchr(p, '/');
		if (slash)
			*slash = '\0';
		if (mkdirat(cur, p, mode) < 0 && errno != EEXIST)
			return -errno;
		fd = openat(cur, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno == ENOTDIR ? -ELOOP : -errno;
		safe_close(cur);
		cur = fd;
		if (!slash)
			break;
		p = slash + 1;
	}
	return TAKE_FD(cur);
}

int read_full_fd(int fd, size_t max, char **ret, size_t *ret_size)
{
	_cleanup_free_ char *buf = NULL;
	size_t size = 0, alloc = 0;

	for (;;) {
		ssize_t n;

		if (alloc - size < 4096) {
			size_t na = alloc ? alloc * 2 : 8192;
			char *nb = realloc(buf, na + 1);

			if (!nb)
				return -ENOMEM;
			buf = nb;
			alloc = na;
		}
		n = read(fd, buf + size, alloc - size);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		size += (size_t)n;
		if (size > max)
			return -EFBIG;
	}
	if (!buf) {
		buf = malloc(1);
		if (!buf)
			return -ENOMEM;
	}
	buf[size] = '\0';
	*ret = TAKE_PTR(buf);
	if (ret_size)
		*ret_size = size;
	return 0;
}

int write_full(int fd, const void *buf, size_t size)
{
	const char *p = buf;

	while (size > 0) {
		ssize_t n = write(fd, p, size);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO;
		p += n;
		size -= (size_t)n;
	}
	return 0;
}

int fd_reopen(int fd, int flags)
{
	char path[64];
	int r;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	r = open(path, (flags & ~O_NOFOLLOW) | O_CLOEXEC);
	if (r < 0)
		return -errno;
	return r;
}

int fd_chmod(int fd, mode_t mode)
{
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
	static atomic_bool missing;
	char path[64];

	if (!atomic_load(&missing)) {
		if (syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH) == 0)
			return 0;
		if (errno != ENOSYS && errno != EINVAL)
			return -errno;
		atomic_store(&missing, errno == ENOSYS);
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return chmod(path, mode) < 0 ? -errno : 0;
}

int opendir_at(int dir_fd, DIR **ret)
{
	DIR *d;
	int fd;

	fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		safe_close(fd);
		return -errno;
	}
	*ret = d;
	return 0;
}

static int dir_usage_walk(int dir_fd, dir_usage_bytes_fn bytes_of, uint64_t *inodes, uint64_t *bytes,
			  unsigned depth)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int r;

	if (depth > 4096)
		return -ELOOP;
	r = opendir_at(dir_fd, &d);
	if (r < 0)
		return r;
	while ((de = readdir(d))) {
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		(*inodes)++;
		if (S_ISREG(st.st_mode))
			*bytes += bytes_of ? bytes_of(dirfd(d), de->d_name, &st) : (uint64_t)st.st_size;
		if (S_ISDIR(st.st_mode)) {
			_cleanup_close_ int cfd = openat(dirfd(d), de->d_name,
			                                 O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (cfd < 0)
				continue;
			r = dir_usage_walk(cfd, bytes_of, inodes, bytes, depth + 1);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int dir_usage_at(int dir_fd, dir_usage_bytes_fn bytes_of, uint64_t *ret_inodes, uint64_t *ret_bytes)
{
	uint64_t inodes = 0, bytes = 0;
	int r;

	r = dir_usage_walk(dir_fd, bytes_of, &inodes, &bytes, 0);
	if (r < 0)
		return r;
	*ret_inodes = inodes;
	*ret_bytes = bytes;
	return 0;
}
