/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * One run of draftbox-run: check the input, take a uid, prepare the home
 * dir and (overlay mode) the draftfs view, create the cgroup, start bwrap
 * with the filtered environment, wait with the timeout and the
 * SIGINT/SIGTERM/SIGKILL escalation, collect the result, and undo
 * everything (cgroup, mount, temporary dirs, uid) on every path out.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fdpath.h"
#include "fsutil.h"
#include "launch.h"
#include "log.h"
#include "macro.h"

#define FUSE_SUPER_MAGIC 0x65735546

extern char **environ;

static int log_oom(void)
{
	return log_error_errno(-ENOMEM, "out of memory");
}

struct run_state {
	struct launch_config *c;
	struct launch_uid_lease lease;
	uid_t uid;
	gid_t gid;
	char *bwrap, *helper, *draftfs;
	char *home_root;       /* per-session dir used */
	bool home_ephemeral;   /* ... made by the helper on the sandbox's /run */
	char *session_dir;     /* overlay: where our own view lives */
	char *tmp_session;     /* ... when we made it and remove it */
	char *view;            /* the view we mounted (to unmount) */
	pid_t draftfs_pid;     /* foreground draftfs child, or 0 */
	struct launch_cgroup cg;
	char **hide;
	char **env;
};

struct run_result {
	bool exited;
	int exit_code;
	int signal;
	bool timed_out;
	bool cancelled;
	bool oom_killed;
	bool failed;           /* the sandbox could not be set up */
	bool retryable;        /* ... because a host mount changed under bwrap: try again */
	char setup_error[512]; /* bwrap's own messages when it failed */
	double wall_ms;
	double cpu_ms;
	uint64_t peak_bytes;
};

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static bool is_fuse_mount(const char *path)
{
	struct statfs sfs;

	return statfs(path, &sfs) == 0 && (unsigned long)sfs.f_type == FUSE_SUPER_MAGIC;
}

static bool fd_is_fuse(int fd)
{
	struct statfs sfs;

	return fstatfs(fd, &sfs) == 0 && (unsigned long)sfs.f_type == FUSE_SUPER_MAGIC;
}

/* Searches PATH for @name (or takes it as is if it has a '/'). */
static int find_exec(const char *name, char **ret)
{
	const char *path = getenv("PATH");
	_cleanup_free_ char *copy = NULL;
	char *p, *dir;

	if (strchr(name, '/')) {
		if (access(name, X_OK) < 0)
			return -errno;
		*ret = strdup(name);
		return *ret ? 0 : -ENOMEM;
	}
	copy = strdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
	if (!copy)
		return -ENOMEM;
	for (p = copy; (dir = strsep(&p, ":"));) {
		_cleanup_free_ char *full = NULL;

		if (dir[0] != '/')
			continue; /* never a relative PATH entry */
		if (asprintf(&full, "%s/%s", dir, name) < 0)
			return -ENOMEM;
		if (access(full, X_OK) == 0) {
			*ret = TAKE_PTR(full);
			return 0;
		}
	}
	return -ENOENT;
}

/* A file next to our own binary, if it exists. */
static int find_sibling(const char *name, char **ret)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n <= 0)
		return -ENOENT;
	self[n] = 0;
	slash = strrchr(self, '/');
	if (!slash)
		return -ENOENT;
	*slash = 0;
	if (asprintf(ret, "%s/%s", self, name) < 0)
		return -ENOMEM;
	if (access(*ret, X_OK) < 0) {
		free(*ret);
		*ret = NULL;
		return -ENOENT;
	}
	return 0;
}

int launch_find_bwrap(const struct launch_config *c, char **ret)
{
	return find_exec(c->bwrap ? c->bwrap : "bwrap", ret);
}

int launch_find_helper(char **ret)
{
	_cleanup_free_ char *p = NULL;

	if (find_sibling("draftbox-exec", ret) == 0)
		return 0;
	if (asprintf(&p, "%s/draftbox-exec", DRAFTBOX_LIBEXECDIR) < 0)
		return -ENOMEM;
	if (access(p, X_OK) < 0)
		return -ENOENT;
	*ret = TAKE_PTR(p);
	return 0;
}

int launch_find_draftfs(const struct launch_config *c, char **ret)
{
	_cleanup_free_ char *p = NULL;

	if (c->draftfs)
		return find_exec(c->draftfs, ret);
	/* build tree: launcher/draftbox-run next to fs/draftfs */
	if (find_sibling("draftfs", ret) == 0 || find_sibling("../fs/draftfs", ret) == 0)
		return 0;
	/* installed: draftbox-run-full lives in libexecdir, draftfs in bindir */
	if (asprintf(&p, "%s/draftfs", DRAFTBOX_BINDIR) < 0)
		return -ENOMEM;
	if (access(p, X_OK) == 0) {
		*ret = TAKE_PTR(p);
		return 0;
	}
	return find_exec("draftfs", ret);
}

/* Opens the workspace and checks it is a directory. Logs. */
static int check_dir(const char *what, const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return log_error_errno(-errno, "cannot use %s '%s'", what, path);
	if (!S_ISDIR(st.st_mode))
		return log_error_errno(-ENOTDIR, "%s '%s' is not a directory", what, path);
	return 0;
}

static int make_tmp_dir(const char *runtime_dir, const char *prefix, char **ret)
{
	_cleanup_free_ char *base = NULL, *t = NULL;
	int r;

	if (asprintf(&base, "%s/tmp", runtime_dir) < 0)
		return -ENOMEM;
	r = launch_mkdir_p(base, 0700);
	if (r < 0)
		return r;
	if (asprintf(&t, "%s/%s-XXXXXX", base, prefix) < 0)
		return -ENOMEM;
	if (!mkdtemp(t))
		return -errno;
	if (chmod(t, 0755) < 0)
		return -errno;
	*ret = TAKE_PTR(t);
	return 0;
}

