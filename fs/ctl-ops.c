// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The read-side operations (diff, status, invalidate) and the format
 * names. Commit, discard and recover live in commit.c, ctl-discard.c and
 * journal.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl-ops.h"
#include "diff.h"
#include "fdpath.h"
#include "journal.h"
#include "json-util.h"
#include "layertar.h"
#include "metacopy.h"
#include "patch.h"

const char *ovl_diff_format_to_string(enum ovl_diff_format f)
{
	switch (f) {
	case OVL_DIFF_JSON:
		return "json";
	case OVL_DIFF_PATCH:
		return "patch";
	case OVL_DIFF_TAR:
		return "tar";
	}
	return "unknown";
}

int ovl_diff_format_from_string(const char *s, enum ovl_diff_format *ret)
{
	if (!s)
		return -EINVAL;
	if (strcmp(s, "json") == 0)
		*ret = OVL_DIFF_JSON;
	else if (strcmp(s, "patch") == 0 || strcmp(s, "git") == 0)
		*ret = OVL_DIFF_PATCH;
	else if (strcmp(s, "tar") == 0 || strcmp(s, "oci") == 0)
		*ret = OVL_DIFF_TAR;
	else
		return -EINVAL;
	return 0;
}

int ovl_op_diff(const struct ovl_ctl_env *env, enum ovl_diff_format format, char *const *paths, int out_fd,
                cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_(ovl_changes_freep) struct ovl_changes *c = NULL;
	_cleanup_(ovl_sel_done) struct ovl_sel sel = { 0 };
	_cleanup_json_ cJSON *res = NULL, *skipped = NULL;
	int r;

	r = ovl_sel_parse(paths, &sel, ret_error);
	if (r < 0)
		return r;
	r = ovl_diff_compute(env->layers, &sel, format == OVL_DIFF_JSON ? 0 : OVL_DIFF_DATA, &c, ret_error);
	if (r < 0)
		return r;
	r = ovl_diff_check_selection(env->layers, &sel, c, ret_error);
	if (r < 0)
		return r;
	switch (format) {
	case OVL_DIFF_JSON:
		r = ovl_diff_write_json(c, out_fd);
		break;
	case OVL_DIFF_PATCH:
		skipped = cJSON_CreateArray();
		if (!skipped)
			return -ENOMEM;
		r = ovl_patch_write(env, c, out_fd, skipped);
		break;
	case OVL_DIFF_TAR:
		r = ovl_layertar_write(env, c, out_fd, ret_error);
		if (r < 0)
			return r;
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "io", NULL, "cannot write the %s diff",
		                     ovl_diff_format_to_string(format));
	res = cJSON_CreateObject();
	if (!res)
		return -ENOMEM;
	cJSON_AddItemToObject(res, "summary", ovl_summary_to_json(&c->summary));
	cJSON_AddStringToObject(res, "format", ovl_diff_format_to_string(format));
	if (skipped)
		cJSON_AddItemToObject(res, "skipped", TAKE_PTR(skipped));
	if (ret_result)
		*ret_result = TAKE_PTR(res);
	return 0;
}

int ovl_op_status(const struct ovl_ctl_env *env, cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_(ovl_changes_freep) struct ovl_changes *c = NULL;
	struct ovl_sel all = { 0 };
	_cleanup_json_ cJSON *res = NULL;
	uint64_t inodes = 0, bytes = 0;
	cJSON *lowers;
	int r;

	r = ovl_diff_compute(env->layers, &all, OVL_DIFF_LENIENT, &c, ret_error);
	if (r < 0)
		return r;
	r = dir_usage_at(env->layers->upper_fd, ovl_upper_file_bytes, &inodes, &bytes);
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "io", NULL, "cannot walk the upper layer");
	res = cJSON_CreateObject();
	if (!res)
		return -ENOMEM;
	cJSON_AddBoolToObject(res, "mounted", env->live != NULL);
	if (env->live && env->layers->mountpoint)
		cJSON_AddStringToObject(res, "mountpoint", env->layers->mountpoint);
	cJSON_AddNumberToObject(res, "pid", env->live ? getpid() : 0);
	lowers = cJSON_AddArrayToObject(res, "lowerdirs");
	for (size_t i = 0; env->lower_paths && env->lower_paths[i]; i++)
		cJSON_AddItemToArray(lowers, cJSON_CreateString(env->lower_paths[i]));
	if (env->upper_path)
		cJSON_AddStringToObject(res, "upperdir", env->upper_path);
	if (env->state_path)
		cJSON_AddStringToObject(res, "state_dir", env->state_path);
	cJSON_AddItemToObject(res, "summary", ovl_summary_to_json(&c->summary));
	json_add_u64(res, "upper_bytes", bytes);
	json_add_u64(res, "upper_inodes", inodes);
	r = ovl_journal_pending(env->layers->state_fd);
	cJSON_AddStringToObject(res, "journal", r > 0 ? "pending" : "none");
	if (env->live && env->live->info) {
		struct ovl_live_info li = { 0 };
		cJSON *t;

		env->live->info(env->live->userdata, &li);
		t = cJSON_AddObjectToObject(res, "transport");
		cJSON_AddStringToObject(t, "kind", li.transport ? li.transport : "/dev/fuse");
		if (li.queues) {
			cJSON_AddNumberToObject(t, "queues", li.queues);
			cJSON_AddNumberToObject(t, "threads_per_queue", li.threads_per_queue);
			json_add_u64(t, "ring_requests", li.ring_requests);
			cJSON_AddStringToObject(t, "sched", li.ring_sched ? li.ring_sched : "off");
			json_add_u64(t, "sched_backoffs", li.ring_sched_backoffs);
		}
		cJSON_AddBoolToObject(res, "passthrough", li.passthrough);
	}
	if (ret_result)
		*ret_result = TAKE_PTR(res);
	return 0;
}

int ovl_op_invalidate(const struct ovl_ctl_env *env, char *const *paths, cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_(ovl_sel_done) struct ovl_sel sel = { 0 };
	_cleanup_json_ cJSON *res = NULL;
	int r;

	r = ovl_sel_parse(paths, &sel, ret_error);
	if (r < 0)
		return r;
	if (env->live) {
		if (sel.n == 0)
			env->live->changed(env->live->userdata, "");
		for (size_t i = 0; i < sel.n; i++)
			env->live->changed(env->live->userdata, sel.v[i]);
	}
	res = cJSON_CreateObject();
	if (!res)
		return -ENOMEM;
	json_add_u64(res, "invalidated", env->live ? (sel.n ? sel.n : 1) : 0);
	if (ret_result)
		*ret_result = TAKE_PTR(res);
	return 0;
}
