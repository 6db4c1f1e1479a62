// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * `draftbox files ...`: list, stat, download, upload (multipart, streamed
 * from the local file), remove, move, mkdir and search in a session's view
 * through the OpenSandbox files API.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client-internal.h"
#include "fdpath.h"
#include "json-util.h"

#define CLIENT_MAX_STDIN_UPLOAD (256u * 1024u * 1024u)

static const char *jstr(const cJSON *o, const char *key, const char *def)
{
	const char *s;

	return json_get_string(o, key, &s) == 0 ? s : def;
}

/* "rwxr-xr-x" from the octal-digits integer the API sends (755). */
static void mode_string(const cJSON *info, char out[11])
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(info, "mode");
	const char *type = jstr(info, "type", "file");
	unsigned v = 0, digits;
	static const char rwx[] = "rwxrwxrwx";

	digits = cJSON_IsNumber(m) && m->valuedouble >= 0 ? (unsigned)m->valuedouble : 0;
	for (unsigned mul = 1; digits; digits /= 10, mul *= 8)
		v += (digits % 10) * mul;
	out[0] = strcmp(type, "directory") == 0 ? 'd' : strcmp(type, "symlink") == 0 ? 'l' : strcmp(type, "file") == 0 ? '-' : '?';
	for (int i = 0; i < 9; i++)
		out[i + 1] = (v & (1u << (8 - i))) ? rwx[i] : '-';
	if (v & 04000)
		out[3] = out[3] == 'x' ? 's' : 'S';
	if (v & 02000)
		out[6] = out[6] == 'x' ? 's' : 'S';
	if (v & 01000)
		out[9] = out[9] == 'x' ? 't' : 'T';
	out[10] = '\0';
}

static void print_entry(struct client *c, const cJSON *info)
{
	const char *type = jstr(info, "type", "file"), *color = "";
	const cJSON *size = cJSON_GetObjectItemCaseSensitive(info, "size");
	char mode[11], when[20] = "";
	const char *mtime = jstr(info, "modified_at", "");

	mode_string(info, mode);
	/* "2025-11-16T14:30:45.123Z" → "2025-11-16 14:30" */
	snprintf(when, sizeof(when), "%.16s", mtime);
	if (strlen(when) > 10 && when[10] == 'T')
		when[10] = ' ';
	if (strcmp(type, "directory") == 0)
		color = C_BLUE C_BOLD;
	else if (strcmp(type, "symlink") == 0)
		color = C_YELLOW;
	printf("%s %-8s %-8s %10.0f %s %s%s%s%s\n", mode, jstr(info, "owner", "?"), jstr(info, "group", "?"),
	       cJSON_IsNumber(size) ? size->valuedouble : 0.0, when, client_color(c, false, color), jstr(info, "path", "?"),
	       strcmp(type, "directory") == 0 ? "/" : "", client_color(c, false, C_RESET));
}

/* Prints a listing answer: the JSON itself with --json, else one line per entry. */
static void print_entries(struct client *c, const cJSON *resp)
{
	const cJSON *e;

	if (c->json) {
		client_print_json(resp);
		return;
	}
	cJSON_ArrayForEach(e, resp)
		print_entry(c, e);
}

static int get_json_path(struct client *c, const char *id, const char *suffix, const char *query, cJSON **ret)
{
	_cleanup_free_ char *full = NULL, *target = NULL;

	if (asprintf(&full, "%s?%s", suffix, query) < 0)
		return -ENOMEM;
	target = client_session_target(id, full);
	if (!target)
		return -ENOMEM;
	return client_call(c, "GET", target, NULL, ret);
}

static int files_ls(struct client *c, int argc, char **argv)
{
	static const struct option opts[] = { { "depth", required_argument, NULL, 'd' }, {} };
	_cleanup_free_ char *path = NULL, *query = NULL;
	_cleanup_json_ cJSON *resp = NULL;
	unsigned long depth = 1;
	int o, r;

	client_reset_getopt();
	while ((o = client_getopt(argc, argv, "d:", opts, NULL)) >= 0) {
		char *end;

		if (o != 'd')
			return -EINVAL;
		errno = 0;
		depth = strtoul(optarg, &end, 10);
		if (errno || *end || depth == 0 || depth > 1000) {
			client_error(c, "invalid depth '%s'", optarg);
			return -EINVAL;
		}
	}
	if (argc - optind < 1 || argc - optind > 2) {
		client_error(c, "usage: draftbox files ls ID [PATH] [--depth N]");
		return -EINVAL;
	}
	path = http_escape(argc - optind == 2 ? argv[optind + 1] : ".", true);
	if (!path || asprintf(&query, "path=%s&depth=%lu", path, depth) < 0)
		return -ENOMEM;
	r = get_json_path(c, argv[optind], "/directories/list", query, &resp);
	if (r < 0)
		return r;
	print_entries(c, resp);
	return 0;
}

