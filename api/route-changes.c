// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The change record of a session over HTTP: GET diff (json, patch, tar),
 * POST commit (409 with the conflicting paths), POST discard and POST
 * recover (an interrupted commit), through the draftfs control plane
 * client (fs/ctl-client.h) on the live mount.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "log.h"
#include "session.h"

#if API_HAVE_CTL
#include "ctl-client.h"

#define PATCH_SKIPPED_HEADER "Draftbox-Patch-Skipped"

/* Answers a control-plane failure with its mapped status and code; conflicts list their paths. */
static enum MHD_Result reply_ctl_error(struct api_request *req, int r, const cJSON *e, const char *what)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	const char *code = NULL, *msg = NULL, *api_code = API_E_RUNTIME;
	const cJSON *paths;
	unsigned status = 500;
	char buf[512];

	if (e) {
		(void)json_get_string(e, "code", &code);
		(void)json_get_string(e, "error", &msg);
	}
	if (code) {
		if (!strcmp(code, "invalid_path") || !strcmp(code, "invalid_argument"))
			status = 400, api_code = API_E_INVALID_REQUEST;
		else if (!strcmp(code, "not_found"))
			status = 404, api_code = API_E_FILE_NOT_FOUND;
		else if (!strcmp(code, "conflict"))
			status = 409, api_code = API_E_CONFLICT;
		else if (!strcmp(code, "refused"))
			status = 422, api_code = !strcmp(what, "diff") ? "DIFF_REFUSED" : "COMMIT_REFUSED";
		else if (!strcmp(code, "busy") || !strcmp(code, "unavailable"))
			status = 503, api_code = API_E_UNAVAILABLE;
	} else if (r == -ENOSPC || r == -EDQUOT) {
		status = 507, api_code = API_E_QUOTA;
	} else if (r == -ENOENT || r == -ECONNREFUSED || r == -ENOTSUP) {
		status = 503, api_code = API_E_UNAVAILABLE;
	}
	if (r == -ENOSPC || r == -EDQUOT)
		status = 507, api_code = API_E_QUOTA;
	snprintf(buf, sizeof(buf), "%s failed: %s", what, msg ? msg : strerror(-r));
	if (!o || !cJSON_AddStringToObject(o, "code", api_code) || !cJSON_AddStringToObject(o, "message", buf))
		return MHD_NO;
	paths = e ? cJSON_GetObjectItemCaseSensitive(e, "paths") : NULL;
	if (cJSON_IsArray(paths) && !cJSON_AddItemToObject(o, "paths", cJSON_Duplicate(paths, true)))
		return MHD_NO;
	if (e && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "journal_pending")) &&
	    (!cJSON_AddBoolToObject(o, "journal_pending", true) ||
	     !cJSON_AddStringToObject(o, "hint", "a commit stopped part-way and its journal is kept: POST "
	                                         "/v1/isolated/session/{id}/recover finishes it (draftbox recover ID); "
	                                         "with \"force\": true it overwrites host edits made since it began")))
		return MHD_NO;
	if (!strcmp(api_code, API_E_CONFLICT))
		api_metric_inc(req->srv->metrics.commit_conflicts);
	if (!strcmp(api_code, API_E_QUOTA))
		api_metric_inc(req->srv->metrics.quota_exceeded);
	return api_reply_json(req, status, o);
}

/*
 * Reads "paths" (optional array of strings) from a JSON body; NULL body: none. Answers 400 on bad input.
 * An empty array is refused rather than read as "everything": a client whose filter selected no paths
 * must not commit or discard the whole session.
 */
static int body_paths(struct api_request *req, const char *op, cJSON **ret_body, char ***ret_paths)
{
	_cleanup_json_ cJSON *body = NULL;
	_cleanup_strv_free_ char **paths = NULL;
	int r;

	if (req->body_len > 0) {
		body = api_request_json(req);
		if (!body)
			return -EINVAL;
		r = json_get_strv(body, "paths", &paths);
		if (r == -EINVAL) {
			api_reply_error(req, 400, API_E_INVALID_REQUEST, "'paths' must be an array of strings");
			return r;
		}
		if (r == -ENOMEM)
			return r;
		if (r >= 0 && !paths[0]) {
			api_reply_error(req, 400, API_E_INVALID_REQUEST,
					"'paths' is empty: name at least one path, or leave 'paths' out to %s everything", op);
			return -EINVAL;
		}
	}
	*ret_body = TAKE_PTR(body);
	*ret_paths = TAKE_PTR(paths);
	return 0;
}

