/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * draftbox-exec: the last step inside the sandbox. bwrap runs it as root
 * (in new pid/ipc/uts/mount namespaces, under the seccomp filter); it
 * drops to the session's uid and proves the drop, then starts the command:
 *
 *   1. clear supplementary groups, set the gid, empty the capability
 *      bounding set and the ambient set, set the uid (real, effective,
 *      saved), clear all capabilities, set no_new_privs;
 *   2. verify all of that, and that the process is in the initial user
 *      namespace (uid_map "0 0 4294967295"), so the uid it has here is the
 *      uid it has on the host. Any mismatch: exit 125 without running
 *      anything;
 *   3. fork; the child sets the rlimits (nofile, fsize, core=0) and execs
 *      the command; this process stays as the command's parent, made
 *      non-dumpable, and writes how the command ended ("X code", "S sig",
 *      "E errno", "F reason") to the status fd for draftbox-run, because
 *      bwrap folds a signal into 128+N.
 *
 * Usage (only draftbox-run calls it):
 *   draftbox-exec UID GID STATUS_FD NOFILE FSIZE HOME GO_FD ERR_FD -- COMMAND [ARGS...]
 * FSIZE 0 means unlimited. HOME is "-", or a dir on a sandbox-private
 * tmpfs in which to create home/ tmp/ config/ cache/ state/ data/ owned by
 * UID (an ephemeral home for runs without --home-dir: nothing to clean up
 * on the host). GO_FD is a barrier: the helper waits for one byte on it
 * before doing anything, so draftbox-run can finish moving the sandbox
 * into its cgroup while bwrap sets up (EOF: the launcher is gone, exit).
 * ERR_FD is the caller's real stderr: bwrap's stderr is a pipe to
 * draftbox-run (so its set-up errors can be told apart and retried), and
 * the helper puts the real one back on fd 2 for the command.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXIT_SETUP 125

/*
 * Kernel ABI bits, spelled out so the helper also builds against musl
 * (which ships no kernel headers): capset/capget v3, close_range.
 */
struct cap_header {
	uint32_t version;
	int pid;
};
struct cap_data {
	uint32_t effective, permitted, inheritable;
};
#define CAP_VERSION_3 0x20080522
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define RETRY(expr)                                   \
	({                                            \
		long _r;                              \
		do                                    \
			_r = (long)(expr);            \
		while (_r < 0 && errno == EINTR);     \
		_r;                                   \
	})

static int status_fd = -1;

static void report(char kind, long v)
{
	char buf[64];
	int n;

	if (status_fd < 0)
		return;
	n = snprintf(buf, sizeof(buf), "%c %ld\n", kind, v);
	if (n > 0)
		(void)!write(status_fd, buf, (size_t)n);
}

static void fail(const char *what, int code)
{
	char buf[160];
	int n;

	/* stderr is the command's stderr: say it once, plainly */
	fprintf(stderr, "draftbox-exec: %s\n", what);
	if (status_fd >= 0) {
		n = snprintf(buf, sizeof(buf), "F %s\n", what);
		if (n > 0)
			(void)!write(status_fd, buf, (size_t)n);
	}
	_exit(code);
}

static long parse_num(const char *s)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < 0)
		fail("bad arguments", EXIT_SETUP);
	return (long)v;
}

static int cap_last(void)
{
	int last = 63;
	char buf[16] = {};
	int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, buf, sizeof(buf) - 1) > 0)
			last = atoi(buf);
		close(fd);
	}
	return last;
}

static void drop(uid_t uid, gid_t gid)
{
	struct cap_header hdr = { .version = CAP_VERSION_3, .pid = 0 };
	struct cap_data data[2] = {};
	int last = cap_last();

	if (setgroups(0, NULL) < 0)
		fail("cannot clear supplementary groups", EXIT_SETUP);
	if (setresgid(gid, gid, gid) < 0)
		fail("cannot set gid", EXIT_SETUP);
	for (int c = 0; c <= last; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			fail("cannot empty the capability bounding set", EXIT_SETUP);
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		fail("cannot clear ambient capabilities", EXIT_SETUP);
	if (prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) < 0)
		fail("cannot clear keepcaps", EXIT_SETUP);
	if (setresuid(uid, uid, uid) < 0)
		fail("cannot set uid", EXIT_SETUP);
	if (syscall(SYS_capset, &hdr, data) < 0)
		fail("cannot clear capabilities", EXIT_SETUP);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail("cannot set no_new_privs", EXIT_SETUP);
}

