// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Discard: drops the session's changes, all of them or those under selected
 * paths, by removing the corresponding upper entries (with writers
 * quiesced when mounted), then tells the core to drop its caches so the
 * view reverts at once.
 *
 * A path inside an upper directory that hides lower content wholesale (an
 * opaque dir, a whiteout) cannot be reverted alone when lower has it: the
 * lower entry would stay hidden. Discard then refuses and names the
 * directory to discard instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ctl-ops.h"
#include "diff.h"
#include "fdpath.h"
#include "journal.h"
#include "json-util.h"

/*
 * Finds the upper ancestor of @path nearest the root that hides lower
 * content below it. Returns 1 and *ret_at (new string) and *ret_opaque_dir
 * (an opaque directory, rather than a whiteout or a non-directory), 0, or
 * -errno.
 */
static int hiding_ancestor(const struct ovl_layers *l, const char *path, char **ret_at, bool *ret_opaque_dir)
{
	_cleanup_free_ char *copy = strdup(path);
	char *slash;

	if (!copy)
		return -ENOMEM;
	for (slash = strchr(copy, '/'); slash; slash = strchr(slash + 1, '/')) {
		_cleanup_close_ int fd = -1;
		struct stat st;

		*slash = '\0';
		fd = openat_beneath(l->upper_fd, copy, O_PATH, 0);
		if (fd == -ENOENT)
			return 0;
		if (fd < 0 && fd != -ELOOP && fd != -ENOTDIR)
			return fd;
		if (fd >= 0 && fstat(fd, &st) < 0)
			return -errno;
		*ret_opaque_dir = false;
		if (fd >= 0 && S_ISDIR(st.st_mode)) {
			_cleanup_close_ int dfd = fd_reopen(fd, O_RDONLY | O_DIRECTORY);

			if (dfd < 0)
				return dfd;
			if (!ovl_dir_is_opaque(dfd)) {
				*slash = '/';
				continue;
			}
			*ret_opaque_dir = true;
		}
		*ret_at = strdup(copy);
		return *ret_at ? 1 : -ENOMEM;
	}
	return 0;
}

