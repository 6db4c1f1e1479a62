/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The git patch format of a change list, produced by libgit2: old and new
 * blobs of the changed paths go into an in-memory object database, batch
 * by batch in git's path order, two trees are built from each batch and
 * diffed with GIT_DIFF_SHOW_BINARY, so
 * modes, symlinks, new/deleted files and binary content come out exactly as
 * `git diff --binary` writes them, and `git apply` takes them back.
 */
#pragma once

#include "diff.h"

/*
 * Writes the patch of @c to @fd, reading content from @env's layers.
 * Entries git cannot carry (paths with a ".git" component, device nodes,
 * FIFOs, sockets; directories are implicit) are left out and their paths
 * appended to @skipped (may be NULL). Returns 0 or -errno.
 */
int ovl_patch_write(const struct ovl_ctl_env *env, const struct ovl_changes *c, int fd, cJSON *skipped);
