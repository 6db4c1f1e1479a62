/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * draftbox-run's internal API: the parsed configuration of one run and the
 * pieces that turn it into a bubblewrap sandbox (environment filter, expose
 * rules, seccomp filter, cgroup, bwrap argument vector, the run itself and
 * the host probe). main.c only calls launch_main().
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "strv.h"
#include "uid-pool.h"

enum launch_mode {
	LAUNCH_MODE_OVERLAY,
	LAUNCH_MODE_RW,
	LAUNCH_MODE_RO,
};

enum launch_profile {
	LAUNCH_PROFILE_STRICT,
	LAUNCH_PROFILE_BALANCED,
};

/* Exit statuses of draftbox-run itself (see docs/launcher.md). */
#define LAUNCH_EXIT_TIMEOUT 124
#define LAUNCH_EXIT_FAILURE 125
#define LAUNCH_EXIT_CANNOT_EXEC 126
#define LAUNCH_EXIT_NOT_FOUND 127

#define LAUNCH_DEFAULT_STATE_DIR "/var/lib/draftbox"
#define LAUNCH_DEFAULT_RUNTIME_DIR "/run/draftbox"
#define LAUNCH_DEFAULT_ALLOW_FILE "/etc/draftbox/expose-allow"
#define LAUNCH_DEFAULT_GRACE 2.0
#define LAUNCH_DEFAULT_MEMORY (2ULL << 30)
#define LAUNCH_DEFAULT_PIDS 512
#define LAUNCH_DEFAULT_NOFILE 1024
#define LAUNCH_DEFAULT_FSIZE (4ULL << 30)
#define LAUNCH_DEFAULT_TMP_SIZE (256ULL << 20)
#define LAUNCH_DEFAULT_UID_WAIT 5.0

/*
 * --setenv-from-env reads the variables to set from our own environment, as
 * PREFIX0=K=V, PREFIX1=K=V, ... (private to root, unlike a command line that
 * every host user can read with ps). They never pass into the sandbox as such.
 */
#define LAUNCH_SETENV_PREFIX "DRAFTBOX_SETENV_"

/* Where the exec helper is bound inside the sandbox (/run is a tmpfs there). */
#define LAUNCH_HELPER_DEST "/run/.draftbox-exec"
/* The ephemeral home root (runs without --home-dir), on the sandbox's /run tmpfs. */
#define LAUNCH_EPHEMERAL_HOME "/run/draftbox-home"

/* One --expose rule. */
struct launch_expose {
	char *src;  /* as given; resolved by launch_expose_resolve() */
	char *dest; /* absolute, normalized */
	bool rw;
	int fd;     /* O_PATH of the resolved source (not O_CLOEXEC, for bwrap), -1 until resolved */
};

struct launch_config {
	char *workspace;      /* absolute, normalized */
	enum launch_mode mode;
	char *view;           /* overlay: existing draftfs mount */
	char *session_dir;    /* overlay: where to put upper/work/view */
	bool keep;
	char *workspace_dest; /* default: workspace */
	char *cwd;            /* default: workspace_dest */

	enum launch_profile profile;
	bool share_net;
	struct launch_expose *exposes;
	size_t n_exposes;
	char **allow;         /* allowlist prefixes (strv) */
	char *allow_file;     /* NULL: the default file if it exists */
	char **hides;         /* dirs hidden by a tmpfs (--hide; resolved by launch_hide_resolve()) */
	char **hides_if_free; /* --hide-if-free: the same, skipped if absent or covering what is given */
	bool no_default_hides; /* --no-default-hide: not even the strict profile's */
	char *state_dir;
	char *runtime_dir;
	char *bwrap;
	char *draftfs;

	bool uid_explicit;
	uid_t uid;
	gid_t gid;
	uid_t pool_lo, pool_hi;
	double uid_wait;

	char **env_deny;      /* extra deny globs */
	char **env_allow;     /* allow globs (allow mode) */
	bool env_allow_mode;
	char **setenv;        /* "K=V" */
	char *home_dir;

	double timeout;       /* 0: none */
	double grace;
	uint64_t memory;      /* 0: none */
	uint64_t pids;        /* 0: none */
	double cpu;           /* cores, 0: none */
	uint64_t nofile;
	uint64_t fsize;       /* 0: none */
	uint64_t tmp_size;

	int stdin_fd;         /* -1: /dev/null */
	char *input;
	bool json;
	int json_fd;          /* -1: stdout */
	bool probe;
	bool verbose;

	char **argv;          /* the command */
};

/*
 * Resolves c->hides (realpath; each must be an existing dir, must not
 * cover the sandbox's own mounts (launch_hide_covers_sandbox()), and must
 * not be at or below the workspace destination or an exposed path, which
 * the sandbox must see) and adds the strict profile's defaults (/home,
 * /root, /srv, /mnt, /media, where they exist and hide nothing the run is
 * given) unless c->no_default_hides. c->hides then holds the resolved
 * paths, c->hides_if_free among them where they exist and hide nothing
 * the run is given. Returns 0, or -errno with *ret_bad naming the option's path
 * (-EPERM: it covers the sandbox's own mounts, -EBUSY: it would hide the
 * workspace or an exposed path).
 */
