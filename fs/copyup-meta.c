// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The second half of a metadata-only copy-up (fs/metacopy.h): when a
 * metacopy is opened for writing or truncated, its data is copied from the
 * lower file into the upper file in place (the inode, its links and its
 * metadata stay), synced, and only then do the metacopy and redirect
 * xattrs go. A daemon killed at any point leaves a metacopy (data not yet
 * authoritative, read from below) or a full copy, never a file with holes
 * where its data should be. The write itself must not change what the
 * view shows of the file: its times and security.capability (which the
 * kernel drops on any write) are put back, as kernel overlayfs does.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fdpath.h"
#include "macro.h"
#include "metacopy.h"
#include "ovl.h"

#define XATTR_CAPS "security.capability"

bool ovl_metacopy_is_movable(int upper_fd)
{
	char path[PATH_MAX];

	return ovl_metacopy_get(upper_fd, path) == 1 && path[0];
}

/* Copies the data @lfd into the metacopy @ufd, @size bytes at most (all if < 0), and makes @size its size; then it is a full copy. */
static int fill_upper(int ufd, int lfd, off_t size)
{
	_cleanup_close_ int out = -1, in = -1;
	_cleanup_free_ void *caps = NULL;
	ssize_t ncaps = 0;
	struct stat ust, lst;
	off_t copy;
	int r;

	out = fd_reopen(ufd, O_WRONLY);
	if (out < 0)
		return out;
	in = fd_reopen(lfd, O_RDONLY);
	if (in < 0)
		return in;
	if (fstat(out, &ust) < 0 || fstat(in, &lst) < 0)
		return -errno;
	copy = size < 0 || size > lst.st_size ? lst.st_size : size;
	r = ovl_quota_check(copy, 0);
	if (r < 0)
		return r;

	ncaps = fgetxattr(out, XATTR_CAPS, NULL, 0);
	if (ncaps > 0) {
		caps = malloc((size_t)ncaps);
		if (!caps)
			return -ENOMEM;
		ncaps = fgetxattr(out, XATTR_CAPS, caps, (size_t)ncaps);
	}

	r = copy > 0 ? ovl_copy_data(in, out, copy, (off_t)lst.st_blocks * 512 < lst.st_size, ovl_fs->opt->fsync) : 0;
	if (r >= 0 && ftruncate(out, size >= 0 ? size : ust.st_size) < 0)
		r = -errno;
	if (r >= 0 && ncaps > 0 && fsetxattr(out, XATTR_CAPS, caps, (size_t)ncaps, 0) < 0)
		r = -errno;
	if (r >= 0 && futimens(out, (struct timespec[2]){ ust.st_atim, ust.st_mtim }) < 0)
		r = -errno;
	/* The data must be on disk before the file stops pointing below for it. */
	if (r >= 0 && ovl_fs->opt->fsync && fdatasync(out) < 0)
		r = -errno;
	if (r >= 0 && fremovexattr(out, OVL_XATTR_METACOPY) < 0)
		r = -errno;
	if (r >= 0 && fremovexattr(out, OVL_XATTR_MC_REDIRECT) < 0 && errno != ENODATA)
		r = -errno;
	return r;
}

int ovl_metacopy_copy_data(struct ovl_node *n, off_t size)
{
	_cleanup_close_ int ufd = -1, lfd = -1;
	int r;

	/* copyup_lock is held: the node's fds and its metacopy flag change only under it. */
	pthread_rwlock_rdlock(&n->lock);
	if (n->metacopy && n->upper_fd >= 0 && n->lower_fd >= 0) {
		ufd = fcntl(n->upper_fd, F_DUPFD_CLOEXEC, 3);
		lfd = fcntl(n->lower_fd, F_DUPFD_CLOEXEC, 3);
	}
	r = !n->metacopy ? 0 : ufd < 0 || lfd < 0 ? -ESTALE : 1;
	pthread_rwlock_unlock(&n->lock);
	if (r <= 0)
		return r;
	r = fill_upper(ufd, lfd, size);
	if (r < 0)
		return r;
	pthread_rwlock_wrlock(&n->lock);
	n->metacopy = false;
	pthread_rwlock_unlock(&n->lock);
	return 0;
}

int ovl_copy_up_movable(struct ovl_node *n)
{
	int r, fd;
	bool movable = true;

	r = ovl_copy_up(n);
	if (r < 0)
		return r;
	r = ovl_node_rdlock_fresh(n);
	if (r < 0)
		return r;
	if (n->metacopy) {
		fd = n->upper_fd;
		movable = fd >= 0 && ovl_metacopy_is_movable(fd);
	}
	pthread_rwlock_unlock(&n->lock);
	return movable ? 0 : ovl_copy_up_size(n, -1);
}
