// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The `draftbox` client: global options and server connection, error
 * printing, and the session, run, diff, commit, discard and recover
 * commands. The files commands are in client-files.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client-internal.h"
#include "fdpath.h"
#include "json-util.h"
#include "log.h"

const char *client_color(const struct client *c, bool err, const char *code)
{
	return (err ? c->color_err : c->color) ? code : "";
}

void client_error(const struct client *c, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%sdraftbox:%s ", client_color(c, true, C_RED), client_color(c, true, C_RESET));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

char *client_session_target(const char *id, const char *suffix)
{
	_cleanup_free_ char *esc = http_escape(id, false);
	char *s;

	if (!esc || asprintf(&s, "/v1/isolated/session/%s%s", esc, suffix ? suffix : "") < 0)
		return NULL;
	return s;
}

/* Builds "Authorization: Bearer T" (and the content type when given) into a header vector of 3 slots. */
static int make_headers(struct client *c, const char *content_type, char *hdr[4], char **buf_auth, char **buf_ct)
{
	size_t n = 0;

	if (c->token) {
		if (asprintf(buf_auth, "Authorization: Bearer %s", c->token) < 0)
			return -ENOMEM;
		hdr[n++] = *buf_auth;
	}
	if (content_type) {
		if (asprintf(buf_ct, "Content-Type: %s", content_type) < 0)
			return -ENOMEM;
		hdr[n++] = *buf_ct;
	}
	hdr[n++] = (char *)"Accept: application/json, text/event-stream, application/octet-stream";
	hdr[n] = NULL;
	return 0;
}

int client_request(struct client *c, const char *method, const char *target, const char *content_type,
		   const struct http_body_part *parts, size_t n_parts, struct http_response *ret)
{
	_cleanup_free_ char *auth = NULL, *ct = NULL;
	char *hdr[4];
	int r;

	r = make_headers(c, content_type, hdr, &auth, &ct);
	if (r < 0)
		return r;
	r = http_request(&c->url, method, target, hdr, parts, n_parts, ret);
	if (r < 0) {
		if (c->url.is_unix)
			client_error(c, "cannot reach draftboxd at 'unix:%s': %s", c->url.socket_path, strerror(-r));
		else
			client_error(c, "cannot reach draftboxd at 'http://%s:%u%s': %s", c->url.host, c->url.port, c->url.base,
				     strerror(-r));
	}
	return r;
}

/* The paths an error names (a commit's or a recovery's conflicts), a line each, the first CLIENT_MAX_ERROR_PATHS. */
static void print_error_paths(const struct client *c, const cJSON *paths)
{
	const cJSON *it;
	int n = 0, total = cJSON_IsArray(paths) ? cJSON_GetArraySize(paths) : 0;

	cJSON_ArrayForEach(it, paths) {
		if (n == CLIENT_MAX_ERROR_PATHS)
			break;
		if (cJSON_IsString(it)) {
			client_error(c, "  %s", it->valuestring);
			n++;
		}
	}
	if (total > n)
		client_error(c, "  ... and %d more (--json lists them all)", total - n);
}

int client_report_http_error(struct client *c, struct http_response *resp)
{
	_cleanup_free_ char *body = NULL;
	_cleanup_json_ cJSON *j = NULL;
	const char *code = NULL, *message = NULL;

	(void)http_read_body_all(resp, 1u << 20, &body, NULL);
	if (body)
		j = cJSON_Parse(body);
	if (j) {
		(void)json_get_string(j, "code", &code);
		(void)json_get_string(j, "message", &message);
		if (!message)
			(void)json_get_string(j, "error", &message);
	}
	if (c->json && body && *body)
		fprintf(stderr, "%s\n", body);
	if (message) {
		client_error(c, "%s (%s, HTTP %u)", message, code ? code : "error", resp->status);
		if (!c->json) {
			const char *hint = NULL;

			print_error_paths(c, cJSON_GetObjectItemCaseSensitive(j, "paths"));
			if (json_get_string(j, "hint", &hint) == 0)
				client_error(c, "%s", hint);
		}
	} else if (resp->status == 401)
		client_error(c, "the server wants an access token: pass --token, set DRAFTBOX_TOKEN or make STATE/token readable (HTTP 401)");
	else
		client_error(c, "request failed with HTTP %u", resp->status);
	if (resp->status == 401 && !c->token && c->token_note)
		client_error(c, "no token was sent: %s", c->token_note);
	return -EBADMSG;
}

int client_call(struct client *c, const char *method, const char *target, const cJSON *body, cJSON **ret_json)
{
	struct http_response resp = { .fd = -1 };
	_cleanup_free_ char *text = NULL, *answer = NULL;
	struct http_body_part part;
	size_t len = 0;
	int r;

	if (body) {
		text = cJSON_PrintUnformatted(body);
		if (!text)
			return -ENOMEM;
		part = (struct http_body_part){ .data = text, .fd = -1, .size = strlen(text) };
	}
	r = client_request(c, method, target, body ? "application/json" : NULL, body ? &part : NULL, body ? 1 : 0, &resp);
	if (r < 0)
		return r;
	if (resp.status < 200 || resp.status > 299) {
		r = client_report_http_error(c, &resp);
		http_response_done(&resp);
		return r;
	}
	r = http_read_body_all(&resp, CLIENT_MAX_JSON, &answer, &len);
	http_response_done(&resp);
	if (r < 0) {
		client_error(c, "cannot read the answer to %s %s: %s", method, target, strerror(-r));
		return r;
	}
	if (ret_json) {
		*ret_json = NULL;
		if (len > 0) {
			*ret_json = cJSON_ParseWithLength(answer, len);
			if (!*ret_json) {
				client_error(c, "the answer to %s %s is not JSON", method, target);
				return -EBADMSG;
			}
		}
	}
	return 0;
}

void client_print_json(const cJSON *j)
{
	_cleanup_free_ char *s = NULL;

	if (!j) {
		printf("null\n");
		return;
	}
	s = cJSON_Print(j);
	if (s)
		printf("%s\n", s);
}

/* Exit status for a failed request: usage problems are caught before. */
int client_exit(int r)
{
	if (r >= 0)
		return 0;
	if (r == -EBADMSG)
		return CLIENT_EXIT_FAILURE;
	return CLIENT_EXIT_UNREACHABLE;
}

/* ---- option parsing for subcommands ---- */

int client_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts, int *ret_index)
{
	return getopt_long(argc, argv, shortopts, longopts, ret_index);
}

