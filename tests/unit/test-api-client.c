// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unit tests for the draftbox client's HTTP layer and parsers
 * (api/client-http.h, api/client.h): URL parsing, percent-encoding, shell
 * joining of a command, the SSE parser, run events, and http_request()
 * against a canned server on a Unix socket (chunked, Content-Length and
 * read-until-close bodies, malformed and oversized answers).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/client-http.h"
#include "api/client.h"
#include "tap.h"

static void test_url(void)
{
	struct http_url u;

	is_int(http_url_parse("http://127.0.0.1:44772", &u), 0, "plain url");
	ok(!u.is_unix && strcmp(u.host, "127.0.0.1") == 0 && u.port == 44772 && strcmp(u.base, "") == 0, "fields");
	http_url_done(&u);
	is_int(http_url_parse("http://localhost/prefix/", &u), 0, "url with base");
	ok(u.port == 80 && strcmp(u.base, "/prefix") == 0, "default port and base without trailing slash");
	http_url_done(&u);
	is_int(http_url_parse("http://[::1]:8080", &u), 0, "ipv6 url");
	is_str(u.host, "::1", "ipv6 host");
	http_url_done(&u);
	is_int(http_url_parse("unix:/run/draftbox.sock", &u), 0, "unix url");
	ok(u.is_unix && strcmp(u.socket_path, "/run/draftbox.sock") == 0, "socket path");
	http_url_done(&u);
	is_int(http_url_parse("https://x", &u), -EINVAL, "https refused");
	is_int(http_url_parse("http://x:0", &u), -EINVAL, "port 0 refused");
	is_int(http_url_parse("http://x:99999", &u), -EINVAL, "port out of range refused");
	is_int(http_url_parse("http://user@x", &u), -EINVAL, "userinfo refused");
	is_int(http_url_parse("unix:relative", &u), -EINVAL, "relative socket refused");
	is_int(http_url_parse("http://", &u), -EINVAL, "empty host refused");
}

static void test_escape_join(void)
{
	char *s;
	char *one[] = { "make && ./a.out" };
	char *many[] = { "sh", "-c", "echo 'hi' $HOME", "" };

	s = http_escape("a b/c?d&e=%2e", true);
	is_str(s, "a%20b/c%3Fd%26e%3D%252e", "escape keeps slash");
	free(s);
	s = http_escape("a/b", false);
	is_str(s, "a%2Fb", "escape of slash");
	free(s);
	s = client_session_target("a/../b", "/run");
	is_str(s, "/v1/isolated/session/a%2F..%2Fb/run", "session id escaped into one segment");
	free(s);
	s = client_join_command(one, 1);
	is_str(s, "make && ./a.out", "one argument is a script");
	free(s);
	s = client_join_command(many, 4);
	is_str(s, "sh -c 'echo '\\''hi'\\'' $HOME' ''", "several arguments are quoted");
	free(s);
}

struct ev_log {
	char buf[1024];
	int n;
};

static int ev_cb(const char *event, const char *data, size_t len, void *userdata)
{
	struct ev_log *l = userdata;
	size_t used = strlen(l->buf);

	snprintf(l->buf + used, sizeof(l->buf) - used, "[%s|%.*s]", event, (int)len, data);
	l->n++;
	return 0;
}

static void test_sse(void)
{
	const char *stream = ": comment\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: l1\ndata:l2\n\ndata: cr\r\r{\"bare\":2}\n\ndata: tail";
	struct ev_log l = { .buf = "" };
	struct sse_parser p = { .cb = ev_cb, .userdata = &l };

	/* byte by byte: events split anywhere */
	for (size_t i = 0; i < strlen(stream); i++)
		is_int(sse_feed(&p, stream + i, 1), 0, "feed byte %zu", i) ;
	is_int(sse_finish(&p), 0, "finish");
	is_str(l.buf, "[message|{\"a\":1}][x|l1\nl2][message|cr][message|{\"bare\":2}][message|tail]", "events parsed");
	is_int(l.n, 5, "five events (one bare JSON line, as execd frames them)");
	sse_parser_done(&p);

	/* in two pieces, cut at every place, and whole */
	for (size_t k = 0; k <= strlen(stream); k++) {
		struct ev_log l2 = { .buf = "" };
		struct sse_parser p2 = { .cb = ev_cb, .userdata = &l2 };

		if (sse_feed(&p2, stream, k) != 0 || sse_feed(&p2, stream + k, strlen(stream) - k) != 0 ||
		    sse_finish(&p2) != 0 || strcmp(l2.buf, l.buf) != 0) {
			ok(false, "stream cut at %zu: %s", k, l2.buf);
			sse_parser_done(&p2);
			break;
		}
		sse_parser_done(&p2);
		if (k == strlen(stream))
			ok(true, "the same events however the stream is cut");
	}
}

