/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Shared helpers of the control plane: the environment an operation runs in
 * (layers + the core's callbacks, or none offline), structured errors, path
 * selections, overlay-format predicates, xattrs and copies (the content of
 * upper files, snapshots of it included: ctl-data.h).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "control.h"
#include "macro.h"

#define OVL_XATTR_OPAQUE "trusted.overlay.opaque"
#define OVL_XATTR_ORIGIN "trusted.draftbox.origin"
#define OVL_XATTR_CONTROL "trusted.draftbox.control"

#define OVL_CTL_SOCKET_NAME "ctl.sock"
/* Names of commit temps in the target ("<prefix><hash of path>"); the lower view ignores them. */
#define OVL_COMMIT_TMP_PREFIX ".#draftfs."
#define OVL_CTL_LOCK_NAME "lock"

/*
 * Takes the session lock ("lock" in the state dir, an exclusive flock held
 * by the daemon while mounted and by offline commits/discards/recoveries).
 * Returns the fd holding it (close to release), -EBUSY when held elsewhere
 * and !@wait, or -errno.
 */
int ovl_ctl_take_lock(int state_fd, bool wait);

/* What an operation works on. @live is NULL when the session is not mounted. */
struct ovl_ctl_env {
	const struct ovl_layers *layers;
	const struct ovl_live *live;
	/* Paths for messages and status; may be NULL. */
	const char *upper_path;
	char **lower_paths;
	const char *state_path;
	/* running inside the daemon (threads for background work, never fork) */
	bool in_daemon;
};

/*
 * Builds the error object documented in ctl-client.h into *ret_error (when
 * not NULL) and returns @r (a -errno). @paths is a list taken over (may be
 * NULL). For codes "io" and "unavailable" the message ends in
 * ": strerror(-r)". Never fails (an allocation failure leaves *ret_error NULL).
 */
int ovl_ctl_error(cJSON **ret_error, int r, const char *code, cJSON *paths, const char *fmt, ...) _printf_(5, 6);

/* A normalized path selection. n == 0 means everything. */
struct ovl_sel {
	char **v;
	size_t n;
};

/* Frees the vector inside @s. */
void ovl_sel_done(struct ovl_sel *s);

/*
 * Checks and normalizes @paths (NULL-terminated, may be NULL) into @s.
 * Returns 0 or -EINVAL with an error object naming the bad path.
 */
int ovl_sel_parse(char *const *paths, struct ovl_sel *s, cJSON **ret_error);

enum ovl_sel_match {
	OVL_SEL_NONE = 0,     /* unrelated: skip the subtree */
	OVL_SEL_ANCESTOR = 1, /* on the way to a selected path: walk, do not report */
	OVL_SEL_INSIDE = 2,   /* selected */
};

/* Where @path ("" is the root) stands relative to the selection. */
enum ovl_sel_match ovl_sel_match(const struct ovl_sel *s, const char *path);

/* True if @path is @prefix or inside it ("" contains everything). */
bool ovl_path_has_prefix(const char *path, const char *prefix);

/* Joins "dir/name" (dir "" gives name). Returns a new string or NULL. */
char *ovl_path_join(const char *dir, const char *name);

/* Compares two relative paths component-wise ('/' sorts first) so a directory's subtree follows it. */
int ovl_path_cmp(const char *a, const char *b);

/* True if @st is an overlay whiteout (char device 0/0). */
static inline bool ovl_is_whiteout(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && st->st_rdev == 0;
}

/* True if the directory open as @dir_fd (a real fd, not O_PATH) carries trusted.overlay.opaque="y". */
bool ovl_dir_is_opaque(int dir_fd);
/* Whether the upper dir @dir_fd carries trusted.overlay.redirect (kernel overlayfs moved it, redirect_dir=on). */
bool ovl_dir_is_redirected(int dir_fd);

/*
 * Reads xattr @name of entry @name_in_dir of @dir_fd without following a
 * symlink (through /proc/self/fd). Returns the length and *ret (new
 * NUL-terminated buffer), -ENODATA when absent, or -errno.
 */
ssize_t ovl_get_xattr_at(int dir_fd, const char *entry, const char *name, char **ret);

/*
 * Lists the xattrs of @entry of @dir_fd that belong to the content (all but
 * trusted.overlay.* and trusted.draftbox.*) as a sorted NULL-terminated
 * vector of "name=hexvalue" strings in *ret (NULL when there are none).
 * Returns the count (>= 0) or -errno.
 */
int ovl_list_xattrs_at(int dir_fd, const char *entry, char ***ret);

/* True if two vectors from ovl_list_xattrs_at() are equal. */
bool ovl_xattrs_equal(char **a, char **b);

/* True if xattr @name is one we never treat as content (trusted.overlay.*, trusted.draftbox.*). */
bool ovl_xattr_is_internal(const char *name);

/* Copies all of @in_fd (from offset 0) to @out_fd (current position). Returns 0 or -errno. */
int ovl_copy_fd(int in_fd, int out_fd, uint64_t size);

/* Removes @name in @dir_fd and everything below it, never following a symlink. 0 if it is already gone, or -errno. */
int ovl_rm_rf_at(int dir_fd, const char *name, unsigned depth);

/* @a at or after @b: file system timestamps are coarse (a clock tick), so "same tick" counts as after. */
bool ovl_ts_not_before(struct timespec a, struct timespec b);

/* A set of inodes (device, inode number). Zero-initialized: empty. */
struct ovl_inoset {
	struct { dev_t dev; ino_t ino; } *v; /* open addressing; ino 0: a free slot */
	size_t n, cap;
};
int ovl_inoset_add(struct ovl_inoset *s, dev_t dev, ino_t ino);
bool ovl_inoset_has(const struct ovl_inoset *s, dev_t dev, ino_t ino);
void ovl_inoset_done(struct ovl_inoset *s);

/*
 * Whether the ctime of @st can have moved with its link count rather than
 * by an edit: a non-directory with more than one link, or in @relinked
 * (the inodes whose link count the caller changed: its own unlink or
 * rename over another name of the file). Such an entry is judged by its
 * mtime.
 */
bool ovl_ctime_follows_links(const struct stat *st, const struct ovl_inoset *relinked);

/* An entry changed at or after @since: its ctime (its mtime, by ovl_ctime_follows_links()) is not before it. */
bool ovl_changed_since(const struct stat *st, struct timespec since, const struct ovl_inoset *relinked);

/*
 * ovl_rm_rf_at(), but each entry is looked at before it goes: at the first
 * one changed since @since (ovl_changed_since(); a directory before its
 * entries) it stops with -EBUSY, leaving that entry and what was not
 * reached yet. Each file unlinked while it had more links goes into
 * @relinked. *ret_removed tells whether anything was removed (on -EBUSY
 * too); @ret_changed, if not NULL, gets the path of the changed entry
 * below @name ("" for @name itself; free it).
 */
int ovl_rm_rf_unchanged_at(int dir_fd, const char *name, struct timespec since, struct ovl_inoset *relinked,
                           bool *ret_removed, char **ret_changed);

/*
 * Moves @name of @dir_fd (an upper entry) into the trash dir "trash" of
 * state dir @state_fd, which must be on the same file system: removing a
 * big subtree costs one rename on the critical path, the unlinks happen
 * later (ovl_trash_purge). Returns 0, -EXDEV when the state dir is on
 * another file system (the caller removes in place), or -errno.
 */
int ovl_trash_move(int state_fd, int dir_fd, const char *name);

/*
 * Empties the trash in the background: a detached thread when @threaded
 * (the daemon), else a detached child process (host commands), so the
 * caller does not wait for thousands of unlinks. Best effort.
 */
void ovl_trash_purge(int state_fd, bool threaded);

/*
 * Test hook for crash tests. Each call is one numbered step of a commit.
 * $DRAFTFS_FAULT="exit:N" makes step N _exit(99); "pause:N:MS" sleeps MS
 * milliseconds there; "count" prints each step to stderr. No-op otherwise.
 */
void ovl_fault_point(const char *what);