void client_reset_getopt(void)
{
	optind = 0; /* glibc: 0 re-initializes, including the "+" handling */
	opterr = 1;
}

/* ---- session ---- */

static int cmd_session_create(struct client *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "workspace", required_argument, NULL, 'w' },
		{ "mode", required_argument, NULL, 'm' },
		{ "profile", required_argument, NULL, 'p' },
		{ "net", no_argument, NULL, 'n' },
		{ "idle-timeout", required_argument, NULL, 'i' },
		{ "uid", required_argument, NULL, 'u' },
		{ "env", required_argument, NULL, 'e' },
		{ "writable", required_argument, NULL, 'W' },
		{}
	};
	_cleanup_json_ cJSON *req = cJSON_CreateObject(), *resp = NULL;
	_cleanup_free_ char *cwd = NULL;
	const char *workspace = NULL, *mode = NULL, *profile = NULL;
	cJSON *ws, *env_keys = NULL, *writable = NULL;
	const char *id;
	int o, r;

	if (!req)
		return -ENOMEM;
	client_reset_getopt();
	while ((o = client_getopt(argc, argv, "w:m:p:ni:u:e:W:", opts, NULL)) >= 0) {
		switch (o) {
		case 'w':
			workspace = optarg;
			break;
		case 'm':
			mode = optarg;
			break;
		case 'p':
			profile = optarg;
			break;
		case 'n':
			cJSON_AddBoolToObject(req, "share_net", true);
			break;
		case 'i':
		case 'u': {
			char *end;
			unsigned long v;

			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg || v > UINT32_MAX) {
				client_error(c, "invalid number '%s'", optarg);
				return -EINVAL;
			}
			cJSON_AddNumberToObject(req, o == 'i' ? "idle_timeout_seconds" : "uid", (double)v);
			break;
		}
		case 'e':
			if (!env_keys) {
				cJSON *ep = cJSON_AddObjectToObject(req, "env_passthrough");

				cJSON_AddStringToObject(ep, "mode", "allow");
				env_keys = cJSON_AddArrayToObject(ep, "keys");
			}
			cJSON_AddItemToArray(env_keys, cJSON_CreateString(optarg));
			break;
		case 'W':
			if (!writable)
				writable = cJSON_AddArrayToObject(req, "extra_writable");
			cJSON_AddItemToArray(writable, cJSON_CreateString(optarg));
			break;
		default:
			return -EINVAL;
		}
	}
	if (optind < argc) {
		client_error(c, "unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	if (!workspace) {
		cwd = getcwd(NULL, 0);
		if (!cwd) {
			client_error(c, "cannot get the current directory: %m");
			return -errno;
		}
		workspace = cwd;
	} else if (workspace[0] != '/') {
		cwd = realpath(workspace, NULL);
		if (!cwd) {
			client_error(c, "cannot resolve workspace '%s': %m", workspace);
			return -EINVAL;
		}
		workspace = cwd;
	}
	ws = cJSON_AddObjectToObject(req, "workspace");
	cJSON_AddStringToObject(ws, "path", workspace);
	cJSON_AddStringToObject(ws, "mode", mode ? mode : "overlay");
	if (profile)
		cJSON_AddStringToObject(req, "profile", profile);

	r = client_call(c, "POST", "/v1/isolated/session", req, &resp);
	if (r < 0)
		return r;
	if (c->json) {
		client_print_json(resp);
		return 0;
	}
	if (!resp || json_get_string(resp, "session_id", &id) < 0) {
		client_error(c, "the server did not return a session id");
		return -EBADMSG;
	}
	printf("%s\n", id);
	return 0;
}

static const char *str_or(const cJSON *o, const char *key, const char *def)
{
	const char *s;

	return json_get_string(o, key, &s) == 0 ? s : def;
}

