/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * One cgroup per run: pids, memory (swap included) and CPU limits, the
 * accounting for the JSON result, and a reliable "kill the whole tree"
 * (cgroup.kill on v2; freeze, kill every member, thaw on v1).
 *
 * cgroup v2 is used when a cgroup2 hierarchy offers the pids and memory
 * controllers; otherwise the v1 controllers pids, memory, cpu, cpuacct and
 * freezer. Runs live in "<own cgroup>/draftbox/<name>" in each v1
 * hierarchy (so a limit set on the caller still applies) and in
 * "/draftbox/<name>" on v2 (the no-internal-processes rule forbids nesting
 * below a cgroup that has processes).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fdpath.h"
#include "launch.h"
#include "macro.h"

/*
 * /proc/self/mountinfo (only its cgroup lines) and /proc/self/cgroup, read
 * once per process: a run looks things up in them a dozen times, and
 * rendering mountinfo is not cheap for the kernel.
 */
static char *cache_mountinfo, *cache_cgroup;

static FILE *open_cached(const char *path, char **slot, bool cgroup_lines_only)
{
	if (!*slot) {
		_cleanup_close_ int fd = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
		_cleanup_free_ char *all = NULL;
		size_t n;

		if (fd < 0 || read_full_fd(fd, 1 << 24, &all, &n) < 0)
			return NULL;
		if (cgroup_lines_only) {
			char *out = malloc(n + 1), *o = out;

			if (!out)
				return NULL;
			for (char *l = all, *e; *l; l = e) {
				e = strchrnul(l, '\n');
				if (*e)
					e++;
				if (strstr(l, " - cgroup") && strstr(l, " - cgroup") < e) {
					memcpy(o, l, (size_t)(e - l));
					o += e - l;
				}
			}
			*o = 0;
			*slot = out;
		} else {
			*slot = TAKE_PTR(all);
		}
	}
	if (!**slot)
		return fopen("/dev/null", "re");
	return fmemopen(*slot, strlen(*slot), "r");
}

/* Finds the mount point of the hierarchy of @controller (v1) or of cgroup2 (@controller NULL). */
static int find_mount(const char *controller, char **ret)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;

	f = open_cached("/proc/self/mountinfo", &cache_mountinfo, true);
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) >= 0) {
		char *sep = strstr(line, " - "), *mnt, *fstype, *src, *opts, *save = NULL;
		char *p = line;

		if (!sep)
			continue;
		/* id parent major:minor root mountpoint ... - fstype source superopts */
		for (int i = 0; i < 4 && p; i++)
			p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL;
		if (!p)
			continue;
		mnt = strtok_r(p, " ", &save);
		fstype = strtok_r(sep + 3, " ", &save);
		src = strtok_r(NULL, " ", &save);
		opts = strtok_r(NULL, " \n", &save);
		if (!mnt || !fstype || !src || !opts)
			continue;
		if (!controller) {
			if (strcmp(fstype, "cgroup2") != 0)
				continue;
		} else {
			bool found = false;
			char *o, *s2 = NULL;

			if (strcmp(fstype, "cgroup") != 0)
				continue;
			for (o = strtok_r(opts, ",", &s2); o && !found; o = strtok_r(NULL, ",", &s2))
				found = strcmp(o, controller) == 0;
			if (!found)
				continue;
		}
		*ret = strdup(mnt);
		return *ret ? 0 : -ENOMEM;
	}
	return -ENOENT;
}

/* Our own cgroup path in the hierarchy of @controller (v1) or v2 (@controller NULL). */
static int own_path(const char *controller, char **ret)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;

	f = open_cached("/proc/self/cgroup", &cache_cgroup, false);
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) >= 0) {
		char *c1 = strchr(line, ':'), *c2, *nl;

		if (!c1 || !(c2 = strchr(c1 + 1, ':')))
			continue;
		*c2 = 0;
		nl = strchr(c2 + 1, '\n');
		if (nl)
			*nl = 0;
		if (controller) {
			bool found = false;
			char *o, *save = NULL;

			for (o = strtok_r(c1 + 1, ",", &save); o && !found; o = strtok_r(NULL, ",", &save))
				found = strcmp(o, controller) == 0;
			if (!found)
				continue;
		} else if (c1[1] != 0)
			continue;
		*ret = strdup(c2 + 1);
		return *ret ? 0 : -ENOMEM;
	}
	return -ENOENT;
}

