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
#include "journal-linked.h"

#define OVL_JOURNAL_NAME "commit.journal"

/* What a journal records of its commit besides the selection and the options. */
struct ovl_journal_mark {
	bool staged;             /* every temp of the commit is staged and synced */
	struct timespec started; /* when the commit began (CLOCK_REALTIME_COARSE, before its changes were read) */
	struct ovl_linked_set linked; /* its multiply-linked workspace files, as checked (journal-linked.h) */
};

void ovl_journal_mark_done(struct ovl_journal_mark *m);

/* 1 if a journal is present in @state_fd, 0 if not, or -errno. */
int ovl_journal_pending(int state_fd);

/*
 * Writes the journal of a commit of @sel with @opts for target @target_fd
 * (identity recorded) and @mark, durably, replacing the one there. A
 * workspace entry with a ctime from mark->started on was changed after
 * the checks. Returns 0 or -errno.
 */
int ovl_journal_write(int state_fd, int target_fd, const struct ovl_sel *sel, const struct ovl_commit_opts *opts,
                      const struct ovl_journal_mark *mark);

/*
 * Reads the journal: *ret_sel gets the selection, *ret_opts the options
 * (force off, every allow flag on: the checks passed), *ret_mark the rest
 * (a start time of {0, 0} and no linked files in a journal of a draftfs
 * before they were recorded; free it with ovl_journal_mark_done()).
 * Returns 1 when a journal was read, 0 when there is none, -EUCLEAN when
 * it is unreadable or for another target, or -errno.
 */
int ovl_journal_read(int state_fd, int target_fd, struct ovl_sel *ret_sel, struct ovl_commit_opts *ret_opts,
                     struct ovl_journal_mark *ret_mark);

/* Removes the journal durably. Returns 0 or -errno. */
int ovl_journal_remove(int state_fd);

/* Makes the directory of @fd durable (fsync on a reopened fd). Returns 0 or -errno. */
int ovl_fsync_dir(int dir_fd);

/* syncfs() of the file system of @fd. Returns 0 or -errno. */
int ovl_syncfs_fd(int fd);