static int cmd_session_ls(struct client *c, int argc, char **argv)
{
	_cleanup_json_ cJSON *resp = NULL;
	const cJSON *sessions, *s;
	int r;

	if (argc > 1) {
		client_error(c, "unexpected argument '%s'", argv[1]);
		return -EINVAL;
	}
	r = client_call(c, "GET", "/v1/isolated/sessions", NULL, &resp);
	if (r < 0)
		return r;
	if (c->json) {
		client_print_json(resp);
		return 0;
	}
	sessions = cJSON_GetObjectItemCaseSensitive(resp, "sessions");
	if (!cJSON_IsArray(sessions) || cJSON_GetArraySize(sessions) == 0) {
		if (isatty(STDOUT_FILENO))
			printf("no sessions\n");
		return 0;
	}
	printf("%s%-36s  %-9s  %-24s  %-24s  %s%s\n", client_color(c, false, C_BOLD), "SESSION", "STATUS", "CREATED",
	       "LAST RUN", "WORKSPACE", client_color(c, false, C_RESET));
	cJSON_ArrayForEach(s, sessions) {
		const cJSON *ws = cJSON_GetObjectItemCaseSensitive(s, "workspace");
		const char *status = str_or(s, "status", "?");

		/* the workspace is shown when the server includes it in the summary */
		printf("%-36s  %s%-9s%s  %-24s  %-24s  %s\n", str_or(s, "session_id", "?"),
		       client_color(c, false, strcmp(status, "active") == 0 ? C_GREEN : C_YELLOW), status,
		       client_color(c, false, C_RESET), str_or(s, "created_at", "-"), str_or(s, "last_run_at", "-"),
		       ws ? str_or(ws, "path", "-") : "-");
	}
	return 0;
}

static int cmd_session_show(struct client *c, int argc, char **argv)
{
	_cleanup_json_ cJSON *resp = NULL;
	_cleanup_free_ char *target = NULL;
	const cJSON *it;
	int r;

	if (argc != 2) {
		client_error(c, "usage: draftbox session show ID");
		return -EINVAL;
	}
	target = client_session_target(argv[1], NULL);
	if (!target)
		return -ENOMEM;
	r = client_call(c, "GET", target, NULL, &resp);
	if (r < 0)
		return r;
	if (c->json || !cJSON_IsObject(resp)) {
		client_print_json(resp);
		return 0;
	}
	cJSON_ArrayForEach(it, resp) {
		_cleanup_free_ char *v = NULL;

		if (cJSON_IsString(it))
			v = strdup(it->valuestring);
		else
			v = cJSON_PrintUnformatted(it);
		printf("%s%s:%s %s\n", client_color(c, false, C_BOLD), it->string, client_color(c, false, C_RESET), v ? v : "");
	}
	return 0;
}

static int cmd_session_rm(struct client *c, int argc, char **argv)
{
	int ret = 0;

	if (argc < 2) {
		client_error(c, "usage: draftbox session rm ID...");
		return -EINVAL;
	}
	for (int i = 1; i < argc; i++) {
		_cleanup_free_ char *target = client_session_target(argv[i], NULL);
		int r;

		if (!target)
			return -ENOMEM;
		r = client_call(c, "DELETE", target, NULL, NULL);
		if (r < 0)
			ret = r;
		else if (!c->json && isatty(STDOUT_FILENO))
			printf("removed %s\n", argv[i]);
	}
	return ret;
}

static int cmd_session(struct client *c, int argc, char **argv)
{
	if (argc < 2) {
		client_error(c, "usage: draftbox session create|ls|show|rm ...");
		return -EINVAL;
	}
	if (strcmp(argv[1], "create") == 0 || strcmp(argv[1], "new") == 0)
		return cmd_session_create(c, argc - 1, argv + 1);
	if (strcmp(argv[1], "ls") == 0 || strcmp(argv[1], "list") == 0)
		return cmd_session_ls(c, argc - 1, argv + 1);
	if (strcmp(argv[1], "show") == 0 || strcmp(argv[1], "get") == 0)
		return cmd_session_show(c, argc - 1, argv + 1);
	if (strcmp(argv[1], "rm") == 0 || strcmp(argv[1], "delete") == 0)
		return cmd_session_rm(c, argc - 1, argv + 1);
	client_error(c, "unknown session command '%s'", argv[1]);
	return -EINVAL;
}

/* ---- run ---- */

/* True if @s needs no quoting in a POSIX shell word. */
static bool shell_safe(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%_-+=:,./", *s))
			return false;
	return true;
}

char *client_join_command(char *const *argv, size_t n)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f;

	if (n == 1)
		return strdup(argv[0]);
	f = open_memstream(&out, &len);
	if (!f)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputc(' ', f);
		if (shell_safe(argv[i])) {
			fputs(argv[i], f);
			continue;
		}
		fputc('\'', f);
		for (const char *p = argv[i]; *p; p++)
			if (*p == '\'')
				fputs("'\\''", f);
			else
				fputc(*p, f);
		fputc('\'', f);
	}
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

int client_run_out_flush(struct client_run_out *o)
{
	int r = 0;

	if (o->len > 0 && o->fd >= 0)
		r = write_full(o->fd, o->buf, o->len);
	o->len = 0;
	return r;
}

int client_run_out_put(struct client_run_out *o, int fd, const char *data, size_t size)
{
	int r;

	if (fd < 0 || size == 0)
		return 0;
	if (fd != o->fd || o->len + size > sizeof(o->buf)) {
		r = client_run_out_flush(o);
		if (r < 0)
			return r;
		o->fd = fd;
	}
	if (size > sizeof(o->buf))
		return write_full(fd, data, size);
	memcpy(o->buf + o->len, data, size);
	o->len += size;
	return 0;
}