/* Opens @dir/@file for writing. Returns the fd or -errno. */
static int open_for_write(const char *dir, const char *file)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? -errno : fd;
}

static int write_file(const char *dir, const char *file, const char *value)
{
	_cleanup_close_ int fd = open_for_write(dir, file);

	if (fd < 0)
		return fd;
	if (write(fd, value, strlen(value)) < 0)
		return -errno;
	return 0;
}

/*
 * write_file() and mkdir() for creating a run's cgroup: a failure names its
 * path in cg->failed. The last failure wins: a create returns at the first
 * one it cannot take, after the optional ones it went past.
 */
static int cg_failed(struct launch_cgroup *cg, const char *dir, const char *file, int r)
{
	free(cg->failed);
	if (asprintf(&cg->failed, "%s%s%s", dir, file ? "/" : "", file ? file : "") < 0)
		cg->failed = NULL;
	return r;
}

static int cg_write(struct launch_cgroup *cg, const char *dir, const char *file, const char *value)
{
	int r = write_file(dir, file, value);

	return r < 0 ? cg_failed(cg, dir, file, r) : 0;
}

static int cg_mkdir(struct launch_cgroup *cg, const char *path, bool may_exist)
{
	if (mkdir(path, 0755) == 0 || (may_exist && errno == EEXIST))
		return 0;
	return cg_failed(cg, path, NULL, -errno);
}

/*
 * Reads a cgroup file. Nearly all are a few bytes: those go through a
 * stack buffer (no large allocation, which a static musl build pays for
 * with mmap/munmap); a big one is read again from the start.
 */
static int read_file(const char *dir, const char *file, char **ret)
{
	_cleanup_close_ int fd = -1;
	char path[4096], small[1024];
	ssize_t k, more;
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	k = read(fd, small, sizeof(small));
	if (k < 0)
		return -errno;
	more = k > 0 && (size_t)k < sizeof(small) ? read(fd, path, 1) : (k == 0 ? 0 : 1);
	if (more == 0) {
		*ret = strndup(small, (size_t)k);
		return *ret ? 0 : -ENOMEM;
	}
	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	return read_full_fd(fd, 1 << 22, ret, &n);
}

static uint64_t read_u64(const char *dir, const char *file)
{
	_cleanup_free_ char *s = NULL;

	if (!dir || read_file(dir, file, &s) < 0)
		return 0;
	return strtoull(s, NULL, 10);
}

/* Value of "key N" in a flat keyed file, or 0. */
static uint64_t read_keyed(const char *dir, const char *file, const char *key)
{
	_cleanup_free_ char *s = NULL;
	size_t n = strlen(key);

	if (!dir || read_file(dir, file, &s) < 0)
		return 0;
	for (char *p = s; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, key, n) == 0 && p[n] == ' ')
			return strtoull(p + n + 1, NULL, 10);
	return 0;
}

static bool v2_has_controllers(const char *mnt)
{
	_cleanup_free_ char *s = NULL;

	if (read_file(mnt, "cgroup.controllers", &s) < 0)
		return false;
	return strstr(s, "pids") && strstr(s, "memory");
}

enum launch_cgroup_version launch_cgroup_detect(void)
{
	_cleanup_free_ char *m2 = NULL, *mp = NULL, *mm = NULL;

	if (find_mount(NULL, &m2) == 0 && v2_has_controllers(m2))
		return LAUNCH_CGROUP_V2;
	if (find_mount("pids", &mp) == 0 && find_mount("memory", &mm) == 0)
		return LAUNCH_CGROUP_V1;
	return LAUNCH_CGROUP_NONE;
}

