// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * A session's view at <state>/sessions/<id>/view:
 *  - overlay: a draftfs mount (lower = the workspace, upper/work in the
 *    session dir) with uidmapping=OWNER:POOL:1 (disk id first, as
 *    fuse-overlayfs) so the workspace owner's files appear as the sandbox
 *    uid's, and the session's quota;
 *  - rw / ro: an idmapped bind mount of the workspace (open_tree +
 *    mount_setattr(MOUNT_ATTR_IDMAP) with a user namespace mapping OWNER to
 *    POOL), read-only for ro.
 * Also: mountinfo lookups and a symlink-safe, mount-bounded rm -rf.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdpath.h"
#include "log.h"
#include "session.h"
#include "spawn.h"

#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

struct idmap_mount_attr {
	uint64_t attr_set;
	uint64_t attr_clr;
	uint64_t propagation;
	uint64_t userns_fd;
};

static int sys_open_tree(int dfd, const char *path, unsigned flags)
{
	return (int)syscall(SYS_open_tree, dfd, path, flags);
}

static int sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to, unsigned flags)
{
	return (int)syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags);
}

static int sys_mount_setattr(int dfd, const char *path, unsigned flags, struct idmap_mount_attr *attr)
{
	return (int)syscall(SYS_mount_setattr, dfd, path, flags, attr, sizeof(*attr));
}

static int write_file(const char *path, const char *s)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	return write_full(fd, s, strlen(s));
}

/*
 * Returns an fd of a new user namespace whose uid_map is "@inside @outside 1"
 * (and the same for gids): an idmapped mount with it shows on-disk @inside
 * as @outside. Returns the fd or -errno.
 */
