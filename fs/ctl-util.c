// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of ctl-util.h: errors, path selections, overlay predicates,
 * xattrs, copies and the crash-test fault hook (snapshots of upper content:
 * ctl-data.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/xattr.h>
#include <time.h>
#include <spawn.h>
#include <unistd.h>

#include "ctl-client.h"
#include "ctl-util.h"
#include "fdpath.h"
#include "json-util.h"
#include "metacopy.h"

int ovl_ctl_error(cJSON **ret_error, int r, const char *code, cJSON *paths, const char *fmt, ...)
{
	_cleanup_json_ cJSON *p = paths;
	_cleanup_free_ char *msg = NULL;
	va_list ap;
	cJSON *e;
	int n;

	if (!ret_error)
		return r;
	/* on the heap: a message naming a path of PATH_MAX bytes keeps its end (the reason) */
	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n < 0)
		return r;
	if (r < 0 && (strcmp(code, "io") == 0 || strcmp(code, "unavailable") == 0)) {
		/* system failures say why */
		char *full = NULL;

		if (asprintf(&full, "%s: %s", msg, strerror(-r)) < 0)
			return r;
		free(msg);
		msg = full;
	}
	e = cJSON_CreateObject();
	if (!e)
		return r;
	cJSON_AddStringToObject(e, "error", msg);
	cJSON_AddStringToObject(e, "code", code);
	cJSON_AddNumberToObject(e, "errno", -r);
	if (p)
		cJSON_AddItemToObject(e, "paths", TAKE_PTR(p));
	cJSON_Delete(*ret_error);
	*ret_error = e;
	return r;
}

