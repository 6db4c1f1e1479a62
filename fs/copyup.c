// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Copy-up: making a lower object exist in upper before it changes. The copy
 * is built under a temporary name in <workdir>/work (data by FICLONE, then
 * copy_file_range per data segment, then read/write; owner, mode, xattrs,
 * times, and the origin record) and renamed into place with
 * RENAME_NOREPLACE, so a daemon killed at any instant never leaves a partial
 * object under the real name; leftovers in work/ are removed at the next
 * mount. Parent directories are copied up first. Also the full subtree copy
 * used to rename a directory that exists in lower.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "bgfill.h"
#include "fdpath.h"
#include "macro.h"
#include "finalize.h"
#include "metacopy.h"
#include "ovl.h"

void ovl_tmp_name(char tmp[static 64])
{
	static atomic_int pid; /* getpid() is a syscall: once per process (requests come after any fork) */
	int p = atomic_load(&pid);

	if (!p) {
		p = (int)getpid();
		atomic_store(&pid, p);
	}
	snprintf(tmp, 64, "#draftfs-%d-%llu", p, (unsigned long long)atomic_fetch_add(&ovl_fs->tmp_seq, 1));
}

/* With @writeback, data is copied in chunks of this size, each sent to the disk once copied. */
#define COPY_WRITEBACK_CHUNK ((off_t)64 << 20)

/* Set once FICLONE failed with EOPNOTSUPP/ENOTTY: the upper fs cannot clone (it is the destination of every clone). */
static atomic_bool clone_unsupported;

/*
 * Copies [@pos, @hole) of @src_fd into @dst_fd at the same offsets
 * (copy_file_range, else read/write). *@end: where the data copied ends
 * (less than @hole when the source is shorter). Returns 0 or -errno.
 */
static int copy_range(int src_fd, int dst_fd, off_t pos, off_t hole, bool writeback, off_t *end)
{
	while (pos < hole) {
		loff_t in = pos, out = pos;
		size_t len = (size_t)(writeback ? MIN(hole - pos, COPY_WRITEBACK_CHUNK) : hole - pos);
		ssize_t n = copy_file_range(src_fd, &in, dst_fd, &out, len, 0);

		if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
			char buf[65536];

			n = pread(src_fd, buf, (size_t)MIN((off_t)sizeof(buf), hole - pos), pos);
			if (n > 0) {
				int r = 0;
				for (ssize_t w = 0; w < n;) {
					ssize_t k = pwrite(dst_fd, buf + w, (size_t)(n - w), pos + w);

					if (k < 0) {
						if (errno == EINTR)
							continue;
						r = -errno;
						break;
					}
					w += k;
				}
				if (r < 0)
					return r;
			}
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break; /* source shorter than expected */
		/* Start writing this chunk out while the next is copied: the caller's fdatasync then has little left to wait for. */
		if (writeback)
			(void)sync_file_range(dst_fd, pos, n, SYNC_FILE_RANGE_WRITE);
		pos += n;
		*end = pos;
	}
	return 0;
}

/*
 * Copies @size bytes of @src_fd into @dst_fd, new and empty or all holes
 * (a metacopy). @sparse: the source may have holes (else it is copied in
 * one go, without SEEK_DATA / SEEK_HOLE probes). @writeback: the caller
 * syncs the copy next, so start its writeback chunk by chunk as it goes
 * (a durable copy of 1 GiB then costs about what an unsynced one does,
 * instead of the copy plus a long fdatasync). Returns 0 or -errno.
 */
/*
 * Copies the data of [@pos, @size) of @src_fd into @dst_fd at the same
 * offsets; @sparse: skipping the source's holes. *@end: where the data
 * copied ends. Returns 0 or -errno.
 */
static int copy_segments(int src_fd, int dst_fd, off_t pos, off_t size, bool sparse, bool writeback, off_t *end)
{
	while (pos < size) {
		off_t data, hole;
		int r;

		if (!sparse) {
			data = pos;
			hole = size;
		} else {
			data = lseek(src_fd, pos, SEEK_DATA);
			if (data < 0) {
				if (errno == ENXIO)
					break; /* only a hole remains */
				data = pos; /* no SEEK_DATA: copy everything */
				hole = size;
			} else {
				if (data >= size)
					break;
				hole = lseek(src_fd, data, SEEK_HOLE);
				if (hole < 0 || hole > size)
					hole = size;
			}
		}
		r = copy_range(src_fd, dst_fd, data, hole, writeback, end);
		if (r < 0)
			return r;
		pos = hole;
	}
	return 0;
}

int ovl_copy_range(int src_fd, int dst_fd, off_t pos, off_t end, bool sparse)
{
	off_t done;

	return copy_segments(src_fd, dst_fd, pos, end, sparse, false, &done);
}

