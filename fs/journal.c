// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The commit intent journal (journal.h) and recovery: a small JSON file
 * written with the temp-file + rename + fsync(dir) dance. Recovery reads it
 * and runs the same commit again in "recovering" mode, which is idempotent:
 * what was already renamed into the target is no longer a change, and the
 * prune pass drops what is left of it in upper.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bgfill.h"
#include "commit.h"
#include "ctl-ops.h"
#include "fdpath.h"
#include "finalize.h"
#include "journal.h"
#include "json-util.h"
#include "log.h"

int ovl_fsync_dir(int dir_fd)
{
	_cleanup_close_ int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		return -errno;
	return 0;
}

int ovl_syncfs_fd(int fd)
{
	_cleanup_close_ int rfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (rfd < 0)
		return -errno;
	if (syncfs(rfd) < 0)
		return -errno;
	return 0;
}

int ovl_journal_pending(int state_fd)
{
	struct stat st;

	if (state_fd < 0)
		return 0;
	if (fstatat(state_fd, OVL_JOURNAL_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	return 1;
}

static const char *owner_to_string(enum ovl_commit_owner o)
{
	return o == OVL_OWNER_PRESERVE ? "preserve" : o == OVL_OWNER_FIXED ? "fixed" : "workspace";
}

void ovl_journal_mark_done(struct ovl_journal_mark *m)
{
	ovl_linked_done(&m->linked);
}

int ovl_journal_write(int state_fd, int target_fd, const struct ovl_sel *sel, const struct ovl_commit_opts *opts,
                      const struct ovl_journal_mark *mark)
{
	_cleanup_json_ cJSON *j = cJSON_CreateObject();
	_cleanup_cjson_str_ char *text = NULL;
	_cleanup_close_ int fd = -1;
	struct stat st;
	cJSON *paths;
	int r;

	if (!j)
		return -ENOMEM;
	if (fstat(target_fd, &st) < 0)
		return -errno;
	cJSON_AddNumberToObject(j, "version", 1);
	json_add_u64(j, "target_dev", st.st_dev);
	json_add_u64(j, "target_ino", st.st_ino);
	paths = cJSON_AddArrayToObject(j, "paths");
	for (size_t i = 0; i < sel->n; i++)
		cJSON_AddItemToArray(paths, cJSON_CreateString(sel->v[i]));
	cJSON_AddStringToObject(j, "owner", owner_to_string(opts->owner));
	json_add_u64(j, "uid", opts->uid);
	json_add_u64(j, "gid", opts->gid);
	if (mark->staged)
		cJSON_AddBoolToObject(j, "staged", true);
	/* two numbers: nanoseconds since the epoch do not fit a double exactly */
	json_add_u64(j, "started_sec", (uint64_t)mark->started.tv_sec);
	json_add_u64(j, "started_nsec", (uint64_t)mark->started.tv_nsec);
	if (mark->linked.n > 0) {
		cJSON *linked = ovl_linked_to_json(&mark->linked);

		if (!linked || !cJSON_AddItemToObject(j, "linked", linked)) {
			cJSON_Delete(linked);
			return -ENOMEM;
		}
	}
	text = cJSON_PrintUnformatted(j);
	if (!text)
		return -ENOMEM;
	(void)unlinkat(state_fd, OVL_JOURNAL_NAME ".tmp", 0);
	fd = openat(state_fd, OVL_JOURNAL_NAME ".tmp", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = write_full(fd, text, strlen(text));
	if (r >= 0 && fsync(fd) < 0)
		r = -errno;
	if (r >= 0 && renameat(state_fd, OVL_JOURNAL_NAME ".tmp", state_fd, OVL_JOURNAL_NAME) < 0)
		r = -errno;
	if (r < 0) {
		(void)unlinkat(state_fd, OVL_JOURNAL_NAME ".tmp", 0);
		return r;
	}
	return ovl_fsync_dir(state_fd);
}

int ovl_journal_read(int state_fd, int target_fd, struct ovl_sel *ret_sel, struct ovl_commit_opts *ret_opts,
                     struct ovl_journal_mark *ret_mark)
{
	_cleanup_(ovl_journal_mark_done) struct ovl_journal_mark mark = { 0 };
	const cJSON *linked;
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int fd = -1;
	_cleanup_json_ cJSON *j = NULL;
	_cleanup_strv_free_ char **paths = NULL;
	struct ovl_commit_opts o = { 0 };
	const char *owner = NULL;
	int64_t dev, ino, uid = 0, gid = 0, started_sec = 0, started_nsec = 0;
	bool staged = false;
	struct stat st;
	size_t len;
	int r;

	fd = openat(state_fd, OVL_JOURNAL_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = read_full_fd(fd, 64 << 20, &text, &len);
	if (r < 0)
		return r;
	j = cJSON_ParseWithLength(text, len);
	if (!j)
		return -EUCLEAN;
	if (json_get_int64(j, "target_dev", 0, INT64_MAX, &dev) < 0 ||
	    json_get_int64(j, "target_ino", 0, INT64_MAX, &ino) < 0)
		return -EUCLEAN;
	if (fstat(target_fd, &st) < 0)
		return -errno;
	if ((uint64_t)dev != (uint64_t)st.st_dev || (uint64_t)ino != (uint64_t)st.st_ino)
		return -EUCLEAN;
	r = json_get_strv(j, "paths", &paths);
	if (r < 0 && r != -ENOENT)
		return -EUCLEAN;
	(void)json_get_string(j, "owner", &owner);
	(void)json_get_int64(j, "uid", 0, UINT32_MAX, &uid);
	(void)json_get_int64(j, "gid", 0, UINT32_MAX, &gid);
	if (json_get_bool(j, "staged", &staged) == -EINVAL ||
	    json_get_int64(j, "started_sec", 0, INT64_MAX, &started_sec) == -EINVAL ||
	    json_get_int64(j, "started_nsec", 0, 999999999, &started_nsec) == -EINVAL)
		return -EUCLEAN;
	o.owner = owner && strcmp(owner, "preserve") == 0 ? OVL_OWNER_PRESERVE
	          : owner && strcmp(owner, "fixed") == 0  ? OVL_OWNER_FIXED
	                                                  : OVL_OWNER_WORKSPACE;
	o.uid = (uid_t)uid;
	o.gid = (gid_t)gid;
	o.allow_setid = o.allow_special = o.allow_xattrs = true;
	linked = cJSON_GetObjectItemCaseSensitive(j, "linked");
	if (linked && !cJSON_IsNull(linked)) {
		r = ovl_linked_from_json(linked, &mark.linked);
		if (r < 0)
			return r;
	}
	mark.staged = staged;
	mark.started = (struct timespec){ .tv_sec = started_sec, .tv_nsec = started_nsec };
	r = ovl_sel_parse(paths, ret_sel, NULL);
	if (r < 0)
		return -EUCLEAN;
	*ret_opts = o;
	*ret_mark = mark;
	mark = (struct ovl_journal_mark){ 0 };
	return 1;
}

int ovl_journal_remove(int state_fd)
{
	if (unlinkat(state_fd, OVL_JOURNAL_NAME, 0) < 0 && errno != ENOENT)
		return -errno;
	return ovl_fsync_dir(state_fd);
}

int ovl_op_recover(const struct ovl_ctl_env *env, bool force, cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_(ovl_sel_done) struct ovl_sel sel = { 0 };
	_cleanup_json_ cJSON *res = NULL, *inner = NULL;
	_cleanup_(ovl_journal_mark_done) struct ovl_journal_mark mark = { 0 };
	struct ovl_commit_opts opts;
	int r;

	r = ovl_journal_read(env->layers->state_fd, env->layers->lower_fds[0], &sel, &opts, &mark);
	if (r == -EUCLEAN)
		return ovl_ctl_error(ret_error, r, "io", NULL,
		                     "the commit journal in the state dir is unreadable or belongs to another target; "
		                     "move '" OVL_JOURNAL_NAME "' away to continue");
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "io", NULL, "cannot read the commit journal");
	res = cJSON_CreateObject();
	if (!res)
		return -ENOMEM;
	cJSON_AddBoolToObject(res, "recovered", r > 0);
	cJSON_AddNumberToObject(res, "paths", r > 0 ? (double)sel.n : 0);
	if (!env->live && !env->in_daemon) {
		/* No daemon: finish the copy-ups a killed one left, so kernel overlayfs reads the upper right too. */
		int q = ovl_bgfill_recover(env->layers, true);
		unsigned fin = 0;

		if (q >= 0)
			q = ovl_finalize_offline(env->layers, &fin);
		if (q < 0)
			return ovl_ctl_error(ret_error, q, "io", NULL,
			                     "cannot finish the copy-ups a killed draftfs left in the upper");
		cJSON_AddNumberToObject(res, "finalized", fin);
	}
	if (r > 0) {
		opts.force = force;
		r = ovl_commit_run(env, &sel, &opts, &mark, &inner, ret_error);
		if (r < 0)
			return r;
		cJSON_AddItemToObject(res, "commit", TAKE_PTR(inner));
	}
	if (ret_result)
		*ret_result = TAKE_PTR(res);
	return 0;
}

int ovl_journal_recover(const struct ovl_layers *layers)
{
	struct ovl_ctl_env env = { .layers = layers, .in_daemon = true };
	_cleanup_json_ cJSON *err = NULL, *res = NULL;
	_cleanup_close_ int lock = -1;
	const char *msg = NULL;
	int r;

	r = ovl_journal_pending(layers->state_fd);
	if (r < 0)
		return log_error_errno(r, "cannot look for the journal of an interrupted commit");
	if (r == 0)
		return 0;
	lock = ovl_ctl_take_lock(layers->state_fd, false);
	if (lock < 0)
		return log_error_errno(lock, "cannot lock the state dir to finish an interrupted commit");
	r = ovl_op_recover(&env, false, &res, &err);
	if (r < 0) {
		const cJSON *d, *details = err ? cJSON_GetObjectItemCaseSensitive(err, "details") : NULL;
		int n = 0;

		/* the paths first: the last line is the one a supervisor shows (draftboxd does) */
		cJSON_ArrayForEach(d, details) {
			const char *path = NULL, *why = NULL;

			if (n++ == 20) {
				log_error("(and more: 'draftfs recover' lists them all)");
				break;
			}
			(void)json_get_string(d, "path", &path);
			(void)json_get_string(d, "reason", &why);
			log_error("%s: %s", path ?: "?", why ?: "");
		}
		if (err)
			(void)json_get_string(err, "error", &msg);
		return log_error_errno(r, "cannot finish the interrupted commit: %s", msg ?: "unknown error");
	}
	log_info("finished an interrupted commit");
	return 0;
}
