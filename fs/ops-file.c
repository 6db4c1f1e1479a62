// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * FUSE operations on open files and directories: open/create (copy-up on
 * write access), read by splice, write_buf, fsync, fallocate,
 * copy_file_range, lseek SEEK_DATA/SEEK_HOLE, merged readdir/readdirplus,
 * access, and session init (capabilities: writeback cache, splice,
 * readdirplus, parallel dirops).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acl.h"
#include "bgfill.h"
#include "fdpath.h"
#include "finalize.h"
#include "log.h"
#include "macro.h"
#include "ops.h"
#include "ovl.h"

static int open_flags(int flags);

/* A handle on @fd for @fi, of the node's generation @gen (read with ovl_mutate_begin() held for a writable open). */
static int new_fh(int fd, bool lower, unsigned gen, struct fuse_file_info *fi)
{
	struct ovl_fh *fh = malloc(sizeof(*fh));

	if (!fh)
		return -ENOMEM;
	fh->fd = fd;
	fh->bf = lower ? NULL : ovl_bgfill_get(fd);
	fh->lower = lower;
	fh->wflags = (fi->flags & O_ACCMODE) == O_RDONLY ? -1 : open_flags(fi->flags & ~O_TRUNC);
	atomic_init(&fh->gen, gen);
	fi->fh = (uint64_t)(uintptr_t)fh;
	return 0;
}

/* Frees the handle of @fi made by new_fh() when the open fails before it is counted (its fd stays the caller's). */
static void free_fh(struct fuse_file_info *fi)
{
	struct ovl_fh *fh = (struct ovl_fh *)(uintptr_t)fi->fh;

	ovl_bgfill_put(fh->bf);
	free(fh);
}

static int open_flags(int flags)
{
	flags &= ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW);
	if (ovl_fs->opt->writeback) {
		/* The kernel may read pages of a write-only file and handles O_APPEND itself. */
		if ((flags & O_ACCMODE) == O_WRONLY)
			flags = (flags & ~O_ACCMODE) | O_RDWR;
		flags &= ~O_APPEND;
	}
	return flags | O_CLOEXEC;
}

/*
 * A write-only open in cached mode goes direct (FOPEN_DIRECT_IO): each
 * write(2) is one WRITE (a cached write that starts inside a page the
 * kernel does not hold is sent as two), the kernel does not ask for
 * security.capability before the first write (the upper filesystem drops
 * it when we write), and the data is not cached twice, by FUSE and by the
 * upper. Nothing reads through such a file (mmap needs read access), and a
 * direct write invalidates the pages other opens of the file cached, on
 * Linux 6.6+ (ovl_dio_writes_coherent()); older kernels keep them, so
 * there the write goes through the page cache. Not with the writeback
 * cache, which must have the pages.
 */
static void set_fi_flags(struct fuse_file_info *fi)
{
	const struct ovl_fh *fh = (const struct ovl_fh *)(uintptr_t)fi->fh;

	fi->keep_cache = 1;
	if ((fi->flags & O_ACCMODE) == O_WRONLY && fh->mode == OVL_IO_CACHED && !ovl_fs->opt->writeback &&
	    ovl_dio_writes_coherent())
		fi->direct_io = 1;
}

/* Closes and frees the handle of @fi (at release, or when the open reply failed). */
static void release_fh(struct ovl_node *n, struct fuse_file_info *fi)
{
	struct ovl_fh *fh = (struct ovl_fh *)(uintptr_t)fi->fh;

	ovl_pt_release(n, fh);
	ovl_bgfill_put(fh->bf);
	close(fh->fd);
	free(fh);
}

/*
 * A write, or open(O_TRUNC), by a caller without CAP_FSETID clears the
 * set-id bits of @fd, whose attributes are @st (ovl_setid_to_kill()): with FUSE_HANDLE_KILLPRIV_V2 and
 * FUSE_CAP_ATOMIC_O_TRUNC the kernel leaves it to us. uid 0 stands for
 * CAP_FSETID: libfuse 3.14 drops the kernel's FUSE_WRITE_KILL_SUIDGID and
 * FUSE_OPEN_KILL_SUIDGID flags.
 */
