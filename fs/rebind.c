// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Open handles across a commit or discard on the live mount
 * (ovl_fh_rebind, fs/ops.h). The commit copies an upper file's data into
 * the workspace and removes the upper entry; a discard removes it. A
 * process that keeps the file open must go on reading and writing the
 * file the view shows, not the removed object, whose writes no diff would
 * ever see. changed() bumps the generation of the nodes it touched, and
 * every write-like request (write, truncate, fallocate, copy_file_range)
 * and every read that reaches the daemon checks its handle's generation
 * first: one atomic compare when nothing happened.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bgfill.h"
#include "fdpath.h"
#include "macro.h"
#include "ops.h"
#include "ovl.h"

enum fh_fate {
	FH_KEEP,   /* the handle's object is still the view's file */
	FH_REBIND, /* the view's file is what a commit or discard made of it: move the handle there */
	FH_ORPHAN, /* the view's file is another one: the handle keeps its object, as on an unlinked file */
};

/* Whether @fd (an O_PATH layer fd, or -1) is the object @st describes. */
static bool same_object(int fd, const struct stat *st)
{
	struct stat t;

	return fd >= 0 && fstatat(fd, "", &t, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 && t.st_dev == st->st_dev &&
	       t.st_ino == st->st_ino;
}

/*
 * What the view's file at @n (fresh, read-locked) is to the object @fd
 * was opened on (an upper file a commit or discard removed, or not):
 * that object still; the file it was a copy of (a discard brought it
 * back; its origin record names it); the workspace file a commit copied
 * it into (same size and mtime: nothing wrote through the handle since,
 * as it rebinds first); or another file (a new one discarded, the name
 * holds a lower file it never was).
 */
static enum fh_fate fh_fate(struct ovl_node *n, int fd)
{
	struct ovl_origin mine, theirs;
	struct stat ust, t;

	if (fstat(fd, &ust) < 0)
		return FH_ORPHAN;
	/* An invalidation that did not touch it (for a handle reading below: the data of a metacopy too) */
	if (same_object(n->upper_fd, &ust) || same_object(n->lower_fd, &ust))
		return FH_KEEP;
	if (n->upper_fd >= 0) {
		/* Another handle rebound first: the lower object of the new copy, as its record says. */
		if (ovl_origin_get(n->upper_fd, n->type, &theirs) < 0 || theirs.is_new)
			return FH_ORPHAN;
	} else if (n->lower_fd >= 0 && fstatat(n->lower_fd, "", &t, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0) {
		theirs = (struct ovl_origin){ .dev = t.st_dev, .ino = t.st_ino, .size = t.st_size, .mtime = t.st_mtim };
	} else {
		return FH_ORPHAN;
	}
	if (ovl_origin_get(fd, ust.st_mode, &mine) == 0 && !mine.is_new && mine.dev == theirs.dev && mine.ino == theirs.ino)
		return FH_REBIND;
	if (ust.st_size == theirs.size && ust.st_mtim.tv_sec == theirs.mtime.tv_sec &&
	    ust.st_mtim.tv_nsec == theirs.mtime.tv_nsec)
		return FH_REBIND;
	return FH_ORPHAN;
}

/*
 * A commit or discard on the live mount moves or drops upper objects under
 * open files (the commit copies the data into the workspace and removes the
 * upper entry; a discard removes it), and changed() bumps the gen of the
 * nodes it touched. A handle must then read and write where the view shows
 * the file, not the removed object: for a writable one the file is copied
 * up again (from the workspace after a commit, from below after a discard)
 * and the handle moves onto the new upper object behind the same fd
 * number, as read_fd() does for a copy-up; a read-only one moves onto the
 * view's file as it is (below, until a copy-up moves it up). The next diff
 * shows the writes, and a reader sees what other handles wrote since. When
 * the view shows another file under the name, or none (a new file
 * discarded), the handle keeps its object, as one on an unlinked file does
 * (fh_fate()). Rare: a global lock serialises rebinds.
 */
int ovl_fh_rebind(struct ovl_node *n, struct fuse_file_info *fi)
{
	static pthread_mutex_t rebind_lock = PTHREAD_MUTEX_INITIALIZER;
	struct ovl_fh *fh = (struct ovl_fh *)(uintptr_t)fi->fh;
	enum fh_fate fate = FH_ORPHAN;
	bool write = fh->wflags >= 0, lower = false;
	int r = 0, nfd = -1;
	unsigned gen;

	if (_likely_(!ovl_fh_is_stale(n, fi)))
		return 0;
	pthread_mutex_lock(&rebind_lock);
	gen = atomic_load(&n->gen);
	if (atomic_load(&fh->gen) == gen)
		goto out;
	r = ovl_node_rdlock_fresh(n);
	if (r >= 0) {
		fate = fh_fate(n, fh->fd);
		pthread_rwlock_unlock(&n->lock);
	}
	if (r >= 0 && fate == FH_REBIND && write)
		r = ovl_copy_up_size(n, -1);
	if (r >= 0 && fate == FH_REBIND && (r = ovl_node_rdlock_fresh(n)) >= 0) {
		if (n->upper_fd >= 0 && !n->metacopy) {
			r = fd_reopen(n->upper_fd, write ? fh->wflags : O_RDONLY);
		} else if (!write && n->lower_fd >= 0) {
			r = fd_reopen(n->lower_fd, O_RDONLY);
			lower = true;
		} else {
			r = -ESTALE;
		}
		pthread_rwlock_unlock(&n->lock);
	}
	nfd = fate == FH_REBIND ? r : -1;
	if (nfd >= 0) {
		/* This handle's fill (fh->bf) is of the old object: let the new one's copy finish first. */
		struct ovl_bgfill *bf = ovl_bgfill_get(nfd);

		r = ovl_bgfill_wait(bf);
		ovl_bgfill_put(bf);
		if (r >= 0 && dup3(nfd, fh->fd, O_CLOEXEC) < 0)
			r = -errno;
		if (r >= 0)
			fh->lower = lower; /* a read-only handle reading below moves up at the next copy-up (read_fd()) */
		close(nfd);
	} else if (r == -ENOENT || r == -ESTALE) {
		r = 0; /* out of the view: like a handle on an unlinked file */
	}
	if (r >= 0)
		atomic_store(&fh->gen, gen);
out:
	pthread_mutex_unlock(&rebind_lock);
	return r;
}
