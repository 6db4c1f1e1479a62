// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * HTTP wiring of the files and directories routes onto files.h: query and
 * body parsing, multipart uploads streamed through MHD's post processor
 * into an atomic upload (never buffered whole), and downloads streamed from
 * the file with single-range support, holding the session (see download_read).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api.h"
#include "files.h"
#include "log.h"
#include "session.h"

/* The session of a files request, with an operation held (delete waits for it). */
static struct api_session *files_session(struct api_request *req, struct api_files_root *root)
{
	struct api_session *s = api_request_session(req);

	if (!s)
		return NULL;
	if (api_session_op_begin(s) < 0) {
		api_reply_error(req, 404, API_E_SESSION_NOT_FOUND, "session not found");
		api_session_unref(s);
		return NULL;
	}
	api_session_files_root(s, root);
	return s;
}

static void files_done(struct api_session *s)
{
	api_session_op_end(s);
	api_session_unref(s);
}

static enum MHD_Result reply_errno(struct api_request *req, int r, const char *what, const char *path)
{
	const char *code;
	unsigned status = api_errno_to_code(r, &code);

	if (r == -ESRCH)
		return api_reply_error(req, 404, API_E_SESSION_NOT_FOUND, "session not found");
	/* ENODEV is what api_files_open_read() says of a FIFO, socket or device */
	return api_reply_error(req, status, code, "%s '%.300s': %s", what, path ? path : "",
			       r == -ENODEV ? "not a regular file" : strerror(r < 0 ? -r : r));
}

/* Like reply_errno for a move: either side may be the bad one (a missing src, a dest below a symlink). */
static enum MHD_Result reply_move_errno(struct api_request *req, int r, const char *src, const char *dest)
{
	const char *code;
	unsigned status = api_errno_to_code(r, &code);

	if (r == -ESRCH)
		return api_reply_error(req, 404, API_E_SESSION_NOT_FOUND, "session not found");
	return api_reply_error(req, status, code, "cannot move '%.200s' to '%.200s': %s", src ? src : "", dest ? dest : "",
			       strerror(r < 0 ? -r : r));
}

/* Gets all values of a required query parameter; answers 400 and returns NULL when missing or bad. */
static char **query_required(struct api_request *req, const char *key)
{
	char **v = NULL;
	int r = api_query_all(req, key, &v);

	if (r == -EINVAL) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "'%s' contains a NUL byte", key);
		return NULL;
	}
	if (r < 0)
		return NULL;
	if (!v[0] || !v[0][0]) {
		strv_free(v);
		api_reply_error(req, 400, API_E_MISSING_QUERY, "missing query parameter '%s'", key);
		return NULL;
	}
	return v;
}

/* One optional query parameter; answers 400 on a NUL byte (returns -EINVAL). */
static int query_opt(struct api_request *req, const char *key, const char **ret)
{
	bool bad = false;

	*ret = api_query_get(req, key, &bad);
	if (bad) {
		api_reply_error(req, 400, API_E_INVALID_REQUEST, "'%s' contains a NUL byte", key);
		return -EINVAL;
	}
	return 0;
}

enum MHD_Result api_handle_files_info(struct api_request *req)
{
	_cleanup_strv_free_ char **paths = query_required(req, "path");
	_cleanup_json_ cJSON *o = NULL;
	struct api_files_root root;
	struct api_session *s;
	size_t failed = 0;
	int r;

	if (!paths)
		return req->answered ? MHD_YES : MHD_NO;
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	r = api_files_info(&root, paths, &o, &failed);
	files_done(s);
	if (r < 0)
		return reply_errno(req, r, "cannot stat", paths[failed]);
	return api_reply_json(req, 200, o);
}

