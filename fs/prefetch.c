// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Read-ahead for commit: while the commit stages one file after another
 * (each one read from the upper, then written to the target), a thread
 * walks ahead through the same change list and asks the kernel to start
 * reading the next upper files (POSIX_FADV_WILLNEED), so the stager finds
 * their data in the page cache instead of waiting for the disk file by
 * file. It stays at most WINDOW files and WINDOW_BYTES ahead of the
 * stager, so a large commit does not push its own data out of the cache.
 * It only gives hints: nothing it does or fails to do changes what is
 * committed. Files are found below the upper with openat_beneath() (no
 * symlink is followed) as O_PATH, opened read-only only if they are
 * regular files, and closed at once. For a metacopy the hint goes to its
 * data, the lower file the diff found, looked up below that layer's root
 * the same way.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "diff.h"
#include "fdpath.h"
#include "macro.h"
#include "prefetch.h"

#define WINDOW 512
#define WINDOW_BYTES (64LL << 20)
/* Below this many files the thread costs more than it saves. */
#define MIN_FILES 64

struct ovl_prefetch {
	pthread_t tid;
	const struct ovl_layers *l;
	const struct ovl_changes *c;
	atomic_size_t done;  /* changes the stager has finished */
	atomic_bool stop;
};

static bool wanted(const struct ovl_change *e)
{
	return e->new_type == OVL_FT_FILE && e->content && e->new.size > 0 && (!e->metacopy || e->data_path);
}

/* An O_PATH fd of the file holding @e's data: below the upper, or a metacopy's below its lower layer. */
static int data_path_fd(const struct ovl_layers *l, const struct ovl_change *e)
{
	if (e->metacopy)
		return openat_beneath(l->lower_fds[e->data_layer], e->data_path, O_PATH, 0);
	return openat_beneath(l->upper_fd, e->path, O_PATH, 0);
}

static void *prefetch_main(void *arg)
{
	struct ovl_prefetch *p = arg;
	const struct ovl_changes *c = p->c;
	_cleanup_free_ bool *fetched = calloc(c->n, sizeof(bool));
	long long ahead_bytes = 0;
	size_t bytes_from = 0; /* ahead_bytes: the files we read ahead in [bytes_from, i) */

	if (!fetched)
		return NULL;
	for (size_t i = 0; i < c->n && !atomic_load(&p->stop); i++) {
		const struct ovl_change *e = &c->v[i];
		_cleanup_close_ int pfd = -1, fd = -1;
		struct stat st;

		if (!wanted(e))
			continue;
		for (;;) {
			size_t done = atomic_load(&p->done);

			/* what the stager is past no longer counts against the window */
			for (; bytes_from < done && bytes_from < i; bytes_from++)
				if (fetched[bytes_from])
					ahead_bytes -= c->v[bytes_from].new.size;
			if (atomic_load(&p->stop))
				return NULL;
			if (i < done + WINDOW && (ahead_bytes < WINDOW_BYTES || bytes_from == i))
				break;
			nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		}
		if (i < atomic_load(&p->done))
			continue; /* the stager got there first */
		/* O_PATH first: only a regular file is ever opened for reading (no device or FIFO open). */
		pfd = data_path_fd(p->l, e);
		if (pfd < 0)
			continue;
		if (fstat(pfd, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		fd = fd_reopen(pfd, O_RDONLY);
		if (fd < 0)
			continue;
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
		fetched[i] = true;
		ahead_bytes += e->new.size;
	}
	return NULL;
}

struct ovl_prefetch *ovl_prefetch_start(const struct ovl_layers *l, const struct ovl_changes *c)
{
	struct ovl_prefetch *p;
	size_t files = 0;

	for (size_t i = 0; i < c->n && files < MIN_FILES; i++)
		files += wanted(&c->v[i]);
	if (files < MIN_FILES)
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->l = l;
	p->c = c;
	if (pthread_create(&p->tid, NULL, prefetch_main, p) != 0) {
		free(p);
		return NULL;
	}
	return p;
}

void ovl_prefetch_progress(struct ovl_prefetch *p, size_t done)
{
	if (p)
		atomic_store(&p->done, done);
}

void ovl_prefetch_stop(struct ovl_prefetch *p)
{
	if (!p)
		return;
	atomic_store(&p->stop, true);
	pthread_join(p->tid, NULL);
	free(p);
}
