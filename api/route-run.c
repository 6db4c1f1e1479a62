// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * POST /session/{id}/run (SSE stream, or 202 for background runs) and the
 * background run status and log routes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "log.h"
#include "run.h"
#include "session.h"

#define TAIL_CURSOR_HEADER "EXECD-ISOLATED-TAIL-CURSOR"

static bool env_name_valid(const char *k)
{
	if (!*k || (*k >= '0' && *k <= '9'))
		return false;
	for (; *k; k++)
		if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') || *k == '_'))
			return false;
	return true;
}

/* Parses the run body into @rq (strings point into @body; *ret_envs is new). Answers 400 and returns -EINVAL on bad input. */
static int parse_run(struct api_request *req, const cJSON *body, struct api_run_request *rq, char ***ret_envs)
{
	const cJSON *envs, *e;
	const char *code;
	_cleanup_strv_free_ char **v = NULL;
	size_t n = 0;
	int64_t t;
	int r;

	r = json_get_string(body, "code", &code);
	if (r == -ENOENT || (r == 0 && !*code)) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "'code' is required");
		return -EINVAL;
	}
	if (r < 0) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "'code' must be a string");
		return -EINVAL;
	}
	rq->code = code;
	rq->code_len = strlen(code);

	envs = cJSON_GetObjectItemCaseSensitive(body, "envs");
	if (envs && !cJSON_IsNull(envs)) {
		if (!cJSON_IsObject(envs)) {
			api_reply_error(req, 400, API_E_INVALID_REQUEST, "'envs' must be an object of strings");
			return -EINVAL;
		}
		v = calloc((size_t)cJSON_GetArraySize(envs) + 1, sizeof(char *));
		if (!v)
			return -ENOMEM;
		cJSON_ArrayForEach(e, envs) {
			if (!cJSON_IsString(e) || !env_name_valid(e->string)) {
				api_reply_error(req, 400, API_E_INVALID_REQUEST,
						"'envs' entry '%.64s' must be a valid name with a string value", e->string);
				return -EINVAL;
			}
			if (asprintf(&v[n], "%s=%s", e->string, e->valuestring) < 0) {
				v[n] = NULL;
				return -ENOMEM;
			}
			n++;
		}
	}

	r = json_get_int64(body, "timeout_seconds", 0, INT32_MAX, &t);
	if (r == -EINVAL) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "'timeout_seconds' must be a non-negative integer");
		return -EINVAL;
	}
	rq->timeout = r == 0 ? (unsigned)t : 0;
	rq->background = false;
	if (json_get_bool(body, "background", &rq->background) == -EINVAL) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "'background' must be a boolean");
		return -EINVAL;
	}
	rq->stream_stderr = false;
	if (json_get_bool(body, "separate_stderr", &rq->stream_stderr) == -EINVAL) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "'separate_stderr' must be a boolean");
		return -EINVAL;
	}
	r = json_get_string(body, "cwd", &rq->cwd);
	if (r == -EINVAL || (r == 0 && (rq->cwd[0] != '/' || strpbrk(rq->cwd, "\n")))) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "'cwd' must be an absolute path");
		return -EINVAL;
	}
	if (r == -ENOENT || (r == 0 && !*rq->cwd))
		rq->cwd = NULL;
	*ret_envs = TAKE_PTR(v);
	return 0;
}

enum MHD_Result api_handle_run(struct api_request *req)
{
	_cleanup_session_ struct api_session *s = NULL;
	_cleanup_json_ cJSON *body = NULL;
	_cleanup_strv_free_ char **envs = NULL;
	struct api_run_request rq = {};
	struct api_error err = {};
	struct api_run *run = NULL;
	const union MHD_ConnectionInfo *ci;
	struct MHD_Response *resp;
	int r;