static void test_run_events(void)
{
	int out[2], err[2], status = -1;
	bool finished = false;
	_cleanup_free_ struct client_run_out *o = NULL;
	char buf[256] = { 0 };
	const char *e1 = "{\"type\":\"stdout\",\"text\":\"hello\\n\"}";
	const char *e2 = "{\"type\":\"stderr\",\"text\":\"oops\"}";
	const char *e3 = "{\"type\":\"error\",\"error\":{\"ename\":\"CommandExitError\",\"evalue\":\"3\",\"traceback\":[]}}";
	const char *e4 = "{\"type\":\"execution_complete\",\"execution_time\":5}";
	const char *e5 = "{\"type\":\"error\",\"error\":{\"ename\":\"Timeout\",\"evalue\":\"killed\"}}";

	if (pipe2(out, O_CLOEXEC | O_NONBLOCK) < 0 || pipe2(err, O_CLOEXEC | O_NONBLOCK) < 0)
		return;
	o = calloc(1, sizeof(*o));
	if (!o)
		return;
	*o = (struct client_run_out){ .out_fd = out[1], .err_fd = err[1], .fd = -1 };
	is_int(client_run_event(e1, strlen(e1), o, &status, &finished), 0, "stdout event");
	is_int(client_run_event(e2, strlen(e2), o, &status, &finished), 0, "stderr event");
	is_int(client_run_event("not json", 8, o, &status, &finished), 0, "junk skipped");
	ok(!finished, "not finished yet");
	ok(read(out[0], buf, sizeof(buf) - 1) == 6 && strcmp(buf, "hello\n") == 0,
	   "stdout text written verbatim, when stderr text came after it");
	ok(read(err[0], buf, sizeof(buf) - 1) < 0 && errno == EAGAIN, "stderr text held until the flush");
	is_int(client_run_out_flush(o), 0, "flush");
	memset(buf, 0, sizeof(buf));
	ok(read(err[0], buf, sizeof(buf) - 1) == 5 && strcmp(buf, "oops\n") == 0, "stderr line written with its newline");
	is_int(client_run_event(e3, strlen(e3), o, &status, &finished), 0, "error event");
	ok(finished && status == 3, "exit status from evalue");
	is_int(client_run_event(e4, strlen(e4), o, &status, &finished), 0, "complete after error");
	is_int(status, 3, "error wins over complete");
	finished = false;
	status = -1;
	is_int(client_run_event(e4, strlen(e4), o, &status, &finished), 0, "complete");
	ok(finished && status == 0, "complete alone is status 0");
	finished = false;
	is_int(client_run_event(e5, strlen(e5), o, &status, &finished), 0, "non-numeric error");
	ok(finished && status == 1, "non-numeric error is status 1");
	close(out[0]);
	close(out[1]);
	close(err[0]);
	close(err[1]);
}

/* A one-shot server: accepts one connection, stores the request, sends @answer in pieces, closes. */
struct canned {
	int listen_fd;
	const char *answer;
	char request[8192];
	size_t request_len;
};

static void *canned_server(void *arg)
{
	struct canned *c = arg;
	int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	size_t len = strlen(c->answer);

	if (fd < 0)
		return NULL;
	/* read what is there (the request is small), then answer in 7-byte pieces */
	for (;;) {
		ssize_t n = recv(fd, c->request + c->request_len, sizeof(c->request) - 1 - c->request_len, 0);
		char *end;

		if (n <= 0)
			break;
		c->request_len += (size_t)n;
		c->request[c->request_len] = '\0';
		end = strstr(c->request, "\r\n\r\n");
		if (end) {
			char *cl = strcasestr(c->request, "Content-Length: ");
			size_t body = cl ? strtoul(cl + 16, NULL, 10) : 0;

			if (c->request_len >= (size_t)(end + 4 - c->request) + body)
				break;
		}
	}
	for (size_t off = 0; off < len; off += 7) {
		size_t n = len - off < 7 ? len - off : 7;

		if (send(fd, c->answer + off, n, MSG_NOSIGNAL) < 0)
			break;
		usleep(100);
	}
	close(fd);
	return NULL;
}

static int roundtrip(const char *answer, const struct http_body_part *parts, size_t n_parts, char **ret_body,
		     unsigned *ret_status, struct canned *ret_c)
{
	static int counter;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct http_url url = { .is_unix = true, .base = (char *)"" };
	struct http_response resp = { .fd = -1 };
	pthread_t th;
	char *hdrs[] = { "Authorization: Bearer sekrit", NULL };
	int r;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "/tmp/test-api-client.%d.%d", (int)getpid(), counter++);
	unlink(sa.sun_path);
	ret_c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (bind(ret_c->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ret_c->listen_fd, 1) < 0)
		return -errno;
	ret_c->answer = answer;
	ret_c->request_len = 0;
	pthread_create(&th, NULL, canned_server, ret_c);
	url.socket_path = sa.sun_path;
	r = http_request(&url, n_parts ? "POST" : "GET", "/v1/x?y=1", hdrs, parts, n_parts, &resp);
	if (r == 0) {
		*ret_status = resp.status;
		r = http_read_body_all(&resp, 1 << 20, ret_body, NULL);
	}
	http_response_done(&resp);
	pthread_join(th, NULL);
	close(ret_c->listen_fd);
	unlink(sa.sun_path);
	return r;
}

