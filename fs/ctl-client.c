// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of ctl-client.h: a handle is either the path of a live
 * mount's control socket (each call is one connection, ctl-proto.h) or the
 * opened layers of a session that is not mounted (each call runs the
 * operation here, under the session lock when it writes).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ctl-client.h"
#include "ctl-ops.h"
#include "ctl-proto.h"
#include "ctl-util.h"
#include "json-util.h"

struct ovl_ctl {
	char *socket_path; /* live */
	/* offline */
	struct ovl_layers layers;
	int *lower_fds;
	struct ovl_ctl_env env;
	char **lower_paths;
	char *upper_path;
	char *state_path;
};

void ovl_ctl_close(struct ovl_ctl *c)
{
	if (!c)
		return;
	free(c->socket_path);
	for (size_t i = 0; c->lower_fds && i < c->layers.n_lower; i++)
		safe_close(c->lower_fds[i]);
	free(c->lower_fds);
	safe_close(c->layers.upper_fd);
	safe_close(c->layers.work_fd);
	safe_close(c->layers.state_fd);
	strv_free(c->lower_paths);
	free(c->upper_path);
	free(c->state_path);
	free(c);
}

static struct ovl_ctl *ctl_new(void)
{
	struct ovl_ctl *c = calloc(1, sizeof(*c));

	if (c)
		c->layers.upper_fd = c->layers.work_fd = c->layers.state_fd = -1;
	return c;
}

int ovl_ctl_connect(const char *target, struct ovl_ctl **ret)
{
	_cleanup_ovl_ctl_ struct ovl_ctl *c = NULL;
	char buf[PATH_MAX];
	struct stat st;

	if (!target || !*target)
		return -EINVAL;
	if (stat(target, &st) < 0)
		return -errno;
	c = ctl_new();
	if (!c)
		return -ENOMEM;
	if (S_ISSOCK(st.st_mode)) {
		c->socket_path = strdup(target);
	} else {
		ssize_t n = getxattr(target, OVL_XATTR_CONTROL, buf, sizeof(buf) - 1);

		if (n < 0)
			return errno == ENODATA || errno == ENOTSUP || errno == EOPNOTSUPP ? -ENOTSUP : -errno;
		buf[n] = '\0';
		if (buf[0] != '/')
			return -ENOTSUP;
		c->socket_path = strdup(buf);
	}
	if (!c->socket_path)
		return -ENOMEM;
	*ret = TAKE_PTR(c);
	return 0;
}

