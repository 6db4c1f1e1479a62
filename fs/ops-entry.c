// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * FUSE operations on names and attributes: lookup, forget, getattr,
 * setattr, readlink, mknod, mkdir, symlink, unlink, rmdir, link, statfs.
 * Rename lives in ops-rename.c, file and directory handles in ops-file.c,
 * xattrs in xattr.c. New objects are created in upper by root and then
 * given the caller's (mapped) owner; a name that hides a lower entry gets
 * a whiteout, built in the work dir and renamed into place.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "acl.h"
#include "bgfill.h"
#include "fdpath.h"
#include "macro.h"
#include "metacopy.h"
#include "ops.h"
#include "ovl.h"

void ovl_mutate_begin(void)
{
	pthread_rwlock_rdlock(&ovl_fs->quiesce);
}

void ovl_mutate_end(void)
{
	pthread_rwlock_unlock(&ovl_fs->quiesce);
}

static _Thread_local bool in_entry_op;

void ovl_mutate_entry_begin(void)
{
	atomic_fetch_add(&ovl_fs->entry_ops, 1);
	in_entry_op = true;
	ovl_mutate_begin();
}

void ovl_mutate_entry_end(void)
{
	ovl_mutate_end();
	in_entry_op = false;
	/* ended before it leaves: who sees it gone sees the generation moved */
	atomic_fetch_add(&ovl_fs->entry_gen, 1);
	atomic_fetch_sub(&ovl_fs->entry_ops, 1);
}

void ovl_test_delay(atomic_int *cache, const char *var)
{
	int ms = atomic_load(cache);

	if (ms < 0) {
		const char *v = getenv(var);

		ms = v ? atoi(v) : 0;
		ms = ms > 0 && ms < 60000 ? ms : 0;
		atomic_store(cache, ms);
	}
	if (ms)
		usleep((useconds_t)ms * 1000);
}

uint64_t ovl_entry_gen(void)
{
	return atomic_load(&ovl_fs->entry_gen);
}

bool ovl_entry_ops_quiet(uint64_t gen)
{
	return atomic_load(&ovl_fs->entry_ops) <= (in_entry_op ? 1u : 0u) && atomic_load(&ovl_fs->entry_gen) == gen;
}

int ovl_quota_check(off_t add_bytes, int add_inodes)
{
	const struct ovl_options *o = ovl_fs->opt;

	if (o->quota_bytes && add_bytes > 0 &&
	    (uint64_t)atomic_load(&ovl_fs->used_bytes) + (uint64_t)add_bytes > o->quota_bytes)
		return -ENOSPC;
	if (o->quota_inodes && add_inodes > 0 &&
	    (uint64_t)atomic_load(&ovl_fs->used_inodes) + (uint64_t)add_inodes > o->quota_inodes)
		return -ENOSPC;
	atomic_fetch_add(&ovl_fs->used_bytes, add_bytes);
	atomic_fetch_add(&ovl_fs->used_inodes, add_inodes);
	return 0;
}

void ovl_quota_add(off_t bytes, int inodes)
{
	if (!ovl_fs->opt->quota_bytes && !ovl_fs->opt->quota_inodes)
		return;
	atomic_fetch_add(&ovl_fs->used_bytes, bytes);
	atomic_fetch_add(&ovl_fs->used_inodes, inodes);
}

int ovl_quota_scan(void)
{
	uint64_t inodes, bytes;
	int r;

	if (!ovl_fs->opt->quota_bytes && !ovl_fs->opt->quota_inodes)
		return 0;
	r = dir_usage_at(ovl_fs->upper_fd, ovl_upper_file_bytes, &inodes, &bytes);
	if (r < 0)
		return r;
	atomic_store(&ovl_fs->used_bytes, (int_fast64_t)bytes);
	atomic_store(&ovl_fs->used_inodes, (int_fast64_t)inodes);
	return 0;
}

void ovl_fill_entry(struct fuse_entry_param *e, struct ovl_node *n, const struct stat *st)
{
	memset(e, 0, sizeof(*e));
	e->ino = ovl_node_ino(n);
	e->attr = *st;
	e->attr_timeout = ovl_fs->timeout;
	e->entry_timeout = ovl_fs->timeout;
}