void ovl_sel_done(struct ovl_sel *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

int ovl_ctl_path_check(const char *path, size_t len, char **ret, const char **ret_reason)
{
	_cleanup_free_ char *out = NULL;
	int r;

	if (!path) {
		*ret_reason = "missing path";
		return -EINVAL;
	}
	if (memchr(path, '\0', len)) {
		*ret_reason = "NUL byte in path";
		return -EINVAL;
	}
	if (len > 0 && path[0] == '/') {
		*ret_reason = "absolute path (paths are relative to the mount root)";
		return -EINVAL;
	}
	r = path_normalize_relative(path, len, &out);
	if (r == -ENAMETOOLONG) {
		*ret_reason = "path too long";
		return r;
	}
	if (r < 0) {
		*ret_reason = "'..' component";
		return r;
	}
	if (path_check_relative(out) < 0) {
		*ret_reason = "invalid path";
		return -EINVAL;
	}
	*ret = TAKE_PTR(out);
	return 0;
}

int ovl_sel_parse(char *const *paths, struct ovl_sel *s, cJSON **ret_error)
{
	size_t n = 0;

	s->v = NULL;
	s->n = 0;
	if (!paths)
		return 0;
	while (paths[n])
		n++;
	if (n == 0)
		return 0;
	s->v = calloc(n, sizeof(char *));
	if (!s->v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *reason = NULL;
		char *norm = NULL;
		int r;

		r = ovl_ctl_path_check(paths[i], strlen(paths[i]), &norm, &reason);
		if (r < 0) {
			cJSON *bad = cJSON_CreateArray();

			if (bad)
				cJSON_AddItemToArray(bad, cJSON_CreateString(paths[i]));
			ovl_sel_done(s);
			return ovl_ctl_error(ret_error, r, "invalid_path", bad, "invalid path '%s': %s", paths[i], reason);
		}
		if (!*norm) { /* the root selects everything */
			free(norm);
			ovl_sel_done(s);
			return 0;
		}
		s->v[s->n++] = norm;
	}
	return 0;
}

bool ovl_path_has_prefix(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	if (n == 0)
		return true;
	return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

enum ovl_sel_match ovl_sel_match(const struct ovl_sel *s, const char *path)
{
	enum ovl_sel_match m = OVL_SEL_NONE;

	if (s->n == 0)
		return OVL_SEL_INSIDE;
	for (size_t i = 0; i < s->n; i++) {
		if (ovl_path_has_prefix(path, s->v[i]))
			return OVL_SEL_INSIDE;
		if (ovl_path_has_prefix(s->v[i], path))
			m = OVL_SEL_ANCESTOR;
	}
	return m;
}

char *ovl_path_join(const char *dir, const char *name)
{
	char *p;

	if (!*dir)
		return strdup(name);
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

int ovl_path_cmp(const char *a, const char *b)
{
	for (;; a++, b++) {
		unsigned char ca = (unsigned char)*a, cb = (unsigned char)*b;

		if (ca == cb) {
			if (!ca)
				return 0;
			continue;
		}
		if (!ca)
			return -1;
		if (!cb)
			return 1;
		if (ca == '/')
			return -1;
		if (cb == '/')
			return 1;
		return ca < cb ? -1 : 1;
	}
}

bool ovl_dir_is_opaque(int dir_fd)
{
	char v[4];
	ssize_t n = fgetxattr(dir_fd, OVL_XATTR_OPAQUE, v, sizeof(v));

	return n == 1 && v[0] == 'y';
}

bool ovl_dir_is_redirected(int dir_fd)
{
	return fgetxattr(dir_fd, OVL_XATTR_REDIRECT, NULL, 0) >= 0;
}

static void proc_entry_path(char *buf, size_t size, int dir_fd, const char *entry)
{
	snprintf(buf, size, "/proc/self/fd/%d/%s", dir_fd, entry);
}

ssize_t ovl_get_xattr_at(int dir_fd, const char *entry, const char *name, char **ret)
{
	char p[PATH_MAX];
	_cleanup_free_ char *buf = NULL;
	ssize_t n;

	proc_entry_path(p, sizeof(p), dir_fd, entry);
	{
		/* Most values (origin records above all) are short: one read, no size probe first. */
		char small[512];

		n = lgetxattr(p, name, small, sizeof(small));
		if (n >= 0) {
			buf = malloc((size_t)n + 1);
			if (!buf)
				return -ENOMEM;
			memcpy(buf, small, (size_t)n);
			buf[n] = '\0';
			*ret = TAKE_PTR(buf);
			return n;
		}
		if (errno != ERANGE)
			return errno == ENOTSUP ? -ENODATA : -errno;
	}
	for (int tries = 0; tries < 4; tries++) {
		n = lgetxattr(p, name, NULL, 0);
		if (n < 0)
			return errno == ENOTSUP ? -ENODATA : -errno;
		free(buf);
		buf = malloc((size_t)n + 1);
		if (!buf)
			return -ENOMEM;
		n = lgetxattr(p, name, buf, (size_t)n);
		if (n >= 0) {
			buf[n] = '\0';
			*ret = TAKE_PTR(buf);
			return n;
		}
		if (errno != ERANGE)
			return -errno;
	}
	return -EBUSY;
}

bool ovl_xattr_is_internal(const char *name)
{
	return strncmp(name, "trusted.overlay.", 16) == 0 || strncmp(name, "trusted.draftbox.", 17) == 0;
}

static int strv_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int ovl_list_xattrs_at(int dir_fd, const char *entry, char ***ret)
{
	char p[PATH_MAX];
	_cleanup_free_ char *names = NULL;
	_cleanup_strv_free_ char **v = NULL;
	size_t n = 0;
	ssize_t len;

	proc_entry_path(p, sizeof(p), dir_fd, entry);
	/* one call in the common case (no or few xattrs) */
	names = malloc(1024);
	if (!names)
		return -ENOMEM;
	len = llistxattr(p, names, 1024);
	if (len < 0 && errno == ERANGE) {
		len = llistxattr(p, NULL, 0);
		if (len > 0) {
			free(names);
			names = malloc((size_t)len);
			if (!names)
				return -ENOMEM;
			len = llistxattr(p, names, (size_t)len);
		}
	}
	if (len < 0)
		return errno == ENOTSUP ? 0 : -errno;
	if (len == 0) {
		*ret = NULL;
		return 0;
	}
	for (const char *s = names; s < names + len; s += strlen(s) + 1) {
		_cleanup_free_ char *val = NULL, *item = NULL;
		ssize_t vl;
		char **nv;

		if (ovl_xattr_is_internal(s))
			continue;
		vl = ovl_get_xattr_at(dir_fd, entry, s, &val);
		if (vl == -ENODATA)
			continue;
		if (vl < 0)
			return (int)vl;
		item = malloc(strlen(s) + 2 + 2 * (size_t)vl);
		if (!item)
			return -ENOMEM;
		char *o = stpcpy(item, s);
		*o++ = '=';
		for (ssize_t i = 0; i < vl; i++)
			o += sprintf(o, "%02x", (unsigned char)val[i]);
		nv = realloc(v, (n + 2) * sizeof(char *));
		if (!nv)
			return -ENOMEM;
		v = nv;
		v[n++] = TAKE_PTR(item);
		v[n] = NULL;
	}
	if (n > 1)
		qsort(v, n, sizeof(char *), strv_cmp);
	*ret = TAKE_PTR(v);
	return (int)n;
}

bool ovl_xattrs_equal(char **a, char **b)
{
	size_t i = 0;

	if (!a || !b)
		return (!a || !*a) && (!b || !*b);
	for (; a[i] && b[i]; i++)
		if (strcmp(a[i], b[i]) != 0)
			return false;
	return !a[i] && !b[i];
}

int ovl_copy_fd(int in_fd, int out_fd, uint64_t size)
{
	loff_t off = 0;
	char buf[65536];

	while ((uint64_t)off < size) {
		ssize_t n = copy_file_range(in_fd, &off, out_fd, NULL, size - (uint64_t)off, 0);

		if (n > 0)
			continue;
		if (n == 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP && errno != EBADF)
			return -errno;
		/* Fall back to read/write (pipes, sockets, cross-device on old kernels). */
		for (;;) {
			ssize_t m = pread(in_fd, buf, sizeof(buf), off);
			int r;

			if (m < 0) {
				if (errno == EINTR)
					continue;
				return -errno;
			}
			if (m == 0)
				return 0;
			r = write_full(out_fd, buf, (size_t)m);
			if (r < 0)
				return r;
			off += m;
		}
	}
	return 0;
}

void ovl_fault_point(const char *what)
{
	static int step;
	const char *e = getenv("DRAFTFS_FAULT");
	char kind[16];
	int n = 0, ms = 2000;

	if (!e)
		return;
	step++;
	if (strcmp(e, "count") == 0) {
		struct timespec now;

		clock_gettime(CLOCK_MONOTONIC, &now);
		fprintf(stderr, "draftfs-fault: step %d %s %lld.%06ld\n", step, what, (long long)now.tv_sec,
		        now.tv_nsec / 1000);
		return;
	}
	if (sscanf(e, "%15[a-z]:%d:%d", kind, &n, &ms) < 2 || n != step)
		return;
	if (strcmp(kind, "exit") == 0)
		_exit(99);
	if (strcmp(kind, "pause") == 0) {
		struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

		nanosleep(&ts, NULL);
	}
}

bool ovl_ts_not_before(struct timespec a, struct timespec b)
{
	return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec >= b.tv_nsec);
}

static size_t inoset_slot(const struct ovl_inoset *s, dev_t dev, ino_t ino)
{
	uint64_t h = ((uint64_t)ino * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)dev * 0xc2b2ae3d27d4eb4full);
	size_t i = (size_t)(h ^ (h >> 29)) & (s->cap - 1);

	while (s->v[i].ino != 0 && (s->v[i].ino != ino || s->v[i].dev != dev))
		i = (i + 1) & (s->cap - 1);
	return i;
}

int ovl_inoset_add(struct ovl_inoset *s, dev_t dev, ino_t ino)
{
	size_t i;

	if (ino == 0)
		return -EINVAL;
	if ((s->n + 1) * 2 > s->cap) {
		struct ovl_inoset g = { .cap = s->cap ? s->cap * 2 : 64 };

		g.v = calloc(g.cap, sizeof(*g.v));
		if (!g.v)
			return -ENOMEM;
		for (size_t j = 0; j < s->cap; j++)
			if (s->v[j].ino != 0)
				g.v[inoset_slot(&g, s->v[j].dev, s->v[j].ino)] = s->v[j];
		g.n = s->n;
		free(s->v);
		*s = g;
	}
	i = inoset_slot(s, dev, ino);
	if (s->v[i].ino == 0) {
		s->v[i].dev = dev;
		s->v[i].ino = ino;
		s->n++;
	}
	return 0;
}

bool ovl_inoset_has(const struct ovl_inoset *s, dev_t dev, ino_t ino)
{
	return s->cap > 0 && ino != 0 && s->v[inoset_slot(s, dev, ino)].ino != 0;
}

void ovl_inoset_done(struct ovl_inoset *s)
{
	free(s->v);
	*s = (struct ovl_inoset){ 0 };
}

bool ovl_ctime_follows_links(const struct stat *st, const struct ovl_inoset *relinked)
{
	return !S_ISDIR(st->st_mode) &&
	       (st->st_nlink > 1 || (relinked && ovl_inoset_has(relinked, st->st_dev, st->st_ino)));
}

bool ovl_changed_since(const struct stat *st, struct timespec since, const struct ovl_inoset *relinked)
{
	return ovl_ts_not_before(ovl_ctime_follows_links(st, relinked) ? st->st_mtim : st->st_ctim, since);
}

struct rm_rf {
	const struct timespec *since; /* NULL: remove everything */
	struct ovl_inoset *relinked;
	bool removed;
	char *changed; /* the path below the top of the first changed entry */
};

/* The path of @name below the top of a removal, @parent being its directory's ("" for the top's, NULL for the top). */
static char *rm_rf_path(const char *parent, const char *name)
{
	return parent ? (*parent ? ovl_path_join(parent, name) : strdup(name)) : strdup("");
}

/* @path: of @name below the top ("" for its entries; NULL for the top itself) */
static int rm_rf(struct rm_rf *rm, int dir_fd, const char *name, const char *path, unsigned depth)
{
	struct stat st;

	if (depth > 4096)
		return -ELOOP;
	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (rm->since && ovl_changed_since(&st, *rm->since, rm->relinked)) {
		rm->changed = rm_rf_path(path, name);
		return rm->changed ? -EBUSY : -ENOMEM;
	}
	if (S_ISDIR(st.st_mode)) {
		_cleanup_closedir_ DIR *d = NULL;
		_cleanup_free_ char *below = NULL;
		struct dirent *de;
		int fd;

		if (rm->since) {
			below = rm_rf_path(path, name);
			if (!below)
				return -ENOMEM;
		}
		fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno == ENOENT ? 0 : -errno;
		d = fdopendir(fd);
		if (!d) {
			safe_close(fd);
			return -errno;
		}
		while ((de = readdir(d))) {
			int r;

			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			r = rm_rf(rm, dirfd(d), de->d_name, below, depth + 1);
			if (r < 0)
				return r;
		}
		if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
			return -errno;
		rm->removed = true;
		return 0;
	}
	if (rm->relinked && st.st_nlink > 1) {
		int r = ovl_inoset_add(rm->relinked, st.st_dev, st.st_ino);

		if (r < 0)
			return r;
	}
	if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	rm->removed = true;
	return 0;
}

/* Removes @name in @dir_fd and everything below it, never following a symlink. */
int ovl_rm_rf_at(int dir_fd, const char *name, unsigned depth)
{
	struct rm_rf rm = { 0 };

	return rm_rf(&rm, dir_fd, name, NULL, depth);
}

int ovl_rm_rf_unchanged_at(int dir_fd, const char *name, struct timespec since, struct ovl_inoset *relinked,
                           bool *ret_removed, char **ret_changed)
{
	struct rm_rf rm = { .since = &since, .relinked = relinked };
	int r = rm_rf(&rm, dir_fd, name, NULL, 0);

	*ret_removed = rm.removed;
	if (ret_changed)
		*ret_changed = TAKE_PTR(rm.changed);
	free(rm.changed);
	return r;
}


#define TRASH_NAME "trash"

int ovl_trash_move(int state_fd, int dir_fd, const char *name)
{
	static atomic_uint counter;
	_cleanup_close_ int tfd = -1;
	char dst[64];

	if (state_fd < 0)
		return -EXDEV;
	if (mkdirat(state_fd, TRASH_NAME, 0700) < 0 && errno != EEXIST)
		return -errno;
	tfd = openat(state_fd, TRASH_NAME, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (tfd < 0)
		return -errno;
	snprintf(dst, sizeof(dst), "%d.%u.%ld", (int)getpid(), atomic_fetch_add(&counter, 1), (long)time(NULL));
	if (renameat(dir_fd, name, tfd, dst) < 0)
		return -errno;
	return 0;
}

/* Removes everything in the trash dir of @state_fd, and trash dirs a failed purge left. Takes ownership of @state_fd. */
static void trash_purge_now(int state_fd)
{
	_cleanup_close_ int sfd = state_fd;
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int fd;

	fd = openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		DIR *sd = fdopendir(fd);

		if (!sd) {
			safe_close(fd);
		} else {
			while ((de = readdir(sd)))
				if (strncmp(de->d_name, TRASH_NAME ".purge.", strlen(TRASH_NAME ".purge.")) == 0)
					(void)ovl_rm_rf_at(dirfd(sd), de->d_name, 0);
			closedir(sd);
		}
	}

	fd = openat(sfd, TRASH_NAME, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	d = fdopendir(fd);
	if (!d) {
		safe_close(fd);
		return;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
			(void)ovl_rm_rf_at(dirfd(d), de->d_name, 0);
}

static void *trash_thread(void *arg)
{
	trash_purge_now((int)(intptr_t)arg);
	return NULL;
}

void ovl_trash_purge(int state_fd, bool threaded)
{
	struct stat st;
	int fd;
	pid_t pid;

	if (state_fd < 0 || fstatat(state_fd, TRASH_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	fd = fcntl(state_fd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return;
	if (threaded) {
		pthread_t t;
		pthread_attr_t attr;

		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, trash_thread, (void *)(intptr_t)fd) != 0)
			safe_close(fd);
		pthread_attr_destroy(&attr);
		return;
	}
	/*
	 * A host command: hand the trash to rm(1) and do not wait. posix_spawn
	 * returns only once the child is about to exec, with its other fds (the
	 * session lock above all) closed.
	 */
	{
		static atomic_uint counter;
		char proc[64], dir[PATH_MAX], name[64];
		_cleanup_free_ char *full = NULL;
		posix_spawn_file_actions_t fa;
		posix_spawnattr_t attr;
		char *argv[] = { (char *)"rm", (char *)"-rf", (char *)"--one-file-system", (char *)"--", NULL, NULL };
		ssize_t n;

		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
		n = readlink(proc, dir, sizeof(dir) - 1);
		if (n < 0) {
			safe_close(fd);
			return;
		}
		dir[n] = '\0';
		snprintf(name, sizeof(name), TRASH_NAME ".purge.%d.%u", (int)getpid(), atomic_fetch_add(&counter, 1));
		if (renameat(fd, TRASH_NAME, fd, name) < 0 || asprintf(&full, "%s/%s", dir, name) < 0) {
			safe_close(fd);
			return;
		}
		safe_close(fd);
		argv[4] = full;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
		/*
		 * Close the rest before exec, not at exec: the kernel wakes a
		 * vfork parent before it closes O_CLOEXEC fds, so the session
		 * lock could still be held by the child when we take it again.
		 */
		posix_spawn_file_actions_addclosefrom_np(&fa, 3);
		posix_spawnattr_init(&attr);
		posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
		(void)posix_spawn(&pid, "/bin/rm", &fa, &attr, argv, environ); /* on failure the dir stays: harmless */
		posix_spawnattr_destroy(&attr);
		posix_spawn_file_actions_destroy(&fa);
	}
}
