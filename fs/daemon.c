// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The draftfs daemon: validates the layers (existence, nesting, same fs for
 * upper and work, an exclusive lock on the workdir, an empty or our own
 * workdir, a mountpoint not already used by a FUSE/overlay mount), cleans
 * the work dir, recovers the control plane's journal, mounts, goes to the
 * background once the mount is live (the parent exits 0 only then, or 1
 * with the error), starts the control server and runs the multi-threaded
 * FUSE loop until unmount or SIGTERM/SIGINT.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "bgfill.h"
#include "fdpath.h"
#include "finalize.h"
#include "log.h"
#include "macro.h"
#include "ops.h"
#include "ovl.h"

#define log_oom() log_error_errno(-ENOMEM, "out of memory")

#ifndef FUSE_SUPER_MAGIC
#define FUSE_SUPER_MAGIC 0x65735546
#endif

struct ovl_fs *ovl_fs;

static const char *const work_allowed[] = { "work", "index", "draftfs", "draftfs.lock" };

static int open_dir(const char *path, const char *what, int *ret)
{
	struct stat st;
	int fd;

	fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return log_error_errno(-errno, "cannot open %s '%s'", what, path);
	if (fstat(fd, &st) < 0) {
		close(fd);
		return log_error_errno(-errno, "cannot stat %s '%s'", what, path);
	}
	/* Readable and searchable by us (root may still be refused on some network filesystems). */
	{
		int rfd = fd_reopen(fd, O_RDONLY | O_DIRECTORY);

		if (rfd < 0) {
			close(fd);
			return log_error_errno(rfd, "cannot read %s '%s'", what, path);
		}
		close(rfd);
	}
	*ret = fd;
	return 0;
}

/* True if directory @a is @b or lies below it. */
static bool is_inside(int a, int b)
{
	struct stat sb, sc, prev = { 0 };
	_cleanup_close_ int cur = -1;

	if (fstat(b, &sb) < 0)
		return false;
	cur = fcntl(a, F_DUPFD_CLOEXEC, 3);
	if (cur < 0)
		return false;
	for (int depth = 0; depth < 4096; depth++) {
		int up;

		if (fstat(cur, &sc) < 0)
			return false;
		if (sc.st_dev == sb.st_dev && sc.st_ino == sb.st_ino)
			return true;
		if (depth > 0 && sc.st_dev == prev.st_dev && sc.st_ino == prev.st_ino)
			return false; /* reached "/" */
		prev = sc;
		up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (up < 0)
			return false;
		close(cur);
		cur = up;
	}
	return false;
}

static int check_workdir_contents(int work_fd, const char *path)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int fd;

	fd = fd_reopen(work_fd, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return log_error_errno(fd, "cannot read workdir '%s'", path);
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return log_error_errno(-errno, "cannot read workdir '%s'", path);
	}
	while ((de = readdir(d))) {
		bool ok = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;

		for (size_t i = 0; !ok && i < ARRAY_SIZE(work_allowed); i++)
			ok = strcmp(de->d_name, work_allowed[i]) == 0;
		if (!ok)
			return log_error_errno(-ENOTEMPTY, "workdir '%s' is not empty (found '%s')", path, de->d_name);
	}
	return 0;
}

