// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Background data copy-up (bgfill.h): the registry of files being filled,
 * keyed by upper inode, and the thread that fills them. A file's chunk
 * map, fill end and error are under its own lock; the registry list,
 * the reference counts and each file's "done" under the registry lock.
 * The registry holds one reference to each file while it is listed.
 * A file's lock may be held when the registry lock is taken, never the
 * other way round (a file's error is atomic for that reason).
 *
 * The thread copies a chunk without the file's lock (marked busy, so a
 * request that reaches that chunk, or truncates, waits for it): requests
 * elsewhere in the file, an append past the fill's end, do not wait for
 * the disk. A chunk a request reaches is copied by that request, under
 * the lock. After each copy the file's times, mode and capabilities are
 * put back to what the view last made them (@shown: read at the start,
 * and again after each change through the view, under the lock).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "bgfill.h"
#include "finalize.h"
#include "log.h"
#include "macro.h"
#include "metacopy.h"
#include "ovl.h"

/* The smallest chunk; a file of more than MAX_CHUNKS of them gets bigger ones. */
#define MIN_CHUNK ((off_t)4 << 20)
#define MAX_CHUNKS 16384
/* Fills running at once (two fds each); past it a copy-up copies its data at once. */
#define MAX_FILLS 64
#define NO_CHUNK SIZE_MAX

struct ovl_bgfill {
	struct ovl_bgfill *next; /* registry lock */
	unsigned refs;           /* registry lock */
	bool done;               /* registry lock: filled and left the registry */
	dev_t dev;
	ino_t ino;
	int ufd, lfd;            /* the upper file (writable) and its data below */
	pthread_mutex_t lock;
	off_t end;               /* lock: the data below ends here for this file */
	off_t chunk;             /* bytes per chunk, a power of two */
	size_t nchunks;          /* covering the first fill end */
	bool sparse;             /* the data below has holes: they are kept */
	size_t left;             /* lock: chunks below @end not copied */
	size_t scan;             /* lock: where the thread looks for the next one */
	size_t busy;             /* lock: the chunk the thread is copying, or NO_CHUNK */
	pthread_cond_t idle;     /* lock: @busy was cleared */
	struct ovl_keep shown;   /* lock: times, mode and capabilities as the view made them */
	atomic_int err;          /* set under lock: the copy failed; chunks not copied cannot be read */
	uint8_t map[];           /* lock: a bit per chunk, set once copied */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct ovl_bgfill *head;
	unsigned n;
	atomic_uint listed; /* n, read without the lock for the fast path */
	atomic_bool flagged, failed; /* the state dir's flag is up; a fill failed (the flag stays) */
	bool running, stop;
	unsigned pace_ms; /* DRAFTFS_BGFILL_PACE_MS: the thread sleeps this long after each chunk (tests) */
	pthread_t thread;
} G = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
};

static bool chunk_done(const struct ovl_bgfill *bf, size_t c)
{
	return bf->map[c / 8] & (1u << (c % 8));
}

static void chunk_mark(struct ovl_bgfill *bf, size_t c)
{
	bf->map[c / 8] |= (uint8_t)(1u << (c % 8));
	bf->left--;
}

/*
 * Writes the chunk map and the fill end beside the file (OVL_XATTR_BGFILL_MAP),
 * so that a daemon killed now leaves the next one a file whose chunks in
 * need no copy: what the view wrote there stays. Lock held (or no other
 * reference yet). Always the same size: a rewrite needs no new room.
 */
static int map_store(struct ovl_bgfill *bf)
{
	size_t len = (bf->nchunks + 7) / 8;
	_cleanup_free_ uint8_t *v = malloc(sizeof(struct ovl_bgfill_map_hdr) + len);
	struct ovl_bgfill_map_hdr h = { .end = htole64((uint64_t)bf->end), .chunk = htole64((uint64_t)bf->chunk) };

	if (!v)
		return -ENOMEM;
	memcpy(v, &h, sizeof(h));
	memcpy(v + sizeof(h), bf->map, len);
	return fsetxattr(bf->ufd, OVL_XATTR_BGFILL_MAP, v, sizeof(h) + len, 0) < 0 ? -errno : 0;
}

/* Copies chunk @c from below, up to @end (the fill end when the copy began). */
static int chunk_copy(struct ovl_bgfill *bf, size_t c, off_t end)
{
	off_t from = (off_t)c * bf->chunk;

	return ovl_copy_range(bf->lfd, bf->ufd, from, MIN(from + bf->chunk, end), bf->sparse);
}