static int kill_setid(int fd, const struct stat *st)
{
	mode_t kill = ovl_setid_to_kill(st->st_mode);

	if (kill && fchmod(fd, st->st_mode & 07777 & ~kill) < 0)
		return -errno;
	return 0;
}

void ovl_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	bool write = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
	bool lower = false, lower_hardlink = false, split = false;
	struct ovl_bgfill *bf = NULL;
	int r = 0, fd = -1;
	unsigned gen;

	ovl_node_maybe_evict(); /* re-resolving evicted nodes takes fds too */
	gen = atomic_load(&n->gen); /* before the fds are resolved: a commit after it makes the handle rebind */
	if (ovl_node_is_split(n)) {
		/* An open by path walks again and meets the node that took its place. */
		fuse_reply_err(req, ESTALE);
		return;
	}
	if (write) {
		if (ovl_fs->opt->read_only) {
			fuse_reply_err(req, EROFS);
			return;
		}
		ovl_mutate_begin();
		gen = atomic_load(&n->gen); /* again: no commit or discard until ovl_mutate_end() */
		pthread_rwlock_rdlock(&n->lock);
		if (n->upper_fd < 0 && n->lower_fd >= 0) {
			struct stat lst;

			/* Copy-up breaks a lower hard link: st_nlink changes under the kernel's cached attributes. */
			lower_hardlink = fstatat(n->lower_fd, "", &lst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 &&
					 lst.st_nlink > 1;
		}
		pthread_rwlock_unlock(&n->lock);
		r = ovl_copy_up_size(n, (fi->flags & O_TRUNC) ? 0 : -1);
	}
	if (r >= 0)
		r = ovl_node_rdlock_fresh(n);
	if (r >= 0) {
		if (n->upper_fd >= 0 && !n->metacopy) {
			/* A file being filled is truncated with the fill's lock held (below), or its copy would come back. */
			bf = (fi->flags & O_TRUNC) ? ovl_bgfill_get(n->upper_fd) : NULL;
			fd = fd_reopen(n->upper_fd, open_flags(fi->flags & (bf ? ~O_TRUNC : ~0)));
		} else if (n->lower_fd >= 0 && !write) {
			/* Lower-only, or a metacopy whose data is below: read the lower file (a writer copied the data up above). */
			fd = fd_reopen(n->lower_fd, open_flags(fi->flags & ~O_TRUNC));
			lower = true;
		} else {
			fd = -ESTALE;
		}
		pthread_rwlock_unlock(&n->lock);
		r = fd;
	}
	if (r >= 0 && bf) {
		/* O_RDONLY | O_TRUNC truncates too: through a writable fd of the same file. */
		int wfd = (fi->flags & O_ACCMODE) == O_RDONLY ? fd_reopen(fd, O_WRONLY) : fd;

		r = wfd;
		if (wfd >= 0) {
			ovl_bgfill_lock(bf);
			r = ovl_bgfill_truncate_locked(bf, wfd, 0);
			ovl_bgfill_unlock(bf);
		}
		if (wfd >= 0 && wfd != fd)
			close(wfd);
	}
	ovl_bgfill_put(bf);
	if (r >= 0 && (fi->flags & O_TRUNC) && fuse_req_ctx(req)->uid != 0) {
		struct stat st;

		r = fstat(fd, &st) < 0 ? -errno : kill_setid(fd, &st);
	}
	if (write)
		ovl_mutate_end();
	if (r >= 0)
		r = new_fh(fd, lower, gen, fi);
	if (r >= 0) {
		r = ovl_pt_open(n, fd, NULL, write, (struct ovl_fh *)(uintptr_t)fi->fh);
		split = r == -ESTALE;
		if (split)
			ovl_node_split(n); /* the kernel retries the path walk and looks the name up afresh */
		if (r < 0)
			free_fh(fi);
	}
	if (r < 0) {
		/* Attributes only (no lock held): the split node's were cached before the copy-up. */
		if (split && ovl_fs->se)
			(void)fuse_lowlevel_notify_inval_inode(ovl_fs->se, ino, -1, 0);
		safe_close(fd);
		fuse_reply_err(req, -r);
		return;
	}
	set_fi_flags(fi);
	/* Attributes only: takes no lock the open holds, so it is done when open(2) returns. */
	if (lower_hardlink && ovl_fs->se) {
		fuse_ino_t parent = ovl_node_parent_ino(n);

		(void)fuse_lowlevel_notify_inval_inode(ovl_fs->se, ino, -1, 0);
		/* and the parent's cached listing, whose d_ino for the name was the lower one (the kernel's, too) */
		if (parent)
			(void)fuse_lowlevel_notify_inval_inode(ovl_fs->se, parent, 0, 0);
	}
	if (ovl_pt_reply_open(req, fi, (struct ovl_fh *)(uintptr_t)fi->fh) != 0)
		release_fh(n, fi);
}

