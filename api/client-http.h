/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The draftbox client's HTTP/1.1 client: one request per connection
 * (Connection: close) over TCP or a Unix socket, request bodies from memory
 * or streamed from an fd, response heads bounded in size, bodies read by
 * Content-Length, chunked transfer coding or until close, and handed to a
 * callback as they arrive (for SSE and downloads). Also the small parsers
 * the client needs: server URLs, percent-encoding and Server-Sent Events.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

#define HTTP_MAX_HEAD 65536u      /* status line + headers */
#define HTTP_MAX_LINE 8192u       /* one header or chunk-size line */

/* Where the server is: "http://HOST[:PORT][/BASE]" or "unix:/PATH/TO/SOCKET". */
struct http_url {
	bool is_unix;
	char *host;       /* without [] for IPv6 */
	uint16_t port;
	char *socket_path;
	char *base;       /* path prefix without trailing '/', "" if none */
	unsigned timeout_s; /* send/receive inactivity timeout, 0 = none (set by the caller, not parsed) */
};

/* Parses @s into *ret (fields are new strings). Returns 0, -EINVAL (unsupported or malformed) or -ENOMEM. */
int http_url_parse(const char *s, struct http_url *ret);
/* Frees what http_url_parse() allocated. Accepts a zeroed struct. */
void http_url_done(struct http_url *u);

/* Percent-encodes @s for a query value (everything but unreserved characters; '/' kept if @keep_slash). Returns a new string or NULL. */
char *http_escape(const char *s, bool keep_slash);

/* One piece of a request body: @size bytes from @data, or, when @data is NULL, from @fd. */
struct http_body_part {
	const void *data;
	int fd;
	uint64_t size;
};

struct http_response {
	int fd;                 /* the connection; owned */
	unsigned status;
	char *content_type;     /* or NULL */
	long long patch_skipped; /* Draftbox-Patch-Skipped (changes a patch diff left out), -1 if absent */
	bool chunked;
	bool has_length;
	uint64_t length;        /* Content-Length when has_length */
	/* reader state */
	char *buf;
	size_t start, end, alloc;
	uint64_t remaining;     /* bytes left in the body or current chunk */
	bool in_chunk, done;
};

/*
 * Connects to @url, sends "@method @url->base@target HTTP/1.1" with Host,
 * User-Agent, Connection: close, the extra "Name: value" lines of @headers
 * (NULL-terminated vector, may be NULL) and a body made of @parts (Content-
 * Length is their total; no body when @n_parts is 0), then reads the status
 * line and headers into *ret. With @url->timeout_s, a connection silent
 * that long fails with -ETIMEDOUT (here or in http_read_body()). Returns 0
 * or -errno (-EPROTO for a malformed response, -E2BIG for a head over
 * HTTP_MAX_HEAD, -ECONNREFUSED, ...).
 */
int http_request(const struct http_url *url, const char *method, const char *target, char *const *headers,
		 const struct http_body_part *parts, size_t n_parts, struct http_response *ret);

/*
 * Reads the next piece of the body: returns the number of bytes put in
 * @buf (at most @size), 0 at the end of the body, or -errno (-EPROTO for
 * bad chunked coding or a body cut short).
 */
ssize_t http_read_body(struct http_response *r, void *buf, size_t size);

/* Reads the whole body into a new NUL-terminated buffer; -EFBIG past @max. Returns 0 or -errno. */
int http_read_body_all(struct http_response *r, size_t max, char **ret, size_t *ret_size);

/* Closes the connection and frees the response. Accepts a zeroed struct. */
void http_response_done(struct http_response *r);

/*
 * Server-Sent Events parser (the subset servers use: "data:" lines joined
 * with "\n", "event:", ":" comments, dispatch on an empty line; CR, LF and
 * CRLF line ends) plus execd's framing, where a line starting with '{' is a
 * whole event (bare JSON, no "data:"). Feed it bytes as they come; @cb gets each event's type
 * ("message" when none) and data. A non-zero return from @cb stops parsing
 * and is returned by sse_feed(). Lines are bounded (-E2BIG past 1 MiB).
 */
struct sse_parser {
	char *line;
	size_t line_len, line_alloc;
	char *data;
	size_t data_len, data_alloc;
	char event[64];
	bool saw_cr;
	int (*cb)(const char *event, const char *data, size_t len, void *userdata);
	void *userdata;
};
int sse_feed(struct sse_parser *p, const char *buf, size_t size);
/* Dispatches a last event not followed by a blank line (end of stream). Returns like sse_feed(). */
int sse_finish(struct sse_parser *p);
void sse_parser_done(struct sse_parser *p);
