/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The commit intent journal: "commit.journal" in the session's state dir.
 * It is written (and fsync'd with its directory) before a commit touches
 * anything, and removed after the commit finished and both file systems
 * were synced. It holds the selection and the options, not the data: the
 * data stays in upper until the commit has finished, so a commit is redone
 * from upper after a crash ("redo" recovery, see docs/fs-control.md). The
 * data of a selected metacopy is a lower file the apply phase may change:
 * a commit with metacopies writes the journal again, marked "staged", once
 * every temp is staged and synced, and a recovery of a staged commit keeps
 * the metacopies' temps instead of staging them again.
 */
#pragma once

#include <stdbool.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "ctl-client.h"
#include "ctl-util.h"

#define OVL_JOURNAL_NAME "commit.journal"

/* 1 if a journal is present in @state_fd, 0 if not, or -errno. */
int ovl_journal_pending(int state_fd);

/*
 * Writes the journal of a commit of @sel with @opts for target @target_fd
 * (identity recorded), durably, replacing the one there. @staged: every
 * temp of the commit is staged and synced. @started: when the commit began
 * (CLOCK_REALTIME_COARSE, before its changes were read); a workspace entry
 * with a later ctime was changed after the checks. Returns 0 or -errno.
 */
int ovl_journal_write(int state_fd, int target_fd, const struct ovl_sel *sel, const struct ovl_commit_opts *opts,
                      bool staged, struct timespec started);

/*
 * Reads the journal: *ret_sel gets the selection, *ret_opts the options
 * (force off, every allow flag on: the checks passed), *ret_staged the
 * staged mark and *ret_started the start time ({0, 0} in a journal of a
 * draftfs before it was recorded). Returns 1 when a journal was read, 0
 * when there is none, -EUCLEAN when it is unreadable or for another
 * target, or -errno.
 */
int ovl_journal_read(int state_fd, int target_fd, struct ovl_sel *ret_sel, struct ovl_commit_opts *ret_opts,
                     bool *ret_staged, struct timespec *ret_started);

/* Removes the journal durably. Returns 0 or -errno. */
int ovl_journal_remove(int state_fd);

/* Makes the directory of @fd durable (fsync on a reopened fd). Returns 0 or -errno. */
int ovl_fsync_dir(int dir_fd);

/* syncfs() of the file system of @fd. Returns 0 or -errno. */
int ovl_syncfs_fd(int fd);