/*
 * After a copy: the error, or the chunk marked in (on disk too, before the
 * lock lets a request write there); the file's times, mode and
 * capabilities put back. Lock held.
 */
static int chunk_done_copy(struct ovl_bgfill *bf, size_t c, int r)
{
	int q;

	if (r >= 0) {
		chunk_mark(bf, c);
		r = map_store(bf);
	}
	q = ovl_keep_apply(bf->ufd, &bf->shown);
	if (r >= 0)
		r = q;
	if (r < 0)
		atomic_store(&bf->err, r);
	return r;
}

static void wait_idle(struct ovl_bgfill *bf)
{
	while (bf->busy != NO_CHUNK)
		pthread_cond_wait(&bf->idle, &bf->lock);
}

/* Copies chunk @c in, under bf->lock, if it is below the fill end and not in yet. */
static int fill_chunk(struct ovl_bgfill *bf, size_t c)
{
	int r;

	while (bf->busy == c)
		pthread_cond_wait(&bf->idle, &bf->lock);
	if (c >= bf->nchunks || (off_t)c * bf->chunk >= bf->end || chunk_done(bf, c))
		return 0;
	r = atomic_load(&bf->err);
	if (r < 0)
		return r;
	return chunk_done_copy(bf, c, chunk_copy(bf, c, bf->end));
}

static struct ovl_bgfill *find(dev_t dev, ino_t ino)
{
	for (struct ovl_bgfill *bf = G.head; bf; bf = bf->next)
		if (bf->ino == ino && bf->dev == dev)
			return bf;
	return NULL;
}

static void put_locked(struct ovl_bgfill *bf)
{
	if (--bf->refs > 0)
		return;
	close(bf->ufd);
	close(bf->lfd);
	ovl_fds_account(-2);
	free(bf->shown.caps);
	pthread_cond_destroy(&bf->idle);
	pthread_mutex_destroy(&bf->lock);
	free(bf);
}

void ovl_bgfill_put(struct ovl_bgfill *bf)
{
	if (!bf)
		return;
	pthread_mutex_lock(&G.lock);
	put_locked(bf);
	pthread_mutex_unlock(&G.lock);
}

/* Takes @bf out of the registry (registry lock held). */
static void unlist(struct ovl_bgfill *bf)
{
	for (struct ovl_bgfill **p = &G.head; *p; p = &(*p)->next)
		if (*p == bf) {
			*p = bf->next;
			G.n--;
			atomic_store(&G.listed, G.n);
			bf->done = true;
			pthread_cond_broadcast(&G.done);
			put_locked(bf);
			return;
		}
}

/* Every chunk is in: mark the file and hand it to the finalizer (or finalize it now), then unlist it. */
static void finish(struct ovl_bgfill *bf)
{
	int r;

	r = ovl_finalize_defer(bf->ufd);
	if (r < 0)
		r = ovl_metacopy_make_plain(bf->ufd, ovl_fs->opt->fsync);
	if (r < 0) {
		/* Its data is all in: the view is right, only the file on disk stays a metacopy. */
		log_error_errno(r, "cannot finalize a file copied up in the background: it stays a metacopy on disk");
	}
	pthread_mutex_lock(&G.lock);
	unlist(bf);
	pthread_mutex_unlock(&G.lock);
}

/* The first listed fill that has not failed, with a reference, or NULL (registry lock held). */
static struct ovl_bgfill *next_work(void)
{
	for (struct ovl_bgfill *bf = G.head; bf; bf = bf->next)
		if (!atomic_load(&bf->err)) {
			bf->refs++;
			return bf;
		}
	return NULL;
}

/* True if nothing but the registry and the thread refer to the file and it has no name left: nobody can read it. */
static bool orphaned(struct ovl_bgfill *bf)
{
	struct stat st;
	bool r;

	if (fstat(bf->ufd, &st) < 0 || st.st_nlink > 0)
		return false;
	pthread_mutex_lock(&G.lock);
	r = bf->refs == 2;
	if (r)
		unlist(bf);
	pthread_mutex_unlock(&G.lock);
	return r;
}

