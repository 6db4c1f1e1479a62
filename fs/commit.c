// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Commit (commit.h). Phases, all under the session lock and, when mounted,
 * with writers quiesced:
 *
 *   check   change list of the selection; refuse conflicts, setuid/setgid,
 *           special files, security./trusted. xattrs, bad selections.
 *   protect (partial commits) give their own data to the unselected upper
 *           metacopies whose lower data this commit changes.
 *   intent  write the journal (fsync file + dir).
 *   stage   for every file/symlink: a temp file ".#draftfs.<hash>" in its
 *           target directory with the new content and metadata (a
 *           metacopy's content from its lower data file: all of it is
 *           read here, before apply changes anything); dirs are created
 *           or updated; one syncfs() of the target at the end; with
 *           metacopies selected, the journal is marked "staged".
 *   recheck the workspace entries at stake are still what check read
 *           (recheck_target()): a host edit made while staging refuses.
 *   apply   in path order: deletions (no symlink followed), renames of the
 *           temps over their names; one syncfs() of the target.
 *   prune   drop everything inside the selection from upper (whiteouts
 *           stay where a base layer still has the name; opaque dirs are
 *           turned into plain dirs + whiteouts for base-only names); one
 *           syncfs() of upper; remove the journal.
 *
 * Every target directory is reached with openat2(RESOLVE_BENEATH|
 * RESOLVE_NO_SYMLINKS) or an O_NOFOLLOW walk and kept as an fd, so a
 * directory swapped for a symlink while we work is never followed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "commit.h"
#include "ctl-data.h"
#include "ctl-ops.h"
#include "diff.h"
#include "fdpath.h"
#include "journal.h"
#include "prefetch.h"
#include "json-util.h"
#include "registry.h"

struct origin {
	int layer;
	unsigned long long dev, ino;
	long long size, mtime_s, ctime_s;
	long mtime_ns, ctime_ns;
};

static int origin_parse(const char *s, struct origin *o)
{
	unsigned mode;

	if (sscanf(s, "v1 layer=%d dev=%llu ino=%llu size=%lld mtime=%lld.%ld ctime=%lld.%ld mode=%o", &o->layer,
	           &o->dev, &o->ino, &o->size, &o->mtime_s, &o->mtime_ns, &o->ctime_s, &o->ctime_ns, &mode) != 9)
		return -EINVAL;
	return 0;
}

struct commit {
	const struct ovl_ctl_env *env;
	const struct ovl_sel *sel;
	const struct ovl_commit_opts *opts;
	struct ovl_changes *changes;
	struct ovl_changes *all_changes; /* the unselected change list, computed when needed */
	int target_fd; /* lower_fds[0] */
	struct stat target_root;
	/* cache of the last target directory reached */
	char *dir_path;
	int dir_fd;
	/* cache of the last upper directory reached */
	char *udir_path;
	int udir_fd;
	/*
	 * Directories that replace a non-directory in the target are staged
	 * under a temp name (from[i] is staged at to[i]) until the apply phase
	 * swaps them in; what goes below them is staged inside.
	 */
	char **remap_from, **remap_to;
	size_t n_remap;
	bool recovering; /* temps of an earlier try may be around */
	bool keep_mc_temps; /* recovering a staged commit: the temps of metacopies are the data */
	struct timespec started; /* when the commit began (its journal keeps it), coarse realtime */
	bool guard;   /* apply destroys nothing of the host's made since the checks (not with force or in recovery) */
	bool applied; /* apply has changed the workspace */
	struct ovl_inoset relinked; /* workspace inodes whose link count apply changed (their ctime moved) */
	/* the journal's multiply-linked workspace files (journal-linked.h): a new commit's own, or the journal's */
	struct ovl_linked_set own_linked;
	const struct ovl_linked_set *linked;
	char *changed_at; /* where the guard found a host edit */
	/*
	 * The target directory each staged entry was written into, kept open
	 * until its rename: apply renames within the very directory that was
	 * checked at staging, wherever the host may have moved it since.
	 * held[i] indexes held_fds (-1: resolve the path again).
	 */
	int *held;
	int *held_fds;
	size_t n_held;
	char *held_path;
	cJSON *kept;
	cJSON *committed;
	cJSON *refused;   /* xattr refusals found while staging */
	cJSON *late;      /* conflicts found after staging (recheck_target()) */
	cJSON *materialized; /* unselected metacopies given their own data */
	struct created_dir *created; /* target dirs created while staging, for a rollback */
	size_t n_created;
};

/*
 * A directory the commit made in the target, and which one it is: a rollback
 * removes the directory at @path only while it is still this one, not one
 * that the workspace's owner moved or made there meanwhile.
 */
struct created_dir {
	char *path;
	dev_t dev;
	ino_t ino;
};

/* Remembers @path, made by the commit and open as @fd, for a rollback. Best effort. */
static void created_add(struct commit *cm, const char *path, int fd)
{
	struct created_dir *v;
	struct stat st;

	if (fstat(fd, &st) < 0)
		return;
	v = realloc(cm->created, (cm->n_created + 1) * sizeof(*v));
	if (!v)
		return;
	cm->created = v;
	v[cm->n_created] = (struct created_dir){ .path = strdup(path), .dev = st.st_dev, .ino = st.st_ino };
	if (v[cm->n_created].path)
		cm->n_created++;
}

/*
 * Rolls back the creation of @d: removes it if it is still the empty
 * directory the commit made. Between the check and the rmdir a rename can
 * still swap another empty directory in (no call removes a directory by
 * fd); the window is two calls, where it was the whole staging.
 */
static void created_undo(struct commit *cm, const struct created_dir *d)
{
	_cleanup_close_ int pfd = -1, fd = -1;
	const char *name;
	struct stat st;

	pfd = openat_beneath_parent(cm->target_fd, d->path, &name);
	if (pfd < 0)
		return;
	fd = openat(pfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_dev != d->dev || st.st_ino != d->ino)
		return;
	(void)unlinkat(pfd, name, AT_REMOVEDIR);
}

static int commit_error_paths(cJSON **ret_error, int r, const char *code, cJSON *details, const char *what)
{
	cJSON *paths = cJSON_CreateArray(), *d;
	const char *first = NULL;
	int n = 0;

	cJSON_ArrayForEach(d, details) {
		const char *p = NULL;

		(void)json_get_string(d, "path", &p);
		if (p) {
			cJSON_AddItemToArray(paths, cJSON_CreateString(p));
			if (!first)
				first = p;
			n++;
		}
	}
	r = ovl_ctl_error(ret_error, r, code, paths, "commit refused: %s: '%s'%s", what, first ?: "",
	                  n > 1 ? " and more (see paths)" : "");
	if (ret_error && *ret_error)
		cJSON_AddItemToObject(*ret_error, "details", details);
	else
		cJSON_Delete(details);
	return r;
}

static void add_detail(cJSON **list, const char *path, const char *reason)
{
	cJSON *d;

	if (!*list)
		*list = cJSON_CreateArray();
	d = cJSON_CreateObject();
	if (!*list || !d) {
		cJSON_Delete(d);
		return;
	}
	cJSON_AddStringToObject(d, "path", path);
	cJSON_AddStringToObject(d, "reason", reason);
	cJSON_AddItemToArray(*list, d);
}

/* The nearest earlier change that is an ancestor of c->v[i] and has its own upper entry, or NULL. */
static const struct ovl_change *shadowing_ancestor(const struct ovl_changes *c, size_t i)
{
	for (size_t j = i; j-- > 0;)
		if (c->v[j].own_upper && ovl_path_has_prefix(c->v[i].path, c->v[j].path))
			return &c->v[j];
	return NULL;
}

struct ino_key {
	unsigned long long dev, ino;
	const struct ovl_change *change;
};

static int cmp_ino_key(const void *a, const void *b)
{
	const struct ino_key *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return 0;
}

/* An index of the old (lower) inodes of @c, sorted; NULL on ENOMEM or when empty. */
static struct ino_key *ino_index(const struct ovl_changes *c, size_t *ret_n)
{
	struct ino_key *v = malloc(MAX(c->n, (size_t)1) * sizeof(*v));
	size_t n = 0;

	if (!v)
		return NULL;
	for (size_t i = 0; i < c->n; i++)
		if (c->v[i].old_type != OVL_FT_NONE)
			v[n++] = (struct ino_key){ (unsigned long long)c->v[i].old.dev,
			                           (unsigned long long)c->v[i].old.ino, &c->v[i] };
	qsort(v, n, sizeof(*v), cmp_ino_key);
	*ret_n = n;
	return v;
}

/*
 * The change whose old (lower) entry is the inode the origin record @o
 * names, at another path: the source of a move in the session (the core
 * copies the source up, then renames it and leaves a whiteout) or of a
 * hard link made in the session. NULL if none. @idx from ino_index().
 */
