// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The HTTP edge of draftboxd on libmicrohttpd: one thread per connection
 * (so a streaming run can block on its pipes and watch its client socket),
 * connection, header-memory and idle-time limits, bounded request bodies,
 * auth and Host/Origin checks before any handler runs, and the helpers that
 * turn results into responses with the OpenSandbox error body.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "log.h"
#include "session.h"

int api_error_set(struct api_error *e, int r, unsigned status, const char *code, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return r < 0 ? r : -EINVAL;
}

uint64_t api_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t api_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *api_format_time(uint64_t ms, char *buf, size_t size)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;
	size_t n;

	gmtime_r(&t, &tm);
	n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, size - n, ".%03uZ", (unsigned)(ms % 1000));
	return buf;
}

static void count_status(struct api_request *req, unsigned status)
{
	req->status = status;
	if (status >= 500)
		api_metric_inc(req->srv->metrics.errors_5xx);
	else if (status >= 400)
		api_metric_inc(req->srv->metrics.errors_4xx);
}

enum MHD_Result api_reply_response(struct api_request *req, unsigned status, struct MHD_Response *resp)
{
	enum MHD_Result r;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	if (req->in_body) {
		/* MHD only takes a response once the body is consumed: keep it until then */
		if (req->pending)
			MHD_destroy_response(resp);
		else {
			req->pending = resp;
			req->pending_status = status;
			count_status(req, status);
		}
		req->answered = true;
		return MHD_YES;
	}
	r = MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
	req->answered = true;
	count_status(req, status);
	return r;
}

enum MHD_Result api_reply_text(struct api_request *req, unsigned status, const char *content_type, const char *text, size_t len)
{
	struct MHD_Response *resp;

	resp = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	if (content_type)
		MHD_add_response_header(resp, "Content-Type", content_type);
	return api_reply_response(req, status, resp);
}

enum MHD_Result api_reply_json(struct api_request *req, unsigned status, cJSON *body)
{
	_cleanup_cjson_str_ char *s = NULL;

	s = cJSON_PrintUnformatted(body);
	if (!s)
		return MHD_NO;
	return api_reply_text(req, status, "application/json", s, strlen(s));
}

enum MHD_Result api_reply_empty(struct api_request *req, unsigned status)
{
	return api_reply_text(req, status, NULL, "", 0);
}

static enum MHD_Result reply_error_msg(struct api_request *req, unsigned status, const char *code, const char *msg)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	/* messages quote paths, which are any bytes (and a cut "%.300s" may split a character) */
	_cleanup_free_ char *clean = json_utf8_sanitize(msg, strlen(msg));

	if (!o || !clean || !cJSON_AddStringToObject(o, "code", code) || !cJSON_AddStringToObject(o, "message", clean))
		return MHD_NO;
	if (!strcmp(code, API_E_QUOTA))
		api_metric_inc(req->srv->metrics.quota_exceeded);
	if (status >= 500)
		log_warning("%s %s: %u %s: %s", req->method, req->url, status, code, msg);
	else
		log_debug("%s %s: %u %s: %s", req->method, req->url, status, code, msg);
	return api_reply_json(req, status, o);
}

enum MHD_Result api_reply_error(struct api_request *req, unsigned status, const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return reply_error_msg(req, status, code, msg);
}

enum MHD_Result api_reply_api_error(struct api_request *req, const struct api_error *e)
{
	return reply_error_msg(req, e->status ? e->status : 500, e->code ? e->code : API_E_RUNTIME, e->message);
}

cJSON *api_request_json(struct api_request *req)
{
	cJSON *o;
	const char *end = NULL;

	if (!req->body || req->body_len == 0) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "request body is empty");
		return NULL;
	}
	if (strlen(req->body) != req->body_len) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "request body contains a NUL byte");
		return NULL;
	}
	if (json_text_has_escaped_nul(req->body, req->body_len)) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "request body holds a \\u0000 (NUL) in a string");
		return NULL;
	}
	o = cJSON_ParseWithLengthOpts(req->body, req->body_len, &end, false);
	if (o && end) {
		/* only whitespace may follow the value */
		for (const char *p = end; p < req->body + req->body_len; p++)
			if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
				cJSON_Delete(o);
				o = NULL;
				end = p;
				break;
			}
	}
	if (!o) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "malformed JSON near byte %zu",
				end ? (size_t)(end - req->body) : (size_t)0);
		return NULL;
	}
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "request body must be a JSON object");
		return NULL;
	}
	return o;
}

struct query_iter {
	const char *key;
	const char *first;
	char **all;
	size_t n;
	bool collect;
	bool bad;
	bool oom;
};