int ovl_lookup_node(struct ovl_node *p, const char *name, struct ovl_node **ret, struct stat *ret_st)
{
	struct ovl_res res;
	struct ovl_node *n;
	struct stat st;
	bool merged;
	int r;

	r = ovl_node_ensure(p);
	if (r < 0)
		return r;
	r = ovl_resolve_child_lazy(p, name, &res);
	if (r < 0)
		return r;
	st = res.st;
	merged = S_ISDIR(st.st_mode) && ((res.upper_fd >= 0 && res.lower_fd >= 0) || res.n_extra > 0);
	r = ovl_node_get(p, name, &res, &n);
	if (r < 0) {
		ovl_res_done(&res);
		return r;
	}
	ovl_stat_to_view(n, &st, merged);
	*ret = n;
	*ret_st = st;
	return 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	struct ovl_node *n;
	struct stat st;
	int r;

	r = ovl_lookup_node(ovl_node_from_ino(parent), name, &n, &st);
	if (r == -ENOENT) {
		memset(&e, 0, sizeof(e));
		e.entry_timeout = ovl_fs->timeout; /* negative entry, cached by the kernel */
		fuse_reply_entry(req, &e);
		return;
	}
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	ovl_fill_entry(&e, n, &st);
	if (fuse_reply_entry(req, &e) != 0)
		ovl_node_forget(n, 1);
	ovl_node_maybe_evict();
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	ovl_node_forget(ovl_node_from_ino(ino), nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		ovl_node_forget(ovl_node_from_ino(forgets[i].ino), forgets[i].nlookup);
	fuse_reply_none(req);
}

/* A split node's attributes change through its twin too: the kernel must ask each time. */
static double attr_timeout(struct ovl_node *n)
{
	return ovl_node_is_split(n) ? 0 : ovl_fs->timeout;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	struct stat st;
	int r;

	ovl_node_maybe_evict();
	r = ovl_node_getattr(n, &st);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, attr_timeout(n));
}

static int utimens_fd(int fd, const struct timespec ts[2])
{
	char p[64];

	if (utimensat(fd, "", ts, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOENT)
		return -errno;
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	return utimensat(AT_FDCWD, p, ts, 0) < 0 ? -errno : 0;
}

/*
 * Applies @attr to the upper object @fd (O_PATH; @hfd: an open handle of
 * it or -1; @bf: its background fill, locked, or NULL). Called with @n's
 * lock held shared.
 */
static int setattr_fd(struct ovl_node *n, int fd, int hfd, struct ovl_bgfill *bf, struct stat *attr, int to_set)
{
	const struct ovl_options *o = ovl_fs->opt;
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } };
	int r;

	/*
	 * Truncate by a caller without CAP_FSETID (the kernel's
	 * FATTR_KILL_SUIDGID, which libfuse passes as KILL_SUID): clear the
	 * set-id bits through the mode change below.
	 */
	if ((to_set & (FUSE_SET_ATTR_KILL_SUID | FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MODE)) ==
	    (FUSE_SET_ATTR_KILL_SUID | FUSE_SET_ATTR_SIZE)) {
		struct stat cur;
		mode_t kill;

		if (fstatat(fd, "", &cur, AT_EMPTY_PATH) < 0)
			return -errno;
		kill = ovl_setid_to_kill(cur.st_mode);
		if (kill) {
			attr->st_mode = cur.st_mode & ~kill;
			to_set |= FUSE_SET_ATTR_MODE;
		}
	}
	if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		uid_t uid = (to_set & FUSE_SET_ATTR_UID) ? ovl_idmap_to_disk(&o->uidmap, attr->st_uid) : (uid_t)-1;
		gid_t gid = (to_set & FUSE_SET_ATTR_GID) ? ovl_idmap_to_disk(&o->gidmap, attr->st_gid) : (gid_t)-1;

		if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	}
	if (to_set & FUSE_SET_ATTR_MODE) {
		if (n->type == S_IFLNK)
			return -EOPNOTSUPP;
		if (hfd >= 0) {
			if (fchmod(hfd, attr->st_mode & 07777) < 0)
				return -errno;
		} else if ((r = fd_chmod(fd, attr->st_mode & 07777)) < 0) {
			return r;
		}
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		_cleanup_close_ int wfd = -1;
		int tfd = hfd;
		struct stat cur;

		if (fstatat(fd, "", &cur, AT_EMPTY_PATH) == 0 && attr->st_size != cur.st_size) {
			if (attr->st_size > cur.st_size) {
				r = ovl_quota_check(attr->st_size - cur.st_size, 0);
				if (r < 0)
					return r;
			} else {
				ovl_quota_add(attr->st_size - cur.st_size, 0);
			}
		}
		if (tfd < 0)
			tfd = wfd = fd_reopen(fd, O_WRONLY);
		if (tfd < 0)
			return tfd;
		r = bf ? ovl_bgfill_truncate_locked(bf, tfd, attr->st_size) : ftruncate(tfd, attr->st_size) < 0 ? -errno : 0;
		if (r < 0)
			return r;
	}
	if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME)) {
		if (to_set & FUSE_SET_ATTR_ATIME_NOW)
			ts[0].tv_nsec = UTIME_NOW;
		else if (to_set & FUSE_SET_ATTR_ATIME)
			ts[0] = attr->st_atim;
		if (to_set & FUSE_SET_ATTR_MTIME_NOW)
			ts[1].tv_nsec = UTIME_NOW;
		else if (to_set & FUSE_SET_ATTR_MTIME)
			ts[1] = attr->st_mtim;
		if (hfd >= 0) {
			if (futimens(hfd, ts) < 0)
				return -errno;
		} else {
			r = utimens_fd(fd, ts);
			if (r < 0)
				return r;
		}
	}
	/* What the fill's copy is to put back from now on (fs/bgfill.h). */
	ovl_bgfill_note_attr(bf, ts, to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID));
	return 0;
}

