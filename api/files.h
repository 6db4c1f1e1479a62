/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * File operations on a session's mounted view, for the OpenSandbox-compatible
 * /v1/isolated/session/{id}/files/... and /directories/... routes. Nothing here
 * knows about HTTP: the server parses the request, calls these functions and
 * maps the -errno they return with api_errno_to_code().
 *
 * Paths. API paths are what code inside the sandbox sees. An absolute path
 * must be the session's workspace path (root->prefix, where the view is
 * mounted inside the sandbox) or lie below it; it is mapped onto the view
 * root. Anything else absolute is -EXDEV ("outside the workspace"). A
 * relative path is taken relative to the workspace. "..", NUL bytes, and
 * components over NAME_MAX are -EINVAL/-ENAMETOOLONG; "." and "//" are
 * folded. Every path is then walked below root->root_fd without following
 * any symlink, in any component (-ELOOP), and without leaving the root
 * (-EXDEV). A symlink planted by sandboxed code is therefore never followed:
 * info, list and search report it as type "symlink", the other operations
 * refuse it (-ELOOP), and remove/move act on the link itself.
 *
 * Ownership. Files and directories created here belong to root->uid and
 * root->gid (the session's pool uid), unless the request gives an owner or
 * group, so sandboxed code can edit them.
 *
 * Formats follow OpenSandbox execd: FileInfo objects are
 *   {"path", "type", "size", "modified_at", "created_at", "owner", "group", "mode"}
 * with "path" the absolute sandbox path, "type" one of "file", "directory",
 * "symlink", "other", times RFC 3339 in UTC ("2025-11-16T14:30:45.123456789Z",
 * created_at is the birth time where the filesystem records it, else the
 * change time), owner/group as names (the numeric id when the host has no
 * name for it), and "mode" the permission bits written in octal digits but
 * sent as a JSON integer: 0644 is sent as 644, 04755 as 4755.
 */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"

/* A session's view, as the files functions see it. The server owns all of it. */
struct api_files_root {
	int root_fd;        /* O_PATH|O_DIRECTORY fd of the mounted view (the workspace root) */
	const char *prefix; /* absolute path of the workspace inside the sandbox, e.g. "/home/u/proj"; NULL: "/" */
	uid_t uid;          /* owner of new files and directories (the session's pool uid) */
	gid_t gid;
};

/* Limits for the walking operations. Zero fields take the defaults below. */
struct api_walk_limits {
	unsigned max_depth;   /* levels below the start directory; list counts its own depth from 1 */
	size_t max_results;   /* entries returned */
	size_t max_visited;   /* entries looked at, matched or not */
};
#define API_WALK_DEFAULT_DEPTH 32u
#define API_WALK_MAX_DEPTH 128u          /* hard cap: each level holds one fd */
#define API_WALK_DEFAULT_RESULTS 10000u
#define API_WALK_DEFAULT_VISITED 200000u

/* Largest file files/replace will rewrite (it holds the whole file in memory). */
#define API_REPLACE_MAX_SIZE (64u * 1024u * 1024u)

/* Metadata from an upload, a mkdir or a permissions request. */
struct api_file_meta {
	int mode;           /* permission bits (0..07777), or -1: keep / default */
	const char *owner;  /* user name or numeric id, or NULL: root->uid (new) / unchanged */
	const char *group;  /* group name or numeric id, or NULL: root->gid (new) / unchanged */
};
#define API_FILE_META_INIT { .mode = -1 }

/*
 * Maps -errno from these functions (and the common ones a route meets) to an
 * HTTP status and an OpenSandbox-style error code string (static, never
 * NULL). The table:
 *   ENOENT                          404 FILE_NOT_FOUND
 *   EINVAL, ENAMETOOLONG, EILSEQ    400 INVALID_REQUEST_BODY (the server uses
 *                                       MISSING_QUERY itself for absent params)
 *   EXDEV                           400 PATH_OUTSIDE_WORKSPACE
 *   ELOOP                           400 SYMLINK_NOT_FOLLOWED
 *   EISDIR, ENOTDIR, EFTYPE-ish
 *     (ENODEV, ENXIO)               400 INVALID_FILE
 *   EACCES, EPERM                   403 PERMISSION_DENIED
 *   EROFS                           403 READ_ONLY
 *   EEXIST                          409 FILE_EXISTS
 *   ENOTEMPTY                       409 DIRECTORY_NOT_EMPTY
 *   EBUSY                           409 BUSY
 *   EFBIG                           413 FILE_TOO_LARGE
 *   ENOSPC, EDQUOT                  507 QUOTA_EXCEEDED
 *   ESRCH                           404 SESSION_NOT_FOUND
 *   ENOSYS, EOPNOTSUPP              501 NOT_SUPPORTED
 *   anything else                   500 RUNTIME_ERROR
 * @err may be negative or positive. Returns the HTTP status.
 */
unsigned api_errno_to_code(int err, const char **ret_code);

/*
 * Maps an API path onto a clean path relative to the view root (see the top
 * comment). @len is the byte length (the path may come from a URL and must
 * not hide a NUL). On success *ret_rel is a new string ("" is the root).
 * Returns 0, -EINVAL, -ENAMETOOLONG, -EXDEV or -ENOMEM.
 */
int api_files_resolve(const struct api_files_root *root, const char *path, size_t len, char **ret_rel);

/* The absolute sandbox path for @rel (prefix + "/" + rel). Returns 0 or -ENOMEM; *ret is new. */
int api_files_display_path(const struct api_files_root *root, const char *rel, char **ret);

/*
 * Parses {"mode", "owner", "group"} (all optional) from @obj into *ret.
 * "mode" is an integer of octal digits (644) or a string of them ("0644",
 * "644"); other values are -EINVAL. Strings point into @obj. An absent or
 * null @obj gives API_FILE_META_INIT. Returns 0 or -EINVAL.
 */
int api_file_meta_from_json(const cJSON *obj, struct api_file_meta *ret);

/* Resolves a user name or decimal id (host passwd, getpwnam_r). Returns 0, -EINVAL (unknown) or -errno. */
int api_lookup_uid(const char *name, uid_t *ret);
/* Same for groups (getgrnam_r). */
int api_lookup_gid(const char *name, gid_t *ret);

/*
 * FileInfo for one API path (the link itself for a symlink). *ret is a new
 * object whose "path" is the absolute sandbox path. Returns 0 or -errno
 * (-ENOENT when missing).
 */
int api_files_stat(const struct api_files_root *root, const char *path, cJSON **ret);

/*
 * files/info: a new object mapping each of the NULL-terminated @paths (as
 * given) to its FileInfo. Fails on the first path that fails; then, if
 * @ret_failed is not NULL, it gets that path's index. Returns 0 or -errno.
 */
int api_files_info(const struct api_files_root *root, char *const *paths, cJSON **ret, size_t *ret_failed);

/*
 * files/download: opens a regular file for reading (O_RDONLY|O_CLOEXEC; never
 * a FIFO, socket or device: -ENODEV; a symlink: -ELOOP; a directory: -EISDIR). *ret_fd
 * is owned by the caller, *ret_size is its size when opened (for Range and
 * Content-Length; read with pread and stop at that size). Returns 0 or -errno.
 */
int api_files_open_read(const struct api_files_root *root, const char *path, int *ret_fd, uint64_t *ret_size);

/*
 * files/upload, streamed. An upload writes a new temporary file in the
 * target directory (missing parent directories are created, owned by
 * root->uid/gid, mode 0755) and, on commit, renames it over the target in
 * one step, so readers see the old or the new file, never a mix, and an
 * existing file, hard link or symlink at the target is replaced, never
 * written through. Mode: @meta->mode, else the replaced file's mode, else
 * 0644. Owner: @meta->owner/group, else root->uid/gid.
 *
 * api_upload_begin() returns 0 and a new upload in *ret, or -errno (-EISDIR
 * if the target is a directory, -ELOOP if a parent is a symlink). Feed it
 * with api_upload_write() (0 or -errno; -EFBIG past @max_size when non-zero;
 * data is gathered and written in 1 MiB blocks, so a write error such as
 * -EDQUOT may surface on a later write or at commit),
 * then api_upload_commit() (0 or -errno; writes the byte count to
 * *ret_bytes if not NULL). api_upload_free() removes the temporary file if
 * the upload was not committed, and frees it; it accepts NULL. After a
 * failed write or commit the caller still frees it.
 */
struct api_upload;
int api_upload_begin(const struct api_files_root *root, const char *path, const struct api_file_meta *meta,
		     uint64_t max_size, struct api_upload **ret);
int api_upload_write(struct api_upload *u, const void *buf, size_t size);
int api_upload_commit(struct api_upload *u, uint64_t *ret_bytes);
void api_upload_free(struct api_upload *u);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct api_upload *, api_upload_free)
#define _cleanup_upload_ _cleanup_(api_upload_freep)