static atomic_int create_delay = -1; /* DRAFTFS_TEST_CREATE_DELAY_MS: after the create's checks, before the create (tests) */

void ovl_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
	struct ovl_node *p = ovl_node_from_ino(parent);
	struct fuse_entry_param e;
	struct ovl_create c;
	struct ovl_node *n;
	struct stat st, ust;
	char tmp[64] = "";
	int r, fd = -1, dir;
	const char *at;
	unsigned gen = 0;
	bool um;

	ovl_mutate_entry_begin();
	r = ovl_prepare_create(req, p, name, &c);
	if (r >= 0)
		ovl_test_delay(&create_delay, "DRAFTFS_TEST_CREATE_DELAY_MS");
	if (r >= 0)
		do {
			dir = ovl_create_target(&c, name, tmp, &at);
			um = ovl_umask_begin(req, p, &mode);
			fd = openat(dir, at, open_flags(fi->flags) | O_CREAT | O_EXCL | O_NOFOLLOW, mode & 07777);
			r = fd < 0 ? -errno : 0;
			ovl_umask_end(um);
		} while (ovl_create_retry(&c, name, &r));
	if (r >= 0) {
		if ((c.uid != 0 || c.gid != 0) && fchown(fd, c.uid, c.gid) < 0)
			r = -errno;
		if (r >= 0)
			r = ovl_create_special_bits(fd, NULL, mode & 06000);
		if (r >= 0) {
			ovl_create_set_origin(&c, dir, at, fd);
			r = ovl_finish_create(&c, name, tmp, false);
		}
		if (r < 0 && fd >= 0) {
			(void)unlinkat(dir, at, 0);
			fd = safe_close(fd);
		}
		/* The new file's node from what we know of it, not a second resolution across the layers. */
		if (r >= 0)
			r = ovl_new_node(p, name, c.pfd, false, &n, &st, &ust);
		if (r >= 0) {
			gen = atomic_load(&n->gen);
			ovl_xattr_absent_created(n); /* the kernel asks for its caps on tar's chown */
		}
	}
	ovl_create_done(&c);
	ovl_mutate_entry_end();
	if (r >= 0) {
		r = new_fh(fd, false, gen, fi);
		/* A new node has no open files: never -ESTALE here, and a writable open is always cached. */
		if (r >= 0 && (r = ovl_pt_open(n, fd, &ust, true, (struct ovl_fh *)(uintptr_t)fi->fh)) < 0)
			free_fh(fi);
		if (r < 0)
			ovl_node_forget(n, 1);
	}
	if (r < 0) {
		safe_close(fd);
		fuse_reply_err(req, -r);
		return;
	}
	set_fi_flags(fi);
	ovl_fill_entry(&e, n, &st);
	if (fuse_reply_create(req, &e, fi) != 0) {
		release_fh(n, fi);
		ovl_node_forget(n, 1);
	}
}

/*
 * The fd to read @fi through: moved first where a commit or discard moved
 * the file (fs/rebind.c); a handle reading lower data (opened read-only
 * before a copy-up) switches to the upper copy.
 */
static int read_fd(struct ovl_node *n, struct fuse_file_info *fi)
{
	struct ovl_fh *fh = (struct ovl_fh *)(uintptr_t)fi->fh;

	if (_unlikely_(ovl_fh_is_stale(n, fi))) {
		/* A commit or discard since (fs/rebind.c); an error leaves the handle where it was. */
		ovl_mutate_begin();
		(void)ovl_fh_rebind(n, fi);
		ovl_mutate_end();
	}
	if (_unlikely_(fh->lower)) {
		int nfd = -1;

		pthread_rwlock_rdlock(&n->lock);
		/* Not while its copy runs: this handle has no fill to read through; it reads below until then. */
		if (n->upper_fd >= 0 && !n->metacopy && !ovl_bgfill_holds(n->upper_fd))
			nfd = fd_reopen(n->upper_fd, O_RDONLY);
		pthread_rwlock_unlock(&n->lock);
		if (nfd >= 0) {
			/* dup3 swaps the file behind the same fd number atomically for concurrent readers. */
			if (dup3(nfd, fh->fd, O_CLOEXEC) >= 0)
				fh->lower = false;
			close(nfd);
		}
	}
	return fh->fd;
}