static const struct ovl_change *rename_source(const struct ino_key *idx, size_t n, const struct origin *o)
{
	struct ino_key key = { o->dev, o->ino, NULL }, *hit;

	if (!idx)
		return NULL;
	hit = bsearch(&key, idx, n, sizeof(*idx), cmp_ino_key);
	return hit ? hit->change : NULL;
}

static bool origin_matches(const struct origin *o, const struct ovl_change *e)
{
	if (o->layer != e->old_layer || o->dev != (unsigned long long)e->old.dev || o->ino != (unsigned long long)e->old.ino)
		return false;
	if (e->old_type == OVL_FT_DIR)
		return true; /* a dir's times move with its entries */
	return o->size == (long long)e->old.size && o->mtime_s == (long long)e->old.mtime.tv_sec &&
	       o->mtime_ns == e->old.mtime.tv_nsec && o->ctime_s == (long long)e->old.ctime.tv_sec &&
	       o->ctime_ns == e->old.ctime.tv_nsec;
}

/*
 * Conflicts: the workspace changed under a path since the session shadowed
 * it. The origin record names the lower inode the upper entry was copied
 * from; when that inode is the source of a rename in the session (another
 * path, deleted in the session), the check applies to that source.
 */
static void check_conflicts(struct commit *cm, cJSON **list)
{
	const struct ovl_changes *c = cm->changes;
	_cleanup_free_ struct ino_key *sel_idx = NULL, *all_idx = NULL;
	size_t n_sel_idx = 0, n_all_idx = 0;

	for (size_t i = 0; i < c->n; i++) {
		const struct ovl_change *e = &c->v[i];
		struct origin o;

		if (e->own_upper && e->has_origin && strncmp(e->origin, "v1 none", 7) == 0) {
			/* the session created the name where lower had nothing: lower has it now */
			if (e->old_type != OVL_FT_NONE)
				add_detail(list, e->path, "created in the workspace since the session created it");
			continue;
		}
		if (e->own_upper && e->has_origin) {
			const struct ovl_change *src;

			if (origin_parse(e->origin, &o) < 0) {
				add_detail(list, e->path, "unreadable origin record");
				continue;
			}
			if (e->old_type != OVL_FT_NONE && origin_matches(&o, e))
				continue;
			if (!sel_idx)
				sel_idx = ino_index(c, &n_sel_idx);
			src = rename_source(sel_idx, n_sel_idx, &o);
			if (!src && cm->sel->n > 0) {
				/* the source may lie outside the selection: look in the whole session once */
				if (!cm->all_changes) {
					struct ovl_sel all = { 0 };

					(void)ovl_diff_compute(cm->env->layers, &all, 0, &cm->all_changes, NULL);
					if (cm->all_changes)
						all_idx = ino_index(cm->all_changes, &n_all_idx);
				}
				src = rename_source(all_idx, n_all_idx, &o);
			}
			if (src && src != e && strcmp(src->path, e->path) != 0) {
				/* moved here in the session: did the source change on the host since? */
				if (!origin_matches(&o, src))
					add_detail(list, e->path, "moved in the session from a path changed in the workspace since");
				continue;
			}
			if (e->old_type == OVL_FT_NONE)
				add_detail(list, e->path, "deleted in the workspace since the session changed it");
			else
				add_detail(list, e->path,
				           e->status == OVL_DELETED ? "deleted in the session but changed in the workspace"
				                                    : "changed in the workspace since the session shadowed it");
			continue;
		}
		if (!e->own_upper && e->status == OVL_DELETED) {
			/* Inside a deleted or replaced directory: changed since the session deleted it? */
			const struct ovl_change *a = shadowing_ancestor(c, i);

			if (a && a->has_origin && ovl_ts_not_before(e->old.ctime, a->new.ctime))
				add_detail(list, e->path, "deleted in the session but changed in the workspace");
		}
	}
}

static bool xattr_is_refused(const char *item)
{
	return strncmp(item, "security.", 9) == 0 || strncmp(item, "trusted.", 8) == 0;
}

/*
 * Returns the upper directory fd (cached, do not close) holding @path and
 * *ret_name, its last component. Never follows a symlink.
 */
static int upper_parent(struct commit *cm, const char *path, const char **ret_name)
{
	const char *slash = strrchr(path, '/');
	size_t dlen = slash ? (size_t)(slash - path) : 0;
	_cleanup_free_ char *dir = strndup(path, dlen);
	int fd;

	if (!dir)
		return -ENOMEM;
	*ret_name = slash ? slash + 1 : path;
	if (cm->udir_path && strcmp(cm->udir_path, dir) == 0)
		return cm->udir_fd;
	fd = openat_beneath(cm->env->layers->upper_fd, dir, O_PATH | O_DIRECTORY, 0);
	if (fd < 0)
		return fd;
	free(cm->udir_path);
	safe_close(cm->udir_fd);
	cm->udir_path = TAKE_PTR(dir);
	cm->udir_fd = fd;
	return fd;
}

/* Refusals: setuid/setgid, special files, security./trusted. xattrs; and unusable selections. */
static int check_refusals(struct commit *cm, cJSON **list)
{
	const struct ovl_changes *c = cm->changes;

	for (size_t i = 0; i < c->n; i++) {
		const struct ovl_change *e = &c->v[i];

		if (e->new_type == OVL_FT_NONE)
			continue;
		if (!cm->opts->allow_setid && e->new_type != OVL_FT_SYMLINK && (e->new.mode & (S_ISUID | S_ISGID)) &&
		    e->new_type != OVL_FT_DIR)
			add_detail(list, e->path, "setuid/setgid bit");
		if (!cm->opts->allow_special && e->new_type == OVL_FT_OTHER)
			add_detail(list, e->path, "device node, FIFO or socket");
	}
	/* security.* and trusted.* xattrs are found while staging, where they are read anyway */
	return 0;
}

/*
 * Paths no *at() call can name (PATH_MAX and longer: the view can hold them,
 * built one directory at a time). Staging would fail on them half-way, with
 * directories already made in the target; so they are refused up front.
 */
static void check_path_lengths(struct commit *cm, cJSON **list)
{
	const struct ovl_changes *c = cm->changes;

	for (size_t i = 0; i < c->n; i++)
		if (strlen(c->v[i].path) >= PATH_MAX)
			add_detail(list, c->v[i].path, "path of PATH_MAX (4096) bytes or more");
}

/*
 * A selected path below an unselected directory that replaced a
 * non-directory cannot be committed alone (the target has a file there).
 * Only the ancestors of the selected paths can be such a directory.
 */
static int check_selection_shape(struct commit *cm, cJSON **list)
{
	for (size_t i = 0; i < cm->sel->n; i++) {
		_cleanup_free_ char *copy = strdup(cm->sel->v[i]);
		char *slash;

		if (!copy)
			return -ENOMEM;
		for (slash = strchr(copy, '/'); slash; slash = strchr(slash + 1, '/')) {
			struct stat st;
			int layer;

			*slash = '\0';
			if (ovl_lower_lookup_path(cm->env->layers, copy, &st, &layer, NULL) > 0 && !S_ISDIR(st.st_mode)) {
				char why[PATH_MAX + 64];

				snprintf(why, sizeof(why), "inside '%s', a directory that replaced a file; select '%s'", copy,
				         copy);
				add_detail(list, cm->sel->v[i], why);
				break;
			}
			*slash = '/';
		}
	}
	return 0;
}

static void owner_for(struct commit *cm, const struct stat *existing, const struct ovl_meta *upper, uid_t *uid,
                      gid_t *gid)
{
	switch (cm->opts->owner) {
	case OVL_OWNER_PRESERVE:
		*uid = upper->uid;
		*gid = upper->gid;
		return;
	case OVL_OWNER_FIXED:
		*uid = cm->opts->uid;
		*gid = cm->opts->gid;
		return;
	case OVL_OWNER_WORKSPACE:
		break;
	}
	*uid = existing ? existing->st_uid : cm->target_root.st_uid;
	*gid = existing ? existing->st_gid : cm->target_root.st_gid;
}

/*
 * Returns an O_PATH fd (owned by the cache, do not close) of target dir
 * @dir ("" is the root), creating missing components with the view's
 * metadata. Never follows a symlink: a symlink or file in the way is
 * -ENOTDIR.
 */
static void cache_drop(struct commit *cm)
{
	cm->dir_path = (free(cm->dir_path), NULL);
	cm->dir_fd = safe_close(cm->dir_fd);
}

