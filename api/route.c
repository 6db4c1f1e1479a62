// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The route table: every URL draftboxd answers, with its method, handler
 * and whether it needs the token. A pattern segment "{}" matches exactly
 * one non-empty path segment, handed to the handler in req->params.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"

#define P "/v1/isolated/session/{}"
static const struct api_route routes[] = {
	{ "GET", "/healthz", api_handle_healthz, NULL, true },
	{ "GET", "/ping", api_handle_ping, NULL, true },
	{ "GET", "/metrics", api_handle_metrics, NULL, false },
	{ "GET", "/v1/isolated/capabilities", api_handle_capabilities, NULL, false },
	{ "POST", "/v1/isolated/session", api_handle_session_create, NULL, false },
	{ "GET", "/v1/isolated/sessions", api_handle_session_list, NULL, false },
	{ "GET", P, api_handle_session_get, NULL, false },
	{ "DELETE", P, api_handle_session_delete, NULL, false },
	{ "POST", P "/run", api_handle_run, NULL, false },
	{ "GET", P "/runs/{}", api_handle_run_status, NULL, false },
	{ "GET", P "/runs/{}/logs", api_handle_run_logs, NULL, false },
	{ "GET", P "/diff", api_handle_diff, NULL, false },
	{ "POST", P "/commit", api_handle_commit, NULL, false },
	{ "POST", P "/discard", api_handle_discard, NULL, false },
	{ "POST", P "/recover", api_handle_recover, NULL, false },
	{ "GET", P "/files/info", api_handle_files_info, NULL, false },
	{ "GET", P "/files/download", api_handle_files_download, NULL, false },
	{ "POST", P "/files/upload", api_handle_files_upload, api_upload_files, false },
	{ "DELETE", P "/files", api_handle_files_delete, NULL, false },
	{ "POST", P "/files/mv", api_handle_files_mv, NULL, false },
	{ "POST", P "/files/permissions", api_handle_files_permissions, NULL, false },
	{ "POST", P "/files/replace", api_handle_files_replace, NULL, false },
	{ "GET", P "/files/search", api_handle_files_search, NULL, false },
	{ "GET", P "/directories/list", api_handle_dirs_list, NULL, false },
	{ "POST", P "/directories", api_handle_dirs_create, NULL, false },
	{ "DELETE", P "/directories", api_handle_dirs_delete, NULL, false },
};
#undef P

/* Matches @url against @pattern; on success copies the {} segments into @params. */
static bool match(const char *pattern, const char *url, char *params[3])
{
	const char *seg[3];
	size_t seg_len[3], n = 0;

	while (*pattern && *url) {
		if (pattern[0] == '{' && pattern[1] == '}') {
			size_t len = strcspn(url, "/");

			if (len == 0 || n >= 3)
				return false;
			seg[n] = url;
			seg_len[n++] = len;
			url += len;
			pattern += 2;
			continue;
		}
		if (*pattern != *url)
			return false;
		pattern++;
		url++;
	}
	/* one trailing slash is tolerated */
	if (*pattern || (*url && strcmp(url, "/") != 0))
		return false;
	for (size_t i = 0; i < n; i++) {
		free(params[i]);
		params[i] = strndup(seg[i], seg_len[i]);
		if (!params[i])
			return false;
	}
	return true;
}

const struct api_route *api_route_find(const char *method, const char *url, char *params[3], bool *ret_method_mismatch)
{
	bool mismatch = false;

	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (!match(routes[i].pattern, url, params))
			continue;
		if (strcmp(routes[i].method, method) == 0)
			return &routes[i];
		mismatch = true;
	}
	if (ret_method_mismatch)
		*ret_method_mismatch = mismatch;
	return NULL;
}
