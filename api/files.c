// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The path and metadata half of api/files.h: mapping API paths onto the
 * view root, the errno → error code table, owner/group/mode parsing and the
 * FileInfo JSON (files/info).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fdpath.h"
#include "files-internal.h"
#include "json-util.h"

unsigned api_errno_to_code(int err, const char **ret_code)
{
	static const struct {
		int err;
		unsigned status;
		const char *code;
	} table[] = {
		{ ENOENT, 404, "FILE_NOT_FOUND" },
		{ EINVAL, 400, "INVALID_REQUEST_BODY" },
		{ ENAMETOOLONG, 400, "INVALID_REQUEST_BODY" },
		{ EILSEQ, 400, "INVALID_REQUEST_BODY" },
		{ EXDEV, 400, "PATH_OUTSIDE_WORKSPACE" },
		{ ELOOP, 400, "SYMLINK_NOT_FOLLOWED" },
		{ EISDIR, 400, "INVALID_FILE" },
		{ ENOTDIR, 400, "INVALID_FILE" },
		{ ENODEV, 400, "INVALID_FILE" },
		{ ENXIO, 400, "INVALID_FILE" },
		{ EACCES, 403, "PERMISSION_DENIED" },
		{ EPERM, 403, "PERMISSION_DENIED" },
		{ EROFS, 403, "READ_ONLY" },
		{ EEXIST, 409, "FILE_EXISTS" },
		{ ENOTEMPTY, 409, "DIRECTORY_NOT_EMPTY" },
		{ EBUSY, 409, "BUSY" },
		{ EFBIG, 413, "FILE_TOO_LARGE" },
		{ ENOSPC, 507, "QUOTA_EXCEEDED" },
		{ EDQUOT, 507, "QUOTA_EXCEEDED" },
		{ ESRCH, 404, "SESSION_NOT_FOUND" },
		{ ENOSYS, 501, "NOT_SUPPORTED" },
		{ EOPNOTSUPP, 501, "NOT_SUPPORTED" },
	};

	if (err < 0)
		err = -err;
	for (size_t i = 0; i < ARRAY_SIZE(table); i++)
		if (table[i].err == err) {
			*ret_code = table[i].code;
			return table[i].status;
		}
	*ret_code = "RUNTIME_ERROR";
	return 500;
}

/* Length of @prefix without trailing slashes; "/" and NULL give 0. */
static size_t prefix_len(const char *prefix)
{
	size_t n;

	if (!prefix)
		return 0;
	n = strlen(prefix);
	while (n > 0 && prefix[n - 1] == '/')
		n--;
	return n;
}

int api_files_resolve(const struct api_files_root *root, const char *path, size_t len, char **ret_rel)
{
	_cleanup_free_ char *norm = NULL, *pre = NULL;
	size_t plen;
	int r;

	if (!path || memchr(path, '\0', len))
		return -EINVAL;
	r = path_normalize_relative(path, len, &norm);
	if (r < 0)
		return r;
	if (len == 0 || path[0] != '/') {
		*ret_rel = TAKE_PTR(norm);
		return 0;
	}

	/* Absolute: must be the workspace path or below it. */
	plen = prefix_len(root->prefix);
	if (plen == 0) {
		*ret_rel = TAKE_PTR(norm);
		return 0;
	}
	r = path_normalize_relative(root->prefix, plen, &pre);
	if (r < 0)
		return r;
	plen = strlen(pre);
	if (strncmp(norm, pre, plen) != 0 || (norm[plen] != '\0' && norm[plen] != '/'))
		return -EXDEV;
	if (norm[plen] == '\0') {
		char *empty = strdup("");

		if (!empty)
			return -ENOMEM;
		*ret_rel = empty;
		return 0;
	}
	memmove(norm, norm + plen + 1, strlen(norm + plen + 1) + 1);
	*ret_rel = TAKE_PTR(norm);
	return 0;
}

int api_files_resolve_str(const struct api_files_root *root, const char *path, char **ret_rel)
{
	if (!path)
		return -EINVAL;
	return api_files_resolve(root, path, strlen(path), ret_rel);
}

int api_files_display_path(const struct api_files_root *root, const char *rel, char **ret)
{
	size_t plen = prefix_len(root->prefix);
	char *s;
	int n;

	if (*rel)
		n = asprintf(&s, "%.*s/%s", (int)plen, plen ? root->prefix : "", rel);
	else
		n = asprintf(&s, "%.*s", (int)(plen ? plen : 1), plen ? root->prefix : "/");
	if (n < 0)
		return -ENOMEM;
	*ret = s;
	return 0;
}