/* Writes @buf as @path in one call: begin, write, commit. Returns 0 or -errno. */
int api_files_write(const struct api_files_root *root, const char *path, const struct api_file_meta *meta,
		    const void *buf, size_t size);

/*
 * Writes everything read from @fd (a file, pipe or socket; read from its
 * current position until EOF, not closed) as @path, atomically like an
 * upload; -EFBIG past @max_size when non-zero. *ret_bytes (if not NULL) gets
 * the size. Returns 0 or -errno.
 */
int api_files_write_fd(const struct api_files_root *root, const char *path, const struct api_file_meta *meta, int fd,
		       uint64_t max_size, uint64_t *ret_bytes);

/*
 * DELETE files: removes a file, symlink or other non-directory (-EISDIR for
 * a directory: use api_dirs_remove()). Returns 0 or -errno.
 */
int api_files_remove(const struct api_files_root *root, const char *path);

/*
 * files/mv: renames @src to @dest inside the view (rename(2) semantics: an
 * existing non-directory @dest is replaced). Missing parents of @dest are
 * created as in uploads. Moving the root, or a directory below itself, is
 * -EINVAL. Returns 0 or -errno.
 */
int api_files_move(const struct api_files_root *root, const char *src, const char *dest);

/*
 * files/permissions: applies @meta to @path: mode if >= 0, owner/group if
 * given (names resolved on the host). Never through a symlink (-ELOOP).
 * Returns 0 or -errno (-EINVAL for an unknown user or group).
 */
