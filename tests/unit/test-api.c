// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unit tests for draftboxd's pure parts: the route table, the SSE frame
 * format and line splitting, settings parsing, ids, times and metrics.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "json-util.h"
#include "macro.h"
#include "run.h"
#include "session.h"
#include "settings.h"
#include "tap.h"

static void free_params(char *p[3])
{
	for (int i = 0; i < 3; i++) {
		free(p[i]);
		p[i] = NULL;
	}
}

static void test_routes(void)
{
	char *p[3] = {};
	bool mismatch = false;
	const struct api_route *r;

	r = api_route_find("POST", "/v1/isolated/session", p, &mismatch);
	ok(r && r->handler == api_handle_session_create, "create route");
	r = api_route_find("GET", "/v1/isolated/session/abc/runs/def/logs", p, &mismatch);
	ok(r && r->handler == api_handle_run_logs, "logs route");
	is_str(p[0], "abc", "session id param");
	is_str(p[1], "def", "run id param");
	free_params(p);
	r = api_route_find("GET", "/v1/isolated/session/abc/", p, &mismatch);
	ok(r && r->handler == api_handle_session_get, "one trailing slash is tolerated");
	free_params(p);
	r = api_route_find("GET", "/v1/isolated/session//run", p, &mismatch);
	ok(!r, "an empty segment does not match");
	free_params(p);
	r = api_route_find("GET", "/v1/isolated/session/a/b/run", p, &mismatch);
	ok(!r, "a segment never spans a slash");
	free_params(p);
	mismatch = false;
	r = api_route_find("PUT", "/v1/isolated/session/x", p, &mismatch);
	ok(!r && mismatch, "method mismatch is told apart");
	free_params(p);
	mismatch = false;
	r = api_route_find("GET", "/nope", p, &mismatch);
	ok(!r && !mismatch, "unknown route");
	r = api_route_find("POST", "/v1/isolated/session/x/files/upload", p, &mismatch);
	ok(r && r->upload, "upload route streams its body");
	free_params(p);
	r = api_route_find("GET", "/healthz", p, &mismatch);
	ok(r && r->public, "healthz needs no token");
	r = api_route_find("GET", "/metrics", p, &mismatch);
	ok(r && !r->public, "metrics needs the token");
}

/* What cJSON prints for an output frame: the hand-written frames must be the same bytes. */
static char *cjson_frame(bool is_stderr, const char *text, size_t len, uint64_t ts)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	_cleanup_free_ char *clean = json_utf8_sanitize(text, len);
	_cleanup_cjson_str_ char *s = NULL;
	char *out = NULL;

	if (!o || !clean || !cJSON_AddStringToObject(o, "type", is_stderr ? "stderr" : "stdout") ||
	    !cJSON_AddStringToObject(o, "text", clean) || !cJSON_AddNumberToObject(o, "timestamp", (double)ts))
		return NULL;
	s = cJSON_PrintUnformatted(o);
	if (!s || asprintf(&out, "%s\n\n", s) < 0)
		return NULL;
	return out;
}

static void test_frames_as_cjson(void)
{
	char all[256];
	const struct {
		const char *s;
		size_t len;
	} cases[] = {
		{ "", 0 }, { "plain", 5 }, { "q\"b\\s/", 6 }, { "\b\f\n\r\t\x01\x1f\x7f", 8 },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 15 }, { "bad \xff\xc3 \xed\xa0\x80 \xc0\xaf", 13 },
		{ "nul\0in", 7 }, { all, sizeof(all) },
	};
	bool same = true;

	for (size_t i = 0; i < sizeof(all); i++)
		all[i] = (char)i;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		for (int e = 0; e < 2; e++) {
			_cleanup_(api_frames_done) struct api_frames f = {};
			_cleanup_free_ char *want = cjson_frame(e, cases[i].s, cases[i].len, 1796618626407ull);

			if (api_frame_output(&f, e, cases[i].s, cases[i].len, 1796618626407ull) < 0 || !want ||
			    f.len != strlen(want) || memcmp(f.buf, want, f.len) != 0) {
				printf("# case %zu (%s): got '%.*s', want '%s'", i, e ? "stderr" : "stdout", (int)f.len,
				     f.buf ? f.buf : "", want ? want : "(null)");
				same = false;
			}
		}
	ok(same, "output frames are the bytes cJSON prints, for every byte value, bad UTF-8 and NUL");
}

