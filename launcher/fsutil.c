/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Small file system helpers for the launcher's own dirs (runtime dir,
 * temporary session and home dirs): created root-owned, removed with an
 * fd-relative walk that never follows a symlink the sandbox may have
 * planted.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "macro.h"

int launch_mkdir_p(const char *path, mode_t mode)
{
	_cleanup_free_ char *copy = NULL;

	if (!path || path[0] != '/')
		return -EINVAL;
	/* the usual case: it is there already (one syscall, not one per component) */
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -errno;
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	for (char *p = copy + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(copy, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(copy, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Removes everything below @dir_fd (which it consumes). */
static int rm_children(int dir_fd, unsigned depth)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int r = 0;

	if (depth > 256) {
		close(dir_fd);
		return -ELOOP;
	}
	d = fdopendir(dir_fd);
	if (!d) {
		close(dir_fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (fd >= 0) {
				int q = rm_children(fd, depth + 1);

				if (q < 0 && r == 0)
					r = q;
			}
			if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 && r == 0)
				r = -errno;
		} else if (unlinkat(dirfd(d), de->d_name, 0) < 0 && r == 0) {
			r = -errno;
		}
	}
	return r;
}

int launch_rm_rf(const char *path)
{
	int fd, r;

	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = rm_children(fd, 0);
	if (rmdir(path) < 0 && r == 0)
		r = -errno;
	return r;
}

int launch_prepare_home(const char *root, uid_t uid, gid_t gid)
{
	static const char *const subs[] = { "home", "tmp", "config", "cache", "state", "data" };
	_cleanup_close_ int root_fd = -1;
	int r;

	r = launch_mkdir_p(root, 0755);
	if (r < 0)
		return r;
	root_fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root_fd < 0)
		return -errno;
	for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
		_cleanup_close_ int fd = -1;

		if (mkdirat(root_fd, subs[i], 0700) < 0 && errno != EEXIST)
			return -errno;
		fd = openat(root_fd, subs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		if (fchown(fd, uid, gid) < 0 || fchmod(fd, 0700) < 0)
			return -errno;
	}
	return 0;
}