/* Mounts our own draftfs view of the workspace at <session>/view. Logs. */
static int mount_view(struct run_state *s)
{
	struct launch_config *c = s->c;
	_cleanup_free_ char *upper = NULL, *work = NULL, *view = NULL, *opts = NULL;
	struct stat ws;
	double deadline;
	pid_t pid;
	int r;

	r = launch_find_draftfs(c, &s->draftfs);
	if (r < 0)
		return log_error_errno(r, "cannot find draftfs (use --draftfs, or --view with an existing mount)");
	if (c->session_dir) {
		s->session_dir = strdup(c->session_dir);
		if (!s->session_dir)
			return -ENOMEM;
		r = launch_mkdir_p(s->session_dir, 0700);
		if (r < 0)
			return log_error_errno(r, "cannot create session dir '%s'", s->session_dir);
	} else {
		r = make_tmp_dir(c->runtime_dir, "session", &s->tmp_session);
		if (r < 0)
			return log_error_errno(r, "cannot create a session dir in '%s'", c->runtime_dir);
		s->session_dir = strdup(s->tmp_session);
		if (!s->session_dir)
			return -ENOMEM;
	}
	if (asprintf(&upper, "%s/upper", s->session_dir) < 0 || asprintf(&work, "%s/work", s->session_dir) < 0 ||
	    asprintf(&view, "%s/view", s->session_dir) < 0)
		return -ENOMEM;
	if (stat(c->workspace, &ws) < 0)
		return log_error_errno(-errno, "cannot stat workspace '%s'", c->workspace);
	if (mkdir(upper, 0755) == 0) {
		/* The view's root takes its attributes from upper: give a new upper
		 * root the workspace root's owner and mode, so the mapped sandbox uid
		 * can create files at the top of the workspace, as in a server session. */
		_cleanup_close_ int ufd = openat(AT_FDCWD, upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

		if (ufd < 0 || fchown(ufd, ws.st_uid, ws.st_gid) < 0 || fchmod(ufd, ws.st_mode & 07777) < 0)
			return log_error_errno(-errno, "cannot set up upper dir '%s'", upper);
	} else if (errno != EEXIST) {
		return log_error_errno(-errno, "cannot create the layer dirs in '%s'", s->session_dir);
	}
	if ((mkdir(work, 0700) < 0 && errno != EEXIST) || (mkdir(view, 0755) < 0 && errno != EEXIST))
		return log_error_errno(-errno, "cannot create the layer dirs in '%s'", s->session_dir);
	if (is_fuse_mount(view))
		return log_error_errno(-EBUSY, "'%s' is already mounted (use --view to run in it)", view);
	/* The workspace owner's files appear as the sandbox uid in the view, but
	 * never root's: mapping uid/gid 0 would hand root-only files to the sandbox. */
	{
		char uidmap[64] = "", gidmap[64] = "";

		if (ws.st_uid != 0)
			snprintf(uidmap, sizeof(uidmap), ",uidmapping=%u:%u:1", (unsigned)ws.st_uid, (unsigned)s->uid);
		if (ws.st_gid != 0)
			snprintf(gidmap, sizeof(gidmap), ",gidmapping=%u:%u:1", (unsigned)ws.st_gid, (unsigned)s->gid);
		if (asprintf(&opts, "lowerdir=%s,upperdir=%s,workdir=%s%s%s", c->workspace, upper, work, uidmap,
			     gidmap) < 0)
			return -ENOMEM;
	}
	if (strchr(c->workspace, ',') || strchr(s->session_dir, ','))
		return (log_error("paths with ',' cannot be mounted with draftfs"), -EINVAL);

	pid = fork();
	if (pid < 0)
		return log_error_errno(-errno, "cannot fork");
	if (pid == 0) {
		int null = openat(AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC);

		if (null >= 0)
			dup2(null, 0), dup2(null, 1);
		/* the daemon may outlive us (--keep): it must not hold the caller's pipes open */
		if (syscall(SYS_close_range, 3, ~0U, 0) < 0)
			for (int fd = 3; fd < 1024; fd++)
				close(fd);
		if (c->keep)
			execl(s->draftfs, "draftfs", "-o", opts, view, (char *)NULL);
		else
			execl(s->draftfs, "draftfs", "-f", "-o", opts, view, (char *)NULL);
		_exit(127);
	}
	if (c->keep) {
		int st;

		/* the daemon forks; its parent returns once the mount is up */
		if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			return log_error_errno(-EIO, "draftfs failed to mount '%s'", view);
	} else {
		s->draftfs_pid = pid;
	}
	deadline = now_ms() + 10000;
	while (!is_fuse_mount(view)) {
		int st;

		if (s->draftfs_pid > 0 && waitpid(s->draftfs_pid, &st, WNOHANG) == s->draftfs_pid) {
			s->draftfs_pid = 0;
			return log_error_errno(-EIO, "draftfs exited before mounting '%s'", view);
		}
		if (now_ms() > deadline)
			return log_error_errno(-ETIMEDOUT, "draftfs did not mount '%s' in time", view);
		usleep(1000);
	}
	s->view = TAKE_PTR(view);
	return 0;
}

/* How long draftfs may take to exit after the unmount (its background copies of big files end first). */
#define DRAFTFS_EXIT_MS 300000

static void unmount_view(struct run_state *s)
{
	if (s->view && !s->c->keep) {
		if (umount2(s->view, 0) < 0 && errno != EINVAL && errno != ENOENT)
			(void)umount2(s->view, MNT_DETACH);
	}
	if (s->draftfs_pid > 0) {
		/*
		 * Unmounted, draftfs finishes its background copy-ups and syncs
		 * (fs/bgfill.h): give it time. Still there after 5 s (a detached
		 * mount something holds), SIGTERM ends its loop, which finishes
		 * them too; SIGKILL, which would leave the files copied in the
		 * background as they were below, only after DRAFTFS_EXIT_MS.
		 */
		double start = now_ms();
		bool termed = false;
		int st;

		while (waitpid(s->draftfs_pid, &st, WNOHANG) == 0) {
			if (!termed && now_ms() > start + 5000) {
				kill(s->draftfs_pid, SIGTERM);
				termed = true;
			}
			if (now_ms() > start + DRAFTFS_EXIT_MS) {
				log_warning("draftfs did not exit %d s after the unmount: killed", DRAFTFS_EXIT_MS / 1000);
				kill(s->draftfs_pid, SIGKILL);
				waitpid(s->draftfs_pid, &st, 0);
				break;
			}
			usleep(termed ? 20000 : 1000);
		}
		s->draftfs_pid = 0;
	}
}

/*
 * Reaps those of our children (from /proc/self/task/<tid>/children) other
 * than @keep that have exited. Returns whether any other child is left.
 */
static bool reap_others(pid_t keep)
{
	_cleanup_free_ char *kids = NULL;
	bool left = false;
	char path[64];
	size_t n;
	int fd, r;

	snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)syscall(SYS_gettid));
	fd = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	r = read_full_fd(fd, 1 << 16, &kids, &n);
	close(fd);
	if (r < 0)
		return false;
	for (char *p = kids, *end; *p; p = end) {
		long pid = strtol(p, &end, 10);

		if (end == p)
			break;
		if (pid != keep && waitpid((pid_t)pid, NULL, WNOHANG) == 0)
			left = true;
	}
	return left;
}

