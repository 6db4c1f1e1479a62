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

enum {
	/* skip the checks (they passed when the journal was written) and reuse the journal that is already there */
	OVL_COMMIT_RECOVERING = 1 << 0,
	/*
	 * with RECOVERING: the journal says staging had finished (and was
	 * synced) before anything was applied, so the staged temps of
	 * metacopies are kept, not staged again from lower data that the
	 * interrupted apply may have changed
	 */
	OVL_COMMIT_STAGED = 1 << 1,
};

/*
 * Runs a commit of @sel. @flags: OVL_COMMIT_*. @started: a recovery's
 * journal's start time (NULL or {0, 0}: unknown, no recovery check), NULL
 * for a new commit. The caller holds the
 * session lock (offline) or is the daemon; commit quiesces writers itself
 * when env->live is set. Returns 0 and *ret_result, or -errno and
 * *ret_error.
 */
int ovl_commit_run(const struct ovl_ctl_env *env, const struct ovl_sel *sel, const struct ovl_commit_opts *opts,
                   unsigned flags, const struct timespec *started, cJSON **ret_result, cJSON **ret_error);