static void make_home(const char *root, uid_t uid, gid_t gid)
{
	static const char *const subs[] = { "home", "tmp", "config", "cache", "state", "data" };
	int root_fd;

	if (strcmp(root, "-") == 0)
		return;
	if (root[0] != '/' || (mkdir(root, 0755) < 0 && errno != EEXIST))
		fail("cannot create the home dir", EXIT_SETUP);
	root_fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root_fd < 0)
		fail("cannot open the home dir", EXIT_SETUP);
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (mkdirat(root_fd, subs[i], 0700) < 0 ||
		    fchownat(root_fd, subs[i], uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			fail("cannot create the home dirs", EXIT_SETUP);
	close(root_fd);
}

static void verify(uid_t uid, gid_t gid)
{
	struct cap_header hdr = { .version = CAP_VERSION_3, .pid = 0 };
	struct cap_data data[2] = {};
	uid_t r, e, s;
	gid_t rg, eg, sg;
	char map[128] = {};
	int last = cap_last(), fd;
	ssize_t n;
	unsigned long a, b, c;

	if (getresuid(&r, &e, &s) < 0 || r != uid || e != uid || s != uid || uid == 0)
		fail("privilege drop check failed: uid", EXIT_SETUP);
	if (getresgid(&rg, &eg, &sg) < 0 || rg != gid || eg != gid || sg != gid || gid == 0)
		fail("privilege drop check failed: gid", EXIT_SETUP);
	if (getgroups(0, NULL) != 0)
		fail("privilege drop check failed: supplementary groups", EXIT_SETUP);
	for (int cap = 0; cap <= last; cap++)
		if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 0)
			fail("privilege drop check failed: bounding set", EXIT_SETUP);
	if (syscall(SYS_capget, &hdr, data) < 0 ||
	    data[0].effective | data[0].permitted | data[0].inheritable |
	    data[1].effective | data[1].permitted | data[1].inheritable)
		fail("privilege drop check failed: capabilities", EXIT_SETUP);
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1)
		fail("privilege drop check failed: no_new_privs", EXIT_SETUP);
	/* the initial user namespace: our uid is the host uid */
	fd = open("/proc/self/uid_map", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail("privilege drop check failed: cannot read uid_map", EXIT_SETUP);
	n = read(fd, map, sizeof(map) - 1);
	close(fd);
	if (n <= 0 || sscanf(map, "%lu %lu %lu", &a, &b, &c) != 3 || a != 0 || b != 0 || c != 4294967295UL ||
	    strchr(map, '\n') != map + n - 1)
		fail("privilege drop check failed: not in the initial user namespace", EXIT_SETUP);
}

int main(int argc, char **argv)
{
	int errpipe[2], st, err = 0;
	long nofile, fsize;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	ssize_t n;

	if (argc < 11 || strcmp(argv[9], "--") != 0) {
		fprintf(stderr, "draftbox-exec: only draftbox-run runs this\n");
		return EXIT_SETUP;
	}
	status_fd = (int)parse_num(argv[3]);
	if (fcntl(status_fd, F_SETFD, FD_CLOEXEC) < 0)
		status_fd = -1;
	uid = (uid_t)parse_num(argv[1]);
	gid = (gid_t)parse_num(argv[2]);
	nofile = parse_num(argv[4]);
	fsize = parse_num(argv[5]);

	{
		int go = (int)parse_num(argv[7]);
		char b;

		if (RETRY(read(go, &b, 1)) != 1)
			fail("draftbox-run went away before the start", EXIT_SETUP);
		close(go);
	}
	make_home(argv[6], uid, gid);
	drop(uid, gid);
	verify(uid, gid);

	/* from here on, messages belong on the caller's stderr */
	{
		int err_fd = (int)parse_num(argv[8]);

		if (dup2(err_fd, STDERR_FILENO) < 0)
			fail("cannot restore stderr", EXIT_SETUP);
		if (err_fd != STDERR_FILENO)
			close(err_fd);
	}

	/* nothing but 0, 1, 2 crosses into the command */
	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		for (int fd = 3; fd < 1024; fd++)
			if (fd != status_fd)
				fcntl(fd, F_SETFD, FD_CLOEXEC);

	if (pipe2(errpipe, O_CLOEXEC) < 0)
		fail("cannot create a pipe", EXIT_SETUP);
	/*
	 * The command and its children share our uid: keep them out of our fds
	 * (the status pipe) and memory. Before the fork, so there is no window;
	 * the child becomes dumpable again when it execs.
	 */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		fail("cannot make the helper non-dumpable", EXIT_SETUP);
	pid = fork();
	if (pid < 0)
		fail("cannot fork", EXIT_SETUP);
	if (pid == 0) {
		struct rlimit rl;
		sigset_t none;

		close(errpipe[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		rl.rlim_cur = rl.rlim_max = (rlim_t)nofile;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			goto child_fail;
		rl.rlim_cur = rl.rlim_max = fsize ? (rlim_t)fsize : RLIM_INFINITY;
		if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
			goto child_fail;
		rl.rlim_cur = rl.rlim_max = 0;
		if (setrlimit(RLIMIT_CORE, &rl) < 0)
			goto child_fail;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execvp(argv[10], argv + 10);
child_fail:
		err = errno;
		(void)!write(errpipe[1], &err, sizeof(err));
		_exit(127);
	}
	close(errpipe[1]);
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);

	n = read(errpipe[0], &err, sizeof(err));
	close(errpipe[0]);
	/* wait for the command (orphans go to bwrap's init, not to us) */
	for (;;) {
		pid_t w = waitpid(-1, &st, 0);

		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			fail("cannot wait for the command", EXIT_SETUP);
	}
	if (n == (ssize_t)sizeof(err)) {
		report('E', err);
		fprintf(stderr, "draftbox-exec: cannot run '%s': %s\n", argv[10], strerror(err));
		return err == ENOENT ? 127 : 126;
	}
	if (WIFSIGNALED(st)) {
		report('S', WTERMSIG(st));
		return 128 + WTERMSIG(st);
	}
	report('X', WEXITSTATUS(st));
	return WEXITSTATUS(st);
}
