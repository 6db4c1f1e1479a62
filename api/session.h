/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Sessions: a workspace, its draftfs view at <state>/sessions/<id>/view, an
 * upper that holds its changes, a sandbox uid held for the session's life,
 * and the runs made in it. The registry owns the sessions; lookups hand out
 * references. Everything a restart needs is in <state>/sessions/<id>/
 * session.json, written atomically.
 *
 * Lock order: registry lock, then a session's lock. Never call out to a
 * child process, the control plane or the filesystem view with either held.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "api.h"
#include "files.h"

enum api_ws_mode {
	API_WS_OVERLAY,
	API_WS_RW,
	API_WS_RO,
};

struct api_run;

struct api_session {
	char id[40];
	struct api_server *srv;
	unsigned refcount;        /* atomic */

	/* Fixed at creation (or load). */
	char *dir;                /* <state>/sessions/<id> */
	char *view;               /* <dir>/view */
	char *workspace;          /* canonical host path of the workspace */
	enum api_ws_mode mode;
	char *profile;            /* "strict" | "balanced" */
	bool share_net;
	char **extra_writable;
	cJSON *binds;             /* normalized [{source, dest, readonly}] */
	char *env_mode;           /* "deny" | "allow" */
	char **env_keys;
	uid_t owner_uid;          /* on-disk owner the sandbox uid maps to */
	gid_t owner_gid;
	uid_t pool_uid;           /* the sandbox uid (= view owner of the workspace's files) */
	gid_t pool_gid;
	int uid_lock_fd;          /* pool lease, -1 when not held */
	unsigned idle_timeout;    /* seconds, 0 = never collected */
	uint64_t created_at;      /* ms */
	int view_fd;              /* O_PATH|O_DIRECTORY of the mounted view */

	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Protected by lock. */
	uint64_t last_run_at;     /* ms; created_at before the first run */
	bool deleted;
	bool busy;                /* a run holds the session (runs are serialized) */
	unsigned ops;             /* file/diff/commit operations in flight */
	struct api_run *current;  /* the run holding busy */
	struct api_run *runs;     /* finished and running background runs, newest first */
	unsigned n_runs;
};

/* Creates <state>/sessions, cleans orphans, re-adopts or remounts saved sessions. Returns 0 or -errno. */
int api_sessions_init(struct api_server *srv);

/* Stops the idle collector and cancels runs; mounts and uppers stay for the next start. */
void api_sessions_shutdown(struct api_server *srv);

/* Frees the (empty) registry after api_sessions_shutdown(). */
void api_sessions_free(struct api_server *srv);

/* Starts the idle collector thread. Returns 0 or -errno. */
int api_sessions_start_gc(struct api_server *srv);

/* Returns a new reference to the live session @id, or NULL (unknown, malformed or deleted id). */
struct api_session *api_session_lookup(struct api_server *srv, const char *id);

/* Takes another reference. */
struct api_session *api_session_ref(struct api_session *s);

/* Drops a reference; the last one frees the session. Accepts NULL. */
void api_session_unref(struct api_session *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct api_session *, api_session_unref)
#define _cleanup_session_ _cleanup_(api_session_unrefp)

/* Creates a session from a POST /session body. Returns 0 and a reference in *ret, or -errno with *err filled. */
int api_session_create(struct api_server *srv, const cJSON *body, struct api_session **ret, struct api_error *err);

/*
 * Deletes @s: refuses new work, cancels its runs, waits for operations in
 * flight, unmounts the view and removes the session dir (upper included).
 * Returns 0, -ESRCH if it was already deleted, or -errno with *err filled.
 */
int api_session_delete(struct api_session *s, bool idle, struct api_error *err);

/* The session's state (GET /session/{id}); @summary: only the list fields. Returns a new object or NULL. */
cJSON *api_session_to_json(struct api_session *s, bool summary);

/* Number of live sessions and a new JSON array of their summaries. */
cJSON *api_sessions_list_json(struct api_server *srv, unsigned *ret_count);

/*
 * The workspaces of every live session but @self (once each, @self's own
 * left out), which @self's runs hide. Returns a new vector (possibly empty)
 * or NULL when out of memory.
 */
char **api_sessions_other_workspaces(struct api_server *srv, const struct api_session *self);

/* Sums the uppers of all sessions (bounded walk). */
void api_sessions_upper_usage(struct api_server *srv, uint64_t *ret_bytes, uint64_t *ret_inodes);

/*
 * Marks an operation in flight (delete waits for it), after reviving a dead
 * view. Returns 0 or -ESRCH when the session is being deleted.
 */
int api_session_op_begin(struct api_session *s);

/*
 * If the session's draftfs has died (the view says ENOTCONN, ECONNABORTED or ECANCELED), unmounts it
 * and mounts a new one over the same upper, so the session goes on with
 * every change it had. Logs what it did; a failure leaves the view dead
 * (requests then fail with their own errors).
 */
void api_session_revive(struct api_session *s);
void api_session_op_end(struct api_session *s);

/* True once a delete has begun: long operations (a download's stream) stop at their next step. */
bool api_session_deleting(struct api_session *s);

/* Records activity for the idle collector and persists last_run_at. */
void api_session_touch(struct api_session *s);

/* Fills @root for the files functions (the view fd stays owned by the session). */
void api_session_files_root(struct api_session *s, struct api_files_root *root);

/* Rewrites session.json. Returns 0 or -errno. */
int api_session_save(struct api_session *s);

/* True if @id looks like one of our session ids (a lowercase UUID). */
bool api_session_id_valid(const char *id);

/* --- session-mount.c --- */

/* Mounts the view of @s for its mode. Returns 0 or -errno with *err filled. */
int api_mount_view(struct api_session *s, struct api_error *err);
/* Unmounts the view (lazily if busy). Returns 0 or -errno. */
int api_umount_view(const char *view);
/* Returns 1 if @path is a mount point (per /proc/self/mountinfo) and its fstype in *ret_fstype if not NULL, 0 if not, -errno. */
int api_mount_info(const char *path, char **ret_fstype);
/* Removes the directory tree @name below @dir_fd without following symlinks or crossing mounts. Returns 0 or -errno. */
int api_rm_rf_at(int dir_fd, const char *name);
/*
 * The mount gate (see session-mount.c): a sandbox being set up holds it
 * shared, a mount or unmount under the state dir holds it exclusively.
 * Any thread may end what another began.
 */
void api_mount_gate_setup_begin(void);
void api_mount_gate_setup_end(void);
void api_mount_gate_change_begin(void);
void api_mount_gate_change_end(void);

/* True if idmapped mounts work on this host (probed once). */
bool api_idmap_supported(void);