void ovl_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
	int fd = read_fd(ovl_node_from_ino(ino), fi);
	void *ring = ovl_uring_reply_buf(size);
	int r = ovl_bgfill_ensure(ovl_fh_bgfill(fi), off, (off_t)size);

	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (ring) {
		/* Over io_uring: read straight into the entry's reply buffer (no splice there, no bounce copy). */
		ssize_t n = pread(fd, ring, size, off);

		if (n < 0)
			fuse_reply_err(req, errno);
		else
			fuse_reply_buf(req, ring, (size_t)n);
		return;
	}
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fd;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void ovl_op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off, struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	bool quota = ovl_fs->opt->quota_bytes != 0, kill = fuse_req_ctx(req)->uid != 0;
	struct ovl_bgfill *bf = ovl_fh_bgfill(fi);
	ssize_t r;

	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = ovl_fh_fd(fi);
	out.buf[0].pos = off;
	ovl_mutate_begin();
	r = ovl_fh_rebind(ovl_node_from_ino(ino), fi);
	/* One fstat serves the quota and the set-id bits (FUSE_HANDLE_KILLPRIV_V2 leaves those to us). */
	if (r >= 0 && (quota || kill)) {
		off_t end = off + (off_t)out.buf[0].size;
		struct stat st;

		r = fstat(out.buf[0].fd, &st) < 0 ? -errno : 0;
		if (r == 0 && quota && end > st.st_size)
			r = ovl_quota_check(end - st.st_size, 0);
		if (r == 0 && kill)
			r = kill_setid(out.buf[0].fd, &st);
	}
	if (r >= 0) {
		ovl_bgfill_lock(bf);
		r = ovl_bgfill_ensure_locked(bf, off, (off_t)out.buf[0].size);
		if (r >= 0)
			r = fuse_buf_copy(&out, in, 0);
		if (r > 0)
			ovl_bgfill_note_data(bf);
		ovl_bgfill_unlock(bf);
	}
	ovl_mutate_end();
	if (r < 0)
		fuse_reply_err(req, (int)-r);
	else
		fuse_reply_write(req, (size_t)r);
}

void ovl_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	release_fh(ovl_node_from_ino(ino), fi);
	fuse_reply_err(req, 0);
}

void ovl_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int r = 0;

	if (ovl_fs->opt->fsync) {
		int fd = ovl_fh_fd(fi);

		/* A copy-up whose sync was deferred: finalizing it syncs everything (fsync included). */
		r = ovl_bgfill_wait(ovl_fh_bgfill(fi));
		if (r == 0)
			r = ovl_fh_is_lower(fi) ? 0 : ovl_finalize_fd(fd);
		if (r < 0)
			r = -r;
		else if (r == 0)
			r = (datasync ? fdatasync(fd) : fsync(fd)) < 0 ? errno : 0;
		else
			r = 0;
	}
	fuse_reply_err(req, r);
}

void ovl_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, struct fuse_file_info *fi)
{
	int r;

	ovl_mutate_begin();
	r = -ovl_fh_rebind(ovl_node_from_ino(ino), fi);
	ovl_bgfill_lock(ovl_fh_bgfill(fi));
	if (r == 0)
		r = -ovl_bgfill_ensure_locked(ovl_fh_bgfill(fi), offset, length);
	if (r == 0)
		r = fallocate(ovl_fh_fd(fi), mode, offset, length) < 0 ? errno : 0;
	if (r == 0)
		ovl_bgfill_note_data(ovl_fh_bgfill(fi));
	ovl_bgfill_unlock(ovl_fh_bgfill(fi));
	ovl_mutate_end();
	fuse_reply_err(req, r);
}