static int userns_for_mapping(uid_t inside_uid, uid_t outside_uid, gid_t inside_gid, gid_t outside_gid)
{
	char path[64], map[64];
	int pipefd[2];
	pid_t pid;
	int fd, r = 0, status;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return -errno;
	pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
	if (pid < 0) {
		r = -errno;
		close(pipefd[0]);
		close(pipefd[1]);
		return r;
	}
	if (pid == 0) {
		char c;

		close(pipefd[1]);
		/* wait until the parent has the namespace fd, then exit */
		while (read(pipefd[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(pipefd[0]);
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)inside_uid, (unsigned)outside_uid);
	r = write_file(path, map);
	if (r >= 0) {
		snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)inside_gid, (unsigned)outside_gid);
		r = write_file(path, map);
	}
	fd = -1;
	if (r >= 0) {
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			r = -errno;
	}
	close(pipefd[1]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return r < 0 ? r : fd;
}

static int idmapped_bind(const char *source, const char *target, bool readonly, uid_t owner_uid, gid_t owner_gid,
			 uid_t pool_uid, gid_t pool_gid)
{
	_cleanup_close_ int src_fd = -1, tree_fd = -1, userns_fd = -1;
	struct idmap_mount_attr attr = {};

	src_fd = open(source, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (src_fd < 0)
		return -errno;
	tree_fd = sys_open_tree(src_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (tree_fd < 0)
		return -errno;
	userns_fd = userns_for_mapping(owner_uid, pool_uid, owner_gid, pool_gid);
	if (userns_fd < 0)
		return userns_fd;
	attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (readonly ? MOUNT_ATTR_RDONLY : 0);
	attr.userns_fd = (uint64_t)userns_fd;
	if (sys_mount_setattr(tree_fd, "", AT_EMPTY_PATH, &attr) < 0)
		return -errno;
	if (sys_move_mount(tree_fd, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return -errno;
	return 0;
}

/*
 * The mount gate. bwrap binds the host root recursively and then remounts
 * each submount read-only; a view mounted or unmounted at that moment makes
 * the remount fail with ENOENT and the sandbox does not start. So mount
 * changes (writers) wait until no sandbox is being set up (readers), and
 * sandboxes wait while a mount change is pending.
 */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static unsigned gate_readers, gate_writers_waiting;
static bool gate_writer;

void api_mount_gate_setup_begin(void)
{
	pthread_mutex_lock(&gate_lock);
	while (gate_writer || gate_writers_waiting)
		pthread_cond_wait(&gate_cond, &gate_lock);
	gate_readers++;
	pthread_mutex_unlock(&gate_lock);
}

void api_mount_gate_setup_end(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_readers--;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

void api_mount_gate_change_begin(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_writers_waiting++;
	while (gate_writer || gate_readers)
		pthread_cond_wait(&gate_cond, &gate_lock);
	gate_writers_waiting--;
	gate_writer = true;
	pthread_mutex_unlock(&gate_lock);
}

void api_mount_gate_change_end(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_writer = false;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

bool api_idmap_supported(void)
{
	static int cached = -1;
	char tmpl[] = "/tmp/draftbox-idmap-XXXXXX", target[64];
	int r;

	if (cached >= 0)
		return cached;
	if (!mkdtemp(tmpl))
		return (cached = 0);
	snprintf(target, sizeof(target), "%s/m", tmpl);
	if (mkdir(target, 0700) < 0) {
		rmdir(tmpl);
		return (cached = 0);
	}
	r = idmapped_bind(tmpl, target, true, 0, 0, 1, 1);
	if (r >= 0)
		umount2(target, MNT_DETACH);
	rmdir(target);
	rmdir(tmpl);
	cached = r >= 0;
	return cached;
}

/* Last non-empty line of @path (at most @size-1 bytes) into @buf, for error messages. */
static void log_tail(const char *path, char *buf, size_t size)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	char tmp[2048];
	ssize_t n;
	off_t end;
	char *line, *p;

	buf[0] = '\0';
	if (fd < 0)
		return;
	end = lseek(fd, 0, SEEK_END);
	if (end < 0)
		return;
	n = pread(fd, tmp, sizeof(tmp) - 1, end > (off_t)sizeof(tmp) - 1 ? end - (off_t)sizeof(tmp) + 1 : 0);
	if (n <= 0)
		return;
	tmp[n] = '\0';
	while (n > 0 && (tmp[n - 1] == '\n' || tmp[n - 1] == ' '))
		tmp[--n] = '\0';
	p = strrchr(tmp, '\n');
	line = p ? p + 1 : tmp;
	snprintf(buf, size, "%.400s", line);
}

#define MOUNT_TIMEOUT_MS 30000

static int mount_draftfs(struct api_session *s, struct api_error *err)
{
	const struct api_config *cfg = s->srv->cfg;
	_cleanup_free_ char *opts = NULL, *log_path = NULL, *upper = NULL, *work = NULL, *quota = NULL;
	_cleanup_close_ int log_fd = -1, pidfd = -1, mi_fd = -1;
	char msg[512];
	pid_t pid;
	int r;

	if (!cfg->draftfs)
		return api_error_set(err, -ENOENT, 503, API_E_UNAVAILABLE, "draftfs is not installed");
	if (asprintf(&upper, "%s/upper", s->dir) < 0 || asprintf(&work, "%s/work", s->dir) < 0 ||
	    asprintf(&log_path, "%s/draftfs.log", s->dir) < 0)
		return -ENOMEM;
	if (s->mode == API_WS_RO) {
		/* a read-only mount (its upper stays empty) */
		if (asprintf(&opts, "lowerdir=%s,upperdir=%s,workdir=%s,ro,uidmapping=%u:%u:1,gidmapping=%u:%u:1",
			     s->workspace, upper, work, (unsigned)s->owner_uid, (unsigned)s->pool_uid,
			     (unsigned)s->owner_gid, (unsigned)s->pool_gid) < 0)
			return -ENOMEM;
	} else {
		if (cfg->quota_bytes && cfg->quota_inodes)
			r = asprintf(&quota, ",quota_bytes=%llu,quota_inodes=%llu", (unsigned long long)cfg->quota_bytes,
				     (unsigned long long)cfg->quota_inodes);
		else if (cfg->quota_bytes)
			r = asprintf(&quota, ",quota_bytes=%llu", (unsigned long long)cfg->quota_bytes);
		else if (cfg->quota_inodes)
			r = asprintf(&quota, ",quota_inodes=%llu", (unsigned long long)cfg->quota_inodes);
		else
			r = asprintf(&quota, "%s", "");
		if (r < 0)
			return -ENOMEM;
		/*
		 * fuse-overlayfs' (and draftfs') order is DISK:VIEW:LEN: the id stored in
		 * the layers first, the id seen through the mount second (fuse-overlayfs
		 * read_mappings(), docs/fs.md). So the owner's files show as the pool uid.
		 */
		if (asprintf(&opts, "lowerdir=%s,upperdir=%s,workdir=%s,uidmapping=%u:%u:1,gidmapping=%u:%u:1%s",
			     s->workspace, upper, work, (unsigned)s->owner_uid, (unsigned)s->pool_uid,
			     (unsigned)s->owner_gid, (unsigned)s->pool_gid, quota) < 0)
			return -ENOMEM;
	}
	if (strchr(s->workspace, ',') || strchr(s->workspace, ':'))
		return api_error_set(err, -EINVAL, 400, API_E_INVALID_REQUEST,
				     "workspace path '%s' contains ',' or ':' which mount options cannot carry", s->workspace);

	log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (log_fd < 0)
		return api_error_set(err, -errno, 500, API_E_RUNTIME, "cannot create the draftfs log: %m");
	/*
	 * Every change of this mount namespace's table makes /proc/self/mountinfo
	 * poll with POLLPRI, so the wait below wakes on the mount itself rather
	 * than on a timer. Opened before draftfs starts, it cannot miss that mount.
	 */
	mi_fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	{
		/* in the foreground, detached from us: its stderr (and any sanitizer report) stays in draftfs.log */
		const char *argv[] = { cfg->draftfs, "-f", "-o", opts, s->view, NULL };

		r = api_spawn_detached(argv, log_fd, &pid);
		if (r < 0)
			return api_error_set(err, r, 503, API_E_UNAVAILABLE, "cannot start draftfs: %s", strerror(-r));
	}
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	for (uint64_t start = api_mono_ms();;) {
		/* poll() skips a negative fd: without either, this is a 20 ms sleep between looks */
		struct pollfd p[2] = { { .fd = pidfd, .events = POLLIN }, { .fd = mi_fd, .events = POLLPRI } };
		uint64_t waited;

		if (api_mount_info(s->view, NULL) > 0)
			return 0;
		waited = api_mono_ms() - start;
		if (waited >= MOUNT_TIMEOUT_MS) {
			kill(pid, SIGKILL);
			return api_error_set(err, -ETIMEDOUT, 500, API_E_RUNTIME, "draftfs did not finish mounting in time");
		}
		(void)poll(p, 2, (int)MIN(MOUNT_TIMEOUT_MS - waited, mi_fd >= 0 ? 1000 : 20));
		if (pidfd >= 0 ? (p[0].revents & POLLIN) : kill(pid, 0) < 0) {
			log_tail(log_path, msg, sizeof(msg));
			return api_error_set(err, -EIO, 500, API_E_RUNTIME, "draftfs failed to mount: %s",
					     msg[0] ? msg : "no message");
		}
	}
}

static int mount_view_gated(struct api_session *s, struct api_error *err);

int api_mount_view(struct api_session *s, struct api_error *err)
{
	int r;

	api_mount_gate_change_begin();
	r = mount_view_gated(s, err);
	api_mount_gate_change_end();
	return r;
}

static int mount_view_gated(struct api_session *s, struct api_error *err)
{
	int r;

	if (s->mode == API_WS_OVERLAY)
		return mount_draftfs(s, err);
	if (!s->srv->cfg->idmap || !api_idmap_supported()) {
		if (s->mode == API_WS_RO)
			return mount_draftfs(s, err); /* a read-only draftfs maps ids too */
		return api_error_set(err, -EOPNOTSUPP, 400, API_E_NOT_SUPPORTED,
				     "rw sessions need idmapped mounts, which are %s",
				     s->srv->cfg->idmap ? "not available on this host" : "disabled (--idmap=false)");
	}
	r = idmapped_bind(s->workspace, s->view, s->mode == API_WS_RO, s->owner_uid, s->owner_gid, s->pool_uid,
			  s->pool_gid);
	if (r < 0)
		return api_error_set(err, r, 503, API_E_NOT_SUPPORTED,
				     "cannot create the idmapped %s mount of the workspace: %s",
				     s->mode == API_WS_RO ? "ro" : "rw", strerror(-r));
	return 0;
}

static int umount_view_gated(const char *view);

int api_umount_view(const char *view)
{
	int r;

	api_mount_gate_change_begin();
	r = umount_view_gated(view);
	api_mount_gate_change_end();
	return r;
}

static int umount_view_gated(const char *view)
{
	for (int i = 0; i < 3; i++) {
		if (umount2(view, UMOUNT_NOFOLLOW) == 0)
			continue; /* stacked mounts: repeat until none is left */
		if (errno == EINVAL || errno == ENOENT)
			return 0; /* not a mount point (any more) */
		if (errno == EBUSY && umount2(view, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
			continue;
		if (errno == EINVAL)
			return 0;
		return -errno;
	}
	return api_mount_info(view, NULL) > 0 ? -EBUSY : 0;
}

/* Undoes the octal escapes of /proc/self/mountinfo in place. */
static void unescape(char *s)
{
	char *w = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*w++ = *s++;
		}
	}
	*w = '\0';
}

int api_mount_info(const char *path, char **ret_fstype)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL, *found_type = NULL;
	size_t cap = 0;
	bool found = false;

	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) >= 0) {
		char *fields[6] = {}, *save = NULL, *p, *dash;
		size_t n = 0;

		dash = strstr(line, " - ");
		if (!dash)
			continue;
		*dash = '\0';
		for (p = strtok_r(line, " ", &save); p && n < 6; p = strtok_r(NULL, " ", &save))
			fields[n++] = p;
		if (n < 5)
			continue;
		unescape(fields[4]);
		if (strcmp(fields[4], path) != 0)
			continue;
		found = true; /* the last match is the top of the stack */
		free(found_type);
		found_type = strndup(dash + 3, strcspn(dash + 3, " \n"));
		if (!found_type)
			return -ENOMEM;
	}
	if (!found)
		return 0;
	if (ret_fstype)
		*ret_fstype = TAKE_PTR(found_type);
	return 1;
}

static int rm_rf_children(int fd, dev_t dev, unsigned depth)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int r = 0;

	if (depth > 4096)
		return -ELOOP;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT && r == 0)
				r = -errno;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			int cfd, q;

			if (st.st_dev != dev) {
				if (r == 0)
					r = -EXDEV;
				continue; /* another mount: never descend */
			}
			cfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cfd < 0) {
				if (r == 0)
					r = -errno;
				continue;
			}
			q = rm_rf_children(cfd, dev, depth + 1);
			if (q < 0 && r == 0)
				r = q;
			if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
				r = -errno;
		} else if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT && r == 0) {
			r = -errno;
		}
	}
	return r;
}

int api_rm_rf_at(int dir_fd, const char *name)
{
	struct stat st;
	int fd, r;

	if (!name_is_valid(name))
		return -EINVAL;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlinkat(dir_fd, name, 0) < 0 ? -errno : 0;
	fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = rm_rf_children(fd, st.st_dev, 0);
	if (r < 0)
		return r;
	if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}
