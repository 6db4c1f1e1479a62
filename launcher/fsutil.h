/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* File system helpers for the launcher's own dirs; see fsutil.c. */
#pragma once

#include <sys/types.h>

/* mkdir -p: parents 0755, the last one @mode. Existing dirs are fine. Returns 0 or -errno. */
int launch_mkdir_p(const char *path, mode_t mode);

/* Removes @path and everything below it without following symlinks. Returns 0 (also if absent) or -errno. */
int launch_rm_rf(const char *path);

/*
 * Creates @root (0755, if missing) and its subdirs home, tmp, config,
 * cache, state, data, each 0700 and owned by @uid:@gid. Returns 0 or -errno.
 */
int launch_prepare_home(const char *root, uid_t uid, gid_t gid);