/* Maps API paths (absolute sandbox paths or relative) to mount-relative ones. Answers 400 on bad input. */
static int map_paths(struct api_request *req, struct api_session *s, char **in, char ***ret)
{
	struct api_files_root root;
	_cleanup_strv_free_ char **out = NULL;
	size_t n = 0;

	for (char **p = in; p && *p; p++)
		n++;
	out = calloc(n + 1, sizeof(char *));
	if (!out)
		return -ENOMEM;
	api_session_files_root(s, &root);
	for (size_t i = 0; i < n; i++) {
		int r;

		/* "" would resolve to the root, i.e. everything: a client's mistake, not a way to say it */
		if (!in[i][0]) {
			api_reply_error(req, 400, API_E_INVALID_REQUEST,
					"empty path: the workspace root is '.' or the workspace's absolute path");
			return -EINVAL;
		}
		r = api_files_resolve(&root, in[i], strlen(in[i]), &out[i]);

		if (r < 0) {
			api_reply_error(req, 400, API_E_INVALID_REQUEST, "invalid path '%.200s': %s", in[i], strerror(-r));
			return -EINVAL;
		}
		if (!out[i][0]) {
			/* the workspace root: everything */
			strv_free(out);
			out = calloc(1, sizeof(char *));
			if (!out)
				return -ENOMEM;
			break;
		}
	}
	*ret = TAKE_PTR(out);
	return 0;
}

static struct api_session *changes_session(struct api_request *req)
{
	struct api_session *s = api_request_session(req);

	if (!s)
		return NULL;
	if (s->mode != API_WS_OVERLAY) {
		api_reply_error(req, 400, API_E_NOT_SUPPORTED, "diff, commit and discard need an overlay session (this one is %s)",
				s->mode == API_WS_RW ? "rw" : "ro");
		api_session_unref(s);
		return NULL;
	}
	if (api_session_op_begin(s) < 0) {
		api_reply_error(req, 404, API_E_SESSION_NOT_FOUND, "session not found");
		api_session_unref(s);
		return NULL;
	}
	return s;
}

static void changes_done(struct api_session *s)
{
	api_session_op_end(s);
	api_session_unref(s);
}

enum MHD_Result api_handle_diff(struct api_request *req)
{
	struct api_session *s;
	_cleanup_(ovl_ctl_closep) struct ovl_ctl *c = NULL;
	_cleanup_json_ cJSON *result = NULL, *error = NULL;
	_cleanup_strv_free_ char **raw = NULL, **paths = NULL;
	_cleanup_close_ int fd = -1;
	enum ovl_diff_format format = OVL_DIFF_JSON;
	struct MHD_Response *resp;
	const char *f, *ctype = "application/json";
	enum MHD_Result ret;
	bool bad = false;
	struct stat st;
	int r;

	f = api_query_get(req, "format", &bad);
	if (bad)
		return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'format' contains a NUL byte");
	if (f && *f && ovl_diff_format_from_string(f, &format) < 0)
		return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'format' must be json, patch or tar, not '%.32s'", f);
	if (api_query_all(req, "path", &raw) < 0)
		return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'path' contains a NUL byte");
	s = changes_session(req);
	if (!s)
		return MHD_YES;
	r = map_paths(req, s, raw, &paths);
	if (r < 0) {
		changes_done(s);
		return r == -ENOMEM ? MHD_NO : MHD_YES;
	}
	(void)ovl_ctl_syncfs(s->view);
	r = ovl_ctl_connect(s->view, &c);
	if (r < 0) {
		ret = reply_ctl_error(req, r, NULL, "connecting to the session's draftfs");
		changes_done(s);
		return ret;
	}
	fd = memfd_create("draftbox-diff", MFD_CLOEXEC);
	if (fd < 0) {
		changes_done(s);
		return api_reply_error(req, 500, API_E_RUNTIME, "cannot create a buffer: %s", strerror(errno));
	}
	r = ovl_ctl_diff(c, format, paths && paths[0] ? paths : NULL, fd, &result, &error);
	changes_done(s);
	if (r < 0)
		return reply_ctl_error(req, r, error, "diff");
	if (fstat(fd, &st) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return api_reply_error(req, 500, API_E_RUNTIME, "cannot read the diff: %s", strerror(errno));
	if (format == OVL_DIFF_PATCH)
		ctype = "text/x-diff; charset=utf-8";
	else if (format == OVL_DIFF_TAR)
		ctype = "application/x-tar";
	resp = MHD_create_response_from_fd((size_t)st.st_size, fd);
	if (!resp)
		return MHD_NO;
	fd = -1; /* the response owns it */
	MHD_add_response_header(resp, "Content-Type", ctype);
	if (format == OVL_DIFF_PATCH) {
		/* what git cannot hold (.git components, devices, FIFOs) is left out: say how much */
		const cJSON *skipped = result ? cJSON_GetObjectItemCaseSensitive(result, "skipped") : NULL;
		char n[32];

		snprintf(n, sizeof(n), "%d", cJSON_IsArray(skipped) ? cJSON_GetArraySize(skipped) : 0);
		MHD_add_response_header(resp, PATCH_SKIPPED_HEADER, n);
		MHD_add_response_header(resp, "Access-Control-Expose-Headers", PATCH_SKIPPED_HEADER);
	}
	return api_reply_response(req, 200, resp);
}

enum MHD_Result api_handle_commit(struct api_request *req)
{
	struct api_session *s;
	_cleanup_(ovl_ctl_closep) struct ovl_ctl *c = NULL;
	_cleanup_json_ cJSON *body = NULL, *result = NULL, *error = NULL;
	_cleanup_strv_free_ char **raw = NULL, **paths = NULL;
	struct ovl_commit_opts opts = {};
	enum MHD_Result ret;
	int r;

