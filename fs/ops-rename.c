// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * rename(2) on the merged view, incl. RENAME_NOREPLACE and RENAME_EXCHANGE,
 * never EXDEV. A non-directory is copied up and renamed; when the old name
 * hides a lower entry the rename leaves a whiteout there atomically
 * (RENAME_WHITEOUT). A directory that merges lower content is moved as a
 * full copy of its merged subtree (data by reflink/copy_file_range, upper
 * files hard-linked) built in the work dir, renamed into place as an
 * opaque directory, and the old name becomes a whiteout: the same tree the
 * kernel shows from our upper with its default options (no redirect_dir).
 * Renames are serialized by copyup_lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "macro.h"
#include "ops.h"
#include "ovl.h"

/*
 * Set while this thread's rename holds the quiesce lock exclusive, as one
 * that copies a directory's subtree must: the kernel locks only the two
 * parents of a rename, not the moved directory's subdirectories, so a
 * create, mkdir, unlink or rename in one of them could land in the old
 * upper tree after the copy listed it, and go away with that tree.
 */
static __thread bool tl_tree_excl;

static bool node_is_merged_dir(struct ovl_node *n)
{
	bool r;

	pthread_rwlock_rdlock(&n->lock);
	r = n->type == S_IFDIR && !(n->upper_fd >= 0 && n->opaque) && (n->lower_fd >= 0 || n->n_extra > 0);
	pthread_rwlock_unlock(&n->lock);
	return r;
}

/* Nodes whose objects a subtree copy replaced: their kernel attributes are dropped after the reply. */
struct stale_list {
	fuse_ino_t *v;
	size_t n, cap;
};
static __thread struct stale_list *tl_stale;

static void mark_stale_attrs(struct ovl_node *d)
{
	if (!tl_stale)
		return;
	if (tl_stale->n == tl_stale->cap) {
		size_t nc = tl_stale->cap ? tl_stale->cap * 2 : 64;
		fuse_ino_t *nv = realloc(tl_stale->v, nc * sizeof(*nv));

		if (!nv)
			return; /* the attributes expire on their own */
		tl_stale->v = nv;
		tl_stale->cap = nc;
	}
	tl_stale->v[tl_stale->n++] = ovl_node_ino(d);
}

static void mark_stale_cb(struct ovl_node *d, void *ud)
{
	/*
	 * Upper non-directories were hard-linked into the copy: their fds
	 * still name the same inodes (and a hard link elsewhere may be all the
	 * kernel knows them by). Only their attributes go: a GETATTR while the
	 * old link was there counted it in st_nlink. Everything else is
	 * re-resolved.
	 */
	mark_stale_attrs(d);
	if (d->type != S_IFDIR && d->upper_fd >= 0)
		return;
	atomic_store(&d->stale, true);
	ovl_xattr_absent_forget(d);
}

/* Points @n at the upper directory now at @pfd/@name (opaque, no lower) and marks its subtree stale. */
static int adopt_upper_dir(struct ovl_node *n, int pfd, const char *name)
{
	struct ovl_res res;

	ovl_res_init(&res);
	res.upper_fd = openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (res.upper_fd < 0)
		return -errno;
	if (fstatat(res.upper_fd, "", &res.st, AT_EMPTY_PATH) < 0) {
		ovl_res_done(&res);
		return -errno;
	}
	res.key_dev = res.st.st_dev;
	res.key_ino = res.st.st_ino;
	res.hashable = true;
	res.opaque = true;
	ovl_node_apply(n, &res);
	ovl_res_done(&res);
	ovl_node_foreach_descendant(n, mark_stale_cb, NULL);
	return 0;
}

/* Moves work/@tmp to @pfd/@name, over whatever upper entry is there (a whiteout or an empty dir). */
static int place_tmp(const char *tmp, int pfd, const char *name, bool replace)
{
	struct ovl_fs *fs = ovl_fs;

	if (!replace)
		return renameat2(fs->workwork_fd, tmp, pfd, name, RENAME_NOREPLACE) < 0 ? -errno : 0;
	if (renameat2(fs->workwork_fd, tmp, pfd, name, RENAME_EXCHANGE) < 0)
		return -errno;
	ovl_work_reap_replaced(tmp); /* what was there before: its links to the copy now, the rest in the background */
	return 0;
}