/* Parses a single "bytes=" range against @size. Returns 1 and the range, 0 for none/ignored, -ERANGE when unsatisfiable. */
static int parse_range(const char *h, uint64_t size, uint64_t *ret_off, uint64_t *ret_len)
{
	unsigned long long a, b;
	char *end;

	if (!h || strncasecmp(h, "bytes=", 6) != 0)
		return 0;
	h += 6;
	while (*h == ' ')
		h++;
	if (strchr(h, ','))
		return 0; /* several ranges: we may send the whole file instead */
	if (*h == '-') {
		errno = 0;
		b = strtoull(h + 1, &end, 10);
		if (errno || *end || end == h + 1)
			return 0;
		if (b == 0 || size == 0)
			return -ERANGE;
		if (b > size)
			b = size;
		*ret_off = size - b;
		*ret_len = b;
		return 1;
	}
	errno = 0;
	a = strtoull(h, &end, 10);
	if (errno || end == h || *end != '-')
		return 0;
	h = end + 1;
	if (!*h) {
		b = size ? size - 1 : 0;
	} else {
		b = strtoull(h, &end, 10);
		if (errno || *end)
			return 0;
		if (b < a)
			return 0;
	}
	if (a >= size)
		return -ERANGE;
	if (b >= size)
		b = size - 1;
	*ret_off = a;
	*ret_len = b - a + 1;
	return 1;
}

/*
 * A download in flight holds an operation on its session, as every files
 * request does, until its response is freed: a DELETE waits for it instead
 * of unmounting under an open file. Each block is read when microhttpd sends
 * it, so once the delete has begun the next block ends the response (the
 * client sees it cut short); a client that stops reading is bounded by the
 * connection timeout.
 */
struct download {
	struct api_session *s;
	int fd;
	uint64_t off, len;
};

static ssize_t download_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct download *d = cls;
	ssize_t n;

	if (pos >= d->len || api_session_deleting(d->s))
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if (max > d->len - pos)
		max = (size_t)(d->len - pos);
	n = RETRY_EINTR(pread(d->fd, buf, max, (off_t)(d->off + pos)));
	/* a file that shrank cannot fill the Content-Length promised: cut the response */
	return n > 0 ? n : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void download_free(void *cls)
{
	struct download *d = cls;

	safe_close(d->fd);
	files_done(d->s);
	free(d);
}

enum MHD_Result api_handle_files_download(struct api_request *req)
{
	_cleanup_strv_free_ char **paths = query_required(req, "path");
	struct api_files_root root;
	struct api_session *s;
	_cleanup_session_ struct api_session *held = NULL;
	struct download *dl;
	struct MHD_Response *resp;
	const char *range, *base;
	uint64_t size = 0, off = 0, len;
	char hdr[256];
	int fd = -1, r, ranged;