int launch_hide_resolve(struct launch_config *c, const char **ret_bad);
/*
 * True if a tmpfs at @dir would bury what the sandbox mounts itself: @dir is
 * /dev, /proc, /sys, /run, /tmp, /var/tmp or an ancestor of one, or lies in
 * /dev, /proc or /sys (not the host's inside).
 */
bool launch_hide_covers_sandbox(const char *dir);

/* Fills @c with the defaults. */
void launch_config_init(struct launch_config *c);
/* Frees everything @c owns. */
void launch_config_free(struct launch_config *c);

/*
 * Parses the command line into @c (initialized by the caller). Returns 0,
 * 1 when --help/--version was handled (exit 0), or -EINVAL after logging
 * what is wrong.
 */
int launch_parse_args(int argc, char **argv, struct launch_config *c);

/* Parses "123", "4K", "2M", "1.5G" (powers of 1024). Returns 0 or -EINVAL / -ERANGE. */
int launch_parse_size(const char *s, uint64_t *ret);
/* Parses seconds, fractions allowed, >= 0. Returns 0 or -EINVAL. */
int launch_parse_seconds(const char *s, double *ret);

/*
 * Normalizes an absolute path lexically: folds "//", "/./", strips a
 * trailing slash. Rejects relative paths and ".." components (-EINVAL).
 * *ret is a new string.
 */
int launch_path_normalize(const char *path, char **ret);
/* True if @path equals @prefix or lies below it (component-wise). */
bool launch_path_has_prefix(const char *path, const char *prefix);

/* Appends a copy of each @sep-separated item of @s (see strv_push()). Returns 0 or -ENOMEM. */
int launch_strv_push_split(char ***v, const char *s, char sep);

/* --- env.c --- */

/*
 * True if the default policy holds back @name=@value (@value may be NULL):
 * @name matches a default deny glob (case-insensitive), or @value holds a
 * URL with a password.
 */
bool launch_env_default_denied(const char *name, const char *value);

/*
 * Builds the sandbox environment from @host (NULL-terminated "K=V" list):
 * default mode drops what launch_env_default_denied() holds back and
 * names matching c->env_deny; allow mode keeps only names matching c->env_allow. Then
 * c->setenv is applied, then HOME/TMPDIR/XDG_* point below @home_root
 * (skipped when NULL). Returns 0 and a new strv in *ret, or -errno.
 */
int launch_env_build(const struct launch_config *c, char *const *host, const char *home_root, char ***ret);

/* --- expose.c --- */

/* Parses one --expose value. Returns 0 or -EINVAL. */
int launch_expose_parse(const char *spec, struct launch_expose *ret);

/*
 * Loads allowlist prefixes from @path into *allow (resolved with
 * realpath; missing prefixes are skipped). Returns 0, -ENOENT if the
 * file is absent, -EINVAL for a relative line, or -errno.
 */
int launch_allow_load(const char *path, char ***allow);

/*
 * Resolves every expose source (realpath) and checks it against @allow
 * (each resolved too); drops rules overridden by a later rule for the same
 * dest. On failure *ret_bad points at the offending source.
 * Returns 0, -EPERM (outside the allowlist), -ENOENT, or -errno.
 */
int launch_expose_resolve(struct launch_config *c, const char **ret_bad);

/* --- seccomp.c --- */

/*
 * Returns an fd (not O_CLOEXEC, offset at the program) holding the BPF
 * program for @profile / @share_net on the native arch, from the cache in
 * @cache_dir (root-owned 0700, verified before use) or freshly compiled
 * and stored there. Returns the fd or -errno. The musl build (LAUNCH_LITE)
 * cannot compile: a cache miss there is -ENOPKG.
 */
int launch_seccomp_fd(const char *cache_dir, enum launch_profile profile, bool share_net);

/* Compiles the filter and exports it to a new memfd. Returns the fd or -errno (for tests and the probe). */
int launch_seccomp_compile_fd(enum launch_profile profile, bool share_net);

/* --- cgroup.c --- */

enum launch_cgroup_version {
	LAUNCH_CGROUP_NONE = 0,
	LAUNCH_CGROUP_V1 = 1,
	LAUNCH_CGROUP_V2 = 2,
};

struct launch_cgroup {
	enum launch_cgroup_version version;
	char *v2_path;     /* /sys/fs/cgroup/<...>/run-X */
	char *v1_pids;     /* per controller dirs (v1) */
	char *v1_memory;
	char *v1_cpu;
	char *v1_cpuacct;
	char *v1_freezer;
	char *failed;      /* after a failed create: the dir or file the kernel refused, or NULL */
};

/* Detects the cgroup setup: which version has the pids+memory controllers. */
enum launch_cgroup_version launch_cgroup_detect(void);