	r = body_paths(req, "commit", &body, &raw);
	if (r < 0)
		return r == -ENOMEM ? MHD_NO : MHD_YES;
	if (body && json_get_bool(body, "force", &opts.force) == -EINVAL)
		return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'force' must be a boolean");
	s = changes_session(req);
	if (!s)
		return MHD_YES;
	r = map_paths(req, s, raw, &paths);
	if (r < 0) {
		changes_done(s);
		return r == -ENOMEM ? MHD_NO : MHD_YES;
	}
	(void)ovl_ctl_syncfs(s->view);
	r = ovl_ctl_connect(s->view, &c);
	if (r >= 0)
		r = ovl_ctl_commit(c, paths && paths[0] ? paths : NULL, &opts, &result, &error);
	changes_done(s);
	if (r < 0)
		return reply_ctl_error(req, r, error, "commit");
	api_metric_inc(req->srv->metrics.commits);
	if (!result && !(result = cJSON_CreateObject()))
		return MHD_NO;
	ret = api_reply_json(req, 200, result);
	return ret;
}

enum MHD_Result api_handle_discard(struct api_request *req)
{
	struct api_session *s;
	_cleanup_(ovl_ctl_closep) struct ovl_ctl *c = NULL;
	_cleanup_json_ cJSON *body = NULL, *result = NULL, *error = NULL;
	_cleanup_strv_free_ char **raw = NULL, **paths = NULL;
	int r;

	r = body_paths(req, "discard", &body, &raw);
	if (r < 0)
		return r == -ENOMEM ? MHD_NO : MHD_YES;
	s = changes_session(req);
	if (!s)
		return MHD_YES;
	r = map_paths(req, s, raw, &paths);
	if (r < 0) {
		changes_done(s);
		return r == -ENOMEM ? MHD_NO : MHD_YES;
	}
	(void)ovl_ctl_syncfs(s->view);
	r = ovl_ctl_connect(s->view, &c);
	if (r >= 0)
		r = ovl_ctl_discard(c, paths && paths[0] ? paths : NULL, &result, &error);
	changes_done(s);
	if (r < 0)
		return reply_ctl_error(req, r, error, "discard");
	api_metric_inc(req->srv->metrics.discards);
	if (!result && !(result = cJSON_CreateObject()))
		return MHD_NO;
	return api_reply_json(req, 200, result);
}

/* Finishes a commit that stopped with its journal (409 over host edits made since it began, unless force). */
enum MHD_Result api_handle_recover(struct api_request *req)
{
	struct api_session *s;
	_cleanup_(ovl_ctl_closep) struct ovl_ctl *c = NULL;
	_cleanup_json_ cJSON *body = NULL, *result = NULL, *error = NULL;
	bool force = false;
	int r;

	if (req->body_len > 0) {
		body = api_request_json(req);
		if (!body)
			return MHD_YES; /* answered */
		if (!cJSON_IsObject(body) || json_get_bool(body, "force", &force) == -EINVAL)
			return api_reply_error(req, 400, API_E_INVALID_REQUEST, "body must be {\"force\"?: bool}");
	}
	s = changes_session(req);
	if (!s)
		return MHD_YES;
	r = ovl_ctl_connect(s->view, &c);
	if (r >= 0)
		r = ovl_ctl_recover(c, force, &result, &error);
	changes_done(s);
	if (r < 0)
		return reply_ctl_error(req, r, error, "recover");
	if (!result && !(result = cJSON_CreateObject()))
		return MHD_NO;
	return api_reply_json(req, 200, result);
}

#else /* !API_HAVE_CTL */

static enum MHD_Result not_built(struct api_request *req)
{
	return api_reply_error(req, 503, API_E_NOT_SUPPORTED,
			       "diff, commit and discard are not available: draftboxd was built without the draftfs control client");
}

enum MHD_Result api_handle_diff(struct api_request *req)
{
	return not_built(req);
}

enum MHD_Result api_handle_commit(struct api_request *req)
{
	return not_built(req);
}

enum MHD_Result api_handle_discard(struct api_request *req)
{
	return not_built(req);
}

enum MHD_Result api_handle_recover(struct api_request *req)
{
	return not_built(req);
}
#endif
