// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The host-side subcommands `draftfs diff|commit|discard|status|invalidate|
 * recover` (ovl_ctl_main). They talk to a live mount (MOUNTPOINT or
 * --socket) or work offline on the layers (--lowerdir/--upperdir/--workdir).
 * Results go to stdout as JSON (diff: the diff itself, summary on stderr
 * with --verbose); errors go to stderr. Exit codes: 0 ok, 1 failure,
 * 2 usage or bad path, 3 conflict or refused content.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "ctl-client.h"
#include "ctl-util.h"
#include "json-util.h"
#include "log.h"

static const char *arg_socket;
static const char *arg_lowerdir, *arg_upperdir, *arg_workdir, *arg_state_dir;
static const char *arg_format = "json";
static const char *arg_output;
static struct ovl_commit_opts arg_commit;
static bool arg_verbose;

static void usage(FILE *f, const char *verb)
{
	fprintf(f,
	        "usage: draftfs %s [MOUNTPOINT | --socket PATH | --lowerdir A[:B...] --upperdir U (--workdir W | --state-dir S)]\n"
	        "       [options] [PATH...]\n"
	        "PATHs are relative to the mount root (or absolute below MOUNTPOINT); a directory selects its subtree.\n"
	        "diff:    --format json|patch|tar  --output FILE\n"
	        "commit:  --force  --allow setid,special,xattrs  --owner workspace|preserve|UID:GID  --dry-run\n"
	        "recover: --force (over workspace entries changed since the interrupted commit began)\n",
	        verb);
}

static int print_error(int r, cJSON *err)
{
	const char *msg = NULL, *code = NULL;
	cJSON *paths;

	if (err) {
		(void)json_get_string(err, "error", &msg);
		(void)json_get_string(err, "code", &code);
	}
	if (msg)
		log_error("%s", msg);
	else
		log_error_errno(r, "operation failed");
	paths = err ? cJSON_GetObjectItemCaseSensitive(err, "details") : NULL;
	if (paths) {
		cJSON *d;

		cJSON_ArrayForEach(d, paths) {
			const char *p = NULL, *why = NULL;

			(void)json_get_string(d, "path", &p);
			(void)json_get_string(d, "reason", &why);
			fprintf(stderr, "  %s: %s\n", p ?: "?", why ?: "");
		}
	} else if (err && (paths = cJSON_GetObjectItemCaseSensitive(err, "paths"))) {
		cJSON *p;

		cJSON_ArrayForEach(p, paths)
			if (cJSON_IsString(p))
				fprintf(stderr, "  %s\n", p->valuestring);
	}
	if (code && (strcmp(code, "conflict") == 0 || strcmp(code, "refused") == 0))
		return 3;
	if (code && (strcmp(code, "invalid_path") == 0 || strcmp(code, "not_found") == 0 ||
	             strcmp(code, "invalid_argument") == 0))
		return 2;
	return 1;
}

static int parse_allow(const char *s)
{
	_cleanup_free_ char *copy = strdup(s);
	char *tok, *save = NULL;

	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (strcmp(tok, "setid") == 0)
			arg_commit.allow_setid = true;
		else if (strcmp(tok, "special") == 0)
			arg_commit.allow_special = true;
		else if (strcmp(tok, "xattrs") == 0)
			arg_commit.allow_xattrs = true;
		else
			return -EINVAL;
	}
	return 0;
}

static int parse_owner(const char *s)
{
	unsigned u, g;
	char end;

	if (strcmp(s, "workspace") == 0)
		arg_commit.owner = OVL_OWNER_WORKSPACE;
	else if (strcmp(s, "preserve") == 0)
		arg_commit.owner = OVL_OWNER_PRESERVE;
	else if (sscanf(s, "%u:%u%c", &u, &g, &end) == 2) {
		arg_commit.owner = OVL_OWNER_FIXED;
		arg_commit.uid = u;
		arg_commit.gid = g;
	} else
		return -EINVAL;
	return 0;
}

/* Turns CLI paths into mount-relative ones: absolute paths must lie below @mountpoint. */
static int convert_paths(char **in, size_t n, const char *mountpoint, char ***ret)
{
	_cleanup_strv_free_ char **out = calloc(n + 1, sizeof(char *));
	_cleanup_free_ char *mp = NULL;

	if (!out)
		return -ENOMEM;
	if (mountpoint)
		mp = realpath(mountpoint, NULL);
	for (size_t i = 0; i < n; i++) {
		const char *p = in[i];

		if (p[0] == '/') {
			size_t l = mp ? strlen(mp) : 0;

			if (!mp || strncmp(p, mp, l) != 0 || (p[l] != '/' && p[l] != '\0')) {
				log_error("path '%s' is outside the mount%s%s", p, mp ? " " : "", mp ?: "");
				return -EINVAL;
			}
			p += l;
			while (*p == '/')
				p++;
			if (!*p)
				p = ".";
		}
		out[i] = strdup(p);
		if (!out[i])
			return -ENOMEM;
	}
	*ret = TAKE_PTR(out);
	return 0;
}

int ovl_ctl_main(int argc, char **argv)
{
	enum { OPT_SOCKET = 256, OPT_LOWER, OPT_UPPER, OPT_WORK, OPT_STATE, OPT_FORMAT, OPT_OUTPUT, OPT_FORCE,
	       OPT_ALLOW, OPT_OWNER, OPT_DRY };
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "lowerdir", required_argument, NULL, OPT_LOWER },
		{ "upperdir", required_argument, NULL, OPT_UPPER },
		{ "workdir", required_argument, NULL, OPT_WORK },
		{ "state-dir", required_argument, NULL, OPT_STATE },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "output", required_argument, NULL, OPT_OUTPUT },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ "allow", required_argument, NULL, OPT_ALLOW },
		{ "owner", required_argument, NULL, OPT_OWNER },
		{ "dry-run", no_argument, NULL, OPT_DRY },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	const char *verb = argv[0], *mountpoint = NULL;
	_cleanup_ovl_ctl_ struct ovl_ctl *c = NULL;
	_cleanup_json_ cJSON *res = NULL, *err = NULL;
	_cleanup_strv_free_ char **paths = NULL;
	_cleanup_close_ int out_fd = -1;
	enum ovl_diff_format fmt;
	char **pos;
	size_t npos;
	int opt, r;

	log_set_program("draftfs");
	if (!ovl_ctl_is_subcommand(verb)) {
		log_error("unknown subcommand '%s'", verb);
		return 2;
	}
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vh", opts, NULL)) >= 0) {
		switch (opt) {
		case OPT_SOCKET:
			arg_socket = optarg;
			break;
		case OPT_LOWER:
			arg_lowerdir = optarg;
			break;
		case OPT_UPPER:
			arg_upperdir = optarg;
			break;
		case OPT_WORK:
			arg_workdir = optarg;
			break;
		case OPT_STATE:
			arg_state_dir = optarg;
			break;
		case OPT_FORMAT:
			arg_format = optarg;
			break;
		case OPT_OUTPUT:
			arg_output = optarg;
			break;
		case OPT_FORCE:
			arg_commit.force = true;
			break;
		case OPT_ALLOW:
			if (parse_allow(optarg) < 0) {
				log_error("unknown --allow value '%s' (setid, special, xattrs)", optarg);
				return 2;
			}
			break;
		case OPT_OWNER:
			if (parse_owner(optarg) < 0) {
				log_error("invalid --owner '%s' (workspace, preserve or UID:GID)", optarg);
				return 2;
			}
			break;
		case OPT_DRY:
			arg_commit.dry_run = true;
			break;
		case 'v':
			arg_verbose = true;
			break;
		case 'h':
			usage(stdout, verb);
			return 0;
		default:
			usage(stderr, verb);
			return 2;
		}
	}
	pos = argv + optind;
	npos = (size_t)(argc - optind);
	if (!arg_socket && !arg_upperdir) {
		if (npos == 0) {
			usage(stderr, verb);
			return 2;
		}
		mountpoint = pos[0];
		pos++;
		npos--;
	}
	if (ovl_diff_format_from_string(arg_format, &fmt) < 0) {
		log_error("unknown diff format '%s' (json, patch, tar)", arg_format);
		return 2;
	}
	if (convert_paths(pos, npos, mountpoint, &paths) < 0)
		return 2;

	if (arg_upperdir) {
		if (!arg_lowerdir || (!arg_workdir && !arg_state_dir)) {
			log_error("offline mode needs --lowerdir, --upperdir and --workdir or --state-dir");
			return 2;
		}
		r = ovl_ctl_open_offline(arg_lowerdir, arg_upperdir, arg_workdir, arg_state_dir, &c);
		if (r < 0)
			return log_error_errno(r, "cannot open the layers (lowerdir '%s', upperdir '%s')", arg_lowerdir,
			                       arg_upperdir),
			       1;
	} else {
		const char *target = arg_socket ?: mountpoint;

		r = ovl_ctl_connect(target, &c);
		if (r == -ENOTSUP)
			return log_error("'%s' is not a draftfs mount (or you are not root)", target), 1;
		if (r < 0)
			return log_error_errno(r, "cannot reach the control socket of '%s'", target), 1;
		if (mountpoint && (strcmp(verb, "diff") == 0 || strcmp(verb, "commit") == 0 || strcmp(verb, "status") == 0))
			(void)ovl_ctl_syncfs(mountpoint);
	}

	if (strcmp(verb, "diff") == 0) {
		if (arg_output) {
			out_fd = open(arg_output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (out_fd < 0)
				return log_error_errno(-errno, "cannot open '%s'", arg_output), 1;
		}
		r = ovl_ctl_diff(c, fmt, paths, out_fd >= 0 ? out_fd : STDOUT_FILENO, &res, &err);
	} else if (strcmp(verb, "commit") == 0) {
		r = ovl_ctl_commit(c, paths, &arg_commit, &res, &err);
	} else if (strcmp(verb, "discard") == 0) {
		r = ovl_ctl_discard(c, paths, &res, &err);
	} else if (strcmp(verb, "status") == 0) {
		r = ovl_ctl_status(c, &res, &err);
	} else if (strcmp(verb, "invalidate") == 0) {
		r = ovl_ctl_invalidate(c, paths, &res, &err);
	} else {
		r = ovl_ctl_recover(c, arg_commit.force, &res, &err);
	}
	if (r < 0)
		return print_error(r, err);
	if (strcmp(verb, "diff") != 0 || arg_verbose) {
		_cleanup_cjson_str_ char *text = cJSON_Print(res);

		if (text)
			fprintf(strcmp(verb, "diff") == 0 ? stderr : stdout, "%s\n", text);
	}
	return 0;
}