/*
 * Removes "run-<pid>-*" dirs in @parent whose launcher is gone (it was
 * SIGKILLed before it could clean up). rmdir only succeeds on an empty
 * cgroup, so a live run is never touched. @own_dirs is how many of the
 * subdirs are our own run's (already made).
 */
static void prune_stale(const char *parent, nlink_t own_dirs)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	struct stat st;

	/* cgroupfs counts subdirs in the link count: nothing but ours, nothing to read */
	if (stat(parent, &st) == 0 && st.st_nlink <= 2 + own_dirs)
		return;
	d = opendir(parent);
	while (d && (de = readdir(d))) {
		long pid;

		if (strncmp(de->d_name, "run-", 4) != 0)
			continue;
		pid = strtol(de->d_name + 4, NULL, 10);
		if (pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		(void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
	}
}

/* mkdir -p below an existing @root of @rel (absolute-looking, "/a/b"). */
static int mkdir_below(const char *root, const char *rel, char **ret)
{
	_cleanup_free_ char *path = NULL;
	size_t rootlen = strlen(root);

	if (asprintf(&path, "%s%s%s", root, rel[0] == '/' ? "" : "/", rel) < 0)
		return -ENOMEM;
	/* the parents exist after the first run: try the run's own dir first */
	if (mkdir(path, 0755) == 0)
		goto made;
	if (errno != ENOENT)
		return -errno; /* the run's own dir must be new */
	for (char *p = path + rootlen + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0755) < 0)
		return -errno; /* the run's own dir must be new */
made:
	{
		char *slash = strrchr(path, '/');

		*slash = 0;
		prune_stale(path, 1);
		*slash = '/';
	}
	*ret = TAKE_PTR(path);
	return 0;
}

struct v1_made {
	char *mnt[6];
	const char *path[6];
	size_t n;
};

/*
 * Creates "<mount of ctrl><own path>/draftbox/<name>" for one v1
 * controller. Controllers co-mounted in one hierarchy (cpu,cpuacct) share
 * the dir made for the first of them. A missing optional controller
 * leaves *ret NULL.
 */
static int v1_create(struct v1_made *made, const char *ctrl, const char *name, bool required, char **ret)
{
	_cleanup_free_ char *mnt = NULL, *own = NULL, *rel = NULL;
	int r;

	r = find_mount(ctrl, &mnt);
	if (r < 0)
		return required ? r : 0;
	for (size_t i = 0; i < made->n; i++)
		if (strcmp(made->mnt[i], mnt) == 0) {
			*ret = strdup(made->path[i]);
			return *ret ? 0 : -ENOMEM;
		}
	r = own_path(ctrl, &own);
	if (r < 0)
		return required ? r : 0;
	if (asprintf(&rel, "%s/draftbox/%s", strcmp(own, "/") == 0 ? "" : own, name) < 0)
		return -ENOMEM;
	r = mkdir_below(mnt, rel, ret);
	if (r < 0)
		return r;
	if (made->n < ARRAY_SIZE(made->mnt)) {
		made->mnt[made->n] = TAKE_PTR(mnt);
		made->path[made->n++] = *ret;
	}
	return 0;
}

static bool host_has_swap(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/meminfo", "re");
	char line[256];

	while (f && fgets(line, sizeof(line), f))
		if (strncmp(line, "SwapTotal:", 10) == 0)
			return strtoull(line + 10, NULL, 10) > 0;
	return false;
}

