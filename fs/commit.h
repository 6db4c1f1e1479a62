/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Commit: writes selected changes of upper into the commit target (the top
 * lower dir) and drops them from upper, so the view does not change. See
 * docs/fs-control.md for the phases, the journal and the rules.
 */
#pragma once

#include <stdbool.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "ctl-client.h"
#include "ctl-util.h"
#include "journal.h"

/*
 * Runs a commit of @sel. @journal: NULL for a new commit; for a recovery,
 * what the journal of the interrupted one records (the checks are skipped,
 * they passed when it was written, and that journal is reused; a start
 * time of {0, 0}: unknown, no recovery check). The caller holds the
 * session lock (offline) or is the daemon; commit quiesces writers itself
 * when env->live is set. Returns 0 and *ret_result, or -errno and
 * *ret_error.
 */
int ovl_commit_run(const struct ovl_ctl_env *env, const struct ovl_sel *sel, const struct ovl_commit_opts *opts,
                   const struct ovl_journal_mark *journal, cJSON **ret_result, cJSON **ret_error);
