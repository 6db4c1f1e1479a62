/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * draftboxd's shared types: the server, one HTTP request as the route
 * handlers see it, and the error a handler answers with. The HTTP layer
 * (http.c) owns connections and turns a struct api_error into the
 * OpenSandbox error body {code, message}.
 */
#pragma once

#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "settings.h"
#include "json-util.h"
#include "metrics.h"

struct api_session;
struct api_registry;

/* What draftbox-run --probe and the host told us at start. */
struct api_caps {
	bool launcher_ok;    /* draftbox-run's probe says full isolation works */
	bool launcher_found; /* draftbox-run exists and answered the probe */
	bool draftfs_ok;     /* draftfs exists and /dev/fuse opens */
	bool setpriv_available;
	bool userns_available;
	bool seccomp_available;
	bool cgroup_available;
	bool idmap_rw;       /* idmapped mounts work (rw mode) */
	bool ctl_available;  /* the diff/commit client is linked and usable */
	bool quota_supported;
	bool fuse_uring;     /* this host can serve FUSE over io_uring (draftfs uses it, one queue per CPU) */
	char *bwrap_version;
	char *message;       /* why not available */
	cJSON *probe;        /* raw probe output, may be NULL */
};

struct api_server {
	struct api_config *cfg;
	int state_fd;        /* O_PATH|O_DIRECTORY of cfg->state_dir */
	int sessions_fd;     /* O_PATH|O_DIRECTORY of <state>/sessions */
	int lock_fd;         /* flock on <state>/draftboxd.lock: one server per state dir */
	char *token;         /* NULL when auth is off */
	struct MHD_Daemon *mhd;
	uint16_t bound_port;
	struct api_registry *reg;
	struct api_caps caps;
	struct api_metrics metrics;
	pthread_t gc_thread;
	bool gc_started;
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cond;
	bool stopping;
};

/* An error answer: HTTP status, OpenSandbox code and a message. */
struct api_error {
	unsigned status;
	const char *code;
	char message[512];
};

/* Sets @e and returns @r (a -errno), so helpers can "return api_error_set(...)". */
int api_error_set(struct api_error *e, int r, unsigned status, const char *code, const char *fmt, ...) _printf_(5, 6);

/* Error codes (OpenSandbox's plus ours). */
#define API_E_INVALID_REQUEST "INVALID_REQUEST_BODY"
#define API_E_MISSING_QUERY "MISSING_QUERY"
#define API_E_SESSION_NOT_FOUND "SESSION_NOT_FOUND"
#define API_E_FILE_NOT_FOUND "FILE_NOT_FOUND"
#define API_E_RUNTIME "RUNTIME_ERROR"
#define API_E_UNAVAILABLE "SERVICE_UNAVAILABLE"
#define API_E_NOT_SUPPORTED "NOT_SUPPORTED"
#define API_E_CONFLICT "CONFLICT"
#define API_E_QUOTA "QUOTA_EXCEEDED"
#define API_E_UNAUTHORIZED "UNAUTHORIZED"
#define API_E_FORBIDDEN "FORBIDDEN"
#define API_E_NOT_FOUND "NOT_FOUND"
#define API_E_METHOD "METHOD_NOT_ALLOWED"
#define API_E_TOO_LARGE "REQUEST_TOO_LARGE"
#define API_E_RUN_NOT_FOUND "RUN_NOT_FOUND"
#define API_E_INVALID_FILE "INVALID_FILE"

/* One request, as route handlers see it. */
struct api_request {
	struct api_server *srv;
	struct MHD_Connection *conn;
	const char *method;
	const char *url;
	const struct api_route *route;
	char *params[3];       /* path parameters: session id, run id */
	char *body;            /* NUL-terminated JSON body (buffered routes) */
	size_t body_len;
	bool body_too_large;
	bool answered;         /* a response was queued (or is pending) */
	bool in_body;          /* MHD is delivering the body: responses must wait for its end */
	struct MHD_Response *pending; /* answer given mid-body, queued once the body is consumed */
	unsigned pending_status;
	uint64_t discarded;    /* body bytes thrown away after an early answer */
	uint64_t uploaded;     /* upload body bytes so far (chunked bodies have no Content-Length to check) */
	unsigned status;       /* status queued, for metrics */
	void *upload;          /* streaming upload state (route-files.c) */
	void (*upload_free)(void *upload);
};

typedef enum MHD_Result (*api_handler_fn)(struct api_request *req);
/* Called for each chunk of a streaming upload; returns 0 or -errno after answering. */
typedef int (*api_upload_fn)(struct api_request *req, const char *data, size_t size);