	if (!paths)
		return req->answered ? MHD_YES : MHD_NO;
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	r = api_files_open_read(&root, paths[0], &fd, &size);
	if (r < 0) {
		files_done(s);
		return reply_errno(req, r, "cannot download", paths[0]);
	}
	/* the op is held until the response is freed (download_free); the early answers below let it go */
	api_session_op_end(s);
	held = s;
	s = NULL;
	len = size;
	range = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_RANGE);
	ranged = parse_range(range, size, &off, &len);
	if (ranged == 0) {
		/* the SDK's ?offset=&limit= form */
		const char *o = NULL, *l = NULL;
		char rbuf[64];

		if (query_opt(req, "offset", &o) < 0 || query_opt(req, "limit", &l) < 0) {
			close(fd);
			return MHD_YES;
		}
		if ((o && *o) || (l && *l)) {
			char *end;
			unsigned long long ov = 0, lv = 0;

			errno = 0;
			if (o && *o)
				ov = strtoull(o, &end, 10);
			if (!errno && o && *o && (*end || *o == '-'))
				errno = EINVAL;
			if (!errno && l && *l) {
				lv = strtoull(l, &end, 10);
				if (*end || *l == '-' || lv == 0)
					errno = EINVAL;
			}
			if (errno) {
				close(fd);
				return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'offset' and 'limit' must be non-negative integers");
			}
			if (l && *l && lv <= ULLONG_MAX - ov) /* else: to the end, not a wrapped-around range */
				snprintf(rbuf, sizeof(rbuf), "bytes=%llu-%llu", ov, ov + lv - 1);
			else
				snprintf(rbuf, sizeof(rbuf), "bytes=%llu-", ov);
			ranged = parse_range(rbuf, size, &off, &len);
		}
	}
	if (ranged == -ERANGE) {
		close(fd);
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
		if (!resp)
			return MHD_NO;
		snprintf(hdr, sizeof(hdr), "bytes */%" PRIu64, size);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, hdr);
		return api_reply_response(req, 416, resp);
	}
	if (api_session_op_begin(held) < 0) {
		close(fd);
		return api_reply_error(req, 404, API_E_SESSION_NOT_FOUND, "session not found");
	}
	dl = calloc(1, sizeof(*dl));
	if (!dl) {
		close(fd);
		api_session_op_end(held);
		return MHD_NO;
	}
	*dl = (struct download){ .s = TAKE_PTR(held), .fd = fd, .off = off, .len = len };
	resp = MHD_create_response_from_callback(len, 64 * 1024, download_read, dl, download_free);
	if (!resp) {
		download_free(dl);
		return MHD_NO;
	}
	base = strrchr(paths[0], '/');
	base = base ? base + 1 : paths[0];
	snprintf(hdr, sizeof(hdr), "attachment; filename=\"%.200s\"", strpbrk(base, "\"\\\r\n") ? "download" : base);
	MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
	MHD_add_response_header(resp, "Content-Disposition", hdr);
	MHD_add_response_header(resp, "Accept-Ranges", "bytes");
	if (ranged == 1) {
		snprintf(hdr, sizeof(hdr), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, off, off + len - 1, size);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, hdr);
		return api_reply_response(req, 206, resp);
	}
	return api_reply_response(req, 200, resp);
}

/* ------------------------------------------------------------------ upload */

#define META_MAX (64 * 1024)

struct upload_ctx {
	struct api_session *s;
	struct api_files_root root;
	struct MHD_PostProcessor *pp;
	struct api_upload *cur;      /* the file part being written */
	char *cur_path;
	bool cur_active;
	char *meta;                  /* pending "metadata" JSON */
	size_t meta_len;
	bool in_meta;
	cJSON *done;                 /* [{path, bytes}] */
	int error;                   /* first failure; the request was answered */
	bool op;                     /* holds a session operation: delete waits for the upload */
};

static void upload_ctx_free(void *p)
{
	struct upload_ctx *u = p;

	if (!u)
		return;
	if (u->pp)
		MHD_destroy_post_processor(u->pp);
	api_upload_free(u->cur);
	free(u->cur_path);
	free(u->meta);
	cJSON_Delete(u->done);
	if (u->op)
		api_session_op_end(u->s);
	api_session_unref(u->s);
	free(u);
}

/* Commits the file part in progress, if any. Returns 0 or -errno (answered). */
static int upload_finish_part(struct api_request *req, struct upload_ctx *u)
{
	_cleanup_free_ char *clean = NULL;
	uint64_t bytes = 0;
	cJSON *o;
	int r;

	if (!u->cur_active)
		return 0;
	u->cur_active = false;
	r = api_upload_commit(u->cur, &bytes);
	api_upload_free(u->cur);
	u->cur = NULL;
	if (r < 0) {
		reply_errno(req, r, "cannot upload", u->cur_path);
		return u->error = r;
	}
	clean = json_utf8_sanitize(u->cur_path, strlen(u->cur_path));
	o = cJSON_CreateObject();
	if (!o || !clean || !cJSON_AddItemToArray(u->done, o) || !cJSON_AddStringToObject(o, "path", clean) ||
	    !cJSON_AddNumberToObject(o, "bytes", (double)bytes))
		return u->error = -ENOMEM;
	return 0;
}