int ovl_copy_data(int src_fd, int dst_fd, off_t size, bool sparse, bool writeback)
{
	off_t end = 0; /* where the data written so far ends */
	int r;

	if (size > 0 && !atomic_load(&clone_unsupported)) {
		if (ioctl(dst_fd, FICLONE, src_fd) == 0)
			return ftruncate(dst_fd, size) < 0 ? -errno : 0;
		if (errno == EOPNOTSUPP || errno == ENOTTY)
			atomic_store(&clone_unsupported, true);
	}
	r = copy_segments(src_fd, dst_fd, 0, size, sparse, writeback, &end);
	if (r < 0)
		return r;
	/* The new file already has the right size when the data went up to @size. */
	if (end == size)
		return 0;
	return ftruncate(dst_fd, size) < 0 ? -errno : 0;
}

/* fsetxattr on a real fd (@real) directly, else through the O_PATH fd's magic link. */
static int set_xattr(int fd, bool real, const char *name, const void *value, size_t size)
{
	if (!real)
		return ovl_fsetxattr(fd, name, value, size, 0);
	return fsetxattr(fd, name, value, size, 0) < 0 ? -errno : 0;
}

/* Copies every non-private xattr of @src (O_PATH or real fd) to @dst (a real fd if @dst_real). */
static int copy_xattrs(int src, int dst, bool dst_real)
{
	_cleanup_free_ char *list = NULL, *val = NULL;
	size_t vcap = 0;
	ssize_t n;

	n = ovl_flistxattr(src, NULL, 0);
	if (n <= 0)
		return n == -EOPNOTSUPP ? 0 : (int)n;
	list = malloc((size_t)n);
	if (!list)
		return -ENOMEM;
	n = ovl_flistxattr(src, list, (size_t)n);
	if (n < 0)
		return (int)n;
	for (char *p = list; p < list + n; p += strlen(p) + 1) {
		ssize_t vn;
		int r;

		if (ovl_xattr_is_private(p))
			continue;
		vn = ovl_fgetxattr(src, p, NULL, 0);
		if (vn < 0)
			continue;
		if ((size_t)vn + 1 > vcap) {
			char *nv = realloc(val, (size_t)vn + 1);

			if (!nv)
				return -ENOMEM;
			val = nv;
			vcap = (size_t)vn + 1;
		}
		vn = ovl_fgetxattr(src, p, val, vcap);
		if (vn < 0)
			continue;
		r = set_xattr(dst, dst_real, p, val, (size_t)vn);
		if (r < 0 && r != -EOPNOTSUPP && r != -EPERM)
			return r;
	}
	return 0;
}

static int set_times_at(int dir, const char *name, const struct stat *st, int flags)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };

	return utimensat(dir, name, ts, AT_SYMLINK_NOFOLLOW | flags) < 0 ? -errno : 0;
}

/* What create_copy() makes. */
struct copy_spec {
	int src;               /* O_PATH of the object: metadata, xattrs, and the data unless @data >= 0 */
	int data;              /* O_PATH of a regular file's data when it is not @src (a metacopy's lower file), or -1 */
	const struct stat *st; /* of @src */
	off_t size;            /* regular files: copy the data up to here (all if < 0) */
	const char *origin;    /* the origin record, or NULL */
	const char *redirect;  /* regular files: make a metacopy whose data is this absolute lower path, or NULL */
};

/*
 * Creates a copy of the object @c->src as @dir/@name: data (or, for a
 * metacopy, only the size), owner, mode, xattrs and origin record.
 * Directory times are left to the caller (set them after filling it).
 */