static int set_origin(int fd_or_dir, const char *name, const struct stat *st, int layer)
{
	char v[256], p[PATH_MAX];

	snprintf(v, sizeof(v), "v1 layer=%d dev=%llu ino=%llu size=%lld mtime=%lld.%09ld ctime=%lld.%09ld mode=%o", layer,
	         (unsigned long long)st->st_dev, (unsigned long long)st->st_ino, (long long)st->st_size,
	         (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec, (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec,
	         (unsigned)st->st_mode);
	snprintf(p, sizeof(p), "/proc/self/fd/%d/%s", fd_or_dir, name);
	if (lsetxattr(p, OVL_XATTR_ORIGIN, v, strlen(v), 0) < 0 && errno != EPERM && errno != ENOTSUP)
		return -errno;
	return 0;
}

static int copy_xattrs_from(int src_dir, const char *src_name, int dst_fd)
{
	_cleanup_strv_free_ char **x = NULL;
	int r = ovl_list_xattrs_at(src_dir, src_name, &x);

	for (char **s = x; r > 0 && *s; s++) {
		_cleanup_free_ char *val = NULL;
		char *eq = strchr(*s, '=');
		ssize_t n;

		if (!eq)
			continue;
		*eq = '\0';
		n = ovl_get_xattr_at(src_dir, src_name, *s, &val);
		if (n >= 0 && fsetxattr(dst_fd, *s, val, (size_t)n, 0) < 0 && errno != ENOTSUP && errno != EPERM)
			return -errno;
	}
	return r < 0 ? r : 0;
}

/*
 * Copies entry @name of the lower view @ls (looked up as overlayfs does)
 * to @dst_name in upper dir @dst_fd, with its metadata and an origin
 * record, recursively. Never follows a symlink.
 */
static int copy_from_lower(const struct ovl_lstack *ls, const char *name, int dst_fd, const char *dst_name,
                           unsigned depth)
{
	_cleanup_(ovl_lstack_done) struct ovl_lstack child = { 0 };
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { 0 } };
	struct stat st;
	int layer, src_dir = -1, r;

	if (depth > 4096)
		return -ELOOP;
	r = ovl_lstack_lookup(ls, name, &st, &layer, &child);
	if (r <= 0)
		return r == 0 ? -ENOENT : r;
	for (size_t i = 0; i < ls->n; i++)
		if (ls->layer[i] == layer) {
			src_dir = ls->fds[i];
			break;
		}
	if (src_dir < 0)
		return -ENOENT;
	ts[1] = st.st_mtim;
	if (S_ISDIR(st.st_mode)) {
		_cleanup_strv_free_ char **names = NULL;
		_cleanup_close_ int fd = -1;
		size_t n = 0;

		if (mkdirat(dst_fd, dst_name, 0700) < 0)
			return -errno;
		fd = openat(dst_fd, dst_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		r = ovl_lstack_names(&child, &names, &n);
		for (size_t i = 0; r >= 0 && i < n; i++)
			r = copy_from_lower(&child, names[i], fd, names[i], depth + 1);
		if (r >= 0)
			r = copy_xattrs_from(src_dir, name, fd);
		if (r < 0)
			return r;
		if (fchown(fd, st.st_uid, st.st_gid) < 0 || fchmod(fd, st.st_mode & 07777) < 0 || futimens(fd, ts) < 0)
			return -errno;
	} else if (S_ISREG(st.st_mode)) {
		_cleanup_close_ int in = -1, out = -1;

		in = openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (in < 0)
			return -errno;
		out = openat(dst_fd, dst_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (out < 0)
			return -errno;
		r = ovl_copy_fd(in, out, (uint64_t)st.st_size);
		if (r >= 0)
			r = copy_xattrs_from(src_dir, name, out);
		if (r < 0)
			return r;
		if (fchown(out, st.st_uid, st.st_gid) < 0 || fchmod(out, st.st_mode & 07777) < 0 || futimens(out, ts) < 0)
			return -errno;
	} else if (S_ISLNK(st.st_mode)) {
		char target[4097];
		ssize_t n = readlinkat(src_dir, name, target, sizeof(target) - 1);

		if (n < 0)
			return -errno;
		target[n] = '\0';
		if (symlinkat(target, dst_fd, dst_name) < 0 ||
		    fchownat(dst_fd, dst_name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
		    utimensat(dst_fd, dst_name, ts, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	} else {
		if (mknodat(dst_fd, dst_name, st.st_mode, st.st_rdev) < 0 ||
		    fchownat(dst_fd, dst_name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
	}
	return set_origin(dst_fd, dst_name, &st, layer);
}

/*
 * Discards @path inside the opaque upper dir @at by putting a copy of the
 * lower entry in upper: the opaque dir hides lower, so only a copy makes
 * the lower version visible again. The copy is built under a temp name and
 * renamed into place. Upper dirs between @at and @path must be plain
 * directories (they are created from lower where missing).
 */
static int restore_from_lower(const struct ovl_layers *l, const char *at, const char *path)
{
	_cleanup_(ovl_lstack_done) struct ovl_lstack ls = { 0 };
	_cleanup_free_ char *parent = NULL;
	_cleanup_close_ int ufd = -1;
	const char *name = strrchr(path, '/') + 1; /* path is below @at: it has a slash */
	struct stat st;
	char tmp[64];
	int layer, r;

	parent = strndup(path, (size_t)(name - 1 - path));
	if (!parent)
		return -ENOMEM;
	r = ovl_lower_lookup_path(l, parent, &st, &layer, &ls);
	if (r <= 0)
		return r == 0 ? -ENOENT : r;
	/* the upper dirs from @at down to the parent */
	ufd = openat_beneath(l->upper_fd, at, O_PATH | O_DIRECTORY, 0);
	if (ufd < 0)
		return ufd;
	for (const char *p = parent + strlen(at); *p == '/';) {
		const char *end = strchr(p + 1, '/');
		_cleanup_free_ char *comp = end ? strndup(p + 1, (size_t)(end - p - 1)) : strdup(p + 1);
		_cleanup_free_ char *prefix = NULL;
		struct stat lst;
		int fd, lyr;

		if (!comp)
			return -ENOMEM;
		prefix = strndup(parent, (size_t)((end ? end : p + 1 + strlen(p + 1)) - parent));
		if (!prefix)
			return -ENOMEM;
		if (ovl_lower_lookup_path(l, prefix, &lst, &lyr, NULL) <= 0)
			return -ENOENT;
		if (mkdirat(ufd, comp, lst.st_mode & 07777) == 0) {
			if (fchownat(ufd, comp, lst.st_uid, lst.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
				return -errno;
		} else if (errno != EEXIST) {
			return -errno;
		}
		fd = openat(ufd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno == ENOTDIR || errno == ELOOP ? -ENOTDIR : -errno;
		safe_close(ufd);
		ufd = fd;
		p = end ? end : p + 1 + strlen(p + 1);
	}
	snprintf(tmp, sizeof(tmp), ".#draftfs-restore.%d", (int)getpid());
	(void)ovl_rm_rf_at(ufd, tmp, 0);
	r = copy_from_lower(&ls, name, ufd, tmp, 0);
	if (r < 0) {
		(void)ovl_rm_rf_at(ufd, tmp, 0);
		return r;
	}
	if (renameat(ufd, tmp, ufd, name) < 0) {
		r = -errno;
		(void)ovl_rm_rf_at(ufd, tmp, 0);
		return r;
	}
	return 0;
}

static int discard_all(const struct ovl_layers *l)
{
	_cleanup_close_ int fd = -1;
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int r;

	fd = openat(l->upper_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	d = fdopendir(TAKE_FD(fd));
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		r = ovl_trash_move(l->state_fd, dirfd(d), de->d_name);
		if (r == -EXDEV)
			r = ovl_rm_rf_at(dirfd(d), de->d_name, 0);
		if (r < 0)
			return r;
	}
	if (fremovexattr(dirfd(d), OVL_XATTR_OPAQUE) < 0 && errno != ENODATA && errno != ENOTSUP)
		return -errno;
	return 0;
}

int ovl_op_discard(const struct ovl_ctl_env *env, char *const *paths, cJSON **ret_result, cJSON **ret_error)
{
	const struct ovl_layers *l = env->layers;
	_cleanup_(ovl_changes_freep) struct ovl_changes *c = NULL;
	_cleanup_(ovl_sel_done) struct ovl_sel sel = { 0 };
	_cleanup_json_ cJSON *res = NULL, *list = NULL;
	char **restore_at = NULL;
	int r = 0;

	r = ovl_sel_parse(paths, &sel, ret_error);
	if (r < 0)
		return r;
	if (ovl_journal_pending(l->state_fd) > 0)
		return ovl_ctl_error(ret_error, -EBUSY, "busy", NULL,
		                     "an interrupted commit is pending; run 'draftfs recover' first");
	list = cJSON_CreateArray();
	if (!list)
		return -ENOMEM;
	if (env->live)
		env->live->quiesce(env->live->userdata, true);
	r = ovl_diff_compute(l, &sel, OVL_DIFF_LENIENT, &c, ret_error);
	if (r < 0)
		goto out;
	r = ovl_diff_check_selection(l, &sel, c, ret_error);
	if (r < 0)
		goto out;
	restore_at = calloc(MAX(sel.n, (size_t)1), sizeof(char *));
	if (!restore_at) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < sel.n; i++) {
		_cleanup_free_ char *at = NULL;
		bool opaque_dir = false;
		struct stat st;
		int layer;

		r = hiding_ancestor(l, sel.v[i], &at, &opaque_dir);
		if (r < 0) {
			r = ovl_ctl_error(ret_error, r, "io", NULL, "cannot look up '%s' in upper", sel.v[i]);
			goto out;
		}
		if (r > 0 && opaque_dir && ovl_lower_lookup_path(l, sel.v[i], &st, &layer, NULL) > 0) {
			restore_at[i] = TAKE_PTR(at); /* revert by copying lower back in */
			continue;
		}
		if (r > 0 && ovl_lower_lookup_path(l, sel.v[i], &st, &layer, NULL) > 0) {
			cJSON *p = cJSON_CreateArray();

			cJSON_AddItemToArray(p, cJSON_CreateString(sel.v[i]));
			r = ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", p,
			                  "cannot discard '%s' alone: '%s' deleted or replaced it; discard '%s' instead",
			                  sel.v[i], at, at);
			goto out;
		}
	}
	if (sel.n == 0) {
		r = discard_all(l);
		if (r < 0) {
			r = ovl_ctl_error(ret_error, r, "io", NULL, "cannot empty the upper layer");
			goto out;
		}
		cJSON_AddItemToArray(list, cJSON_CreateString(""));
	}
	for (size_t i = 0; i < sel.n; i++) {
		_cleanup_close_ int pfd = -1;
		const char *name;

		pfd = openat_beneath_parent(l->upper_fd, sel.v[i], &name);
		if (pfd == -ENOENT && !restore_at[i])
			continue;
		if (pfd < 0 && pfd != -ENOENT) {
			r = ovl_ctl_error(ret_error, pfd, "io", NULL, "cannot open the upper directory of '%s'", sel.v[i]);
			goto out;
		}
		r = 0;
		if (pfd >= 0) {
			r = ovl_trash_move(l->state_fd, pfd, name);
			if (r == -EXDEV)
				r = ovl_rm_rf_at(pfd, name, 0);
			if (r == -ENOENT)
				r = 0;
		}
		/* else: the upper dirs down to it are created by restore_from_lower() */
		if (r >= 0 && restore_at[i])
			r = restore_from_lower(l, restore_at[i], sel.v[i]);
		if (r < 0) {
			r = ovl_ctl_error(ret_error, r, "io", NULL, "cannot discard '%s'", sel.v[i]);
			goto out;
		}
		cJSON_AddItemToArray(list, cJSON_CreateString(sel.v[i]));
	}
	r = 0;
out:
	for (size_t i = 0; restore_at && i < sel.n; i++)
		free(restore_at[i]);
	free(restore_at);
	if (env->live) {
		/* changed() before releasing the writers (see control.h) */
		if (r >= 0) {
			if (sel.n == 0)
				env->live->changed(env->live->userdata, "");
			for (size_t i = 0; i < sel.n; i++)
				env->live->changed(env->live->userdata, sel.v[i]);
		}
		env->live->quiesce(env->live->userdata, false);
	}
	if (r < 0)
		return r;
	ovl_trash_purge(l->state_fd, env->in_daemon || env->live);
	res = cJSON_CreateObject();
	if (!res)
		return -ENOMEM;
	cJSON_AddItemToObject(res, "discarded", TAKE_PTR(list));
	cJSON_AddItemToObject(res, "summary", ovl_summary_to_json(&c->summary));
	if (ret_result)
		*ret_result = TAKE_PTR(res);
	return 0;
}