/* Starts a file part: the target is metadata.path, else ?path=. */
static int upload_begin_part(struct api_request *req, struct upload_ctx *u)
{
	_cleanup_json_ cJSON *meta = NULL;
	struct api_file_meta fm = API_FILE_META_INIT;
	const char *path = NULL;
	int r;

	if (u->meta) {
		if (json_text_has_escaped_nul(u->meta, u->meta_len)) {
			api_reply_error(req, 400, "INVALID_FILE_METADATA", "the metadata part holds a \\u0000 (NUL) in a string");
			return u->error = -EINVAL;
		}
		meta = cJSON_ParseWithLength(u->meta, u->meta_len);
		if (!meta || !cJSON_IsObject(meta)) {
			api_reply_error(req, 400, "INVALID_FILE_METADATA", "the metadata part is not a JSON object");
			return u->error = -EINVAL;
		}
		if (json_get_string(meta, "path", &path) == -EINVAL || api_file_meta_from_json(meta, &fm) < 0) {
			api_reply_error(req, 400, "INVALID_FILE_METADATA", "bad metadata: path, owner, group or mode");
			return u->error = -EINVAL;
		}
	}
	if (!path || !*path) {
		if (query_opt(req, "path", &path) < 0)
			return u->error = -EINVAL;
	}
	if (!path || !*path) {
		api_reply_error(req, 400, API_E_MISSING_QUERY, "the upload needs a path (metadata part or ?path=)");
		return u->error = -EINVAL;
	}
	free(u->cur_path);
	u->cur_path = strdup(path);
	if (!u->cur_path)
		return u->error = -ENOMEM;
	r = api_upload_begin(&u->root, path, &fm, req->srv->cfg->max_upload, &u->cur);
	/* metadata applies to the next file only */
	free(u->meta);
	u->meta = NULL;
	u->meta_len = 0;
	if (r < 0) {
		reply_errno(req, r, "cannot upload", path);
		return u->error = r;
	}
	u->cur_active = true;
	return 0;
}

static enum MHD_Result post_iter(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
				 const char *content_type, const char *transfer_encoding, const char *data, uint64_t off,
				 size_t size)
{
	struct api_request *req = cls;
	struct upload_ctx *u = req->upload;
	int r;

	if (u->error)
		return MHD_NO;
	if (!key)
		return MHD_YES;
	if (!strcmp(key, "metadata")) {
		char *nb;

		if (off == 0) {
			if (upload_finish_part(req, u) < 0)
				return MHD_NO;
			u->meta_len = 0;
		}
		if (u->meta_len + size > META_MAX) {
			api_reply_error(req, 400, "INVALID_FILE_METADATA", "the metadata part is over %d bytes", META_MAX);
			u->error = -EFBIG;
			return MHD_NO;
		}
		nb = realloc(u->meta, u->meta_len + size + 1);
		if (!nb) {
			u->error = -ENOMEM;
			return MHD_NO;
		}
		u->meta = nb;
		memcpy(u->meta + u->meta_len, data, size);
		u->meta_len += size;
		u->meta[u->meta_len] = '\0';
		return MHD_YES;
	}
	if (strcmp(key, "file") != 0)
		return MHD_YES; /* unknown parts are ignored */
	if (off == 0 || !u->cur_active) {
		if (upload_finish_part(req, u) < 0 || upload_begin_part(req, u) < 0)
			return MHD_NO;
	}
	if (size > 0) {
		r = api_upload_write(u->cur, data, size);
		if (r < 0) {
			/* drop the temporary file now, not when the connection ends: the client may look at once */
			api_upload_free(u->cur);
			u->cur = NULL;
			u->cur_active = false;
			reply_errno(req, r, "cannot upload", u->cur_path);
			u->error = r;
			return MHD_NO;
		}
	}
	return MHD_YES;
}