static int do_setattr(struct ovl_node *n, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	int hfd = fi ? ovl_fh_fd(fi) : -1;
	int r = fi ? ovl_fh_rebind(n, fi) : 0;

	if (r < 0)
		return r;
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (!S_ISREG(n->type))
			return n->type == S_IFDIR ? -EISDIR : -EINVAL;
		r = ovl_copy_up_size(n, hfd >= 0 ? -1 : attr->st_size);
	} else {
		r = ovl_copy_up(n);
	}
	if (r < 0)
		return r;
	if (hfd >= 0 && ovl_fh_is_lower(fi))
		hfd = -1; /* opened before the copy-up: use the upper object */
	/* The upper fd is used under the node's lock instead of a dup (2 syscalls less per SETATTR); setattr_fd takes no lock. */
	r = ovl_node_rdlock_fresh(n);
	if (r < 0)
		return r;
	if (n->upper_fd >= 0) {
		/* A file being filled in the background changes with the fill's lock held (fs/bgfill.h). */
		struct ovl_bgfill *bf = S_ISREG(n->type) ? ovl_bgfill_get(n->upper_fd) : NULL;

		ovl_bgfill_lock(bf);
		r = setattr_fd(n, n->upper_fd, hfd, bf, attr, to_set);
		ovl_bgfill_unlock(bf);
		ovl_bgfill_put(bf);
	} else {
		r = -ENOENT;
	}
	pthread_rwlock_unlock(&n->lock);
	return r;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set, struct fuse_file_info *fi)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	struct stat st;
	int r;

	ovl_mutate_entry_begin(); /* a utimensat of a directory counts: a copy-up must not undo it */
	r = do_setattr(n, attr, to_set, fi);
	ovl_mutate_entry_end();
	if (r >= 0) {
		ovl_node_split_changed(n);
		r = ovl_node_getattr(n, &st);
	}
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, attr_timeout(n));
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	char buf[PATH_MAX + 1];
	ssize_t len;
	int r, fd;

	r = ovl_node_rdlock_fresh(n);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	fd = n->upper_fd >= 0 ? n->upper_fd : n->lower_fd;
	len = fd >= 0 ? readlinkat(fd, "", buf, sizeof(buf) - 1) : -1;
	r = len < 0 ? (fd >= 0 ? -errno : -ESTALE) : 0;
	pthread_rwlock_unlock(&n->lock);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	buf[len] = '\0';
	fuse_reply_readlink(req, buf);
}

/* Whether @p is a dir of the upper layer alone (new, or opaque): nothing but its upper dir can hold a name in it. */
static bool upper_only_dir(struct ovl_node *p)
{
	struct ovl_stack s;

	if (p->type != S_IFDIR || ovl_node_rdlock_fresh(p) < 0)
		return false;
	ovl_node_stack(p, &s);
	pthread_rwlock_unlock(&p->lock);
	return s.upper_fd >= 0 && s.n == 0;
}

static int prepare_create(fuse_req_t req, struct ovl_node *p, const char *name, bool may_skip,
			  struct ovl_create *c)
{
	const struct ovl_options *o = ovl_fs->opt;
	const struct fuse_ctx *ctx = req ? fuse_req_ctx(req) : NULL;
	struct ovl_res res;
	struct stat pst;
	int r;

