// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of client-http.h: a bounded HTTP/1.1 client, URL parsing,
 * percent-encoding and an SSE parser.
 */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "client-http.h"
#include "fdpath.h"

void http_url_done(struct http_url *u)
{
	free(u->host);
	free(u->socket_path);
	free(u->base);
	*u = (struct http_url){ 0 };
}

int http_url_parse(const char *s, struct http_url *ret)
{
	struct http_url u = { 0 };
	const char *p, *host_end, *path;
	unsigned long port = 80;

	if (!s)
		return -EINVAL;
	if (strncmp(s, "unix:", 5) == 0) {
		p = s + 5;
		while (p[0] == '/' && p[1] == '/')
			p++; /* unix:///run/x.sock */
		if (p[0] != '/' || strlen(p) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			return -EINVAL;
		u.is_unix = true;
		u.socket_path = strdup(p);
		u.base = strdup("");
		if (!u.socket_path || !u.base) {
			http_url_done(&u);
			return -ENOMEM;
		}
		*ret = u;
		return 0;
	}
	if (strncmp(s, "http://", 7) != 0)
		return -EINVAL; /* no TLS: the server listens on loopback or a socket */
	p = s + 7;
	if (*p == '[') {
		host_end = strchr(p, ']');
		if (!host_end)
			return -EINVAL;
		u.host = strndup(p + 1, (size_t)(host_end - p - 1));
		p = host_end + 1;
	} else {
		size_t n = strcspn(p, ":/?#");

		u.host = strndup(p, n);
		p += n;
	}
	if (!u.host)
		return -ENOMEM;
	if (!*u.host || strchr(u.host, '@')) {
		http_url_done(&u);
		return -EINVAL;
	}
	if (*p == ':') {
		char *end;

		errno = 0;
		port = strtoul(p + 1, &end, 10);
		if (errno || end == p + 1 || port == 0 || port > 65535) {
			http_url_done(&u);
			return -EINVAL;
		}
		p = end;
	}
	if (*p && *p != '/') {
		http_url_done(&u);
		return -EINVAL;
	}
	path = p;
	{
		size_t n = strlen(path);

		while (n > 0 && path[n - 1] == '/')
			n--;
		if (memchr(path, '?', n) || memchr(path, '#', n)) {
			http_url_done(&u);
			return -EINVAL;
		}
		u.base = strndup(path, n);
	}
	if (!u.base) {
		http_url_done(&u);
		return -ENOMEM;
	}
	u.port = (uint16_t)port;
	*ret = u;
	return 0;
}

char *http_escape(const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = malloc(n * 3 + 1), *o = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
		    c == '.' || c == '~' || (keep_slash && c == '/'))
			*o++ = (char)c;
		else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

static int connect_url(const struct http_url *url)
{
	_cleanup_close_ int fd = -1;

	if (url->is_unix) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", url->socket_path);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			return -errno;
		return TAKE_FD(fd);
	} else {
		struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG }, *res = NULL, *ai;
		char port[8];
		int r = -EHOSTUNREACH, one = 1;

		snprintf(port, sizeof(port), "%u", url->port);
		if (getaddrinfo(url->host, port, &hints, &res) != 0)
			return -EHOSTUNREACH;
		for (ai = res; ai; ai = ai->ai_next) {
			fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
			if (fd < 0) {
				r = -errno;
				continue;
			}
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
				(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
				r = 0;
				break;
			}
			r = -errno;
			fd = safe_close(fd);
		}
		freeaddrinfo(res);
		if (r < 0)
			return r;
		return TAKE_FD(fd);
	}
}

static int send_all(int fd, const void *buf, size_t size)
{
	const char *p = buf;

	while (size > 0) {
		ssize_t n = send(fd, p, size, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
		}
		p += n;
		size -= (size_t)n;
	}
	return 0;
}

static int send_fd(int sock, int fd, uint64_t size)
{
	char buf[65536];

	while (size > 0) {
		ssize_t n = read(fd, buf, (size_t)MIN((uint64_t)sizeof(buf), size));
		int r;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EPIPE; /* the file shrank while we sent it: the length we announced is now wrong */
		r = send_all(sock, buf, (size_t)n);
		if (r < 0)
			return r;
		size -= (uint64_t)n;
	}
	return 0;
}

