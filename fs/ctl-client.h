/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Client API of the draftfs control plane: diff, commit, discard, status,
 * invalidate and recover a draftfs session. The HTTP server (api/) and the
 * `draftfs diff|commit|...` subcommands use it. docs/fs-control.md has the
 * design.
 *
 * A handle talks either to a mounted draftfs through its control socket
 * (ovl_ctl_connect), or works directly on the layers of a session that is
 * not mounted (ovl_ctl_open_offline). Every operation behaves the same way
 * on both.
 *
 * Conventions: every function returns 0 or -errno. On success *ret_result
 * (when the argument is not NULL) gets a new cJSON object owned by the
 * caller. On failure *ret_error (when not NULL) gets a new cJSON object
 * describing the failure, owned by the caller:
 *
 *   { "error": "human readable message, lowercase",
 *     "code": "invalid_path" | "not_found" | "conflict" | "refused" |
 *             "busy" | "invalid_argument" | "io" | "unavailable",
 *     "errno": 22,
 *     "paths": [ "a/b", ... ],               (the paths at fault, if any)
 *     "details": [ { "path": "a/b", "reason": "..." }, ... ] }  (optional)
 *
 * Suggested HTTP mapping for the server: invalid_path/invalid_argument 400,
 * not_found 404, conflict 409, refused 422, busy 423/503, unavailable 503,
 * io 500.
 *
 * Paths: "paths" arguments are NULL-terminated vectors of paths relative to
 * the mount root ("src/main.c", "docs"); NULL or an empty vector means
 * everything. A path selects itself and, if it is a directory, its whole
 * subtree. Absolute paths, "..", empty components after normalization of
 * "./" and "//", NUL bytes, and paths that neither exist in the view nor name
 * a change are errors (code invalid_path or not_found). A path given twice,
 * or inside another given path, is fine.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#include "macro.h"

struct ovl_ctl;

/*
 * Connects to a mounted draftfs. @target is either the mountpoint (the
 * socket is found with getxattr(target, "trusted.draftbox.control"), root
 * only) or the path of the control socket itself ("…/ctl.sock"). Returns 0
 * and *ret, -ENOENT/-ECONNREFUSED when nothing listens, -ENOTSUP when
 * @target is not a draftfs mount, or -errno.
 */
int ovl_ctl_connect(const char *target, struct ovl_ctl **ret);

/*
 * Opens the layers of a session that is not mounted: @lowerdir is a
 * colon-separated list as in the mount option (first = commit target),
 * @upperdir the upper, @workdir the workdir or NULL. The state dir (journal,
 * session lock) is @state_dir, or "<workdir>/draftfs" when @state_dir is
 * NULL; one of the two must be given (-EINVAL otherwise). Read operations
 * work while the session is mounted elsewhere; commit, discard and recover
 * take the session lock and fail with -EBUSY (code "busy") while a draftfs
 * daemon has it mounted.
 * Returns 0 and *ret or -errno.
 */
int ovl_ctl_open_offline(const char *lowerdir, const char *upperdir, const char *workdir, const char *state_dir,
                         struct ovl_ctl **ret);

/* Closes a handle. Accepts NULL. */
void ovl_ctl_close(struct ovl_ctl *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct ovl_ctl *, ovl_ctl_close)
#define _cleanup_ovl_ctl_ _cleanup_(ovl_ctl_closep)

enum ovl_diff_format {
	OVL_DIFF_JSON,  /* the change list, one JSON document (see below) */
	OVL_DIFF_PATCH, /* unified diff in git's format, binary included; `git apply` reproduces it */
	OVL_DIFF_TAR,   /* OCI image layer tar (.wh.NAME whiteouts, .wh..wh..opq opaque markers) */
};

/* Parses "json", "patch" (or "git"), "tar" (or "oci"). Returns 0 and *ret, or -EINVAL. */
int ovl_diff_format_from_string(const char *s, enum ovl_diff_format *ret);

/*
 * Computes what the session changed relative to lower, restricted to @paths,
 * and writes it in @format to @out_fd (any writable fd: file, pipe, socket;
 * written from its current position, not closed). With a live mount the fd
 * is passed to the daemon, which writes it; the call returns when the output
 * is complete. Offline, this process writes it: a pipe whose reader went
 * away raises SIGPIPE (servers ignore it and get -EPIPE). The caller should syncfs() the mountpoint first if processes
 * on the host side may hold dirty pages (ovl_ctl_connect() callers can use
 * ovl_ctl_syncfs()).
 *
 * *ret_result: { "summary": { "added": N, "modified": N, "deleted": N,
 *   "type_changed": N, "total": N, "content_changed": N, "metadata_only": N,
 *   "bytes_added": N, "bytes_removed": N }, "format": "json|patch|tar" }
 *
 * The JSON format written to @out_fd:
 *   { "changes": [ { "path": "a/b", "status": "added|modified|deleted|type_changed",
 *       "type": "file|dir|symlink|other",           (new type; old type when deleted)
 *       "old_type": ..., "content": bool, "metadata": bool,
 *       "opaque": true,                              (only: a dir that replaces the lower one wholesale)
 *       "old": { "mode": 33188, "size": N, "uid": N, "gid": N, "mtime": "sec.nsec", "target": "..." },
 *       "new": { ... } }, ... ],                     (old absent for added, new absent for deleted)
 *     "summary": { ...as above... } }
 * Entries are sorted by path, component by component (a directory comes
 * right before its subtree).
 */