static void run_one(struct ovl_bgfill *bf)
{
	for (;;) {
		size_t c;
		off_t end;
		int r;

		pthread_mutex_lock(&bf->lock);
		while (bf->scan < bf->nchunks && ((off_t)bf->scan * bf->chunk >= bf->end || chunk_done(bf, bf->scan)))
			bf->scan++;
		if (bf->left == 0 || bf->scan >= bf->nchunks) {
			pthread_mutex_unlock(&bf->lock);
			finish(bf);
			return;
		}
		c = bf->busy = bf->scan;
		end = bf->end; /* a truncate waits for the copy: the end stays */
		pthread_mutex_unlock(&bf->lock);
		r = chunk_copy(bf, c, end);
		pthread_mutex_lock(&bf->lock);
		r = chunk_done_copy(bf, c, r);
		bf->busy = NO_CHUNK;
		pthread_cond_broadcast(&bf->idle);
		pthread_mutex_unlock(&bf->lock);
		if (r < 0) {
			log_error_errno(r, "cannot copy a file up in the background: its data not copied yet cannot be "
			                   "read, and it stays a metacopy on disk");
			atomic_store(&G.failed, true);
			pthread_mutex_lock(&G.lock);
			pthread_cond_broadcast(&G.done); /* waiters for it see the error */
			pthread_mutex_unlock(&G.lock);
			return;
		}
		if (orphaned(bf))
			return;
		if (G.pace_ms)
			(void)nanosleep(&(struct timespec){ .tv_sec = G.pace_ms / 1000,
			                                    .tv_nsec = (long)(G.pace_ms % 1000) * 1000000L }, NULL);
	}
}

static void *fill_thread(void *userdata)
{
	(void)userdata;
	pthread_mutex_lock(&G.lock);
	for (;;) {
		struct ovl_bgfill *bf = next_work();

		if (bf) {
			pthread_mutex_unlock(&G.lock);
			run_one(bf);
			pthread_mutex_lock(&G.lock);
			put_locked(bf);
			continue;
		}
		if (G.stop)
			break;
		pthread_cond_wait(&G.work, &G.lock);
	}
	pthread_mutex_unlock(&G.lock);
	return NULL;
}

int ovl_bgfill_start(void)
{
	const char *pace = getenv("DRAFTFS_BGFILL_PACE_MS");
	int r;

	G.pace_ms = pace ? (unsigned)strtoul(pace, NULL, 10) : 0;
	G.stop = false;
	r = -pthread_create(&G.thread, NULL, fill_thread, NULL);
	if (r == 0)
		G.running = true;
	return r;
}

void ovl_bgfill_stop(void)
{
	if (!G.running)
		return;
	pthread_mutex_lock(&G.lock);
	G.stop = true;
	pthread_cond_signal(&G.work);
	pthread_mutex_unlock(&G.lock);
	pthread_join(G.thread, NULL); /* after it has filled every file it could */
	G.running = false;
	pthread_mutex_lock(&G.lock);
	while (G.head)
		unlist(G.head); /* the failed ones: metacopies on disk */
	pthread_mutex_unlock(&G.lock);
	/* Every fill finished (and marked for the finalizer): nothing for the next daemon to recover. */
	if (atomic_load(&G.flagged) && !atomic_load(&G.failed))
		ovl_state_flag_lower(ovl_fs->state_fd, OVL_BGFILL_FLAG);
}

static int raise_flag(void)
{
	int r;

	if (atomic_load(&G.flagged))
		return 0;
	r = ovl_state_flag_raise(ovl_fs->state_fd, OVL_BGFILL_FLAG);
	if (r == 0)
		atomic_store(&G.flagged, true);
	return r;
}

bool ovl_bgfill_wanted(off_t size)
{
	uint64_t min = ovl_fs->opt->bgfill;

	return min && size > 0 && (uint64_t)size >= min && G.running && !G.stop && ovl_finalize_enabled();
}

