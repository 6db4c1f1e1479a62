// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The finalizer (finalize.h): one thread that makes filled metacopies
 * durable and then plain files. Finalizing a file: fdatasync (the data is
 * on disk), remove trusted.overlay.metacopy (from here on the file holds
 * its data even after a power cut), the redirect, the fill marker, then
 * fsync (the removals are on disk). Every step is idempotent, so the
 * thread, an fsync of the file and the recovery walk may meet on one file.
 *
 * The queue is short (OVL_FIN_QUEUE): past it, a copy-up syncs its own
 * data as before, so a burst of copy-ups never holds more than that many
 * fds, and what is left unsynced at any time is bounded.
 *
 * The "unsynced" flag in the state dir exists while marked files may
 * exist: made before the first mark, removed by a stop that finalized
 * everything. A daemon that finds it at start was preceded by one killed
 * before it finalized; its thread then walks the upper first.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fdpath.h"
#include "finalize.h"
#include "log.h"
#include "macro.h"
#include "metacopy.h"
#include "ovl.h"

#define OVL_FIN_QUEUE 16
#define FLAG_NAME "unsynced"

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;      /* work for the thread */
	pthread_cond_t done_cond; /* an entry finished */
	int q[OVL_FIN_QUEUE];
	size_t head, n;
	uint64_t queued, done;
	dev_t busy_dev; /* the file the thread is finalizing (busy_ino 0: none) */
	ino_t busy_ino;
	int err;        /* first error since the last flush */
	bool running, stop, recover, flagged, failed;
	pthread_t thread;
	struct ovl_fs *fs;
} F = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.done_cond = PTHREAD_COND_INITIALIZER,
};

/* Finalizes @fd if it carries a fill marker (see the top). Returns 1 if it did, 0 if not, or -errno. */
static int finalize_now(int fd)
{
	char v[OVL_BOOT_ID_LEN + 1];
	struct stat st;
	ssize_t n;
	int r;

	n = fgetxattr(fd, OVL_XATTR_FILLED, v, sizeof(v));
	if (n < 0)
		return errno == ENODATA || errno == ENOTSUP || errno == ERANGE ? 0 : -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_nlink == 0)
		return 0; /* removed: nothing to keep */
	if (fgetxattr(fd, OVL_XATTR_METACOPY, NULL, 0) >= 0 && !ovl_fill_marker_is_current(v, n))
		return 0; /* a marker of another boot: the data in the file may never have reached the disk */
	r = ovl_metacopy_make_plain(fd, true);
	return r < 0 ? r : 1;
}

static void note_error(int r, const char *what)
{
	pthread_mutex_lock(&F.lock);
	if (!F.err)
		F.err = r;
	F.failed = true;
	pthread_mutex_unlock(&F.lock);
	log_error_errno(r, "cannot finalize %s: it stays a metacopy on disk until it is", what);
}