/*
 * Reaps orphans that came to us as subreaper (never the draftfs child,
 * which is waited for by pid). With @wait_ms, waits that long for the
 * ones still exiting: a killed sandbox's init only exits once the kernel
 * has reaped everything in its pid namespace, so when it is gone, so is
 * the sandbox.
 */
static void reap_orphans(pid_t keep, unsigned wait_ms)
{
	double deadline = now_ms() + wait_ms;

	while (reap_others(keep) && now_ms() < deadline)
		usleep(500);
}

static void state_free(struct run_state *s)
{
	launch_cgroup_destroy(&s->cg);
	reap_orphans(s->draftfs_pid, 0);
	unmount_view(s);
	if (s->tmp_session && !s->c->keep)
		(void)launch_rm_rf(s->tmp_session);
	launch_uid_release(&s->lease);
	free(s->bwrap);
	free(s->helper);
	free(s->draftfs);
	free(s->home_root);
	free(s->session_dir);
	free(s->tmp_session);
	free(s->view);
	strv_free(s->hide);
	strv_free(s->env);
}

/*
 * Writes bwrap's options (up to the first "--"; every option value is an
 * absolute path or a number, never "--") NUL-separated to a new memfd, and
 * points *ret_cmd at the "--" that starts the command, which bwrap only
 * takes from its real argv.
 */
static int args_memfd(char **args, char ***ret_cmd)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	size_t total = 0, off = 0;
	char **a;
	int r;

	for (a = args; *a && strcmp(*a, "--") != 0; a++)
		total += strlen(*a) + 1;
	if (!*a)
		return -EINVAL;
	/* one write, not one per option */
	buf = malloc(total ? total : 1);
	if (!buf)
		return -ENOMEM;
	for (char **b = args; b < a; b++) {
		size_t n = strlen(*b) + 1;

		memcpy(buf + off, *b, n);
		off += n;
	}
	fd = (int)syscall(SYS_memfd_create, "draftbox-bwrap-args", 1u /* MFD_CLOEXEC */);
	if (fd < 0)
		return -errno;
	r = write_full(fd, buf, total);
	if (r < 0)
		return r;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	*ret_cmd = a;
	return TAKE_FD(fd);
}

static int clear_cloexec(int fd)
{
	int fl = fcntl(fd, F_GETFD);

	if (fl < 0 || fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) < 0)
		return -errno;
	return 0;
}

/* What the child needs between clone and exec of bwrap. */
struct bwrap_child {
	const struct launch_config *c;
	const struct run_state *s;
	char **argv;
	const sigset_t *old_mask;
	int stdin_fd, err_fd, err_copy, args_fd, seccomp_fd, status_fd, go_fd, ws_fd;
	int report_fd; /* the child writes a struct child_report here when it cannot exec */
	bool new_net;           /* isolated network: the child makes the namespace */
	int cgroup_join_fd;      /* v2: the run's cgroup.procs, which the child joins itself; -1 on v1 */
	const char *cgroup_path; /* v2: that cgroup, bound read-only at the sandbox's /sys/fs/cgroup; NULL on v1 */
};

struct child_report {
	int err;
	const char *step; /* a static string (shared memory): what failed, or NULL for the exec */
};

/*
 * Runs in the child, which shares our memory until it execs (CLONE_VM |
 * CLONE_VFORK): only syscalls on its own fds and signal state, no
 * allocation, no stdio.
 */
