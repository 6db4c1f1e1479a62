/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Helpers shared by the files-*.c implementation files of api/files.h. Not
 * part of the interface the routes use.
 */
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include "files.h"

/* Resolves @path (NUL-terminated) with api_files_resolve(). */
int api_files_resolve_str(const struct api_files_root *root, const char *path, char **ret_rel);

/*
 * FileInfo JSON for @name below @dir_fd (statx, never following a symlink;
 * @name "" means @dir_fd itself), "path" set to @display. Returns 0 or -errno.
 */
int api_files_info_at(int dir_fd, const char *name, const char *display, cJSON **ret);

/* FileInfo JSON from a struct statx already taken. Returns 0 or -ENOMEM. */
struct statx;
int api_files_info_from_statx(const struct statx *stx, const char *display, cJSON **ret);

/*
 * mkdir -p of @rel below root->root_fd. Directories it creates get @mode
 * (exactly, not masked by the umask) and @uid/@gid. Never follows a symlink
 * (-ELOOP) or goes through a non-directory (-ENOTDIR). Returns an
 * O_PATH|O_DIRECTORY fd of the last directory, or -errno.
 */
int api_mkdir_p_owned(int root_fd, const char *rel, mode_t mode, uid_t uid, gid_t gid);

/* chmod of what an O_PATH fd (never a symlink) points to, through /proc/self/fd. Returns 0 or -errno. */
int api_fchmod_path_fd(int fd, mode_t mode);

/* Opens the parent directory of @rel (not "") below the root; *ret_name points into @rel. Returns fd or -errno. */
int api_open_parent(const struct api_files_root *root, const char *rel, const char **ret_name);

/* The owner given in @meta, resolved, or @def when none is given. Returns 0 or -errno. */
int api_meta_uid(const struct api_file_meta *meta, uid_t def, uid_t *ret);
int api_meta_gid(const struct api_file_meta *meta, gid_t def, gid_t *ret);