void ovl_op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			    fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len, int flags)
{
	struct ovl_bgfill *bf = ovl_fh_bgfill(fi_out);
	loff_t in = off_in, out = off_out;
	int fd = read_fd(ovl_node_from_ino(ino_in), fi_in);
	ssize_t n;

	/* The source's chunks first, without the destination's lock: one fill lock at a time. */
	n = ovl_bgfill_ensure(ovl_fh_bgfill(fi_in), off_in, (off_t)len);
	ovl_mutate_begin();
	if (n >= 0)
		n = ovl_fh_rebind(ovl_node_from_ino(ino_out), fi_out);
	ovl_bgfill_lock(bf);
	if (n >= 0)
		n = ovl_bgfill_ensure_locked(bf, off_out, (off_t)len);
	if (n >= 0) {
		n = copy_file_range(fd, &in, ovl_fh_fd(fi_out), &out, len, (unsigned)flags);
		if (n < 0)
			n = -errno;
		else if (n > 0)
			ovl_bgfill_note_data(bf);
	}
	ovl_bgfill_unlock(bf);
	ovl_mutate_end();
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

void ovl_op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi)
{
	int fd = read_fd(ovl_node_from_ino(ino), fi);
	/* Holes and data as they will be: the upper file's own show only once the copy is done. */
	off_t r = ovl_bgfill_wait(ovl_fh_bgfill(fi));

	if (r == 0)
		r = lseek(fd, off, whence);
	else
		errno = (int)-r;
	if (r < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_lseek(req, r);
}

/* ------------------------------------------------------------------ directories */

/* Checks that directory node @n is reachable in the layers (fresh, with a layer fd) without listing it. */
static int dir_check(struct ovl_node *n)
{
	int r;

	r = ovl_node_rdlock_fresh(n);
	if (r < 0)
		return r;
	if (n->upper_fd < 0 && n->lower_fd < 0)
		r = -ESTALE;
	pthread_rwlock_unlock(&n->lock);
	return r;
}

void ovl_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int r;

	ovl_node_maybe_evict();
	if (ovl_fs->no_opendir) {
		/*
		 * Zero-message opendir: the kernel takes ENOSYS as "no OPENDIR or
		 * RELEASEDIR ever again" and caches listings itself (keep_cache,
		 * cache_readdir); readers then share the node's listing (fs/dir.c).
		 */
		fuse_reply_err(req, ENOSYS);
		return;
	}
	r = dir_check(ovl_node_from_ino(ino));
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	fi->fh = 0; /* the listing hangs off the node, as without OPENDIR */
	/* The kernel may keep the listing: every change through us invalidates it, live.changed() too. */
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static ino_t parent_ino(struct ovl_node *n)
{
	ino_t ino;

	pthread_mutex_lock(&ovl_fs->table_lock);
	ino = n->parent ? n->parent->ino : n->ino;
	pthread_mutex_unlock(&ovl_fs->table_lock);
	return ino;
}

/* Adds "." or ".." (offsets 1 and 2) to the reply. Returns false when it does not fit. */
static bool add_dot(fuse_req_t req, struct ovl_node *n, char *buf, size_t size, size_t *pos, bool dotdot, bool plus)
{
	struct stat st = { .st_ino = dotdot ? parent_ino(n) : n->ino, .st_mode = S_IFDIR };
	const char *name = dotdot ? ".." : ".";
	off_t next = dotdot ? 2 : 1;
	size_t need;

	if (plus) {
		struct fuse_entry_param e = { .attr = st };

		need = fuse_add_direntry_plus(req, buf + *pos, size - *pos, name, &e, next);
	} else {
		need = fuse_add_direntry(req, buf + *pos, size - *pos, name, &st, next);
	}
	if (need > size - *pos)
		return false;
	*pos += need;
	return true;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	_cleanup_free_ char *buf = NULL;
	struct ovl_listing *l;
	size_t pos = 0, i;
	bool full = false;
	int r;

	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r = ovl_listing_get(n, off, &l);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (off < 1)
		full = !add_dot(req, n, buf, size, &pos, false, plus);
	if (!full && off < 2)
		full = !add_dot(req, n, buf, size, &pos, true, plus);
	for (i = ovl_listing_seek(l, off); !full && i < l->n; i++) {
		const struct ovl_dirent *d = &l->ents[i];
		struct stat st = { .st_ino = d->ino, .st_mode = (mode_t)DTTOIF(d->type) };
		struct fuse_entry_param e;
		struct ovl_node *c;
		struct stat cst;
		size_t need;

		if (!plus) {
			need = fuse_add_direntry(req, buf + pos, size - pos, d->name, &st, (off_t)d->off);
			full = need > size - pos;
			if (!full)
				pos += need;
			continue;
		}
		need = fuse_add_direntry_plus(req, NULL, 0, d->name, NULL, 0);
		full = need > size - pos;
		if (full)
			break;
		r = ovl_lookup_node(n, d->name, &c, &cst);
		if (r == -ENOENT || r == -ESTALE) {
			r = 0;
			continue; /* gone since the listing was made */
		}
		if (r < 0) {
			/*
			 * The name is listed, but it cannot be looked up (a metacopy without
			 * its data: EIO): list it without attributes (node id 0), so the
			 * listing goes on and only a LOOKUP of that name fails.
			 */
			e = (struct fuse_entry_param){ .attr = st };
			pos += fuse_add_direntry_plus(req, buf + pos, size - pos, d->name, &e, (off_t)d->off);
			r = 0;
			continue;
		}
		ovl_fill_entry(&e, c, &cst);
		pos += fuse_add_direntry_plus(req, buf + pos, size - pos, d->name, &e, (off_t)d->off);
		ovl_node_maybe_evict(); /* one listing can hand out hundreds of nodes */
	}
	/* Nothing left for this READDIR: the stream is at its end, the next one starts afresh. */
	ovl_listing_put(n, l, pos == 0 && r == 0 && !full);
	if (r < 0 && pos == 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_buf(req, buf, pos);
}

void ovl_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, false);
}