static enum MHD_Result query_cb(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
				const char *value, size_t value_size)
{
	struct query_iter *it = cls;

	if (!key || strlen(it->key) != key_size || memcmp(key, it->key, key_size) != 0)
		return MHD_YES;
	if (!value)
		value = "", value_size = 0;
	if (strlen(value) != value_size) {
		it->bad = true;
		return MHD_NO;
	}
	if (!it->first)
		it->first = value;
	if (it->collect) {
		char **nv = realloc(it->all, (it->n + 2) * sizeof(char *));

		if (!nv) {
			it->oom = true;
			return MHD_NO;
		}
		it->all = nv;
		it->all[it->n] = strdup(value);
		if (!it->all[it->n]) {
			it->oom = true;
			it->all[it->n] = NULL;
			return MHD_NO;
		}
		it->all[++it->n] = NULL;
	}
	return MHD_YES;
}

const char *api_query_get(struct api_request *req, const char *key, bool *ret_bad)
{
	struct query_iter it = { .key = key };

	/* The _n iterator tells an embedded NUL ("%00") from the end of the value. */
	MHD_get_connection_values_n(req->conn, MHD_GET_ARGUMENT_KIND, query_cb, &it);
	if (it.bad) {
		if (ret_bad)
			*ret_bad = true;
		return NULL;
	}
	return it.first;
}

int api_query_all(struct api_request *req, const char *key, char ***ret)
{
	struct query_iter it = { .key = key, .collect = true };

	MHD_get_connection_values_n(req->conn, MHD_GET_ARGUMENT_KIND, query_cb, &it);
	if (it.bad || it.oom) {
		strv_free(it.all);
		return it.bad ? -EINVAL : -ENOMEM;
	}
	if (!it.all) {
		it.all = calloc(1, sizeof(char *));
		if (!it.all)
			return -ENOMEM;
	}
	*ret = it.all;
	return 0;
}

struct api_session *api_request_session(struct api_request *req)
{
	struct api_session *s = api_session_lookup(req->srv, req->params[0]);

	if (!s)
		api_reply_error(req, 404, API_E_SESSION_NOT_FOUND, "session not found");
	return s;
}

static void request_free(struct api_request *req)
{
	if (!req)
		return;
	if (req->upload && req->upload_free)
		req->upload_free(req->upload);
	if (req->pending)
		MHD_destroy_response(req->pending);
	for (size_t i = 0; i < ARRAY_SIZE(req->params); i++)
		free(req->params[i]);
	free(req->body);
	free(req);
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	request_free(*con_cls);
	*con_cls = NULL;
}

static bool content_length_over(struct MHD_Connection *conn, uint64_t max)
{
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	char *end;
	unsigned long long v;

	if (!cl)
		return false;
	errno = 0;
	v = strtoull(cl, &end, 10);
	return errno || *end || v > max;
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				 const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct api_server *srv = cls;
	struct api_request *req = *con_cls;

	if (!req) {
		bool mismatch = false;

		req = calloc(1, sizeof(*req));
		if (!req)
			return MHD_NO;
		*con_cls = req;
		req->srv = srv;
		req->conn = conn;
		req->method = method;
		req->url = url;
		api_metric_inc(srv->metrics.requests);

		if (!api_auth_check_origin(srv, conn))
			return api_reply_error(req, 403, API_E_FORBIDDEN, "non-local Host or Origin refused");
		req->route = api_route_find(method, url, req->params, &mismatch);
		if (!req->route) {
			if (mismatch)
				return api_reply_error(req, 405, API_E_METHOD, "method '%s' not allowed on '%s'", method, url);
			return api_reply_error(req, 404, API_E_NOT_FOUND, "no route for '%s'", url);
		}
		if (!req->route->public && !api_auth_check(srv, conn))
			return api_reply_error(req, 401, API_E_UNAUTHORIZED,
					       "invalid or missing X-EXECD-ACCESS-TOKEN or Authorization: Bearer token");
		if (content_length_over(conn, req->route->upload ? srv->cfg->max_upload : srv->cfg->max_body))
			return api_reply_error(req, 413, API_E_TOO_LARGE, "request body over the limit");
		return MHD_YES;
	}

	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		req->in_body = true;
		if (req->answered) {
			/* discard the rest after an early answer, but not forever */
			req->discarded += n;
			if (req->discarded > (req->route && req->route->upload ? srv->cfg->max_upload : 16 * (uint64_t)srv->cfg->max_body))
				return MHD_NO;
			return MHD_YES;
		}
		if (req->route->upload) {
			req->uploaded += n;
			if (req->uploaded > srv->cfg->max_upload)
				return api_reply_error(req, 413, API_E_TOO_LARGE, "upload over %llu bytes",
						       (unsigned long long)srv->cfg->max_upload);
			if (req->route->upload(req, upload_data, n) < 0 && !req->answered)
				return api_reply_error(req, 500, API_E_RUNTIME, "upload failed");
			return MHD_YES;
		}
		if (req->body_len + n > srv->cfg->max_body) {
			req->body_too_large = true;
			free(req->body);
			req->body = NULL;
			return api_reply_error(req, 413, API_E_TOO_LARGE, "request body over %zu bytes", srv->cfg->max_body);
		}
		{
			char *nb = realloc(req->body, req->body_len + n + 1);

			if (!nb)
				return MHD_NO;
			req->body = nb;
			memcpy(req->body + req->body_len, upload_data, n);
			req->body_len += n;
			req->body[req->body_len] = '\0';
		}
		return MHD_YES;
	}

	if (req->in_body) {
		req->in_body = false;
		if (req->pending) {
			struct MHD_Response *resp = req->pending;
			enum MHD_Result r;

			req->pending = NULL;
			r = MHD_queue_response(conn, req->pending_status, resp);
			MHD_destroy_response(resp);
			return r;
		}
	}
	if (req->answered)
		return MHD_YES;
	return req->route->handler(req);
}

