// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of registry.h. Entries are written with temp + rename so a
 * reader never sees half a file; a dead pid marks a stale entry (a killed
 * daemon), which readers remove.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl-proto.h"
#include "fdpath.h"
#include "json-util.h"
#include "log.h"
#include "registry.h"

static const char *registry_dir(void)
{
	const char *e = getenv("DRAFTFS_REGISTRY_DIR");

	return e && *e == '/' ? e : "/run/draftfs/mounts";
}

static int registry_open(bool create)
{
	const char *dir = registry_dir();
	int fd;

	fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0 || !create || errno != ENOENT)
		return fd >= 0 ? fd : -errno;
	/* mkdir -p with 0755 (/run/draftfs) and 0700 (mounts) */
	{
		_cleanup_free_ char *parent = strdup(dir);
		char *slash = parent ? strrchr(parent, '/') : NULL;

		if (!parent)
			return -ENOMEM;
		if (slash && slash != parent) {
			*slash = '\0';
			if (mkdir(parent, 0755) < 0 && errno != EEXIST)
				return -errno;
		}
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return -errno;
	}
	fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return fd >= 0 ? fd : -errno;
}

int ovl_registry_add(const struct ovl_layers *layers, const char *socket_path, char **ret_name)
{
	_cleanup_close_ int dfd = -1, fd = -1;
	_cleanup_json_ cJSON *j = cJSON_CreateObject();
	_cleanup_cjson_str_ char *text = NULL;
	char name[64], tmp[80];
	struct stat st;
	int r;

	if (!j)
		return -ENOMEM;
	if (fstat(layers->lower_fds[0], &st) < 0)
		return -errno;
	dfd = registry_open(true);
	if (dfd < 0)
		return dfd;
	json_add_u64(j, "target_dev", st.st_dev);
	json_add_u64(j, "target_ino", st.st_ino);
	cJSON_AddStringToObject(j, "socket", socket_path);
	if (layers->mountpoint)
		cJSON_AddStringToObject(j, "mountpoint", layers->mountpoint);
	cJSON_AddNumberToObject(j, "pid", getpid());
	text = cJSON_PrintUnformatted(j);
	if (!text)
		return -ENOMEM;
	snprintf(name, sizeof(name), "%d.json", (int)getpid());
	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = write_full(fd, text, strlen(text));
	if (r < 0)
		return r;
	if (renameat(dfd, tmp, dfd, name) < 0)
		return -errno;
	*ret_name = strdup(name);
	return *ret_name ? 0 : -ENOMEM;
}

void ovl_registry_remove(const char *name)
{
	_cleanup_close_ int dfd = -1;

	if (!name)
		return;
	dfd = registry_open(false);
	if (dfd >= 0)
		(void)unlinkat(dfd, name, 0);
}

int ovl_registry_notify(const struct ovl_layers *layers, const struct ovl_sel *sel)
{
	_cleanup_closedir_ DIR *d = NULL;
	_cleanup_json_ cJSON *req = NULL;
	struct dirent *de;
	struct stat st;
	cJSON *paths;
	int dfd, count = 0;

	if (fstat(layers->lower_fds[0], &st) < 0)
		return 0;
	dfd = registry_open(false);
	if (dfd < 0)
		return 0;
	{
		int rfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		safe_close(dfd);
		if (rfd < 0 || !(d = fdopendir(rfd))) {
			safe_close(rfd);
			return 0;
		}
	}
	req = cJSON_CreateObject();
	if (!req)
		return 0;
	cJSON_AddStringToObject(req, "op", "invalidate");
	paths = cJSON_AddArrayToObject(req, "paths");
	for (size_t i = 0; i < sel->n; i++)
		cJSON_AddItemToArray(paths, cJSON_CreateString(sel->v[i]));
	while ((de = readdir(d))) {
		_cleanup_close_ int fd = -1;
		_cleanup_free_ char *text = NULL;
		_cleanup_json_ cJSON *e = NULL, *res = NULL, *err = NULL;
		const char *sock = NULL;
		int64_t dev, ino, pid;
		size_t len;

		if (de->d_name[0] == '.' || !strstr(de->d_name, ".json"))
			continue;
		fd = openat(dirfd(d), de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || read_full_fd(fd, 65536, &text, &len) < 0)
			continue;
		e = cJSON_ParseWithLength(text, len);
		if (!e || json_get_int64(e, "pid", 1, INT32_MAX, &pid) < 0 ||
		    json_get_int64(e, "target_dev", 0, INT64_MAX, &dev) < 0 ||
		    json_get_int64(e, "target_ino", 0, INT64_MAX, &ino) < 0 || json_get_string(e, "socket", &sock) < 0)
			continue;
		if (kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
			(void)unlinkat(dirfd(d), de->d_name, 0); /* stale: its daemon is gone */
			continue;
		}
		if ((pid_t)pid == getpid() || (uint64_t)dev != (uint64_t)st.st_dev || (uint64_t)ino != (uint64_t)st.st_ino)
			continue;
		if (ovl_proto_call(sock, req, -1, 2000, &res, &err) >= 0)
			count++;
		else
			log_debug("cannot notify the mount of pid %d", (int)pid);
	}
	return count;
}
