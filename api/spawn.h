/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Starting and reaping helper processes (draftfs, draftbox-run) from a
 * threaded server: fork + exec with only async-signal-safe calls in the
 * child, every other fd closed, and waits with a timeout through a pidfd.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

/*
 * Starts @argv[0] with @argv and the environment @envp (NULL: ours). @in_fd/@out_fd/@err_fd become
 * fds 0/1/2 (-1: /dev/null); @keep_fd (-1: none) becomes fd 3; everything else is closed. With
 * @new_session the child calls setsid() so its process group can be signalled as a whole.
 * Returns 0 and *ret_pid, or -errno.
 */
int api_spawn_full(const char *const *argv, char *const *envp, int in_fd, int out_fd, int err_fd, int keep_fd,
		   bool new_session, pid_t *ret_pid);
#define api_spawn(argv, in, out, err, sess, ret) api_spawn_full(argv, NULL, in, out, err, -1, sess, ret)

/*
 * Starts @argv as a daemon that is not our child (double fork, setsid): it
 * outlives the server and never becomes our zombie. stdin is /dev/null,
 * stdout/stderr go to @log_fd. Returns 0 and its pid in *ret_pid, or -errno.
 */
int api_spawn_detached(const char *const *argv, int log_fd, pid_t *ret_pid);

/*
 * Waits for @pid up to @timeout_ms (-1: forever). Returns 0 and *ret_status,
 * -ETIMEDOUT, or -errno.
 */
int api_wait_pid(pid_t pid, int timeout_ms, int *ret_status);
