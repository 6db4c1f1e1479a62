// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * What this host can do, for GET /capabilities and for refusing sessions
 * early: `draftbox-run --probe` (bwrap, seccomp, cgroups, privilege drop),
 * whether draftfs is installed and /dev/fuse opens, whether idmapped mounts
 * work (rw/ro sessions), whether the control client was built in, and
 * whether the fuse module serves FUSE over io_uring (draftfs then uses it).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "fdpath.h"
#include "log.h"
#include "probe.h"
#include "session.h"
#include "spawn.h"
#include "uring.h"

static char *probe_message(const cJSON *probe)
{
	const cJSON *missing = cJSON_GetObjectItemCaseSensitive(probe, "missing"), *m;
	char buf[256] = "missing:";
	size_t n = strlen(buf);

	cJSON_ArrayForEach(m, missing)
		if (cJSON_IsString(m))
			n += (size_t)snprintf(buf + n, n < sizeof(buf) ? sizeof(buf) - n : 0, " %s", m->valuestring);
	return strdup(buf);
}

static int run_probe(const char *launcher, cJSON **ret, int *ret_status)
{
	int pipefd[2], status, r;
	_cleanup_free_ char *out = NULL;
	size_t len = 0;
	pid_t pid;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	{
		const char *argv[] = { launcher, "--probe", NULL };

		r = api_spawn(argv, -1, pipefd[1], -1, false, &pid);
	}
	close(pipefd[1]);
	if (r < 0) {
		close(pipefd[0]);
		return r;
	}
	r = read_full_fd(pipefd[0], 1024 * 1024, &out, &len);
	close(pipefd[0]);
	if (api_wait_pid(pid, 30000, &status) < 0) {
		kill(pid, SIGKILL);
		api_wait_pid(pid, -1, &status);
		return -ETIMEDOUT;
	}
	if (r < 0)
		return r;
	*ret = cJSON_ParseWithLength(out, len);
	*ret_status = status;
	return *ret ? 0 : -EBADMSG;
}

void api_probe(struct api_server *srv)
{
	struct api_caps *c = &srv->caps;
	const cJSON *j;
	int status = 0, r, fd;

	c->ctl_available = API_HAVE_CTL;
	c->quota_supported = true; /* draftfs takes quota_bytes=/quota_inodes= and enforces them on every write */
	fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd >= 0)
		close(fd);
	c->draftfs_ok = srv->cfg->draftfs && access(srv->cfg->draftfs, X_OK) == 0 && fd >= 0;
	if (!c->draftfs_ok)
		c->message = strdup(srv->cfg->draftfs ? "draftfs cannot run here (/dev/fuse or the binary)" : "draftfs is not installed");
	c->idmap_rw = srv->cfg->idmap && api_idmap_supported();
	{
		char why[256];

		c->fuse_uring = ovl_uring_available(why, sizeof(why)); /* what draftfs itself checks */
	}

	if (!srv->cfg->launcher) {
		free(c->message);
		c->message = strdup("draftbox-run is not installed");
		return;
	}
	r = run_probe(srv->cfg->launcher, &c->probe, &status);
	if (r < 0) {
		log_warning_errno(r, "draftbox-run --probe failed");
		free(c->message);
		c->message = strdup("draftbox-run --probe failed");
		return;
	}
	c->launcher_found = true;
	j = cJSON_GetObjectItemCaseSensitive(c->probe, "bwrap");
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "version")))
		c->bwrap_version = strdup(cJSON_GetObjectItemCaseSensitive(j, "version")->valuestring);
	j = cJSON_GetObjectItemCaseSensitive(c->probe, "user_namespaces");
	c->userns_available = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "available"));
	j = cJSON_GetObjectItemCaseSensitive(c->probe, "privilege_drop");
	c->setpriv_available = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "verified"));
	j = cJSON_GetObjectItemCaseSensitive(c->probe, "seccomp");
	c->seccomp_available = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "filter_compiles"));
	j = cJSON_GetObjectItemCaseSensitive(c->probe, "cgroup");
	c->cgroup_available = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "version"));
	c->launcher_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	if (!c->launcher_ok) {
		free(c->message);
		c->message = probe_message(c->probe);
	}
	log_info("capabilities: isolation %s, draftfs %s, idmapped mounts %s, diff/commit %s, FUSE io_uring %s",
		 c->launcher_ok ? "full" : "unavailable", c->draftfs_ok ? "ok" : "unavailable",
		 c->idmap_rw ? "ok" : "unavailable", c->ctl_available ? "built in" : "not built",
		 c->fuse_uring ? "on" : "off");
}

void api_caps_done(struct api_caps *c)
{
	free(c->bwrap_version);
	free(c->message);
	cJSON_Delete(c->probe);
	*c = (struct api_caps){};
}
