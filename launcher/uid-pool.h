/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The uid pool: each live session runs as its own uid so that no two
 * sessions can signal or ptrace each other. A uid is taken by flock()ing
 * its lock file "<dir>/<uid>.lock" (dir is root-owned, 0700); the kernel
 * drops the lock when the holder's fd is closed, including when it dies,
 * so a crashed holder never leaks a uid. gid = uid.
 *
 * draftboxd links this (launcher_dep) to hold one uid per session and
 * passes it to draftbox-run with --uid/--gid.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#define LAUNCH_UID_POOL_DIR "/run/draftbox/uids"
#define LAUNCH_UID_POOL_LO 10000
#define LAUNCH_UID_POOL_HI 10999

struct launch_uid_lease {
	uid_t uid;
	gid_t gid;
	int lock_fd; /* -1 when not held */
};

#define LAUNCH_UID_LEASE_INIT { .uid = (uid_t)-1, .gid = (gid_t)-1, .lock_fd = -1 }

/*
 * Takes a free uid in [lo, hi] (0 < lo <= hi), creating @dir (0700, root)
 * if needed. Waits up to @timeout_ms (0: try once) for one to become free.
 * On success fills *ret (the caller releases it) and returns 0; -EAGAIN when
 * the pool stayed exhausted, -EINVAL for a bad range, other -errno on I/O
 * errors.
 */
int launch_uid_acquire(const char *dir, uid_t lo, uid_t hi, unsigned timeout_ms, struct launch_uid_lease *ret);

/*
 * Takes exactly @uid if it is free (for re-adopting a session after a
 * restart). Returns 0, -EBUSY if someone holds it, or -errno.
 */
int launch_uid_acquire_one(const char *dir, uid_t uid, struct launch_uid_lease *ret);

/* Releases a lease (closes the lock fd) and resets it. Accepts a released lease. */
void launch_uid_release(struct launch_uid_lease *lease);

/* True if @uid in @dir is currently held by someone (anyone, including us). */
bool launch_uid_is_held(const char *dir, uid_t uid);

/* Parses "LO-HI" into a range. Returns 0 or -EINVAL. */
int launch_parse_uid_range(const char *s, uid_t *ret_lo, uid_t *ret_hi);
