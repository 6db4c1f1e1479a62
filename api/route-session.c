// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Handlers for the service routes (healthz, ping, metrics, capabilities)
 * and the session lifecycle (create, list, get, delete).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "log.h"
#include "session.h"

enum MHD_Result api_handle_healthz(struct api_request *req)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();

	if (!o || !cJSON_AddStringToObject(o, "status", "ok") ||
	    !cJSON_AddStringToObject(o, "version", DRAFTBOX_VERSION))
		return MHD_NO;
	return api_reply_json(req, 200, o);
}

enum MHD_Result api_handle_ping(struct api_request *req)
{
	return api_reply_empty(req, 200);
}

enum MHD_Result api_handle_metrics(struct api_request *req)
{
	_cleanup_free_ char *text = NULL;
	_cleanup_json_ cJSON *list = NULL;
	uint64_t bytes = 0, inodes = 0;
	unsigned n = 0;

	list = api_sessions_list_json(req->srv, &n);
	api_sessions_upper_usage(req->srv, &bytes, &inodes);
	if (api_metrics_render(&req->srv->metrics, n, bytes, inodes, &text) < 0)
		return MHD_NO;
	return api_reply_text(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text));
}

enum MHD_Result api_handle_capabilities(struct api_request *req)
{
	const struct api_caps *c = &req->srv->caps;
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	bool available = c->launcher_ok && c->draftfs_ok;

	if (!o || !cJSON_AddBoolToObject(o, "available", available) ||
	    !cJSON_AddStringToObject(o, "isolator", "bwrap") ||
	    !cJSON_AddStringToObject(o, "version", c->bwrap_version ? c->bwrap_version : "") ||
	    !cJSON_AddBoolToObject(o, "setpriv_available", c->setpriv_available) ||
	    !cJSON_AddBoolToObject(o, "userns_available", c->userns_available) ||
	    !cJSON_AddBoolToObject(o, "commit_supported", available && c->ctl_available) ||
	    !cJSON_AddBoolToObject(o, "diff_supported", available && c->ctl_available) ||
	    !cJSON_AddBoolToObject(o, "seccomp_available", c->seccomp_available) ||
	    !cJSON_AddBoolToObject(o, "cgroup_available", c->cgroup_available) ||
	    !cJSON_AddBoolToObject(o, "overlay_supported", c->draftfs_ok) ||
	    !cJSON_AddBoolToObject(o, "rw_supported", c->launcher_ok && c->idmap_rw) ||
	    !cJSON_AddBoolToObject(o, "ro_supported", c->launcher_ok && c->draftfs_ok) ||
	    !cJSON_AddBoolToObject(o, "quota_supported", c->draftfs_ok && c->quota_supported) ||
	    !cJSON_AddBoolToObject(o, "fuse_uring", c->draftfs_ok && c->fuse_uring) ||
	    !cJSON_AddBoolToObject(o, "network_allowed", req->srv->cfg->allow_network) ||
	    !cJSON_AddStringToObject(o, "server_version", DRAFTBOX_VERSION))
		return MHD_NO;
	if (c->message && !cJSON_AddStringToObject(o, "message", c->message))
		return MHD_NO;
	if (c->probe && !cJSON_AddItemToObject(o, "probe", cJSON_Duplicate(c->probe, true)))
		return MHD_NO;
	return api_reply_json(req, 200, o);
}

enum MHD_Result api_handle_session_create(struct api_request *req)
{
	_cleanup_json_ cJSON *body = NULL, *o = NULL;
	_cleanup_session_ struct api_session *s = NULL;
	struct api_error err = {};
	char t[40];
	int r;

	/* sessions need draftfs and a working draftbox-run; each run is refused by the launcher if it cannot isolate */
	if (!req->srv->caps.launcher_found || !req->srv->caps.draftfs_ok)
		return api_reply_error(req, 503, API_E_UNAVAILABLE, "isolation unavailable: %s",
				       req->srv->caps.message ? req->srv->caps.message : "probe failed");
	body = api_request_json(req);
	if (!body)
		return MHD_YES;
	r = api_session_create(req->srv, body, &s, &err);
	if (r < 0)
		return api_reply_api_error(req, &err);
	o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "session_id", s->id) ||
	    !cJSON_AddStringToObject(o, "created_at", api_format_time(s->created_at, t, sizeof(t))))
		return MHD_NO;
	return api_reply_json(req, 201, o);
}

enum MHD_Result api_handle_session_list(struct api_request *req)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	cJSON *list = api_sessions_list_json(req->srv, NULL);

	if (!o || !list || !cJSON_AddItemToObject(o, "sessions", list)) {
		cJSON_Delete(list);
		return MHD_NO;
	}
	return api_reply_json(req, 200, o);
}

enum MHD_Result api_handle_session_get(struct api_request *req)
{
	_cleanup_session_ struct api_session *s = api_request_session(req);
	_cleanup_json_ cJSON *o = NULL;

	if (!s)
		return MHD_YES;
	o = api_session_to_json(s, false);
	if (!o)
		return MHD_NO;
	return api_reply_json(req, 200, o);
}

enum MHD_Result api_handle_session_delete(struct api_request *req)
{
	_cleanup_session_ struct api_session *s = api_request_session(req);
	struct api_error err = {};

	if (!s)
		return MHD_YES;
	if (api_session_delete(s, false, &err) < 0)
		return api_reply_api_error(req, &err);
	return api_reply_empty(req, 200);
}