int ovl_bgfill_begin(int ufd, int lfd, off_t size)
{
	struct ovl_bgfill *bf;
	struct stat ust, lst;
	off_t end, chunk = MIN_CHUNK;
	size_t n;
	int u, l, r;

	if (fstat(ufd, &ust) < 0 || fstat(lfd, &lst) < 0)
		return -errno;
	if (size >= 0 && size != ust.st_size) {
		struct ovl_keep k;
		int q;

		r = ovl_keep_save(ufd, &k);
		if (r >= 0 && ftruncate(ufd, size) < 0)
			r = -errno;
		q = ovl_keep_restore(ufd, &k);
		if (r < 0 || q < 0)
			return r < 0 ? r : q;
	}
	end = MIN(size >= 0 ? size : ust.st_size, lst.st_size);
	while ((end + chunk - 1) / chunk > MAX_CHUNKS)
		chunk *= 2;
	n = (size_t)((end + chunk - 1) / chunk);
	bf = calloc(1, sizeof(*bf) + (n + 7) / 8);
	if (!bf)
		return -ENOMEM;
	u = fcntl(ufd, F_DUPFD_CLOEXEC, 3);
	l = u < 0 ? -1 : fcntl(lfd, F_DUPFD_CLOEXEC, 3);
	if (l < 0) {
		r = -errno;
		safe_close(u);
		free(bf);
		return r;
	}
	ovl_fds_account(2);
	*bf = (struct ovl_bgfill){ .refs = 1, .dev = ust.st_dev, .ino = ust.st_ino, .ufd = u, .lfd = l, .end = end,
	                           .chunk = chunk, .nchunks = n, .left = n,
	                           /* holes kept where the file has no blocks of its own to overwrite (fs/copyup-meta.c) */
	                           .sparse = (off_t)lst.st_blocks * 512 < lst.st_size && ust.st_blocks * 512 <= 8192,
	                           .busy = NO_CHUNK };
	pthread_mutex_init(&bf->lock, NULL);
	pthread_cond_init(&bf->idle, NULL);
	/* Marked before anything is written to it: a daemon killed meanwhile leaves a file the next one recovers. */
	r = raise_flag();
	if (r >= 0) {
		r = map_store(bf);
		if (r == -ENOSPC || r == -E2BIG || r == -ERANGE)
			r = -EAGAIN; /* no room beside the file for a map this big: copy at once */
	}
	if (r >= 0 && fsetxattr(u, OVL_XATTR_BGFILL, ovl_boot_id(), OVL_BOOT_ID_LEN, 0) < 0)
		r = -errno;
	if (r >= 0)
		r = ovl_keep_save(u, &bf->shown);
	if (r < 0) {
		put_locked(bf); /* no other reference: needs no lock */
		return r;
	}

	pthread_mutex_lock(&G.lock);
	if (G.n >= MAX_FILLS || G.stop || find(bf->dev, bf->ino)) {
		pthread_mutex_unlock(&G.lock);
		put_locked(bf); /* no other reference: needs no lock */
		return -EAGAIN;
	}
	for (struct ovl_bgfill **p = &G.head;; p = &(*p)->next)
		if (!*p) {
			*p = bf;
			break;
		}
	G.n++;
	atomic_store(&G.listed, G.n);
	pthread_cond_signal(&G.work);
	pthread_mutex_unlock(&G.lock);
	return 0;
}

struct ovl_bgfill *ovl_bgfill_get(int fd)
{
	struct ovl_bgfill *bf;
	struct stat st;

	if (atomic_load(&G.listed) == 0 || fstat(fd, &st) < 0)
		return NULL;
	pthread_mutex_lock(&G.lock);
	bf = find(st.st_dev, st.st_ino);
	if (bf)
		bf->refs++;
	pthread_mutex_unlock(&G.lock);
	return bf;
}

bool ovl_bgfill_holds(int fd)
{
	struct ovl_bgfill *bf = ovl_bgfill_get(fd);

	ovl_bgfill_put(bf);
	return bf != NULL;
}

int ovl_bgfill_metacopy_get(int fd, char data_path[static PATH_MAX])
{
	int r = ovl_metacopy_get(fd, data_path);

	return r > 0 && ovl_bgfill_holds(fd) ? 0 : r;
}

void ovl_bgfill_lock(struct ovl_bgfill *bf)
{
	if (bf)
		pthread_mutex_lock(&bf->lock);
}

void ovl_bgfill_unlock(struct ovl_bgfill *bf)
{
	if (bf)
		pthread_mutex_unlock(&bf->lock);
}

/*
 * What a change through the view made of the file, for the copy to put
 * back. Read from the file where a concurrent copy cannot have changed it
 * (the mode: we copy as root, with CAP_FSETID); taken from the request
 * where it could (explicit times, capabilities).
 */
static void shown_drop_caps(struct ovl_bgfill *bf)
{
	free(bf->shown.caps);
	bf->shown.caps = NULL;
	bf->shown.ncaps = 0;
}

void ovl_bgfill_note_data(struct ovl_bgfill *bf)
{
	struct stat st;

	if (!bf || fstat(bf->ufd, &st) < 0)
		return;
	/* A write, a truncate: the times are now's, security.capability is gone (the kernel drops it). */
	bf->shown.st.st_mode = st.st_mode;
	bf->shown.st.st_mtim = st.st_mtim;
	shown_drop_caps(bf);
}