static int create_v1(const struct launch_config *c, const char *name, struct launch_cgroup *cg)
{
	struct v1_made made = {};
	char buf[64];
	int r;

	r = v1_create(&made, "pids", name, true, &cg->v1_pids);
	if (r >= 0)
		r = v1_create(&made, "memory", name, true, &cg->v1_memory);
	if (r >= 0)
		r = v1_create(&made, "freezer", name, true, &cg->v1_freezer);
	/* a cpu cgroup of its own only for a quota: without one it would just cost a scheduling group */
	if (r >= 0 && c->cpu > 0)
		r = v1_create(&made, "cpu", name, true, &cg->v1_cpu);
	if (r >= 0)
		r = v1_create(&made, "cpuacct", name, false, &cg->v1_cpuacct);
	for (size_t i = 0; i < made.n; i++)
		free(made.mnt[i]);
	if (r < 0)
		return r;

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)c->pids);
	r = cg_write(cg, cg->v1_pids, "pids.max", c->pids ? buf : "max");
	if (r < 0)
		return r;
	if (c->memory) {
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)c->memory);
		r = cg_write(cg, cg->v1_memory, "memory.limit_in_bytes", buf);
		if (r < 0)
			return r;
		/* swap included: memsw = memory; without swap accounting, keep the group out of swap */
		r = cg_write(cg, cg->v1_memory, "memory.memsw.limit_in_bytes", buf);
		if (r == -ENOENT && host_has_swap())
			r = cg_write(cg, cg->v1_memory, "memory.swappiness", "0");
		if (r < 0 && r != -ENOENT)
			return r;
	}
	if (c->cpu > 0) {
		r = cg_write(cg, cg->v1_cpu, "cpu.cfs_period_us", "100000");
		if (r < 0)
			return r;
		snprintf(buf, sizeof(buf), "%lld", (long long)(c->cpu * 100000 + 0.5));
		r = cg_write(cg, cg->v1_cpu, "cpu.cfs_quota_us", buf);
		if (r < 0)
			return r;
	}
	return 0;
}

static int create_v2(const struct launch_config *c, const char *name, struct launch_cgroup *cg)
{
	_cleanup_free_ char *mnt = NULL, *base = NULL;
	char buf[64];
	int r;

	r = find_mount(NULL, &mnt);
	if (r < 0)
		return r;
	if (asprintf(&base, "%s/draftbox", mnt) < 0)
		return -ENOMEM;
	r = cg_mkdir(cg, base, true);
	if (r < 0)
		return r;
	/* enable the controllers down to the run's parent; cpu is optional */
	r = cg_write(cg, mnt, "cgroup.subtree_control", "+pids +memory");
	if (r < 0)
		return r;
	(void)cg_write(cg, mnt, "cgroup.subtree_control", "+cpu");
	r = cg_write(cg, base, "cgroup.subtree_control", "+pids +memory");
	if (r < 0)
		return r;
	(void)cg_write(cg, base, "cgroup.subtree_control", "+cpu");
	prune_stale(base, 0);
	if (asprintf(&cg->v2_path, "%s/%s", base, name) < 0)
		return -ENOMEM;
	r = cg_mkdir(cg, cg->v2_path, false);
	if (r < 0) {
		free(cg->v2_path);
		cg->v2_path = NULL;
		return r;
	}

	snprintf(buf, sizeof(buf), "%llu", (unsigned long long)c->pids);
	r = cg_write(cg, cg->v2_path, "pids.max", c->pids ? buf : "max");
	if (r < 0)
		return r;
	if (c->memory) {
		snprintf(buf, sizeof(buf), "%llu", (unsigned long long)c->memory);
		r = cg_write(cg, cg->v2_path, "memory.max", buf);
		if (r < 0)
			return r;
		r = cg_write(cg, cg->v2_path, "memory.swap.max", "0");
		if (r < 0 && r != -ENOENT)
			return r;
	}
	if (c->cpu > 0) {
		snprintf(buf, sizeof(buf), "%lld 100000", (long long)(c->cpu * 100000 + 0.5));
		r = cg_write(cg, cg->v2_path, "cpu.max", buf);
		if (r < 0)
			return r;
	}
	return 0;
}

