/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The contract between the draftfs core (the FUSE daemon: inode table,
 * caches) and the control plane (diff, commit, discard, status, invalidate,
 * the commit journal and the control socket).
 *
 * The core owns the layers and the FUSE session. It hands the control plane
 * a read-only description of the layers (struct ovl_layers) and a small set
 * of callbacks (struct ovl_live) through which the control plane quiesces
 * writers and tells the core which paths it changed behind the kernel's back.
 * The control plane never touches the inode table directly.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ovl_control;

/* What the core tells the control plane about a mount. All fds are owned by the core. */
struct ovl_layers {
	int upper_fd;         /* O_PATH|O_DIRECTORY, the upper dir */
	int work_fd;          /* O_PATH|O_DIRECTORY, the workdir (same fs as upper) */
	int state_fd;         /* O_PATH|O_DIRECTORY, private state dir (0700): control socket, journal */
	size_t n_lower;       /* >= 1 */
	const int *lower_fds; /* O_PATH|O_DIRECTORY, [0] is the top lower = the commit target */
	const char *mountpoint; /* absolute path of the mount, for messages */
	/* ID mapping of the mount (view id -> on-disk id). Identity when NULL. */
	uid_t (*map_uid_to_disk)(void *userdata, uid_t view_uid);
	gid_t (*map_gid_to_disk)(void *userdata, gid_t view_gid);
	void *map_userdata;
};

/* How the core serves the mount, for "status". */
struct ovl_live_info {
	const char *transport;      /* "io_uring" or "/dev/fuse": how requests reach the daemon */
	unsigned queues;            /* io_uring: queues (one per possible CPU) ... */
	unsigned threads_per_queue; /* ... and threads serving each */
	uint64_t ring_requests;     /* io_uring: requests served over the queues so far */
	const char *ring_sched;     /* io_uring: "off" (ring_sched=normal), "parked", "idle" or "backoff" (fs/ring-sched.c) */
	uint64_t ring_sched_backoffs; /* times the queue threads went back to SCHED_OTHER because one starved */
	bool passthrough;           /* the kernel reads files opened read-only from the layers itself */
};

/* Callbacks the core provides. All are thread-safe. */
struct ovl_live {
	void *userdata;
	/*
	 * on=true: waits until no mutating FUSE request is in flight, then
	 * makes new mutating requests wait. on=false lets them go. Hold it
	 * briefly (one file's snapshot, one commit). Not recursive.
	 */
	void (*quiesce)(void *userdata, bool on);
	/*
	 * The control plane changed the layers at @path (relative, "" is the
	 * root) and maybe below it. The core drops what it cached about @path
	 * and its subtree (which layer holds it, its fds, negative entries),
	 * so the next access looks it up again, and invalidates the kernel's
	 * entry, attribute and page caches for it (libfuse notify). May be
	 * called with quiesce held (by the thread that holds it): the core
	 * then drops its own caches at once and sends the kernel
	 * notifications from quiesce(false), after releasing the writers.
	 */
	void (*changed)(void *userdata, const char *path);
	/* Fills what the core reports about itself in "status" (struct ovl_live_info). May be NULL. */
	void (*info)(void *userdata, struct ovl_live_info *ret);
};

/*
 * Starts the control server of a mounted filesystem: a Unix socket
 * "ctl.sock" in layers->state_fd, accepting JSON requests from root or the
 * daemon's uid. Runs its own thread. Returns 0 and *ret, or -errno.
 */
int ovl_control_start(const struct ovl_layers *layers, const struct ovl_live *live, struct ovl_control **ret);

/* Stops the control server and frees it. Accepts NULL. */
void ovl_control_stop(struct ovl_control *c);

/*
 * Finishes or rolls back an interrupted commit found in the journal of
 * layers->state_fd. Called by the core before the mount goes live (and by
 * the "recover" subcommand). Returns 0 (nothing to do or recovered) or -errno.
 */
int ovl_journal_recover(const struct ovl_layers *layers);

/*
 * Entry point of the host-side subcommands: argv[0] is one of "diff",
 * "commit", "discard", "status", "invalidate", "recover". Returns an exit
 * status for main().
 */
int ovl_ctl_main(int argc, char **argv);

/* True if @verb names a control subcommand handled by ovl_ctl_main(). */
bool ovl_ctl_is_subcommand(const char *verb);
