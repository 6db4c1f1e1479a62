/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * draftbox-run --probe: what this host offers, as JSON, and whether full
 * isolation is available. "Full" means: bwrap runs, the seccomp filter
 * compiles, a cgroup hierarchy with pids and memory is usable, and a real
 * sandbox run proves the privilege drop (the exec helper checks its uid,
 * gid, groups, capabilities, no_new_privs and that it sits in the initial
 * user namespace, so the uid is the host uid). draftbox-run never falls
 * back to less: a run on a host that lacks any of this fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fsutil.h"
#include "json-util.h"
#include "launch.h"
#include "log.h"
#include "macro.h"

/* First line of `bwrap --version`, e.g. "0.8.0". */
static int bwrap_version(const char *bwrap, char **ret)
{
	int p[2];
	pid_t pid;
	char buf[128] = {};
	ssize_t n, len = 0;
	char *v;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (pid == 0) {
		dup2(p[1], 1);
		execl(bwrap, bwrap, "--version", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while (len < (ssize_t)sizeof(buf) - 1 && (n = read(p[0], buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	close(p[0]);
	waitpid(pid, NULL, 0);
	buf[strcspn(buf, "\n")] = 0;
	v = strrchr(buf, ' ');
	if (!v || !v[1])
		return -EIO;
	*ret = strdup(v + 1);
	return *ret ? 0 : -ENOMEM;
}

static long read_long(const char *path)
{
	char buf[32] = {};
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtol(buf, NULL, 10) : -1;
}

static bool file_has_word(const char *path, const char *word)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	char line[512];

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, word))
			return true;
	return false;
}

/* A real run of `true` in an ro sandbox over an empty dir; 0 if it worked. */
static int verify_run(const struct launch_config *orig)
{
	struct launch_config c;
	_cleanup_free_ char *dir = NULL;
	int saved_err, devnull, status;

	launch_config_init(&c);
	if (asprintf(&dir, "%s/tmp/probe-%d", orig->runtime_dir, (int)getpid()) < 0 ||
	    launch_mkdir_p(dir, 0755) < 0)
		return -EIO;
	c.workspace = strdup(dir);
	c.workspace_dest = strdup(dir);
	c.cwd = strdup(dir);
	c.state_dir = strdup(orig->state_dir);
	c.runtime_dir = strdup(orig->runtime_dir);
	c.bwrap = orig->bwrap ? strdup(orig->bwrap) : NULL;
	c.mode = LAUNCH_MODE_RO;
	c.pool_lo = orig->pool_lo;
	c.pool_hi = orig->pool_hi;
	strv_push(&c.argv, "true");
	if (!c.workspace || !c.workspace_dest || !c.cwd || !c.state_dir || !c.runtime_dir || !c.argv) {
		launch_config_free(&c);
		return -ENOMEM;
	}
	/* keep the probe's stdout pure JSON */
	saved_err = dup(STDOUT_FILENO);
	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull >= 0)
		dup2(devnull, STDOUT_FILENO);
	status = launch_run(&c);
	if (saved_err >= 0) {
		dup2(saved_err, STDOUT_FILENO);
		close(saved_err);
	}
	safe_close(devnull);
	launch_config_free(&c);
	rmdir(dir);
	return status == 0 ? 0 : -EPERM;
}

int launch_probe(const struct launch_config *c)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	_cleanup_cjson_str_ char *text = NULL;
	_cleanup_free_ char *bwrap = NULL, *version = NULL, *setpriv = NULL, *draftfs = NULL, *helper = NULL;
	_cleanup_strv_free_ char **missing = NULL;
	const struct scmp_version *sv = seccomp_version();
	cJSON *j, *arr;
	enum launch_cgroup_version cgv;
	struct launch_config tmp;
	bool seccomp_ok = false, verified = false;
	long max_userns;
	char buf[64];
	int fd;

	if (!o)
		return -ENOMEM;

	j = cJSON_AddObjectToObject(o, "bwrap");
	if (launch_find_bwrap(c, &bwrap) == 0) {
		cJSON_AddStringToObject(j, "path", bwrap);
		if (bwrap_version(bwrap, &version) == 0)
			cJSON_AddStringToObject(j, "version", version);
		else
			cJSON_AddNullToObject(j, "version");
	} else {
		cJSON_AddNullToObject(j, "path");
		strv_push(&missing, "bwrap");
	}

	max_userns = read_long("/proc/sys/user/max_user_namespaces");
	j = cJSON_AddObjectToObject(o, "user_namespaces");
	cJSON_AddBoolToObject(j, "available", max_userns > 0);
	cJSON_AddNumberToObject(j, "max", (double)max_userns);
	cJSON_AddBoolToObject(j, "used", false);

	launch_config_init(&tmp);
	tmp.bwrap = (char *)"setpriv";
	if (launch_find_bwrap(&tmp, &setpriv) == 0)
		cJSON_AddStringToObject(o, "setpriv", setpriv);
	else
		cJSON_AddNullToObject(o, "setpriv");

	j = cJSON_AddObjectToObject(o, "seccomp");
	snprintf(buf, sizeof(buf), "%u.%u.%u", sv->major, sv->minor, sv->micro);
	cJSON_AddStringToObject(j, "libseccomp", buf);
	cJSON_AddBoolToObject(j, "kernel", file_has_word("/proc/self/status", "Seccomp:"));
	fd = launch_seccomp_compile_fd(LAUNCH_PROFILE_STRICT, false);
	seccomp_ok = fd >= 0;
	safe_close(fd);
	cJSON_AddBoolToObject(j, "filter_compiles", seccomp_ok);
	cJSON_AddStringToObject(j, "arch", seccomp_arch_resolve_name("x86_64") == seccomp_arch_native() ? "x86_64" : "native");
	if (!seccomp_ok)
		strv_push(&missing, "seccomp");

	cgv = launch_cgroup_detect();
	j = cJSON_AddObjectToObject(o, "cgroup");
	if (cgv == LAUNCH_CGROUP_NONE) {
		cJSON_AddNullToObject(j, "version");
		strv_push(&missing, "cgroup");
	} else {
		cJSON_AddStringToObject(j, "version", cgv == LAUNCH_CGROUP_V2 ? "v2" : "v1");
	}
	arr = cJSON_AddArrayToObject(j, "controllers");
	{
		static const char *const ctrls[] = { "pids", "memory", "cpu", "cpuacct", "freezer" };

		for (size_t i = 0; i < ARRAY_SIZE(ctrls); i++) {
			bool have;

			if (cgv == LAUNCH_CGROUP_V2) {
				have = file_has_word("/sys/fs/cgroup/cgroup.controllers", ctrls[i]) ||
				       file_has_word("/sys/fs/cgroup/unified/cgroup.controllers", ctrls[i]);
				if (strcmp(ctrls[i], "cpuacct") == 0 || strcmp(ctrls[i], "freezer") == 0)
					have = true; /* built into v2 */
			} else {
				char p[64];
				struct stat st;

				snprintf(p, sizeof(p), "/sys/fs/cgroup/%s", ctrls[i]);
				have = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
			}
			if (have)
				cJSON_AddItemToArray(arr, cJSON_CreateString(ctrls[i]));
		}
	}

	j = cJSON_AddObjectToObject(o, "fuse");
	cJSON_AddBoolToObject(j, "dev_fuse", access("/dev/fuse", R_OK | W_OK) == 0);
	if (launch_find_draftfs(c, &draftfs) == 0)
		cJSON_AddStringToObject(j, "draftfs", draftfs);
	else
		cJSON_AddNullToObject(j, "draftfs");
	cJSON_AddBoolToObject(o, "kernel_overlay", file_has_word("/proc/filesystems", "overlay"));

	j = cJSON_AddObjectToObject(o, "privilege_drop");
	cJSON_AddStringToObject(j, "method", "root bwrap, then draftbox-exec: setgroups(0), setresgid, empty bounding set, setresuid, no_new_privs, verified in the initial user namespace");
	if (launch_find_helper(&helper) == 0)
		cJSON_AddStringToObject(j, "helper", helper);
	else {
		cJSON_AddNullToObject(j, "helper");
		strv_push(&missing, "draftbox-exec");
	}
	if (!missing)
		verified = verify_run(c) == 0;
	cJSON_AddBoolToObject(j, "verified", verified);
	if (!missing && !verified)
		strv_push(&missing, "privilege-drop");

	j = cJSON_AddObjectToObject(o, "uid_pool");
	snprintf(buf, sizeof(buf), "%u-%u", (unsigned)c->pool_lo, (unsigned)c->pool_hi);
	cJSON_AddStringToObject(j, "range", buf);
	{
		_cleanup_free_ char *dir = NULL;

		if (asprintf(&dir, "%s/uids", c->runtime_dir) >= 0)
			cJSON_AddStringToObject(j, "dir", dir);
	}
	cJSON_AddStringToObject(o, "profile", c->profile == LAUNCH_PROFILE_BALANCED ? "balanced" : "strict");
	cJSON_AddStringToObject(o, "isolation", missing ? "unavailable" : "full");
	arr = cJSON_AddArrayToObject(o, "missing");
	for (char **m = missing; m && *m; m++)
		cJSON_AddItemToArray(arr, cJSON_CreateString(*m));

	text = cJSON_Print(o);
	if (!text)
		return -ENOMEM;
	printf("%s\n", text);
	fflush(stdout);
	if (missing)
		log_error("full isolation is not available on this host (missing: %s)", missing[0]);
	return missing ? 1 : 0;
}
