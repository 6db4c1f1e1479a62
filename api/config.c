// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * draftboxd settings: defaults, the config file and command-line flags. One
 * table maps each long option to a setter, so the file and the flags accept
 * exactly the same keys.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "settings.h"
#include "launch.h"
#include "log.h"
#include "macro.h"
#include "strv.h"

enum opt_kind {
	OPT_STRING,
	OPT_STRV,
	OPT_HIDE_DIRS, /* dirs to hide: absolute, no '..', normalized, not the sandbox's own mounts or above */
	OPT_BOOL,
	OPT_U16,
	OPT_UNSIGNED,
	OPT_SIZE,
	OPT_U64,
	OPT_UID,
};

struct opt_def {
	const char *name;
	enum opt_kind kind;
	size_t offset;
	const char *help;
};

#define O(n, k, f, h) { n, k, offsetof(struct api_config, f), h }
static const struct opt_def opt_defs[] = {
	O("listen-address", OPT_STRING, listen_address, "TCP address to bind (default 127.0.0.1)"),
	O("port", OPT_U16, port, "TCP port (default 44772, 0 = any free port)"),
	O("unix-socket", OPT_STRING, unix_socket, "listen on this Unix socket instead of TCP"),
	O("state-dir", OPT_STRING, state_dir, "state directory (default /var/lib/draftbox)"),
	O("token-file", OPT_STRING, token_file, "access token file (default STATE/token, generated 0600)"),
	O("auth", OPT_BOOL, auth, "require the access token (default true)"),
	O("allow-host", OPT_STRV, allowed_hosts, "accept this Host/Origin name besides loopback (repeatable)"),
	O("max-body", OPT_SIZE, max_body, "maximum JSON request body (default 1M)"),
	O("max-upload", OPT_U64, max_upload, "maximum multipart upload (default 1G)"),
	O("max-connections", OPT_UNSIGNED, max_connections, "maximum concurrent connections (default 128)"),
	O("max-connections-per-ip", OPT_UNSIGNED, max_connections_per_ip, "per client address (default 128)"),
	O("connection-timeout", OPT_UNSIGNED, connection_timeout, "idle connection timeout, seconds (default 60)"),
	O("max-header-bytes", OPT_SIZE, max_header_bytes, "memory for request headers per connection (default 32K)"),
	O("max-sessions", OPT_UNSIGNED, max_sessions, "maximum live sessions (default 64)"),
	O("quota-bytes", OPT_U64, quota_bytes, "per-session upper quota in bytes, 0 = none (default 1G)"),
	O("quota-inodes", OPT_U64, quota_inodes, "per-session upper quota in inodes, 0 = none (default 100000)"),
	O("default-idle-timeout", OPT_UNSIGNED, default_idle_timeout, "idle timeout when a session gives none, seconds (default 0 = never)"),
	O("max-run-timeout", OPT_UNSIGNED, max_run_timeout, "cap and default for timeout_seconds (default 3600)"),
	O("max-run-log", OPT_U64, max_run_log, "bytes kept per background run log (default 64M)"),
	O("allow-network", OPT_BOOL, allow_network, "let sessions ask for share_net (default false)"),
	O("allow-writable", OPT_STRV, allowed_writable, "prefix allowed in extra_writable (repeatable)"),
	O("allow-bind", OPT_STRV, allowed_binds, "prefix allowed as a bind source (repeatable)"),
	O("hide", OPT_HIDE_DIRS, hidden, "host dir every run's sandbox sees as an empty dir (repeatable; not /dev, /proc, /sys, /run, /tmp, /var/tmp or above)"),
	O("allow-root-owner", OPT_BOOL, allow_root_owner, "allow workspaces owned by root: the sandbox then acts as root on them (default false)"),
	O("idmap", OPT_BOOL, idmap, "idmapped mounts for rw/ro sessions (default true; ro falls back to a read-only draftfs)"),
	O("draftfs", OPT_STRING, draftfs, "draftfs binary (default: next to draftboxd, then PATH)"),
	O("launcher", OPT_STRING, launcher, "draftbox-run binary (default: next to draftboxd, then PATH)"),
	O("uid-pool-base", OPT_UID, uid_pool_base, "first sandbox uid (default 10000)"),
	O("uid-pool-size", OPT_UNSIGNED, uid_pool_size, "number of sandbox uids (default 1000)"),
	O("log-structured", OPT_BOOL, log_structured, "logfmt log lines (default true)"),
};
#undef O