	c->req = req;
	c->p = p;
	c->pfd = c->wfd = -1;
	c->over_whiteout = c->unresolved = false;
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	if (o->read_only)
		return -EROFS;
	r = ovl_node_ensure(p);
	if (r < 0)
		return r;
	/*
	 * In an upper-only dir the create's own O_EXCL (or mkdirat's, ...)
	 * says whether the name is taken: no lookup first. A whiteout there
	 * takes the name too; the caller then comes back through
	 * ovl_prepare_create_again(), which looks.
	 */
	c->unresolved = may_skip && upper_only_dir(p);
	if (!c->unresolved) {
		r = ovl_resolve_child(p, name, &res);
		if (r == 0) {
			ovl_res_done(&res);
			return -EEXIST;
		}
		if (r != -ENOENT)
			return r;
		c->over_whiteout = res.whiteout_in_upper;
	}
	c->origin[0] = '\0';
	r = ovl_copy_up(p);
	if (r < 0)
		return r;
	c->pfd = ovl_node_upper_dup(p);
	if (c->pfd < 0)
		return c->pfd;
	if (c->over_whiteout) {
		/* The name hides a lower entry: the new object inherits the whiteout's record (the first one). */
		char wp[32 + NAME_MAX];
		ssize_t n;

		/* Read through the dir's magic link: no open + close of the whiteout. */
		snprintf(wp, sizeof(wp), "/proc/self/fd/%d/%s", c->pfd, name);
		n = lgetxattr(wp, OVL_XATTR_ORIGIN, c->origin, sizeof(c->origin) - 1);

		c->origin[n > 0 ? n : 0] = '\0';
		/* " new": a different object than the origin (st_ino is its own); parsers ignore the suffix. */
		if (n > 0 && (n < 4 || strcmp(c->origin + n - 4, " new") != 0) && (size_t)n + 5 < sizeof(c->origin))
			strcat(c->origin, " new");
	} else {
		bool merged;

		pthread_rwlock_rdlock(&p->lock);
		merged = !(p->upper_fd >= 0 && p->opaque) && (p->lower_fd >= 0 || p->n_extra > 0);
		pthread_rwlock_unlock(&p->lock);
		/* Lower had nothing here: commit can tell a conflict if the target gains the name meanwhile. */
		if (merged)
			strcpy(c->origin, "v1 none");
	}
	if (c->over_whiteout && req) {
		r = ovl_acl_inherit_dir(c->pfd, c->wname);
		if (r >= 0)
			c->wfd = r;
		else if (r != -ENODATA)
			return r;
	}
	if (fstatat(c->pfd, "", &pst, AT_EMPTY_PATH) < 0)
		return -errno;
	c->uid = ctx ? ovl_idmap_to_disk(&o->uidmap, ctx->uid) : (uid_t)-1;
	c->gid = (pst.st_mode & S_ISGID) ? pst.st_gid : ctx ? ovl_idmap_to_disk(&o->gidmap, ctx->gid) : (gid_t)-1;
	return ovl_quota_check(0, 1);
}

int ovl_prepare_create(fuse_req_t req, struct ovl_node *p, const char *name, struct ovl_create *c)
{
	return prepare_create(req, p, name, true, c);
}

int ovl_prepare_create_again(struct ovl_create *c, const char *name)
{
	fuse_req_t req = c->req;
	struct ovl_node *p = c->p;

	ovl_create_done(c);
	return prepare_create(req, p, name, false, c);
}

void ovl_create_set_origin(const struct ovl_create *c, int dir, const char *name, int fd)
{
	if (!c->origin[0])
		return;
	if (fd >= 0)
		(void)ovl_fsetxattr(fd, OVL_XATTR_ORIGIN, c->origin, strlen(c->origin), 0);
	else
		(void)ovl_lsetxattr_at(dir, name, OVL_XATTR_ORIGIN, c->origin, strlen(c->origin), 0);
}

int ovl_finish_create(struct ovl_create *c, const char *name, const char *tmp, bool is_dir)
{
	int w = ovl_create_work_fd(c);

	if (!c->over_whiteout)
		return 0;
	if (!is_dir)
		return renameat(w, tmp, c->pfd, name) < 0 ? -errno : 0;
	if (renameat2(w, tmp, c->pfd, name, RENAME_EXCHANGE) < 0)
		return -errno;
	(void)unlinkat(w, tmp, 0); /* the old whiteout */
	return 0;
}

void ovl_create_done(struct ovl_create *c)
{
	c->pfd = safe_close(c->pfd);
	if (c->wfd >= 0) {
		c->wfd = safe_close(c->wfd);
		(void)ovl_core_rm_rf_at(ovl_fs->workwork_fd, c->wname);
	}
}