static void test_frames(void)
{
	_cleanup_(api_frames_done) struct api_frames f = {};
	_cleanup_json_ cJSON *o = NULL;
	char *second;
	size_t i, frames;

	ok(api_frame_output(&f, false, "he\"llo", 6, 1234) == 0, "stdout frame");
	is_str(f.buf, "{\"type\":\"stdout\",\"text\":\"he\\\"llo\",\"timestamp\":1234}\n\n", "stdout frame is bare JSON and a blank line");
	ok(api_frame_output(&f, true, "a\xff\x00z", 4, 5) == 0, "stderr frame with bad bytes");
	second = strstr(f.buf, "\n\n") + 2;
	o = cJSON_Parse(second);
	ok(o != NULL, "frame with invalid UTF-8 is valid JSON");
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(o, "type")), "stderr", "stderr type");
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(o, "text")), "a\xef\xbf\xbd\xef\xbf\xbdz", "bad bytes and NUL become U+FFFD");
	cJSON_Delete(o);
	o = NULL;

	api_frames_done(&f);
	for (i = 0; i < 100000; i++)
		if (api_frame_output(&f, false, "y", 1, 7) < 0)
			break;
	for (frames = 0, second = f.buf; (second = memmem(second, f.len - (size_t)(second - f.buf), "}\n\n{", 4)); second++)
		frames++;
	ok(i == 100000 && frames == 99999 && f.len == 100000 * strlen("{\"type\":\"stdout\",\"text\":\"y\",\"timestamp\":7}\n\n") &&
	   f.cap >= f.len && f.cap < 4 * f.len, "100000 frames in one buffer, grown geometrically");

	api_frames_done(&f);
	ok(api_frame_final(&f, 3, false, false, NULL, 9, 10) == 0, "error frame");
	o = cJSON_Parse(f.buf);
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(o, "type")), "error", "error type");
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(o, "text")), "command exited with code 3", "error text as execd");
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "ename")), "ExitError", "ename");
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "evalue")), "3", "evalue is the status");
	is_int(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "exit_code")), 3, "exit_code");
	cJSON_Delete(o);
	o = NULL;

	api_frames_done(&f);
	ok(api_frame_final(&f, 0, false, false, NULL, 9, 10) == 0, "complete frame");
	o = cJSON_Parse(f.buf);
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(o, "type")), "execution_complete", "complete type");
	cJSON_Delete(o);
	o = NULL;

	api_frames_done(&f);
	ok(api_frame_final(&f, 124, true, false, NULL, 9, 10) == 0, "timeout frame");
	o = cJSON_Parse(f.buf);
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "error"), "ename")), "TimeoutError", "timeout ename");
}

struct collect {
	char out[4096];
	int n;
};

static int collect_line(void *userdata, const char *text, size_t len)
{
	struct collect *c = userdata;
	size_t l = strlen(c->out);

	snprintf(c->out + l, sizeof(c->out) - l, "[%.*s]", (int)len, text);
	c->n++;
	return 0;
}

static void test_lines(void)
{
	struct collect c = {};
	_cleanup_free_ char *line = NULL;
	size_t line_len = 0;

	ok(api_lines_feed(&line, &line_len, "ab\ncd", 5, false, 64, collect_line, &c) == 0, "feed");
	is_str(c.out, "[ab]", "complete line emitted, partial kept");
	ok(api_lines_feed(&line, &line_len, "e\r\n\nf", 5, false, 64, collect_line, &c) == 0, "feed more");
	is_str(c.out, "[ab][cde][]", "partial joined, CR trimmed, empty line kept for the caller");
	ok(api_lines_feed(&line, &line_len, "", 0, true, 64, collect_line, &c) == 0, "flush");
	is_str(c.out, "[ab][cde][][f]", "flush emits the tail");
	memset(&c, 0, sizeof(c));
	ok(api_lines_feed(&line, &line_len, "0123456789", 10, true, 4, collect_line, &c) == 0, "long line");
	is_str(c.out, "[0123][4567][89]", "long lines are cut at the maximum");
	memset(&c, 0, sizeof(c));
	ok(api_lines_feed(&line, &line_len, "012\n0123\r\n01\r\n", 15, false, 4, collect_line, &c) == 0, "lines near the maximum");
	is_str(c.out, "[012][0123][][01]", "whole lines are emitted as they are, a line of the maximum is cut");
}