int api_files_set_permissions(const struct api_files_root *root, const char *path, const struct api_file_meta *meta);

/*
 * files/replace: replaces every occurrence of @old (non-empty, else -EINVAL)
 * with @new in the regular file @path, keeping its mode and owner, through
 * the atomic upload path. Files over API_REPLACE_MAX_SIZE are -EFBIG.
 * *ret_count (if not NULL) gets the number of replacements; with zero the
 * file is left untouched. Returns 0 or -errno.
 */
int api_files_replace(const struct api_files_root *root, const char *path, const char *old, size_t old_len,
		      const char *new_str, size_t new_len, size_t *ret_count);

/*
 * files/search: walks the directory @path (never through symlinks, never
 * into other mounts) and returns a new JSON array of FileInfo for every
 * non-directory whose name matches the glob @pattern (fnmatch(3) on the
 * name; NULL or "" means "**", every file). Bounded by @limits (NULL:
 * defaults); *ret_truncated (if not NULL) tells whether a limit cut the
 * result short. Returns 0 or -errno (-ENOTDIR if @path is not a directory).
 */
int api_files_search(const struct api_files_root *root, const char *path, const char *pattern,
		     const struct api_walk_limits *limits, cJSON **ret, bool *ret_truncated);

/*
 * directories/list: a new JSON array of FileInfo for the entries below the
 * directory @path down to @depth levels (1: its children only; 0 means 1;
 * capped at API_WALK_MAX_DEPTH), directories included, depth first with
 * each directory's entries sorted by name and a directory before its contents,
 * symlinks reported as such and not entered. Bounded like search.
 * Returns 0 or -errno.
 */
int api_dirs_list(const struct api_files_root *root, const char *path, unsigned depth,
		  const struct api_walk_limits *limits, cJSON **ret, bool *ret_truncated);

/*
 * POST directories: mkdir -p @path. Directories it creates get @meta's mode
 * (default 0755) and owner (default root->uid/gid); existing ones are left
 * alone. A non-directory or symlink on the way is -ENOTDIR/-ELOOP. Returns
 * 0 or -errno.
 */
int api_dirs_create(const struct api_files_root *root, const char *path, const struct api_file_meta *meta);

/*
 * DELETE directories: removes the directory @path and everything below it
 * with an fd-relative unlinkat() walk that never follows a symlink (links
 * are removed, not entered) and never crosses into another mount (-EXDEV).
 * The root itself is -EBUSY; a non-directory is -ENOTDIR. Trees deeper than
 * API_WALK_MAX_DEPTH are -ENAMETOOLONG (partly removed); a directory that
 * keeps getting new entries as fast as they are removed (sandboxed code
 * racing us) gives up with -EBUSY after a bounded number of passes.
 * Returns 0 or -errno.
 */
int api_dirs_remove(const struct api_files_root *root, const char *path);
