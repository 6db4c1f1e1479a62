/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The operations of the control plane, run in the process that owns the
 * layers: the daemon (for requests on its socket, with the core's live
 * callbacks) or a host command working offline. ctl-client.c and control.c
 * both call these; the arguments and results are those of ctl-client.h.
 */
#pragma once

#include <cjson/cJSON.h>

#include "ctl-client.h"
#include "ctl-util.h"

int ovl_op_diff(const struct ovl_ctl_env *env, enum ovl_diff_format format, char *const *paths, int out_fd,
                cJSON **ret_result, cJSON **ret_error);
int ovl_op_commit(const struct ovl_ctl_env *env, char *const *paths, const struct ovl_commit_opts *opts,
                  cJSON **ret_result, cJSON **ret_error);
int ovl_op_discard(const struct ovl_ctl_env *env, char *const *paths, cJSON **ret_result, cJSON **ret_error);
int ovl_op_status(const struct ovl_ctl_env *env, cJSON **ret_result, cJSON **ret_error);
int ovl_op_invalidate(const struct ovl_ctl_env *env, char *const *paths, cJSON **ret_result, cJSON **ret_error);
/* @force: finish it over workspace entries changed since the commit began (else a conflict). */
int ovl_op_recover(const struct ovl_ctl_env *env, bool force, cJSON **ret_result, cJSON **ret_error);

/* Name of the format for replies ("json", "patch", "tar"). */
const char *ovl_diff_format_to_string(enum ovl_diff_format f);
