/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The registry of live draftfs mounts: one JSON file per mount in
 * /run/draftfs/mounts/ (override: $DRAFTFS_REGISTRY_DIR) naming the mount's
 * commit target identity (dev/ino of the top lower dir), its control socket,
 * its mountpoint and its pid. After a commit, every other live mount over
 * the same target gets an "invalidate" request for the committed paths, so
 * it sees the new files at once where it has not changed them itself.
 */
#pragma once

#include "ctl-util.h"

/*
 * Registers the mount described by @layers, whose control socket is
 * @socket_path. *ret_name gets the entry's file name for
 * ovl_registry_remove() (caller frees). Returns 0 or -errno.
 */
int ovl_registry_add(const struct ovl_layers *layers, const char *socket_path, char **ret_name);

/* Removes the entry @name. Accepts NULL. */
void ovl_registry_remove(const char *name);

/*
 * Sends "invalidate" for @sel to every other live mount over the same
 * commit target as @layers; drops entries of dead processes on the way.
 * Best effort with a short timeout per mount. Returns how many mounts
 * acknowledged.
 */
int ovl_registry_notify(const struct ovl_layers *layers, const struct ovl_sel *sel);
