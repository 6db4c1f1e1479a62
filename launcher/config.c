/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * draftbox-run's command line: defaults, option parsing and validation of
 * everything that can be checked without touching the host (absolute
 * paths, sizes, ranges, conflicting options). See docs/launcher.md.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "log.h"
#include "macro.h"

/* Logs a command line mistake (no errno text: the message says it all) and returns -EINVAL. */
#define bad_usage(...) (log_error(__VA_ARGS__), -EINVAL)

void launch_config_init(struct launch_config *c)
{
	*c = (struct launch_config){
		.mode = LAUNCH_MODE_OVERLAY,
		.profile = LAUNCH_PROFILE_STRICT,
		.uid = (uid_t)-1,
		.gid = (gid_t)-1,
		.pool_lo = LAUNCH_UID_POOL_LO,
		.pool_hi = LAUNCH_UID_POOL_HI,
		.uid_wait = LAUNCH_DEFAULT_UID_WAIT,
		.grace = LAUNCH_DEFAULT_GRACE,
		.memory = LAUNCH_DEFAULT_MEMORY,
		.pids = LAUNCH_DEFAULT_PIDS,
		.nofile = LAUNCH_DEFAULT_NOFILE,
		.fsize = LAUNCH_DEFAULT_FSIZE,
		.tmp_size = LAUNCH_DEFAULT_TMP_SIZE,
		.stdin_fd = -1,
		.json_fd = -1,
	};
}

void launch_config_free(struct launch_config *c)
{
	free(c->workspace);
	free(c->view);
	free(c->session_dir);
	free(c->workspace_dest);
	free(c->cwd);
	for (size_t i = 0; i < c->n_exposes; i++) {
		free(c->exposes[i].src);
		free(c->exposes[i].dest);
		safe_close(c->exposes[i].fd);
	}
	free(c->exposes);
	strv_free(c->allow);
	strv_free(c->hides);
	strv_free(c->hides_if_free);
	free(c->allow_file);
	free(c->state_dir);
	free(c->runtime_dir);
	free(c->bwrap);
	free(c->draftfs);
	strv_free(c->env_deny);
	strv_free(c->env_allow);
	strv_free(c->setenv);
	free(c->home_dir);
	free(c->input);
	strv_free(c->argv);
	launch_config_init(c);
}

int launch_strv_push_split(char ***v, const char *s, char sep)
{
	_cleanup_free_ char *copy = strdup(s);
	char *p, *item;

	if (!copy)
		return -ENOMEM;
	for (p = copy; (item = strsep(&p, (char[]){ sep, 0 }));) {
		int r;

		if (!*item)
			continue;
		r = strv_push(v, item);
		if (r < 0)
			return r;
	}
	return 0;
}

int launch_path_normalize(const char *path, char **ret)
{
	_cleanup_free_ char *out = NULL;
	size_t len, o = 0;
	const char *p;

	if (!path || path[0] != '/')
		return -EINVAL;
	len = strlen(path);
	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	out = malloc(len + 2);
	if (!out)
		return -ENOMEM;
	for (p = path; *p;) {
		const char *e;
		size_t n;

		while (*p == '/')
			p++;
		if (!*p)
			break;
		e = strchrnul(p, '/');
		n = (size_t)(e - p);
		if (n == 1 && p[0] == '.') {
			p = e;
			continue;
		}
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		out[o++] = '/';
		memcpy(out + o, p, n);
		o += n;
		p = e;
	}
	if (o == 0)
		out[o++] = '/';
	out[o] = 0;
	*ret = TAKE_PTR(out);
	return 0;
}

bool launch_path_has_prefix(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	if (n == 1 && prefix[0] == '/')
		return path[0] == '/';
	while (n > 1 && prefix[n - 1] == '/')
		n--;
	if (strncmp(path, prefix, n) != 0)
		return false;
	return path[n] == 0 || path[n] == '/';
}

int launch_parse_size(const char *s, uint64_t *ret)
{
	char *end;
	double v;
	double mul = 1;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return -EINVAL;
	switch (*end) {
	case 0:
		break;
	case 'k': case 'K': mul = 1024.0; end++; break;
	case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default:
		return -EINVAL;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end)
		return -EINVAL;
	v *= mul;
	if (v >= 18446744073709551615.0)
		return -ERANGE;
	*ret = (uint64_t)v;
	return 0;
}