int api_upload_files(struct api_request *req, const char *data, size_t size)
{
	struct upload_ctx *u = req->upload;

	if (!u) {
		const char *ct = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);

		if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0) {
			api_reply_error(req, 400, API_E_INVALID_FILE, "uploads must be multipart/form-data");
			return -EINVAL;
		}
		u = calloc(1, sizeof(*u));
		if (!u)
			return -ENOMEM;
		req->upload = u;
		req->upload_free = upload_ctx_free;
		u->done = cJSON_CreateArray();
		if (!u->done)
			return -ENOMEM;
		u->s = api_request_session(req);
		if (!u->s)
			return -ESRCH;
		if (api_session_op_begin(u->s) < 0) {
			api_session_unref(u->s);
			u->s = NULL;
			api_reply_error(req, 404, API_E_SESSION_NOT_FOUND, "session not found");
			return -ESRCH;
		}
		u->op = true;
		api_session_files_root(u->s, &u->root);
		u->pp = MHD_create_post_processor(req->conn, 64 * 1024, post_iter, req);
		if (!u->pp) {
			api_reply_error(req, 400, API_E_INVALID_FILE, "malformed multipart/form-data request");
			return -EINVAL;
		}
	}
	if (u->error)
		return u->error;
	if (MHD_post_process(u->pp, data, size) != MHD_YES) {
		if (!req->answered)
			api_reply_error(req, 400, API_E_INVALID_FILE, "malformed multipart/form-data body");
		return u->error ? u->error : -EINVAL;
	}
	return 0;
}

/* Ends the upload's hold on the session before the answer goes out (a delete may follow at once). */
static void upload_release(struct upload_ctx *u)
{
	api_upload_free(u->cur);
	u->cur = NULL;
	u->cur_active = false;
	if (u->op) {
		u->op = false;
		api_session_op_end(u->s);
	}
}

enum MHD_Result api_handle_files_upload(struct api_request *req)
{
	struct upload_ctx *u = req->upload;
	_cleanup_json_ cJSON *o = NULL;
	cJSON *first;
	int r;

	if (!u)
		return api_reply_error(req, 400, API_E_INVALID_FILE, "the upload has no body");
	if (u->pp) {
		MHD_destroy_post_processor(u->pp); /* flushes the last part */
		u->pp = NULL;
	}
	if (req->answered) {
		upload_release(u);
		return MHD_YES;
	}
	r = upload_finish_part(req, u);
	upload_release(u);
	if (r < 0)
		return MHD_YES;
	if (cJSON_GetArraySize(u->done) == 0)
		return api_reply_error(req, 400, API_E_INVALID_FILE, "no 'file' part in the upload");
	first = cJSON_GetArrayItem(u->done, 0);
	o = cJSON_Duplicate(first, true);
	if (!o || !cJSON_AddBoolToObject(o, "overwrite", true) ||
	    !cJSON_AddItemToObject(o, "files", cJSON_Duplicate(u->done, true)))
		return MHD_NO;
	api_session_touch(u->s);
	return api_reply_json(req, 200, o);
}

/* ------------------------------------------------------------------ the rest */

/* Applies @remove to every ?path= of the request, stopping at the first failure. */
static enum MHD_Result remove_each(struct api_request *req,
				   int (*remove)(const struct api_files_root *root, const char *path), const char *what)
{
	_cleanup_strv_free_ char **paths = query_required(req, "path");
	struct api_files_root root;
	struct api_session *s;

	if (!paths)
		return req->answered ? MHD_YES : MHD_NO;
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	for (char **p = paths; *p; p++) {
		int r = remove(&root, *p);

		if (r < 0) {
			files_done(s);
			return reply_errno(req, r, what, *p);
		}
	}
	files_done(s);
	return api_reply_empty(req, 200);
}

enum MHD_Result api_handle_files_delete(struct api_request *req)
{
	return remove_each(req, api_files_remove, "cannot remove");
}

enum MHD_Result api_handle_files_mv(struct api_request *req)
{
	_cleanup_json_ cJSON *body = NULL;
	struct api_files_root root;
	struct api_session *s;
	const char *src = NULL, *dest = NULL;
	const cJSON *item;
	int r = 0;