int client_run_event(const char *data, size_t len, struct client_run_out *o, int *exit_status, bool *finished)
{
	_cleanup_json_ cJSON *ev = cJSON_ParseWithLength(data, len);
	const char *type = NULL, *text = NULL;
	int r;

	if (!ev)
		return 0; /* like the SDK: a line that is not JSON is skipped */
	if (json_get_string(ev, "type", &type) < 0)
		return 0;
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		int fd = strcmp(type, "stdout") == 0 ? o->out_fd : o->err_fd;
		size_t n;

		if (fd < 0 || json_get_string(ev, "text", &text) < 0)
			return 0;
		/* execd (and draftboxd) send one line per event without its "\n"; others send raw chunks. */
		n = strlen(text);
		r = client_run_out_put(o, fd, text, n);
		if (r == 0 && (n == 0 || text[n - 1] != '\n'))
			r = client_run_out_put(o, fd, "\n", 1);
		return r;
	}
	if (strcmp(type, "error") == 0) {
		const cJSON *err = cJSON_GetObjectItemCaseSensitive(ev, "error");
		const char *evalue = NULL, *ename = NULL;
		char *end;
		long v;

		if (err) {
			(void)json_get_string(err, "evalue", &evalue);
			(void)json_get_string(err, "ename", &ename);
		}
		if (!evalue)
			(void)json_get_string(ev, "text", &evalue);
		bool parsed;

		errno = 0;
		v = evalue ? strtol(evalue, &end, 10) : 0;
		parsed = evalue && !errno && end != evalue && !*end && v >= 0 && v <= 255;
		*exit_status = parsed ? (int)v : 1;
		/* A plain non-zero exit needs no words; a timeout or a failure to start does. */
		if (!parsed || (ename && strcmp(ename, "ExitError") != 0 && strcmp(ename, "CommandExitError") != 0)) {
			const char *why = NULL;
			char msg[1024];

			(void)json_get_string(ev, "text", &why);
			if (why)
				snprintf(msg, sizeof(msg), "draftbox: %s\n", why);
			else
				snprintf(msg, sizeof(msg), "draftbox: run failed: %s%s%s\n", ename ? ename : "error",
					 evalue ? ": " : "", evalue ? evalue : "");
			(void)client_run_out_put(o, o->err_fd, msg, strlen(msg));
		}
		*finished = true;
		return 0;
	}
	if (strcmp(type, "execution_complete") == 0) {
		if (!*finished)
			*exit_status = 0;
		*finished = true;
	}
	return 0;
}

struct run_state {
	int exit_status;
	bool finished;
	bool json;
	struct client_run_out out;
};

static int run_sse_cb(const char *event, const char *data, size_t len, void *userdata)
{
	struct run_state *st = userdata;

	if (st->json) {
		/* --json: the events as JSON lines, for scripts (out_fd and err_fd are -1) */
		int r = client_run_out_put(&st->out, STDOUT_FILENO, data, len);

		if (r == 0)
			r = client_run_out_put(&st->out, STDOUT_FILENO, "\n", 1);
		if (r < 0)
			return r;
	}
	return client_run_event(data, len, &st->out, &st->exit_status, &st->finished);
}

/* Parses run options until the first non-option (getopt "+" mode). Returns 0 or -EINVAL/-ENOMEM. */
static int parse_run_opts(struct client *c, int argc, char **argv, cJSON *req, cJSON **envs)
{
	static const struct option opts[] = {
		{ "env", required_argument, NULL, 'e' },
		{ "timeout", required_argument, NULL, 't' },
		{}
	};
	int o;

	while ((o = client_getopt(argc, argv, "+e:t:", opts, NULL)) >= 0) {
		switch (o) {
		case 'e': {
			const char *eq = strchr(optarg, '=');
			_cleanup_free_ char *k = NULL;

			if (!eq || eq == optarg) {
				client_error(c, "--env wants NAME=VALUE, got '%s'", optarg);
				return -EINVAL;
			}
			if (!*envs)
				*envs = cJSON_AddObjectToObject(req, "envs");
			k = strndup(optarg, (size_t)(eq - optarg));
			if (!k || !*envs)
				return -ENOMEM;
			cJSON_DeleteItemFromObjectCaseSensitive(*envs, k);
			if (!cJSON_AddStringToObject(*envs, k, eq + 1))
				return -ENOMEM;
			break;
		}
		case 't': {
			char *end;
			unsigned long v;

			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg || v > INT32_MAX) {
				client_error(c, "invalid timeout '%s'", optarg);
				return -EINVAL;
			}
			cJSON_DeleteItemFromObjectCaseSensitive(req, "timeout_seconds");
			if (!cJSON_AddNumberToObject(req, "timeout_seconds", (double)v))
				return -ENOMEM;
			break;
		}
		default:
			return -EINVAL;
		}
	}
	return 0;
}