	s = api_request_session(req);
	if (!s)
		return MHD_YES;
	body = api_request_json(req);
	if (!body)
		return MHD_YES;
	r = parse_run(req, body, &rq, &envs);
	if (r == -ENOMEM)
		return MHD_NO;
	if (r < 0)
		return MHD_YES;
	rq.envs = envs;

	r = api_run_start(s, &rq, &run, &err);
	if (r < 0)
		return api_reply_api_error(req, &err);

	if (rq.background) {
		_cleanup_json_ cJSON *o = cJSON_CreateObject();
		char t[40];

		if (!o || !cJSON_AddStringToObject(o, "session_id", s->id) || !cJSON_AddStringToObject(o, "run_id", run->id) ||
		    !cJSON_AddStringToObject(o, "started_at", api_format_time(run->started_at, t, sizeof(t)))) {
			(void)api_run_detach(run);
			return MHD_NO;
		}
		r = api_run_detach(run);
		if (r < 0)
			return api_reply_error(req, 500, API_E_RUNTIME, "cannot start the background run: %s", strerror(-r));
		return api_reply_json(req, 202, o);
	}

	ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	resp = api_run_sse_response(run, ci ? ci->connect_fd : -1);
	if (!resp)
		return MHD_NO;
	return api_reply_response(req, 200, resp);
}

static struct api_run *request_run(struct api_request *req, struct api_session *s)
{
	struct api_run *run = api_run_find(s, req->params[1]);

	if (!run)
		api_reply_error(req, 404, API_E_RUN_NOT_FOUND, "run not found");
	return run;
}

enum MHD_Result api_handle_run_status(struct api_request *req)
{
	_cleanup_session_ struct api_session *s = api_request_session(req);
	_cleanup_json_ cJSON *o = NULL;
	struct api_run *run;

	if (!s)
		return MHD_YES;
	run = request_run(req, s);
	if (!run)
		return MHD_YES;
	o = api_run_status_json(run);
	api_run_unref(run);
	if (!o)
		return MHD_NO;
	return api_reply_json(req, 200, o);
}

enum MHD_Result api_handle_run_logs(struct api_request *req)
{
	_cleanup_session_ struct api_session *s = api_request_session(req);
	_cleanup_free_ char *buf = NULL;
	struct MHD_Response *resp;
	struct api_run *run;
	const char *c;
	uint64_t cursor = 0, size, n = 0;
	char next[32];
	bool bad = false;

	if (!s)
		return MHD_YES;
	c = api_query_get(req, "cursor", &bad);
	if (bad)
		return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'cursor' contains a NUL byte");
	if (c && *c) {
		char *end;

		errno = 0;
		if (*c == '-' || *c == '+')
			return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'cursor' must be a non-negative integer");
		cursor = strtoull(c, &end, 10);
		if (errno || *end)
			return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'cursor' must be a non-negative integer");
	}
	run = request_run(req, s);
	if (!run)
		return MHD_YES;
	size = __atomic_load_n(&run->log_size, __ATOMIC_ACQUIRE);
	if (cursor < size) {
		n = MIN(size - cursor, (uint64_t)(16u * 1024 * 1024));
		buf = malloc(n);
		if (!buf) {
			api_run_unref(run);
			return MHD_NO;
		}
		for (uint64_t done = 0; done < n;) {
			ssize_t k = pread(run->log_fd, buf + done, n - done, (off_t)(cursor + done));

			if (k <= 0) {
				n = done;
				break;
			}
			done += (uint64_t)k;
		}
	} else {
		cursor = MAX(cursor, size);
	}
	api_run_unref(run);
	snprintf(next, sizeof(next), "%" PRIu64, cursor + n);
	resp = MHD_create_response_from_buffer(n, buf ? buf : (void *)"", MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
	MHD_add_response_header(resp, TAIL_CURSOR_HEADER, next);
	MHD_add_response_header(resp, "Access-Control-Expose-Headers", TAIL_CURSOR_HEADER);
	return api_reply_response(req, 200, resp);
}