	if (query_opt(req, "old_path", &src) < 0 || query_opt(req, "new_path", &dest) < 0)
		return MHD_YES;
	if ((!src || !dest) && req->body_len > 0) {
		/* execd's /files/mv body: [{"src": ..., "dest": ...}] */
		if (json_text_has_escaped_nul(req->body, req->body_len)) /* cJSON would cut a path there */
			return api_reply_error(req, 400, API_E_INVALID_REQUEST, "request body holds a \\u0000 (NUL) in a string");
		body = cJSON_ParseWithLength(req->body, req->body_len);
		if (!cJSON_IsArray(body))
			return api_reply_error(req, 400, API_E_INVALID_REQUEST, "body must be [{\"src\", \"dest\"}]");
	} else if (!src || !*src || !dest || !*dest) {
		return api_reply_error(req, 400, API_E_MISSING_QUERY, "old_path and new_path are required");
	}
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	if (!body) {
		r = api_files_move(&root, src, dest);
	} else {
		cJSON_ArrayForEach(item, body) {
			if (json_get_string(item, "src", &src) < 0 || json_get_string(item, "dest", &dest) < 0) {
				files_done(s);
				return api_reply_error(req, 400, API_E_INVALID_REQUEST, "each move needs 'src' and 'dest' strings");
			}
			r = api_files_move(&root, src, dest);
			if (r < 0)
				break;
		}
	}
	files_done(s);
	if (r < 0)
		return reply_move_errno(req, r, src, dest);
	return api_reply_empty(req, 200);
}

enum MHD_Result api_handle_files_permissions(struct api_request *req)
{
	_cleanup_json_ cJSON *body = api_request_json(req);
	struct api_files_root root;
	struct api_session *s;
	const cJSON *item;

	if (!body)
		return MHD_YES;
	cJSON_ArrayForEach(item, body) {
		struct api_file_meta fm;

		if (!cJSON_IsObject(item) || api_file_meta_from_json(item, &fm) < 0)
			return api_reply_error(req, 400, API_E_INVALID_REQUEST,
					       "'%.200s' needs an object of owner, group and mode (octal digits)", item->string);
	}
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	cJSON_ArrayForEach(item, body) {
		struct api_file_meta fm;
		int r;

		(void)api_file_meta_from_json(item, &fm);
		r = api_files_set_permissions(&root, item->string, &fm);
		if (r < 0) {
			files_done(s);
			return reply_errno(req, r, "cannot change permissions of", item->string);
		}
	}
	files_done(s);
	return api_reply_empty(req, 200);
}

/* {"<path>": {"replacedCount": n}}, as execd's verbose replace answers. */
static bool add_count(cJSON *out, const char *path, size_t count)
{
	cJSON *o = cJSON_AddObjectToObject(out, path);

	return o && cJSON_AddNumberToObject(o, "replacedCount", (double)count);
}

enum MHD_Result api_handle_files_replace(struct api_request *req)
{
	_cleanup_json_ cJSON *body = NULL, *out = NULL;
	struct api_files_root root;
	struct api_session *s;
	const char *path = NULL, *old = NULL, *new_str = NULL;
	const cJSON *item;
	size_t count = 0;
	int r = 0;

	if (query_opt(req, "path", &path) < 0 || query_opt(req, "old", &old) < 0 || query_opt(req, "new", &new_str) < 0)
		return MHD_YES;
	if (!path || !*path) {
		/* execd's /files/replace body: {"path": {"old": ..., "new": ...}} */
		body = api_request_json(req);
		if (!body)
			return MHD_YES;
		cJSON_ArrayForEach(item, body)
			if (!cJSON_IsObject(item) || json_get_string(item, "old", &old) < 0 || !*old ||
			    json_get_string(item, "new", &new_str) == -EINVAL)
				return api_reply_error(req, 400, API_E_INVALID_REQUEST,
						       "'%.200s' needs {\"old\": non-empty string, \"new\": string}", item->string);
	} else if (!old || !*old) {
		return api_reply_error(req, 400, API_E_MISSING_QUERY, "path and old are required");
	}
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	out = cJSON_CreateObject();
	if (!body) {
		r = api_files_replace(&root, path, old, strlen(old), new_str ? new_str : "", new_str ? strlen(new_str) : 0,
				      &count);
		if (r >= 0 && out && !add_count(out, path, count))
			r = -ENOMEM;
	} else {
		cJSON_ArrayForEach(item, body) {
			new_str = NULL;
			(void)json_get_string(item, "old", &old);
			(void)json_get_string(item, "new", &new_str);
			path = item->string;
			r = api_files_replace(&root, path, old, strlen(old), new_str ? new_str : "",
					      new_str ? strlen(new_str) : 0, &count);
			if (r < 0)
				break;
			if (out && !add_count(out, path, count)) {
				r = -ENOMEM;
				break;
			}
		}
	}
	files_done(s);
	if (r < 0)
		return reply_errno(req, r, "cannot replace in", path);
	if (!out)
		return MHD_NO;
	return api_reply_json(req, 200, out);
}