static int bwrap_child_main(void *arg)
{
	const struct bwrap_child *ch = arg;
	struct child_report rep = { 0, NULL };
	int r;

	sigprocmask(SIG_SETMASK, ch->old_mask, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (dup2(ch->stdin_fd, 0) < 0 || dup2(ch->err_fd, 2) < 0 || clear_cloexec(ch->err_copy) < 0)
		goto fail;
	if (clear_cloexec(ch->args_fd) < 0 || clear_cloexec(ch->seccomp_fd) < 0 || clear_cloexec(ch->status_fd) < 0 ||
	    clear_cloexec(ch->go_fd) < 0 || clear_cloexec(ch->ws_fd) < 0)
		goto fail;
	for (size_t i = 0; i < ch->c->n_exposes; i++)
		if (clear_cloexec(ch->c->exposes[i].fd) < 0)
			goto fail;
	/*
	 * On v2 the child joins the run's cgroup itself (cheap there), before
	 * bwrap makes the cgroup namespace: its root is then the run's cgroup,
	 * as the bound /sys/fs/cgroup says, and everything bwrap forks is born in it.
	 * On v1 the parent moves the tree while bwrap sets up; the helper
	 * waits for that.
	 */
	if (ch->cgroup_join_fd >= 0 && write(ch->cgroup_join_fd, "0", 1) != 1) {
		rep.err = errno ? errno : EIO;
		rep.step = "join the run's cgroup";
		goto report;
	}
	r = launch_sandbox_sys(ch->new_net, ch->cgroup_path, &rep.step);
	if (r < 0) {
		rep.err = -r;
		goto report;
	}
	/* no environment: bwrap is root here, and sets the sandbox's itself (--clearenv, --setenv) */
	execve(ch->s->bwrap, ch->argv, (char *[]){ NULL });
fail:
	rep.err = errno ? errno : EIO;
report:
	(void)!write(ch->report_fd, &rep, sizeof(rep));
	_exit(LAUNCH_EXIT_FAILURE);
}

/*
 * Starts bwrap. clone(CLONE_VM | CLONE_VFORK) like posix_spawn: no page
 * tables to copy and no copy-on-write faults afterwards, and we resume
 * once bwrap is exec'd (or the child failed). Returns the pid or -errno.
 */
static pid_t spawn_bwrap(struct bwrap_child *ch)
{
	_cleanup_free_ char *stack = NULL;
	const size_t stack_size = 64 * 1024;
	pid_t pid;

	stack = malloc(stack_size);
	if (!stack)
		return -ENOMEM;
	/* x86-64 and every other arch we run on: the stack grows down */
	pid = clone(bwrap_child_main, stack + stack_size, CLONE_VM | CLONE_VFORK | SIGCHLD, ch);
	if (pid < 0)
		return -errno;
	return pid;
}

/* The escalation on timeout or cancel: SIGINT, grace, SIGTERM, grace, SIGKILL of everything. */
struct escalation {
	int stage;       /* 0 running, 1 SIGINT sent, 2 SIGTERM sent, 3 killed */
	double next;     /* when to take the next step (ms, monotonic) */
};

static void escalate(struct run_state *s, struct escalation *e, pid_t bwrap_pid)
{
	double grace = s->c->grace * 1000;

	e->stage++;
	if (e->stage == 1) {
		launch_cgroup_signal_sandboxed(&s->cg, SIGINT);
		e->next = now_ms() + grace;
	} else if (e->stage == 2) {
		launch_cgroup_signal_sandboxed(&s->cg, SIGTERM);
		e->next = now_ms() + grace;
	} else {
		(void)launch_cgroup_kill_all(&s->cg, 1000);
		kill(bwrap_pid, SIGKILL);
		e->stage = 3;
		e->next = now_ms() + 1000;
	}
}

/* Starts bwrap and waits for it. Fills @res. Logs. */
static int start_and_wait(struct run_state *s, int seccomp_fd, int stdin_fd, struct run_result *res)
{
	struct launch_config *c = s->c;
	_cleanup_strv_free_ char **args = NULL;
	_cleanup_free_ char **bargv = NULL;
	char **cmd = NULL;
	_cleanup_close_ int args_fd = -1, sfd = -1, pidfd = -1, ws_fd = -1;
	int status_pipe[2] = { -1, -1 }, err_pipe[2] = { -1, -1 }, go_pipe[2] = { -1, -1 };
	int bwrap_err[2] = { -1, -1 };
	_cleanup_close_ int err_copy = -1;
	char errbuf[4096];
	size_t err_len = 0;
	struct launch_plan plan = {
		.ws_source = s->view ? s->view : (c->view ? c->view : c->workspace),
		.ws_fd = -1,
		.home_root = s->home_root,
		.home_ephemeral = s->home_ephemeral,
		.helper = s->helper,
		.seccomp_fd = seccomp_fd,
		.uid = s->uid,
		.gid = s->gid,
		.hide = s->hide,
		.env = s->env,
	};
	struct escalation esc = { .stage = 0, .next = INFINITY };
	char status_buf[256] = {}, fdbuf[16];
	struct rusage ru = {};
	sigset_t mask, old;
	double start, deadline;
	size_t status_len = 0;
	pid_t pid;
	struct child_report child_err = { 0, NULL };
	_cleanup_close_ int join_fd = -1;
	int r, st;
	ssize_t n;

	if (pipe2(status_pipe, O_CLOEXEC) < 0 || pipe2(err_pipe, O_CLOEXEC) < 0 || pipe2(go_pipe, O_CLOEXEC) < 0 ||
	    pipe2(bwrap_err, O_CLOEXEC) < 0) {
		r = log_error_errno(-errno, "cannot create pipes");
		goto out;
	}
	plan.status_fd = status_pipe[1];
	plan.go_fd = go_pipe[0];
	/* bwrap's stderr is a pipe to us; the helper gives the command this copy of ours */
	err_copy = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	if (err_copy < 0) {
		r = log_error_errno(-errno, "cannot duplicate stderr");
		goto out;
	}
	plan.err_fd = err_copy;
	ws_fd = openat(AT_FDCWD, plan.ws_source, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ws_fd < 0) {
		r = log_error_errno(-errno, "cannot open workspace '%s'", plan.ws_source);
		goto out;
	}
	if (c->view && !s->view && !fd_is_fuse(ws_fd)) {
		r = -EINVAL;
		log_error("view '%s' is not a draftfs mount", plan.ws_source);
		goto out;
	}
	plan.ws_fd = ws_fd;
	r = launch_bwrap_args(c, &plan, &args);
	if (r < 0) {
		log_error_errno(r, "cannot build the bwrap command line");
		goto out;
	}
	if (log_get_max_level() >= LOG_LEVEL_DEBUG)
		for (char **a = args; *a; a++)
			log_debug("bwrap arg: %s", *a);
	args_fd = args_memfd(args, &cmd);
	if (args_fd < 0) {
		r = log_error_errno(args_fd, "cannot pass arguments to bwrap");
		goto out;
	}

	/* bwrap --args FD -- HELPER ... COMMAND */
	bargv = calloc(strv_length(cmd) + 4, sizeof(char *));
	if (!bargv) {
		r = log_oom();
		goto out;
	}
	snprintf(fdbuf, sizeof(fdbuf), "%d", args_fd);
	bargv[0] = s->bwrap;
	bargv[1] = (char *)"--args";
	bargv[2] = fdbuf;
	for (size_t i = 0; cmd[i]; i++)
		bargv[3 + i] = cmd[i];

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &old);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		r = log_error_errno(-errno, "cannot create signalfd");
		goto out_mask;
	}

	if (s->cg.version == LAUNCH_CGROUP_V2) {
		join_fd = launch_cgroup_join_fd(&s->cg);
		if (join_fd < 0) {
			r = log_error_errno(join_fd, "cannot open the run's cgroup '%s'", s->cg.v2_path);
			goto out_mask;
		}
	}

	start = now_ms();
	{
		struct bwrap_child ch = {
			.c = c, .s = s, .argv = bargv, .old_mask = &old, .stdin_fd = stdin_fd,
			.err_fd = bwrap_err[1], .err_copy = err_copy, .args_fd = args_fd,
			.seccomp_fd = seccomp_fd, .status_fd = status_pipe[1], .go_fd = go_pipe[0],
			.ws_fd = ws_fd, .report_fd = err_pipe[1],
			.new_net = !c->share_net, .cgroup_join_fd = join_fd,
			.cgroup_path = join_fd >= 0 ? s->cg.v2_path : NULL,
		};

		pid = spawn_bwrap(&ch);
	}
	if (pid < 0) {
		r = log_error_errno(pid, "cannot fork");
		goto out_mask;
	}
	close(err_pipe[1]);
	err_pipe[1] = -1;
	close(status_pipe[1]);
	status_pipe[1] = -1;
	close(go_pipe[0]);
	go_pipe[0] = -1;
	close(bwrap_err[1]);
	bwrap_err[1] = -1;
	/*
	 * Moving a process between cgroups costs an RCU grace period on v1
	 * (milliseconds): do it now, while bwrap execs and builds the
	 * sandbox, and only then let the helper start the command. On v2 the
	 * child joined before it exec'd bwrap: nothing left to move.
	 */
	log_debug("forked at +%.3fms", now_ms() - start);
	r = join_fd >= 0 ? 0 : launch_cgroup_attach_tree(&s->cg, pid);
	log_debug("attached at +%.3fms", now_ms() - start);
	if (r < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		log_error_errno(r, "cannot move the sandbox into its cgroup");
		goto out_mask;
	}
	if (write(go_pipe[1], "g", 1) != 1 && errno != EPIPE) {
		r = log_error_errno(-errno, "cannot start the sandbox");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto out_mask;
	}
	go_pipe[1] = safe_close(go_pipe[1]);
	if (read(err_pipe[0], &child_err, sizeof(child_err)) == (ssize_t)sizeof(child_err)) {
		waitpid(pid, NULL, 0);
		if (child_err.step)
			r = log_error_errno(-child_err.err, "cannot set up the sandbox: %s", child_err.step);
		else
			r = log_error_errno(-child_err.err, "cannot start bwrap '%s'", s->bwrap);
		goto out_mask;
	}

	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0) {
		r = log_error_errno(-errno, "cannot watch bwrap (pidfd_open)");
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		goto out_mask;
	}
	deadline = c->timeout > 0 ? start + c->timeout * 1000 : INFINITY;
	for (;;) {
		struct pollfd pfd[4] = {
			{ .fd = pidfd, .events = POLLIN },
			{ .fd = sfd, .events = POLLIN },
			{ .fd = status_pipe[0], .events = POLLIN },
			{ .fd = bwrap_err[0], .events = POLLIN },
		};
		double now = now_ms(), wake = MIN(deadline, esc.next);
		int timeout_ms = isinf(wake) ? -1 : (int)MAX(0.0, ceil(wake - now));

		if (poll(pfd, 4, timeout_ms) < 0) {
			if (errno != EINTR)
				usleep(1000); /* cannot happen with valid fds; do not spin */
			continue;
		}
		if (pfd[0].revents & POLLIN)
			break;
		if (pfd[3].revents & (POLLIN | POLLHUP)) {
			char junk[512];

			/* keep draining, keep the first 4 KiB */
			n = err_len < sizeof(errbuf) - 1 ? read(bwrap_err[0], errbuf + err_len, sizeof(errbuf) - 1 - err_len)
							 : read(bwrap_err[0], junk, sizeof(junk));
			if (n > 0 && err_len < sizeof(errbuf) - 1)
				err_len += (size_t)n;
			else if (n <= 0)
				bwrap_err[0] = safe_close(bwrap_err[0]);
		}
		if (pfd[2].revents & (POLLIN | POLLHUP)) {
			n = read(status_pipe[0], status_buf + status_len, sizeof(status_buf) - 1 - status_len);
			if (n > 0)
				status_len += (size_t)n;
			else {
				close(status_pipe[0]);
				status_pipe[0] = -1;
			}
		}
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
				if (!res->timed_out)
					res->cancelled = true;
				if (esc.stage == 0)
					escalate(s, &esc, pid);
				else if (esc.stage < 3) {
					/* a second request: no more grace */
					esc.stage = 2;
					escalate(s, &esc, pid);
				}
			}
		}
		now = now_ms();
		if (esc.stage == 0 && now >= deadline) {
			res->timed_out = true;
			log_debug("timeout after %.3fs", c->timeout);
			escalate(s, &esc, pid);
		} else if (esc.stage > 0 && now >= esc.next) {
			escalate(s, &esc, pid);
		}
	}
	while (wait4(pid, &st, 0, &ru) < 0)
		if (errno != EINTR) {
			r = log_error_errno(-errno, "cannot wait for bwrap");
			goto out_mask;
		}
	res->wall_ms = now_ms() - start;
	log_debug("reaped at +%.3fms", res->wall_ms);
	res->cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
		      (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
	res->peak_bytes = (uint64_t)ru.ru_maxrss * 1024;

	/* whatever the helper said; the pipe's writers are gone with the sandbox */
	while (status_pipe[0] >= 0 && status_len < sizeof(status_buf) - 1 &&
	       (n = read(status_pipe[0], status_buf + status_len, sizeof(status_buf) - 1 - status_len)) > 0)
		status_len += (size_t)n;
	status_buf[status_len] = 0;
	while (bwrap_err[0] >= 0 && err_len < sizeof(errbuf) - 1 &&
	       (n = read(bwrap_err[0], errbuf + err_len, sizeof(errbuf) - 1 - err_len)) > 0)
		err_len += (size_t)n;
	errbuf[err_len] = 0;

	{
		char *line = status_buf, *last = NULL;
		char kind = 0;
		long v = 0;

		for (char *p = strtok(line, "\n"); p; p = strtok(NULL, "\n"))
			last = p;
		if (last)
			kind = last[0];
		if (last && strlen(last) > 2)
			v = strtol(last + 2, NULL, 10);
		switch (kind) {
		case 'X':
			res->exited = true;
			res->exit_code = (int)v;
			break;
		case 'S':
			res->signal = (int)v;
			break;
		case 'E':
			res->exited = true;
			res->exit_code = v == ENOENT ? LAUNCH_EXIT_NOT_FOUND : LAUNCH_EXIT_CANNOT_EXEC;
			break;
		case 'F':
			log_error("the sandbox refused to start: %s", last + 2);
			res->failed = true;
			err_len = 0; /* the helper said the same on bwrap's stderr */
			break;
		default:
			/* no word from the helper: bwrap failed to set up, or the helper was killed */
			if (WIFSIGNALED(st)) {
				res->signal = WTERMSIG(st);
			} else if (WEXITSTATUS(st) >= 128 && WEXITSTATUS(st) < 128 + 65) {
				res->signal = WEXITSTATUS(st) - 128;
			} else if (esc.stage > 0) {
				res->signal = SIGKILL;
			} else {
				/* nothing ran: bwrap could not build the sandbox */
				res->failed = true;
				errbuf[strcspn(errbuf, "\n")] = 0;
				if (!err_len)
					strcpy(errbuf, "no message");
				errbuf[sizeof(res->setup_error) - 1] = 0;
				memcpy(res->setup_error, errbuf, strlen(errbuf) + 1);
				/*
				 * a mount below / went away while bwrap copied the tree (another
				 * session's view): ENOENT, or EINVAL when it was detached meanwhile
				 */
				res->retryable = strstr(errbuf, "Unable to apply mount flags") ||
						 (strstr(errbuf, "mount") && strstr(errbuf, "No such file or directory"));
				err_len = 0;
			}
		}
	}
	/* bwrap's own warnings, when it did run the command */
	if (err_len)
		(void)write_full(STDERR_FILENO, errbuf, err_len);
	r = 0;

out_mask:
	sigprocmask(SIG_SETMASK, &old, NULL);
out:
	safe_close(status_pipe[0]);
	safe_close(status_pipe[1]);
	safe_close(err_pipe[0]);
	safe_close(err_pipe[1]);
	safe_close(go_pipe[0]);
	safe_close(go_pipe[1]);
	safe_close(bwrap_err[0]);
	safe_close(bwrap_err[1]);
	return r;
}

