/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The journal's record of the workspace files at a commit's paths that had
 * more than one name when the commit began. The commit's own unlink or
 * replacement of one name moves the ctime of the others (their link count
 * changes), so a recovery cannot judge these by ctime: it compares what the
 * check read of them instead (identity, mode, owner, size, mtime).
 */
#pragma once

#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include <cjson/cJSON.h>

struct ovl_linked {
	dev_t dev;
	ino_t ino;
	mode_t mode; /* with type bits */
	uid_t uid;
	gid_t gid;
	off_t size;
	struct timespec mtime;
};

/* Zero-initialized: empty. Sorted by (dev, ino) once sealed. */
struct ovl_linked_set {
	struct ovl_linked *v;
	size_t n, cap;
};

int ovl_linked_add(struct ovl_linked_set *s, const struct ovl_linked *l);
/* Sorts and drops duplicates (one file at several paths of a commit). */
void ovl_linked_seal(struct ovl_linked_set *s);
/* The record of inode @dev:@ino in a sealed set, or NULL. */
const struct ovl_linked *ovl_linked_find(const struct ovl_linked_set *s, dev_t dev, ino_t ino);
void ovl_linked_done(struct ovl_linked_set *s);

/*
 * As JSON: an array of "DEV:INO:MODE:UID:GID:SIZE:MTIME_SEC:MTIME_NSEC"
 * strings, in decimal (a JSON number, a double, does not hold every 64-bit
 * value; MTIME_SEC may be negative). ovl_linked_to_json() returns NULL on
 * ENOMEM; ovl_linked_from_json() returns 0, -EUCLEAN for a malformed
 * array or entry, or -ENOMEM, and seals the set.
 */
cJSON *ovl_linked_to_json(const struct ovl_linked_set *s);
int ovl_linked_from_json(const cJSON *array, struct ovl_linked_set *ret);
