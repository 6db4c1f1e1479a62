/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The uid pool: flock()ed lock files, one per uid, in a root-owned 0700
 * directory. See uid-pool.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "uid-pool.h"

/* Opens (creating 0700 root-owned dirs as needed) the pool dir. Returns fd or -errno. */
static int pool_dir_open(const char *dir)
{
	_cleanup_free_ char *copy = NULL;
	struct stat st;
	int fd;

	if (!dir || dir[0] != '/')
		return -EINVAL;
	fd = openat(AT_FDCWD, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		/* mkdir -p, parents 0755, the pool dir itself 0700 */
		copy = strdup(dir);
		if (!copy)
			return -ENOMEM;
		for (char *p = copy + 1; *p; p++) {
			if (*p != '/')
				continue;
			*p = 0;
			if (mkdir(copy, 0755) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return -errno;
		fd = openat(AT_FDCWD, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 0022)) {
		/* someone else could plant or remove lock files */
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* Tries to lock @uid's file below @dir_fd. Returns the locked fd, -EBUSY, or -errno. */
static int pool_try_lock(int dir_fd, uid_t uid)
{
	char name[32];
	_cleanup_close_ int fd = -1;

	snprintf(name, sizeof(name), "%u.lock", (unsigned)uid);
	fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	return TAKE_FD(fd);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int launch_uid_acquire(const char *dir, uid_t lo, uid_t hi, unsigned timeout_ms, struct launch_uid_lease *ret)
{
	_cleanup_close_ int dir_fd = -1;
	int64_t deadline;
	uint64_t n;
	uid_t start;

	if (lo == 0 || lo > hi || hi == (uid_t)-1)
		return -EINVAL;
	dir_fd = pool_dir_open(dir);
	if (dir_fd < 0)
		return dir_fd;

	n = (uint64_t)hi - lo + 1;
	/* start at a pid-dependent offset so concurrent launchers rarely collide */
	start = (uid_t)(lo + ((uint64_t)getpid() * 2654435761u) % n);
	deadline = now_ms() + timeout_ms;
	for (;;) {
		for (uint64_t i = 0; i < n; i++) {
			uid_t uid = (uid_t)(lo + ((uint64_t)(start - lo) + i) % n);
			int fd = pool_try_lock(dir_fd, uid);

			if (fd == -EBUSY)
				continue;
			if (fd < 0)
				return fd;
			*ret = (struct launch_uid_lease){ .uid = uid, .gid = (gid_t)uid, .lock_fd = fd };
			return 0;
		}
		if (now_ms() >= deadline)
			return -EAGAIN;
		usleep(20 * 1000);
	}
}

int launch_uid_acquire_one(const char *dir, uid_t uid, struct launch_uid_lease *ret)
{
	_cleanup_close_ int dir_fd = -1;
	int fd;

	if (uid == 0 || uid == (uid_t)-1)
		return -EINVAL;
	dir_fd = pool_dir_open(dir);
	if (dir_fd < 0)
		return dir_fd;
	fd = pool_try_lock(dir_fd, uid);
	if (fd < 0)
		return fd;
	*ret = (struct launch_uid_lease){ .uid = uid, .gid = (gid_t)uid, .lock_fd = fd };
	return 0;
}

void launch_uid_release(struct launch_uid_lease *lease)
{
	if (!lease)
		return;
	lease->lock_fd = safe_close(lease->lock_fd);
	lease->uid = (uid_t)-1;
	lease->gid = (gid_t)-1;
}

bool launch_uid_is_held(const char *dir, uid_t uid)
{
	_cleanup_close_ int dir_fd = -1;
	int fd;

	dir_fd = pool_dir_open(dir);
	if (dir_fd < 0)
		return false;
	fd = pool_try_lock(dir_fd, uid);
	if (fd == -EBUSY)
		return true;
	safe_close(fd);
	return false;
}

static int parse_uid(const char *s, char **end, uid_t *ret)
{
	unsigned long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, end, 10);
	if (errno || v == 0 || v >= (unsigned long)UINT32_MAX)
		return -EINVAL;
	*ret = (uid_t)v;
	return 0;
}

int launch_parse_uid_range(const char *s, uid_t *ret_lo, uid_t *ret_hi)
{
	char *end;
	uid_t lo, hi;

	if (!s || parse_uid(s, &end, &lo) < 0 || *end != '-')
		return -EINVAL;
	if (parse_uid(end + 1, &end, &hi) < 0 || *end || lo > hi)
		return -EINVAL;
	*ret_lo = lo;
	*ret_hi = hi;
	return 0;
}