/* Parses "644", "0644" or "4755": octal digits only, at most 07777. */
static int parse_mode_digits(const char *s, int *ret)
{
	unsigned v = 0;

	if (!*s || strlen(s) > 5)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '7')
			return -EINVAL;
		v = v * 8 + (unsigned)(*s - '0');
	}
	if (v > 07777)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

int api_file_meta_from_json(const cJSON *obj, struct api_file_meta *ret)
{
	struct api_file_meta m = API_FILE_META_INIT;
	const cJSON *mode;
	int r;

	if (!obj || cJSON_IsNull(obj)) {
		*ret = m;
		return 0;
	}
	if (!cJSON_IsObject(obj))
		return -EINVAL;

	mode = cJSON_GetObjectItemCaseSensitive(obj, "mode");
	if (mode && !cJSON_IsNull(mode)) {
		char digits[32];

		if (cJSON_IsNumber(mode)) {
			double d = mode->valuedouble;

			if (d < 0 || d > 7777 || d != (double)(int)d)
				return -EINVAL;
			snprintf(digits, sizeof(digits), "%d", (int)d);
		} else if (cJSON_IsString(mode) && mode->valuestring && strlen(mode->valuestring) < sizeof(digits)) {
			snprintf(digits, sizeof(digits), "%s", mode->valuestring);
		} else
			return -EINVAL;
		r = parse_mode_digits(digits, &m.mode);
		if (r < 0)
			return r;
	}
	r = json_get_string(obj, "owner", &m.owner);
	if (r < 0 && r != -ENOENT)
		return r;
	r = json_get_string(obj, "group", &m.group);
	if (r < 0 && r != -ENOENT)
		return r;
	/* An empty owner or group means "not given", as in the SDK's optional fields. */
	if (m.owner && !*m.owner)
		m.owner = NULL;
	if (m.group && !*m.group)
		m.group = NULL;
	*ret = m;
	return 0;
}

/* Parses a decimal id below (uid_t)-1. Returns 0, or -EINVAL when @s is not one. */
static int parse_id(const char *s, unsigned long *ret)
{
	char *end;
	unsigned long v;

	if (!*s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v >= UINT32_MAX)
		return -EINVAL;
	*ret = v;
	return 0;
}

int api_lookup_uid(const char *name, uid_t *ret)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	unsigned long id;
	int r;

	if (!name || !*name)
		return -EINVAL;
	if (parse_id(name, &id) == 0) {
		*ret = (uid_t)id;
		return 0;
	}
	r = getpwnam_r(name, &pw, buf, sizeof(buf), &res);
	if (r != 0)
		return r == ERANGE ? -ENAMETOOLONG : -r;
	if (!res)
		return -EINVAL;
	*ret = res->pw_uid;
	return 0;
}

int api_lookup_gid(const char *name, gid_t *ret)
{
	struct group gr, *res = NULL;
	char buf[8192];
	unsigned long id;
	int r;

	if (!name || !*name)
		return -EINVAL;
	if (parse_id(name, &id) == 0) {
		*ret = (gid_t)id;
		return 0;
	}
	r = getgrnam_r(name, &gr, buf, sizeof(buf), &res);
	if (r != 0)
		return r == ERANGE ? -ENAMETOOLONG : -r;
	if (!res)
		return -EINVAL;
	*ret = res->gr_gid;
	return 0;
}

int api_meta_uid(const struct api_file_meta *meta, uid_t def, uid_t *ret)
{
	if (meta && meta->owner)
		return api_lookup_uid(meta->owner, ret);
	*ret = def;
	return 0;
}

int api_meta_gid(const struct api_file_meta *meta, gid_t def, gid_t *ret)
{
	if (meta && meta->group)
		return api_lookup_gid(meta->group, ret);
	*ret = def;
	return 0;
}