/* A recovery walk's upper regular file @name, opened if it is a marked metacopy of this boot; else -1. */
static int open_marked(int dir_fd, const char *name, const struct stat *st)
{
	if (st->st_size == 0 || ovl_metacopy_filled_at(dir_fd, name) <= 0)
		return -1;
	return openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

/* The recovery walk's visit of each upper regular file (a dir_usage_bytes_fn). */
static uint64_t recover_one(int dir_fd, const char *name, const struct stat *st)
{
	_cleanup_close_ int fd = open_marked(dir_fd, name, st);
	int r;

	if (fd < 0)
		return 0;
	/* Busy like a queued file: an fsync of it meanwhile waits for the removals to be synced. */
	pthread_mutex_lock(&F.lock);
	F.busy_dev = st->st_dev;
	F.busy_ino = st->st_ino;
	pthread_mutex_unlock(&F.lock);
	r = finalize_now(fd);
	pthread_mutex_lock(&F.lock);
	F.busy_ino = 0;
	pthread_cond_broadcast(&F.done_cond);
	pthread_mutex_unlock(&F.lock);
	if (r < 0)
		note_error(r, "a file left by an earlier daemon");
	return 0;
}

static void recover(struct ovl_fs *fs)
{
	uint64_t inodes, bytes;
	int r;

	r = dir_usage_at(fs->upper_fd, recover_one, &inodes, &bytes);
	if (r < 0)
		note_error(r, "the files left by an earlier daemon");
}

/* The offline walk (ovl_finalize_offline): single-threaded, no finalizer thread. */
static unsigned offline_done;
static int offline_err;

static uint64_t offline_one(int dir_fd, const char *name, const struct stat *st)
{
	_cleanup_close_ int fd = open_marked(dir_fd, name, st);
	int r;

	if (fd < 0)
		return 0;
	r = finalize_now(fd);
	if (r < 0 && !offline_err)
		offline_err = r;
	offline_done += r > 0;
	return 0;
}

int ovl_finalize_offline(const struct ovl_layers *l, unsigned *ret_done)
{
	uint64_t inodes, bytes;
	int r;

	*ret_done = 0;
	if (faccessat(l->state_fd, FLAG_NAME, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	offline_done = 0;
	offline_err = 0;
	r = dir_usage_at(l->upper_fd, offline_one, &inodes, &bytes);
	*ret_done = offline_done;
	if (r < 0)
		return r;
	if (offline_err < 0)
		return offline_err;
	ovl_state_flag_lower(l->state_fd, FLAG_NAME);
	return 0;
}

static void *finalize_thread(void *userdata)
{
	struct ovl_fs *fs = userdata;

	pthread_mutex_lock(&F.lock);
	for (;;) {
		struct stat st;
		int fd, r;

		if (F.recover) {
			pthread_mutex_unlock(&F.lock);
			recover(fs);
			pthread_mutex_lock(&F.lock);
			F.recover = false;
			pthread_cond_broadcast(&F.done_cond);
			continue;
		}
		if (F.n > 0) {
			fd = F.q[F.head];
			F.head = (F.head + 1) % OVL_FIN_QUEUE;
			F.n--;
			if (fstat(fd, &st) == 0) {
				F.busy_dev = st.st_dev;
				F.busy_ino = st.st_ino;
			}
			pthread_mutex_unlock(&F.lock);
			r = finalize_now(fd);
			close(fd);
			ovl_fds_account(-1);
			if (r < 0)
				note_error(r, "a copied-up file");
			pthread_mutex_lock(&F.lock);
			F.busy_ino = 0;
			F.done++;
			pthread_cond_broadcast(&F.done_cond);
			continue;
		}
		if (F.stop)
			break;
		pthread_cond_wait(&F.cond, &F.lock);
	}
	pthread_mutex_unlock(&F.lock);
	return NULL;
}

int ovl_finalize_start(struct ovl_fs *fs)
{
	int r;

	F.fs = fs;
	F.stop = F.failed = false;
	F.flagged = F.recover = faccessat(fs->state_fd, FLAG_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	r = -pthread_create(&F.thread, NULL, finalize_thread, fs);
	if (r == 0)
		F.running = true;
	return r;
}

void ovl_finalize_stop(struct ovl_fs *fs)
{
	if (!F.running)
		return;
	pthread_mutex_lock(&F.lock);
	F.stop = true;
	pthread_cond_signal(&F.cond);
	pthread_mutex_unlock(&F.lock);
	pthread_join(F.thread, NULL); /* after it has emptied the queue */
	F.running = false;
	if (F.flagged && !F.failed)
		ovl_state_flag_lower(fs->state_fd, FLAG_NAME);
}

int ovl_state_flag_raise(int state_fd, const char *name)
{
	int fd = openat(state_fd, name, O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

void ovl_state_flag_lower(int state_fd, const char *name)
{
	if (unlinkat(state_fd, name, 0) < 0 && errno != ENOENT)
		log_warning_errno(-errno, "cannot remove the '%s' flag from the state dir", name);
}

bool ovl_finalize_enabled(void)
{
	const struct ovl_options *o = ovl_fs->opt;

	return o->fsync && o->metacopy && F.running && ovl_boot_id();
}

/* Makes the flag before the first mark of this daemon. Returns 0 or -errno. */
static int raise_flag(void)
{
	bool flagged;
	int r;

	pthread_mutex_lock(&F.lock);
	flagged = F.flagged;
	pthread_mutex_unlock(&F.lock);
	if (flagged)
		return 0;
	r = ovl_state_flag_raise(F.fs->state_fd, FLAG_NAME);
	if (r < 0)
		return r;
	pthread_mutex_lock(&F.lock);
	F.flagged = true;
	pthread_mutex_unlock(&F.lock);
	return 0;
}

int ovl_finalize_defer(int fd)
{
	const char *id = ovl_boot_id();
	int r, dup;

	if (!id || !F.running)
		return -EOPNOTSUPP;
	pthread_mutex_lock(&F.lock);
	r = F.n >= OVL_FIN_QUEUE || F.stop ? -EAGAIN : 0;
	pthread_mutex_unlock(&F.lock);
	if (r < 0)
		return r;
	r = raise_flag();
	if (r < 0)
		return r;
	if (fsetxattr(fd, OVL_XATTR_FILLED, id, OVL_BOOT_ID_LEN, 0) < 0)
		return -errno;
	dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup < 0)
		return -errno; /* marked: the caller's finalize removes it */
	ovl_fds_account(1);
	pthread_mutex_lock(&F.lock);
	if (F.n >= OVL_FIN_QUEUE || F.stop) {
		pthread_mutex_unlock(&F.lock);
		close(dup);
		ovl_fds_account(-1);
		return -EAGAIN;
	}
	F.q[(F.head + F.n) % OVL_FIN_QUEUE] = dup;
	F.n++;
	F.queued++;
	pthread_cond_signal(&F.cond);
	pthread_mutex_unlock(&F.lock);
	return 0;
}

int ovl_finalize_fd(int fd)
{
	struct stat st;
	int r;

	r = finalize_now(fd);
	if (r != 0 || fstat(fd, &st) < 0)
		return r;
	/* No marker: the thread may have removed it and not yet synced the removal. */
	pthread_mutex_lock(&F.lock);
	while (F.busy_ino && F.busy_ino == st.st_ino && F.busy_dev == st.st_dev)
		pthread_cond_wait(&F.done_cond, &F.lock);
	pthread_mutex_unlock(&F.lock);
	return 0;
}

int ovl_finalize_flush(void)
{
	uint64_t target;
	int r;

	pthread_mutex_lock(&F.lock);
	target = F.queued;
	while (F.running && (F.done < target || F.recover))
		pthread_cond_wait(&F.done_cond, &F.lock);
	r = F.err;
	F.err = 0;
	pthread_mutex_unlock(&F.lock);
	return r;
}
