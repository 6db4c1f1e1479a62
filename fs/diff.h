/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The change list: what the merged view differs from the lower view in,
 * computed by one readdir + fstatat walk of upper, looking each upper entry
 * up in the lower stack (whiteouts and opaque dirs of lower layers
 * honoured). The output formats (JSON, git patch, OCI tar) and commit all
 * work from it. The content of a metacopy is its lower data file
 * (ctl-data.h).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "ctl-util.h"

enum ovl_ftype {
	OVL_FT_NONE = 0,
	OVL_FT_FILE,
	OVL_FT_DIR,
	OVL_FT_SYMLINK,
	OVL_FT_OTHER, /* device, FIFO, socket */
};

enum ovl_status {
	OVL_ADDED,
	OVL_MODIFIED,
	OVL_DELETED,
	OVL_TYPE_CHANGED,
};

struct ovl_meta {
	mode_t mode; /* with type bits */
	uid_t uid;
	gid_t gid;
	off_t size;
	dev_t rdev;
	struct timespec mtime;
	dev_t dev; /* identity, for conflict checks */
	ino_t ino;
	nlink_t nlink; /* of a workspace entry: its ctime moves when another name of it goes */
	struct timespec ctime;
	char *target; /* symlink target or NULL */
};

struct ovl_change {
	char *path;
	enum ovl_status status;
	enum ovl_ftype old_type, new_type; /* NONE when absent */
	bool content;  /* content differs (or added/deleted/type change) */
	bool metadata; /* mode/owner/mtime/xattrs differ */
	struct ovl_meta old, new;
	int old_layer;      /* lower index holding the old entry, -1 */
	bool own_upper;     /* has its own entry in upper (else implied by an ancestor) */
	bool upper_opaque;  /* upper is an opaque dir */
	bool has_origin;    /* upper carries trusted.draftbox.origin */
	char *origin;       /* its raw value */
	/*
	 * The new side is a metacopy (ctl-data.h): its content is the lower
	 * file @data_path of layer @data_layer (cut or zero-extended to
	 * new.size, the upper file's size, should the two differ).
	 * data_path is NULL only under OVL_DIFF_LENIENT, for a metacopy
	 * whose data is gone (content is then true).
	 */
	bool metacopy;
	char *data_path;
	int data_layer;
};

struct ovl_summary {
	uint64_t added, modified, deleted, type_changed, content_changed, metadata_only;
	uint64_t bytes_added, bytes_removed;
};

struct ovl_changes {
	struct ovl_change *v;
	size_t n, alloc;
	struct ovl_summary summary;
	size_t metacopies; /* upper metacopies in the selection, changes or not */
};

enum {
	OVL_DIFF_ORIGINS = 1 << 0, /* read trusted.draftbox.origin of each change (commit's conflict check) */
	/*
	 * A metacopy whose data is missing or whose redirect is malformed is a
	 * content change (data_path NULL), not an error: for recovery (a
	 * commit may have changed the data already), discard and status.
	 */
	OVL_DIFF_LENIENT = 1 << 1,
	/*
	 * Find the data of every upper regular file (metacopy, data_path), for
	 * the callers that read it (patch, tar, commit). Without it only a file
	 * of the same size as the lower one it shadows is looked at (its content
	 * is compared); the others' content differs by their size or is new,
	 * and they are not known as metacopies (the change list stays right).
	 */
	OVL_DIFF_DATA = 1 << 2,
};

/*
 * Computes the change list of @layers restricted to @sel, sorted with
 * ovl_path_cmp. @flags: OVL_DIFF_*. Returns 0 and *ret (free with
 * ovl_changes_free) or -errno with *ret_error (may be NULL) set: code
 * "io", naming the path when a metacopy's data cannot be found.
 */
int ovl_diff_compute(const struct ovl_layers *layers, const struct ovl_sel *sel, unsigned flags,
                     struct ovl_changes **ret, cJSON **ret_error);

/* Frees a change list. Accepts NULL. */
void ovl_changes_free(struct ovl_changes *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct ovl_changes *, ovl_changes_free)

/*
 * Checks that every selected path names a change or exists in the view.
 * Returns 0 or -ENOENT with an error object listing the unknown paths.
 */
int ovl_diff_check_selection(const struct ovl_layers *layers, const struct ovl_sel *sel,
                             const struct ovl_changes *c, cJSON **ret_error);

/* Names used in the JSON format ("added", ...; "file", ...). Static strings. */
const char *ovl_status_to_string(enum ovl_status s);
const char *ovl_ftype_to_string(enum ovl_ftype t);
/* The file type of a st_mode. */
enum ovl_ftype ovl_ftype_from_mode(mode_t m);

/* The summary as a JSON object (NULL on ENOMEM). */
cJSON *ovl_summary_to_json(const struct ovl_summary *s);

/* Writes the JSON change list document to @fd. Returns 0 or -errno. */
int ovl_diff_write_json(const struct ovl_changes *c, int fd);

/*
 * A lower stack: the lower directories that make up one directory of the
 * lower view, top first, cut at the first opaque one. Fds are real
 * O_RDONLY|O_DIRECTORY fds owned by the stack.
 */
struct ovl_lstack {
	size_t n;
	int fds[16];
	int layer[16];
};

/* Closes the fds of @s and empties it. */
void ovl_lstack_done(struct ovl_lstack *s);

/* The lower stack of the root of all lower layers. Returns 0 or -errno. */
int ovl_lstack_root(const struct ovl_layers *layers, struct ovl_lstack *ret);

/*
 * Looks @name up in @s as overlayfs would: *ret_st and *ret_layer describe
 * the visible entry (returns 1), or returns 0 when there is none. If it is
 * a directory and @ret_child is not NULL, *ret_child gets its stack.
 */
int ovl_lstack_lookup(const struct ovl_lstack *s, const char *name, struct stat *ret_st, int *ret_layer,
                      struct ovl_lstack *ret_child);

/* The names of the lower view of @s (merged, whiteouts applied), sorted, as a new vector and its length. Returns 0 or -errno. */
int ovl_lstack_names(const struct ovl_lstack *s, char ***ret, size_t *ret_n);

/* Walks @path ("" is root) down the lower view. Same returns as ovl_lstack_lookup (for "" the root is a dir). */
int ovl_lower_lookup_path(const struct ovl_layers *layers, const char *path, struct stat *ret_st, int *ret_layer,
                          struct ovl_lstack *ret_stack);