static int files_search(struct client *c, int argc, char **argv)
{
	_cleanup_free_ char *path = NULL, *pattern = NULL, *query = NULL;
	_cleanup_json_ cJSON *resp = NULL;
	const cJSON *e;
	int r;

	if (argc != 4) {
		client_error(c, "usage: draftbox files search ID PATH PATTERN");
		return -EINVAL;
	}
	path = http_escape(argv[2], true);
	pattern = http_escape(argv[3], false);
	if (!path || !pattern || asprintf(&query, "path=%s&pattern=%s", path, pattern) < 0)
		return -ENOMEM;
	r = get_json_path(c, argv[1], "/files/search", query, &resp);
	if (r < 0)
		return r;
	if (c->json) {
		client_print_json(resp);
		return 0;
	}
	cJSON_ArrayForEach(e, resp)
		printf("%s\n", jstr(e, "path", "?"));
	return 0;
}

/* "path=A&path=B..." for argv[from..]. */
static char *paths_query(char **argv, int from, int to)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!f)
		return NULL;
	for (int i = from; i < to; i++) {
		_cleanup_free_ char *e = http_escape(argv[i], true);

		if (!e) {
			fclose(f);
			free(out);
			return NULL;
		}
		fprintf(f, "%spath=%s", i > from ? "&" : "", e);
	}
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

static int files_stat(struct client *c, int argc, char **argv)
{
	_cleanup_free_ char *query = NULL;
	_cleanup_json_ cJSON *resp = NULL;
	int r;

	if (argc < 3) {
		client_error(c, "usage: draftbox files stat ID PATH...");
		return -EINVAL;
	}
	query = paths_query(argv, 2, argc);
	if (!query)
		return -ENOMEM;
	r = get_json_path(c, argv[1], "/files/info", query, &resp);
	if (r < 0)
		return r;
	print_entries(c, resp);
	return 0;
}

static int files_get(struct client *c, int argc, char **argv)
{
	static const struct option opts[] = { { "output", required_argument, NULL, 'o' }, {} };
	_cleanup_free_ char *path = NULL, *full = NULL, *target = NULL, *tmp = NULL;
	_cleanup_close_ int out_fd = -1;
	struct http_response resp = { .fd = -1 };
	const char *output = NULL;
	char buf[65536];
	int o, r;

	client_reset_getopt();
	while ((o = client_getopt(argc, argv, "o:", opts, NULL)) >= 0) {
		if (o != 'o')
			return -EINVAL;
		output = optarg;
	}
	if (argc - optind != 2) {
		client_error(c, "usage: draftbox files get ID PATH [-o FILE]");
		return -EINVAL;
	}
	path = http_escape(argv[optind + 1], true);
	if (!path || asprintf(&full, "/files/download?path=%s", path) < 0)
		return -ENOMEM;
	target = client_session_target(argv[optind], full);
	if (!target)
		return -ENOMEM;
	r = client_request(c, "GET", target, NULL, NULL, 0, &resp);
	if (r < 0)
		return r;
	if (resp.status < 200 || resp.status > 299) {
		r = client_report_http_error(c, &resp);
		http_response_done(&resp);
		return r;
	}
	if (output && strcmp(output, "-") != 0) {
		/* Written next to the target and renamed at the end: an interrupted download leaves no half file. */
		if (asprintf(&tmp, "%s.draftbox-XXXXXX", output) < 0) {
			http_response_done(&resp);
			return -ENOMEM;
		}
		out_fd = mkostemp(tmp, O_CLOEXEC);
		if (out_fd < 0) {
			r = -errno;
			http_response_done(&resp);
			client_error(c, "cannot create '%s': %s", output, strerror(-r));
			free(tmp);
			tmp = NULL;
			return -EBADMSG;
		}
		{
			mode_t um = umask(0);

			umask(um);
			(void)fchmod(out_fd, 0666 & ~um);
		}
	}
	for (;;) {
		ssize_t n = http_read_body(&resp, buf, sizeof(buf));

		if (n <= 0) {
			r = (int)n;
			break;
		}
		r = write_full(out_fd >= 0 ? out_fd : STDOUT_FILENO, buf, (size_t)n);
		if (r < 0)
			break;
	}
	http_response_done(&resp);
	if (r == 0 && tmp && rename(tmp, output) < 0)
		r = -errno;
	if (r < 0) {
		if (tmp)
			(void)unlink(tmp);
		client_error(c, "cannot download '%s': %s", argv[optind + 1], strerror(-r));
		return -EBADMSG;
	}
	return 0;
}

