/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * bubblewrap's argument vector for one run. The order matters: bwrap
 * applies operations in sequence, so the tmpfs mounts that hide things
 * (/run, /tmp, users' data, the state dir) come before the binds that put the
 * workspace, exposed paths, the home dir and the exec helper back on top.
 * Mount points under the read-only host root must already exist; those
 * under the tmpfs mounts are created by bwrap inside the sandbox.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launch.h"
#include "macro.h"

static int add(char ***v, const char *a)
{
	return strv_push(v, a);
}

static int addf(char ***v, unsigned long long n)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%llu", n);
	return strv_push(v, buf);
}

#define ADD(...)                                                    \
	do {                                                        \
		const char *_a[] = { __VA_ARGS__ };                 \
		for (size_t _i = 0; _i < ARRAY_SIZE(_a); _i++) {    \
			r = add(&args, _a[_i]);                     \
			if (r < 0)                                  \
				return r;                           \
		}                                                   \
	} while (0)

static bool is_dir(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A dir, not a symlink to one. */
static bool is_real_dir(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "--perms 0755 OP PATH": a dir or tmpfs the sandbox uid can walk. */
static int add_0755(char ***args, const char *op, const char *path)
{
	int r = add(args, "--perms");

	if (r >= 0)
		r = add(args, "0755");
	if (r >= 0)
		r = add(args, op);
	if (r >= 0)
		r = add(args, path);
	return r;
}

/*
 * bwrap creates missing mount points' parents 0700, which the sandbox uid
 * could not walk through: create every ancestor of @dest 0755 first
 * (--dir leaves an existing dir alone).
 */
static int add_parents(char ***args, char ***done, const char *dest)
{
	_cleanup_free_ char *p = strdup(dest);
	int r;

	if (!p)
		return -ENOMEM;
	for (char *slash = strchr(p + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		bool seen = false;

		*slash = 0;
		for (char **d = *done; d && *d && !seen; d++)
			seen = strcmp(*d, p) == 0;
		if (!seen) {
			r = strv_push(done, p);
			if (r >= 0)
				r = add_0755(args, "--dir", p);
			if (r < 0)
				return r;
		}
		*slash = '/';
	}
	return 0;
}

/*
 * An empty root-owned 0755 tmpfs at @dest (its parents made walkable
 * first). The dirs add_parents() made below @dest are gone with it, so they
 * are forgotten, to be made again for a bind that needs them.
 */
static int add_tmpfs(char ***args, char ***done, const char *dest)
{
	size_t out = 0;
	int r;

	r = add_parents(args, done, dest);
	if (r < 0)
		return r;
	for (char **d = *done; d && *d; d++)
		if (launch_path_has_prefix(*d, dest))
			free(*d);
		else
			(*done)[out++] = *d;
	if (*done)
		(*done)[out] = NULL;
	return add_0755(args, "--tmpfs", dest);
}

/* In launch_bwrap_args(): the parents of @dest, or a tmpfs at @dest (add_tmpfs()). */
#define PARENTS(dest) OR_RETURN(add_parents(&args, &done, (dest)))
#define TMPFS(dest) OR_RETURN(add_tmpfs(&args, &done, (dest)))
#define OR_RETURN(call)              \
	do {                         \
		r = (call);          \
		if (r < 0)           \
			return r;    \
	} while (0)

int launch_bwrap_args(const struct launch_config *c, const struct launch_plan *p, char ***ret)
{
	_cleanup_strv_free_ char **args = NULL, **done = NULL;
	char num[32];
	int r;

	/*
	 * No --unshare-net: an isolated run's network namespace is made by the
	 * launcher's child before bwrap starts, with the sandbox's sysfs
	 * mounted inside it (sandbox-sys.c); bwrap inherits both.
	 */
	ADD("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup");
	/*
	 * No --as-pid-1: it would make the helper the namespace's init, but
	 * measured here it costs ~3 ms of CPU per run; bwrap's own init reaps.
	 */
	ADD("--new-session", "--die-with-parent");
	ADD("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc");
	/* bwrap's /dev/shm is a root-owned dir: POSIX semaphores and shm need a writable tmpfs */
	snprintf(num, sizeof(num), "%llu", (unsigned long long)c->tmp_size);
	ADD("--perms", "1777", "--size", num, "--tmpfs", "/dev/shm");
	/* host sockets (D-Bus, docker, our server, the uid locks) live under /run */
	ADD("--perms", "0755", "--tmpfs", "/run");
	if (c->profile == LAUNCH_PROFILE_STRICT) {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)c->tmp_size);
		ADD("--perms", "1777", "--size", num, "--tmpfs", "/tmp");
		/* the host's is other processes' lasting temp files; a link (to /tmp, say) is left alone */
		if (is_real_dir("/var/tmp"))
			ADD("--perms", "1777", "--size", num, "--tmpfs", "/var/tmp");
	} else {
		ADD("--bind", "/tmp", "/tmp");
	}
	/* users' data (strict), other sessions' workspaces, --hide (launch_hide_resolve()) */
	for (char **h = c->hides; h && *h; h++)
		TMPFS(*h);
	/* the state dir: every session's upper, work dir and control socket */
	if (c->state_dir && is_dir(c->state_dir))
		TMPFS(c->state_dir);
	if (c->runtime_dir && !launch_path_has_prefix(c->runtime_dir, "/run") && is_dir(c->runtime_dir))
		TMPFS(c->runtime_dir);
	for (char **h = p->hide; h && *h; h++)
		if (is_dir(*h))
			TMPFS(*h);

	PARENTS(c->workspace_dest);
	if (p->ws_fd >= 0) {
		/* by the fd we checked, so the path cannot be swapped meanwhile */
		r = add(&args, c->mode == LAUNCH_MODE_RO ? "--ro-bind-fd" : "--bind-fd");
		if (r >= 0)
			r = addf(&args, (unsigned long long)p->ws_fd);
		if (r < 0)
			return r;
		ADD(c->workspace_dest);
	} else if (c->mode == LAUNCH_MODE_RO) {
		ADD("--ro-bind", p->ws_source, c->workspace_dest);
	} else {
		ADD("--bind", p->ws_source, c->workspace_dest);
	}

	for (size_t i = 0; i < c->n_exposes; i++) {
		const struct launch_expose *e = &c->exposes[i];

		if (e->fd < 0)
			return -EINVAL;
		PARENTS(e->dest);
		r = add(&args, e->rw ? "--bind-fd" : "--ro-bind-fd");
		if (r < 0)
			return r;
		r = addf(&args, (unsigned long long)e->fd);
		if (r < 0)
			return r;
		ADD(e->dest);
	}

	if (p->home_root && !p->home_ephemeral) {
		PARENTS(p->home_root);
		ADD("--bind", p->home_root, p->home_root);
	}
	ADD("--ro-bind", p->helper, LAUNCH_HELPER_DEST);
	ADD("--chdir", c->cwd);
	snprintf(num, sizeof(num), "%d", p->seccomp_fd);
	ADD("--seccomp", num);
	/*
	 * The environment goes in here, not into bwrap's own: bwrap runs as root
	 * on the host, and its dynamic loader would honour LD_PRELOAD, LD_AUDIT,
	 * GCONV_PATH or GLIBC_TUNABLES set through --setenv (or the API's envs).
	 * bwrap is exec'd with none at all and sets these only after it started.
	 */
	ADD("--clearenv");
	for (char *const *e = p->env; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		_cleanup_free_ char *name = eq ? strndup(*e, (size_t)(eq - *e)) : NULL;

		if (!eq || eq == *e)
			return -EINVAL;
		if (!name)
			return -ENOMEM;
		ADD("--setenv", name, eq + 1);
	}

	/* the helper: UID GID STATUS_FD NOFILE FSIZE HOME GO_FD ERR_FD -- COMMAND */
	ADD("--", LAUNCH_HELPER_DEST);
	r = addf(&args, (unsigned long long)p->uid);
	if (r >= 0)
		r = addf(&args, (unsigned long long)p->gid);
	if (r >= 0)
		r = addf(&args, (unsigned long long)p->status_fd);
	if (r >= 0)
		r = addf(&args, (unsigned long long)c->nofile);
	if (r >= 0)
		r = addf(&args, (unsigned long long)c->fsize);
	if (r >= 0)
		r = add(&args, p->home_ephemeral ? p->home_root : "-");
	if (r >= 0)
		r = addf(&args, (unsigned long long)p->go_fd);
	if (r >= 0)
		r = addf(&args, (unsigned long long)p->err_fd);
	if (r < 0)
		return r;
	ADD("--");
	for (char **a = c->argv; a && *a; a++)
		ADD(*a);

	*ret = TAKE_PTR(args);
	return 0;
}