static int cmd_run(struct client *c, int argc, char **argv, int *ret_status)
{
	_cleanup_json_ cJSON *req = cJSON_CreateObject();
	_cleanup_free_ char *target = NULL, *code = NULL, *body = NULL;
	struct run_state st = {
		.exit_status = CLIENT_EXIT_RUN_LOST,
		.json = c->json,
		.out = { .out_fd = c->json ? -1 : STDOUT_FILENO, .err_fd = c->json ? -1 : STDERR_FILENO, .fd = -1 },
	};
	struct sse_parser p = { .cb = run_sse_cb, .userdata = &st };
	struct http_response resp = { .fd = -1 };
	struct http_body_part part;
	cJSON *envs = NULL;
	const char *id = NULL;
	char buf[16384];
	int r;

	if (!req)
		return -ENOMEM;
	/*
	 * Options may come before or after the ID, and everything after the ID
	 * and the options is the command: "run [OPTS] ID [OPTS] [--] CMD" is
	 * parsed in two rounds that each stop at the first non-option.
	 */
	client_reset_getopt();
	r = parse_run_opts(c, argc, argv, req, &envs);
	if (r < 0)
		return r;
	if (optind < argc) {
		id = argv[optind];
		argc -= optind;
		argv += optind;
		client_reset_getopt();
		r = parse_run_opts(c, argc, argv, req, &envs);
		if (r < 0)
			return r;
	}
	if (!id || optind > argc) {
		client_error(c, "usage: draftbox run ID [--env K=V] [--timeout S] -- COMMAND [ARG...]");
		return -EINVAL;
	}
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc) {
		client_error(c, "no command given");
		return -EINVAL;
	}
	if (argc - optind == 1 && strcmp(argv[optind], "-") == 0) {
		/* `draftbox run ID - < script.sh`: the script comes from stdin */
		r = read_full_fd(STDIN_FILENO, CLIENT_MAX_SCRIPT, &code, NULL);
		if (r < 0) {
			client_error(c, "cannot read the script from standard input: %s", strerror(-r));
			return r == -EFBIG ? -EINVAL : -EBADMSG;
		}
	} else
		code = client_join_command(argv + optind, (size_t)(argc - optind));
	target = client_session_target(id, "/run");
	if (!code || !target || !cJSON_AddStringToObject(req, "code", code))
		return -ENOMEM;
	body = cJSON_PrintUnformatted(req);
	if (!body)
		return -ENOMEM;
	part = (struct http_body_part){ .data = body, .fd = -1, .size = strlen(body) };
	/* A command may stay silent for as long as it likes: no inactivity timeout for the stream. */
	c->url.timeout_s = 0;
	r = client_request(c, "POST", target, "application/json", &part, 1, &resp);
	if (r < 0)
		return r;
	if (resp.status < 200 || resp.status > 299) {
		r = client_report_http_error(c, &resp);
		http_response_done(&resp);
		return r;
	}
	/* Output is streamed as it comes: the pipe to us must not buffer. */
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		ssize_t n = http_read_body(&resp, buf, sizeof(buf));

		if (n < 0) {
			r = (int)n;
			break;
		}
		if (n == 0) {
			r = sse_finish(&p);
			break;
		}
		r = sse_feed(&p, buf, (size_t)n);
		if (r == 0)
			r = client_run_out_flush(&st.out); /* live: what one read brought is written at once */
		if (r != 0)
			break;
	}
	if (r != -EPIPE) {
		int f = client_run_out_flush(&st.out);

		if (f < 0)
			r = f;
	}
	sse_parser_done(&p);
	/* Closing the connection makes the server cancel the run. */
	http_response_done(&resp);
	if (r == -EPIPE) {
		/* Our reader went away (`draftbox run ID -- yes | head`): stop like a command killed by SIGPIPE. */
		*ret_status = 128 + SIGPIPE;
		return 0;
	}
	if (r < 0 && !st.finished) {
		client_error(c, "the run's event stream broke: %s", strerror(-r));
		*ret_status = CLIENT_EXIT_RUN_LOST;
		return 0;
	}
	if (!st.finished) {
		client_error(c, "the run's event stream ended without an exit status");
		*ret_status = CLIENT_EXIT_RUN_LOST;
		return 0;
	}
	*ret_status = st.exit_status;
	return 0;
}

/* ---- diff, commit, discard ---- */

/* Appends "&path=P" for each of @paths to a query string being built in @f. */
static int add_path_query(FILE *f, char *const *paths, size_t n, bool first)
{
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *e = http_escape(paths[i], true);

		if (!e)
			return -ENOMEM;
		fprintf(f, "%spath=%s", first && i == 0 ? "?" : "&", e);
	}
	return 0;
}

static const char *status_letter(const char *status, const char **color)
{
	if (strcmp(status, "added") == 0) {
		*color = C_GREEN;
		return "A";
	}
	if (strcmp(status, "deleted") == 0) {
		*color = C_RED;
		return "D";
	}
	if (strcmp(status, "type_changed") == 0) {
		*color = C_YELLOW;
		return "T";
	}
	*color = C_YELLOW;
	return "M";
}