/* Signal abbreviations (what sigabbrev_np gives, which not every libc has). */
static const char *const signal_names[] = {
	[SIGHUP] = "HUP", [SIGINT] = "INT", [SIGQUIT] = "QUIT", [SIGILL] = "ILL", [SIGTRAP] = "TRAP",
	[SIGABRT] = "ABRT", [SIGBUS] = "BUS", [SIGFPE] = "FPE", [SIGKILL] = "KILL", [SIGUSR1] = "USR1",
	[SIGSEGV] = "SEGV", [SIGUSR2] = "USR2", [SIGPIPE] = "PIPE", [SIGALRM] = "ALRM", [SIGTERM] = "TERM",
	[SIGSTKFLT] = "STKFLT", [SIGCHLD] = "CHLD", [SIGCONT] = "CONT", [SIGSTOP] = "STOP", [SIGTSTP] = "TSTP",
	[SIGTTIN] = "TTIN", [SIGTTOU] = "TTOU", [SIGURG] = "URG", [SIGXCPU] = "XCPU", [SIGXFSZ] = "XFSZ",
	[SIGVTALRM] = "VTALRM", [SIGPROF] = "PROF", [SIGWINCH] = "WINCH", [SIGIO] = "IO", [SIGPWR] = "PWR",
	[SIGSYS] = "SYS",
};

