/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The host dirs a run's sandbox gets an empty tmpfs over. The host root is
 * bound read-only, so without this the sandboxed code reads every file the
 * pool uid may read: users' homes (0755 on many systems), other projects,
 * other sessions' workspaces. The strict profile hides the usual places of
 * users' data; --hide adds dirs, and --hide-if-free adds dirs that are
 * skipped when absent or when they would hide what the run is given
 * (draftboxd passes its other sessions' workspaces so). Whatever the
 * sandbox must see (the workspace, exposed paths, the home dir, the
 * helper) is bound on top afterwards, so it may lie below a hidden dir.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launch.h"
#include "macro.h"

/* Where users keep their data on a Linux host, hidden by the strict profile. */
static const char *const default_hides[] = { "/home", "/root", "/srv", "/mnt", "/media" };

/*
 * Mount points the sandbox gets fresh (bwrap's /dev and /proc, the
 * launcher's /sys, tmpfs over /run, /tmp and, strict, /var/tmp). The
 * hides are mounted after them, so one at or above them would bury them.
 */
static const char *const sandbox_own[] = { "/dev", "/proc", "/sys", "/run", "/tmp", "/var/tmp" };

bool launch_hide_covers_sandbox(const char *dir)
{
	for (size_t i = 0; i < ARRAY_SIZE(sandbox_own); i++)
		if (launch_path_has_prefix(sandbox_own[i], dir))
			return true;
	/* not the host's inside: nothing of the host's to hide there */
	return launch_path_has_prefix(dir, "/dev") || launch_path_has_prefix(dir, "/proc") ||
	       launch_path_has_prefix(dir, "/sys");
}

/* True if hiding @dir would hide something the sandbox is given. */
static bool covers_given(const struct launch_config *c, const char *dir)
{
	if (launch_path_has_prefix(dir, c->workspace_dest))
		return true;
	for (size_t i = 0; i < c->n_exposes; i++)
		if (launch_path_has_prefix(dir, c->exposes[i].dest))
			return true;
	return false;
}

/*
 * Resolves @path into @out. Returns 0 or -errno: -EPERM if it would bury
 * the sandbox's own mounts, -EBUSY if it would hide what the run is given.
 */
static int resolve_one(const struct launch_config *c, const char *path, char **out)
{
	char buf[PATH_MAX];
	struct stat st;

	if (!realpath(path, buf))
		return -errno;
	if (stat(buf, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if (launch_hide_covers_sandbox(buf))
		return -EPERM;
	if (covers_given(c, buf))
		return -EBUSY;
	*out = strdup(buf);
	return *out ? 0 : -ENOMEM;
}

/* Adds @path to @out if it is a dir that hides nothing the run is given; skips it otherwise. */
static int add_if_free(const struct launch_config *c, char ***out, const char *path)
{
	_cleanup_free_ char *p = NULL;

	if (resolve_one(c, path, &p) < 0 || strv_contains(*out, p))
		return 0;
	return strv_push(out, p);
}

int launch_hide_resolve(struct launch_config *c, const char **ret_bad)
{
	_cleanup_strv_free_ char **out = NULL;
	int r;

	for (char **h = c->hides; h && *h; h++) {
		_cleanup_free_ char *p = NULL;

		r = resolve_one(c, *h, &p);
		if (r < 0) {
			*ret_bad = *h;
			return r;
		}
		r = strv_push(&out, p);
		if (r < 0)
			return r;
	}
	/* absent, or covering what the run is given: skipped */
	for (char **h = c->hides_if_free; h && *h; h++) {
		r = add_if_free(c, &out, *h);
		if (r < 0)
			return r;
	}
	if (c->profile == LAUNCH_PROFILE_STRICT && !c->no_default_hides)
		for (size_t i = 0; i < ARRAY_SIZE(default_hides); i++) {
			r = add_if_free(c, &out, default_hides[i]);
			if (r < 0)
				return r;
		}
	strv_free(c->hides);
	c->hides = TAKE_PTR(out);
	return 0;
}
