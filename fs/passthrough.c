// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * FUSE passthrough (Linux >= 6.9): a regular file is opened with a backing
 * file, and the kernel then reads, writes and maps that file itself, with no
 * round trip to the daemon per read or write. libfuse 3.14 predates the
 * feature, so this file negotiates it: the INIT reply gets FUSE_PASSTHROUGH
 * and max_stack_depth added by the session's I/O hook (devio.c), backing files are
 * registered with the FUSE_DEV_IOC_BACKING_OPEN ioctl, and open replies
 * carrying the backing id are built here.
 *
 * Only reads pass through. Writes always come to the daemon: the control
 * plane's quiesce (diff, commit, discard on the live mount) holds writers
 * between requests, which it could not do to the kernel writing a backing
 * file itself, and a byte quota counts every write.
 *
 * The kernel's rules shape the rest. An inode is in one io mode at a time:
 * "cached" (the FUSE page cache, reads and writes sent to us) or
 * "uncached" (passthrough); an open in the other mode fails with EIO. All
 * passthrough opens of one inode share one backing file object (a second,
 * different one fails with EBUSY), and each open gets its own kernel file on
 * that backing file's path, opened with the caller's flags and our
 * credentials. Hence, per node, while any file is open (struct ovl_open):
 *   - the first open picks the mode: passthrough for a read-only open,
 *     cached for a writable one; later opens follow it;
 *   - in passthrough mode a writable open is passthrough with direct I/O:
 *     its reads and writes come to us, only mmap uses the backing file;
 *   - the backing object is the top object at the first open. When the
 *     node's top object changes under open files (a copy-up of a lower file
 *     open read-only, or a discard), later read-only opens are passthrough
 *     with direct I/O too (they read the new object through us). A later
 *     writable open must never get a kernel file on a lower backing path,
 *     so the node is split: it leaves both indexes, the open fails with
 *     ESTALE, and the kernel's path walk retries once with LOOKUP_REVAL,
 *     which looks the name up again and gets a fresh node (docs/fs.md,
 *     Passthrough). The old node then refuses every open, so no name
 *     keeps it as a second kernel inode of the file. A RELEASE can reach
 *     us after the next OPEN (close(2) does not wait for it): before a
 *     split, the open waits a little for releases in flight.
 *   - DRAFTFS_PT_RELEASE_DELAY_MS delays passthrough releases (tests).
 * Lock order: pt_lock is taken with no node lock held and takes none.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "ops.h"
#include "ovl.h"

/* Kernel ABI 7.39/7.40+, absent from the 6.1 uapi headers Debian 12 ships. */
#define PT_FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#define PT_FUSE_PASSTHROUGH (1ULL << 37)
#define PT_FOPEN_DIRECT_IO (1U << 0)
#define PT_FOPEN_PASSTHROUGH (1U << 7)
#define PT_HANDLE_KILLPRIV_V2 (1U << 28)

struct pt_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define PT_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct pt_backing_map)
#define PT_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

struct pt_open_out {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;
};

/* Open-file state of one node, while it has open files. */
struct ovl_open {
	uint32_t n_pt;     /* open in passthrough mode (with or without direct I/O) */
	uint32_t n_cached; /* open in cached mode */
	int32_t backing_id;
	dev_t dev;         /* identity of the backing object */
	ino_t ino;
};

static pthread_mutex_t pt_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pt_released;     /* broadcast when a node's last passthrough file is released */
static bool pt_wanted;                 /* asked for in INIT */
static atomic_bool pt_on;              /* the kernel accepted it (cleared on the first refusal) */
static int pt_dev_fd = -1;
static atomic_int pt_release_delay = -1; /* DRAFTFS_PT_RELEASE_DELAY_MS: a RELEASE that arrives late (tests) */

int ovl_pt_setup(struct ovl_fs *fs)
{
	pthread_condattr_t a;
	int r;

	/* Timed waits (wait_pt_released) count on the monotonic clock. */
	r = -pthread_condattr_init(&a);
	if (r < 0)
		return r;
	r = -pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	if (r == 0)
		r = -pthread_cond_init(&pt_released, &a);
	pthread_condattr_destroy(&a);
	if (r < 0)
		return r;
	pt_dev_fd = fuse_session_fd(fs->se);
	pt_wanted = fs->opt->passthrough != OVL_PT_OFF && !fs->opt->writeback;
	return 0;
}