void ovl_bgfill_note_attr(struct ovl_bgfill *bf, const struct timespec ts[2], bool chown)
{
	struct timespec *to[2];
	struct stat st;

	if (!bf || fstat(bf->ufd, &st) < 0)
		return;
	to[0] = &bf->shown.st.st_atim;
	to[1] = &bf->shown.st.st_mtim;
	bf->shown.st.st_mode = st.st_mode;
	for (int i = 0; i < 2; i++) {
		if (ts[i].tv_nsec == UTIME_NOW)
			*to[i] = i ? st.st_mtim : st.st_atim;
		else if (ts[i].tv_nsec != UTIME_OMIT)
			*to[i] = ts[i];
	}
	if (chown)
		shown_drop_caps(bf); /* a chown drops security.capability */
}

void ovl_bgfill_note_caps(struct ovl_bgfill *bf, const void *value, size_t size, bool removed)
{
	void *v = NULL;

	if (!bf)
		return;
	if (!removed && (!size || !(v = malloc(size))))
		return;
	shown_drop_caps(bf);
	if (v) {
		memcpy(v, value, size);
		bf->shown.caps = v;
		bf->shown.ncaps = (ssize_t)size;
	}
}

int ovl_bgfill_ensure_locked(struct ovl_bgfill *bf, off_t off, off_t len)
{
	size_t first, last;

	if (!bf || bf->left == 0 || off < 0 || len <= 0 || off >= bf->end)
		return 0;
	first = (size_t)(off / bf->chunk);
	last = (size_t)((MIN(off + len, bf->end) - 1) / bf->chunk);
	for (size_t c = first; c <= last; c++) {
		int r = fill_chunk(bf, c);

		if (r < 0)
			return r;
	}
	return 0;
}

int ovl_bgfill_ensure(struct ovl_bgfill *bf, off_t off, off_t len)
{
	int r;

	if (!bf)
		return 0;
	pthread_mutex_lock(&bf->lock);
	r = ovl_bgfill_ensure_locked(bf, off, len);
	pthread_mutex_unlock(&bf->lock);
	return r;
}

int ovl_bgfill_truncate_locked(struct ovl_bgfill *bf, int fd, off_t size)
{
	wait_idle(bf); /* a copy running past @size would bring the data back */
	if (size < bf->end) {
		/* The part of the chunk @size cuts that stays must hold its data. */
		int r = size % bf->chunk ? fill_chunk(bf, (size_t)(size / bf->chunk)) : 0;

		if (r < 0)
			return r;
		bf->end = size;
		bf->left = 0;
		for (size_t c = 0; c < bf->nchunks && (off_t)c * bf->chunk < size; c++)
			bf->left += !chunk_done(bf, c);
		/* Before the truncate: a daemon killed after it must not bring back data from below past @size. */
		r = map_store(bf);
		if (r < 0) {
			atomic_store(&bf->err, r);
			return r;
		}
	}
	if (ftruncate(fd, size) < 0)
		return -errno;
	ovl_bgfill_note_data(bf);
	if (bf->left == 0) {
		pthread_mutex_lock(&G.lock);
		pthread_cond_signal(&G.work); /* nothing left to copy: the thread finishes it */
		pthread_mutex_unlock(&G.lock);
	}
	return 0;
}

int ovl_bgfill_wait(struct ovl_bgfill *bf)
{
	int err = 0;

	if (!bf)
		return 0;
	pthread_mutex_lock(&G.lock);
	for (;;) {
		if (bf->done)
			break;
		err = atomic_load(&bf->err);
		if (err)
			break;
		pthread_cond_wait(&G.done, &G.lock);
	}
	pthread_mutex_unlock(&G.lock);
	return err;
}

int ovl_bgfill_wait_fd(int fd)
{
	struct ovl_bgfill *bf = ovl_bgfill_get(fd);
	int r = ovl_bgfill_wait(bf);

	ovl_bgfill_put(bf);
	return r;
}

void ovl_bgfill_flush(void)
{
	pthread_mutex_lock(&G.lock);
	for (;;) {
		struct ovl_bgfill *bf = next_work();

		if (!bf)
			break;
		put_locked(bf);
		pthread_cond_wait(&G.done, &G.lock);
	}
	pthread_mutex_unlock(&G.lock);
}