/* Replaces the merged dir @n (resolved as @res at @pfd/@name) by an opaque full copy in place. */
static int materialize_dir(struct ovl_node *n, const struct ovl_res *res, int pfd, const char *name)
{
	char tmp[64];
	int r;

	r = ovl_copy_tree_tmp(n, tmp);
	if (r < 0)
		return r;
	r = place_tmp(tmp, pfd, name, res->upper_fd >= 0);
	if (r < 0) {
		(void)ovl_core_rm_rf_at(ovl_fs->workwork_fd, tmp);
		return r;
	}
	return adopt_upper_dir(n, pfd, name);
}

static int set_opaque(struct ovl_node *n)
{
	int fd = ovl_node_upper_dup(n), r;

	if (fd < 0)
		return fd;
	r = ovl_fsetxattr(fd, OVL_XATTR_OPAQUE, "y", 1, 0);
	close(fd);
	if (r >= 0) {
		pthread_rwlock_wrlock(&n->lock);
		n->opaque = true;
		pthread_rwlock_unlock(&n->lock);
	}
	return r;
}

/* Writes the origin record for the whiteout just left at @pfd/@name by RENAME_WHITEOUT. Best effort. */
static void whiteout_origin(int pfd, const char *name, int moved_dir_fd, const char *moved_name,
			    const struct ovl_res *src)
{
	char buf[256], p[32 + NAME_MAX];
	ssize_t n = -1;
	struct stat lst;

	/* The moved object's record, read through its dir's magic link (no open + close). */
	snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", moved_dir_fd, moved_name);
	n = lgetxattr(p, OVL_XATTR_ORIGIN, buf, sizeof(buf) - 1);
	if (n <= 0) {
		if (src->lower_fd < 0 || fstatat(src->lower_fd, "", &lst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
			return;
		n = ovl_origin_format(buf, sizeof(buf), src->lower_layer, &lst);
	}
	(void)ovl_lsetxattr_at(pfd, name, OVL_XATTR_ORIGIN, buf, (size_t)n, 0);
}

/* rename with a whiteout left at the old name; falls back to two steps where RENAME_WHITEOUT is missing. */
static int rename_whiteout(int pfd, const char *name, int npfd, const char *nname, unsigned flags,
			   const struct ovl_res *src)
{
	char tmp[64];
	int r;

	if (renameat2(pfd, name, npfd, nname, flags | RENAME_WHITEOUT) == 0) {
		whiteout_origin(pfd, name, npfd, nname, src);
		return 0;
	}
	if (errno != EINVAL && errno != EOPNOTSUPP)
		return -errno;
	r = ovl_whiteout_tmp_for(src, tmp);
	if (r < 0)
		return r;
	if (renameat2(pfd, name, npfd, nname, flags) < 0) {
		r = -errno;
		(void)unlinkat(ovl_fs->workwork_fd, tmp, 0);
		return r;
	}
	if (renameat2(ovl_fs->workwork_fd, tmp, pfd, name, RENAME_NOREPLACE) < 0) {
		r = -errno;
		(void)unlinkat(ovl_fs->workwork_fd, tmp, 0);
		return r;
	}
	return 0;
}

/*
 * The origin record of what the name @nname hides below (before the rename replaces it): the replaced upper
 * object's or whiteout's record, else the lower object's. Returns buf, or NULL if there is none.
 */
static const char *dst_origin(const struct ovl_res *dst, int npfd, const char *nname, char *buf, size_t size)
{
	struct stat lst;
	ssize_t n = -1;

	if (!dst->lower_exists)
		return NULL;
	if (dst->upper_fd >= 0) {
		n = ovl_fgetxattr(dst->upper_fd, OVL_XATTR_ORIGIN, buf, size - 1);
	} else if (dst->whiteout_in_upper) {
		int fd = openat(npfd, nname, O_PATH | O_NOFOLLOW | O_CLOEXEC);

		if (fd >= 0) {
			n = ovl_fgetxattr(fd, OVL_XATTR_ORIGIN, buf, size - 1);
			close(fd);
		}
	}
	if (n > 0) {
		buf[n] = '\0';
		if (strncmp(buf, "v1 layer=", 9) == 0)
			return buf;
	}
	if (dst->lower_fd >= 0 && fstatat(dst->lower_fd, "", &lst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0) {
		ovl_origin_format(buf, size, dst->lower_layer, &lst);
		return buf;
	}
	return NULL;
}

/*
 * A file moved over a name that hides a lower entry (sed -i, editors' atomic saves) shadows that entry now:
 * it takes its record, marked " new" unless it is a copy of that very object (then st_ino stays the origin's).
 */
static void retarget_origin(int npfd, const char *nname, const char *record)
{
	char cur[256], out[300];
	unsigned long long cdev, cino, ddev, dino;
	unsigned layer;
	ssize_t n;
	bool same = false;
	int fd = openat(npfd, nname, O_PATH | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return;
	n = ovl_fgetxattr(fd, OVL_XATTR_ORIGIN, cur, sizeof(cur) - 1);
	if (n > 0) {
		cur[n] = '\0';
		same = sscanf(cur, "v1 layer=%u dev=%llu ino=%llu", &layer, &cdev, &cino) == 3 &&
		       sscanf(record, "v1 layer=%u dev=%llu ino=%llu", &layer, &ddev, &dino) == 3 && cdev == ddev &&
		       cino == dino && !(n >= 4 && strcmp(cur + n - 4, " new") == 0);
	}
	snprintf(out, sizeof(out), "%s", record);
	n = (ssize_t)strlen(out);
	if (!same && !(n >= 4 && strcmp(out + n - 4, " new") == 0) && (size_t)n + 5 < sizeof(out))
		strcat(out, " new");
	(void)ovl_fsetxattr(fd, OVL_XATTR_ORIGIN, out, strlen(out), 0);
	close(fd);
}

static int get_node(struct ovl_node *p, const char *name, struct ovl_node **ret)
{
	struct stat st;

	return ovl_lookup_node(p, name, ret, &st);
}

/*
 * The node of @p/@name, just resolved as @res: the cached node when it is
 * fresh and is that very object (saves resolving the name across the
 * layers a second time; *ret_pinned: release it with ovl_node_unpin()),
 * else a lookup (release with ovl_node_forget()). copyup_lock is held, so
 * the node's identity cannot change meanwhile.
 */
static int get_node_for(struct ovl_node *p, const char *name, const struct ovl_res *res, struct ovl_node **ret,
			bool *ret_pinned)
{
	struct ovl_node *n = ovl_node_find_child_pinned(p, name);

	if (n && !atomic_load(&n->stale) && n->type == (res->st.st_mode & S_IFMT) && n->key_dev == res->key_dev &&
	    n->key_ino == res->key_ino && n->ino == res->ino) {
		*ret = n;
		*ret_pinned = true;
		return 0;
	}
	ovl_node_unpin(n);
	*ret_pinned = false;
	return get_node(p, name, ret);
}

static int do_rename(struct ovl_node *p, const char *name, struct ovl_node *np, const char *nname, unsigned flags)
{
	struct ovl_fs *fs = ovl_fs;
	struct ovl_res src, dst;
	struct ovl_node *sn = NULL, *dn = NULL, *replaced = NULL;
	_cleanup_close_ int pfd = -1, npfd = -1;
	bool dst_exists, dst_upper_entry, src_dir, sn_pinned = false;
	int r;

	ovl_res_init(&src);
	ovl_res_init(&dst);
	if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
		return -EINVAL;
	if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))
		return -EINVAL;
	if (fs->opt->read_only)
		return -EROFS;
	if (strlen(name) > NAME_MAX || strlen(nname) > NAME_MAX)
		return -ENAMETOOLONG;
	r = ovl_node_ensure(p);
	if (r >= 0)
		r = ovl_node_ensure(np);
	if (r < 0)
		return r;
	if (p == np && strcmp(name, nname) == 0)
		return 0;

	r = ovl_resolve_child(p, name, &src);
	if (r < 0)
		return r;
	r = ovl_resolve_child(np, nname, &dst);
	if (r < 0 && r != -ENOENT)
		goto out;
	dst_exists = r == 0;
	dst_upper_entry = dst.upper_fd >= 0 || dst.whiteout_in_upper;
	src_dir = S_ISDIR(src.st.st_mode);
	r = 0;

	if ((flags & RENAME_NOREPLACE) && dst_exists) {
		r = -EEXIST;
		goto out;
	}
	if ((flags & RENAME_EXCHANGE) && !dst_exists) {
		r = -ENOENT;
		goto out;
	}
	if (dst_exists && !(flags & RENAME_EXCHANGE)) {
		bool dst_dir = S_ISDIR(dst.st.st_mode);

		if (src_dir && !dst_dir) {
			r = -ENOTDIR;
			goto out;
		}
		if (!src_dir && dst_dir) {
			r = -EISDIR;
			goto out;
		}
		if (dst_dir) {
			struct ovl_stack s;

			ovl_res_stack(&dst, &s);
			r = ovl_stack_is_empty(&s);
			if (r < 0)
				goto out;
			if (r == 0) {
				r = -ENOTEMPTY;
				goto out;
			}
			r = 0;
		}
		if (src.upper_fd >= 0 && dst.upper_fd >= 0 && src.st.st_dev == dst.st.st_dev &&
		    src.st.st_ino == dst.st.st_ino)
			goto out; /* two links of one file: nothing to do */
	}

	r = ovl_copy_up(p);
	if (r >= 0)
		r = ovl_copy_up(np);
	if (r >= 0)
		r = get_node_for(p, name, &src, &sn, &sn_pinned);
	if (r >= 0 && dst_exists)
		r = get_node(np, nname, &dn);
	if (r < 0)
		goto out;
	pfd = ovl_node_upper_dup(p);
	npfd = ovl_node_upper_dup(np);
	if (pfd < 0 || npfd < 0) {
		r = pfd < 0 ? pfd : npfd;
		goto out;
	}

	if (!tl_tree_excl && (node_is_merged_dir(sn) || ((flags & RENAME_EXCHANGE) && node_is_merged_dir(dn)))) {
		r = -EAGAIN; /* a subtree copy: ovl_op_rename() does it again holding the quiesce lock alone */
		goto out;
	}
	if (flags & RENAME_EXCHANGE) {
		if (node_is_merged_dir(sn))
			r = materialize_dir(sn, &src, pfd, name);
		else
			r = ovl_copy_up_movable(sn);
		if (r >= 0 && node_is_merged_dir(dn))
			r = materialize_dir(dn, &dst, npfd, nname);
		else if (r >= 0)
			r = ovl_copy_up_movable(dn);
		if (r >= 0 && src_dir && dst.lower_exists)
			r = set_opaque(sn);
		if (r >= 0 && dn->type == S_IFDIR && src.lower_exists)
			r = set_opaque(dn);
		if (r >= 0 && renameat2(pfd, name, npfd, nname, RENAME_EXCHANGE) < 0)
			r = -errno;
		if (r < 0)
			goto out;
		(void)ovl_node_set_name(sn, np, nname);
		(void)ovl_node_set_name(dn, p, name);
		goto out;
	}

	if (!src_dir) {
		unsigned f = dst_upper_entry ? 0 : RENAME_NOREPLACE;
		char dbuf[256];
		const char *drec;

		r = ovl_copy_up_movable(sn);
		if (r < 0)
			goto out;
		drec = dst_origin(&dst, npfd, nname, dbuf, sizeof(dbuf));
		if (src.lower_exists)
			r = rename_whiteout(pfd, name, npfd, nname, f, &src);
		else
			r = renameat2(pfd, name, npfd, nname, f) < 0 ? -errno : 0;
		if (r >= 0 && drec) {
			struct ovl_res tmp;

			retarget_origin(npfd, nname, drec);
			/* Its record may now say " new": take the st_ino it shows from now on. */
			if (ovl_resolve_in_stack(&(struct ovl_stack){ .upper_fd = npfd }, nname, &tmp) == 0) {
				if (tmp.ino != sn->ino) {
					ovl_node_set_ino(sn, tmp.ino);
					mark_stale_attrs(sn);
				}
				ovl_res_done(&tmp);
			}
		}
	} else if (!node_is_merged_dir(sn)) {
		/* A directory that lives in upper only (or is opaque): move it as is. */
		if (dst.lower_exists) {
			r = set_opaque(sn);
			if (r < 0)
				goto out;
		}
		if (!dst_upper_entry) {
			if (src.lower_exists)
				r = rename_whiteout(pfd, name, npfd, nname, RENAME_NOREPLACE, &src);
			else
				r = renameat2(pfd, name, npfd, nname, RENAME_NOREPLACE) < 0 ? -errno : 0;
		} else if (renameat2(pfd, name, npfd, nname, RENAME_EXCHANGE) < 0) {
			r = -errno;
		} else {
			/* The old name now holds what was at the new one: a whiteout or an empty dir. */
			char tmp[64];

			if (src.lower_exists && dst.whiteout_in_upper) {
				r = 0; /* already the whiteout we need */
			} else if (src.lower_exists) {
				r = ovl_whiteout_tmp_for(&src, tmp);
				if (r >= 0)
					r = place_tmp(tmp, pfd, name, true);
			} else {
				ovl_tmp_name(tmp);
				if (renameat(pfd, name, fs->workwork_fd, tmp) < 0)
					r = -errno;
				else
					ovl_work_reap(tmp);
			}
		}
	} else {
		/* A directory with lower content: full copy, opaque, whiteout at the old name. */
		char tmp[64], wh[64];

		r = ovl_copy_tree_tmp(sn, tmp);
		if (r < 0)
			goto out;
		r = place_tmp(tmp, npfd, nname, dst_upper_entry);
		if (r < 0) {
			(void)ovl_core_rm_rf_at(fs->workwork_fd, tmp);
			goto out;
		}
		r = ovl_whiteout_tmp_for(&src, wh);
		if (r >= 0)
			r = place_tmp(wh, pfd, name, src.upper_fd >= 0);
		if (r >= 0)
			r = adopt_upper_dir(sn, npfd, nname);
	}
	if (r < 0)
		goto out;

	if (dn) {
		struct stat st;
		bool alive = dst.upper_fd >= 0 && !S_ISDIR(dst.st.st_mode) &&
			     fstatat(dst.upper_fd, "", &st, AT_EMPTY_PATH) == 0 && st.st_nlink > 0;

		ovl_node_unhash_name(dn, !alive);
		replaced = dn;
	}
	if (src.upper_fd < 0 || sn->ino != ovl_view_ino(-1, src.st.st_ino))
		ovl_mark_impure(npfd); /* the moved object carries an origin record */
	(void)ovl_node_set_name(sn, np, nname);
out:
	if (sn && sn_pinned)
		ovl_node_unpin(sn);
	else if (sn)
		ovl_node_forget(sn, 1);
	if (dn)
		ovl_node_forget(dn, 1);
	(void)replaced;
	ovl_res_done(&src);
	ovl_res_done(&dst);
	return r;
}

/*
 * One do_rename() under its locks: the quiesce lock shared, as any mutating
 * request, or with @excl alone (a subtree copy, tl_tree_excl).
 */
static int rename_locked(fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
			 unsigned int flags, struct stale_list *stale, bool excl)
{
	int r;

	if (excl)
		pthread_rwlock_wrlock(&ovl_fs->quiesce);
	else
		ovl_mutate_begin();
	pthread_mutex_lock(&ovl_fs->copyup_lock);
	tl_stale = stale;
	tl_tree_excl = excl;
	r = do_rename(ovl_node_from_ino(parent), name, ovl_node_from_ino(newparent), newname, flags);
	tl_tree_excl = false;
	tl_stale = NULL;
	pthread_mutex_unlock(&ovl_fs->copyup_lock);
	if (excl)
		pthread_rwlock_unlock(&ovl_fs->quiesce);
	else
		ovl_mutate_end();
	return r;
}

void ovl_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
		   unsigned int flags)
{
	struct stale_list stale = { 0 };
	int r;

	r = rename_locked(parent, name, newparent, newname, flags, &stale, false);
	if (r == -EAGAIN) /* a subtree copy, with every other namespace or data change held off */
		r = rename_locked(parent, name, newparent, newname, flags, &stale, true);
	/*
	 * Copied objects (split lower hard links...) have new attributes. An
	 * attribute-only invalidation takes no lock a request may hold, so it
	 * is sent before the reply: when rename(2) returns, stat sees them.
	 */
	for (size_t i = 0; i < stale.n && ovl_fs->se; i++)
		(void)fuse_lowlevel_notify_inval_inode(ovl_fs->se, stale.v[i], -1, 0);
	free(stale.v);
	fuse_reply_err(req, -r);
}