/* Appends @v as a JSON string (quotes, backslashes and control characters escaped). */
static void json_put_string(FILE *f, const char *v)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/*
 * The result line. Written by hand, not with cJSON: the fields are fixed
 * and this keeps the JSON library off the per-run path.
 */
static int print_json(const struct launch_config *c, const struct run_state *s, const struct run_result *res)
{
	_cleanup_free_ char *line = NULL;
	size_t len = 0;
	FILE *f;
	int fd = c->json_fd >= 0 ? c->json_fd : STDOUT_FILENO;

	f = open_memstream(&line, &len);
	if (!f)
		return -ENOMEM;
	if (res->exited)
		fprintf(f, "{\"exit_code\":%d", res->exit_code);
	else
		fputs("{\"exit_code\":null", f);
	fputs(",\"signal\":", f);
	if (res->signal > 0 && (size_t)res->signal < ARRAY_SIZE(signal_names) && signal_names[res->signal])
		fprintf(f, "\"SIG%s\"", signal_names[res->signal]);
	else if (res->signal)
		fprintf(f, "\"%d\"", res->signal);
	else
		fputs("null", f);
	fprintf(f, ",\"timed_out\":%s,\"cancelled\":%s,\"oom_killed\":%s", res->timed_out ? "true" : "false",
		res->cancelled ? "true" : "false", res->oom_killed ? "true" : "false");
	fprintf(f, ",\"wall_time_ms\":%.15g,\"cpu_time_ms\":%.15g", round(res->wall_ms * 1000) / 1000,
		round(res->cpu_ms * 1000) / 1000);
	fprintf(f, ",\"peak_memory_bytes\":%llu,\"uid\":%u,\"cgroup\":\"%s\"", (unsigned long long)res->peak_bytes,
		(unsigned)s->uid, s->cg.version == LAUNCH_CGROUP_V2 ? "v2" : "v1");
	if (s->session_dir) {
		fputs(",\"session_dir\":", f);
		json_put_string(f, s->session_dir);
	}
	fputs("}\n", f);
	if (fclose(f) != 0 || !line)
		return -ENOMEM;
	return write_full(fd, line, len);
}

/* The lite build's cached program, loaded before it decided to run here. */
static int preloaded_seccomp_fd = -1;

#ifdef LAUNCH_LITE
/* Hands the whole command line to the glibc build (next to us, or installed). Returns only on failure. */
static int exec_full(char **argv)
{
	_cleanup_free_ char *full = NULL;

	if (find_sibling("draftbox-run-full", &full) < 0 &&
	    asprintf(&full, "%s/draftbox-run-full", DRAFTBOX_LIBEXECDIR) < 0)
		return log_oom();
	log_debug("handing over to '%s'", full);
	execv(full, argv);
	return log_error_errno(-errno, "cannot run '%s'", full);
}

/*
 * The musl build runs the common case itself: a valid cached seccomp
 * program. The probe and a cache miss (which needs libseccomp) go to
 * draftbox-run-full with the same command line; nothing has been touched
 * yet. Returns 0 to go on here, or -errno.
 */
static int lite_dispatch(const struct launch_config *c, char **argv)
{
	_cleanup_free_ char *cache_dir = NULL;
	int fd;

	if (c->probe)
		return exec_full(argv);
	if (asprintf(&cache_dir, "%s/seccomp", c->runtime_dir) < 0)
		return log_oom();
	fd = launch_seccomp_fd(cache_dir, c->profile, c->share_net);
	if (fd == -ENOPKG)
		return exec_full(argv);
	if (fd < 0)
		return log_error_errno(fd, "cannot read the seccomp filter");
	preloaded_seccomp_fd = fd;
	return 0;
}
#endif