static int files_put(struct client *c, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "owner", required_argument, NULL, 'u' },
		{ "group", required_argument, NULL, 'g' },
		{}
	};
	_cleanup_json_ cJSON *meta = cJSON_CreateObject();
	_cleanup_free_ char *meta_text = NULL, *head = NULL, *tail = NULL, *target = NULL, *stdin_buf = NULL;
	_cleanup_close_ int fd = -1;
	struct http_response resp = { .fd = -1 };
	struct http_body_part parts[3];
	char boundary[64], ctype[128];
	const char *local;
	uint64_t rnd[2];
	size_t stdin_len = 0;
	struct stat st;
	int o, r;

	if (!meta)
		return -ENOMEM;
	client_reset_getopt();
	while ((o = client_getopt(argc, argv, "m:u:g:", opts, NULL)) >= 0) {
		switch (o) {
		case 'm': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 8);

			if (*end || end == optarg || v > 07777) {
				client_error(c, "invalid mode '%s': use octal digits like 644", optarg);
				return -EINVAL;
			}
			/* the API wants the octal digits as a decimal integer */
			cJSON_AddNumberToObject(meta, "mode", (double)strtoul(optarg, NULL, 10));
			break;
		}
		case 'u':
			cJSON_AddStringToObject(meta, "owner", optarg);
			break;
		case 'g':
			cJSON_AddStringToObject(meta, "group", optarg);
			break;
		default:
			return -EINVAL;
		}
	}
	if (argc - optind != 3) {
		client_error(c, "usage: draftbox files put ID LOCAL|- PATH [--mode 644] [--owner U] [--group G]");
		return -EINVAL;
	}
	local = argv[optind + 1];
	cJSON_AddStringToObject(meta, "path", argv[optind + 2]);
	meta_text = cJSON_PrintUnformatted(meta);
	if (!meta_text)
		return -ENOMEM;

	if (strcmp(local, "-") == 0) {
		r = read_full_fd(STDIN_FILENO, CLIENT_MAX_STDIN_UPLOAD, &stdin_buf, &stdin_len);
		if (r < 0) {
			client_error(c, "cannot read standard input: %s", strerror(-r));
			return -EBADMSG;
		}
	} else {
		fd = open(local, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (fd < 0 || fstat(fd, &st) < 0) {
			client_error(c, "cannot open '%s': %m", local);
			return -EBADMSG;
		}
		if (!S_ISREG(st.st_mode)) {
			client_error(c, "'%s' is not a regular file", local);
			return -EBADMSG;
		}
	}

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -EIO;
	snprintf(boundary, sizeof(boundary), "draftbox-%016" PRIx64 "%016" PRIx64, rnd[0], rnd[1]);
	if (asprintf(&head,
		     "--%s\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
		     "Content-Type: application/json\r\n\r\n%s\r\n"
		     "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"file\"\r\n"
		     "Content-Type: application/octet-stream\r\n\r\n",
		     boundary, meta_text, boundary) < 0 ||
	    asprintf(&tail, "\r\n--%s--\r\n", boundary) < 0)
		return -ENOMEM;
	snprintf(ctype, sizeof(ctype), "multipart/form-data; boundary=%s", boundary);
	parts[0] = (struct http_body_part){ .data = head, .fd = -1, .size = strlen(head) };
	if (stdin_buf)
		parts[1] = (struct http_body_part){ .data = stdin_buf, .fd = -1, .size = stdin_len };
	else
		parts[1] = (struct http_body_part){ .data = NULL, .fd = fd, .size = (uint64_t)st.st_size };
	parts[2] = (struct http_body_part){ .data = tail, .fd = -1, .size = strlen(tail) };

	target = client_session_target(argv[optind], "/files/upload");
	if (!target)
		return -ENOMEM;
	r = client_request(c, "POST", target, ctype, parts, 3, &resp);
	if (r < 0)
		return r;
	if (resp.status < 200 || resp.status > 299)
		r = client_report_http_error(c, &resp);
	else if (c->json) {
		_cleanup_free_ char *body = NULL;

		if (http_read_body_all(&resp, CLIENT_MAX_JSON, &body, NULL) == 0 && *body)
			printf("%s\n", body);
	}
	http_response_done(&resp);
	return r;
}