static int create_copy(int dir, const char *name, const struct copy_spec *c)
{
	_cleanup_close_ int fd = -1;
	const struct stat *st = c->st;
	mode_t type = st->st_mode & S_IFMT;
	bool real;
	int r;

	switch (type) {
	case S_IFREG: {
		_cleanup_close_ int in = -1;
		off_t size = c->size < 0 || c->size > st->st_size ? st->st_size : c->size;

		fd = openat(dir, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return -errno;
		if (c->redirect) {
			/* Metadata only: the size, no blocks. Nothing to sync, the data stays below. */
			if (ftruncate(fd, st->st_size) < 0)
				return -errno;
		} else if (size > 0) {
			struct stat dst;
			int data = c->data >= 0 ? c->data : c->src;

			in = fd_reopen(data, O_RDONLY);
			if (in < 0)
				return in;
			if (data != c->src && fstat(in, &dst) < 0)
				return -errno;
			/* Fully allocated: no hole to keep, copy without SEEK_DATA/SEEK_HOLE probes. */
			r = ovl_copy_data(in, fd, size,
					  data != c->src ? (off_t)dst.st_blocks * 512 < dst.st_size
							 : (off_t)st->st_blocks * 512 < st->st_size,
					  ovl_fs->opt->fsync);
			if (r < 0)
				return r;
			/*
			 * The copy replaces the lower file in the view once renamed into
			 * place: on stable storage first, or a power cut could leave an
			 * empty file there (as kernel overlayfs; fsync=0 skips it).
			 */
			if (ovl_fs->opt->fsync && fdatasync(fd) < 0)
				return -errno;
		}
		break;
	}
	case S_IFDIR:
		if (mkdirat(dir, name, 0700) < 0)
			return -errno;
		fd = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		break;
	case S_IFLNK: {
		char target[PATH_MAX + 1];
		ssize_t n = readlinkat(c->src, "", target, sizeof(target) - 1);

		if (n < 0)
			return -errno;
		target[n] = '\0';
		if (symlinkat(target, dir, name) < 0)
			return -errno;
		fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		break;
	}
	default:
		if (mknodat(dir, name, type | 0600, st->st_rdev) < 0)
			return -errno;
		fd = openat(dir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		break;
	}

	/* Regular files and dirs have a real fd: metadata calls on it need no path walk. */
	real = type == S_IFREG || type == S_IFDIR;
	if (fchownat(fd, "", st->st_uid, st->st_gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (real) {
		if (fchmod(fd, st->st_mode & 07777) < 0)
			return -errno;
	} else if (type != S_IFLNK && fchmodat(dir, name, st->st_mode & 07777, 0) < 0) {
		return -errno;
	}
	r = copy_xattrs(c->src, fd, real);
	if (r < 0)
		return r;
	if (c->origin) {
		r = set_xattr(fd, real, OVL_XATTR_ORIGIN, c->origin, strlen(c->origin));
		if (r < 0)
			return r;
	}
	if (type == S_IFREG && c->redirect) {
		char abs[PATH_MAX + 1];

		snprintf(abs, sizeof(abs), "/%s", c->redirect);
		r = set_xattr(fd, real, OVL_XATTR_REDIRECT, abs, strlen(abs));
		if (r >= 0)
			r = set_xattr(fd, real, OVL_XATTR_METACOPY, "", 0);
		if (r < 0)
			return r;
	}
	if (type == S_IFREG) {
		struct timespec ts[2] = { st->st_atim, st->st_mtim };

		if (futimens(fd, ts) < 0)
			return -errno;
	} else if (type != S_IFDIR) {
		r = set_times_at(dir, name, st, 0);
		if (r < 0)
			return r;
	}
	return 0;
}

void ovl_mark_impure(int fd)
{
	char v[4];

	if (ovl_fgetxattr(fd, OVL_XATTR_IMPURE, v, sizeof(v)) == 1)
		return;
	(void)ovl_fsetxattr(fd, OVL_XATTR_IMPURE, "y", 1, 0);
}

int ovl_node_upper_dup(struct ovl_node *n)
{
	int fd;

	fd = ovl_node_rdlock_fresh(n);
	if (fd < 0)
		return fd;
	fd = n->upper_fd >= 0 ? fcntl(n->upper_fd, F_DUPFD_CLOEXEC, 3) : -1;
	if (n->upper_fd >= 0 && fd < 0)
		fd = -errno;
	else if (n->upper_fd < 0)
		fd = -ENOENT;
	pthread_rwlock_unlock(&n->lock);
	return fd;
}

/* True if a redirect to @path ("a/b") is short enough for the kernel to follow and leads to the very object @lst. */
static bool redirect_reaches(const char *path, const struct stat *lst)
{
	struct stat st;

	return *path && strlen(path) + 1 <= OVL_MC_REDIRECT_MAX && ovl_lower_stat_abs(path, &st) == 0 &&
	       st.st_dev == lst->st_dev && st.st_ino == lst->st_ino;
}

/*
 * The absolute lower path a metacopy of @n would name for its data (its
 * view path, when the redirect walk finds the very object @lst there, so
 * a redirected parent or a hiding layer never misleads it; and short
 * enough for the kernel to follow). Returns true and the path in *ret
 * (free it), or false: copy the data.
 */
static bool metacopy_path(struct ovl_node *n, const struct stat *lst, char **ret)
{
	_cleanup_free_ char *path = NULL;

	if (ovl_node_path(n, &path) < 0 || !redirect_reaches(path, lst))
		return false;
	*ret = TAKE_PTR(path);
	return true;
}

/*
 * The copy-up of a removed object still in use: a chmod, an xattr change or
 * a write through an fd kept open after the unlink, which a local
 * filesystem allows (kernel overlayfs answers EEXIST, from the whiteout).
 * Upper has no name for it any more, so the copy is made in work/ and
 * unlinked at once: it lives while the node holds it, as an unlinked file
 * does, and a crash leaves at most the work/ entry, which a mount clears.
 * Its data is copied whole (a metacopy would need a name to find its
 * data by) and not charged to the quota, as an unlinked upper file is no
 * longer charged. copyup_lock held.
 */
static int copy_up_orphan(struct ovl_node *n)
{
	struct ovl_fs *fs = ovl_fs;
	_cleanup_close_ int lfd = -1, ufd = -1;
	struct stat st;
	char tmp[64];
	int r;

	pthread_rwlock_rdlock(&n->lock);
	lfd = n->lower_fd >= 0 ? fcntl(n->lower_fd, F_DUPFD_CLOEXEC, 3) : -1;
	pthread_rwlock_unlock(&n->lock);
	if (lfd < 0)
		return -ESTALE;
	if (fstatat(lfd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	ovl_tmp_name(tmp);
	r = create_copy(fs->workwork_fd, tmp, &(struct copy_spec){ .src = lfd, .data = -1, .st = &st, .size = -1 });
	if (r >= 0 && S_ISDIR(st.st_mode))
		r = set_times_at(fs->workwork_fd, tmp, &st, 0);
	if (r >= 0) {
		ufd = openat(fs->workwork_fd, tmp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		r = ufd < 0 ? -errno : 0;
	}
	if (r >= 0 && unlinkat(fs->workwork_fd, tmp, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) < 0)
		r = -errno;
	if (r < 0) {
		(void)ovl_core_rm_rf_at(fs->workwork_fd, tmp);
		return r;
	}
	/* Not re-keyed: the identity index must never lead to a node without a name. */
	pthread_rwlock_wrlock(&n->lock);
	n->upper_fd = TAKE_FD(ufd);
	ovl_fds_account(1);
	n->opaque = S_ISDIR(st.st_mode); /* nothing below shows through a removed directory */
	n->metacopy = false;
	ovl_xattr_absent_forget(n);
	pthread_rwlock_unlock(&n->lock);
	return 0;
}

static atomic_int restore_delay = -1; /* DRAFTFS_TEST_COPYUP_DELAY_MS: before a copy-up sets its parent's times back (tests) */

/*
 * @meta: a regular file may become a metacopy (its data stays below); else
 * its data is copied, up to @size: then 1 is returned with the fill claimed
 * in @f, for the caller to run once it has dropped copyup_lock.
 */
static int copy_up_locked(struct ovl_node *n, off_t size, bool meta, struct ovl_fill *f)
{
	struct ovl_fs *fs = ovl_fs;
	_cleanup_free_ char *name = NULL, *redirect = NULL;
	_cleanup_close_ int pfd = -1, lfd = -1, ufd = -1;
	struct ovl_node *parent;
	struct copy_spec spec;
	char tmp[64], origin[256];
	struct stat st, pst;
	uint64_t entry_gen;
	unsigned layer;
	bool split_link, fill = false, mc = false;
	int r;

	r = ovl_node_ensure(n);
	if (r < 0)
		return r;
	if (n == &fs->root)
		return 0;
	pthread_rwlock_rdlock(&n->lock);
	r = n->upper_fd < 0 ? 0 : !meta && n->metacopy ? 1 : 2;
	pthread_rwlock_unlock(&n->lock);
	if (r == 1)
		return ovl_metacopy_claim_fill(n, size, false, f);
	if (r == 2)
		return 0;
	r = ovl_node_parent_name(n, &parent, &name);
	if (r == -ESTALE && ovl_node_is_removed(n))
		return copy_up_orphan(n);
	if (r < 0)
		return r;
	r = copy_up_locked(parent, -1, true, f); /* a directory: never a fill */
	if (r < 0)
		return r;
	pfd = ovl_node_upper_dup(parent);
	if (pfd < 0)
		return pfd;

	pthread_rwlock_rdlock(&n->lock);
	lfd = n->lower_fd >= 0 ? fcntl(n->lower_fd, F_DUPFD_CLOEXEC, 3) : -1;
	layer = n->lower_layer;
	pthread_rwlock_unlock(&n->lock);
	if (lfd < 0)
		return -ESTALE;
	if (fstatat(lfd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;

	if (S_ISREG(st.st_mode)) {
		/*
		 * A copy of the data is made as a metacopy and filled in place: then
		 * its sync can wait for the finalizer (fs/finalize.h), where a copy
		 * renamed into place must be synced first.
		 */
		fill = !meta && size != 0 && ovl_finalize_enabled();
		mc = (fill || (meta && size < 0)) && fs->opt->metacopy && st.st_size > 0 &&
		     metacopy_path(n, &st, &redirect);
		/* A metacopy to be filled is charged its data now: over the quota, nothing is made. */
		r = ovl_quota_check(mc && !fill ? 0 : size >= 0 && size < st.st_size ? size : st.st_size, 1);
		if (r < 0)
			return r;
	}
	ovl_origin_format(origin, sizeof(origin), layer, &st);
	/* A lower hard link is split by the copy: like the kernel (index=off), it gets its own st_ino. */
	split_link = !S_ISDIR(st.st_mode) && st.st_nlink > 1;
	if (split_link)
		strcat(origin, " new");
	ovl_tmp_name(tmp);
	spec = (struct copy_spec){ .src = lfd, .data = -1, .st = &st, .size = size, .origin = origin, .redirect = redirect };
	r = create_copy(fs->workwork_fd, tmp, &spec);
	if (r >= 0 && S_ISDIR(st.st_mode))
		r = set_times_at(fs->workwork_fd, tmp, &st, 0);
	entry_gen = ovl_entry_gen(); /* before the parent's times are read */
	if (r >= 0 && fstatat(pfd, "", &pst, AT_EMPTY_PATH) < 0)
		r = -errno;
	if (r >= 0 && renameat2(fs->workwork_fd, tmp, pfd, name, RENAME_NOREPLACE) < 0)
		r = -errno;
	if (r < 0) {
		(void)ovl_core_rm_rf_at(fs->workwork_fd, tmp);
		return r;
	}
	/*
	 * A copy-up changes nothing in the directory as the view shows it: its
	 * times stay what they were, as the kernel keeps them (the parent's
	 * ovl_set_timestamps() after a copy-up). Best effort: the copy is in.
	 * The kernel holds the parent's lock for that; here a create, unlink
	 * or utimens in it may have run meanwhile, and setting the times back
	 * would hide it (git's untracked cache trusts a directory's mtime): if
	 * any such request ran or runs, the mtime is made now instead, as late
	 * as any change it could have hidden.
	 */
	ovl_test_delay(&restore_delay, "DRAFTFS_TEST_COPYUP_DELAY_MS");
	(void)set_times_at(pfd, "", &pst, AT_EMPTY_PATH);
	if (!ovl_entry_ops_quiet(entry_gen)) {
		struct timespec now[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_NOW } };

		(void)utimensat(pfd, "", now, AT_EMPTY_PATH);
	}
	ufd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (ufd < 0)
		return -errno;
	ovl_mark_impure(pfd);
	if (fstatat(ufd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0) {
		ovl_node_rekey(n, st.st_dev, st.st_ino);
		if (split_link)
			ovl_node_set_ino(n, st.st_ino);
	}

	pthread_rwlock_wrlock(&n->lock);
	n->upper_fd = TAKE_FD(ufd);
	ovl_fds_account(1);
	n->opaque = false;
	n->metacopy = mc;
	ovl_xattr_absent_forget(n);
	pthread_rwlock_unlock(&n->lock);
	return fill && mc ? ovl_metacopy_claim_fill(n, size, true, f) : 0;
}

/* True when @n's data is in upper (a metacopy's is not), so a copy-up has nothing to do. */
static bool has_upper_data(struct ovl_node *n, bool meta)
{
	bool r;

	pthread_rwlock_rdlock(&n->lock);
	r = n->upper_fd >= 0 && (meta || !n->metacopy);
	pthread_rwlock_unlock(&n->lock);
	return r;
}

static int copy_up(struct ovl_node *n, off_t size, bool meta)
{
	struct ovl_fill f;
	int r;

	if (n == &ovl_fs->root)
		return 0;
	r = ovl_node_ensure(n);
	if (r < 0)
		return r;
	if (has_upper_data(n, meta))
		return 0;
	/* Another writer's fill of @n: wait for it here, not holding copyup_lock up for every other copy-up. */
	if (!meta)
		ovl_metacopy_wait_fill(n);
	pthread_mutex_lock(&ovl_fs->copyup_lock);
	r = copy_up_locked(n, size, meta, &f);
	pthread_mutex_unlock(&ovl_fs->copyup_lock);
	/* The copy of the data itself: other copy-ups, renames and lookups go on meanwhile. */
	if (r == 1)
		r = ovl_metacopy_run_fill(n, &f);
	return r;
}

int ovl_copy_up_size(struct ovl_node *n, off_t size)
{
	return copy_up(n, size, false);
}

int ovl_copy_up(struct ovl_node *n)
{
	return copy_up(n, -1, true);
}

static void pool_name(char buf[static 64], uint64_t seq)
{
	snprintf(buf, 64, "#draftfs-wh-%llu", (unsigned long long)seq);
}

static int rm_rf_entry(int dir_fd, const char *name, unsigned char dtype);

/*
 * Reuses the whiteout @name in directory @dfd as a pool whiteout when the
 * pool has room: a char device 0/0, mode 0, root's, one link (what the pool
 * and RENAME_WHITEOUT make); its origin record is removed, the rename into
 * work/ gives it a fresh ctime, as a new one would have. A rename and a
 * removexattr instead of an unlink now and a mknod later (inode free and
 * allocation are the slow part). Returns true if it was taken.
 */
static bool recycle_whiteout(struct ovl_fs *fs, int dfd, const char *name)
{
	char pn[64], p[32 + NAME_MAX];
	struct stat st;
	uint64_t seq;

	pthread_mutex_lock(&fs->wh_lock);
	if (fs->wh_avail >= OVL_WH_POOL) {
		pthread_mutex_unlock(&fs->wh_lock);
		return false;
	}
	seq = fs->wh_seq++;
	pthread_mutex_unlock(&fs->wh_lock);

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !ovl_is_whiteout(&st) || st.st_nlink != 1 ||
	    (st.st_mode & 07777) != 0 || st.st_uid != 0 || st.st_gid != 0)
		return false;
	snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", dfd, name);
	if (lremovexattr(p, OVL_XATTR_ORIGIN) < 0 && errno != ENODATA)
		return false;
	pool_name(pn, seq);
	if (renameat2(dfd, name, fs->workwork_fd, pn, RENAME_NOREPLACE) < 0)
		return false;
	/* Only this thread adds to the pool: the room seen above is still there. */
	pthread_mutex_lock(&fs->wh_lock);
	fs->wh_pool[fs->wh_avail++] = seq;
	pthread_mutex_unlock(&fs->wh_lock);
	return true;
}

/* Removes work/@name (queued by ovl_work_reap()), recycling the whiteouts directly inside it. */
static void reap_one(struct ovl_fs *fs, const char *name)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int fd;

	fd = openat(fs->workwork_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		(void)ovl_core_rm_rf_at(fs->workwork_fd, name); /* not a directory */
		return;
	}
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		(void)ovl_core_rm_rf_at(fs->workwork_fd, name);
		return;
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_type == DT_CHR && recycle_whiteout(fs, dirfd(d), de->d_name))
			continue;
		(void)rm_rf_entry(dirfd(d), de->d_name, de->d_type);
	}
	(void)unlinkat(fs->workwork_fd, name, AT_REMOVEDIR);
}

/* DRAFTFS_REAP_DELAY_MS: each background removal starts this late (tests: a removal that lags). */
static unsigned reap_delay_ms;

/*
 * The helper thread: first removes what was queued for removal in work/
 * (the replaced upper dir of an rmdir or a rename, with the whiteouts in
 * it: freeing inodes is the slow part; whiteouts are recycled into the
 * pool), then keeps the whiteout pool full.
 */
static void *whiteout_pool_thread(void *userdata)
{
	struct ovl_fs *fs = userdata;

	pthread_mutex_lock(&fs->wh_lock);
	for (;;) {
		char name[64];
		uint64_t seq;

		if (fs->reap_n > 0) {
			memcpy(name, fs->reap[fs->reap_head], sizeof(name));
			fs->reap_head = (fs->reap_head + 1) % OVL_REAP_MAX;
			fs->reap_n--;
			pthread_mutex_unlock(&fs->wh_lock);
			if (reap_delay_ms > 0)
				(void)usleep(reap_delay_ms * 1000);
			reap_one(fs, name);
			pthread_mutex_lock(&fs->wh_lock);
			continue;
		}
		if (fs->wh_stop)
			break;
		if (fs->wh_avail >= OVL_WH_POOL || fs->wh_failed) {
			pthread_cond_wait(&fs->wh_cond, &fs->wh_lock);
			continue;
		}
		seq = fs->wh_seq++;
		pthread_mutex_unlock(&fs->wh_lock);
		pool_name(name, seq);
		if (mknodat(fs->workwork_fd, name, S_IFCHR | 0, makedev(0, 0)) < 0) {
			pthread_mutex_lock(&fs->wh_lock);
			fs->wh_failed = true; /* no whiteouts here: callers fall back to mknod and see the error */
			continue;
		}
		pthread_mutex_lock(&fs->wh_lock);
		fs->wh_pool[fs->wh_avail++] = seq;
	}
	pthread_mutex_unlock(&fs->wh_lock);
	return NULL;
}

int ovl_whiteout_pool_start(struct ovl_fs *fs)
{
	const char *delay = getenv("DRAFTFS_REAP_DELAY_MS");
	int r;

	if (delay)
		reap_delay_ms = (unsigned)strtoul(delay, NULL, 10);
	pthread_mutex_init(&fs->wh_lock, NULL);
	pthread_cond_init(&fs->wh_cond, NULL);
	r = -pthread_create(&fs->wh_thread, NULL, whiteout_pool_thread, fs);
	if (r == 0)
		fs->wh_running = true;
	return r;
}

void ovl_whiteout_pool_stop(struct ovl_fs *fs)
{
	if (!fs->wh_running)
		return;
	pthread_mutex_lock(&fs->wh_lock);
	fs->wh_stop = true;
	pthread_cond_signal(&fs->wh_cond);
	pthread_mutex_unlock(&fs->wh_lock);
	pthread_join(fs->wh_thread, NULL); /* after it has emptied the removal queue */
	fs->wh_running = false;
	/* The pool's whiteouts stay in work/: cleaned at the next mount. */
}

void ovl_work_reap(const char *tmp)
{
	struct ovl_fs *fs = ovl_fs;

	if (fs->wh_running && strlen(tmp) < 64) {
		pthread_mutex_lock(&fs->wh_lock);
		if (!fs->wh_stop && fs->reap_n < OVL_REAP_MAX) {
			snprintf(fs->reap[(fs->reap_head + fs->reap_n) % OVL_REAP_MAX], 64, "%s", tmp);
			fs->reap_n++;
			pthread_cond_signal(&fs->wh_cond);
			pthread_mutex_unlock(&fs->wh_lock);
			return;
		}
		pthread_mutex_unlock(&fs->wh_lock);
	}
	(void)ovl_core_rm_rf_at(fs->workwork_fd, tmp);
}

/* Unlinks the non-directories below directory @fd that have other links too; recurses into directories. */
static void unlink_linked_below(int fd)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;

	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return;
	}
	while ((de = readdir(d))) {
		struct stat st;
		int sub;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (de->d_type != DT_DIR) {
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue;
			if (!S_ISDIR(st.st_mode)) {
				if (st.st_nlink > 1)
					(void)unlinkat(dirfd(d), de->d_name, 0);
				continue;
			}
		}
		sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0)
			unlink_linked_below(sub);
	}
}

void ovl_work_reap_replaced(const char *tmp)
{
	int fd = openat(ovl_fs->workwork_fd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0)
		unlink_linked_below(fd);
	ovl_work_reap(tmp);
}

/* Takes a pre-made whiteout: its name in work/ goes to @tmp. Returns true on success. */
static bool take_pooled_whiteout(char tmp[static 64])
{
	struct ovl_fs *fs = ovl_fs;
	uint64_t seq;

	if (!fs->wh_running)
		return false;
	pthread_mutex_lock(&fs->wh_lock);
	if (fs->wh_avail == 0) {
		pthread_mutex_unlock(&fs->wh_lock);
		return false;
	}
	seq = fs->wh_pool[--fs->wh_avail];
	if (fs->wh_avail < OVL_WH_POOL / 2)
		pthread_cond_signal(&fs->wh_cond);
	pthread_mutex_unlock(&fs->wh_lock);
	/* Pool names are unique like ovl_tmp_name()'s: used as they are, no rename. */
	pool_name(tmp, seq);
	return true;
}

int ovl_lsetxattr_at(int dir_fd, const char *name, const char *xname, const void *value, size_t size, int flags)
{
	char p[32 + NAME_MAX];

	/* One lookup of @name through the dir's magic link, instead of open + setxattr + close. */
	if (!name_is_valid(name))
		return -EINVAL;
	snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", dir_fd, name);
	return lsetxattr(p, xname, value, size, flags) < 0 ? -errno : 0;
}

int ovl_make_whiteout_rec(char tmp[static 64], const char *record, size_t len)
{
	int r;

	if (!take_pooled_whiteout(tmp)) {
		ovl_tmp_name(tmp);
		if (mknodat(ovl_fs->workwork_fd, tmp, S_IFCHR | 0, makedev(0, 0)) < 0)
			return -errno;
	}
	if (record && len > 0) {
		r = ovl_lsetxattr_at(ovl_fs->workwork_fd, tmp, OVL_XATTR_ORIGIN, record, len, 0);
		if (r < 0) {
			(void)unlinkat(ovl_fs->workwork_fd, tmp, 0);
			return r;
		}
	}
	return 0;
}

int ovl_make_whiteout_tmp(char tmp[static 64], unsigned layer, const struct stat *lower_st)
{
	char origin[256];
	int n;

	if (!lower_st)
		return ovl_make_whiteout_rec(tmp, NULL, 0);
	n = ovl_origin_format(origin, sizeof(origin), layer, lower_st);
	return ovl_make_whiteout_rec(tmp, origin, (size_t)n);
}

/* Removes the entry @name of type @dtype (DT_*, from readdir): a non-directory without a stat first. */
static int rm_rf_entry(int dir_fd, const char *name, unsigned char dtype)
{
	if (dtype != DT_DIR && dtype != DT_UNKNOWN) {
		if (unlinkat(dir_fd, name, 0) == 0 || errno == ENOENT)
			return 0;
		if (errno != EISDIR)
			return -errno;
	}
	return ovl_core_rm_rf_at(dir_fd, name);
}

int ovl_core_rm_rf_at(int dir_fd, const char *name)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	struct stat st;
	int fd, r = 0;

	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
	fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		int k;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		k = rm_rf_entry(dirfd(d), de->d_name, de->d_type);
		if (k < 0 && r == 0)
			r = k;
	}
	if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
		r = -errno;
	return r;
}

