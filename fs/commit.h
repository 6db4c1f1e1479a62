/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Commit: writes selected changes of upper into the commit target (the top
 * lower dir) and drops them from upper, so the view does not change. See
 * docs/fs-control.md for the phases, the journal and the rules.
 */
#pragma once

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "ctl-client.h"
#include "ctl-util.h"

/*
 * Runs a commit of @sel. @recovering skips the checks (they passed when the
 * journal was written) and reuses the journal that is already there.
 * The caller holds the session lock (offline) or is the daemon; commit
 * quiesces writers itself when env->live is set. Returns 0 and *ret_result,
 * or -errno and *ret_error.
 */
int ovl_commit_run(const struct ovl_ctl_env *env, const struct ovl_sel *sel, const struct ovl_commit_opts *opts,
                   bool recovering, cJSON **ret_result, cJSON **ret_error);