enum MHD_Result api_handle_files_search(struct api_request *req)
{
	_cleanup_json_ cJSON *o = NULL;
	struct api_files_root root;
	struct api_session *s;
	const char *path = NULL, *pattern = NULL;
	bool truncated = false;
	int r;

	if (query_opt(req, "path", &path) < 0 || query_opt(req, "pattern", &pattern) < 0)
		return MHD_YES;
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	r = api_files_search(&root, path && *path ? path : s->workspace, pattern, NULL, &o, &truncated);
	files_done(s);
	if (r < 0)
		return reply_errno(req, r, "cannot search", path ? path : "/");
	return api_reply_json(req, 200, o);
}

enum MHD_Result api_handle_dirs_list(struct api_request *req)
{
	_cleanup_json_ cJSON *o = NULL;
	struct api_files_root root;
	struct api_session *s;
	const char *path = NULL, *depth_s = NULL;
	unsigned long depth = 1;
	bool truncated = false;
	int r;

	if (query_opt(req, "path", &path) < 0 || query_opt(req, "depth", &depth_s) < 0)
		return MHD_YES;
	if (depth_s && *depth_s) {
		char *end;

		errno = 0;
		depth = strtoul(depth_s, &end, 10);
		if (errno || *end || *depth_s == '-' || depth > UINT_MAX)
			return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'depth' must be a non-negative integer");
	}
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	r = api_dirs_list(&root, path && *path ? path : s->workspace, (unsigned)depth, NULL, &o, &truncated);
	files_done(s);
	if (r < 0)
		return reply_errno(req, r, "cannot list", path ? path : "/");
	return api_reply_json(req, 200, o);
}

enum MHD_Result api_handle_dirs_create(struct api_request *req)
{
	_cleanup_strv_free_ char **paths = NULL;
	_cleanup_json_ cJSON *body = NULL;
	struct api_files_root root;
	struct api_session *s;
	const cJSON *item;
	int r;

	if (api_query_all(req, "path", &paths) < 0)
		return api_reply_error(req, 400, API_E_INVALID_REQUEST, "'path' contains a NUL byte");
	if (!paths[0]) {
		/* execd's /directories body: {"path": {"mode", "owner", "group"}} */
		body = api_request_json(req);
		if (!body)
			return MHD_YES;
		cJSON_ArrayForEach(item, body) {
			struct api_file_meta fm;

			if (!cJSON_IsObject(item) || api_file_meta_from_json(item, &fm) < 0)
				return api_reply_error(req, 400, API_E_INVALID_REQUEST,
						       "'%.200s' needs an object of mode, owner and group", item->string);
		}
	}
	s = files_session(req, &root);
	if (!s)
		return MHD_YES;
	if (!body) {
		struct api_file_meta fm = API_FILE_META_INIT;

		for (char **p = paths; *p; p++) {
			r = api_dirs_create(&root, *p, &fm);
			if (r < 0) {
				files_done(s);
				return reply_errno(req, r, "cannot create directory", *p);
			}
		}
	} else {
		cJSON_ArrayForEach(item, body) {
			struct api_file_meta fm;

			(void)api_file_meta_from_json(item, &fm);
			r = api_dirs_create(&root, item->string, &fm);
			if (r < 0) {
				files_done(s);
				return reply_errno(req, r, "cannot create directory", item->string);
			}
		}
	}
	files_done(s);
	return api_reply_empty(req, 200);
}

enum MHD_Result api_handle_dirs_delete(struct api_request *req)
{
	return remove_each(req, api_dirs_remove, "cannot remove directory");
}