void ovl_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, true);
}

void ovl_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0); /* nothing per open: the listing hangs off the node */
}

void ovl_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	int fd, r = 0;

	if (!ovl_fs->opt->fsync) {
		fuse_reply_err(req, 0);
		return;
	}
	fd = ovl_node_upper_dup(n);
	if (fd >= 0) {
		int rfd = fd_reopen(fd, O_RDONLY | O_DIRECTORY);

		if (rfd >= 0) {
			r = fsync(rfd) < 0 ? errno : 0;
			close(rfd);
		}
		close(fd);
	}
	fuse_reply_err(req, r);
}

void ovl_op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct stat st;
	int r;

	r = ovl_node_getattr(ovl_node_from_ino(ino), &st);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (mask == F_OK || ctx->uid == 0) {
		fuse_reply_err(req, (ctx->uid == 0 && (mask & X_OK) && !S_ISDIR(st.st_mode) && !(st.st_mode & 0111)) ? EACCES : 0);
		return;
	}
	{
		mode_t bits = ctx->uid == st.st_uid ? (st.st_mode >> 6) : ctx->gid == st.st_gid ? (st.st_mode >> 3) : st.st_mode;

		if (((mask & R_OK) && !(bits & 4)) || ((mask & W_OK) && !(bits & 2)) || ((mask & X_OK) && !(bits & 1)))
			r = -EACCES;
	}
	if (r == 0 && (mask & W_OK) && ovl_fs->opt->read_only)
		r = -EROFS;
	fuse_reply_err(req, -r);
}

/* ------------------------------------------------------------------ session */

void ovl_op_init(void *userdata, struct fuse_conn_info *conn)
{
	const struct ovl_options *o = ovl_fs->opt;

	if (o->writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	else
		conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	conn->want |= conn->capable & (FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
				       FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_ASYNC_READ | FUSE_CAP_READDIRPLUS |
				       FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_CACHE_SYMLINKS);
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA; /* explicit invalidation (live.changed) instead */
	/* readdirplus for every batch, not only the first: a stat walk then costs no LOOKUP per entry */
	conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS); /* the kernel keeps locks locally */
	ovl_acl_init(conn);
	/* Zero-message opendir (ovl_op_opendir): no OPENDIR and RELEASEDIR round trips per directory read. */
	ovl_fs->no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
	conn->max_write = 1024 * 1024;
	conn->max_readahead = 1024 * 1024;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
	ovl_pt_init(conn);
	ovl_uring_init(conn); /* last: it may turn splice replies off */
}

void ovl_op_destroy(void *userdata)
{
}