/* RFC 3339 in UTC with the nanoseconds Go prints (trailing zeros dropped). */
static void format_time(const struct statx_timestamp *ts, char *buf, size_t size)
{
	struct tm tm;
	time_t t = (time_t)ts->tv_sec;
	size_t n;

	if (!gmtime_r(&t, &tm)) {
		snprintf(buf, size, "1970-01-01T00:00:00Z");
		return;
	}
	n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
	if (ts->tv_nsec) {
		char frac[16];
		size_t fl;

		snprintf(frac, sizeof(frac), ".%09u", ts->tv_nsec);
		fl = strlen(frac);
		while (fl > 1 && frac[fl - 1] == '0')
			frac[--fl] = '\0';
		snprintf(buf + n, size - n, "%sZ", frac);
	} else
		snprintf(buf + n, size - n, "Z");
}

/*
 * uid/gid → name, remembered per thread for a few seconds: a listing of a
 * big directory asks for the same one or two owners thousands of times, and
 * each NSS lookup of an id without a name scans all of /etc/passwd.
 */
#define NAME_CACHE_SLOTS 8
#define NAME_CACHE_TTL_S 5

struct name_cache_entry {
	uint32_t id;
	time_t when; /* 0: empty */
	char name[64];
};

static __thread struct name_cache_entry uid_cache[NAME_CACHE_SLOTS], gid_cache[NAME_CACHE_SLOTS];
static __thread unsigned uid_cache_next, gid_cache_next;

/* Writes the user (@is_group false) or group name of @id, or the id in decimal, into @out. */
static void id_name(uint32_t id, bool is_group, char out[64])
{
	struct name_cache_entry *cache = is_group ? gid_cache : uid_cache;
	unsigned *next = is_group ? &gid_cache_next : &uid_cache_next;
	time_t now = time(NULL);
	char buf[4096];
	const char *name = NULL;

	for (unsigned i = 0; i < NAME_CACHE_SLOTS; i++)
		if (cache[i].when && cache[i].id == id && now - cache[i].when < NAME_CACHE_TTL_S) {
			memcpy(out, cache[i].name, 64);
			return;
		}
	if (is_group) {
		struct group gr, *res = NULL;

		if (getgrgid_r(id, &gr, buf, sizeof(buf), &res) == 0 && res)
			name = res->gr_name;
	} else {
		struct passwd pw, *res = NULL;

		if (getpwuid_r(id, &pw, buf, sizeof(buf), &res) == 0 && res)
			name = res->pw_name;
	}
	if (name && strlen(name) < 64)
		snprintf(out, 64, "%s", name);
	else
		snprintf(out, 64, "%" PRIu32, id);
	cache[*next] = (struct name_cache_entry){ .id = id, .when = now ? now : 1 };
	memcpy(cache[*next].name, out, 64);
	*next = (*next + 1) % NAME_CACHE_SLOTS;
}

static const char *type_name(mode_t mode)
{
	if (S_ISREG(mode))
		return "file";
	if (S_ISDIR(mode))
		return "directory";
	if (S_ISLNK(mode))
		return "symlink";
	return "other";
}

int api_files_info_from_statx(const struct statx *stx, const char *display, cJSON **ret)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	char when[64], name[64], modebuf[16];
	const struct statx_timestamp *created;

	_cleanup_free_ char *clean = json_utf8_sanitize(display, strlen(display));

	if (!o || !clean)
		return -ENOMEM;
	if (!cJSON_AddStringToObject(o, "path", clean) || !cJSON_AddStringToObject(o, "type", type_name(stx->stx_mode)))
		return -ENOMEM;
	if (json_add_u64(o, "size", stx->stx_size) < 0)
		return -ENOMEM;
	format_time(&stx->stx_mtime, when, sizeof(when));
	if (!cJSON_AddStringToObject(o, "modified_at", when))
		return -ENOMEM;
	created = (stx->stx_mask & STATX_BTIME) ? &stx->stx_btime : &stx->stx_ctime;
	format_time(created, when, sizeof(when));
	if (!cJSON_AddStringToObject(o, "created_at", when))
		return -ENOMEM;

	id_name(stx->stx_uid, false, name);
	if (!cJSON_AddStringToObject(o, "owner", name))
		return -ENOMEM;
	id_name(stx->stx_gid, true, name);
	if (!cJSON_AddStringToObject(o, "group", name))
		return -ENOMEM;
	/* Octal digits sent as a decimal integer: 0755 → 755. */
	snprintf(modebuf, sizeof(modebuf), "%o", (unsigned)(stx->stx_mode & 07777));
	if (!cJSON_AddNumberToObject(o, "mode", (double)strtol(modebuf, NULL, 10)))
		return -ENOMEM;
	*ret = TAKE_PTR(o);
	return 0;
}