static void test_config(void)
{
	struct api_config cfg;
	char path[] = "/tmp/test-api-config-XXXXXX";
	unsigned line = 0;
	FILE *f;
	int fd;

	ok(api_config_init(&cfg) == 0, "config init");
	is_int(cfg.port, 44772, "default port is execd's");
	ok(cfg.auth && !cfg.allow_network, "auth on, network off by default");
	is_str(cfg.listen_address, "127.0.0.1", "loopback by default");
	ok(api_config_set(&cfg, "max-body", "2M") == 0 && cfg.max_body == 2u << 20, "size suffix");
	ok(api_config_set(&cfg, "port", "70000") == -EINVAL, "port range");
	ok(api_config_set(&cfg, "port", "-1") == -EINVAL, "negative port");
	ok(api_config_set(&cfg, "max-sessions", "12x") == -EINVAL, "trailing junk");
	ok(api_config_set(&cfg, "auth", "maybe") == -EINVAL, "bad bool");
	ok(api_config_set(&cfg, "nope", "1") == -ENOENT, "unknown key");
	ok(api_config_set(&cfg, "allow-bind", "/a") == 0 && api_config_set(&cfg, "allow-bind", "/b") == 0 &&
	   cfg.allowed_binds && !strcmp(cfg.allowed_binds[1], "/b"), "repeatable setting");
	ok(api_config_set(&cfg, "uid-pool-base", "0") == -EINVAL, "uid 0 is not a pool");
	ok(api_config_set(&cfg, "hide", "/srv//data/") == 0 && cfg.hidden && !strcmp(cfg.hidden[0], "/srv/data"),
	   "hide: normalized");
	ok(api_config_set(&cfg, "hide", "data") == -EINVAL && api_config_set(&cfg, "hide", "/a/../etc") == -EINVAL &&
	   !cfg.hidden[1], "hide: absolute, no '..'");
	ok(api_config_set(&cfg, "hide", "/var") == -EINVAL && api_config_set(&cfg, "hide", "/tmp") == -EINVAL &&
	   api_config_set(&cfg, "hide", "/proc/1") == -EINVAL && api_config_set(&cfg, "hide", "/var/lib") == 0,
	   "hide: never the sandbox's own mounts or above");

	fd = mkstemp(path);
	ok(fd >= 0, "temp config");
	f = fdopen(fd, "w");
	fputs("# comment\n\nport = 1234\nallow-network = true\nmax-sessions=3\n", f);
	fclose(f);
	ok(api_config_load_file(&cfg, path, &line) == 0, "config file loads");
	ok(cfg.port == 1234 && cfg.allow_network && cfg.max_sessions == 3, "config file values");
	f = fopen(path, "w");
	fputs("port = 1\nbogus line\n", f);
	fclose(f);
	ok(api_config_load_file(&cfg, path, &line) == -EINVAL && line == 2, "bad line is reported with its number");
	unlink(path);
	{
		char *argv[] = { "draftboxd", "--port=99", "--auth=false", "--state-dir", "/tmp/x", NULL };

		ok(api_config_parse_argv(&cfg, 5, argv) == 0, "argv parses");
		ok(cfg.port == 99 && !cfg.auth && !strcmp(cfg.state_dir, "/tmp/x"), "argv values");
	}
	api_config_done(&cfg);
}

static void test_misc(void)
{
	char t[40];
	_cleanup_free_ char *m = NULL;
	struct api_metrics metrics = {};

	ok(api_session_id_valid("0ca20ae3-8c7b-46a7-b5fd-06f6d620e333"), "uuid is a session id");
	ok(!api_session_id_valid("0CA20AE3-8C7B-46A7-B5FD-06F6D620E333"), "upper case is not");
	ok(!api_session_id_valid("../../../../etc/passwd/x/yyyyyyyyyyyyy"), "traversal is not");
	ok(!api_session_id_valid("0ca20ae3-8c7b-46a7-b5fd-06f6d620e33"), "short is not");
	ok(!api_session_id_valid(NULL), "NULL is not");
	is_str(api_format_time(1795987510814ULL, t, sizeof(t)), "2026-11-29T21:25:10.814Z", "RFC 3339 with ms, UTC");
	api_metrics_observe_run(&metrics, 70);
	metrics.runs_ok = 1;
	ok(api_metrics_render(&metrics, 2, 100, 3, &m) == 0, "metrics render");
	ok(strstr(m, "draftbox_sessions 2\n") && strstr(m, "draftbox_run_duration_seconds_bucket{le=\"0.05\"} 0\n") &&
	   strstr(m, "draftbox_run_duration_seconds_bucket{le=\"0.1\"} 1\n") &&
	   strstr(m, "draftbox_run_duration_seconds_bucket{le=\"+Inf\"} 1\n") && strstr(m, "draftbox_upper_bytes 100\n"),
	   "metrics text");
}

int main(void)
{
	test_routes();
	test_frames();
	test_frames_as_cjson();
	test_lines();
	test_config();
	test_misc();
	return tap_done();
}