int launch_parse_seconds(const char *s, double *ret)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0 || v > 1e7)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *ret)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > max)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_fd(const char *s, int *ret)
{
	uint64_t v;

	if (parse_u64(s, INT_MAX, &v) < 0)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

/* --setenv-from-env: LAUNCH_SETENV_PREFIX0=K=V, ... in order, until a number is missing. */
static int setenv_from_env(struct launch_config *c)
{
	for (unsigned i = 0;; i++) {
		char name[sizeof(LAUNCH_SETENV_PREFIX) + 12];
		const char *v, *eq;
		int r;

		snprintf(name, sizeof(name), LAUNCH_SETENV_PREFIX "%u", i);
		v = getenv(name);
		if (!v)
			return 0;
		eq = strchr(v, '=');
		if (!eq || eq == v)
			return bad_usage("bad %s (K=V expected)", name);
		r = strv_push(&c->setenv, v);
		if (r < 0)
			return r;
	}
}

/* Stores a normalized absolute path from an option, or logs why not. */
static int set_path(char **field, const char *opt, const char *value)
{
	char *p;
	int r;

	r = launch_path_normalize(value, &p);
	if (r < 0)
		return bad_usage("%s needs an absolute path without '..', got '%s'", opt, value);
	free(*field);
	*field = p;
	return 0;
}

/* Appends a normalized absolute path from a repeatable option to @list, or logs why not. */
static int push_path(char ***list, const char *opt, const char *value)
{
	_cleanup_free_ char *p = NULL;

	if (launch_path_normalize(value, &p) < 0)
		return bad_usage("%s needs an absolute path without '..', got '%s'", opt, value);
	return strv_push(list, p);
}

static void usage(void)
{
	printf("usage: draftbox-run [OPTIONS] -- COMMAND [ARGS...]\n"
	       "       draftbox-run --probe\n\n"
	       "Runs COMMAND in a bubblewrap sandbox over a workspace.\n\n"
	       "  --workspace DIR          the workspace (required)\n"
	       "  --mode overlay|rw|ro     default overlay (a draftfs view)\n"
	       "  --view DIR               existing draftfs mount to use (overlay)\n"
	       "  --session-dir S          where draftbox-run mounts its own view (overlay)\n"
	       "  --keep                   leave that mount in place\n"
	       "  --workspace-dest PATH    workspace path inside (default: same as host)\n"
	       "  --cwd PATH               working dir inside\n"
	       "  --profile strict|balanced\n"
	       "  --share-net              keep the host network\n"
	       "  --expose SRC[:DEST][:ro|rw], --extra-writable PATH\n"
	       "  --allow PREFIX, --allow-file FILE   expose allowlist\n"
	       "  --hide DIR, --hide-if-free DIR, --no-default-hide   empty tmpfs over host dirs\n"
	       "  --state-dir DIR, --runtime-dir DIR\n"
	       "  --uid N --gid N | --uid-pool LO-HI [--uid-wait SEC]\n"
	       "  --env-deny K,.. --env-allow K,.. --setenv K=V --setenv-from-env --home-dir DIR\n"
	       "  --timeout SEC --grace SEC --memory BYTES --pids N --cpu CORES\n"
	       "  --nofile N --fsize BYTES --tmp-size BYTES\n"
	       "  --stdin-fd N | --input FILE\n"
	       "  --json, --json-fd N       print the result as JSON\n"
	       "  --bwrap PATH --draftfs PATH --verbose --version\n"
	       "See docs/launcher.md.\n");
}

enum {
	OPT_WORKSPACE = 0x100, OPT_MODE, OPT_VIEW, OPT_SESSION_DIR, OPT_KEEP, OPT_WS_DEST, OPT_CWD,
	OPT_PROFILE, OPT_SHARE_NET, OPT_EXPOSE, OPT_EXTRA_WRITABLE, OPT_ALLOW, OPT_ALLOW_FILE, OPT_HIDE, OPT_HIDE_IF_FREE, OPT_NO_DEFAULT_HIDE,
	OPT_STATE_DIR, OPT_RUNTIME_DIR, OPT_BWRAP, OPT_DRAFTFS, OPT_UID, OPT_GID, OPT_UID_POOL,
	OPT_UID_WAIT, OPT_ENV_DENY, OPT_ENV_ALLOW, OPT_SETENV, OPT_SETENV_FROM_ENV, OPT_HOME_DIR, OPT_TIMEOUT, OPT_GRACE,
	OPT_MEMORY, OPT_PIDS, OPT_CPU, OPT_NOFILE, OPT_FSIZE, OPT_TMP_SIZE, OPT_STDIN_FD, OPT_INPUT,
	OPT_JSON, OPT_JSON_FD, OPT_PROBE, OPT_VERBOSE, OPT_VERSION, OPT_HELP,
};

static const struct option options[] = {
	{ "workspace", required_argument, NULL, OPT_WORKSPACE },
	{ "mode", required_argument, NULL, OPT_MODE },
	{ "view", required_argument, NULL, OPT_VIEW },
	{ "session-dir", required_argument, NULL, OPT_SESSION_DIR },
	{ "keep", no_argument, NULL, OPT_KEEP },
	{ "workspace-dest", required_argument, NULL, OPT_WS_DEST },
	{ "cwd", required_argument, NULL, OPT_CWD },
	{ "profile", required_argument, NULL, OPT_PROFILE },
	{ "share-net", no_argument, NULL, OPT_SHARE_NET },
	{ "expose", required_argument, NULL, OPT_EXPOSE },
	{ "extra-writable", required_argument, NULL, OPT_EXTRA_WRITABLE },
	{ "allow", required_argument, NULL, OPT_ALLOW },
	{ "allow-file", required_argument, NULL, OPT_ALLOW_FILE },
	{ "hide", required_argument, NULL, OPT_HIDE },
	{ "hide-if-free", required_argument, NULL, OPT_HIDE_IF_FREE },
	{ "no-default-hide", no_argument, NULL, OPT_NO_DEFAULT_HIDE },
	{ "state-dir", required_argument, NULL, OPT_STATE_DIR },
	{ "runtime-dir", required_argument, NULL, OPT_RUNTIME_DIR },
	{ "bwrap", required_argument, NULL, OPT_BWRAP },
	{ "draftfs", required_argument, NULL, OPT_DRAFTFS },
	{ "uid", required_argument, NULL, OPT_UID },
	{ "gid", required_argument, NULL, OPT_GID },
	{ "uid-pool", required_argument, NULL, OPT_UID_POOL },
	{ "uid-wait", required_argument, NULL, OPT_UID_WAIT },
	{ "env-deny", required_argument, NULL, OPT_ENV_DENY },
	{ "env-allow", required_argument, NULL, OPT_ENV_ALLOW },
	{ "setenv", required_argument, NULL, OPT_SETENV },
	{ "setenv-from-env", no_argument, NULL, OPT_SETENV_FROM_ENV },
	{ "home-dir", required_argument, NULL, OPT_HOME_DIR },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "grace", required_argument, NULL, OPT_GRACE },
	{ "memory", required_argument, NULL, OPT_MEMORY },
	{ "pids", required_argument, NULL, OPT_PIDS },
	{ "cpu", required_argument, NULL, OPT_CPU },
	{ "nofile", required_argument, NULL, OPT_NOFILE },
	{ "fsize", required_argument, NULL, OPT_FSIZE },
	{ "tmp-size", required_argument, NULL, OPT_TMP_SIZE },
	{ "stdin-fd", required_argument, NULL, OPT_STDIN_FD },
	{ "input", required_argument, NULL, OPT_INPUT },
	{ "json", no_argument, NULL, OPT_JSON },
	{ "json-fd", required_argument, NULL, OPT_JSON_FD },
	{ "probe", no_argument, NULL, OPT_PROBE },
	{ "verbose", no_argument, NULL, OPT_VERBOSE },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "help", no_argument, NULL, OPT_HELP },
	{}
};