static int files_rm(struct client *c, int argc, char **argv)
{
	static const struct option opts[] = { { "recursive", no_argument, NULL, 'r' }, {} };
	_cleanup_free_ char *query = NULL, *full = NULL, *target = NULL;
	bool recursive = false;
	int o;

	client_reset_getopt();
	while ((o = client_getopt(argc, argv, "rR", opts, NULL)) >= 0) {
		if (o != 'r' && o != 'R')
			return -EINVAL;
		recursive = true;
	}
	if (argc - optind < 2) {
		client_error(c, "usage: draftbox files rm ID PATH... [-r]");
		return -EINVAL;
	}
	query = paths_query(argv, optind + 1, argc);
	if (!query || asprintf(&full, "%s?%s", recursive ? "/directories" : "/files", query) < 0)
		return -ENOMEM;
	target = client_session_target(argv[optind], full);
	if (!target)
		return -ENOMEM;
	return client_call(c, "DELETE", target, NULL, NULL);
}

static int files_mv(struct client *c, int argc, char **argv)
{
	_cleanup_json_ cJSON *req = cJSON_CreateArray();
	_cleanup_free_ char *target = NULL;
	cJSON *item;

	if (argc != 4) {
		client_error(c, "usage: draftbox files mv ID SRC DEST");
		return -EINVAL;
	}
	item = cJSON_CreateObject();
	if (!req || !item)
		return -ENOMEM;
	cJSON_AddItemToArray(req, item);
	cJSON_AddStringToObject(item, "src", argv[2]);
	cJSON_AddStringToObject(item, "dest", argv[3]);
	target = client_session_target(argv[1], "/files/mv");
	if (!target)
		return -ENOMEM;
	return client_call(c, "POST", target, req, NULL);
}

static int files_mkdir(struct client *c, int argc, char **argv)
{
	static const struct option opts[] = { { "mode", required_argument, NULL, 'm' }, {} };
	_cleanup_json_ cJSON *req = cJSON_CreateObject();
	_cleanup_free_ char *target = NULL;
	unsigned long mode = 755;
	int o;

	if (!req)
		return -ENOMEM;
	client_reset_getopt();
	while ((o = client_getopt(argc, argv, "m:", opts, NULL)) >= 0) {
		char *end;

		if (o != 'm')
			return -EINVAL;
		if (strtoul(optarg, &end, 8) > 07777 || *end || end == optarg) {
			client_error(c, "invalid mode '%s': use octal digits like 755", optarg);
			return -EINVAL;
		}
		mode = strtoul(optarg, NULL, 10);
	}
	if (argc - optind < 2) {
		client_error(c, "usage: draftbox files mkdir ID PATH... [--mode 755]");
		return -EINVAL;
	}
	for (int i = optind + 1; i < argc; i++) {
		cJSON *perm = cJSON_AddObjectToObject(req, argv[i]);

		if (!perm)
			return -ENOMEM;
		cJSON_AddNumberToObject(perm, "mode", (double)mode);
	}
	target = client_session_target(argv[optind], "/directories");
	if (!target)
		return -ENOMEM;
	return client_call(c, "POST", target, req, NULL);
}

int client_cmd_files(struct client *c, int argc, char **argv)
{
	const char *sub;

	if (argc < 2) {
		client_error(c, "usage: draftbox files ls|stat|get|put|rm|mv|mkdir|search ...");
		return -EINVAL;
	}
	sub = argv[1];
	argc--;
	argv++;
	if (strcmp(sub, "ls") == 0 || strcmp(sub, "list") == 0)
		return files_ls(c, argc, argv);
	if (strcmp(sub, "stat") == 0 || strcmp(sub, "info") == 0)
		return files_stat(c, argc, argv);
	if (strcmp(sub, "get") == 0 || strcmp(sub, "cat") == 0)
		return files_get(c, argc, argv);
	if (strcmp(sub, "put") == 0)
		return files_put(c, argc, argv);
	if (strcmp(sub, "rm") == 0)
		return files_rm(c, argc, argv);
	if (strcmp(sub, "mv") == 0)
		return files_mv(c, argc, argv);
	if (strcmp(sub, "mkdir") == 0)
		return files_mkdir(c, argc, argv);
	if (strcmp(sub, "search") == 0 || strcmp(sub, "find") == 0)
		return files_search(c, argc, argv);
	client_error(c, "unknown files command '%s'", sub);
	return -EINVAL;
}
