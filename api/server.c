// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * draftboxd's lifecycle (see server.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "log.h"
#include "probe.h"
#include "server.h"
#include "session.h"

static int open_state_dir(struct api_server *srv)
{
	const char *dir = srv->cfg->state_dir;
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return log_error_errno(-errno, "cannot create state dir '%s'", dir);
	srv->state_fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (srv->state_fd < 0)
		return log_error_errno(-errno, "cannot open state dir '%s'", dir);
	if (fstat(srv->state_fd, &st) < 0)
		return log_error_errno(-errno, "cannot stat state dir '%s'", dir);
	if (st.st_uid != geteuid())
		return log_error_errno(-EPERM, "state dir '%s' is not owned by us", dir);
	{
		int fd = openat(srv->state_fd, "draftboxd.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);

		if (fd < 0)
			return log_error_errno(-errno, "cannot open '%s/draftboxd.lock'", dir);
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = -errno;

			close(fd);
			return log_error_errno(e, "another draftboxd is using state dir '%s'", dir);
		}
		srv->lock_fd = fd; /* held until exit */
	}
	if (st.st_mode & 0077) {
		if (fchmodat(AT_FDCWD, dir, st.st_mode & 0700, 0) < 0)
			return log_error_errno(-errno, "cannot make state dir '%s' private", dir);
		log_warning("made state dir '%s' private (mode 0700)", dir);
	}
	return 0;
}

int api_server_main(struct api_config *cfg)
{
	struct api_server srv = {
		.cfg = cfg,
		.state_fd = -1,
		.sessions_fd = -1,
		.lock_fd = -1,
		.stop_lock = PTHREAD_MUTEX_INITIALIZER,
		.stop_cond = PTHREAD_COND_INITIALIZER,
	};
	sigset_t set;
	int sig, r;

	if (geteuid() != 0)
		log_warning("not running as root: mounts and sandboxes will fail");
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);

	r = open_state_dir(&srv);
	if (r < 0)
		goto out;
	r = api_auth_init(&srv);
	if (r < 0)
		goto out;
	api_probe(&srv);
	r = api_sessions_init(&srv);
	if (r < 0) {
		log_error_errno(r, "cannot restore sessions");
		goto out;
	}
	r = api_sessions_start_gc(&srv);
	if (r < 0) {
		log_error_errno(r, "cannot start the idle collector");
		goto out;
	}
	r = api_http_start(&srv);
	if (r < 0)
		goto out;
	if (cfg->unix_socket)
		log_info("listening on unix:%s", cfg->unix_socket);
	else
		log_info("listening on http://%s:%u", cfg->listen_address, (unsigned)srv.bound_port);

	do {
		if (sigwait(&set, &sig) != 0)
			break;
	} while (sig == SIGHUP);
	log_info("stopping (signal %d); sessions, mounts and uppers stay for the next start", sig);
	r = 0;
out:
	/* cancel runs first: their streams end, so MHD can join the connection threads */
	api_sessions_shutdown(&srv);
	api_http_stop(&srv);
	api_caps_done(&srv.caps);
	api_sessions_free(&srv);
	free(srv.token);
	safe_close(srv.sessions_fd);
	safe_close(srv.state_fd);
	safe_close(srv.lock_fd);
	return r < 0 ? 1 : 0;
}