static int parse_one(struct launch_config *c, int opt, const char *v)
{
	struct launch_expose e = {};
	uint64_t u;
	int r;

	switch (opt) {
	case OPT_WORKSPACE: return set_path(&c->workspace, "--workspace", v);
	case OPT_VIEW: return set_path(&c->view, "--view", v);
	case OPT_SESSION_DIR: return set_path(&c->session_dir, "--session-dir", v);
	case OPT_WS_DEST: return set_path(&c->workspace_dest, "--workspace-dest", v);
	case OPT_CWD: return set_path(&c->cwd, "--cwd", v);
	case OPT_STATE_DIR: return set_path(&c->state_dir, "--state-dir", v);
	case OPT_RUNTIME_DIR: return set_path(&c->runtime_dir, "--runtime-dir", v);
	case OPT_HOME_DIR: return set_path(&c->home_dir, "--home-dir", v);
	case OPT_ALLOW_FILE: return set_path(&c->allow_file, "--allow-file", v);
	case OPT_INPUT: return set_path(&c->input, "--input", v);
	case OPT_DRAFTFS: return set_path(&c->draftfs, "--draftfs", v);
	case OPT_BWRAP:
		if (strchr(v, '/'))
			return set_path(&c->bwrap, "--bwrap", v);
		free(c->bwrap);
		c->bwrap = strdup(v); /* a name looked up on PATH */
		return c->bwrap ? 0 : -ENOMEM;
	case OPT_KEEP: c->keep = true; return 0;
	case OPT_SHARE_NET: c->share_net = true; return 0;
	case OPT_NO_DEFAULT_HIDE: c->no_default_hides = true; return 0;
	case OPT_JSON: c->json = true; return 0;
	case OPT_PROBE: c->probe = true; return 0;
	case OPT_VERBOSE: c->verbose = true; return 0;
	case OPT_MODE:
		if (strcmp(v, "overlay") == 0)
			c->mode = LAUNCH_MODE_OVERLAY;
		else if (strcmp(v, "rw") == 0)
			c->mode = LAUNCH_MODE_RW;
		else if (strcmp(v, "ro") == 0)
			c->mode = LAUNCH_MODE_RO;
		else
			return bad_usage("unknown mode '%s' (overlay, rw or ro)", v);
		return 0;
	case OPT_PROFILE:
		if (strcmp(v, "strict") == 0)
			c->profile = LAUNCH_PROFILE_STRICT;
		else if (strcmp(v, "balanced") == 0)
			c->profile = LAUNCH_PROFILE_BALANCED;
		else
			return bad_usage("unknown profile '%s' (strict or balanced)", v);
		return 0;
	case OPT_EXPOSE:
	case OPT_EXTRA_WRITABLE:
		if (opt == OPT_EXPOSE) {
			r = launch_expose_parse(v, &e);
			if (r < 0)
				return bad_usage("bad --expose '%s' (SRC[:DEST][:ro|rw], absolute paths)", v);
		} else {
			r = launch_path_normalize(v, &e.src);
			if (r < 0)
				return bad_usage("--extra-writable needs an absolute path, got '%s'", v);
			e.dest = strdup(e.src);
			if (!e.dest) {
				free(e.src);
				return -ENOMEM;
			}
			e.rw = true;
			e.fd = -1;
		}
		{
			struct launch_expose *n = realloc(c->exposes, (c->n_exposes + 1) * sizeof(*n));

			if (!n) {
				free(e.src);
				free(e.dest);
				return -ENOMEM;
			}
			c->exposes = n;
			c->exposes[c->n_exposes++] = e;
		}
		return 0;
	case OPT_ALLOW: return push_path(&c->allow, "--allow", v);
	case OPT_HIDE: return push_path(&c->hides, "--hide", v);
	case OPT_HIDE_IF_FREE: return push_path(&c->hides_if_free, "--hide-if-free", v);
	case OPT_UID:
		if (parse_u64(v, UINT32_MAX - 1, &u) < 0 || u == 0)
			return bad_usage("bad --uid '%s' (a number, not 0)", v);
		c->uid = (uid_t)u;
		c->uid_explicit = true;
		return 0;
	case OPT_GID:
		if (parse_u64(v, UINT32_MAX - 1, &u) < 0 || u == 0)
			return bad_usage("bad --gid '%s' (a number, not 0)", v);
		c->gid = (gid_t)u;
		return 0;
	case OPT_UID_POOL:
		if (launch_parse_uid_range(v, &c->pool_lo, &c->pool_hi) < 0)
			return bad_usage("bad --uid-pool '%s' (LO-HI, 0 < LO <= HI)", v);
		return 0;
	case OPT_UID_WAIT:
		if (launch_parse_seconds(v, &c->uid_wait) < 0)
			return bad_usage("bad --uid-wait '%s'", v);
		return 0;
	case OPT_ENV_DENY:
		return launch_strv_push_split(&c->env_deny, v, ',');
	case OPT_ENV_ALLOW:
		c->env_allow_mode = true;
		return launch_strv_push_split(&c->env_allow, v, ',');
	case OPT_SETENV_FROM_ENV:
		return setenv_from_env(c);
	case OPT_SETENV: {
		const char *eq = strchr(v, '=');

		if (!eq || eq == v)
			return bad_usage("bad --setenv '%s' (K=V)", v);
		return strv_push(&c->setenv, v);
	}
	case OPT_TIMEOUT:
		if (launch_parse_seconds(v, &c->timeout) < 0)
			return bad_usage("bad --timeout '%s' (seconds)", v);
		return 0;
	case OPT_GRACE:
		if (launch_parse_seconds(v, &c->grace) < 0)
			return bad_usage("bad --grace '%s' (seconds)", v);
		return 0;
	case OPT_CPU:
		if (launch_parse_seconds(v, &c->cpu) < 0 || c->cpu > 4096)
			return bad_usage("bad --cpu '%s' (cores)", v);
		return 0;
	case OPT_MEMORY:
		if (launch_parse_size(v, &c->memory) < 0 || (c->memory && c->memory < (4 << 20)))
			return bad_usage("bad --memory '%s' (bytes, at least 4M, or 0)", v);
		return 0;
	case OPT_FSIZE:
		if (launch_parse_size(v, &c->fsize) < 0)
			return bad_usage("bad --fsize '%s' (bytes)", v);
		return 0;
	case OPT_TMP_SIZE:
		if (launch_parse_size(v, &c->tmp_size) < 0 || c->tmp_size < 4096)
			return bad_usage("bad --tmp-size '%s' (bytes)", v);
		return 0;
	case OPT_PIDS:
		if (parse_u64(v, 4194304, &c->pids) < 0)
			return bad_usage("bad --pids '%s'", v);
		return 0;
	case OPT_NOFILE:
		if (parse_u64(v, 1 << 20, &c->nofile) < 0 || c->nofile < 16)
			return bad_usage("bad --nofile '%s' (16 or more)", v);
		return 0;
	case OPT_STDIN_FD:
		if (parse_fd(v, &c->stdin_fd) < 0)
			return bad_usage("bad --stdin-fd '%s'", v);
		return 0;
	case OPT_JSON_FD:
		if (parse_fd(v, &c->json_fd) < 0 || c->json_fd < 1)
			return bad_usage("bad --json-fd '%s'", v);
		c->json = true;
		return 0;
	}
	return -EINVAL;
}