int launch_run(struct launch_config *c)
{
	struct run_state s = { .c = c, .lease = LAUNCH_UID_LEASE_INIT };
	struct run_result res = {};
	_cleanup_free_ char *uid_dir = NULL, *cache_dir = NULL, *name = NULL;
	_cleanup_close_ int seccomp_fd = -1, stdin_fd = -1;
	const char *bad = NULL;
	uint64_t peak = 0, ooms = 0, cpu_ns = 0;
	int r, status = LAUNCH_EXIT_FAILURE;
	double t0 = now_ms();
	off_t seccomp_off;

	r = check_dir("workspace", c->workspace);
	if (r < 0)
		goto out;
	if (c->view) {
		r = check_dir("view", c->view);
		if (r < 0)
			goto out;
		if (!is_fuse_mount(c->view)) {
			log_error("view '%s' is not a draftfs mount", c->view);
			goto out;
		}
	}
	r = launch_find_bwrap(c, &s.bwrap);
	if (r < 0) {
		r = log_error_errno(r, "cannot find bwrap '%s'", c->bwrap ? c->bwrap : "bwrap");
		goto out;
	}
	r = launch_find_helper(&s.helper);
	if (r < 0) {
		r = log_error_errno(r, "cannot find draftbox-exec next to draftbox-run or in '%s'", DRAFTBOX_LIBEXECDIR);
		goto out;
	}

	/* the expose allowlist */
	if (c->allow_file) {
		r = launch_allow_load(c->allow_file, &c->allow);
		if (r < 0) {
			r = log_error_errno(r, "cannot read allowlist '%s'", c->allow_file);
			goto out;
		}
	} else if (access(LAUNCH_DEFAULT_ALLOW_FILE, F_OK) == 0) {
		r = launch_allow_load(LAUNCH_DEFAULT_ALLOW_FILE, &c->allow);
		if (r < 0) {
			r = log_error_errno(r, "cannot read allowlist '%s'", LAUNCH_DEFAULT_ALLOW_FILE);
			goto out;
		}
	}
	r = launch_expose_resolve(c, &bad);
	if (r == -EPERM) {
		log_error("expose source '%s' is outside the allowlist (see --allow)", bad);
		goto out;
	} else if (r < 0) {
		r = log_error_errno(r, "cannot expose '%s'", bad ? bad : "?");
		goto out;
	}
	bad = NULL;
	r = launch_hide_resolve(c, &bad);
	if (r == -EBUSY) {
		log_error("cannot hide '%s': the workspace or an exposed path lies there", bad);
		goto out;
	} else if (r == -EPERM) {
		log_error("cannot hide '%s': the sandbox's own /dev, /proc, /sys, /run, /tmp or /var/tmp lies there", bad);
		goto out;
	} else if (r < 0) {
		r = log_error_errno(r, "cannot hide '%s'", bad ? bad : "?");
		goto out;
	}

	r = launch_mkdir_p(c->runtime_dir, 0755);
	if (r < 0) {
		r = log_error_errno(r, "cannot create runtime dir '%s'", c->runtime_dir);
		goto out;
	}

	/* stdin */
	if (c->input) {
		stdin_fd = openat(AT_FDCWD, c->input, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (stdin_fd < 0) {
			r = log_error_errno(-errno, "cannot open input '%s'", c->input);
			goto out;
		}
	} else if (c->stdin_fd >= 0) {
		stdin_fd = fcntl(c->stdin_fd, F_DUPFD_CLOEXEC, 3);
		if (stdin_fd < 0) {
			r = log_error_errno(-errno, "bad --stdin-fd %d", c->stdin_fd);
			goto out;
		}
	} else {
		stdin_fd = openat(AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC);
		if (stdin_fd < 0) {
			r = log_error_errno(-errno, "cannot open /dev/null");
			goto out;
		}
	}

	/* identity */
	if (asprintf(&uid_dir, "%s/uids", c->runtime_dir) < 0) {
		r = log_oom();
		goto out;
	}
	if (c->uid_explicit) {
		s.uid = c->uid;
		s.gid = c->gid;
		/*
		 * The caller owns the uid (draftboxd holds its lock for the
		 * session's life). If nobody holds it, hold it ourselves, so the
		 * pool cannot hand it to another session while we run.
		 */
		r = launch_uid_acquire_one(uid_dir, s.uid, &s.lease);
		if (r < 0 && r != -EBUSY) {
			r = log_error_errno(r, "cannot lock uid %u in '%s'", (unsigned)s.uid, uid_dir);
			goto out;
		}
	} else {
		r = launch_uid_acquire(uid_dir, c->pool_lo, c->pool_hi, (unsigned)(c->uid_wait * 1000), &s.lease);
		if (r == -EAGAIN) {
			log_error("uid pool %u-%u is exhausted (waited %.1fs)", (unsigned)c->pool_lo,
				  (unsigned)c->pool_hi, c->uid_wait);
			goto out;
		} else if (r < 0) {
			r = log_error_errno(r, "cannot take a uid from the pool in '%s'", uid_dir);
			goto out;
		}
		s.uid = s.lease.uid;
		s.gid = s.lease.gid;
	}

	/* home, tmp and xdg dirs */
	if (c->home_dir) {
		s.home_root = strdup(c->home_dir);
		if (!s.home_root) {
			r = log_oom();
			goto out;
		}
		r = launch_prepare_home(s.home_root, s.uid, s.gid);
		if (r < 0) {
			r = log_error_errno(r, "cannot prepare home dir '%s'", s.home_root);
			goto out;
		}
	} else {
		/* nothing to keep: the helper makes it on the sandbox's own /run */
		s.home_root = strdup(LAUNCH_EPHEMERAL_HOME);
		if (!s.home_root) {
			r = log_oom();
			goto out;
		}
		s.home_ephemeral = true;
	}

	if (c->mode == LAUNCH_MODE_OVERLAY && !c->view) {
		r = mount_view(&s);
		if (r < 0)
			goto out;
		if (strv_push(&s.hide, s.session_dir) < 0) {
			r = log_oom();
			goto out;
		}
	}

	if (asprintf(&name, "run-%d-%llx", (int)getpid(), (unsigned long long)(now_ms() * 1000)) < 0) {
		r = log_oom();
		goto out;
	}
	log_debug("t=%.3fms before cgroup", now_ms() - t0);
	r = launch_cgroup_create(c, name, &s.cg);
	if (r == -EOPNOTSUPP) {
		log_error("no usable cgroup controllers (pids and memory, v1 or v2); refusing to run without limits");
		goto out;
	} else if (r == -EBUSY && s.cg.failed && strcmp(strrchr(s.cg.failed, '/'), "/cgroup.subtree_control") == 0) {
		log_error("cannot create cgroup '%s': cannot enable controllers in %s: that cgroup has processes of "
			  "its own, and cgroup v2 gives controllers only to the children of a cgroup without any "
			  "(in a container, move its processes into a child cgroup first)", name, s.cg.failed);
		goto out;
	} else if (r < 0) {
		r = log_error_errno(r, "cannot create cgroup '%s'%s%s", name, s.cg.failed ? ": " : "",
				    s.cg.failed ? s.cg.failed : "");
		goto out;
	}

	if (asprintf(&cache_dir, "%s/seccomp", c->runtime_dir) < 0) {
		r = log_oom();
		goto out;
	}
	log_debug("t=%.3fms before seccomp", now_ms() - t0);
	if (preloaded_seccomp_fd >= 0)
		seccomp_fd = TAKE_FD(preloaded_seccomp_fd);
	else
		seccomp_fd = launch_seccomp_fd(cache_dir, c->profile, c->share_net);
	if (seccomp_fd < 0) {
		r = log_error_errno(seccomp_fd, "cannot build the seccomp filter");
		goto out;
	}

	r = launch_env_build(c, environ, s.home_root, &s.env);
	if (r < 0) {
		r = log_error_errno(r, "cannot build the environment");
		goto out;
	}

	log_debug("t=%.3fms before start", now_ms() - t0);
	seccomp_off = lseek(seccomp_fd, 0, SEEK_CUR);
	for (unsigned attempt = 0;; attempt++) {
		res = (struct run_result){};
		r = start_and_wait(&s, seccomp_fd, stdin_fd, &res);
		if (r < 0)
			goto out;
		if (!res.retryable || attempt >= 3)
			break;
		/* nothing ran; the host's mount table moved under bwrap (sessions come and go) */
		log_debug("bwrap set-up raced with a mount change (%s), retrying", res.setup_error);
		if (lseek(seccomp_fd, seccomp_off, SEEK_SET) < 0) {
			r = log_error_errno(-errno, "cannot rewind the seccomp program");
			goto out;
		}
		usleep(5000 * (attempt + 1));
	}
	log_debug("t=%.3fms after wait", now_ms() - t0);
	if (res.failed && res.setup_error[0])
		log_error("bwrap failed to set up the sandbox: %s", res.setup_error);

	/* bwrap is gone, so its pid namespace is: what is left is still exiting */
	if (!launch_cgroup_wait_empty(&s.cg, 20000))
		(void)launch_cgroup_kill_all(&s.cg, 2000);
	reap_orphans(s.draftfs_pid, 5000);
	launch_cgroup_stats(&s.cg, &peak, &ooms, &cpu_ns);
	if (peak)
		res.peak_bytes = peak;
	if (cpu_ns)
		res.cpu_ms = cpu_ns / 1e6;
	res.oom_killed = ooms > 0;

	log_debug("t=%.3fms after stats", now_ms() - t0);
	if (res.failed) {
		status = LAUNCH_EXIT_FAILURE;
		goto out;
	}
	if (c->keep && s.view)
		log_info("the view stays mounted at '%s' (upper: '%s/upper')", s.view, s.session_dir);
	if (c->json) {
		r = print_json(c, &s, &res);
		if (r < 0)
			log_error_errno(r, "cannot write the JSON result");
	}
	if (res.timed_out)
		status = LAUNCH_EXIT_TIMEOUT;
	else if (res.signal)
		status = 128 + res.signal;
	else
		status = res.exit_code;
out:
	state_free(&s);
	if (log_get_max_level() >= LOG_LEVEL_DEBUG) {
		struct rusage self, kids;

		getrusage(RUSAGE_SELF, &self);
		getrusage(RUSAGE_CHILDREN, &kids);
		log_debug("t=%.3fms done; cpu self %ld+%ldus, children %ld+%ldus", now_ms() - t0,
			  (long)(self.ru_utime.tv_sec * 1000000 + self.ru_utime.tv_usec),
			  (long)(self.ru_stime.tv_sec * 1000000 + self.ru_stime.tv_usec),
			  (long)(kids.ru_utime.tv_sec * 1000000 + kids.ru_utime.tv_usec),
			  (long)(kids.ru_stime.tv_sec * 1000000 + kids.ru_stime.tv_usec));
	}
	return status;
}

int launch_main(int argc, char **argv)
{
	struct launch_config c;
	int r, status;

	log_set_program("draftbox-run");
	/* a closed 0/1/2 would be reused by our own fds and then leak into (or vanish from) the sandbox */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			int null = open("/dev/null", O_RDWR);

			if (null != fd) {
				fprintf(stderr, "draftbox-run: cannot open /dev/null\n");
				return LAUNCH_EXIT_FAILURE;
			}
		}
	signal(SIGPIPE, SIG_IGN); /* a dead sandbox shows up as EPIPE, not as our death */
	/*
	 * When a kill takes bwrap down before the sandbox's init, that init
	 * is orphaned: it must come to us (and be reaped), not to the host's
	 * pid 1, which may never reap it.
	 */
	(void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	launch_config_init(&c);
	r = launch_parse_args(argc, argv, &c);
	if (r != 0) {
		launch_config_free(&c);
		return r > 0 ? 0 : LAUNCH_EXIT_FAILURE;
	}
	if (c.verbose)
		log_set_max_level(LOG_LEVEL_DEBUG);
#ifdef LAUNCH_LITE
	if (lite_dispatch(&c, argv) < 0) {
		launch_config_free(&c);
		return LAUNCH_EXIT_FAILURE;
	}
#endif
	/* fds the caller gave us are ours alone: nothing we start inherits them */
	if (c.json_fd >= 0 && fcntl(c.json_fd, F_SETFD, FD_CLOEXEC) < 0) {
		log_error_errno(-errno, "bad --json-fd %d", c.json_fd);
		launch_config_free(&c);
		return LAUNCH_EXIT_FAILURE;
	}
	if (geteuid() != 0) {
		log_error("draftbox-run must run as root (it creates cgroups and drops to a pool uid)");
		launch_config_free(&c);
		return LAUNCH_EXIT_FAILURE;
	}
	if (c.probe) {
#ifdef LAUNCH_LITE
		status = LAUNCH_EXIT_FAILURE; /* lite_dispatch() hands the probe over */
#else
		r = launch_probe(&c);
		status = r == 0 ? 0 : 1;
#endif
	} else {
		status = launch_run(&c);
	}
	preloaded_seccomp_fd = safe_close(preloaded_seccomp_fd);
	launch_config_free(&c);
	return status;
}
