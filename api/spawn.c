// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * fork + exec for helper processes, and bounded waits (see spawn.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "spawn.h"

static void child_fail(int err_pipe)
{
	int e = errno;

	(void)!write(err_pipe, &e, sizeof(e));
	_exit(127);
}

int api_spawn_full(const char *const *argv, char *const *envp, int in_fd, int out_fd, int err_fd, int keep_fd,
		   bool new_session, pid_t *ret_pid)
{
	int err_pipe[2], e = 0;
	ssize_t n;
	pid_t pid;

	if (pipe2(err_pipe, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		e = errno;
		close(err_pipe[0]);
		close(err_pipe[1]);
		return -e;
	}
	if (pid == 0) {
		int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
		int fds[4] = { in_fd, out_fd, err_fd, keep_fd };
		int nfds = keep_fd >= 0 ? 4 : 3;
		sigset_t all;

		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		signal(SIGPIPE, SIG_DFL);
		if (null_fd < 0)
			child_fail(err_pipe[1]);
		if (new_session && setsid() < 0)
			child_fail(err_pipe[1]);
		/* Move the sources above 9 first so dup2 onto 0..3 cannot clobber one another. */
		for (int i = 0; i < nfds; i++) {
			int src = fds[i] >= 0 ? fds[i] : null_fd;

			fds[i] = fcntl(src, F_DUPFD_CLOEXEC, 10);
			if (fds[i] < 0)
				child_fail(err_pipe[1]);
		}
		for (int i = 0; i < nfds; i++)
			if (dup2(fds[i], i) < 0)
				child_fail(err_pipe[1]);
		/* Everything else is closed at exec, whatever flags it was opened with. */
		if (syscall(SYS_close_range, (unsigned)nfds, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
			for (int fd = nfds; fd < 4096; fd++)
				if (fd != err_pipe[1])
					fcntl(fd, F_SETFD, FD_CLOEXEC);
		if (envp)
			execve(argv[0], (char *const *)argv, envp);
		else
			execv(argv[0], (char *const *)argv);
		child_fail(err_pipe[1]);
	}
	close(err_pipe[1]);
	n = RETRY_EINTR(read(err_pipe[0], &e, sizeof(e)));
	close(err_pipe[0]);
	if (n == (ssize_t)sizeof(e)) {
		int status;

		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		return -e;
	}
	*ret_pid = pid;
	return 0;
}

int api_spawn_detached(const char *const *argv, int log_fd, pid_t *ret_pid)
{
	int pipefd[2], status;
	pid_t mid, pid = 0;
	ssize_t n;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	mid = fork();
	if (mid < 0) {
		int e = errno;

		close(pipefd[0]);
		close(pipefd[1]);
		return -e;
	}
	if (mid == 0) {
		pid_t grandchild;

		if (setsid() < 0)
			_exit(1);
		grandchild = fork();
		if (grandchild < 0)
			_exit(1);
		if (grandchild > 0) {
			(void)!write(pipefd[1], &grandchild, sizeof(grandchild));
			_exit(0);
		}
		{
			int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
			int lfd = fcntl(log_fd, F_DUPFD_CLOEXEC, 10);
			sigset_t all;

			sigemptyset(&all);
			sigprocmask(SIG_SETMASK, &all, NULL);
			signal(SIGPIPE, SIG_DFL);
			if (null_fd < 0 || lfd < 0 || dup2(null_fd, 0) < 0 || dup2(lfd, 1) < 0 || dup2(lfd, 2) < 0)
				_exit(127);
			if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
				for (int fd = 3; fd < 4096; fd++)
					fcntl(fd, F_SETFD, FD_CLOEXEC);
			execv(argv[0], (char *const *)argv);
			_exit(127);
		}
	}
	close(pipefd[1]);
	n = RETRY_EINTR(read(pipefd[0], &pid, sizeof(pid)));
	close(pipefd[0]);
	while (waitpid(mid, &status, 0) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof(pid) || pid <= 0)
		return -ECHILD;
	*ret_pid = pid;
	return 0;
}

int api_wait_pid(pid_t pid, int timeout_ms, int *ret_status)
{
	_cleanup_close_ int pfd = -1;
	int status;
	pid_t r;

	if (timeout_ms >= 0) {
		pfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (pfd >= 0) {
			struct pollfd p = { .fd = pfd, .events = POLLIN };
			int n = RETRY_EINTR(poll(&p, 1, timeout_ms));

			if (n == 0)
				return -ETIMEDOUT;
		} else {
			struct timespec ts = { 0, 10 * 1000 * 1000 };

			for (int waited = 0;; waited += 10) {
				r = waitpid(pid, &status, WNOHANG);
				if (r == pid) {
					*ret_status = status;
					return 0;
				}
				if (r < 0 && errno != EINTR)
					return -errno;
				if (waited >= timeout_ms)
					return -ETIMEDOUT;
				nanosleep(&ts, NULL);
			}
		}
	}
	do
		r = waitpid(pid, &status, 0);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	*ret_status = status;
	return 0;
}