static void test_http(void)
{
	static struct canned c;
	char *body = NULL;
	unsigned status = 0;
	char big[HTTP_MAX_HEAD + 4096];
	int fds[2];
	struct http_body_part parts[2];

	is_int(roundtrip("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
			 "5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\n",
			 NULL, 0, &body, &status, &c),
	       0, "chunked answer");
	is_int(status, 200, "status");
	is_str(body, "hello, world", "chunked body decoded");
	free(body);
	body = NULL;
	ok(strncmp(c.request, "GET /v1/x?y=1 HTTP/1.1\r\n", 24) == 0, "request line");
	ok(strstr(c.request, "\r\nHost: localhost\r\n") != NULL, "Host header for a Unix socket");
	ok(strstr(c.request, "\r\nAuthorization: Bearer sekrit\r\n") != NULL, "extra header sent");
	ok(strstr(c.request, "\r\nConnection: close\r\n") != NULL, "one request per connection");

	is_int(roundtrip("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found", NULL, 0, &body, &status, &c), 0,
	       "content-length answer");
	is_int(status, 404, "status 404");
	is_str(body, "not found", "content-length body");
	free(body);
	body = NULL;

	is_int(roundtrip("HTTP/1.0 200 OK\r\n\r\nuntil close", NULL, 0, &body, &status, &c), 0, "read-until-close answer");
	is_str(body, "until close", "body until close");
	free(body);
	body = NULL;

	is_int(roundtrip("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n0\r\n\r\n", NULL, 0, &body, &status, &c),
	       -EPROTO, "bad chunk size is EPROTO");
	is_int(roundtrip("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX3\r\nabc\r\n0\r\n\r\n", NULL, 0, &body,
			 &status, &c),
	       -EPROTO, "missing CRLF after a chunk is EPROTO");
	is_int(roundtrip("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", NULL, 0, &body, &status, &c), -EPROTO,
	       "body cut short is EPROTO");
	is_int(roundtrip("SSH-2.0-OpenSSH\r\n\r\n", NULL, 0, &body, &status, &c), -EPROTO, "not HTTP is EPROTO");
	is_int(roundtrip("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", NULL, 0, &body, &status, &c), -EPROTO,
	       "negative length is EPROTO");

	memcpy(big, "HTTP/1.1 200 OK\r\n", 17);
	for (size_t i = 17; i + 100 < sizeof(big); i += 100)
		snprintf(big + i, sizeof(big) - i, "X-Pad: %091d\r\n", 0);
	is_int(roundtrip(big, NULL, 0, &body, &status, &c), -E2BIG, "oversized head is E2BIG");

	/* a body streamed from an fd, after a memory part */
	if (pipe(fds) == 0) {
		if (write(fds[1], "from-fd", 7) != 7)
			ok(false, "pipe write");
		close(fds[1]);
		parts[0] = (struct http_body_part){ .data = "mem-", .fd = -1, .size = 4 };
		parts[1] = (struct http_body_part){ .data = NULL, .fd = fds[0], .size = 7 };
		is_int(roundtrip("HTTP/1.1 204 No Content\r\n\r\n", parts, 2, &body, &status, &c), 0, "post with body parts");
		is_int(status, 204, "204");
		is_str(body, "", "204 has no body");
		ok(strstr(c.request, "\r\nContent-Length: 11\r\n") != NULL, "content-length is the parts' total");
		ok(c.request_len > 11 && memcmp(c.request + c.request_len - 11, "mem-from-fd", 11) == 0, "body bytes in order");
		free(body);
		body = NULL;
		close(fds[0]);
	}

	{
		struct http_url url = { .is_unix = true, .socket_path = (char *)"/nonexistent/sock", .base = (char *)"" };
		struct http_response resp = { .fd = -1 };
		char *bad[] = { "X: a\r\nInjected: yes", NULL };

		is_int(http_request(&url, "GET", "/", bad, NULL, 0, &resp), -EINVAL, "header injection refused");
		is_int(http_request(&url, "GET", "/a b", NULL, NULL, 0, &resp), -EINVAL, "space in target refused");
		is_int(http_request(&url, "GET", "/", NULL, NULL, 0, &resp), -ENOENT, "missing socket is ENOENT");
	}
}

int main(void)
{
	test_url();
	test_escape_join();
	test_sse();
	test_run_events();
	test_http();
	return tap_done();
}