int api_files_info_at(int dir_fd, const char *name, const char *display, cJSON **ret)
{
	struct statx stx;
	int flags = AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_SYNC_AS_STAT;

	if (!*name)
		flags |= AT_EMPTY_PATH;
	if (statx(dir_fd, name, flags, STATX_BASIC_STATS | STATX_BTIME, &stx) < 0)
		return -errno;
	return api_files_info_from_statx(&stx, display, ret);
}

int api_open_parent(const struct api_files_root *root, const char *rel, const char **ret_name)
{
	_cleanup_free_ char *parent = NULL;
	_cleanup_close_ int fd = -1;
	const char *slash;
	struct stat st;
	int r;

	if (!*rel)
		return -EBUSY;
	r = openat_beneath_parent(root->root_fd, rel, ret_name);
	if (r != -ENOTDIR)
		return r;
	/* A symlink as the last directory gives ENOTDIR from openat2: report it as the symlink it is. */
	slash = strrchr(rel, '/');
	if (!slash)
		return r;
	parent = strndup(rel, (size_t)(slash - rel));
	if (!parent)
		return -ENOMEM;
	fd = openat_beneath(root->root_fd, parent, O_PATH, 0);
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode))
		return -ELOOP;
	return r;
}

int api_files_stat(const struct api_files_root *root, const char *path, cJSON **ret)
{
	_cleanup_free_ char *rel = NULL, *display = NULL;
	_cleanup_close_ int parent = -1;
	const char *name = "";
	int r;

	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	r = api_files_display_path(root, rel, &display);
	if (r < 0)
		return r;
	if (!*rel)
		return api_files_info_at(root->root_fd, "", display, ret);
	parent = api_open_parent(root, rel, &name);
	if (parent < 0)
		return parent;
	return api_files_info_at(parent, name, display, ret);
}

int api_files_info(const struct api_files_root *root, char *const *paths, cJSON **ret, size_t *ret_failed)
{
	_cleanup_json_ cJSON *map = cJSON_CreateObject();

	if (!map)
		return -ENOMEM;
	for (size_t i = 0; paths && paths[i]; i++) {
		cJSON *info = NULL;
		int r = api_files_stat(root, paths[i], &info);

		if (r < 0) {
			if (ret_failed)
				*ret_failed = i;
			return r;
		}
		_cleanup_free_ char *key = json_utf8_sanitize(paths[i], strlen(paths[i]));

		if (!key) {
			cJSON_Delete(info);
			return -ENOMEM;
		}
		/* A path asked twice keeps one entry. */
		cJSON_DeleteItemFromObjectCaseSensitive(map, key);
		cJSON_AddItemToObject(map, key, info);
	}
	*ret = TAKE_PTR(map);
	return 0;
}

int api_fchmod_path_fd(int fd, mode_t mode)
{
	struct stat st;
	char proc[64];

	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISLNK(st.st_mode))
		return -ELOOP;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (chmod(proc, mode & 07777) < 0)
		return -errno;
	return 0;
}

int api_mkdir_p_owned(int root_fd, const char *rel, mode_t mode, uid_t uid, gid_t gid)
{
	_cleanup_close_ int cur = -1;
	_cleanup_free_ char *copy = NULL;
	char *p;
	int r;

	r = path_check_relative(rel);
	if (r < 0)
		return r;
	copy = strdup(rel);
	if (!copy)
		return -ENOMEM;
	cur = openat(root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0)
		return -errno;
	p = copy;
	while (*p) {
		char *slash = strchr(p, '/');
		bool created = false;
		int fd;

		if (slash)
			*slash = '\0';
		if (mkdirat(cur, p, 0700) == 0)
			created = true;
		else if (errno != EEXIST)
			return -errno;
		fd = openat(cur, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			struct stat st;

			if (errno == ENOTDIR && fstatat(cur, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
				return -ELOOP;
			return -errno;
		}
		safe_close(cur);
		cur = fd;
		if (created) {
			/* Created 0700 so nobody else can use it before it has its owner and mode. */
			if (fchownat(cur, "", uid, gid, AT_EMPTY_PATH) < 0)
				return -errno;
			r = api_fchmod_path_fd(cur, mode);
			if (r < 0)
				return r;
		}
		if (!slash)
			break;
		p = slash + 1;
	}
	return TAKE_FD(cur);
}
