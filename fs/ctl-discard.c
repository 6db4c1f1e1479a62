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

/* Finds an upper ancestor of @path that hides lower content below it. Returns 1 and *ret_at (new string), 0, or -errno. */
static int hiding_ancestor(const struct ovl_layers *l, const char *path, char **ret_at)
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
		if (fd >= 0 && S_ISDIR(st.st_mode)) {
			_cleanup_close_ int dfd = fd_reopen(fd, O_RDONLY | O_DIRECTORY);

			if (dfd < 0)
				return dfd;
			if (!ovl_dir_is_opaque(dfd)) {
				*slash = '/';
				continue;
			}
		}
		*ret_at = strdup(copy);
		return *ret_at ? 1 : -ENOMEM;
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
	r = ovl_diff_compute(l, &sel, 0, &c);
	if (r < 0) {
		r = ovl_ctl_error(ret_error, r, "io", NULL, "cannot compute the changes");
		goto out;
	}
	r = ovl_diff_check_selection(l, &sel, c, ret_error);
	if (r < 0)
		goto out;
	for (size_t i = 0; i < sel.n; i++) {
		_cleanup_free_ char *at = NULL;
		struct stat st;
		int layer;

		r = hiding_ancestor(l, sel.v[i], &at);
		if (r < 0) {
			r = ovl_ctl_error(ret_error, r, "io", NULL, "cannot look up '%s' in upper", sel.v[i]);
			goto out;
		}
		if (r > 0 && ovl_lower_lookup_path(l, sel.v[i], &st, &layer, NULL) > 0) {
			cJSON *p = cJSON_CreateArray();

			cJSON_AddItemToArray(p, cJSON_CreateString(sel.v[i]));
			r = ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", p,
			                  "cannot discard '%s' alone: '%s' replaced the lower directory as a whole; "
			                  "discard '%s' instead",
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
		if (pfd == -ENOENT)
			continue;
		if (pfd < 0) {
			r = ovl_ctl_error(ret_error, pfd, "io", NULL, "cannot open the upper directory of '%s'", sel.v[i]);
			goto out;
		}
		r = ovl_trash_move(l->state_fd, pfd, name);
		if (r == -EXDEV)
			r = ovl_rm_rf_at(pfd, name, 0);
		if (r == -ENOENT)
			r = 0;
		if (r < 0) {
			r = ovl_ctl_error(ret_error, r, "io", NULL, "cannot discard '%s'", sel.v[i]);
			goto out;
		}
		cJSON_AddItemToArray(list, cJSON_CreateString(sel.v[i]));
	}
	r = 0;
out:
	if (env->live) {
		env->live->quiesce(env->live->userdata, false);
		if (r >= 0) {
			if (sel.n == 0)
				env->live->changed(env->live->userdata, "");
			for (size_t i = 0; i < sel.n; i++)
				env->live->changed(env->live->userdata, sel.v[i]);
		}
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