static int print_diff_summary(struct client *c, const cJSON *resp)
{
	const cJSON *changes = cJSON_GetObjectItemCaseSensitive(resp, "changes"), *ch, *sum;
	int64_t total = 0;

	if (!cJSON_IsArray(changes)) {
		client_print_json(resp);
		return 0;
	}
	cJSON_ArrayForEach(ch, changes) {
		const char *color, *letter = status_letter(str_or(ch, "status", "modified"), &color);
		const char *type = str_or(ch, "type", "file");
		bool meta_only = false, content = true;

		(void)json_get_bool(ch, "metadata", &meta_only);
		(void)json_get_bool(ch, "content", &content);
		printf("%s%s%s %s%s%s\n", client_color(c, false, color), letter, client_color(c, false, C_RESET),
		       str_or(ch, "path", "?"), strcmp(type, "dir") == 0 || strcmp(type, "directory") == 0 ? "/" : "",
		       meta_only && !content && strcmp(letter, "M") == 0 ? " (metadata)" : "");
	}
	sum = cJSON_GetObjectItemCaseSensitive(resp, "summary");
	if (sum && json_get_int64(sum, "total", 0, INT64_MAX, &total) == 0 && isatty(STDOUT_FILENO)) {
		int64_t a = 0, m = 0, d = 0;

		(void)json_get_int64(sum, "added", 0, INT64_MAX, &a);
		(void)json_get_int64(sum, "modified", 0, INT64_MAX, &m);
		(void)json_get_int64(sum, "deleted", 0, INT64_MAX, &d);
		printf("%s%" PRId64 " changes: %" PRId64 " added, %" PRId64 " modified, %" PRId64 " deleted%s\n",
		       client_color(c, false, C_DIM), total, a, m, d, client_color(c, false, C_RESET));
	} else if (cJSON_GetArraySize(changes) == 0 && isatty(STDOUT_FILENO))
		printf("no changes\n");
	return 0;
}

static int cmd_diff(struct client *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "patch", no_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "tar", no_argument, NULL, 't' },
		{ "output", required_argument, NULL, 'o' },
		{}
	};
	_cleanup_free_ char *target = NULL, *query = NULL;
	_cleanup_close_ int out_fd = -1;
	struct http_response resp = { .fd = -1 };
	const char *format = "json", *output = NULL, *id;
	long long skipped = -1;
	size_t qlen = 0;
	char buf[65536];
	FILE *f;
	int o, r;

	client_reset_getopt();
	while ((o = client_getopt(argc, argv, "pjto:", opts, NULL)) >= 0) {
		switch (o) {
		case 'p':
			format = "patch";
			break;
		case 'j': /* the JSON change list itself, not the summary */
			format = "json";
			c->json = true;
			break;
		case 't':
			format = "tar";
			break;
		case 'o':
			output = optarg;
			break;
		default:
			return -EINVAL;
		}
	}
	if (optind >= argc) {
		client_error(c, "usage: draftbox diff ID [PATH...] [--patch|--json|--tar] [-o FILE]");
		return -EINVAL;
	}
	id = argv[optind++];
	if (strcmp(format, "tar") == 0 && !output && isatty(STDOUT_FILENO)) {
		client_error(c, "not writing a tar to a terminal: use -o FILE or a redirection");
		return -EINVAL;
	}
	f = open_memstream(&query, &qlen);
	if (!f)
		return -ENOMEM;
	fprintf(f, "/diff?format=%s", format);
	r = add_path_query(f, argv + optind, (size_t)(argc - optind), false);
	if (fclose(f) != 0 || r < 0)
		return -ENOMEM;
	target = client_session_target(id, query);
	if (!target)
		return -ENOMEM;

	if (strcmp(format, "json") == 0 && !output) {
		_cleanup_json_ cJSON *j = NULL;

		r = client_call(c, "GET", target, NULL, &j);
		if (r < 0)
			return r;
		if (c->json)
			client_print_json(j);
		else
			print_diff_summary(c, j);
		return 0;
	}

	r = client_request(c, "GET", target, NULL, NULL, 0, &resp);
	if (r < 0)
		return r;
	if (resp.status < 200 || resp.status > 299) {
		r = client_report_http_error(c, &resp);
		http_response_done(&resp);
		return r;
	}
	if (output) {
		out_fd = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
		if (out_fd < 0) {
			r = -errno;
			http_response_done(&resp);
			client_error(c, "cannot create '%s': %s", output, strerror(-r));
			return -EBADMSG;
		}
	}
	for (;;) {
		ssize_t n = http_read_body(&resp, buf, sizeof(buf));

		if (n <= 0) {
			r = (int)n;
			break;
		}
		r = write_full(output ? out_fd : STDOUT_FILENO, buf, (size_t)n);
		if (r < 0)
			break;
	}
	skipped = resp.patch_skipped;
	http_response_done(&resp);
	if (r < 0) {
		client_error(c, "cannot copy the diff: %s", strerror(-r));
		return r;
	}
	if (skipped > 0)
		fprintf(stderr, "draftbox: %lld change%s git cannot hold (.git paths, devices, FIFOs, sockets) "
			"left out of the patch; --json lists every change\n", skipped, skipped == 1 ? "" : "s");
	return 0;
}

/* POSTs @req to the route @suffix of session @id. With --json the answer is printed here and *ret_resp is NULL. */
static int post_session(struct client *c, const char *id, const char *suffix, const cJSON *req, cJSON **ret_resp)
{
	_cleanup_free_ char *target = client_session_target(id, suffix);
	_cleanup_json_ cJSON *resp = NULL;
	int r;

	*ret_resp = NULL;
	if (!target)
		return -ENOMEM;
	r = client_call(c, "POST", target, req, &resp);
	if (r < 0)
		return r;
	if (c->json)
		client_print_json(resp);
	else
		*ret_resp = TAKE_PTR(resp);
	return 0;
}