void ovl_pt_init(struct fuse_conn_info *conn)
{
	if (conn->proto_major != 7)
		return;
	/*
	 * FUSE_HANDLE_KILLPRIV_V2 (7.33): the superblock gets SB_NOSEC, so the
	 * kernel stops asking for security.capability before every write once
	 * it knows a file has none. We then owe the kernel the clearing of
	 * set-id bits on write and open(O_TRUNC) (ops-file.c) and truncate
	 * (ops-entry.c setattr); it still clears them itself on chown.
	 */
	if (conn->proto_minor >= 33)
		ovl_devio_init_add(PT_HANDLE_KILLPRIV_V2, 0, 0);
	/* FUSE_PASSTHROUGH is protocol 7.40; older kernels never see the flag. One stacking level. */
	if (pt_wanted && conn->proto_minor >= 40)
		ovl_devio_init_add(0, (uint32_t)(PT_FUSE_PASSTHROUGH >> 32), 1);
	/*
	 * FUSE_DIRECT_IO_ALLOW_MMAP (7.39, Linux 6.6): with it, a FOPEN_DIRECT_IO
	 * write drops the pages of its range other opens cached, whichever way
	 * a kernel version words that. Before 6.6 the pages stay, so a file read
	 * (and cached, keep_cache) before an append kept reading the old bytes,
	 * now followed by zeros: write-only opens go direct only with the flag
	 * (ovl_dio_writes_coherent()). Shared mmap of a direct file, the flag's
	 * other effect, cannot happen here: only write-only opens and
	 * passthrough files (whose mmap is the backing file's) are direct.
	 */
	if (conn->proto_minor >= 39)
		ovl_devio_init_add(0, (uint32_t)(PT_FUSE_DIRECT_IO_ALLOW_MMAP >> 32), 0);
}

static _Atomic bool dio_coherent;

bool ovl_dio_writes_coherent(void)
{
	return atomic_load_explicit(&dio_coherent, memory_order_relaxed);
}

bool ovl_pt_enabled(void)
{
	return atomic_load(&pt_on);
}

void ovl_pt_init_sent(uint32_t flags2)
{
	if (flags2 & (uint32_t)(PT_FUSE_PASSTHROUGH >> 32))
		atomic_store(&pt_on, true);
	if (flags2 & (uint32_t)(PT_FUSE_DIRECT_IO_ALLOW_MMAP >> 32))
		atomic_store(&dio_coherent, true);
}

static int backing_open(int fd)
{
	struct pt_backing_map map = { .fd = fd };
	int id = ioctl(pt_dev_fd, PT_DEV_IOC_BACKING_OPEN, &map);

	if (id >= 0)
		return id;
	if (errno == EPERM || errno == ENOTTY || errno == EINVAL || errno == EOPNOTSUPP) {
		/* Not enabled by this kernel after all: say so once, then stop trying. */
		if (atomic_exchange(&pt_on, false))
			log_info("passthrough: the kernel refused a backing file (%s), file data goes through the daemon",
				 strerror(errno));
	}
	return -errno;
}

static void backing_close(int32_t id)
{
	uint32_t v = (uint32_t)id;

	(void)ioctl(pt_dev_fd, PT_DEV_IOC_BACKING_CLOSE, &v);
}

/*
 * close(2) returns before its RELEASE reaches us, and another thread (another
 * CPU's queue) may serve the next OPEN first: n_pt can count files the
 * kernel has closed already. Before a writable open of a new object splits
 * the node for them, give such releases PT_RELEASE_WAIT_MS to arrive.
 * Called, and returns, with pt_lock held.
 */
#define PT_RELEASE_WAIT_MS 250
static bool would_split(const struct ovl_node *n, dev_t dev, ino_t ino)
{
	const struct ovl_open *o = n->open;

	return o && o->n_pt && !o->n_cached && !(o->dev == dev && o->ino == ino);
}

static void wait_pt_released(struct ovl_node *n, dev_t dev, ino_t ino)
{
	struct timespec until;

	if (!would_split(n, dev, ino))
		return; /* the common case: no clock read */
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += PT_RELEASE_WAIT_MS * 1000000L;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	while (would_split(n, dev, ino))
		if (pthread_cond_timedwait(&pt_released, &pt_lock, &until) == ETIMEDOUT)
			break;
}