int ovl_ctl_diff(struct ovl_ctl *c, enum ovl_diff_format format, char *const *paths, int out_fd,
                 cJSON **ret_result, cJSON **ret_error);

enum ovl_commit_owner {
	OVL_OWNER_WORKSPACE, /* default: owner of the replaced file, else of the target root */
	OVL_OWNER_PRESERVE,  /* keep the upper file's on-disk uid/gid */
	OVL_OWNER_FIXED,     /* use uid/gid below */
};

struct ovl_commit_opts {
	bool force;          /* commit over paths that changed in the workspace since they were shadowed */
	bool allow_setid;    /* commit setuid/setgid bits (else: refused, code "refused") */
	bool allow_special;  /* commit device nodes, FIFOs and sockets (else: refused) */
	bool allow_xattrs;   /* commit security.* and trusted.* xattrs (else: refused) */
	enum ovl_commit_owner owner;
	uid_t uid;           /* OVL_OWNER_FIXED only */
	gid_t gid;
	bool dry_run;        /* check everything, change nothing; result lists what would be committed */
};

/*
 * Writes the session's changes under @paths into the commit target (the
 * first lower dir) and drops them from upper; the view does not change.
 * Atomic per file, crash-safe across files (intent journal), refuses when
 * the workspace changed under a path since the session shadowed it
 * (code "conflict", "paths" lists them) unless opts->force, and refuses
 * setuid/setgid bits, special files and security./trusted. xattrs (code
 * "refused") unless allowed. A failed commit changes nothing.
 * @opts may be NULL for the defaults.
 *
 * *ret_result: { "committed": [paths], "kept": [ { "path": p, "reason": r } ],
 *   "materialized": [paths], "summary": {...}, "invalidated_mounts": N }
 * "kept" lists deletions that stay in upper as whiteouts because a base
 * layer below the target still has the name. "materialized" lists the
 * metacopies outside a partial commit's selection that got their own data
 * in upper because the commit changed the lower file holding it.
 */
int ovl_ctl_commit(struct ovl_ctl *c, char *const *paths, const struct ovl_commit_opts *opts,
                   cJSON **ret_result, cJSON **ret_error);

/*
 * Drops the session's changes under @paths (all if NULL/empty): the view
 * reverts to lower at once. *ret_result: { "discarded": [paths] }.
 */
int ovl_ctl_discard(struct ovl_ctl *c, char *const *paths, cJSON **ret_result, cJSON **ret_error);

/*
 * Status of the session. *ret_result: { "mounted": bool, "mountpoint": s,
 *   "pid": N, "lowerdirs": [s], "upperdir": s, "state_dir": s,
 *   "summary": {...as diff...}, "upper_bytes": N, "upper_inodes": N,
 *   "journal": "none" | "pending" }
 */
int ovl_ctl_status(struct ovl_ctl *c, cJSON **ret_result, cJSON **ret_error);

/*
 * Asks a live mount to drop its caches for @paths (all if NULL/empty):
 * what another mount over the same workspace sends after a commit.
 * Offline handles: nothing to do, returns 0.
 */
int ovl_ctl_invalidate(struct ovl_ctl *c, char *const *paths, cJSON **ret_result, cJSON **ret_error);

/*
 * Finishes an interrupted commit (the daemon also does this at start).
 * Refuses (code "conflict", "details" lists them) when a workspace entry
 * the commit would replace or delete was changed after the commit began,
 * unless @force; the journal stays then. *ret_result: { "recovered":
 * bool, "paths": N }.
 */
int ovl_ctl_recover(struct ovl_ctl *c, bool force, cJSON **ret_result, cJSON **ret_error);

/*
 * Checks and normalizes one API path of @len bytes (which may contain NUL
 * bytes: they are an error). Returns 0 and *ret (new string, "" is the
 * root), or -EINVAL/-ENAMETOOLONG with *ret_reason set to a static message
 * ("absolute path", "'..' component", "NUL byte", ...).
 */
int ovl_ctl_path_check(const char *path, size_t len, char **ret, const char **ret_reason);

/* syncfs() on the filesystem of @mountpoint so writeback-cached data reaches the daemon. Returns 0 or -errno. */
int ovl_ctl_syncfs(const char *mountpoint);
