/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The content of upper regular files, for the control plane. A full copy
 * holds its own data; a metacopy (metacopy.h) holds only metadata, and its
 * data is a regular file of the lower view: at the file's own path, at the
 * path of an absolute redirect, or at a one-name relative redirect in the
 * file's own parent. What reads an upper file's content (diff, patch,
 * tar, commit staging, prefetch) finds it here; commit also uses
 * ovl_upper_materialize() to give a metacopy its own data before the lower
 * file it depends on changes. Consistent snapshots of upper content while
 * writers write live here too.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "control.h"
#include "ctl-util.h"

/* Where the content of an upper regular file is. */
struct ovl_data_loc {
	bool metacopy; /* false: the upper file holds its own data, the rest is unset */
	char *path;    /* metacopy: the data's path in the lower view (new string) */
	int layer;     /* metacopy: the lower layer holding it */
	struct stat st; /* metacopy: the data file (lstat) */
};

/* Frees what @loc holds and resets it. */
void ovl_data_loc_done(struct ovl_data_loc *loc);
#define _cleanup_data_loc_ _cleanup_(ovl_data_loc_done)

/*
 * Finds the data of upper regular file @name of @dir_fd (any fd of the
 * directory), whose path in the view is @path. (Its size is still the
 * upper file's: see ovl_upper_data_copy().) Costs one getxattr for a
 * file that is not a metacopy. Returns 0 and fills *ret (ret->metacopy
 * tells which kind it is), or -errno: -EBADMSG for a malformed redirect,
 * -EIO when the data is missing from the lower view or is not a regular
 * file. On failure *ret_error (may be NULL) gets an "io" error naming
 * @path. Never follows a symlink.
 */
int ovl_upper_data_locate(const struct ovl_layers *l, int dir_fd, const char *name, const char *path,
                          struct ovl_data_loc *ret, cJSON **ret_error);

/* Same as ovl_upper_data_locate() for an upper regular file already open as @fd (any fd, O_PATH too). */
int ovl_upper_data_locate_fd(const struct ovl_layers *l, int fd, const char *path, struct ovl_data_loc *ret,
                             cJSON **ret_error);

/*
 * Opens the lower data file of the metacopy @loc (from one of the
 * locate functions) read-only with @flags added (O_CLOEXEC|O_NOCTTY
 * always), below its layer root with openat_beneath() (no symlink is
 * followed, nothing outside the layer is reached). It must still be the
 * regular file that was located (-EIO otherwise). Returns the fd, with
 * its stat in *ret_st (may be NULL), or -errno; -EINVAL when @loc is not
 * a metacopy.
 */
int ovl_upper_data_open(const struct ovl_layers *l, const struct ovl_data_loc *loc, int flags, struct stat *ret_st);

/*
 * Copies the content of an upper regular file of size @size (the upper
 * file's, the size the view shows) to @out_fd, from its current offset:
 * with @data_fd < 0 all of @upper_fd; else the metacopy's data @data_fd,
 * @data_size bytes long, cut to @size or zero-extended to it (as the core
 * copies it up; both sizes are equal unless the data changed below the
 * metacopy; @out_fd must then be at offset 0). Returns 0 or -errno.
 */
int ovl_upper_data_copy(int upper_fd, int data_fd, off_t data_size, int out_fd, off_t size);

/*
 * Gives the upper metacopy at view path @path its own data, in place: the
 * file is opened O_WRONLY below the upper, the lower data copied into it
 * (copy_file_range), fdatasync'd, then trusted.overlay.metacopy and
 * trusted.overlay.redirect are removed and the file fsync'd. Its mode,
 * owner, times and xattrs stay as they were. The caller holds the writers
 * back (quiesce) and tells the core (live->changed). A crash at any point
 * leaves a metacopy or a full copy, never a file without its data. Returns
 * 1 when it copied, 0 when @path is no metacopy (any more), or -errno with
 * *ret_error (may be NULL) set.
 */
int ovl_upper_materialize(const struct ovl_layers *l, const char *path, cJSON **ret_error);

/*
 * Calls @cb(path, data_path, userdata) for every upper metacopy outside
 * the selection @skip (NULL: none skipped) whose data is not at its own
 * path (an absolute or relative redirect to another path), in no
 * particular order; the data path is not looked up. A non-zero return of
 * @cb stops the walk and is returned. Never follows a symlink. Returns 0
 * or -errno (-EBADMSG for a malformed redirect) with *ret_error (may be
 * NULL) set when it is not set yet.
 */
int ovl_upper_foreach_redirected(const struct ovl_layers *l, const struct ovl_sel *skip,
                                 int (*cb)(const char *path, const char *data_path, void *userdata), void *userdata,
                                 cJSON **ret_error);

/*
 * A consistent snapshot of the content of a regular file that writers may
 * be changing: upper file @name of @dir_fd at view path @path, whose data
 * may be a metacopy's lower file; with @l NULL a plain file read as it is
 * (a lower layer's). Reads it into memory; if the (upper) file's size,
 * mtime or ctime moved while reading, retries, and after a few tries reads
 * once more with the writers quiesced (@live may be NULL). @max bounds the
 * size (-EFBIG). Returns 0 and *ret / *ret_size (free() it) or -errno.
 */
int ovl_snapshot_read(const struct ovl_layers *l, int dir_fd, const char *name, const char *path,
                      const struct ovl_live *live, size_t max, char **ret, size_t *ret_size);

/*
 * Same as ovl_snapshot_read() but copies into an unnamed temp file in
 * @tmp_dir_fd and returns its fd positioned at 0, with *ret_st the temp
 * file's stat carrying the upper file's mode, owner and mtime.
 */
int ovl_snapshot_tmpfile(const struct ovl_layers *l, int dir_fd, const char *name, const char *path,
                         const struct ovl_live *live, int tmp_dir_fd, int *ret_fd, struct stat *ret_st);

struct ovl_changes;

/*
 * Before a partial commit of @changes (of the selection @sel, not empty)
 * changes the lower view: gives its own data (ovl_upper_materialize) to
 * every upper metacopy outside @sel whose data path is the path of a
 * change that replaces or removes a lower entry, or lies below or above
 * it, so that it keeps showing what it shows now. @live (may be NULL)
 * gets changed() for each; the caller holds the writers back. Each path
 * is added to @done (a JSON array, may be NULL). Returns how many were
 * materialized, or -errno with *ret_error (may be NULL) set.
 */
int ovl_upper_materialize_dependents(const struct ovl_layers *l, const struct ovl_live *live,
                                     const struct ovl_sel *sel, const struct ovl_changes *changes, cJSON *done,
                                     cJSON **ret_error);