static void put_open(struct ovl_node *n, enum ovl_iomode mode)
{
	struct ovl_open *o = n->open;

	if (!o)
		return;
	if (mode == OVL_IO_CACHED) {
		if (o->n_cached)
			o->n_cached--;
	} else if (o->n_pt && --o->n_pt == 0) {
		if (o->backing_id > 0)
			backing_close(o->backing_id);
		o->backing_id = 0;
		pthread_cond_broadcast(&pt_released);
	}
	if (!o->n_pt && !o->n_cached) {
		free(o);
		n->open = NULL;
	}
}

int ovl_pt_open(struct ovl_node *n, int fd, const struct stat *known, bool write, struct ovl_fh *fh)
{
	bool lower_ok = ovl_fs->opt->passthrough == OVL_PT_ALL;
	struct ovl_open *o = NULL;
	struct stat st;
	int r = 0;

	fh->mode = OVL_IO_CACHED;
	fh->backing_id = 0;
	fh->counted = false;
	if (!atomic_load(&pt_on))
		return 0;
	if (known)
		st = *known;
	else if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return 0;

	pthread_mutex_lock(&pt_lock);
	if (write)
		wait_pt_released(n, st.st_dev, st.st_ino);
	/* Split meanwhile by a concurrent open: this one must not make it a second inode of the file either. */
	if (atomic_load(&n->split)) {
		r = -ESTALE;
		goto out;
	}
	o = n->open;
	if (!o) {
		o = calloc(1, sizeof(*o));
		if (!o) {
			r = -ENOMEM;
			goto out;
		}
		n->open = o;
	}
	if (o->n_cached) {
		/* The kernel inode is in cached mode: a passthrough open would fail. */
	} else if (o->n_pt) {
		bool same = o->dev == st.st_dev && o->ino == st.st_ino;

		if (!same && write) {
			/* Marked under pt_lock, so no open after this one passes; the caller unhashes it. */
			atomic_store(&n->split, true);
			r = -ESTALE;
			goto out;
		}
		/* Writes always come to us (see the top of this file); so do reads of a newer object. */
		fh->mode = same && !write && !fh->bf ? OVL_IO_PT : OVL_IO_PT_DIRECT;
		fh->backing_id = o->backing_id;
	} else if (!write && (lower_ok || !fh->lower) && !fh->bf) {
		/* (A file being filled in the background has chunks only we can read: cached mode.) */
		int id = backing_open(fd);

		if (id > 0) {
			o->backing_id = id;
			o->dev = st.st_dev;
			o->ino = st.st_ino;
			fh->mode = OVL_IO_PT;
			fh->backing_id = id;
		}
		/* Refused (a stacked layer: ELOOP, or no kernel support): cached mode. */
	}
	if (fh->mode == OVL_IO_CACHED)
		o->n_cached++;
	else
		o->n_pt++;
	fh->counted = true;
out:
	if (o && !o->n_pt && !o->n_cached) {
		free(o);
		n->open = NULL;
	}
	pthread_mutex_unlock(&pt_lock);
	return r;
}

void ovl_pt_release(struct ovl_node *n, const struct ovl_fh *fh)
{
	if (!fh->counted)
		return; /* opened while passthrough was off: no state was made */
	if (fh->mode != OVL_IO_CACHED)
		ovl_test_delay(&pt_release_delay, "DRAFTFS_PT_RELEASE_DELAY_MS");
	pthread_mutex_lock(&pt_lock);
	put_open(n, fh->mode);
	pthread_mutex_unlock(&pt_lock);
}

int ovl_pt_reply_open(fuse_req_t req, const struct fuse_file_info *fi, const struct ovl_fh *fh)
{
	struct pt_open_out out = {
		.fh = fi->fh,
		.open_flags = PT_FOPEN_PASSTHROUGH,
		.backing_id = fh->backing_id,
	};

	if (fh->mode == OVL_IO_CACHED)
		return fuse_reply_open(req, fi);
	/* keep_cache is not allowed with passthrough: there is no FUSE page cache to keep. */
	if (fh->mode == OVL_IO_PT_DIRECT)
		out.open_flags |= PT_FOPEN_DIRECT_IO;
	return fuse_reply_buf(req, (const char *)&out, sizeof(out));
}