/*
 * Creates a cgroup named @name for one run and applies the limits.
 * Returns 0 or -errno (-EOPNOTSUPP: no usable cgroup controllers); on
 * failure only ret->failed may be set (launch_cgroup_destroy() frees it).
 */
int launch_cgroup_create(const struct launch_config *c, const char *name, struct launch_cgroup *ret);
/* Moves @pid into the cgroup (all hierarchies). Returns 0 or -errno. */
int launch_cgroup_attach(const struct launch_cgroup *cg, pid_t pid);
/*
 * Moves @pid and every process it has forked so far (recursively, through
 * /proc/PID/task/PID/children) into the cgroup. Each process is moved
 * before its children are listed, so none can escape by forking
 * meanwhile. For a tree that is held at a barrier while this runs.
 * Returns 0 or -errno.
 */
int launch_cgroup_attach_tree(const struct launch_cgroup *cg, pid_t pid);
/*
 * v2 only: the cgroup's cgroup.procs, open for writing, so that a process
 * that cannot allocate (the launcher's CLONE_VM child) can join it by
 * writing "0". Returns the fd or -errno (-EOPNOTSUPP on v1).
 */
int launch_cgroup_join_fd(const struct launch_cgroup *cg);
/* Sends @sig to every process in the cgroup whose uid is not 0 (the sandboxed ones). Returns how many. */
int launch_cgroup_signal_sandboxed(const struct launch_cgroup *cg, int sig);
/* Kills everything in the cgroup (freezing it first) until it is empty or @timeout_ms passes. Returns 0 or -EBUSY. */
int launch_cgroup_kill_all(const struct launch_cgroup *cg, unsigned timeout_ms);
/* Waits (polling) up to @timeout_us for the cgroup to empty by itself. True if it did. */
bool launch_cgroup_wait_empty(const struct launch_cgroup *cg, unsigned timeout_us);
/* Reads peak memory, OOM kills and CPU usage. Missing values are left 0. */
void launch_cgroup_stats(const struct launch_cgroup *cg, uint64_t *peak_bytes, uint64_t *oom_kills, uint64_t *cpu_ns);
/* Kills what is left, removes the cgroup dirs and frees @cg. Accepts an empty one. */
void launch_cgroup_destroy(struct launch_cgroup *cg);

/* --- bwrap-args.c --- */

/* What the run decided before building bwrap's arguments. */
struct launch_plan {
	const char *ws_source;    /* the dir bound as the workspace (view or real dir) */
	int ws_fd;                /* O_PATH of ws_source, bound by fd when >= 0 (not O_CLOEXEC in bwrap) */
	const char *home_root;    /* per-session dir (home, tmp, xdg), bound from the host */
	bool home_ephemeral;      /* home_root lives on the sandbox's /run, made by the helper */
	const char *helper;       /* host path of draftbox-exec */
	int seccomp_fd;
	int status_fd;            /* helper -> launcher status pipe, write end */
	int go_fd;                /* launcher -> helper barrier, read end */
	int err_fd;               /* the caller's stderr, for the command (bwrap's goes to a pipe) */
	uid_t uid;
	gid_t gid;
	char **hide;              /* extra dirs to hide with a tmpfs (session dir) */
	char *const *env;         /* the sandbox's environment ("K=V"), set by bwrap after it started */
};

/*
 * Builds bwrap's argument list (without argv[0], NUL-separated for --args)
 * for @c and @p into a new strv. Returns 0 or -errno.
 */
int launch_bwrap_args(const struct launch_config *c, const struct launch_plan *p, char ***ret);

/*
 * In the launcher's child, before it execs bwrap: new mount namespace (and
 * network namespace when @new_net, with lo up), a fresh read-only sysfs at
 * /sys with the firmware and powercap dirs masked, and the cgroup dir
 * @cgroup_path (absolute, on the host's cgroup2 mount, or NULL) bound
 * read-only at /sys/fs/cgroup. No allocation (CLONE_VM child). Returns 0
 * or -errno with *step naming what failed.
 */
int launch_sandbox_sys(bool new_net, const char *cgroup_path, const char **step);

/* --- run.c / probe.c --- */

/* Runs the whole thing; returns the process exit status. */
int launch_main(int argc, char **argv);

/*
 * Runs c->argv as configured (everything but --probe) and returns the exit
 * status documented in docs/launcher.md. Logs its own errors. Leaves
 * nothing mounted, running or locked behind.
 */
int launch_run(struct launch_config *c);

/* Prints the probe JSON to stdout. Returns 0 if full isolation is available, 1 if not, -errno. */
int launch_probe(const struct launch_config *c);

/* Finds bwrap (c->bwrap or PATH) and the exec helper. Return 0 and a new string, or -ENOENT. */
int launch_find_bwrap(const struct launch_config *c, char **ret);
int launch_find_helper(char **ret);
int launch_find_draftfs(const struct launch_config *c, char **ret);
