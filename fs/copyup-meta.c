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

#include "bgfill.h"
#include "fdpath.h"
#include "finalize.h"
#include "macro.h"
#include "metacopy.h"
#include "ovl.h"

#define XATTR_CAPS "security.capability"

bool ovl_metacopy_is_movable(int upper_fd)
{
	char path[PATH_MAX];

	return ovl_metacopy_get(upper_fd, path) == 1 && path[0];
}

int ovl_keep_save(int fd, struct ovl_keep *k)
{
	*k = (struct ovl_keep){ .ncaps = -1 };
	if (fstat(fd, &k->st) < 0)
		return -errno;
	k->ncaps = fgetxattr(fd, XATTR_CAPS, NULL, 0);
	if (k->ncaps > 0) {
		k->caps = malloc((size_t)k->ncaps);
		if (!k->caps)
			return -ENOMEM;
		k->ncaps = fgetxattr(fd, XATTR_CAPS, k->caps, (size_t)k->ncaps);
	}
	k->saved = true;
	return 0;
}

int ovl_keep_restore(int fd, struct ovl_keep *k)
{
	int r = k->saved ? ovl_keep_apply(fd, k) : 0;

	free(k->caps);
	k->caps = NULL;
	return r;
}

int ovl_keep_apply(int fd, const struct ovl_keep *k)
{
	struct stat now;
	int r = 0;

	/* A write drops security.capability, and the set-id bits without CAP_FSETID: put them back. */
	if (k->ncaps > 0 && fsetxattr(fd, XATTR_CAPS, k->caps, (size_t)k->ncaps, 0) < 0)
		r = -errno;
	if (r >= 0 && fstat(fd, &now) == 0 && (now.st_mode & 07777) != (k->st.st_mode & 07777) &&
	    fchmod(fd, k->st.st_mode & 07777) < 0)
		r = -errno;
	if (r >= 0 && futimens(fd, (struct timespec[2]){ k->st.st_atim, k->st.st_mtim }) < 0)
		r = -errno;
	return r;
}

int ovl_metacopy_fill(int fd, int data_fd, off_t size, bool writeback)
{
	struct ovl_keep k;
	struct stat dst;
	off_t copy;
	int r, q;

	if (fstat(data_fd, &dst) < 0)
		return -errno;
	r = ovl_keep_save(fd, &k);
	if (r < 0) {
		(void)ovl_keep_restore(fd, &k);
		return r;
	}
	copy = MIN(size, dst.st_size);
	/*
	 * Holes are skipped only where the file has no blocks of its own to
	 * overwrite (a fill a crash cut short, or after a reboot, may have left
	 * some): xattr blocks aside, a metacopy holds none.
	 */
	r = copy > 0 ? ovl_copy_data(data_fd, fd, copy,
				     (off_t)dst.st_blocks * 512 < dst.st_size && k.st.st_blocks * 512 <= 8192,
				     writeback) : 0;
	if (r >= 0 && ftruncate(fd, size) < 0)
		r = -errno;
	q = ovl_keep_restore(fd, &k);
	return r < 0 ? r : q;
}

/* A chunk not in was never written through the view (a request copies a chunk first): a hole, so holes of @data stay. */
int ovl_metacopy_fill_chunks(int fd, int data, off_t end, off_t chunk, const uint8_t *map)
{
	struct ovl_keep k;
	struct stat dst;
	bool sparse;
	int r, q;

	if (fstat(data, &dst) < 0)
		return -errno;
	sparse = (off_t)dst.st_blocks * 512 < dst.st_size;
	r = ovl_keep_save(fd, &k);
	for (off_t c = 0; r >= 0 && c * chunk < end; c++)
		if (!(map[c / 8] & (1u << (c % 8))))
			r = ovl_copy_range(data, fd, c * chunk, MIN((c + 1) * chunk, end), sparse);
	q = ovl_keep_restore(fd, &k);
	return r < 0 ? r : q;
}

int ovl_metacopy_make_plain(int fd, bool sync)
{
	static const char *const names[] = { OVL_XATTR_METACOPY, OVL_XATTR_REDIRECT, OVL_XATTR_FILLED, OVL_XATTR_BGFILL,
					     OVL_XATTR_BGFILL_MAP };

	/* The data must be on disk before the file stops pointing below for it. */
	if (sync && fdatasync(fd) < 0)
		return -errno;
	/* Metacopy first: a stale redirect or marker alone means nothing. */
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (fremovexattr(fd, names[i]) < 0 && errno != ENODATA)
			return -errno;
	return sync && fsync(fd) < 0 ? -errno : 0;
}

