/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Background data copy-up (fs/bgfill.c). The data copy-up of a big file
 * (at least bgfill= bytes, default 64 MiB) does not copy before the open
 * or truncate that asked for it returns. The file is made a metacopy as
 * for any data copy-up (fs/copyup-meta.c), registered here by its upper
 * inode, and from then on the view takes its data as the upper file's.
 * One thread copies the data below into it chunk by chunk, in order; a
 * request that reaches a chunk not copied yet (a read, a write, a
 * truncate through the view) copies that chunk first, under the file's
 * lock, then goes on. Past the fill's end (the lower size, lowered by
 * truncations) the upper file alone holds the data. When every chunk is
 * in, the file is marked and queued for the finalizer like a copy-up
 * filled at once (fs/finalize.h), and leaves the registry.
 *
 * On disk the file stays a plain kernel-format metacopy until then: a
 * daemon killed or a machine crashed during the copy leaves it one (its
 * data the lower file's; the writes made to it since the copy-up, never
 * synced, are lost). An fsync of it waits for the copy, as does every
 * control-plane read of its content, a quiesce (commit, discard) and
 * the unmount.
 *
 * Lock order: a file's lock is taken with at most a node's lock held
 * (setattr), and takes only the registry lock.
 */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

struct ovl_bgfill;

/* Starts and stops the copy thread; the stop first finishes every copy. Returns 0 or -errno. */
int ovl_bgfill_start(void);
void ovl_bgfill_stop(void);

/*
 * Before the mount, or offline (`draftfs recover`): when the state dir says
 * background fills may have been cut short (a daemon killed during one),
 * copies in the chunks each file left so lacks, as its chunk map says
 * (without a map, all of them), keeping its size and what the view wrote
 * (the page cache holds it in this boot), then makes it plain. Returns 0
 * or -errno.
 */
struct ovl_layers;
int ovl_bgfill_recover(const struct ovl_layers *l, bool fsync);

/* The state dir's flag: made before the first background fill, removed by a stop that finished them all. */
#define OVL_BGFILL_FLAG "bgfill"


/* True if a data copy-up of @size bytes goes to the background (bgfill= set, finalizer on, thread running). */
bool ovl_bgfill_wanted(off_t size);

/*
 * Registers the metacopy @ufd (writable) for a background fill from the
 * data @lfd, making @size (< 0: its size now) its size first. Both fds
 * are dup'ed. Returns 0, -EAGAIN (too many fills running: the caller
 * copies at once) or -errno.
 */
int ovl_bgfill_begin(int ufd, int lfd, off_t size);

/* True if the upper file @fd (any fd) is being filled: the view takes it as holding its data. */
bool ovl_bgfill_holds(int fd);

/* ovl_metacopy_get() as the view sees it: a file being filled holds its data (0). */
int ovl_bgfill_metacopy_get(int fd, char data_path[static PATH_MAX]);

/* The fill of the upper file @fd, with a reference (drop it with ovl_bgfill_put()), or NULL. */
struct ovl_bgfill *ovl_bgfill_get(int fd);
void ovl_bgfill_put(struct ovl_bgfill *bf);

/*
 * Held around a change to the file through the view (a write, a
 * truncate, setattr, capabilities). The copy puts the file's times, mode
 * and security.capability back after each chunk: a change tells it, with
 * the lock held, what they are now (a write or truncate: note_data; a
 * setattr: note_attr, with the times it set (UTIME_OMIT: unchanged); security.capability
 * set or removed: note_caps). @bf may be NULL.
 */
void ovl_bgfill_lock(struct ovl_bgfill *bf);
void ovl_bgfill_unlock(struct ovl_bgfill *bf);
void ovl_bgfill_note_data(struct ovl_bgfill *bf);
void ovl_bgfill_note_attr(struct ovl_bgfill *bf, const struct timespec ts[2], bool chown);
void ovl_bgfill_note_caps(struct ovl_bgfill *bf, const void *value, size_t size, bool removed);

/* Copies in the chunks of [@off, @off + @len) not copied yet; with the lock held, or not. Return 0 or -errno. */
int ovl_bgfill_ensure_locked(struct ovl_bgfill *bf, off_t off, off_t len);
int ovl_bgfill_ensure(struct ovl_bgfill *bf, off_t off, off_t len);

/* Truncates the file to @size through the writable @fd, with the lock held: the fill then ends at @size (note_data included). */
int ovl_bgfill_truncate_locked(struct ovl_bgfill *bf, int fd, off_t size);

/* Waits for the whole fill (@bf, or the one of the upper file @fd, if any). Return 0 or -errno (the copy failed). */
int ovl_bgfill_wait(struct ovl_bgfill *bf);
int ovl_bgfill_wait_fd(int fd);

/* Waits until no fill runs (quiesce). */
void ovl_bgfill_flush(void);