/* Checks combinations and fills in derived defaults. */
static int finish(struct launch_config *c)
{
	if (!c->state_dir && !(c->state_dir = strdup(LAUNCH_DEFAULT_STATE_DIR)))
		return -ENOMEM;
	if (!c->runtime_dir && !(c->runtime_dir = strdup(LAUNCH_DEFAULT_RUNTIME_DIR)))
		return -ENOMEM;
	if (c->probe)
		return 0;
	if (!c->argv || !c->argv[0])
		return bad_usage("no command given (draftbox-run [OPTIONS] -- COMMAND [ARGS])");
	if (!c->workspace)
		return bad_usage("--workspace is required");
	if (c->uid_explicit != (c->gid != (gid_t)-1))
		return bad_usage("--uid and --gid go together");
	if (c->view && c->mode != LAUNCH_MODE_OVERLAY)
		return bad_usage("--view only makes sense with --mode overlay");
	if (c->view && c->session_dir)
		return bad_usage("--view and --session-dir exclude each other");
	if (c->stdin_fd >= 0 && c->input)
		return bad_usage("--stdin-fd and --input exclude each other");
	if (!c->workspace_dest) {
		c->workspace_dest = strdup(c->workspace);
		if (!c->workspace_dest)
			return -ENOMEM;
	}
	if (strcmp(c->workspace_dest, "/") == 0)
		return bad_usage("--workspace-dest cannot be '/'");
	if (!c->cwd) {
		c->cwd = strdup(c->workspace_dest);
		if (!c->cwd)
			return -ENOMEM;
	}
	for (size_t i = 0; i < c->n_exposes; i++)
		if (strcmp(c->exposes[i].dest, "/") == 0)
			return bad_usage("cannot expose over '/'");
	return 0;
}

int launch_parse_args(int argc, char **argv, struct launch_config *c)
{
	int opt, r;

	optind = 1;
	opterr = 0;
	/* '+': stop at the first non-option, which must then be after "--" */
	while ((opt = getopt_long(argc, argv, "+:h", options, NULL)) >= 0) {
		switch (opt) {
		case 'h':
		case OPT_HELP:
			usage();
			return 1;
		case OPT_VERSION:
			printf("draftbox-run %s\n", DRAFTBOX_VERSION);
			return 1;
		case '?':
			if (optopt)
				return bad_usage("unknown or incomplete option '%s'", argv[optind - 1]);
			return bad_usage("unknown option '%s'", argv[optind - 1]);
		case ':':
			return bad_usage("option '%s' needs a value", argv[optind - 1]);
		default:
			r = parse_one(c, opt, optarg);
			if (r < 0)
				return r;
		}
	}
	if (optind < argc) {
		if (strcmp(argv[optind - 1], "--") != 0)
			return bad_usage("unexpected argument '%s' (put the command after '--')", argv[optind]);
		for (int i = optind; i < argc; i++) {
			r = strv_push(&c->argv, argv[i]);
			if (r < 0)
				return r;
		}
	}
	return finish(c);
}