/*
 * Copies the data @lfd into the metacopy @ufd, @size bytes at most (all if
 * < 0), and makes @size its size; then it is a full copy. @charged: the
 * quota was charged for the data already.
 */
static int fill_upper(int ufd, int lfd, off_t size, bool charged)
{
	_cleanup_close_ int out = -1, in = -1;
	struct stat ust, lst;
	bool defer;
	int r;

	out = fd_reopen(ufd, O_WRONLY);
	if (out < 0)
		return out;
	in = fd_reopen(lfd, O_RDONLY);
	if (in < 0)
		return in;
	if (fstat(out, &ust) < 0 || fstat(in, &lst) < 0)
		return -errno;
	if (size < 0)
		size = ust.st_size;
	r = charged ? 0 : ovl_quota_check(MIN(size, lst.st_size), 0);
	if (r < 0)
		return r;
	/* A big one is copied in the background (fs/bgfill.h): its data is the file's from now on, through us. */
	if (ovl_bgfill_wanted(MIN(size, lst.st_size))) {
		r = ovl_bgfill_begin(out, in, size);
		if (r >= 0)
			return 0;
		if (r != -EAGAIN)
			return r;
	}
	/* The finalizer syncs a deferred fill later: no writeback now, it would only slow the copy. */
	defer = ovl_finalize_enabled();
	r = ovl_metacopy_fill(out, in, size, ovl_fs->opt->fsync && !defer);
	if (r < 0)
		return r;
	/* Marked and queued: the data is the file's from now on (this boot), on disk once finalized. */
	if (defer && ovl_finalize_defer(out) == 0)
		return 0;
	return ovl_metacopy_make_plain(out, ovl_fs->opt->fsync);
}

void ovl_metacopy_wait_fill(struct ovl_node *n)
{
	struct ovl_fs *fs = ovl_fs;

	pthread_mutex_lock(&fs->fill_lock);
	while (n->filling)
		pthread_cond_wait(&fs->fill_cond, &fs->fill_lock);
	pthread_mutex_unlock(&fs->fill_lock);
}

int ovl_metacopy_claim_fill(struct ovl_node *n, off_t size, bool charged, struct ovl_fill *f)
{
	int r, ufd = -1, lfd = -1;

	/* Claims are made under copyup_lock only; a fill ends without it, so waiting here cannot deadlock. */
	ovl_metacopy_wait_fill(n);
	pthread_rwlock_rdlock(&n->lock);
	if (n->metacopy && n->upper_fd >= 0 && n->lower_fd >= 0) {
		ufd = fcntl(n->upper_fd, F_DUPFD_CLOEXEC, 3);
		lfd = fcntl(n->lower_fd, F_DUPFD_CLOEXEC, 3);
	}
	r = !n->metacopy ? 0 : ufd < 0 || lfd < 0 ? -ESTALE : 1;
	pthread_rwlock_unlock(&n->lock);
	if (r > 0 && ovl_bgfill_holds(ufd)) {
		/* Filled in the background already (a node made before its fill began): its data is in upper. */
		pthread_rwlock_wrlock(&n->lock);
		n->metacopy = false;
		ovl_xattr_absent_forget(n);
		pthread_rwlock_unlock(&n->lock);
		r = 0;
	}
	if (r <= 0) {
		safe_close(ufd);
		safe_close(lfd);
		return r;
	}
	pthread_mutex_lock(&ovl_fs->fill_lock);
	n->filling = true;
	pthread_mutex_unlock(&ovl_fs->fill_lock);
	*f = (struct ovl_fill){ .ufd = ufd, .lfd = lfd, .size = size, .charged = charged };
	return 1;
}

int ovl_metacopy_run_fill(struct ovl_node *n, struct ovl_fill *f)
{
	struct ovl_fs *fs = ovl_fs;
	int r;

	r = fill_upper(f->ufd, f->lfd, f->size, f->charged);
	f->ufd = safe_close(f->ufd);
	f->lfd = safe_close(f->lfd);
	/*
	 * Without copyup_lock: readers take node->lock, and whoever replaces
	 * the node's state meanwhile (an eviction, a refresh) reads the file
	 * marked or plain by now (ovl_node_apply()).
	 */
	if (r >= 0) {
		pthread_rwlock_wrlock(&n->lock);
		n->metacopy = false;
		ovl_xattr_absent_forget(n);
		pthread_rwlock_unlock(&n->lock);
	}
	pthread_mutex_lock(&fs->fill_lock);
	n->filling = false;
	pthread_cond_broadcast(&fs->fill_cond);
	pthread_mutex_unlock(&fs->fill_lock);
	return r;
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