static int cmd_commit_or_discard(struct client *c, int argc, char **argv, bool commit)
{
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' },
		{}
	};
	_cleanup_json_ cJSON *req = cJSON_CreateObject(), *resp = NULL;
	const cJSON *list, *it;
	const char *id;
	int o, r;

	if (!req)
		return -ENOMEM;
	client_reset_getopt();
	while ((o = client_getopt(argc, argv, commit ? "f" : "", opts, NULL)) >= 0) {
		switch (o) {
		case 'f':
			if (!commit)
				return -EINVAL;
			cJSON_AddBoolToObject(req, "force", true);
			break;
		default:
			return -EINVAL;
		}
	}
	if (optind >= argc) {
		client_error(c, commit ? "usage: draftbox commit ID [PATH...] [--force]"
				       : "usage: draftbox discard ID [PATH...]");
		return -EINVAL;
	}
	id = argv[optind++];
	if (optind < argc) {
		cJSON *paths = cJSON_AddArrayToObject(req, "paths");

		for (int i = optind; i < argc; i++)
			cJSON_AddItemToArray(paths, cJSON_CreateString(argv[i]));
	}
	r = post_session(c, id, commit ? "/commit" : "/discard", req, &resp);
	if (r < 0 || !resp)
		return r;
	list = cJSON_GetObjectItemCaseSensitive(resp, commit ? "committed" : "discarded");
	cJSON_ArrayForEach(it, list) {
		const char *p = cJSON_IsString(it) ? it->valuestring : str_or(it, "path", "?");

		if (!*p)
			p = "(all changes)"; /* "" is the root: everything */

		printf("%s%s%s %s\n", client_color(c, false, commit ? C_GREEN : C_RED), commit ? "committed" : "discarded",
		       client_color(c, false, C_RESET), p);
	}
	list = cJSON_GetObjectItemCaseSensitive(resp, "kept");
	cJSON_ArrayForEach(it, list)
		printf("%skept%s %s (%s)\n", client_color(c, false, C_YELLOW), client_color(c, false, C_RESET),
		       str_or(it, "path", "?"), str_or(it, "reason", "?"));
	return 0;
}

static int cmd_recover(struct client *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "force", no_argument, NULL, 'f' },
		{}
	};
	_cleanup_json_ cJSON *req = cJSON_CreateObject(), *resp = NULL;
	int64_t n = 0;
	int o, r;

	if (!req)
		return -ENOMEM;
	client_reset_getopt();
	while ((o = client_getopt(argc, argv, "f", opts, NULL)) >= 0) {
		if (o != 'f')
			return -EINVAL;
		cJSON_AddBoolToObject(req, "force", true);
	}
	if (optind + 1 != argc) {
		client_error(c, "usage: draftbox recover ID [--force]");
		return -EINVAL;
	}
	r = post_session(c, argv[optind], "/recover", req, &resp);
	if (r < 0 || !resp)
		return r;
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(resp, "recovered"))) {
		printf("nothing to recover: no commit was interrupted\n");
		return 0;
	}
	(void)json_get_int64(resp, "paths", 0, INT64_MAX, &n);
	printf("%srecovered%s the interrupted commit of %" PRId64 " path%s\n", client_color(c, false, C_GREEN),
	       client_color(c, false, C_RESET), n, n == 1 ? "" : "s");
	return 0;
}

/* ---- main ---- */

static void usage(FILE *f)
{
	fputs("usage: draftbox [--url URL|--socket PATH] [--token T] [--json] COMMAND ...\n"
	      "\n"
	      "  session create [--workspace DIR] [--mode overlay|rw|ro] [--profile strict|balanced]\n"
	      "                 [--net] [--idle-timeout S] [--env NAME]... [--writable DIR]...\n"
	      "  session ls | show ID | rm ID...\n"
	      "  run ID [--env K=V]... [--timeout S] -- COMMAND [ARG...]   (COMMAND '-': script from stdin)\n"
	      "  diff ID [PATH...] [--patch|--json|--tar] [-o FILE]\n"
	      "  commit ID [PATH...] [--force]\n"
	      "  discard ID [PATH...]\n"
	      "  recover ID [--force]   (finish a commit that stopped part-way)\n"
	      "  files ls ID [PATH] [--depth N]\n"
	      "  files stat ID PATH...\n"
	      "  files get ID PATH [-o FILE]\n"
	      "  files put ID LOCAL|- PATH [--mode 644] [--owner U] [--group G]\n"
	      "  files rm ID PATH... [-r]\n"
	      "  files mv ID SRC DEST\n"
	      "  files mkdir ID PATH... [--mode 755]\n"
	      "  files search ID PATH PATTERN\n"
	      "\n"
	      "Server: --url, $DRAFTBOX_URL (default " CLIENT_DEFAULT_URL "), or --socket PATH / unix:PATH.\n"
	      "Token: --token, $DRAFTBOX_TOKEN, else the token file (--token-file, $DRAFTBOX_TOKEN_FILE,\n"
	      "default STATE/token with STATE from --state-dir, $DRAFTBOX_STATE_DIR or " CLIENT_DEFAULT_STATE_DIR ").\n"
	      "Timeout: a request (not a run) fails after $DRAFTBOX_TIMEOUT seconds of silence (default 300).\n"
	      "`run` exits with the command's exit status; draftbox itself exits 1 when the server refuses\n"
	      "a request, 2 for a bad command line and 3 when the server cannot be reached.\n",
	      f);
}

/*
 * Reads the token file. A missing or unreadable file means no token (the
 * server may run without auth); *ret_note then says why, for a later 401.
 */