static int open_subdir(int dir, const char *name, mode_t mode, int *ret)
{
	int fd;

	if (mkdirat(dir, name, mode) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(dir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOTDIR || errno == ELOOP ? -ENOTDIR : -errno;
	*ret = fd;
	return 0;
}

static uid_t map_uid_cb(void *ud, uid_t view)
{
	return ovl_idmap_to_disk(&ovl_fs->opt->uidmap, view);
}

static gid_t map_gid_cb(void *ud, gid_t view)
{
	return ovl_idmap_to_disk(&ovl_fs->opt->gidmap, view);
}

static void raise_nofile(void)
{
	struct rlimit rl;
	_cleanup_fclose_ FILE *f = fopen("/proc/sys/fs/nr_open", "re");
	unsigned long nr = 0;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (f && fscanf(f, "%lu", &nr) == 1 && nr > rl.rlim_max) {
		struct rlimit want = { .rlim_cur = nr, .rlim_max = nr };

		if (setrlimit(RLIMIT_NOFILE, &want) == 0)
			return;
	}
	rl.rlim_cur = rl.rlim_max;
	(void)setrlimit(RLIMIT_NOFILE, &rl);
}

/* Opens and checks every directory; fills @fs. Logs the error. */
static int setup_layers(struct ovl_fs *fs)
{
	const struct ovl_options *o = fs->opt;
	struct stat ust, wst;
	struct statvfs sv;
	int r;

	for (size_t i = 0; i < o->n_lower; i++) {
		struct stat st;

		r = open_dir(o->lowerdirs[i], "lowerdir", &fs->lower_fds[i]);
		if (r < 0)
			return r;
		fs->n_lower = i + 1;
		if (fstat(fs->lower_fds[i], &st) < 0)
			return log_error_errno(-errno, "cannot stat lowerdir '%s'", o->lowerdirs[i]);
		fs->lower_devs[i] = st.st_dev;
	}
	r = open_dir(o->upperdir, "upperdir", &fs->upper_fd);
	if (r < 0)
		return r;
	r = open_dir(o->workdir, "workdir", &fs->work_fd);
	if (r < 0)
		return r;
	if (fstat(fs->upper_fd, &ust) < 0 || fstat(fs->work_fd, &wst) < 0)
		return log_error_errno(-errno, "cannot stat upperdir '%s'", o->upperdir);
	fs->upper_dev = ust.st_dev;
	ovl_xino_setup(fs);
	if (ust.st_dev != wst.st_dev)
		return log_error_errno(-EXDEV, "workdir '%s' and upperdir '%s' must be on the same filesystem",
				       o->workdir, o->upperdir);
	if (!o->read_only && fstatvfs(fs->upper_fd, &sv) == 0 && (sv.f_flag & ST_RDONLY))
		return log_error_errno(-EROFS, "upperdir '%s' is on a read-only filesystem", o->upperdir);

	for (size_t i = 0; i < fs->n_lower; i++) {
		if (is_inside(fs->upper_fd, fs->lower_fds[i]))
			return log_error_errno(-EINVAL, "upperdir '%s' is inside lowerdir '%s'", o->upperdir,
					       o->lowerdirs[i]);
		if (is_inside(fs->lower_fds[i], fs->upper_fd))
			return log_error_errno(-EINVAL, "lowerdir '%s' is inside upperdir '%s'", o->lowerdirs[i],
					       o->upperdir);
		if (is_inside(fs->work_fd, fs->lower_fds[i]) || is_inside(fs->lower_fds[i], fs->work_fd))
			return log_error_errno(-EINVAL, "workdir '%s' and lowerdir '%s' overlap", o->workdir,
					       o->lowerdirs[i]);
	}
	if (is_inside(fs->work_fd, fs->upper_fd) || is_inside(fs->upper_fd, fs->work_fd))
		return log_error_errno(-EINVAL, "workdir '%s' and upperdir '%s' must be separate subtrees", o->workdir,
				       o->upperdir);

	/* One draftfs per workdir: a lock held for the daemon's life. */
	fs->lock_fd = openat(fs->work_fd, "draftfs.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fs->lock_fd < 0)
		return log_error_errno(-errno, "cannot create the lock file in workdir '%s'", o->workdir);
	if (flock(fs->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return log_error_errno(errno == EWOULDBLOCK ? -EBUSY : -errno,
				       "workdir '%s' is in use by another draftfs", o->workdir);
	/* One mount per upperdir, whatever its workdir: a lock on the directory itself (nothing shows in the view). */
	fs->upper_lock_fd = fd_reopen(fs->upper_fd, O_RDONLY | O_DIRECTORY);
	if (fs->upper_lock_fd < 0)
		return log_error_errno(fs->upper_lock_fd, "cannot open upperdir '%s'", o->upperdir);
	if (flock(fs->upper_lock_fd, LOCK_EX | LOCK_NB) < 0)
		return log_error_errno(errno == EWOULDBLOCK ? -EBUSY : -errno,
				       "upperdir '%s' is in use by another draftfs", o->upperdir);
	r = check_workdir_contents(fs->work_fd, o->workdir);
	if (r < 0)
		return r;
	r = open_subdir(fs->work_fd, "work", 0700, &fs->workwork_fd);
	if (r < 0)
		return log_error_errno(r, "cannot create '%s/work'", o->workdir);
	r = ovl_work_clean(fs->workwork_fd);
	if (r < 0)
		return log_error_errno(r, "cannot clean '%s/work'", o->workdir);

	if (o->statedir) {
		if (mkdir(o->statedir, 0700) < 0 && errno != EEXIST)
			return log_error_errno(-errno, "cannot create statedir '%s'", o->statedir);
		fs->state_fd = open(o->statedir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (fs->state_fd < 0)
			return log_error_errno(-errno, "cannot open statedir '%s'", o->statedir);
	} else {
		r = open_subdir(fs->work_fd, "draftfs", 0700, &fs->state_fd);
		if (r < 0)
			return log_error_errno(r, "cannot create '%s/draftfs'", o->workdir);
	}
	{
		char p[64], real[PATH_MAX];
		ssize_t n;

		snprintf(p, sizeof(p), "/proc/self/fd/%d", fs->state_fd);
		n = readlink(p, real, sizeof(real) - 1);
		if (n < 0)
			return log_error_errno(-errno, "cannot resolve the statedir");
		real[n] = '\0';
		if (asprintf(&fs->ctl_sock_path, "%s/ctl.sock", real) < 0)
			return log_oom();
	}
	return 0;
}

static int check_mountpoint(const char *path)
{
	struct statx stx;
	struct statfs sfs;

	if (statx(AT_FDCWD, path, AT_STATX_SYNC_AS_STAT, STATX_TYPE, &stx) < 0)
		return log_error_errno(-errno, "cannot access mountpoint '%s'", path);
	if (!S_ISDIR(stx.stx_mode))
		return log_error_errno(-ENOTDIR, "mountpoint '%s' is not a directory", path);
	if (statfs(path, &sfs) < 0)
		return log_error_errno(-errno, "cannot access mountpoint '%s'", path);
	if ((stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) &&
	    ((unsigned long)sfs.f_type == FUSE_SUPER_MAGIC || (unsigned long)sfs.f_type == OVERLAYFS_SUPER_MAGIC))
		return log_error_errno(-EBUSY, "mountpoint '%s' is already in use by a %s mount", path,
				       (unsigned long)sfs.f_type == FUSE_SUPER_MAGIC ? "FUSE" : "overlay");
	return 0;
}

static int setup_root(struct ovl_fs *fs)
{
	struct ovl_node *root = &fs->root;
	struct stat st;

	if (getrandom(fs->dir_key, sizeof(fs->dir_key), 0) != (ssize_t)sizeof(fs->dir_key))
		return errno ? -errno : -EIO;

	pthread_rwlock_init(&root->lock, NULL);
	root->type = S_IFDIR;
	root->nlookup = 1;
	root->name = strdup("");
	if (!root->name)
		return -ENOMEM;
	root->upper_fd = fcntl(fs->upper_fd, F_DUPFD_CLOEXEC, 3);
	root->lower_fd = fcntl(fs->lower_fds[0], F_DUPFD_CLOEXEC, 3);
	root->lower_layer = 0;
	if (root->upper_fd < 0 || root->lower_fd < 0)
		return -errno;
	if (fs->n_lower > 1) {
		root->extra = calloc(fs->n_lower - 1, sizeof(*root->extra));
		if (!root->extra)
			return -ENOMEM;
		for (size_t i = 1; i < fs->n_lower; i++) {
			root->extra[i - 1].fd = fcntl(fs->lower_fds[i], F_DUPFD_CLOEXEC, 3);
			root->extra[i - 1].layer = (uint16_t)i;
			if (root->extra[i - 1].fd < 0)
				return -errno;
			root->n_extra++;
		}
	}
	if (fstat(fs->upper_fd, &st) < 0)
		return -errno;
	root->key_dev = st.st_dev;
	root->key_ino = st.st_ino;
	root->ino = ovl_view_ino(-1, st.st_ino);
	return 0;
}

static void fs_free(struct ovl_fs *fs)
{
	ovl_table_free(fs);
	ovl_listing_drop(&fs->root);
	safe_close(fs->root.upper_fd);
	safe_close(fs->root.lower_fd);
	for (uint16_t i = 0; i < fs->root.n_extra; i++)
		safe_close(fs->root.extra[i].fd);
	free(fs->root.extra);
	free(fs->root.name);
	for (size_t i = 0; i < fs->n_lower; i++)
		safe_close(fs->lower_fds[i]);
	safe_close(fs->upper_fd);
	safe_close(fs->work_fd);
	safe_close(fs->workwork_fd);
	safe_close(fs->state_fd);
	safe_close(fs->lock_fd);
	safe_close(fs->upper_lock_fd);
	free(fs->ctl_sock_path);
	free(fs);
}

static int build_fuse_args(const struct ovl_options *o, struct fuse_args *args)
{
	_cleanup_free_ char *opts = NULL;

	if (asprintf(&opts, "fsname=%s,subtype=draftfs%s%s%s%s", o->source, o->allow_other ? ",allow_other" : "",
		     o->default_permissions ? ",default_permissions" : "", o->fuse_opts ? "," : "",
		     o->fuse_opts ? o->fuse_opts : "") < 0)
		return -ENOMEM;
	if (fuse_opt_add_arg(args, "draftfs") < 0 || fuse_opt_add_arg(args, "-o") < 0 ||
	    fuse_opt_add_arg(args, opts) < 0)
		return -ENOMEM;
	if (o->debug && fuse_opt_add_arg(args, "-d") < 0)
		return -ENOMEM;
	return 0;
}

static int redirect_stdio(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	(void)dup2(fd, STDIN_FILENO);
	(void)dup2(fd, STDOUT_FILENO);
	(void)dup2(fd, STDERR_FILENO);
	close(fd);
	return 0;
}

int ovl_daemon_main(int argc, char **argv)
{
	struct ovl_options opt = { 0 };
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg = NULL;
	pthread_rwlockattr_t rwa;
	sigset_t block, oldmask;
	pthread_mutexattr_t ma;
	char err[512] = "";
	char real_mnt[PATH_MAX];
	struct ovl_fs *fs;
	int r, status = 1, pipefd[2] = { -1, -1 };
	bool mounted = false;

	log_set_program("draftfs");
	/*
	 * One malloc arena: nodes are made and freed by different worker
	 * threads, and with per-thread arenas the memory a forgotten walk
	 * freed is not reused by the next one (RSS over 6 walks of 30k
	 * entries with caches dropped in between: +2.9 MiB, one arena +0.6 MiB).
	 * The workers spend their time in syscalls, not in malloc.
	 */
	mallopt(M_ARENA_MAX, 1);
	r = ovl_options_parse(argc, argv, &opt, err, sizeof(err));
	if (r < 0) {
		if (r == -ENOMEM)
			log_oom();
		else
			log_error("%s", err);
		ovl_options_free(&opt);
		return 1;
	}

	fs = calloc(1, sizeof(*fs));
	if (!fs) {
		ovl_options_free(&opt);
		return log_oom(), 1;
	}
	ovl_fs = fs;
	fs->opt = &opt;
	fs->upper_fd = fs->work_fd = fs->workwork_fd = fs->state_fd = fs->lock_fd = fs->upper_lock_fd = -1;
	fs->root.upper_fd = fs->root.lower_fd = -1;
	fs->timeout = opt.timeout;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&fs->copyup_lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_mutex_init(&fs->fill_lock, NULL);
	pthread_cond_init(&fs->fill_cond, NULL);
	pthread_rwlockattr_init(&rwa);
	pthread_rwlockattr_setkind_np(&rwa, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&fs->quiesce, &rwa);
	pthread_rwlockattr_destroy(&rwa);

	umask(0);
	raise_nofile();
	pthread_mutex_init(&fs->evict_lock, NULL);
	{
		struct rlimit rl;
		long nofile = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 1024;

		/* Leave a quarter (at least 256) for open files, pipes, sockets and the control plane. */
		fs->fd_budget = MAX(nofile - MAX(nofile / 4, 256), 64);
	}

	if (check_mountpoint(opt.mountpoint) < 0)
		goto out;
	if (opt.uring == OVL_URING_ON && !ovl_uring_available(err, sizeof(err))) {
		log_error("uring=on: %s", err);
		goto out;
	}
	if (!realpath(opt.mountpoint, real_mnt)) {
		log_error_errno(-errno, "cannot resolve mountpoint '%s'", opt.mountpoint);
		goto out;
	}
	if (setup_layers(fs) < 0)
		goto out;
	r = ovl_table_init(fs);
	if (r >= 0)
		r = setup_root(fs);
	if (r < 0) {
		log_error_errno(r, "cannot set up the inode table");
		goto out;
	}

	fs->layers = (struct ovl_layers){
		.upper_fd = fs->upper_fd,
		.work_fd = fs->work_fd,
		.state_fd = fs->state_fd,
		.n_lower = fs->n_lower,
		.lower_fds = fs->lower_fds,
		.mountpoint = real_mnt,
		.map_uid_to_disk = (opt.uidmap.n ? map_uid_cb : NULL),
		.map_gid_to_disk = (opt.gidmap.n ? map_gid_cb : NULL),
		.map_userdata = fs,
	};
	fs->live = (struct ovl_live){
		.userdata = fs,
		.quiesce = ovl_live_quiesce,
		.changed = ovl_live_changed,
		.info = ovl_live_info,
	};
	r = ovl_journal_recover(&fs->layers); /* logs its own error */
	if (r < 0)
		goto out;
	/* Before the quota scan: a recovered fill gives the file its bytes. */
	r = ovl_bgfill_recover(&fs->layers, opt.fsync);
	if (r < 0) {
		log_error_errno(r, "cannot finish the background copy-ups an earlier daemon left in '%s'", opt.upperdir);
		goto out;
	}
	r = ovl_quota_scan();
	if (r < 0) {
		log_error_errno(r, "cannot measure upperdir '%s' for the quota", opt.upperdir);
		goto out;
	}

	if (build_fuse_args(&opt, &args) < 0) {
		log_oom();
		goto out;
	}
	fs->se = fuse_session_new(&args, &ovl_ops, sizeof(ovl_ops), fs);
	if (!fs->se) {
		log_error("cannot create the FUSE session");
		goto out;
	}
	if (fuse_set_signal_handlers(fs->se) < 0) {
		log_error("cannot install signal handlers");
		goto out;
	}
	if (fuse_session_mount(fs->se, real_mnt) != 0) {
		log_error("cannot mount on '%s'", real_mnt);
		goto out;
	}
	mounted = true;
	r = ovl_devio_setup(fs);
	if (r >= 0)
		r = ovl_pt_setup(fs);
	if (r < 0) {
		log_error_errno(r, "cannot set up the session's device I/O");
		goto out;
	}

	if (!opt.foreground) {
		pid_t pid;

		if (pipe2(pipefd, O_CLOEXEC) < 0) {
			log_error_errno(-errno, "cannot create a pipe");
			goto out;
		}
		pid = fork();
		if (pid < 0) {
			log_error_errno(-errno, "cannot fork");
			goto out;
		}
		if (pid > 0) {
			char c = 0;
			ssize_t n;

			/* The parent: report success only once the child is serving. */
			close(pipefd[1]);
			n = RETRY_EINTR(read(pipefd[0], &c, 1));
			close(pipefd[0]);
			_exit(n == 1 && c == 'k' ? 0 : 1);
		}
		close(pipefd[0]);
		pipefd[0] = -1;
		(void)setsid();
	}

	/*
	 * Our helper threads must not take SIGTERM/SIGINT/SIGHUP: libfuse's
	 * handler only flags the session, and only a FUSE worker or the loop's
	 * main thread waking up with EINTR ends the loop.
	 */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &block, &oldmask);
	r = ovl_whiteout_pool_start(fs);
	if (r < 0) {
		pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
		log_error_errno(r, "cannot start the whiteout pool thread");
		goto out;
	}
	r = ovl_finalize_start(fs);
	if (r < 0) {
		pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
		log_error_errno(r, "cannot start the finalizer thread");
		goto out;
	}
	r = ovl_bgfill_start();
	if (r < 0) {
		pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
		log_error_errno(r, "cannot start the background copy-up thread");
		goto out;
	}
	r = ovl_control_start(&fs->layers, &fs->live, &fs->ctl);
	pthread_sigmask(SIG_SETMASK, &oldmask, NULL);
	if (r < 0) {
		log_error_errno(r, "cannot start the control server in '%s'", fs->ctl_sock_path);
		goto out;
	}
	if (!opt.foreground) {
		if (chdir("/") < 0) { /* not fatal */
		}
		(void)RETRY_EINTR(write(pipefd[1], "k", 1));
		pipefd[1] = safe_close(pipefd[1]);
		(void)redirect_stdio();
	}

	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		log_oom();
		goto out;
	}
	fuse_loop_cfg_set_max_threads(cfg, opt.threads);
	fuse_loop_cfg_set_idle_threads(cfg, opt.threads > 4 ? opt.threads / 2 : opt.threads);
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	r = fuse_session_loop_mt(fs->se, cfg);
	status = r < 0 ? 1 : 0; /* 0, or the signal number that stopped it */

out:
	if (fs->ctl) {
		ovl_control_stop(fs->ctl);
		fs->ctl = NULL;
	}
	ovl_whiteout_pool_stop(fs);
	ovl_bgfill_stop(); /* first: a finished fill is handed to the finalizer */
	ovl_finalize_stop(fs);
	if (cfg)
		fuse_loop_cfg_destroy(cfg);
	if (fs->se) {
		if (mounted)
			fuse_session_unmount(fs->se);
		ovl_uring_stop(); /* after the unmount, which ends their entries */
		fuse_remove_signal_handlers(fs->se);
		fuse_session_destroy(fs->se);
		fs->se = NULL;
	}
	safe_close(pipefd[1]);
	fuse_opt_free_args(&args);
	fs_free(fs);
	ovl_fs = NULL;
	ovl_options_free(&opt);
	return status;
}