int api_config_init(struct api_config *c)
{
	*c = (struct api_config){
		.port = API_DEFAULT_PORT,
		.auth = true,
		.max_body = 1024 * 1024,
		.max_upload = 1024ULL * 1024 * 1024,
		.max_connections = 128,
		.max_connections_per_ip = 128,
		.connection_timeout = 60,
		.max_header_bytes = 32 * 1024,
		.max_sessions = 64,
		.quota_bytes = 1024ULL * 1024 * 1024,
		.quota_inodes = 100000,
		.max_run_timeout = 3600,
		.max_run_log = 64ULL * 1024 * 1024,
		.uid_pool_base = API_DEFAULT_UID_POOL_BASE,
		.uid_pool_size = API_DEFAULT_UID_POOL_SIZE,
		.log_structured = true,
		.idmap = true,
	};
	c->listen_address = strdup("127.0.0.1");
	c->state_dir = strdup("/var/lib/draftbox");
	if (!c->listen_address || !c->state_dir)
		return -ENOMEM;
	return 0;
}

void api_config_done(struct api_config *c)
{
	free(c->listen_address);
	free(c->unix_socket);
	free(c->state_dir);
	free(c->token_file);
	strv_free(c->allowed_hosts);
	strv_free(c->allowed_writable);
	strv_free(c->allowed_binds);
	strv_free(c->hidden);
	free(c->draftfs);
	free(c->launcher);
	*c = (struct api_config){};
}

static int parse_u64(const char *s, bool suffixes, uint64_t *ret)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	if (!s || !*s || *s == '-' || *s == ' ')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (suffixes && *end) {
		switch (*end) {
		case 'K': case 'k': mul = 1ULL << 10; break;
		case 'M': case 'm': mul = 1ULL << 20; break;
		case 'G': case 'g': mul = 1ULL << 30; break;
		case 'T': case 't': mul = 1ULL << 40; break;
		default: return -EINVAL;
		}
		end++;
	}
	if (*end)
		return -EINVAL;
	if (v > UINT64_MAX / mul)
		return -ERANGE;
	*ret = v * mul;
	return 0;
}