static int open_dir(const char *path, int flags)
{
	int fd = open(path, flags | O_DIRECTORY | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static int abs_path(const char *p, char **ret)
{
	char *r = realpath(p, NULL);

	if (!r)
		return -errno;
	*ret = r;
	return 0;
}

int ovl_ctl_open_offline(const char *lowerdir, const char *upperdir, const char *workdir, const char *state_dir,
                         struct ovl_ctl **ret)
{
	_cleanup_ovl_ctl_ struct ovl_ctl *c = NULL;
	_cleanup_free_ char *copy = NULL, *sd = NULL;
	size_t n = 1;
	char *tok, *save = NULL;
	int r;

	if (!lowerdir || !*lowerdir || !upperdir || (!workdir && !state_dir))
		return -EINVAL;
	c = ctl_new();
	if (!c)
		return -ENOMEM;
	for (const char *p = lowerdir; *p; p++)
		n += *p == ':';
	c->lower_fds = calloc(n, sizeof(int));
	c->lower_paths = calloc(n + 1, sizeof(char *));
	copy = strdup(lowerdir);
	if (!c->lower_fds || !c->lower_paths || !copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
		r = open_dir(tok, O_PATH);
		if (r < 0)
			return r;
		c->lower_fds[c->layers.n_lower] = r;
		r = abs_path(tok, &c->lower_paths[c->layers.n_lower]);
		c->layers.n_lower++;
		if (r < 0)
			return r;
	}
	if (c->layers.n_lower == 0)
		return -EINVAL;
	r = open_dir(upperdir, O_PATH);
	if (r < 0)
		return r;
	c->layers.upper_fd = r;
	r = abs_path(upperdir, &c->upper_path);
	if (r < 0)
		return r;
	if (workdir) {
		r = open_dir(workdir, O_PATH);
		if (r < 0)
			return r;
		c->layers.work_fd = r;
	}
	if (!state_dir) {
		if (asprintf(&sd, "%s/draftfs", workdir) < 0)
			return -ENOMEM;
		state_dir = sd;
	}
	if (mkdir(state_dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	r = open_dir(state_dir, O_PATH | O_NOFOLLOW);
	if (r < 0)
		return r;
	c->layers.state_fd = r;
	r = abs_path(state_dir, &c->state_path);
	if (r < 0)
		return r;
	c->layers.lower_fds = c->lower_fds;
	c->env = (struct ovl_ctl_env){ .layers = &c->layers, .upper_path = c->upper_path,
	                               .lower_paths = c->lower_paths, .state_path = c->state_path };
	*ret = TAKE_PTR(c);
	return 0;
}

static cJSON *request(const char *op, char *const *paths, cJSON **ret_error)
{
	cJSON *req = cJSON_CreateObject(), *arr;

	if (!req)
		return NULL;
	cJSON_AddStringToObject(req, "op", op);
	if (paths && paths[0]) { /* NULL or empty: everything, which the protocol spells as no 'paths' */
		arr = cJSON_AddArrayToObject(req, "paths");
		for (char *const *p = paths; *p; p++)
			cJSON_AddItemToArray(arr, cJSON_CreateString(*p));
	}
	return req;
}

/* Checks the paths locally so a bad one gets the same error on both kinds of handle. */
static int precheck(char *const *paths, cJSON **ret_error)
{
	struct ovl_sel s;
	int r = ovl_sel_parse(paths, &s, ret_error);

	if (r >= 0)
		ovl_sel_done(&s);
	return r;
}

static int offline_locked(struct ovl_ctl *c, int *ret_lock, cJSON **ret_error)
{
	int r = ovl_ctl_take_lock(c->layers.state_fd, false);

	if (r == -EBUSY)
		return ovl_ctl_error(ret_error, r, "busy", NULL,
		                     "the session is mounted or another commit runs; use the mount's control socket");
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "io", NULL, "cannot lock the session's state dir");
	*ret_lock = r;
	return 0;
}

int ovl_ctl_diff(struct ovl_ctl *c, enum ovl_diff_format format, char *const *paths, int out_fd,
                 cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_json_ cJSON *req = NULL;
	int r;

	r = precheck(paths, ret_error);
	if (r < 0)
		return r;
	if (!c->socket_path)
		return ovl_op_diff(&c->env, format, paths, out_fd, ret_result, ret_error);
	req = request("diff", paths, ret_error);
	if (!req)
		return -ENOMEM;
	cJSON_AddStringToObject(req, "format", ovl_diff_format_to_string(format));
	return ovl_proto_call(c->socket_path, req, out_fd, 0, ret_result, ret_error);
}

int ovl_ctl_commit(struct ovl_ctl *c, char *const *paths, const struct ovl_commit_opts *opts,
                   cJSON **ret_result, cJSON **ret_error)
{
	static const struct ovl_commit_opts defaults = { 0 };
	_cleanup_json_ cJSON *req = NULL;
	int r;

	if (!opts)
		opts = &defaults;
	r = precheck(paths, ret_error);
	if (r < 0)
		return r;
	if (!c->socket_path) {
		_cleanup_close_ int lock = -1;

		r = offline_locked(c, &lock, ret_error);
		if (r < 0)
			return r;
		return ovl_op_commit(&c->env, paths, opts, ret_result, ret_error);
	}
	req = request("commit", paths, ret_error);
	if (!req)
		return -ENOMEM;
	cJSON_AddBoolToObject(req, "force", opts->force);
	cJSON_AddBoolToObject(req, "allow_setid", opts->allow_setid);
	cJSON_AddBoolToObject(req, "allow_special", opts->allow_special);
	cJSON_AddBoolToObject(req, "allow_xattrs", opts->allow_xattrs);
	cJSON_AddBoolToObject(req, "dry_run", opts->dry_run);
	cJSON_AddStringToObject(req, "owner", opts->owner == OVL_OWNER_PRESERVE ? "preserve"
	                                      : opts->owner == OVL_OWNER_FIXED  ? "fixed"
	                                                                        : "workspace");
	if (opts->owner == OVL_OWNER_FIXED) {
		json_add_u64(req, "uid", opts->uid);
		json_add_u64(req, "gid", opts->gid);
	}
	return ovl_proto_call(c->socket_path, req, -1, 0, ret_result, ret_error);
}

int ovl_ctl_discard(struct ovl_ctl *c, char *const *paths, cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_json_ cJSON *req = NULL;
	int r;

	r = precheck(paths, ret_error);
	if (r < 0)
		return r;
	if (!c->socket_path) {
		_cleanup_close_ int lock = -1;

		r = offline_locked(c, &lock, ret_error);
		if (r < 0)
			return r;
		return ovl_op_discard(&c->env, paths, ret_result, ret_error);
	}
	req = request("discard", paths, ret_error);
	if (!req)
		return -ENOMEM;
	return ovl_proto_call(c->socket_path, req, -1, 0, ret_result, ret_error);
}

int ovl_ctl_status(struct ovl_ctl *c, cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_json_ cJSON *req = NULL;

	if (!c->socket_path)
		return ovl_op_status(&c->env, ret_result, ret_error);
	req = request("status", NULL, ret_error);
	if (!req)
		return -ENOMEM;
	return ovl_proto_call(c->socket_path, req, -1, 0, ret_result, ret_error);
}

int ovl_ctl_invalidate(struct ovl_ctl *c, char *const *paths, cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_json_ cJSON *req = NULL;
	int r;

	r = precheck(paths, ret_error);
	if (r < 0)
		return r;
	if (!c->socket_path)
		return ovl_op_invalidate(&c->env, paths, ret_result, ret_error);
	req = request("invalidate", paths, ret_error);
	if (!req)
		return -ENOMEM;
	return ovl_proto_call(c->socket_path, req, -1, 0, ret_result, ret_error);
}

int ovl_ctl_recover(struct ovl_ctl *c, bool force, cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_json_ cJSON *req = NULL;
	int r;

	if (!c->socket_path) {
		_cleanup_close_ int lock = -1;

		r = offline_locked(c, &lock, ret_error);
		if (r < 0)
			return r;
		return ovl_op_recover(&c->env, force, ret_result, ret_error);
	}
	req = request("recover", NULL, ret_error);
	if (!req)
		return -ENOMEM;
	cJSON_AddBoolToObject(req, "force", force);
	return ovl_proto_call(c->socket_path, req, -1, 0, ret_result, ret_error);
}

int ovl_ctl_syncfs(const char *mountpoint)
{
	_cleanup_close_ int fd = open(mountpoint, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (syncfs(fd) < 0)
		return -errno;
	return 0;
}
