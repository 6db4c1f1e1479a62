/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * draftboxd settings: built-in defaults, an optional "key = value" config
 * file and command-line flags (which win). Every limit the server enforces
 * lives here, so docs/api.md can list them in one table.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define API_DEFAULT_PORT 44772
#define API_DEFAULT_UID_POOL_BASE 10000 /* the launcher's default pool, 10000-10999 */
#define API_DEFAULT_UID_POOL_SIZE 1000

struct api_config {
	char *listen_address;    /* "127.0.0.1" */
	uint16_t port;           /* 44772; 0 picks a free port (tests) */
	char *unix_socket;       /* listen on a Unix socket instead of TCP */
	char *state_dir;         /* absolute, created 0700 */
	char *token_file;        /* default <state>/token */
	bool auth;               /* token required (default on) */
	char **allowed_hosts;    /* extra Host/Origin names accepted besides loopback */
	size_t max_body;         /* JSON request body, bytes */
	uint64_t max_upload;     /* multipart upload, bytes */
	unsigned max_connections;
	unsigned max_connections_per_ip;
	unsigned connection_timeout; /* seconds of inactivity */
	size_t max_header_bytes; /* per-connection memory for request headers */
	unsigned max_sessions;
	uint64_t quota_bytes;    /* per-session upper, 0 = unlimited */
	uint64_t quota_inodes;
	unsigned default_idle_timeout; /* seconds; 0 = never collected (OpenSandbox default) */
	unsigned max_run_timeout;      /* seconds; cap for timeout_seconds and default for 0 */
	uint64_t max_run_log;          /* bytes kept per background run log */
	bool allow_network;
	char **allowed_writable; /* prefixes allowed in extra_writable */
	char **allowed_binds;    /* prefixes allowed as bind sources */
	char **hidden;           /* host dirs every run hides (besides other sessions' workspaces) */
	bool allow_root_owner;   /* allow mapping the pool uid to uid 0 (any mode) */
	bool idmap;              /* use idmapped mounts for rw/ro sessions when the kernel has them */
	char *draftfs;           /* path of the draftfs binary */
	char *launcher;          /* path of draftbox-run */
	uid_t uid_pool_base;
	unsigned uid_pool_size;
	bool log_structured;
};

/* Fills @c with the documented defaults. Returns 0 or -ENOMEM. */
int api_config_init(struct api_config *c);

/* Frees everything @c owns. Accepts a zeroed struct. */
void api_config_done(struct api_config *c);

/*
 * Applies one setting by its long-option name ("max-sessions", "port", ...).
 * Returns 0, -EINVAL for a bad value or -ENOENT for an unknown key.
 */
int api_config_set(struct api_config *c, const char *key, const char *value);

/* Reads a "key = value" file (# comments, blank lines). Returns 0 or -errno; *ret_line is set on -EINVAL/-ENOENT. */
int api_config_load_file(struct api_config *c, const char *path, unsigned *ret_line);

/*
 * Parses argv (flags as in --help; --config FILE is read first). Returns 0,
 * 1 when --help/--version was printed and the program should exit 0, or
 * -EINVAL after printing the error.
 */
int api_config_parse_argv(struct api_config *c, int argc, char **argv);

/* Resolves relative paths and fills derived defaults (token file, binaries). Returns 0 or -errno. */
int api_config_finish(struct api_config *c);