/* Refills the buffer; returns bytes added, 0 at EOF, or -errno. */
static ssize_t fill(struct http_response *r)
{
	ssize_t n;

	if (r->start == r->end)
		r->start = r->end = 0;
	if (r->end == r->alloc) {
		if (r->start > 0) {
			memmove(r->buf, r->buf + r->start, r->end - r->start);
			r->end -= r->start;
			r->start = 0;
		} else
			return -E2BIG;
	}
	do
		n = recv(r->fd, r->buf + r->end, r->alloc - r->end, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
	r->end += (size_t)n;
	return n;
}

/* Reads one line (CRLF or LF) of at most @max bytes; *ret points into the buffer, NUL-terminated. */
static int read_line(struct http_response *r, size_t max, char **ret)
{
	for (;;) {
		char *nl = memchr(r->buf + r->start, '\n', r->end - r->start);
		ssize_t n;

		if (nl) {
			char *line = r->buf + r->start;
			size_t len = (size_t)(nl - line);

			if (len > max)
				return -E2BIG;
			*nl = '\0';
			if (len > 0 && line[len - 1] == '\r')
				line[len - 1] = '\0';
			r->start += len + 1;
			*ret = line;
			return 0;
		}
		if (r->end - r->start > max)
			return -E2BIG;
		n = fill(r);
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EPROTO;
	}
}

void http_response_done(struct http_response *r)
{
	safe_close(r->fd);
	free(r->content_type);
	free(r->buf);
	*r = (struct http_response){ .fd = -1 };
}

static int parse_head(struct http_response *r)
{
	size_t head_bytes = 0;
	char *line;
	int r2;

	r2 = read_line(r, HTTP_MAX_LINE, &line);
	if (r2 < 0)
		return r2;
	head_bytes += strlen(line);
	if (strncmp(line, "HTTP/1.", 7) != 0 || !line[7] || line[8] != ' ' || line[9] < '1' || line[9] > '5' ||
	    line[10] < '0' || line[10] > '9' || line[11] < '0' || line[11] > '9')
		return -EPROTO;
	r->status = (unsigned)((line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0'));

	for (;;) {
		char *colon, *v;

		r2 = read_line(r, HTTP_MAX_LINE, &line);
		if (r2 < 0)
			return r2;
		if (!*line)
			break;
		head_bytes += strlen(line);
		if (head_bytes > HTTP_MAX_HEAD)
			return -E2BIG;
		colon = strchr(line, ':');
		if (!colon)
			return -EPROTO;
		*colon = '\0';
		v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		if (strcasecmp(line, "Content-Length") == 0) {
			char *end;

			errno = 0;
			r->length = strtoull(v, &end, 10);
			if (errno || end == v || *end || *v == '-')
				return -EPROTO;
			r->has_length = true;
		} else if (strcasecmp(line, "Transfer-Encoding") == 0) {
			if (strcasecmp(v, "chunked") != 0)
				return -EPROTO; /* nothing else is used by our server */
			r->chunked = true;
		} else if (strcasecmp(line, "Draftbox-Patch-Skipped") == 0) {
			char *end;

			errno = 0;
			r->patch_skipped = strtoll(v, &end, 10);
			if (errno || end == v || *end || r->patch_skipped < 0)
				return -EPROTO;
		} else if (strcasecmp(line, "Content-Type") == 0) {
			free(r->content_type);
			r->content_type = strdup(v);
			if (!r->content_type)
				return -ENOMEM;
		}
	}
	if (r->chunked)
		r->has_length = false;
	r->remaining = r->has_length ? r->length : 0;
	if (r->has_length && r->length == 0)
		r->done = true;
	if (r->status == 204 || r->status == 304)
		r->done = true;
	return 0;
}

int http_request(const struct http_url *url, const char *method, const char *target, char *const *headers,
		 const struct http_body_part *parts, size_t n_parts, struct http_response *ret)
{
	struct http_response r = { .fd = -1, .patch_skipped = -1 };
	_cleanup_free_ char *head = NULL, *extra = NULL;
	uint64_t total = 0;
	size_t extra_len = 0;
	int k;

	for (size_t i = 0; i < n_parts; i++)
		total += parts[i].size;
	for (size_t i = 0; headers && headers[i]; i++) {
		size_t l = strlen(headers[i]);
		char *n;

		if (strpbrk(headers[i], "\r\n"))
			return -EINVAL;
		n = realloc(extra, extra_len + l + 3);
		if (!n)
			return -ENOMEM;
		extra = n;
		memcpy(extra + extra_len, headers[i], l);
		memcpy(extra + extra_len + l, "\r\n", 3);
		extra_len += l + 2;
	}
	if (strpbrk(target, " \r\n") || strpbrk(method, " \r\n"))
		return -EINVAL;
	if (url->is_unix)
		k = asprintf(&head, "%s %s%s HTTP/1.1\r\nHost: localhost\r\n", method, url->base, target);
	else if (strchr(url->host, ':'))
		k = asprintf(&head, "%s %s%s HTTP/1.1\r\nHost: [%s]:%u\r\n", method, url->base, target, url->host, url->port);
	else
		k = asprintf(&head, "%s %s%s HTTP/1.1\r\nHost: %s:%u\r\n", method, url->base, target, url->host, url->port);
	if (k < 0) {
		head = NULL;
		return -ENOMEM;
	}
	{
		char *full = NULL;

		if (n_parts > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0)
			k = asprintf(&full, "%sUser-Agent: draftbox/%s\r\nConnection: close\r\nContent-Length: %llu\r\n%s\r\n", head,
				     DRAFTBOX_VERSION, (unsigned long long)total, extra ? extra : "");
		else
			k = asprintf(&full, "%sUser-Agent: draftbox/%s\r\nConnection: close\r\n%s\r\n", head, DRAFTBOX_VERSION,
				     extra ? extra : "");
		if (k < 0)
			return -ENOMEM;
		free(head);
		head = full;
	}

	r.fd = connect_url(url);
	if (r.fd < 0)
		return r.fd;
	if (url->timeout_s > 0) {
		struct timeval tv = { .tv_sec = (time_t)url->timeout_s };

		(void)setsockopt(r.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		(void)setsockopt(r.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	k = send_all(r.fd, head, strlen(head));
	for (size_t i = 0; k == 0 && i < n_parts; i++)
		k = parts[i].data ? send_all(r.fd, parts[i].data, parts[i].size) : send_fd(r.fd, parts[i].fd, parts[i].size);
	/* A server may answer (e.g. 401, 413) and close before reading the whole body: still read its answer. */
	if (k < 0 && k != -EPIPE && k != -ECONNRESET) {
		http_response_done(&r);
		return k;
	}
	r.alloc = 65536;
	r.buf = malloc(r.alloc);
	if (!r.buf) {
		http_response_done(&r);
		return -ENOMEM;
	}
	k = parse_head(&r);
	if (k < 0) {
		http_response_done(&r);
		return k;
	}
	*ret = r;
	return 0;
}

/* Takes up to @size bytes of already buffered or fresh data, but at most @limit. */
static ssize_t take(struct http_response *r, void *buf, size_t size, uint64_t limit)
{
	size_t n;

	if (r->start == r->end) {
		ssize_t f = fill(r);

		if (f <= 0)
			return f;
	}
	n = MIN(size, r->end - r->start);
	if ((uint64_t)n > limit)
		n = (size_t)limit;
	memcpy(buf, r->buf + r->start, n);
	r->start += n;
	return (ssize_t)n;
}

ssize_t http_read_body(struct http_response *r, void *buf, size_t size)
{
	ssize_t n;

	if (r->done || size == 0)
		return 0;
	if (r->has_length) {
		n = take(r, buf, size, r->remaining);
		if (n < 0)
			return n;
		if (n == 0)
			return -EPROTO; /* closed before Content-Length bytes */
		r->remaining -= (uint64_t)n;
		if (r->remaining == 0)
			r->done = true;
		return n;
	}
	if (!r->chunked) {
		n = take(r, buf, size, UINT64_MAX);
		if (n == 0)
			r->done = true;
		return n;
	}
	for (;;) {
		char *line, *end;
		int k;

		if (r->in_chunk && r->remaining > 0) {
			n = take(r, buf, size, r->remaining);
			if (n < 0)
				return n;
			if (n == 0)
				return -EPROTO;
			r->remaining -= (uint64_t)n;
			return n;
		}
		if (r->in_chunk) {
			/* CRLF after the chunk data */
			k = read_line(r, 2, &line);
			if (k < 0)
				return k == -E2BIG ? -EPROTO : k;
			if (*line)
				return -EPROTO;
			r->in_chunk = false;
		}
		k = read_line(r, HTTP_MAX_LINE, &line);
		if (k < 0)
			return k;
		errno = 0;
		r->remaining = strtoull(line, &end, 16);
		if (errno || end == line || (*end && *end != ';' && *end != ' ' && *end != '\t'))
			return -EPROTO;
		if (r->remaining == 0) {
			/* trailers until an empty line */
			for (unsigned i = 0;; i++) {
				k = read_line(r, HTTP_MAX_LINE, &line);
				if (k < 0)
					return k;
				if (!*line)
					break;
				if (i > 64)
					return -E2BIG;
			}
			r->done = true;
			return 0;
		}
		r->in_chunk = true;
	}
}

int http_read_body_all(struct http_response *r, size_t max, char **ret, size_t *ret_size)
{
	_cleanup_free_ char *out = NULL;
	size_t len = 0, alloc = 0;

	for (;;) {
		ssize_t n;

		if (alloc - len < 4096) {
			size_t na = alloc ? alloc * 2 : 8192;
			char *nb = realloc(out, na + 1);

			if (!nb)
				return -ENOMEM;
			out = nb;
			alloc = na;
		}
		n = http_read_body(r, out + len, alloc - len);
		if (n < 0)
			return (int)n;
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max)
			return -EFBIG;
	}
	if (!out) {
		out = malloc(1);
		if (!out)
			return -ENOMEM;
	}
	out[len] = '\0';
	*ret = TAKE_PTR(out);
	if (ret_size)
		*ret_size = len;
	return 0;
}

#define SSE_MAX_LINE (1u << 20)

static int grow(char **buf, size_t *alloc, size_t need)
{
	size_t na;
	char *nb;

	if (need <= *alloc)
		return 0;
	na = *alloc ? *alloc : 256;
	while (na < need)
		na *= 2;
	nb = realloc(*buf, na);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*alloc = na;
	return 0;
}

static int sse_dispatch(struct sse_parser *p)
{
	int r = 0;

	if (p->data) {
		/* the last data line's "\n" is not part of the data */
		if (p->data_len > 0)
			p->data_len--;
		p->data[p->data_len] = '\0';
		r = p->cb(p->event[0] ? p->event : "message", p->data, p->data_len, p->userdata);
		free(p->data);
		p->data = NULL;
		p->data_len = p->data_alloc = 0;
	}
	p->event[0] = '\0';
	return r;
}

static int sse_line(struct sse_parser *p)
{
	const char *line = p->line ? p->line : "";
	size_t len = p->line_len;
	const char *colon, *value;
	size_t name_len, vlen;
	int r;

	if (len == 0)
		return sse_dispatch(p);
	if (line[0] == ':')
		return 0;
	if (line[0] == '{') {
		/* execd's framing: a bare JSON object per line (what the SDK's parser accepts too) */
		r = sse_dispatch(p);
		if (r != 0)
			return r;
		return p->cb("message", line, len, p->userdata);
	}
	colon = memchr(line, ':', len);
	name_len = colon ? (size_t)(colon - line) : len;
	value = colon ? colon + 1 : line + len;
	if (colon && *value == ' ')
		value++;
	vlen = (size_t)(line + len - value);
	if (name_len == 4 && memcmp(line, "data", 4) == 0) {
		r = grow(&p->data, &p->data_alloc, p->data_len + vlen + 2);
		if (r < 0)
			return r;
		memcpy(p->data + p->data_len, value, vlen);
		p->data_len += vlen;
		p->data[p->data_len++] = '\n';
		if (p->data_len > 16u * SSE_MAX_LINE)
			return -E2BIG;
	} else if (name_len == 5 && memcmp(line, "event", 5) == 0)
		snprintf(p->event, sizeof(p->event), "%.*s", (int)MIN(vlen, sizeof(p->event) - 1), value);
	/* id, retry and unknown fields are ignored */
	return 0;
}

int sse_feed(struct sse_parser *p, const char *buf, size_t size)
{
	size_t i = 0;

	while (i < size) {
		size_t j = i;
		int r;

		if (p->saw_cr && buf[i] == '\n') {
			p->saw_cr = false;
			i++;
			continue; /* the LF of a CRLF */
		}
		p->saw_cr = false;
		while (j < size && buf[j] != '\r' && buf[j] != '\n')
			j++;
		/* the line's bytes up to its end (or the end of @buf), in one piece */
		if (p->line_len + (j - i) > SSE_MAX_LINE)
			return -E2BIG;
		r = grow(&p->line, &p->line_alloc, p->line_len + (j - i) + 1);
		if (r < 0)
			return r;
		memcpy(p->line + p->line_len, buf + i, j - i);
		p->line_len += j - i;
		if (j == size)
			break;
		p->saw_cr = buf[j] == '\r';
		p->line[p->line_len] = '\0';
		r = sse_line(p);
		p->line_len = 0;
		if (r != 0)
			return r;
		i = j + 1;
	}
	return 0;
}

int sse_finish(struct sse_parser *p)
{
	int r = 0;

	if (p->line_len > 0) {
		p->line[p->line_len] = '\0';
		r = sse_line(p);
		p->line_len = 0;
		if (r != 0)
			return r;
	}
	return sse_dispatch(p);
}

void sse_parser_done(struct sse_parser *p)
{
	free(p->line);
	free(p->data);
	p->line = p->data = NULL;
	p->line_len = p->line_alloc = p->data_len = p->data_alloc = 0;
}