static int parse_bool(const char *s, bool *ret)
{
	if (!s || !strcmp(s, "1") || !strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
		*ret = true;
	else if (!strcmp(s, "0") || !strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

int api_config_set(struct api_config *c, const char *key, const char *value)
{
	for (size_t i = 0; i < ARRAY_SIZE(opt_defs); i++) {
		const struct opt_def *d = &opt_defs[i];
		void *field = (char *)c + d->offset;
		uint64_t v;
		int r;

		if (strcmp(d->name, key) != 0)
			continue;
		if (d->kind != OPT_BOOL && !value)
			return -EINVAL;
		switch (d->kind) {
		case OPT_STRING: {
			char *copy = strdup(value);

			if (!copy)
				return -ENOMEM;
			free(*(char **)field);
			*(char **)field = copy;
			return 0;
		}
		case OPT_STRV:
			return strv_push((char ***)field, value);
		case OPT_HIDE_DIRS: {
			_cleanup_free_ char *p = NULL;

			if (launch_path_normalize(value, &p) < 0 || launch_hide_covers_sandbox(p))
				return -EINVAL;
			return strv_push((char ***)field, p);
		}
		case OPT_BOOL:
			return parse_bool(value, (bool *)field);
		case OPT_U16:
			r = parse_u64(value, false, &v);
			if (r < 0 || v > UINT16_MAX)
				return -EINVAL;
			*(uint16_t *)field = (uint16_t)v;
			return 0;
		case OPT_UNSIGNED:
			r = parse_u64(value, false, &v);
			if (r < 0 || v > UINT_MAX)
				return -EINVAL;
			*(unsigned *)field = (unsigned)v;
			return 0;
		case OPT_SIZE:
			r = parse_u64(value, true, &v);
			if (r < 0 || v > SIZE_MAX)
				return -EINVAL;
			*(size_t *)field = (size_t)v;
			return 0;
		case OPT_U64:
			r = parse_u64(value, true, &v);
			if (r < 0)
				return -EINVAL;
			*(uint64_t *)field = v;
			return 0;
		case OPT_UID:
			r = parse_u64(value, false, &v);
			if (r < 0 || v == 0 || v >= UINT32_MAX)
				return -EINVAL;
			*(uid_t *)field = (uid_t)v;
			return 0;
		}
	}
	return -ENOENT;
}

static char *strip(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

int api_config_load_file(struct api_config *c, const char *path, unsigned *ret_line)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	unsigned n = 0;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) >= 0) {
		char *s = strip(line), *eq, *key, *value;
		int r;

		n++;
		if (!*s || *s == '#')
			continue;
		eq = strchr(s, '=');
		if (!eq) {
			*ret_line = n;
			return -EINVAL;
		}
		*eq = '\0';
		key = strip(s);
		value = strip(eq + 1);
		r = api_config_set(c, key, value);
		if (r < 0) {
			*ret_line = n;
			return r;
		}
	}
	if (ferror(f))
		return -EIO;
	return 0;
}

static void usage(void)
{
	printf("usage: draftboxd [OPTIONS]\n\n"
	       "HTTP/JSON server of draftbox sessions (OpenSandbox /v1/isolated/* compatible).\n\n"
	       "  --config FILE  read \"key = value\" settings (same keys as the flags)\n");
	for (size_t i = 0; i < ARRAY_SIZE(opt_defs); i++)
		printf("  --%s%s  %s\n", opt_defs[i].name,
		       opt_defs[i].kind == OPT_BOOL ? "[=BOOL]" : "=VALUE", opt_defs[i].help);
	printf("  --help, --version\n");
}

int api_config_parse_argv(struct api_config *c, int argc, char **argv)
{
	struct option longopts[ARRAY_SIZE(opt_defs) + 4];
	size_t n = 0;
	int r, opt, idx;

	for (size_t i = 0; i < ARRAY_SIZE(opt_defs); i++)
		longopts[n++] = (struct option){ opt_defs[i].name,
						  opt_defs[i].kind == OPT_BOOL ? optional_argument : required_argument,
						  NULL, 1000 + (int)i };
	longopts[n++] = (struct option){ "config", required_argument, NULL, 'c' };
	longopts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
	longopts[n++] = (struct option){ "version", no_argument, NULL, 'V' };
	longopts[n] = (struct option){};

	/* First pass: the config file, so flags override it. */
	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "", longopts, &idx)) != -1) {
		if (opt == 'c') {
			unsigned line = 0;

			r = api_config_load_file(c, optarg, &line);
			if (r < 0) {
				if (line)
					log_error("invalid setting at '%s' line %u", optarg, line);
				else
					log_error_errno(r, "cannot read config file '%s'", optarg);
				return -EINVAL;
			}
		}
	}

	optind = 1;
	opterr = 1;
	while ((opt = getopt_long(argc, argv, "", longopts, &idx)) != -1) {
		switch (opt) {
		case 'c':
			break;
		case 'h':
			usage();
			return 1;
		case 'V':
			printf("draftboxd %s\n", DRAFTBOX_VERSION);
			return 1;
		case '?':
			return -EINVAL;
		default:
			r = api_config_set(c, opt_defs[opt - 1000].name, optarg);
			if (r < 0) {
				log_error("invalid value '%s' for --%s", optarg ? optarg : "", opt_defs[opt - 1000].name);
				return -EINVAL;
			}
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

/* Looks for @name next to our own binary, then in the build tree, then in PATH. */
static int find_binary(const char *name, const char *build_sub, char **ret)
{
	char self[PATH_MAX], *slash, *p = NULL;
	ssize_t n;
	const char *path;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			/* build tree: build/api/draftboxd -> build/<sub>/<name> */
			if (asprintf(&p, "%s/../%s/%s", self, build_sub, name) < 0)
				return -ENOMEM;
			if (access(p, X_OK) == 0)
				goto found;
			free(p);
			if (asprintf(&p, "%s/%s", self, name) < 0)
				return -ENOMEM;
			if (access(p, X_OK) == 0)
				goto found;
			free(p);
		}
	}
	path = getenv("PATH");
	if (!path)
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	while (*path) {
		size_t len = strcspn(path, ":");

		if (asprintf(&p, "%.*s/%s", (int)len, path, name) < 0)
			return -ENOMEM;
		if (access(p, X_OK) == 0)
			goto found;
		free(p);
		path += len;
		if (*path == ':')
			path++;
	}
	return -ENOENT;
found:
	{
		char *real = realpath(p, NULL);

		free(p);
		if (!real)
			return -errno;
		*ret = real;
	}
	return 0;
}

int api_config_finish(struct api_config *c)
{
	char *abs;
	int r;

	abs = realpath(c->state_dir, NULL);
	if (!abs) {
		if (errno != ENOENT)
			return -errno;
		if (c->state_dir[0] != '/') {
			char cwd[PATH_MAX];

			if (!getcwd(cwd, sizeof(cwd)))
				return -errno;
			if (asprintf(&abs, "%s/%s", cwd, c->state_dir) < 0)
				return -ENOMEM;
		} else {
			abs = strdup(c->state_dir);
			if (!abs)
				return -ENOMEM;
		}
	}
	free(c->state_dir);
	c->state_dir = abs;

	if (!c->token_file && asprintf(&c->token_file, "%s/token", c->state_dir) < 0)
		return -ENOMEM;
	if (!c->draftfs) {
		r = find_binary("draftfs", "fs", &c->draftfs);
		if (r == -ENOMEM)
			return r;
	}
	if (!c->launcher) {
		r = find_binary("draftbox-run", "launcher", &c->launcher);
		if (r == -ENOMEM)
			return r;
	}
	if (c->uid_pool_size == 0 || (uint64_t)c->uid_pool_base + c->uid_pool_size >= UINT32_MAX)
		return -ERANGE;
	return 0;
}