int ovl_create_special_bits(int fd, const char *at, mode_t mode)
{
	struct stat st;
	int r;

	if (!(mode & 07000))
		return 0;
	r = at ? fstatat(fd, at, &st, AT_SYMLINK_NOFOLLOW) : fstat(fd, &st);
	if (r < 0)
		return -errno;
	/* The permission bits stay as the create made them (the umask or a default ACL had their say). */
	mode = (st.st_mode & 07777) | (mode & 07000);
	r = at ? fchmodat(fd, at, mode, 0) : fchmod(fd, mode);
	return r < 0 ? -errno : 0;
}

/* Creates a non-regular object (dir, node, symlink) per @kind. Returns 0 or -errno. */
static int create_object(struct ovl_create *c, const char *name, mode_t mode, dev_t rdev, const char *link)
{
	char tmp[64];
	const char *at;
	int dir = ovl_create_target(c, name, tmp, &at);
	int r;
	bool um;

	um = !link && ovl_umask_begin(c->req, c->p, &mode);
	if (S_ISDIR(mode))
		r = mkdirat(dir, at, mode & 07777);
	else if (link)
		r = symlinkat(link, dir, at);
	else
		r = mknodat(dir, at, mode, rdev);
	if (r < 0)
		r = -errno;
	ovl_umask_end(um);
	if (r < 0)
		return r;
	if ((c->uid != 0 || c->gid != 0) && fchownat(dir, at, c->uid, c->gid, AT_SYMLINK_NOFOLLOW) < 0) {
		r = -errno;
		goto fail;
	}
	if (!link && (mode & 06000)) {
		r = ovl_create_special_bits(dir, at, mode & 06000);
		if (r < 0)
			goto fail;
	}
	if (c->over_whiteout && S_ISDIR(mode)) {
		r = ovl_lsetxattr_at(dir, at, OVL_XATTR_OPAQUE, "y", 1, 0);
		if (r < 0)
			goto fail;
	}
	ovl_create_set_origin(c, dir, at, -1);
	r = ovl_finish_create(c, name, tmp, S_ISDIR(mode));
	if (r < 0)
		goto fail;
	return 0;
fail:
	(void)ovl_core_rm_rf_at(dir, at);
	return r;
}

int ovl_new_node(struct ovl_node *p, const char *name, int pfd, bool opaque, struct ovl_node **ret,
		 struct stat *ret_st, struct stat *ret_upper_st)
{
	struct ovl_res res;
	struct ovl_node *n;
	struct stat st;
	int r;