static char *read_token_file(const char *path, char **ret_note)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	char *buf = NULL;
	size_t len = 0;
	int r;

	r = fd < 0 ? -errno : read_full_fd(fd, 4096, &buf, &len);
	if (r < 0) {
		if (asprintf(ret_note, "cannot read the token file '%s': %s (use --token, $DRAFTBOX_TOKEN or --state-dir)",
			     path, strerror(-r)) < 0)
			*ret_note = NULL;
		return NULL;
	}
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
		buf[--len] = '\0';
	if (len == 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static bool color_wanted(int fd, bool no_color)
{
	const char *term = getenv("TERM");

	if (no_color || getenv("NO_COLOR"))
		return false;
	if (term && strcmp(term, "dumb") == 0)
		return false;
	return isatty(fd);
}

int client_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "url", required_argument, NULL, 'U' },
		{ "socket", required_argument, NULL, 'S' },
		{ "token", required_argument, NULL, 'T' },
		{ "token-file", required_argument, NULL, 'F' },
		{ "state-dir", required_argument, NULL, 'D' },
		{ "json", no_argument, NULL, 'j' },
		{ "no-color", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{}
	};
	struct client c = { 0 };
	_cleanup_free_ char *url_buf = NULL, *token_path = NULL;
	const char *url = getenv("DRAFTBOX_URL"), *socket_path = getenv("DRAFTBOX_SOCKET");
	const char *token = getenv("DRAFTBOX_TOKEN"), *token_file = getenv("DRAFTBOX_TOKEN_FILE");
	const char *state_dir = getenv("DRAFTBOX_STATE_DIR"), *timeout_env = getenv("DRAFTBOX_TIMEOUT");
	bool no_color = false;
	int o, r, status = 0;

	log_set_program("draftbox");
	/* Global options come before the command. */
	client_reset_getopt();
	while ((o = getopt_long(argc, argv, "+hjV", opts, NULL)) >= 0) {
		switch (o) {
		case 'U':
			url = optarg;
			socket_path = NULL;
			break;
		case 'S':
			socket_path = optarg;
			break;
		case 'T':
			token = optarg;
			break;
		case 'F':
			token_file = optarg;
			break;
		case 'D':
			state_dir = optarg;
			break;
		case 'j':
			c.json = true;
			break;
		case 'C':
			no_color = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("draftbox %s\n", DRAFTBOX_VERSION);
			return 0;
		default:
			usage(stderr);
			return CLIENT_EXIT_USAGE;
		}
	}
	c.color = color_wanted(STDOUT_FILENO, no_color);
	c.color_err = color_wanted(STDERR_FILENO, no_color);
	if (optind >= argc) {
		usage(stderr);
		return CLIENT_EXIT_USAGE;
	}

	if (socket_path && *socket_path) {
		if (asprintf(&url_buf, "unix:%s", socket_path) < 0)
			return CLIENT_EXIT_FAILURE;
		url = url_buf;
	}
	if (!url || !*url)
		url = CLIENT_DEFAULT_URL;
	r = http_url_parse(url, &c.url);
	if (r < 0) {
		client_error(&c, "invalid server address '%s': use http://HOST:PORT or unix:/PATH", url);
		return CLIENT_EXIT_USAGE;
	}
	c.url.timeout_s = CLIENT_DEFAULT_TIMEOUT;
	if (timeout_env && *timeout_env) {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(timeout_env, &end, 10);
		if (errno || *end || v > 86400) {
			client_error(&c, "invalid DRAFTBOX_TIMEOUT '%s': seconds, 0 for none", timeout_env);
			http_url_done(&c.url);
			return CLIENT_EXIT_USAGE;
		}
		c.url.timeout_s = (unsigned)v;
	}
	if (token && *token)
		c.token = strdup(token);
	else {
		if (!token_file) {
			if (asprintf(&token_path, "%s/token", state_dir && *state_dir ? state_dir : CLIENT_DEFAULT_STATE_DIR) < 0)
				token_path = NULL;
			token_file = token_path;
		}
		if (token_file)
			c.token = read_token_file(token_file, &c.token_note);
	}

	argc -= optind;
	argv += optind;
	if (strcmp(argv[0], "session") == 0 || strcmp(argv[0], "sessions") == 0)
		r = cmd_session(&c, argc, argv);
	else if (strcmp(argv[0], "run") == 0)
		r = cmd_run(&c, argc, argv, &status);
	else if (strcmp(argv[0], "diff") == 0)
		r = cmd_diff(&c, argc, argv);
	else if (strcmp(argv[0], "commit") == 0)
		r = cmd_commit_or_discard(&c, argc, argv, true);
	else if (strcmp(argv[0], "discard") == 0)
		r = cmd_commit_or_discard(&c, argc, argv, false);
	else if (strcmp(argv[0], "recover") == 0)
		r = cmd_recover(&c, argc, argv);
	else if (strcmp(argv[0], "files") == 0 || strcmp(argv[0], "file") == 0)
		r = client_cmd_files(&c, argc, argv);
	else if (strcmp(argv[0], "help") == 0) {
		usage(stdout);
		r = 0;
	} else {
		client_error(&c, "unknown command '%s' (see draftbox --help)", argv[0]);
		r = -EINVAL;
	}
	fflush(stdout);
	http_url_done(&c.url);
	free(c.token_note);
	if (c.token) {
		explicit_bzero(c.token, strlen(c.token));
		free(c.token);
	}
	if (r == -EINVAL)
		return CLIENT_EXIT_USAGE;
	if (r < 0)
		return client_exit(r);
	return status;
}