struct api_route {
	const char *method;
	const char *pattern;  /* "/v1/isolated/session/{}/run": {} is one path segment */
	api_handler_fn handler;
	api_upload_fn upload; /* streaming body instead of a buffered one */
	bool public;          /* no token needed */
};

/* Route table and lookup (route.c). Returns the route or NULL; *ret_method_mismatch when only the method differs. */
const struct api_route *api_route_find(const char *method, const char *url, char *params[3], bool *ret_method_mismatch);

/* Responses (http.c). Each returns the MHD result to hand back to MHD. */
enum MHD_Result api_reply_json(struct api_request *req, unsigned status, cJSON *body);
enum MHD_Result api_reply_error(struct api_request *req, unsigned status, const char *code, const char *fmt, ...) _printf_(4, 5);
enum MHD_Result api_reply_api_error(struct api_request *req, const struct api_error *e);
enum MHD_Result api_reply_empty(struct api_request *req, unsigned status);
enum MHD_Result api_reply_text(struct api_request *req, unsigned status, const char *content_type, const char *text, size_t len);
/* Queues @resp (consumed) with @status. */
enum MHD_Result api_reply_response(struct api_request *req, unsigned status, struct MHD_Response *resp);

/* Parses the buffered body as a JSON object; answers 400 and returns NULL on failure. */
cJSON *api_request_json(struct api_request *req);

/*
 * Query arguments. api_query_get() returns the first value of @key or NULL;
 * -EINVAL through *ret_bad when a value holds a NUL byte. api_query_all()
 * returns a new NULL-terminated vector of all values (strv_free).
 */
const char *api_query_get(struct api_request *req, const char *key, bool *ret_bad);
int api_query_all(struct api_request *req, const char *key, char ***ret);

/* Looks up the session of params[0]; answers 404 and returns NULL when unknown. The caller unrefs. */
struct api_session *api_request_session(struct api_request *req);

/* Milliseconds since the epoch, and RFC 3339 (UTC, milliseconds) formatting into @buf (>= 32 bytes). */
uint64_t api_now_ms(void);
/* Milliseconds of CLOCK_MONOTONIC: for timeouts and durations. */
uint64_t api_mono_ms(void);
const char *api_format_time(uint64_t ms, char *buf, size_t size);

/* http.c: starts and stops the MHD daemon. */
int api_http_start(struct api_server *srv);
void api_http_stop(struct api_server *srv);

/* auth.c */
int api_auth_init(struct api_server *srv);
/* Returns true when the request's token matches (constant-time). */
bool api_auth_check(struct api_server *srv, struct MHD_Connection *conn);
/* Returns true when Host and Origin are local (or allowed). */
bool api_auth_check_origin(struct api_server *srv, struct MHD_Connection *conn);

/* Handlers (route-*.c). */
enum MHD_Result api_handle_healthz(struct api_request *req);
enum MHD_Result api_handle_ping(struct api_request *req);
enum MHD_Result api_handle_metrics(struct api_request *req);
enum MHD_Result api_handle_capabilities(struct api_request *req);
enum MHD_Result api_handle_session_create(struct api_request *req);
enum MHD_Result api_handle_session_list(struct api_request *req);
enum MHD_Result api_handle_session_get(struct api_request *req);
enum MHD_Result api_handle_session_delete(struct api_request *req);
enum MHD_Result api_handle_run(struct api_request *req);
enum MHD_Result api_handle_run_status(struct api_request *req);
enum MHD_Result api_handle_run_logs(struct api_request *req);
enum MHD_Result api_handle_diff(struct api_request *req);
enum MHD_Result api_handle_commit(struct api_request *req);
enum MHD_Result api_handle_discard(struct api_request *req);
enum MHD_Result api_handle_recover(struct api_request *req);
enum MHD_Result api_handle_files_info(struct api_request *req);
enum MHD_Result api_handle_files_download(struct api_request *req);
enum MHD_Result api_handle_files_upload(struct api_request *req);
int api_upload_files(struct api_request *req, const char *data, size_t size);
enum MHD_Result api_handle_files_delete(struct api_request *req);
enum MHD_Result api_handle_files_mv(struct api_request *req);
enum MHD_Result api_handle_files_permissions(struct api_request *req);
enum MHD_Result api_handle_files_replace(struct api_request *req);
enum MHD_Result api_handle_files_search(struct api_request *req);
enum MHD_Result api_handle_dirs_list(struct api_request *req);
enum MHD_Result api_handle_dirs_create(struct api_request *req);
enum MHD_Result api_handle_dirs_delete(struct api_request *req);