int ovl_work_clean(int workwork_fd)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int fd, r = 0;

	fd = fd_reopen(workwork_fd, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return fd;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		int k;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		k = ovl_core_rm_rf_at(dirfd(d), de->d_name);
		if (k < 0 && r == 0)
			r = k;
	}
	return r;
}

/* Reads the raw origin record of @fd into @buf; returns buf or NULL when there is none. */
static const char *origin_raw(int fd, char *buf, size_t size)
{
	ssize_t n = ovl_fgetxattr(fd, OVL_XATTR_ORIGIN, buf, size - 1);

	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return buf;
}

/* The origin record a copy of @res should carry. */
static const char *origin_for(const struct ovl_res *res, char *buf, size_t size)
{
	struct stat lst;

	if (res->upper_fd >= 0)
		return origin_raw(res->upper_fd, buf, size);
	if (res->lower_fd < 0 || fstatat(res->lower_fd, "", &lst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return NULL;
	ovl_origin_format(buf, size, res->lower_layer, &lst);
	if (!S_ISDIR(lst.st_mode) && lst.st_nlink > 1 && strlen(buf) + 5 < size)
		strcat(buf, " new"); /* a split lower hard link: its own st_ino, as on copy-up */
	return buf;
}

/*
 * The redirect a copy of the lower regular file @res (view path @path) can
 * carry to be a metacopy instead of a copy of its data, or NULL (see
 * metacopy_path()).
 */
static const char *tree_metacopy_path(const struct ovl_res *res, const char *path)
{
	if (!ovl_fs->opt->metacopy || res->upper_fd >= 0 || res->lower_fd < 0 || !S_ISREG(res->st.st_mode) ||
	    res->st.st_size == 0 || !redirect_reaches(path, &res->st))
		return NULL;
	return path;
}

/*
 * Copies the merged children of stack @s into the (work) directory @dst.
 * @path (PATH_MAX bytes, @len used; -1: too long to name) is the view path
 * of the directory; lower files become metacopies of their data there, when
 * a redirect can name it.
 */
static int copy_children(const struct ovl_stack *s, int dst, char *path, ssize_t len)
{
	struct ovl_dirent *ents = NULL;
	size_t n = 0;
	int r;

	r = ovl_stack_list(s, &ents, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n && r >= 0; i++) {
		const char *name = ents[i].name;
		struct copy_spec spec;
		ssize_t clen;
		char obuf[256];
		const char *origin;
		struct ovl_res res;
		int top;

		r = ovl_resolve_in_stack(s, name, &res);
		if (r == -ENOENT) {
			r = 0;
			continue;
		}
		if (r < 0)
			break;
		top = res.upper_fd >= 0 ? res.upper_fd : res.lower_fd;
		/* Upper files are linked into the copy; a metacopy only when its redirect names its data from anywhere. */
		if (!S_ISDIR(res.st.st_mode) && res.upper_fd >= 0 && (!res.metacopy || ovl_metacopy_is_movable(res.upper_fd)) &&
		    linkat(res.upper_fd, "", dst, name, AT_EMPTY_PATH) == 0) {
			ovl_res_done(&res);
			continue;
		}
		origin = origin_for(&res, obuf, sizeof(obuf));
		spec = (struct copy_spec){ .src = top, .data = res.metacopy ? res.lower_fd : -1, .st = &res.st, .size = -1,
					   .origin = origin };
		clen = len < 0 ? -1 : len + (len > 0) + (ssize_t)strlen(name);
		if (clen >= PATH_MAX)
			clen = -1;
		if (clen >= 0) {
			if (len > 0)
				path[len] = '/';
			strcpy(path + clen - strlen(name), name);
			spec.redirect = tree_metacopy_path(&res, path);
		}
		r = create_copy(dst, name, &spec);
		if (r >= 0 && S_ISDIR(res.st.st_mode)) {
			_cleanup_close_ int cfd = openat(dst, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			struct ovl_stack cs;

			if (cfd < 0) {
				r = -errno;
			} else {
				ovl_mark_impure(cfd);
				ovl_res_stack(&res, &cs);
				r = copy_children(&cs, cfd, path, clen);
				if (r >= 0)
					r = set_times_at(dst, name, &res.st, 0);
			}
		}
		ovl_res_done(&res);
	}
	ovl_dirents_free(ents, n);
	return r;
}

int ovl_copy_tree_tmp(struct ovl_node *dir, char tmp[static 64])
{
	struct ovl_fs *fs = ovl_fs;
	_cleanup_close_ int cfd = -1;
	struct ovl_stack s;
	struct ovl_res self;
	char obuf[256];
	const char *origin;
	int r, top;

	/* copyup_lock is held: the node's fds are stable. Files under it being filled are read whole. */
	ovl_bgfill_flush();
	ovl_res_init(&self);
	ovl_node_stack(dir, &s);
	self.upper_fd = dir->upper_fd;
	self.lower_fd = dir->lower_fd;
	self.lower_layer = dir->lower_layer;
	top = dir->upper_fd >= 0 ? dir->upper_fd : dir->lower_fd;
	if (top < 0)
		return -ESTALE;
	if (fstatat(top, "", &self.st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	origin = origin_for(&self, obuf, sizeof(obuf));

	ovl_tmp_name(tmp);
	r = create_copy(fs->workwork_fd, tmp,
			&(struct copy_spec){ .src = top, .data = -1, .st = &self.st, .size = -1, .origin = origin });
	if (r >= 0) {
		cfd = openat(fs->workwork_fd, tmp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		r = cfd < 0 ? -errno : 0;
	}
	if (r >= 0) {
		char path[PATH_MAX];
		_cleanup_free_ char *p = NULL;

		/* Lower files below become metacopies named from the lower roots by their view path. */
		path[0] = '\0';
		if (ovl_node_path(dir, &p) >= 0 && strlen(p) < PATH_MAX)
			strcpy(path, p);
		r = copy_children(&s, cfd, path, p && strlen(p) < PATH_MAX ? (ssize_t)strlen(path) : -1);
	}
	if (r >= 0)
		r = ovl_fsetxattr(cfd, OVL_XATTR_OPAQUE, "y", 1, 0);
	if (r >= 0)
		ovl_mark_impure(cfd);
	if (r >= 0)
		r = set_times_at(fs->workwork_fd, tmp, &self.st, 0);
	if (r < 0)
		(void)ovl_core_rm_rf_at(fs->workwork_fd, tmp);
	return r;
}