/* While the daemon starts (one thread), microhttpd's last message is kept
 * here so a failure can say why (e.g. "Address already in use"). */
static bool mhd_starting;
static char mhd_start_error[512];

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n > 0 && msg[n - 1] == '\n')
		msg[--n] = '\0';
	if (mhd_starting)
		snprintf(mhd_start_error, sizeof(mhd_start_error), "%s", msg);
	log_debug("microhttpd: %s", msg);
}

static int open_unix_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;
	mode_t old;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	old = umask(0177);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		umask(old);
		return -errno;
	}
	umask(old);
	if (listen(fd, 64) < 0)
		return -errno;
	return TAKE_FD(fd);
}

int api_http_start(struct api_server *srv)
{
	const struct api_config *cfg = srv->cfg;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
			 MHD_USE_ERROR_LOG;
	struct sockaddr_storage ss = {};
	const union MHD_DaemonInfo *info;
	int listen_fd = -1;

	if (cfg->unix_socket) {
		listen_fd = open_unix_socket(cfg->unix_socket);
		if (listen_fd < 0)
			return log_error_errno(listen_fd, "cannot listen on '%s'", cfg->unix_socket);
		mhd_starting = true;
		srv->mhd = MHD_start_daemon(flags, 0, NULL, NULL, access_cb, srv,
					    MHD_OPTION_LISTEN_SOCKET, listen_fd,
					    MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections,
					    MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout,
					    MHD_OPTION_CONNECTION_MEMORY_LIMIT, cfg->max_header_bytes,
					    MHD_OPTION_NOTIFY_COMPLETED, completed_cb, srv,
					    MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
					    MHD_OPTION_END);
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;

		if (inet_pton(AF_INET, cfg->listen_address, &sin->sin_addr) == 1) {
			sin->sin_family = AF_INET;
			sin->sin_port = htons(cfg->port);
		} else if (inet_pton(AF_INET6, cfg->listen_address, &sin6->sin6_addr) == 1) {
			sin6->sin6_family = AF_INET6;
			sin6->sin6_port = htons(cfg->port);
			flags |= MHD_USE_IPv6;
		} else {
			log_error("invalid listen address '%s'", cfg->listen_address);
			return -EINVAL;
		}
		mhd_starting = true;
		srv->mhd = MHD_start_daemon(flags, cfg->port, NULL, NULL, access_cb, srv,
					    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
					    MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections,
					    MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_connections_per_ip,
					    MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout,
					    MHD_OPTION_CONNECTION_MEMORY_LIMIT, cfg->max_header_bytes,
					    MHD_OPTION_NOTIFY_COMPLETED, completed_cb, srv,
					    MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
					    MHD_OPTION_END);
	}
	mhd_starting = false;
	if (!srv->mhd) {
		if (listen_fd >= 0)
			close(listen_fd);
		log_error("cannot start the HTTP server on %s port %u%s%s",
			  cfg->unix_socket ? cfg->unix_socket : cfg->listen_address, cfg->port,
			  mhd_start_error[0] ? ": " : "", mhd_start_error);
		return -EADDRINUSE;
	}
	info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
	srv->bound_port = info ? info->port : cfg->port;
	return 0;
}

void api_http_stop(struct api_server *srv)
{
	if (srv->mhd) {
		MHD_stop_daemon(srv->mhd);
		srv->mhd = NULL;
	}
}