static int remap_add(struct commit *cm, const char *from, const char *to)
{
	char **f = realloc(cm->remap_from, (cm->n_remap + 1) * sizeof(char *));
	char **t;

	if (!f)
		return -ENOMEM;
	cm->remap_from = f;
	t = realloc(cm->remap_to, (cm->n_remap + 1) * sizeof(char *));
	if (!t)
		return -ENOMEM;
	cm->remap_to = t;
	f[cm->n_remap] = strdup(from);
	t[cm->n_remap] = strdup(to);
	if (!f[cm->n_remap] || !t[cm->n_remap]) {
		free(f[cm->n_remap]);
		free(t[cm->n_remap]);
		return -ENOMEM;
	}
	cm->n_remap++;
	return 0;
}

static void remap_done(struct commit *cm)
{
	for (size_t i = 0; i < cm->n_remap; i++) {
		free(cm->remap_from[i]);
		free(cm->remap_to[i]);
	}
	free(cm->remap_from);
	free(cm->remap_to);
}

static int target_dir(struct commit *cm, const char *dir_in, bool create)
{
	_cleanup_free_ char *copy = NULL, *sofar = NULL, *mapped = NULL;
	_cleanup_close_ int cur = -1;
	const char *dir = dir_in;
	char *p, *slash;

	for (size_t i = 0; i < cm->n_remap; i++)
		if (cm->remap_from[i] && ovl_path_has_prefix(dir_in, cm->remap_from[i])) {
			if (asprintf(&mapped, "%s%s", cm->remap_to[i], dir_in + strlen(cm->remap_from[i])) < 0)
				return -ENOMEM;
			dir = mapped;
			break;
		}
	if (cm->dir_path && strcmp(cm->dir_path, dir) == 0)
		return cm->dir_fd;
	copy = strdup(dir);
	sofar = calloc(1, strlen(dir) + 1);
	if (!copy || !sofar)
		return -ENOMEM;
	cur = openat(cm->target_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return -errno;
	for (p = copy; *p; p = slash + 1) {
		int fd;

		slash = strchr(p, '/');
		if (slash)
			*slash = '\0';
		if (*sofar)
			strcat(sofar, "/");
		strcat(sofar, p);
		fd = openat(cur, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && create) {
			/* Missing in the target: create it like the view has it (upper, else a base layer). */
			_cleanup_close_ int ufd = openat_beneath(cm->env->layers->upper_fd, sofar, O_PATH, 0);
			struct ovl_meta m = { .mode = S_IFDIR | 0755 };
			struct stat st;
			int layer;
			uid_t uid;
			gid_t gid;

			if (ufd >= 0 && fstat(ufd, &st) == 0 && S_ISDIR(st.st_mode))
				m = (struct ovl_meta){ .mode = st.st_mode, .uid = st.st_uid, .gid = st.st_gid };
			else if (ovl_lower_lookup_path(cm->env->layers, sofar, &st, &layer, NULL) > 0 &&
			         S_ISDIR(st.st_mode))
				m = (struct ovl_meta){ .mode = st.st_mode, .uid = st.st_uid, .gid = st.st_gid };
			bool made = mkdirat(cur, p, 0700) == 0;

			if (!made && errno != EEXIST)
				return -errno;
			fd = openat(cur, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0)
				return errno == ELOOP ? -ENOTDIR : -errno;
			if (made)
				created_add(cm, sofar, fd);
			owner_for(cm, NULL, &m, &uid, &gid);
			if (fchown(fd, uid, gid) < 0 || fchmod(fd, m.mode & 07777) < 0) {
				int r = -errno;

				safe_close(fd);
				return r;
			}
			ovl_fault_point("mkdir");
		}
		if (fd < 0)
			return errno == ELOOP ? -ENOTDIR : -errno;
		safe_close(cur);
		cur = fd;
		if (!slash)
			break;
	}
	free(cm->dir_path);
	safe_close(cm->dir_fd);
	cm->dir_path = TAKE_PTR(copy);
	strcpy(cm->dir_path, dir);
	cm->dir_fd = TAKE_FD(cur);
	return cm->dir_fd;
}

static void split_path(const char *path, char **ret_dir, const char **ret_name)
{
	const char *slash = strrchr(path, '/');

	*ret_dir = slash ? strndup(path, (size_t)(slash - path)) : strdup("");
	*ret_name = slash ? slash + 1 : path;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static void tmp_name(char buf[64], const char *path)
{
	snprintf(buf, 64, OVL_COMMIT_TMP_PREFIX "%016" PRIx64, fnv1a(path));
}

/*
 * Copies the xattrs of @in_fd (the upper entry of @path) to @out_fd, but
 * for trusted.overlay.* and trusted.draftbox.*. A security.* or trusted.*
 * one is not copied without allow_xattrs and the path is added to the
 * refusals (the commit then fails before anything is applied). One
 * flistxattr() when there is none. @out_fd < 0 only checks.
 */
static int copy_xattrs(struct commit *cm, const char *path, int in_fd, int out_fd)
{
	char small[1024];
	_cleanup_free_ char *big = NULL;
	char *names = small;
	bool refused = false;
	ssize_t len;

	len = flistxattr(in_fd, small, sizeof(small));
	if (len < 0 && errno == ERANGE) {
		len = flistxattr(in_fd, NULL, 0);
		if (len > 0) {
			big = malloc((size_t)len);
			if (!big)
				return -ENOMEM;
			len = flistxattr(in_fd, big, (size_t)len);
			names = big;
		}
	}
	if (len < 0)
		return errno == ENOTSUP ? 0 : -errno;
	for (const char *n = names; n < names + len; n += strlen(n) + 1) {
		_cleanup_free_ char *val = NULL;
		ssize_t vl;

		if (ovl_xattr_is_internal(n))
			continue;
		if (xattr_is_refused(n) && !cm->opts->allow_xattrs) {
			if (!refused)
				add_detail(&cm->refused, path, "security.* or trusted.* xattr");
			refused = true;
			continue;
		}
		if (out_fd < 0)
			continue; /* checking only */
		vl = fgetxattr(in_fd, n, NULL, 0);
		if (vl < 0)
			continue;
		val = malloc((size_t)vl + 1);
		if (!val)
			return -ENOMEM;
		vl = fgetxattr(in_fd, n, val, (size_t)vl);
		if (vl < 0)
			continue;
		if (fsetxattr(out_fd, n, val, (size_t)vl, 0) < 0 && errno != ENOTSUP && errno != EPERM)
			return -errno;
	}
	return 0;
}

/* Looks for the xattr refusals staging would find (dry runs, and to complete a refusal list). */
static void scan_xattr_refusals(struct commit *cm)
{
	for (size_t i = 0; i < cm->changes->n; i++) {
		const struct ovl_change *e = &cm->changes->v[i];
		_cleanup_close_ int fd = -1;
		const char *uname;
		int upfd;

		if (e->new_type != OVL_FT_FILE && e->new_type != OVL_FT_DIR)
			continue;
		upfd = upper_parent(cm, e->path, &uname);
		if (upfd >= 0)
			fd = openat(upfd, uname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd >= 0)
			(void)copy_xattrs(cm, e->path, fd, -1);
	}
}

/* Gives the target dir @fd the metadata of upper dir @uname of @upfd: owner, mode, xattrs. */
static int dir_set_meta(struct commit *cm, const struct ovl_change *e, int upfd, const char *uname, int fd, uid_t uid,
                        gid_t gid)
{
	_cleanup_close_ int ufd = openat(upfd, uname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (ufd < 0)
		return -errno;
	if (fchown(fd, uid, gid) < 0 || fchmod(fd, e->new.mode & 07777) < 0)
		return -errno;
	return copy_xattrs(cm, e->path, ufd, fd);
}

/*
 * Stages the regular file of change @e as @tmp in @dfd: its content (a
 * metacopy's from its lower data), then owner, mode, xattrs and mtime of
 * the upper file @uname of @upfd.
 */
static int stage_file(struct commit *cm, const struct ovl_change *e, int upfd, const char *uname, int dfd,
                      const char *tmp, uid_t uid, gid_t gid)
{
	_cleanup_data_loc_ struct ovl_data_loc loc = { 0 };
	_cleanup_close_ int in = -1, data = -1, out = -1;
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { 0 } };
	struct stat ist, dst;
	int r;

	in = openat(upfd, uname, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (in < 0)
		return -errno;
	if (fstat(in, &ist) < 0)
		return -errno;
	if (!S_ISREG(ist.st_mode))
		return -EBUSY; /* replaced under us */
	dst = ist;
	r = ovl_upper_data_locate_fd(cm->env->layers, in, e->path, &loc, NULL);
	if (r < 0)
		return r;
	if (loc.metacopy) {
		data = ovl_upper_data_open(cm->env->layers, &loc, O_NONBLOCK, &dst);
		if (data < 0)
			return data;
	}
	out = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0 && errno == EEXIST && unlinkat(dfd, tmp, 0) == 0) /* left by an earlier failure */
		out = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	r = ovl_upper_data_copy(in, data, dst.st_size, out, ist.st_size);
	if (r < 0)
		return r;
	if (fchown(out, uid, gid) < 0 || fchmod(out, ist.st_mode & 07777) < 0)
		return -errno;
	r = copy_xattrs(cm, e->path, in, out);
	if (r < 0)
		return r;
	ts[1] = ist.st_mtim;
	if (futimens(out, ts) < 0)
		return -errno;
	return 0;
}

/* Stages the new content of change @e: a temp entry next to its target name. */
static int stage_entry(struct commit *cm, const struct ovl_change *e)
{
	_cleanup_free_ char *dir = NULL;
	const char *name, *uname;
	int upfd;
	struct stat existing;
	bool has_existing;
	char tmp[64];
	uid_t uid;
	gid_t gid;
	int dfd, r;

	split_path(e->path, &dir, &name);
	if (!dir)
		return -ENOMEM;
	dfd = target_dir(cm, dir, true);
	if (dfd < 0)
		return dfd;
	upfd = upper_parent(cm, e->path, &uname);
	if (upfd < 0)
		return upfd;
	has_existing = fstatat(dfd, name, &existing, AT_SYMLINK_NOFOLLOW) == 0;
	owner_for(cm, has_existing ? &existing : NULL, &e->new, &uid, &gid);

	if (e->new_type == OVL_FT_DIR) {
		_cleanup_close_ int fd = -1;

		const char *at = name;
		bool made = false;

		tmp_name(tmp, e->path);
		if (has_existing && !S_ISDIR(existing.st_mode)) {
			/* replaces a non-dir: staged under a temp name, swapped in by apply_entry() */
			_cleanup_free_ char *to = NULL;
			struct stat tst;
			/* a staged recovery reuses the dir it finds: it may hold kept temps, the only copy of their data */
			bool reuse = cm->keep_mc_temps && fstatat(dfd, tmp, &tst, AT_SYMLINK_NOFOLLOW) == 0 &&
			             S_ISDIR(tst.st_mode);

			if (!reuse) {
				r = ovl_rm_rf_at(dfd, tmp, 0);
				if (r < 0)
					return r;
				if (mkdirat(dfd, tmp, 0700) < 0)
					return -errno;
			}
			if (asprintf(&to, "%s%s%s", dir, *dir ? "/" : "", tmp) < 0)
				return -ENOMEM;
			r = remap_add(cm, e->path, to);
			if (r < 0)
				return r;
			at = tmp;
		} else if (!has_existing) {
			struct stat tst;

			/* an apply interrupted between unlink and rename left the staged dir: finish it */
			if (fstatat(dfd, tmp, &tst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(tst.st_mode)) {
				if (renameat(dfd, tmp, dfd, name) < 0)
					return -errno;
			} else if (mkdirat(dfd, name, 0700) == 0) {
				made = true;
			} else if (errno != EEXIST) {
				return -errno;
			}
		} else {
			/* an existing dir gets its new metadata in the apply phase; check its xattrs now */
			_cleanup_close_ int ufd = openat(upfd, uname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (ufd < 0)
				return -errno;
			return copy_xattrs(cm, e->path, ufd, -1);
		}
		fd = openat(dfd, at, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno == ELOOP ? -ENOTDIR : -errno;
		if (made) {
			_cleanup_free_ char *full = ovl_path_join(dir, name);

			if (full)
				created_add(cm, full, fd);
		}
		r = dir_set_meta(cm, e, upfd, uname, fd, uid, gid);
		if (r < 0)
			return r;
		ovl_fault_point("stage-dir");
		return 0;
	}

	tmp_name(tmp, e->path);
	if (cm->keep_mc_temps && e->metacopy && e->new_type == OVL_FT_FILE)
		return 0; /* staged and synced before the interrupted apply: kept, or renamed already, or no change */
	if (cm->recovering && unlinkat(dfd, tmp, 0) < 0 && errno != ENOENT)
		return -errno;
	if (e->new_type == OVL_FT_SYMLINK) {
		struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, e->new.mtime };

		if (symlinkat(e->new.target, dfd, tmp) < 0 &&
		    (errno != EEXIST || unlinkat(dfd, tmp, 0) < 0 || symlinkat(e->new.target, dfd, tmp) < 0))
			return -errno;
		if (fchownat(dfd, tmp, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
		    utimensat(dfd, tmp, ts, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	} else if (e->new_type == OVL_FT_OTHER) {
		if (mknodat(dfd, tmp, e->new.mode, e->new.rdev) < 0 &&
		    (errno != EEXIST || unlinkat(dfd, tmp, 0) < 0 || mknodat(dfd, tmp, e->new.mode, e->new.rdev) < 0))
			return -errno;
		if (fchownat(dfd, tmp, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	} else {
		r = stage_file(cm, e, upfd, uname, dfd, tmp, uid, gid);
		if (r < 0)
			return r;
	}
	ovl_fault_point("stage");
	return 0;
}

/* Does the workspace entry @st still look as the change list read it (@e->old)? */
static bool target_unchanged(const struct ovl_change *e, const struct stat *st, const struct ovl_inoset *relinked)
{
	if (st->st_dev != e->old.dev || st->st_ino != e->old.ino || (st->st_mode & S_IFMT) != (e->old.mode & S_IFMT))
		return false;
	if (S_ISDIR(st->st_mode) && e->new_type == OVL_FT_DIR)
		/* it holds staged temps or new entries now: its times moved with them */
		return st->st_mode == e->old.mode && st->st_uid == e->old.uid && st->st_gid == e->old.gid;
	if (!S_ISDIR(st->st_mode) && st->st_size != e->old.size)
		return false; /* a dir's size is not kept (0) */
	if (st->st_mtim.tv_sec != e->old.mtime.tv_sec || st->st_mtim.tv_nsec != e->old.mtime.tv_nsec)
		return false;
	if (ovl_ctime_follows_links(st, relinked))
		/* the commit's own rename over another name of it moves its ctime: a chmod or chown still shows */
		return st->st_mode == e->old.mode && st->st_uid == e->old.uid && st->st_gid == e->old.gid;
	return st->st_ctim.tv_sec == e->old.ctime.tv_sec && st->st_ctim.tv_nsec == e->old.ctime.tv_nsec;
}

/* The guard found what the host made at @path since the checks: -EBUSY, and where. */
static int guard_tripped(struct commit *cm, const char *path)
{
	free(cm->changed_at);
	cm->changed_at = strdup(path);
	return cm->changed_at ? -EBUSY : -ENOMEM;
}

/*
 * The apply phase's guard, before the commit puts its entry at @name in
 * @dfd (change @e): what stands there must be what the change list read
 * (e->old), or nothing (no data to lose there): else -EBUSY.
 * @dir_ok: a directory passes too, for a staged directory's rename, which
 * replaces only an empty one (the caller turns ENOTEMPTY into the guard's
 * -EBUSY).
 */
static int guard_replace(struct commit *cm, const struct ovl_change *e, int dfd, const char *name, bool dir_ok)
{
	struct stat st;

	if (!cm->guard)
		return 0;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (e->old_type != OVL_FT_NONE && e->old_layer == 0 && target_unchanged(e, &st, &cm->relinked))
		/* it goes: a file with more names keeps them, with a ctime that moved */
		return S_ISDIR(st.st_mode) || st.st_nlink < 2 ? 0 : ovl_inoset_add(&cm->relinked, st.st_dev, st.st_ino);
	if (dir_ok && S_ISDIR(st.st_mode))
		return 0;
	return guard_tripped(cm, e->path);
}

/* Removes @name in @dfd (the old entry of @e, a deletion or what a new entry replaces): guarded, it stops at a host edit. */
static int remove_old(struct commit *cm, const struct ovl_change *e, int dfd, const char *name)
{
	_cleanup_free_ char *below = NULL, *at = NULL;
	bool removed = false;
	int r;

	if (!cm->guard) {
		cm->applied = true;
		return ovl_rm_rf_at(dfd, name, 0);
	}
	r = ovl_rm_rf_unchanged_at(dfd, name, cm->started, &cm->relinked, &removed, &below);
	cm->applied = cm->applied || removed;
	if (r != -EBUSY)
		return r;
	at = *below ? ovl_path_join(e->path, below) : strdup(e->path);
	return at ? guard_tripped(cm, at) : -ENOMEM;
}

/*
 * Moves the directory staged as @tmp (the target had no directory at
 * @name when the changes were read: a new one, or one replacing a
 * non-directory) into place at @name in @dfd, whatever is there now: the
 * rename replaces nothing or an empty directory; a non-directory is
 * removed first. A directory with entries that appeared since the changes
 * were read is not merged into: the commit fails there (-ENOTEMPTY) with
 * the journal, the staged directory and the upper intact. Guarded
 * (cm->guard), a non-directory goes only if it is the one the change list
 * read, and a directory with entries is the guard's conflict. Returns 0 or
 * -errno.
 */
static int place_staged_dir(struct commit *cm, const struct ovl_change *e, int dfd, const char *tmp, const char *name)
{
	int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3), r = -EAGAIN;

	if (fd < 0)
		return -errno;
	cache_drop(cm);
	/* A few rounds: whatever stands at @name can change between our calls. */
	for (int round = 0; round < 4 && r == -EAGAIN; round++) {
		r = guard_replace(cm, e, fd, name, true);
		if (r < 0)
			break;
		r = -EAGAIN;
		if (renameat(fd, tmp, fd, name) == 0) {
			r = 0;
			cm->applied = true;
		} else if (errno == ENOTDIR) {
			/* a non-directory at @name: it goes, then the staged directory comes */
			if (unlinkat(fd, name, 0) < 0 && errno != ENOENT && errno != EISDIR)
				r = -errno;
			cm->applied = true;
			ovl_fault_point("unlink-for-dir");
		} else if (cm->guard && (errno == EEXIST || errno == ENOTEMPTY)) {
			r = guard_tripped(cm, e->path);
		} else {
			r = errno == EEXIST ? -ENOTEMPTY : -errno;
		}
	}
	safe_close(fd);
	return r == -EAGAIN ? -EBUSY : r;
}

/* Applies change @e in the target: deletion or rename of the staged temp. */
/* Remembers the cached target dir as the directory of staged change @i. Best effort. */
static void hold_dir(struct commit *cm, size_t i)
{
	const struct ovl_change *e = &cm->changes->v[i];
	int *nf, fd;

	if (!cm->held || e->new_type == OVL_FT_DIR || e->new_type == OVL_FT_NONE || cm->dir_fd < 0 || !cm->dir_path)
		return;
	if (cm->held_path && strcmp(cm->held_path, cm->dir_path) == 0 && cm->n_held > 0) {
		cm->held[i] = (int)cm->n_held - 1;
		return;
	}
	fd = fcntl(cm->dir_fd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return; /* EMFILE: apply resolves the path again */
	nf = realloc(cm->held_fds, (cm->n_held + 1) * sizeof(int));
	if (!nf) {
		safe_close(fd);
		return;
	}
	cm->held_fds = nf;
	nf[cm->n_held++] = fd;
	free(cm->held_path);
	cm->held_path = strdup(cm->dir_path);
	cm->held[i] = (int)cm->n_held - 1;
}

static void held_done(struct commit *cm)
{
	for (size_t i = 0; i < cm->n_held; i++)
		safe_close(cm->held_fds[i]);
	free(cm->held_fds);
	free(cm->held);
	free(cm->held_path);
}

/* The target directory of change @idx: the fd held since staging, or @dir resolved again. */
static int entry_dir(struct commit *cm, size_t idx, const char *dir, bool create)
{
	if (cm->held && cm->held[idx] >= 0)
		return cm->held_fds[cm->held[idx]];
	return target_dir(cm, dir, create);
}

/*
 * The check once more, after staging and its syncfs (the long part: all the
 * data is copied and flushed there) and before anything is applied: every
 * workspace entry the commit replaces or deletes must still be the one the
 * change list read, and every name it creates a file at must still be
 * free. A host edit made meanwhile would be overwritten; found here, the
 * commit can still refuse it as a conflict with nothing changed. Staging
 * does not touch the workspace's own entries but for the directories it
 * stages into (their identity, mode and owner are compared, not their
 * times). What this leaves is the apply phase: renames and deletions only.
 */
static void recheck_target(struct commit *cm, cJSON **list)
{
	const struct ovl_changes *c = cm->changes;

	for (size_t i = 0; i < c->n; i++) {
		const struct ovl_change *e = &c->v[i];
		bool had = e->old_type != OVL_FT_NONE && e->old_layer == 0;
		_cleanup_free_ char *dir = NULL;
		const char *name;
		struct stat st;
		int dfd;

		if (!had && e->new_type != OVL_FT_FILE && e->new_type != OVL_FT_SYMLINK && e->new_type != OVL_FT_OTHER)
			continue; /* nothing of the workspace's at stake: a dir made by staging, a base-only deletion */
		split_path(e->path, &dir, &name);
		if (!dir) {
			add_detail(list, e->path, "out of memory while checking it again");
			continue;
		}
		dfd = entry_dir(cm, i, dir, false);
		if (dfd < 0) {
			if (!(e->new_type == OVL_FT_NONE && (dfd == -ENOENT || dfd == -ENOTDIR)))
				add_detail(list, e->path, "its directory changed in the workspace during the commit");
			continue;
		}
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT)
				add_detail(list, e->path, "cannot be checked again in the workspace");
			else if (had && e->new_type != OVL_FT_NONE)
				add_detail(list, e->path, "deleted in the workspace during the commit");
			continue;
		}
		if (!had)
			add_detail(list, e->path, "created in the workspace during the commit");
		else if (!target_unchanged(e, &st, &cm->relinked))
			add_detail(list, e->path, "changed in the workspace during the commit");
	}
}

/*
 * What the commit itself puts at a path: its staged entry carries the
 * session's type, data, mode, size and mtime (owner and xattrs may differ
 * by the owner policy, ctime moved with the rename). The data of a
 * metacopy is not known any more once the commit has replaced or deleted
 * the lower file it reads (a rename's source: the diff reads what stands
 * there now, or nothing): its size and mtime stand for it.
 */
static bool is_committed_entry(const struct ovl_change *e)
{
	return e->old_type == e->new_type && (!e->content || e->metacopy) &&
	       e->old.mode == e->new.mode && e->old.size == e->new.size && e->old.mtime.tv_sec == e->new.mtime.tv_sec &&
	       e->old.mtime.tv_nsec == e->new.mtime.tv_nsec;
}

/* The workspace holds a non-directory at @e's path: what recovery checks, and the journal's linked set records. */
static bool workspace_file(const struct ovl_change *e)
{
	return e->old_type != OVL_FT_NONE && e->old_layer == 0 && e->old_type != OVL_FT_DIR;
}

/* A linked file as the interrupted commit's check read it: its ctime alone may have moved. */
static bool linked_unchanged(const struct ovl_linked *l, const struct ovl_meta *m)
{
	return l->mode == m->mode && l->uid == m->uid && l->gid == m->gid && l->size == m->size &&
	       l->mtime.tv_sec == m->mtime.tv_sec && l->mtime.tv_nsec == m->mtime.tv_nsec;
}

/*
 * Recovery's check (without force): the interrupted commit checked the
 * workspace before it wrote its journal, so what would be lost now is an
 * edit made on the host after the commit began (@cm->started): a workspace
 * entry at a path of the commit, not put there by the commit, with a ctime
 * from then on (a file that had several names, the journal's linked set:
 * no longer as checked then). Directories are not compared themselves (the
 * commit's own staging and deletions move their times); what the host put
 * inside one is an entry of the change list in turn.
 */
static void check_recovery(struct commit *cm, cJSON **list)
{
	const struct ovl_changes *c = cm->changes;

	for (size_t i = 0; i < c->n; i++) {
		const struct ovl_change *e = &c->v[i];
		const struct ovl_linked *l;

		if (!workspace_file(e))
			continue;
		/* the interrupted commit's unlink of another name moved the ctime of these: what was checked tells */
		l = ovl_linked_find(cm->linked, e->old.dev, e->old.ino);
		if (l ? linked_unchanged(l, &e->old) : !ovl_ts_not_before(e->old.ctime, cm->started))
			continue;
		if (is_committed_entry(e))
			continue;
		add_detail(list, e->path,
		           e->new_type == OVL_FT_NONE ? "changed in the workspace after the commit began; recovery would delete it"
		                                      : "changed in the workspace after the commit began; recovery would replace it");
	}
}

/* renameat(), or with @noreplace renameat2(RENAME_NOREPLACE) (renameat() where the file system lacks it). */
static int rename_into(int dfd, const char *tmp, const char *name, bool noreplace)
{
	if (noreplace) {
		if (renameat2(dfd, tmp, dfd, name, RENAME_NOREPLACE) == 0)
			return 0;
		if (errno != EINVAL)
			return -errno;
	}
	return renameat(dfd, tmp, dfd, name) < 0 ? -errno : 0;
}

static int apply_entry(struct commit *cm, const struct ovl_change *e, size_t idx)
{
	_cleanup_free_ char *dir = NULL;
	const char *name;
	struct stat st;
	char tmp[64];
	int dfd, r;

	split_path(e->path, &dir, &name);
	if (!dir)
		return -ENOMEM;
	if (e->new_type == OVL_FT_NONE && e->old_layer != 0)
		return 0; /* only a base layer has it: nothing in the target */
	dfd = entry_dir(cm, idx, dir, e->new_type != OVL_FT_NONE);
	if (dfd < 0 && e->new_type == OVL_FT_NONE && (dfd == -ENOENT || dfd == -ENOTDIR))
		return 0; /* its directory is already gone */
	if (dfd < 0)
		return dfd;
	if (e->new_type == OVL_FT_NONE) {
		r = remove_old(cm, e, dfd, name);
		cache_drop(cm);
		if (r < 0)
			return r;
		ovl_fault_point("delete");
		return 0;
	}
	if (e->new_type == OVL_FT_DIR) {
		tmp_name(tmp, e->path);
		if (fstatat(dfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
			r = place_staged_dir(cm, e, dfd, tmp, name);
			if (r < 0)
				return r;
			for (size_t i = 0; i < cm->n_remap; i++)
				if (cm->remap_from[i] && strcmp(cm->remap_from[i], e->path) == 0)
					cm->remap_from[i] = (free(cm->remap_from[i]), NULL);
			ovl_fault_point("rename-dir");
			return 0;
		}
		if (e->status == OVL_MODIFIED && e->old_layer == 0 && e->metadata) {
			/* an existing target dir: its new owner, mode and xattrs */
			_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			const char *uname;
			int upfd;
			uid_t uid;
			gid_t gid;

			if (fd < 0)
				return errno == ELOOP ? -ENOTDIR : -errno;
			if (fstat(fd, &st) < 0)
				return -errno;
			if (cm->guard && !target_unchanged(e, &st, &cm->relinked))
				return guard_tripped(cm, e->path); /* the host's mode or owner would be replaced */
			upfd = upper_parent(cm, e->path, &uname);
			if (upfd < 0)
				return upfd;
			owner_for(cm, &st, &e->new, &uid, &gid);
			cm->applied = true;
			r = dir_set_meta(cm, e, upfd, uname, fd, uid, gid);
			if (r < 0)
				return r;
			ovl_fault_point("dir-meta");
		}
		return 0;
	}
	tmp_name(tmp, e->path);
	if (e->old_type != OVL_FT_DIR || e->old_layer != 0) {
		bool fresh = e->old_type == OVL_FT_NONE || e->old_layer != 0;

		r = fresh ? 0 : guard_replace(cm, e, dfd, name, false);
		if (r < 0)
			return r;
		/* guarded, a new name is taken only while it is still free: a file the host made there stays */
		r = rename_into(dfd, tmp, name, cm->guard && fresh);
		if (r == 0) {
			cm->applied = true;
			ovl_fault_point("rename");
			return 0;
		}
		if (r == -ENOENT)
			return 0; /* already renamed (recovery) */
		if (r == -EEXIST && cm->guard && fresh)
			return guard_tripped(cm, e->path);
		/*
		 * A directory took the name since the changes were read (they
		 * had no layer-0 dir there): stop with the journal, as for a
		 * staged dir, instead of deleting what is not ours.
		 */
		if (r == -EISDIR || r == -ENOTEMPTY || r == -EEXIST)
			return -EISDIR;
		return r;
	}
	if (fstatat(dfd, tmp, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno; /* already renamed (recovery) */
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
		r = remove_old(cm, e, dfd, name);
		if (r < 0)
			return r;
		/* the cache may point into what was removed; dfd stays valid until the next target_dir() */
		dfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
		if (dfd < 0)
			return -errno;
		cache_drop(cm);
		r = rename_into(dfd, tmp, name, cm->guard);
		safe_close(dfd);
		if (r == -EEXIST && cm->guard)
			return guard_tripped(cm, e->path);
		if (r < 0)
			return r;
		ovl_fault_point("rename");
		return 0;
	}
	r = guard_replace(cm, e, dfd, name, false);
	if (r < 0)
		return r;
	if (renameat(dfd, tmp, dfd, name) < 0)
		return -errno;
	cm->applied = true;
	ovl_fault_point("rename");
	return 0;
}

static int make_whiteout(int dir_fd, const char *name)
{
	if (mknodat(dir_fd, name, S_IFCHR | 0000, makedev(0, 0)) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * Drops the opaque flag of upper dir @ufd at @path, after adding whiteouts
 * for the names that only a base layer (below the target) would show.
 */
static int deopacify(struct commit *cm, int ufd, const char *path)
{
	_cleanup_strv_free_ char **names = NULL;
	struct ovl_lstack ls = { 0 };
	struct stat st;
	int layer, r;

	r = ovl_lower_lookup_path(cm->env->layers, path, &st, &layer, &ls);
	if (r > 0 && S_ISDIR(st.st_mode)) {
		for (size_t i = 0; i < ls.n; i++) {
			_cleanup_closedir_ DIR *d = NULL;
			struct dirent *de;
			int fd;

			if (ls.layer[i] == 0)
				continue;
			fd = openat(ls.fds[i], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (fd < 0 || !(d = fdopendir(fd))) {
				safe_close(fd);
				continue;
			}
			while ((de = readdir(d))) {
				struct stat ust, vst;
				int vl;

				if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
					continue;
				if (fstatat(ufd, de->d_name, &ust, AT_SYMLINK_NOFOLLOW) == 0)
					continue;
				if (ovl_lstack_lookup(&ls, de->d_name, &vst, &vl, NULL) > 0 && vl != 0) {
					r = make_whiteout(ufd, de->d_name);
					if (r < 0) {
						ovl_lstack_done(&ls);
						return r;
					}
				}
			}
		}
	}
	ovl_lstack_done(&ls);
	if (fremovexattr(ufd, OVL_XATTR_OPAQUE) < 0 && errno != ENODATA)
		return -errno;
	/*
	 * Below an opaque dir no lower layer was visible at any depth; now
	 * they are: the subdirectories need the same treatment.
	 */
	{
		_cleanup_closedir_ DIR *d = NULL;
		struct dirent *de;
		int dr = opendir_at(ufd, &d);

		if (dr < 0)
			return dr;
		while ((de = readdir(d))) {
			_cleanup_free_ char *child = NULL;
			_cleanup_close_ int cfd = -1;
			struct stat cst;

			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			if (fstatat(dirfd(d), de->d_name, &cst, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(cst.st_mode))
				continue;
			cfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			child = ovl_path_join(path, de->d_name);
			if (cfd < 0 || !child)
				return cfd < 0 ? -errno : -ENOMEM;
			r = deopacify(cm, cfd, child);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

/*
 * Prune: removes the entries inside the selection from upper dir @ufd at
 * @dirpath, bottom-up. @protected: an unselected opaque ancestor stays in
 * upper, so its selected content must stay too (it now equals the target).
 */
static int prune_dir(struct commit *cm, const char *dirpath, int ufd, bool protected)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int r = 0;

	r = opendir_at(ufd, &d);
	if (r < 0)
		return r;
	while ((de = readdir(d))) {
		_cleanup_free_ char *path = NULL;
		enum ovl_sel_match m;
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		path = ovl_path_join(dirpath, de->d_name);
		if (!path)
			return -ENOMEM;
		m = ovl_sel_match(cm->sel, path);
		if (m == OVL_SEL_NONE)
			continue;
		if (m == OVL_SEL_INSIDE && !protected && cm->env->layers->n_lower == 1) {
			/*
			 * One lower layer: the target now shows exactly what this
			 * entry shows (no whiteout or opaque flag is needed any
			 * more), so the whole entry goes in one rename; the
			 * unlinks happen in the background after the commit.
			 */
			r = ovl_trash_move(cm->env->layers->state_fd, ufd, de->d_name);
			if (r >= 0) {
				ovl_fault_point("prune");
				continue;
			}
			if (r != -EXDEV)
				return r;
		}
		if (fstatat(ufd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			_cleanup_close_ int cfd = openat(ufd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			bool opq;

			if (cfd < 0)
				return -errno;
			opq = ovl_dir_is_opaque(cfd);
			if (opq && m == OVL_SEL_INSIDE && !protected) {
				/*
				 * First: the target dir now holds exactly what upper
				 * shows, so the flag can go without changing the view,
				 * and a crash while pruning below leaves the view intact.
				 */
				r = deopacify(cm, cfd, path);
				if (r < 0)
					return r;
				ovl_fault_point("deopacify");
			}
			r = prune_dir(cm, path, cfd, protected || (opq && m != OVL_SEL_INSIDE));
			if (r < 0)
				return r;
			if (m != OVL_SEL_INSIDE || protected)
				continue;
			if (unlinkat(ufd, de->d_name, AT_REMOVEDIR) < 0 && errno != ENOTEMPTY && errno != EEXIST)
				return -errno;
			ovl_fault_point("prune-dir");
			continue;
		}
		if (m != OVL_SEL_INSIDE || protected)
			continue;
		if (ovl_is_whiteout(&st)) {
			struct stat lst;
			int layer;

			r = ovl_lower_lookup_path(cm->env->layers, path, &lst, &layer, NULL);
			if (r < 0)
				return r;
			if (r > 0) {
				add_detail(&cm->kept, path, "a base layer below the commit target still has this name");
				continue;
			}
		}
		if (unlinkat(ufd, de->d_name, 0) < 0 && errno != ENOENT)
			return -errno;
		ovl_fault_point("prune");
	}
	return 0;
}

/* The workspace's files at the commit's paths that have other names too, for the journal's linked set. */
static int collect_linked(struct commit *cm)
{
	for (size_t i = 0; i < cm->changes->n; i++) {
		const struct ovl_change *e = &cm->changes->v[i];
		const struct ovl_linked l = { .dev = e->old.dev, .ino = e->old.ino, .mode = e->old.mode, .uid = e->old.uid,
			                      .gid = e->old.gid, .size = e->old.size, .mtime = e->old.mtime };
		int r;

		if (!workspace_file(e) || e->old.nlink < 2)
			continue;
		r = ovl_linked_add(&cm->own_linked, &l);
		if (r < 0)
			return r;
	}
	ovl_linked_seal(&cm->own_linked);
	return 0;
}

static int write_journal(struct commit *cm, bool staged)
{
	const struct ovl_journal_mark mark = { .staged = staged, .started = cm->started, .linked = *cm->linked };

	return ovl_journal_write(cm->env->layers->state_fd, cm->target_fd, cm->sel, cm->opts, &mark);
}

static int commit_locked(struct commit *cm, bool recovering, cJSON **ret_error)
{
	const struct ovl_layers *l = cm->env->layers;
	struct ovl_prefetch *prefetch;
	_cleanup_close_ int uroot = -1;
	size_t i;
	int r;

	{
		/* one fd per target directory with staged files: let the soft limit go up to the hard one */
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = MIN(rl.rlim_max, (rlim_t)1 << 20);
			(void)setrlimit(RLIMIT_NOFILE, &rl);
		}
	}
	cm->held = malloc(MAX(cm->changes->n, (size_t)1) * sizeof(int));
	for (i = 0; cm->held && i < cm->changes->n; i++)
		cm->held[i] = -1;
	if (!recovering && cm->sel->n > 0) {
		/*
		 * Before anything changes: an unselected metacopy whose data
		 * this commit replaces or deletes gets its own data (a recovery
		 * must not: the data may have changed already; this one did it
		 * before its journal was written).
		 */
		r = ovl_upper_materialize_dependents(l, cm->env->live, cm->sel, cm->changes, cm->materialized, ret_error);
		if (r < 0)
			return r; /* nothing else changed: each of them is a metacopy or a full copy, both show the same */
	}
	if (!recovering) {
		r = collect_linked(cm);
		if (r >= 0)
			r = write_journal(cm, false);
		if (r < 0)
			return ovl_ctl_error(ret_error, r, "io", NULL, "cannot write the commit journal");
	}
	ovl_fault_point("journal");
	prefetch = ovl_prefetch_start(l, cm->changes);
	for (i = 0; i < cm->changes->n; i++) {
		const struct ovl_change *e = &cm->changes->v[i];

		ovl_prefetch_progress(prefetch, i);
		if (e->new_type == OVL_FT_NONE)
			continue;
		r = stage_entry(cm, e);
		if (r < 0) {
			ovl_prefetch_stop(prefetch);
			goto fail_staging;
		}
		hold_dir(cm, i);
	}
	ovl_prefetch_stop(prefetch);
	if (cm->refused) {
		/* found while staging (xattrs are read once, there): undo like a failure */
		i = cm->changes->n - 1;
		r = -EPERM;
		goto fail_staging;
	}
	r = ovl_syncfs_fd(cm->target_fd);
	if (r < 0)
		goto fail_noentry;
	if (!recovering && !cm->opts->force) {
		recheck_target(cm, &cm->late);
		if (cm->late) {
			i = cm->changes->n - 1;
			r = -EBUSY;
			goto fail_staging;
		}
	}
	ovl_fault_point("staged");
	if (!cm->keep_mc_temps && cm->changes->metacopies > 0) {
		/*
		 * From here on the temps of metacopies are their only sure copy
		 * of the data, and the data of a metacopy that is no change may
		 * go (it is pruned): say so. Without the mark nothing was applied.
		 */
		r = write_journal(cm, true);
		if (r < 0)
			goto fail_noentry;
		ovl_fault_point("journal-staged");
	}
	cm->guard = !recovering && !cm->opts->force;
	for (i = 0; i < cm->changes->n; i++) {
		const struct ovl_change *e = &cm->changes->v[i];

		r = apply_entry(cm, e, i);
		if (r < 0 && cm->changed_at && !cm->applied) {
			/* a host edit met before anything was applied: undone like a late conflict */
			add_detail(&cm->late, cm->changed_at, "changed in the workspace during the commit");
			i = cm->changes->n - 1;
			r = -EBUSY;
			goto fail_staging;
		}
		if (r < 0)
			goto fail;
		cJSON_AddItemToArray(cm->committed, cJSON_CreateString(e->path));
	}
	r = ovl_syncfs_fd(cm->target_fd);
	if (r < 0)
		goto fail_noentry;
	ovl_fault_point("applied");
	uroot = openat(l->upper_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (uroot < 0) {
		r = -errno;
		goto fail_noentry;
	}
	r = 0;
	if (cm->sel->n == 0 && ovl_dir_is_opaque(uroot))
		r = deopacify(cm, uroot, "");
	if (r >= 0)
		r = prune_dir(cm, "", uroot, false);
	if (r < 0)
		goto fail_noentry;
	r = ovl_syncfs_fd(l->upper_fd);
	if (r < 0)
		goto fail_noentry;
	ovl_fault_point("pruned");
	r = ovl_journal_remove(l->state_fd);
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "io", NULL, "cannot remove the commit journal");
	ovl_trash_purge(l->state_fd, cm->env->in_daemon || cm->env->live);
	return 0;

fail_staging:
	/*
	 * Nothing was renamed by this run yet: drop the temps and the journal,
	 * the commit never happened. A recovery keeps the journal (and, when
	 * staged, the temps it kept): the interrupted commit may have applied.
	 */
	{
		const char *at = cm->changes->v[i].path;

		for (size_t j = 0; j <= i; j++) {
			const struct ovl_change *e = &cm->changes->v[j];
			_cleanup_free_ char *dir = NULL;
			const char *name;
			char tmp[64];
			int dfd;

			if (e->new_type == OVL_FT_NONE)
				continue;
			/* a staged recovery keeps the temps of metacopies, and the staged dirs holding them */
			if (cm->keep_mc_temps && (e->new_type == OVL_FT_DIR || (e->metacopy && e->new_type == OVL_FT_FILE)))
				continue;
			if (e->new_type == OVL_FT_DIR) {
				bool staged = false;

				for (size_t k = 0; k < cm->n_remap; k++)
					staged = staged || (cm->remap_from[k] && strcmp(cm->remap_from[k], e->path) == 0);
				if (!staged)
					continue;
			}
			split_path(e->path, &dir, &name);
			if (!dir)
				continue;
			dfd = target_dir(cm, dir, false);
			if (dfd < 0)
				continue;
			tmp_name(tmp, e->path);
			(void)ovl_rm_rf_at(dfd, tmp, 0);
		}
		/* directories created for the staged entries, deepest first */
		cache_drop(cm);
		for (size_t j = cm->n_created; j-- > 0;)
			created_undo(cm, &cm->created[j]);
		if (!recovering)
			(void)ovl_journal_remove(l->state_fd);
		if (cm->refused)
			return commit_error_paths(ret_error, -EPERM, "refused", TAKE_PTR(cm->refused),
			                          "not committed without an explicit allow flag");
		if (cm->late)
			return commit_error_paths(ret_error, -EBUSY, "conflict", TAKE_PTR(cm->late),
			                          "the workspace changed during the commit, nothing was committed "
			                          "(use force to overwrite)");
		if (recovering)
			return ovl_ctl_error(ret_error, r, "io", NULL,
			                     "recovery failed while staging '%s'; the journal was kept, run 'draftfs recover' "
			                     "once the cause is fixed",
			                     at);
		return ovl_ctl_error(ret_error, r, "io", NULL, "commit failed while staging '%s', nothing was changed",
		                     at);
	}
fail:
	if (cm->changed_at) {
		cJSON *d = NULL;

		add_detail(&d, cm->changed_at, "changed in the workspace during the commit");
		return commit_error_paths(ret_error, -EBUSY, "conflict", d,
		                          "the workspace changed during the commit, which stopped there with part of it "
		                          "applied and its journal kept: move the edit away and run 'draftfs recover', "
		                          "or 'draftfs recover --force' over it");
	}
	return ovl_ctl_error(ret_error, r, "io", NULL,
	                     "commit failed at '%s'; the journal was kept, run 'draftfs recover' once the cause is fixed",
	                     cm->changes->v[i].path);
fail_noentry:
	return ovl_ctl_error(ret_error, r, "io", NULL,
	                     "commit failed; the journal was kept, run 'draftfs recover' once the cause is fixed");
}

/*
 * When a commit begins, before its changes are read: the next tick of the
 * coarse realtime clock (file timestamps come from it, or from the fine
 * clock never behind it), waited for. An entry changed from then on has a
 * ctime not before it; one changed before has an older ctime but for an
 * edit made between the tick and the wake-up (microseconds), where a
 * ctime in the tick itself would leave a commit that starts right after
 * an edit unable to tell that edit from a later one (up to a tick, 4 ms).
 */
static struct timespec start_time(void)
{
	struct timespec t0, t;

	(void)clock_gettime(CLOCK_REALTIME_COARSE, &t0);
	for (int i = 0; i < 2000; i++) {
		(void)nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
		(void)clock_gettime(CLOCK_REALTIME_COARSE, &t);
		if (t.tv_sec != t0.tv_sec || t.tv_nsec != t0.tv_nsec)
			return t;
	}
	return t; /* 40 ms without a tick: a clock that does not move the coarse way */
}

int ovl_commit_run(const struct ovl_ctl_env *env, const struct ovl_sel *sel, const struct ovl_commit_opts *opts,
                   const struct ovl_journal_mark *journal, cJSON **ret_result, cJSON **ret_error)
{
	static const struct ovl_commit_opts defaults = { 0 };
	_cleanup_(ovl_changes_freep) struct ovl_changes *changes = NULL;
	_cleanup_json_ cJSON *res = NULL, *problems = NULL, *kept = NULL, *committed = NULL, *materialized = NULL;
	const struct ovl_live *live = env->live;
	bool recovering = journal != NULL;
	struct commit cm = { 0 };
	int r, notified = 0;

	if (!opts)
		opts = &defaults;
	if (!recovering) {
		r = ovl_journal_pending(env->layers->state_fd);
		if (r > 0)
			return ovl_ctl_error(ret_error, -EBUSY, "busy", NULL,
			                     "an interrupted commit is pending; run 'draftfs recover' first");
	}
	committed = cJSON_CreateArray();
	materialized = cJSON_CreateArray();
	if (!committed || !materialized)
		return -ENOMEM;
	cm = (struct commit){ .env = env, .sel = sel, .opts = opts, .target_fd = env->layers->lower_fds[0],
	                      .dir_fd = -1, .udir_fd = -1, .committed = committed, .materialized = materialized };
	cm.recovering = recovering;
	cm.keep_mc_temps = recovering && journal->staged;
	if (fstat(cm.target_fd, &cm.target_root) < 0)
		return ovl_ctl_error(ret_error, -errno, "io", NULL, "cannot stat the commit target");

	if (live)
		live->quiesce(live->userdata, true);
	cm.linked = recovering ? &journal->linked : &cm.own_linked;
	if (recovering)
		cm.started = journal->started;
	else if (!opts->dry_run)
		cm.started = start_time(); /* a dry run writes no journal and applies nothing */
	/* a recovery may find the data of a metacopy already changed: it keeps the staged temp then */
	r = ovl_diff_compute(env->layers, sel, OVL_DIFF_ORIGINS | OVL_DIFF_DATA | (recovering ? OVL_DIFF_LENIENT : 0), &changes,
	                     ret_error);
	if (r < 0)
		goto out;
	cm.changes = changes;
	if (!recovering) {
		r = ovl_diff_check_selection(env->layers, sel, changes, ret_error);
		if (r < 0)
			goto out;
		check_selection_shape(&cm, &problems);
		if (problems) {
			r = commit_error_paths(ret_error, -EINVAL, "invalid_argument", TAKE_PTR(problems),
			                       "selection cannot be committed alone");
			goto out;
		}
		check_path_lengths(&cm, &problems);
		if (problems) {
			r = commit_error_paths(ret_error, -ENAMETOOLONG, "refused", TAKE_PTR(problems),
			                       "paths too long to commit");
			goto out;
		}
		check_refusals(&cm, &problems);
		if (problems) {
			/* complete the list with what staging would find */
			scan_xattr_refusals(&cm);
			if (cm.refused) {
				cJSON *d;

				while ((d = cJSON_DetachItemFromArray(cm.refused, 0)))
					cJSON_AddItemToArray(problems, d);
			}
			r = commit_error_paths(ret_error, -EPERM, "refused", TAKE_PTR(problems),
			                       "not committed without an explicit allow flag");
			goto out;
		}
		if (!opts->force) {
			check_conflicts(&cm, &problems);
			if (problems) {
				r = commit_error_paths(ret_error, -EBUSY, "conflict", TAKE_PTR(problems),
				                       "the workspace changed since the session shadowed these paths "
				                       "(use force to overwrite)");
				goto out;
			}
		}
	} else if (!opts->force && cm.started.tv_sec != 0) {
		check_recovery(&cm, &problems);
		if (problems) {
			r = commit_error_paths(ret_error, -EBUSY, "conflict", TAKE_PTR(problems),
			                       "the workspace changed after the interrupted commit began (nothing done, journal "
			                       "kept): move the edits away and recover again, or recover --force to overwrite them");
			goto out;
		}
	}
	if (opts->dry_run) {
		if (!recovering)
			scan_xattr_refusals(&cm);
		if (cm.refused) {
			r = commit_error_paths(ret_error, -EPERM, "refused", TAKE_PTR(cm.refused),
			                       "not committed without an explicit allow flag");
			goto out;
		}
		for (size_t i = 0; i < changes->n; i++)
			cJSON_AddItemToArray(committed, cJSON_CreateString(changes->v[i].path));
		r = 0;
	} else if (changes->n == 0 && !recovering && ovl_journal_pending(env->layers->state_fd) == 0) {
		r = 0; /* nothing to do; copies equal to lower may stay in upper */
	} else {
		r = commit_locked(&cm, recovering, ret_error);
	}
out:
	if (live) {
		/* changed() before releasing the writers: a writer that waited on
		 * the quiesce must not reach a committed path through stale state */
		if (r >= 0 && !opts->dry_run) {
			if (sel->n == 0)
				live->changed(live->userdata, "");
			for (size_t i = 0; i < sel->n; i++)
				live->changed(live->userdata, sel->v[i]);
		}
		live->quiesce(live->userdata, false);
	}
	kept = cm.kept;
	remap_done(&cm);
	held_done(&cm);
	ovl_changes_free(cm.all_changes);
	cJSON_Delete(cm.refused);
	cJSON_Delete(cm.late);
	free(cm.changed_at);
	ovl_inoset_done(&cm.relinked);
	ovl_linked_done(&cm.own_linked);
	for (size_t i = 0; i < cm.n_created; i++)
		free(cm.created[i].path);
	free(cm.created);
	free(cm.udir_path);
	safe_close(cm.udir_fd);
	free(cm.dir_path);
	safe_close(cm.dir_fd);
	if (r < 0)
		return r;
	if (!opts->dry_run && changes->n > 0)
		notified = ovl_registry_notify(env->layers, sel);
	res = cJSON_CreateObject();
	if (!res)
		return -ENOMEM;
	cJSON_AddItemToObject(res, "committed", TAKE_PTR(committed));
	cJSON_AddItemToObject(res, "kept", kept ? TAKE_PTR(kept) : cJSON_CreateArray());
	cJSON_AddItemToObject(res, "materialized", TAKE_PTR(materialized));
	cJSON_AddItemToObject(res, "summary", ovl_summary_to_json(&changes->summary));
	cJSON_AddNumberToObject(res, "invalidated_mounts", notified > 0 ? notified : 0);
	cJSON_AddBoolToObject(res, "dry_run", opts->dry_run);
	if (ret_result)
		*ret_result = TAKE_PTR(res);
	return 0;
}

int ovl_op_commit(const struct ovl_ctl_env *env, char *const *paths, const struct ovl_commit_opts *opts,
                  cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_(ovl_sel_done) struct ovl_sel sel = { 0 };
	int r;

	r = ovl_sel_parse(paths, &sel, ret_error);
	if (r < 0)
		return r;
	return ovl_commit_run(env, &sel, opts, NULL, ret_result, ret_error);
}