int launch_cgroup_create(const struct launch_config *c, const char *name, struct launch_cgroup *ret)
{
	struct launch_cgroup cg = {};
	int r;

	cg.version = launch_cgroup_detect();
	switch (cg.version) {
	case LAUNCH_CGROUP_V2:
		r = create_v2(c, name, &cg);
		break;
	case LAUNCH_CGROUP_V1:
		r = create_v1(c, name, &cg);
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (r < 0) {
		char *failed = TAKE_PTR(cg.failed);

		launch_cgroup_destroy(&cg);
		*ret = (struct launch_cgroup){ .failed = failed };
		return r;
	}
	*ret = cg;
	return 0;
}

/* The dirs of this cgroup, NULL-terminated. */
static void dirs_of(const struct launch_cgroup *cg, const char *out[7])
{
	size_t n = 0;

	if (cg->v2_path)
		out[n++] = cg->v2_path;
	if (cg->v1_pids)
		out[n++] = cg->v1_pids;
	if (cg->v1_memory)
		out[n++] = cg->v1_memory;
	if (cg->v1_cpu)
		out[n++] = cg->v1_cpu;
	if (cg->v1_cpuacct)
		out[n++] = cg->v1_cpuacct;
	if (cg->v1_freezer)
		out[n++] = cg->v1_freezer;
	out[n] = NULL;
}

int launch_cgroup_attach(const struct launch_cgroup *cg, pid_t pid)
{
	const char *dirs[7];
	char buf[32];

	snprintf(buf, sizeof(buf), "%d", (int)pid);
	dirs_of(cg, dirs);
	if (!dirs[0])
		return -EINVAL;
	for (size_t i = 0; dirs[i]; i++) {
		int r = write_file(dirs[i], "cgroup.procs", buf);

		if (r < 0)
			return r;
	}
	return 0;
}

/* Moves @pid and, after that, every descendant it has already forked. */
static int attach_walk(const struct launch_cgroup *cg, pid_t pid, unsigned depth)
{
	_cleanup_free_ char *kids = NULL;
	char path[96];
	size_t n;
	int r, fd;

	r = launch_cgroup_attach(cg, pid);
	if (r == -ESRCH)
		return 0; /* already gone */
	if (r < 0)
		return r;
	if (depth > 16)
		return -ELOOP;
	/* read after the move: a child forked later was born in the cgroup */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	fd = openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = read_full_fd(fd, 1 << 16, &kids, &n);
	close(fd);
	if (r < 0)
		return r;
	for (char *p = kids, *end; *p; p = end) {
		long child = strtol(p, &end, 10);

		if (end == p)
			break;
		r = attach_walk(cg, (pid_t)child, depth + 1);
		if (r < 0)
			return r;
	}
	return 0;
}

int launch_cgroup_attach_tree(const struct launch_cgroup *cg, pid_t pid)
{
	return attach_walk(cg, pid, 0);
}

int launch_cgroup_join_fd(const struct launch_cgroup *cg)
{
	if (cg->version != LAUNCH_CGROUP_V2 || !cg->v2_path)
		return -EOPNOTSUPP;
	return open_for_write(cg->v2_path, "cgroup.procs");
}

/* The directory whose cgroup.procs lists every member. */
static const char *members_dir(const struct launch_cgroup *cg)
{
	return cg->v2_path ? cg->v2_path : cg->v1_pids;
}

/* Reads the member pids. Returns count (capped at @max) or -errno. */
static int members(const struct launch_cgroup *cg, pid_t *pids, int max)
{
	_cleanup_free_ char *s = NULL;
	const char *dir = members_dir(cg);
	int n = 0, r;

	if (!dir)
		return 0;
	r = read_file(dir, "cgroup.procs", &s);
	if (r < 0)
		return r;
	for (char *p = s; *p && n < max;) {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		if (v > 0)
			pids[n++] = (pid_t)v;
		p = end;
		while (*p == '\n')
			p++;
	}
	return n;
}

static bool pid_is_root(pid_t pid)
{
	char path[64], line[256];
	_cleanup_fclose_ FILE *f = NULL;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return true; /* gone, or unknown: leave it to the final kill */
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "Uid:", 4) == 0)
			return strtoul(line + 4, NULL, 10) == 0;
	return true;
}