	ovl_res_init(&res);
	res.upper_fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (res.upper_fd < 0)
		return -errno;
	if (fstatat(res.upper_fd, "", &res.st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		r = -errno;
		ovl_res_done(&res);
		return r;
	}
	/* What ovl_resolve_child() finds for it: upper only, its own st_ino (a "v1 none" or " new" record). */
	res.opaque = opaque && S_ISDIR(res.st.st_mode);
	res.key_dev = res.st.st_dev;
	res.key_ino = res.st.st_ino;
	res.ino = ovl_view_ino(-1, res.st.st_ino);
	res.hashable = true;
	st = res.st;
	if (ret_upper_st)
		*ret_upper_st = res.st;
	r = ovl_node_get(p, name, &res, &n);
	if (r < 0) {
		ovl_res_done(&res);
		return r;
	}
	ovl_stat_to_view(n, &st, false);
	*ret = n;
	*ret_st = st;
	return 0;
}

static void reply_new_entry(fuse_req_t req, struct ovl_node *n, const struct stat *st)
{
	struct fuse_entry_param e;

	ovl_fill_entry(&e, n, st);
	if (fuse_reply_entry(req, &e) != 0)
		ovl_node_forget(n, 1);
}

static void do_create_object(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev,
			     const char *link)
{
	struct ovl_node *p = ovl_node_from_ino(parent);
	struct ovl_create c;
	struct ovl_node *n;
	struct stat st;
	int r;

	ovl_mutate_entry_begin();
	r = ovl_prepare_create(req, p, name, &c);
	if (r >= 0)
		r = create_object(&c, name, mode, rdev, link);
	if (ovl_create_retry(&c, name, &r))
		r = create_object(&c, name, mode, rdev, link);
	/* The new object's node from what we know of it, not a second resolution across the layers. */
	if (r >= 0)
		r = ovl_new_node(p, name, c.pfd, c.over_whiteout, &n, &st, NULL);
	ovl_create_done(&c);
	ovl_mutate_entry_end();
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		reply_new_entry(req, n, &st);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	if (S_ISCHR(mode) && rdev == 0) {
		fuse_reply_err(req, EPERM); /* would be a whiteout */
		return;
	}
	if (!S_ISREG(mode) && !S_ISCHR(mode) && !S_ISBLK(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	do_create_object(req, parent, name, mode, rdev, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	do_create_object(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	do_create_object(req, parent, name, S_IFLNK | 0777, 0, link);
}

/* The origin record a whiteout replacing @res should carry: the upper object's own, else the lower's. */
int ovl_whiteout_tmp_for(const struct ovl_res *res, char tmp[static 64])
{
	char buf[256];
	struct stat lst;
	ssize_t n;

	if (res->upper_fd >= 0) {
		n = ovl_fgetxattr(res->upper_fd, OVL_XATTR_ORIGIN, buf, sizeof(buf) - 1);
		if (n > 0)
			return ovl_make_whiteout_rec(tmp, buf, (size_t)n);
		if (res->lower_fd >= 0 && fstatat(res->lower_fd, "", &lst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0)
			return ovl_make_whiteout_tmp(tmp, res->lower_layer, &lst);
		return ovl_make_whiteout_tmp(tmp, 0, NULL);
	}
	/* No upper object: res->st is the (top) lower object's, no need to stat it again. */
	if (res->lower_fd >= 0)
		return ovl_make_whiteout_tmp(tmp, res->lower_layer, &res->st);
	return ovl_make_whiteout_tmp(tmp, 0, NULL);
}

/*
 * Gives @n, if it is a stale node of the object @res (its fds dropped by an
 * eviction, or by a subtree copy that moved it), @res's fds: once the name
 * is gone it could not be resolved again, and an fd still open on it
 * (O_PATH ones included) would get ESTALE where a local filesystem goes on
 * serving the unlinked file. For an evicted metacopy it is the only way
 * back: the file handle kept at eviction finds the upper inode, which is
 * gone once unlinked, because an open file of a metacopy holds the lower
 * data, not it.
 */
static void freshen_stale(struct ovl_node *n, struct ovl_res *res)
{
	bool same;

	if (!atomic_load(&n->stale))
		return;
	pthread_mutex_lock(&ovl_fs->copyup_lock);
	pthread_mutex_lock(&ovl_fs->table_lock);
	/* A subtree copy gave the object another top inode, with the view's st_ino of the first. */
	same = (n->key_dev == res->key_dev && n->key_ino == res->key_ino) || n->ino == res->ino;
	pthread_mutex_unlock(&ovl_fs->table_lock);
	if (same && atomic_load(&n->stale))
		ovl_node_apply(n, res);
	pthread_mutex_unlock(&ovl_fs->copyup_lock);
}

/* Duplicates the fds of @src into @dst (the rest copied as is). Returns 0 or -errno (@dst then holds none). */
static int res_dup(const struct ovl_res *src, struct ovl_res *dst)
{
	int r;

	*dst = *src;
	dst->upper_fd = dst->lower_fd = -1;
	dst->n_extra = 0;
	if (src->upper_fd >= 0 && (dst->upper_fd = fcntl(src->upper_fd, F_DUPFD_CLOEXEC, 3)) < 0)
		goto fail;
	if (src->lower_fd >= 0 && (dst->lower_fd = fcntl(src->lower_fd, F_DUPFD_CLOEXEC, 3)) < 0)
		goto fail;
	for (uint16_t i = 0; i < src->n_extra; i++) {
		dst->extra[i].fd = fcntl(src->extra[i].fd, F_DUPFD_CLOEXEC, 3);
		if (dst->extra[i].fd < 0)
			goto fail;
		dst->n_extra++;
	}
	return 0;
fail:
	r = -errno;
	ovl_res_done(dst);
	return r;
}

/*
 * freshen_stale() with copies of @res's fds (the remove still needs them):
 * before the name goes, so no request finds @n stale without it.
 */
static void freshen_stale_copy(struct ovl_node *n, const struct ovl_res *res)
{
	struct ovl_res c;

	if (atomic_load(&n->stale) && res_dup(res, &c) >= 0) {
		freshen_stale(n, &c);
		ovl_res_done(&c);
	}
}

/*
 * Forgets the name index entry of @n (pinned: the node at the name just
 * removed; NULL: none) and unpins it; @res is what the name was (a node
 * evicted since freshen_stale_copy() takes its fds again).
 */
static void drop_removed(struct ovl_node *n, bool keep_identity, struct ovl_res *res)
{
	if (!n)
		return;
	freshen_stale(n, res);
	ovl_node_unhash_name(n, !keep_identity); /* other hard links keep the identity */
	ovl_node_unpin(n);
}

/* The upper part of a remove: @res (resolved at @pfd/@name, the parent's upper dir) goes away or becomes a whiteout. */
static int remove_upper(int pfd, const char *name, const struct ovl_res *res, bool dir, bool *ret_keep_identity)
{
	struct ovl_fs *fs = ovl_fs;
	char tmp[64];
	int r;

	*ret_keep_identity = false;
	if (res->lower_exists) {
		r = ovl_whiteout_tmp_for(res, tmp);
		if (r < 0)
			return r;
		if (res->upper_fd < 0)
			r = renameat2(fs->workwork_fd, tmp, pfd, name, RENAME_NOREPLACE);
		else if (!dir)
			r = renameat(fs->workwork_fd, tmp, pfd, name);
		else
			r = renameat2(fs->workwork_fd, tmp, pfd, name, RENAME_EXCHANGE);
		if (r < 0) {
			r = -errno;
			(void)unlinkat(fs->workwork_fd, tmp, 0);
			return r;
		}
		if (dir && res->upper_fd >= 0)
			ovl_work_reap(tmp); /* the old upper dir, maybe with whiteouts */
		if (res->upper_fd < 0) {
			ovl_quota_add(0, 1); /* a new whiteout */
		} else if (!dir) {
			struct stat st;

			/* Other hard links of the replaced upper file keep its node (and nodeid). */
			*ret_keep_identity = fstatat(res->upper_fd, "", &st, AT_EMPTY_PATH) == 0 && st.st_nlink > 0;
			if (!*ret_keep_identity)
				ovl_quota_add(-res->st.st_size, 0);
		}
	} else if (!dir) {
		struct stat st;

		if (unlinkat(pfd, name, 0) < 0)
			return -errno;
		*ret_keep_identity = fstatat(res->upper_fd, "", &st, AT_EMPTY_PATH) == 0 && st.st_nlink > 0;
		if (!*ret_keep_identity)
			ovl_quota_add(S_ISREG(res->st.st_mode) ? -res->st.st_size : 0, -1);
	} else if (unlinkat(pfd, name, AT_REMOVEDIR) < 0) {
		if (errno != ENOTEMPTY && errno != EEXIST)
			return -errno;
		/* Only whiteouts left inside: move it out of the way atomically, then clean. */
		ovl_tmp_name(tmp);
		if (renameat(pfd, name, fs->workwork_fd, tmp) < 0)
			return -errno;
		ovl_work_reap(tmp);
		ovl_quota_add(0, -1);
	} else {
		ovl_quota_add(0, -1);
	}
	return 0;
}

/* An object's identity in the node index (struct ovl_node's key). */
struct identity {
	dev_t dev;
	ino_t ino;
};

/*
 * Removes @p/@name. If other hard links keep the file, *ret_kept (if not NULL) gets its identity (else stays 0):
 * the caller drops the cached attributes of its node once no lock is held.
 */
static int do_remove(struct ovl_node *p, const char *name, bool dir, struct identity *ret_kept)
{
	struct ovl_fs *fs = ovl_fs;
	struct ovl_node *victim = NULL;
	struct ovl_res res;
	bool keep_identity = false;
	int r;

	if (fs->opt->read_only)
		return -EROFS;
	r = ovl_node_ensure(p);
	if (r < 0)
		return r;
	r = ovl_resolve_child(p, name, &res);
	if (r < 0)
		return r;
	if (dir && !S_ISDIR(res.st.st_mode)) {
		r = -ENOTDIR;
		goto out;
	}
	if (!dir && S_ISDIR(res.st.st_mode)) {
		r = -EISDIR;
		goto out;
	}
	if (dir) {
		struct ovl_stack s;

		ovl_res_stack(&res, &s);
		r = ovl_stack_is_empty(&s);
		if (r < 0)
			goto out;
		if (r == 0) {
			r = -ENOTEMPTY;
			goto out;
		}
	}
	r = ovl_copy_up(p);
	if (r < 0)
		goto out;
	victim = ovl_node_find_child_pinned(p, name);
	if (victim)
		freshen_stale_copy(victim, &res);
	/* The parent's upper fd is used under its lock (shared) instead of a dup. */
	r = ovl_node_rdlock_fresh(p);
	if (r < 0)
		goto out;
	r = p->upper_fd >= 0 ? remove_upper(p->upper_fd, name, &res, dir, &keep_identity) : -ENOENT;
	pthread_rwlock_unlock(&p->lock);
	if (r >= 0) {
		drop_removed(victim, keep_identity, &res);
		victim = NULL;
	}
	if (r >= 0 && keep_identity && ret_kept) {
		ret_kept->dev = res.key_dev;
		ret_kept->ino = res.key_ino;
	}
out:
	ovl_node_unpin(victim);
	ovl_res_done(&res);
	return r;
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct identity kept = { 0 };
	int r;

	ovl_mutate_entry_begin();
	r = do_remove(ovl_node_from_ino(parent), name, false, &kept);
	ovl_mutate_entry_end();
	/*
	 * The kernel drops st_nlink of the inode this name led it to; the
	 * file's other names may lead to another one (a node split by
	 * passthrough.c), whose st_nlink is then stale. Attributes only.
	 */
	if (kept.ino)
		ovl_node_inval_identity(kept.dev, kept.ino);
	fuse_reply_err(req, -r);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	int r;

	ovl_mutate_entry_begin();
	r = do_remove(ovl_node_from_ino(parent), name, true, NULL);
	ovl_mutate_entry_end();
	fuse_reply_err(req, -r);
}

static int do_link(struct ovl_node *n, struct ovl_node *np, const char *name)
{
	struct ovl_create c;
	_cleanup_close_ int fd = -1;
	char tmp[64], p[64];
	int dir, r;
	const char *at;

	if (n->type == S_IFDIR)
		return -EPERM;
	r = ovl_copy_up_movable(n);
	if (r < 0)
		return r;
	r = ovl_prepare_create(NULL, np, name, &c);
	if (r < 0)
		goto out;
	fd = ovl_node_upper_dup(n);
	if (fd < 0) {
		r = fd;
		goto out;
	}
	do {
		dir = ovl_create_target(&c, name, tmp, &at);
		r = linkat(fd, "", dir, at, AT_EMPTY_PATH) < 0 ? -errno : 0;
		if (r < 0 && r != -EEXIST) {
			snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
			r = linkat(AT_FDCWD, p, dir, at, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
		}
	} while (ovl_create_retry(&c, name, &r));
	if (r < 0)
		goto out;
	r = ovl_finish_create(&c, name, tmp, false);
	if (r < 0)
		(void)unlinkat(dir, at, 0);
out:
	ovl_create_done(&c);
	return r;
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	struct fuse_entry_param e;
	struct stat st;
	int r;

	if (ovl_node_is_split(n)) {
		/* The new name must lead to the node that took its place: link(2) walks again. */
		fuse_reply_err(req, ESTALE);
		return;
	}
	ovl_mutate_entry_begin();
	r = do_link(n, ovl_node_from_ino(newparent), newname);
	ovl_mutate_entry_end();
	if (r >= 0)
		r = ovl_node_getattr(n, &st);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	ovl_node_ref(n);
	ovl_fill_entry(&e, n, &st);
	if (fuse_reply_entry(req, &e) != 0)
		ovl_node_forget(n, 1);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	if (fstatvfs(ovl_fs->upper_fd, &sv) < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	fuse_reply_statfs(req, &sv);
}

const struct fuse_lowlevel_ops ovl_ops = {
	.init = ovl_op_init,
	.destroy = ovl_op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.symlink = op_symlink,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = ovl_op_rename,
	.link = op_link,
	.open = ovl_op_open,
	.read = ovl_op_read,
	.write_buf = ovl_op_write_buf,
	/* No .flush: it has nothing to do (writes are not buffered here), and ENOSYS makes the kernel stop sending FLUSH on every close. */
	.release = ovl_op_release,
	.fsync = ovl_op_fsync,
	.opendir = ovl_op_opendir,
	.readdir = ovl_op_readdir,
	.readdirplus = ovl_op_readdirplus,
	.releasedir = ovl_op_releasedir,
	.fsyncdir = ovl_op_fsyncdir,
	.statfs = op_statfs,
	.setxattr = ovl_op_setxattr,
	.getxattr = ovl_op_getxattr,
	.listxattr = ovl_op_listxattr,
	.removexattr = ovl_op_removexattr,
	.access = ovl_op_access,
	.create = ovl_op_create,
	.fallocate = ovl_op_fallocate,
	.copy_file_range = ovl_op_copy_file_range,
	.lseek = ovl_op_lseek,
};