int launch_cgroup_signal_sandboxed(const struct launch_cgroup *cg, int sig)
{
	pid_t pids[4096];
	int n, sent = 0;

	n = members(cg, pids, (int)ARRAY_SIZE(pids));
	for (int i = 0; i < n; i++) {
		/* bwrap's own processes run as root; only the sandboxed ones get the soft signals */
		int pfd = (int)syscall(SYS_pidfd_open, pids[i], 0);

		if (pfd < 0)
			continue;
		if (!pid_is_root(pids[i]) && syscall(SYS_pidfd_send_signal, pfd, sig, NULL, 0) == 0)
			sent++;
		close(pfd);
	}
	return sent;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static bool freezer_frozen(const char *dir)
{
	_cleanup_free_ char *s = NULL;

	return read_file(dir, "freezer.state", &s) == 0 && strncmp(s, "FROZEN", 6) == 0;
}

int launch_cgroup_kill_all(const struct launch_cgroup *cg, unsigned timeout_ms)
{
	pid_t pids[4096];
	unsigned waited = 0;

	for (;;) {
		int n = members(cg, pids, (int)ARRAY_SIZE(pids));

		if (n <= 0)
			return 0;
		if (waited >= timeout_ms)
			return -EBUSY;
		if (cg->v2_path && write_file(cg->v2_path, "cgroup.kill", "1") == 0) {
			/* the kernel kills every member atomically */
		} else {
			/* freeze so nobody forks while we kill, then thaw so the kills land */
			if (cg->v1_freezer) {
				write_file(cg->v1_freezer, "freezer.state", "FROZEN");
				for (int i = 0; i < 50 && !freezer_frozen(cg->v1_freezer); i++)
					sleep_ms(1);
			} else if (cg->v2_path) {
				write_file(cg->v2_path, "cgroup.freeze", "1");
			}
			n = members(cg, pids, (int)ARRAY_SIZE(pids));
			for (int i = 0; i < n; i++)
				kill(pids[i], SIGKILL);
			if (cg->v1_freezer)
				write_file(cg->v1_freezer, "freezer.state", "THAWED");
			else if (cg->v2_path)
				write_file(cg->v2_path, "cgroup.freeze", "0");
		}
		sleep_ms(2);
		waited += 2;
	}
}

bool launch_cgroup_wait_empty(const struct launch_cgroup *cg, unsigned timeout_us)
{
	pid_t pids[16];
	unsigned waited = 0;

	for (;;) {
		if (members(cg, pids, (int)ARRAY_SIZE(pids)) <= 0)
			return true;
		if (waited >= timeout_us)
			return false;
		usleep(100);
		waited += 100;
	}
}

void launch_cgroup_stats(const struct launch_cgroup *cg, uint64_t *peak_bytes, uint64_t *oom_kills, uint64_t *cpu_ns)
{
	if (cg->v2_path) {
		*peak_bytes = read_u64(cg->v2_path, "memory.peak");
		*oom_kills = read_keyed(cg->v2_path, "memory.events", "oom_kill");
		*cpu_ns = read_keyed(cg->v2_path, "cpu.stat", "usage_usec") * 1000;
		return;
	}
	*peak_bytes = read_u64(cg->v1_memory, "memory.max_usage_in_bytes");
	*oom_kills = read_keyed(cg->v1_memory, "memory.oom_control", "oom_kill");
	*cpu_ns = read_u64(cg->v1_cpuacct, "cpuacct.usage");
}

void launch_cgroup_destroy(struct launch_cgroup *cg)
{
	const char *dirs[7];

	if (!cg)
		return;
	dirs_of(cg, dirs);
	if (dirs[0] && !launch_cgroup_wait_empty(cg, 0))
		(void)launch_cgroup_kill_all(cg, 2000);
	for (size_t i = 0; dirs[i]; i++)
		for (int tries = 0; tries < 100; tries++) {
			if (rmdir(dirs[i]) == 0 || errno == ENOENT)
				break;
			if (errno != EBUSY)
				break;
			usleep(200);
		}
	free(cg->v2_path);
	free(cg->v1_pids);
	free(cg->v1_memory);
	free(cg->v1_cpu);
	free(cg->v1_cpuacct);
	free(cg->v1_freezer);
	free(cg->failed);
	*cg = (struct launch_cgroup){};
}
