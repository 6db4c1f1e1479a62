// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The session registry: creation from a POST /session body (validated
 * field by field), session.json persistence, deletion, the idle collector,
 * and re-adoption at start (live mounts are kept, dead ones remounted from
 * the upper, which is never wiped by a restart).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fdpath.h"
#include "log.h"
#include "run.h"
#include "session.h"
#include "strv.h"
#include "uid-pool.h"

static void wait_draftfs_gone(const char *view);

struct api_registry {
	pthread_mutex_t lock;
	struct api_session **v; /* live sessions */
	size_t n, cap;
	unsigned creating;      /* reservations against max_sessions */
};

bool api_session_id_valid(const char *id)
{
	static const char tmpl[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";

	if (!id || strlen(id) != sizeof(tmpl) - 1)
		return false;
	for (size_t i = 0; tmpl[i]; i++) {
		if (tmpl[i] == '-') {
			if (id[i] != '-')
				return false;
		} else if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) {
			return false;
		}
	}
	return true;
}

static int new_uuid(char buf[40])
{
	unsigned char b[16];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
		return -EIO;
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
	snprintf(buf, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	return 0;
}

static struct api_session *session_new(struct api_server *srv)
{
	struct api_session *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->srv = srv;
	s->refcount = 1;
	s->uid_lock_fd = -1;
	s->view_fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	return s;
}

static void session_free(struct api_session *s)
{
	struct api_run *r, *next;

	for (r = s->runs; r; r = next) {
		next = r->next;
		r->next = NULL;
		api_run_unref(r);
	}
	safe_close(s->view_fd);
	safe_close(s->uid_lock_fd);
	free(s->dir);
	free(s->view);
	free(s->workspace);
	free(s->profile);
	strv_free(s->extra_writable);
	cJSON_Delete(s->binds);
	free(s->env_mode);
	strv_free(s->env_keys);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}

void api_session_unref(struct api_session *s)
{
	if (s && __atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) == 0)
		session_free(s);
}

struct api_session *api_session_ref(struct api_session *s)
{
	__atomic_add_fetch(&s->refcount, 1, __ATOMIC_RELAXED);
	return s;
}

#define session_ref api_session_ref

struct api_session *api_session_lookup(struct api_server *srv, const char *id)
{
	struct api_registry *reg = srv->reg;
	struct api_session *found = NULL;

	if (!api_session_id_valid(id))
		return NULL;
	pthread_mutex_lock(&reg->lock);
	for (size_t i = 0; i < reg->n; i++)
		if (strcmp(reg->v[i]->id, id) == 0) {
			found = session_ref(reg->v[i]);
			break;
		}
	pthread_mutex_unlock(&reg->lock);
	return found;
}

static int registry_add(struct api_registry *reg, struct api_session *s)
{
	if (reg->n == reg->cap) {
		size_t cap = reg->cap ? reg->cap * 2 : 16;
		struct api_session **v = realloc(reg->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		reg->v = v;
		reg->cap = cap;
	}
	reg->v[reg->n++] = session_ref(s);
	return 0;
}

/* Removes @s from the registry. Returns true if it was there (the registry's reference is then the caller's to drop). */
static bool registry_remove(struct api_registry *reg, struct api_session *s)
{
	bool found = false;

	pthread_mutex_lock(&reg->lock);
	for (size_t i = 0; i < reg->n; i++)
		if (reg->v[i] == s) {
			reg->v[i] = reg->v[--reg->n];
			found = true;
			break;
		}
	pthread_mutex_unlock(&reg->lock);
	return found;
}

static const char *mode_name(enum api_ws_mode m)
{
	return m == API_WS_RW ? "rw" : m == API_WS_RO ? "ro" : "overlay";
}

static cJSON *strv_to_json(char **v)
{
	cJSON *a = cJSON_CreateArray();

	for (char **p = v; a && p && *p; p++)
		if (!cJSON_AddItemToArray(a, cJSON_CreateString(*p))) {
			cJSON_Delete(a);
			return NULL;
		}
	return a;
}

/* The creation parameters, as GET echoes them and session.json stores them. */
static int add_params(cJSON *o, struct api_session *s)
{
	cJSON *ws, *env;

	if (!cJSON_AddStringToObject(o, "profile", s->profile))
		return -ENOMEM;
	ws = cJSON_AddObjectToObject(o, "workspace");
	if (!ws || !cJSON_AddStringToObject(ws, "path", s->workspace) ||
	    !cJSON_AddStringToObject(ws, "mode", mode_name(s->mode)))
		return -ENOMEM;
	if (!cJSON_AddItemToObject(o, "extra_writable", strv_to_json(s->extra_writable)))
		return -ENOMEM;
	if (!cJSON_AddItemToObject(o, "binds", cJSON_Duplicate(s->binds, true)))
		return -ENOMEM;
	if (!cJSON_AddBoolToObject(o, "share_net", s->share_net))
		return -ENOMEM;
	env = cJSON_AddObjectToObject(o, "env_passthrough");
	if (!env || !cJSON_AddStringToObject(env, "mode", s->env_mode) ||
	    !cJSON_AddItemToObject(env, "keys", strv_to_json(s->env_keys)))
		return -ENOMEM;
	if (!cJSON_AddNumberToObject(o, "uid", s->owner_uid) || !cJSON_AddNumberToObject(o, "gid", s->owner_gid) ||
	    !cJSON_AddNumberToObject(o, "idle_timeout_seconds", s->idle_timeout) ||
	    !cJSON_AddNumberToObject(o, "sandbox_uid", s->pool_uid) ||
	    !cJSON_AddNumberToObject(o, "sandbox_gid", s->pool_gid))
		return -ENOMEM;
	return 0;
}

/* Serializes writers of session.json.tmp across threads. */
static pthread_mutex_t save_lock = PTHREAD_MUTEX_INITIALIZER;

static int session_save_locked(struct api_session *s);

int api_session_save(struct api_session *s)
{
	int r;

	pthread_mutex_lock(&save_lock);
	r = session_save_locked(s);
	pthread_mutex_unlock(&save_lock);
	return r;
}

static int session_save_locked(struct api_session *s)
{
	bool deleted;

	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	_cleanup_cjson_str_ char *text = NULL;
	_cleanup_close_ int dfd = -1, fd = -1;
	uint64_t last;
	int r;

	if (!o)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	last = s->last_run_at;
	deleted = s->deleted;
	pthread_mutex_unlock(&s->lock);
	if (deleted)
		return -ESRCH; /* its directory is going away */
	if (!cJSON_AddNumberToObject(o, "version", 1) || !cJSON_AddStringToObject(o, "session_id", s->id) ||
	    json_add_u64(o, "created_at_ms", s->created_at) < 0 || json_add_u64(o, "last_run_at_ms", last) < 0)
		return -ENOMEM;
	r = add_params(o, s);
	if (r < 0)
		return r;
	text = cJSON_Print(o);
	if (!text)
		return -ENOMEM;
	dfd = openat(s->srv->sessions_fd, s->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	fd = openat(dfd, "session.json.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = write_full(fd, text, strlen(text));
	if (r < 0)
		return r;
	if (fsync(fd) < 0)
		return -errno;
	if (renameat(dfd, "session.json.tmp", dfd, "session.json") < 0)
		return -errno;
	return 0;
}

/* ------------------------------------------------------------------ validation */

static bool path_under(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	while (n > 1 && prefix[n - 1] == '/')
		n--;
	if (n == 1 && prefix[0] == '/')
		return true;
	return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static bool path_allowed(const char *path, char **allowed)
{
	for (char **a = allowed; a && *a; a++)
		if (path_under(path, *a))
			return true;
	return false;
}

/* An absolute, clean path without ':' or ',' (which the launcher's and draftfs's syntax cannot carry). */
static bool abs_path_ok(const char *p)
{
	return p[0] == '/' && path_check_relative(p[1] ? p + 1 : "") == 0 && !strpbrk(p, ":,\n") &&
	       strlen(p) < PATH_MAX;
}

#define BAD(...) api_error_set(err, -EINVAL, 400, API_E_INVALID_REQUEST, __VA_ARGS__)

static int parse_create(struct api_server *srv, const cJSON *body, struct api_session *s, bool *uid_given,
			bool *gid_given, struct api_error *err)
{
	const struct api_config *cfg = srv->cfg;
	const cJSON *ws, *item;
	const char *str;
	int64_t v;
	bool b;
	int r;

	ws = cJSON_GetObjectItemCaseSensitive(body, "workspace");
	if (!ws || cJSON_IsNull(ws))
		return BAD("'workspace' is required");
	if (!cJSON_IsObject(ws))
		return BAD("'workspace' must be an object");
	r = json_get_string(ws, "path", &str);
	if (r == -ENOENT || (r == 0 && !*str))
		return BAD("'workspace.path' is required");
	if (r < 0)
		return BAD("'workspace.path' must be a string");
	if (strlen(str) >= PATH_MAX)
		return BAD("'workspace.path' is too long");
	s->workspace = strdup(str);
	if (!s->workspace)
		return -ENOMEM;
	r = json_get_string(ws, "mode", &str);
	if (r == -EINVAL)
		return BAD("'workspace.mode' must be a string");
	if (r == -ENOENT || !strcmp(str, "") || !strcmp(str, "overlay"))
		s->mode = API_WS_OVERLAY;
	else if (!strcmp(str, "rw"))
		s->mode = API_WS_RW;
	else if (!strcmp(str, "ro"))
		s->mode = API_WS_RO;
	else
		return BAD("'workspace.mode' must be overlay, rw or ro, not '%.64s'", str);

	r = json_get_string(body, "profile", &str);
	if (r == -EINVAL)
		return BAD("'profile' must be a string");
	if (r == -ENOENT || !*str)
		str = "strict";
	if (strcmp(str, "strict") && strcmp(str, "balanced"))
		return BAD("'profile' must be strict or balanced, not '%.64s'", str);
	s->profile = strdup(str);
	if (!s->profile)
		return -ENOMEM;

	r = json_get_strv(body, "extra_writable", &s->extra_writable);
	if (r == -EINVAL)
		return BAD("'extra_writable' must be an array of strings");
	if (r == -ENOMEM)
		return r;
	for (char **p = s->extra_writable; p && *p; p++) {
		if (!abs_path_ok(*p))
			return BAD("extra_writable path '%.200s' must be a clean absolute path", *p);
		if (!path_allowed(*p, cfg->allowed_writable))
			return BAD("extra_writable path '%.200s' is not allowed by the server (--allow-writable)", *p);
	}

	s->binds = cJSON_CreateArray();
	if (!s->binds)
		return -ENOMEM;
	item = cJSON_GetObjectItemCaseSensitive(body, "binds");
	if (item && !cJSON_IsNull(item)) {
		const cJSON *bnd;

		if (!cJSON_IsArray(item))
			return BAD("'binds' must be an array");
		cJSON_ArrayForEach(bnd, item) {
			const char *src, *dest = NULL;
			bool ro = true;
			cJSON *o;

			if (!cJSON_IsObject(bnd))
				return BAD("each bind must be an object");
			if (json_get_string(bnd, "source", &src) < 0)
				return BAD("'binds[].source' is required and must be a string");
			r = json_get_string(bnd, "dest", &dest);
			if (r == -EINVAL)
				return BAD("'binds[].dest' must be a string");
			if (r == -ENOENT || !*dest)
				dest = src;
			r = json_get_bool(bnd, "readonly", &ro);
			if (r == -EINVAL)
				return BAD("'binds[].readonly' must be a boolean");
			if (!abs_path_ok(src) || !abs_path_ok(dest))
				return BAD("bind paths must be clean absolute paths without ':' or ','");
			if (!path_allowed(src, cfg->allowed_binds))
				return BAD("bind source '%.200s' is not allowed by the server (--allow-bind)", src);
			o = cJSON_CreateObject();
			if (!o || !cJSON_AddItemToArray(s->binds, o))
				return -ENOMEM;
			if (!cJSON_AddStringToObject(o, "source", src) || !cJSON_AddStringToObject(o, "dest", dest) ||
			    !cJSON_AddBoolToObject(o, "readonly", ro))
				return -ENOMEM;
		}
	}

	b = false;
	r = json_get_bool(body, "share_net", &b);
	if (r == -EINVAL)
		return BAD("'share_net' must be a boolean");
	if (b && !cfg->allow_network)
		return BAD("'share_net' is disabled on this server (start it with --allow-network)");
	s->share_net = b;

	s->env_mode = strdup("deny");
	if (!s->env_mode)
		return -ENOMEM;
	item = cJSON_GetObjectItemCaseSensitive(body, "env_passthrough");
	if (item && !cJSON_IsNull(item)) {
		if (!cJSON_IsObject(item))
			return BAD("'env_passthrough' must be an object");
		r = json_get_string(item, "mode", &str);
		if (r == -EINVAL)
			return BAD("'env_passthrough.mode' must be a string");
		if (r == 0 && *str) {
			if (strcmp(str, "deny") && strcmp(str, "allow"))
				return BAD("'env_passthrough.mode' must be deny or allow, not '%.64s'", str);
			free(s->env_mode);
			s->env_mode = strdup(str);
			if (!s->env_mode)
				return -ENOMEM;
		}
		r = json_get_strv(item, "keys", &s->env_keys);
		if (r == -EINVAL)
			return BAD("'env_passthrough.keys' must be an array of strings");
		if (r == -ENOMEM)
			return r;
		for (char **p = s->env_keys; p && *p; p++)
			if (!**p || strpbrk(*p, ",=\n"))
				return BAD("env_passthrough key '%.64s' is not a valid name", *p);
	}

	r = json_get_int64(body, "uid", 0, UINT32_MAX - 1, &v);
	if (r == -EINVAL)
		return BAD("'uid' must be an integer between 0 and 4294967294");
	*uid_given = r == 0;
	if (r == 0)
		s->owner_uid = (uid_t)v;
	r = json_get_int64(body, "gid", 0, UINT32_MAX - 1, &v);
	if (r == -EINVAL)
		return BAD("'gid' must be an integer between 0 and 4294967294");
	*gid_given = r == 0;
	if (r == 0)
		s->owner_gid = (gid_t)v;

	s->idle_timeout = cfg->default_idle_timeout;
	r = json_get_int64(body, "idle_timeout_seconds", 0, INT32_MAX, &v);
	if (r == -EINVAL)
		return BAD("'idle_timeout_seconds' must be a non-negative integer");
	if (r == 0)
		s->idle_timeout = (unsigned)v;
	return 0;
}

/* Resolves and checks the workspace; fills the owner ids unless given. */
static int check_workspace(struct api_server *srv, struct api_session *s, bool uid_given, bool gid_given,
			   struct api_error *err)
{
	_cleanup_free_ char *real = NULL;
	struct stat st;

	if (s->workspace[0] != '/')
		return BAD("'workspace.path' must be absolute");
	real = realpath(s->workspace, NULL);
	if (!real)
		return api_error_set(err, -errno, 400, API_E_INVALID_REQUEST, "workspace '%.200s': %s", s->workspace,
				     strerror(errno));
	if (lstat(real, &st) < 0)
		return api_error_set(err, -errno, 400, API_E_INVALID_REQUEST, "workspace '%.200s': %s", real,
				     strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return BAD("workspace '%.200s' is not a directory", real);
	if (!strcmp(real, "/"))
		return BAD("the root directory cannot be a workspace");
	if (strpbrk(real, ":,\n"))
		return BAD("workspace path '%.200s' contains ':' or ',', which mount options cannot carry", real);
	if (path_under(real, srv->cfg->state_dir) || path_under(srv->cfg->state_dir, real))
		return BAD("workspace '%.200s' overlaps the server's state dir", real);
	if (!uid_given)
		s->owner_uid = st.st_uid;
	if (!gid_given)
		s->owner_gid = st.st_gid;
	/* Every mode maps the owner to the pool uid: for uid/gid 0 that would
	 * hand root's files (0600 secrets included) to sandboxed code, and a
	 * commit would write them back as root. */
	if ((s->owner_uid == 0 || s->owner_gid == 0) && !srv->cfg->allow_root_owner)
		return BAD("workspaces owned by root (or with uid/gid 0) are refused: the sandbox would act as root on "
			   "them (use a workspace owned by a normal user, pass its 'uid'/'gid', or start the server "
			   "with --allow-root-owner)");
	free(s->workspace);
	s->workspace = TAKE_PTR(real);
	return 0;
}

static int session_paths(struct api_session *s)
{
	if (asprintf(&s->dir, "%s/sessions/%s", s->srv->cfg->state_dir, s->id) < 0)
		return -ENOMEM;
	if (asprintf(&s->view, "%s/view", s->dir) < 0)
		return -ENOMEM;
	return 0;
}

static int acquire_uid(struct api_session *s, uid_t want)
{
	const struct api_config *cfg = s->srv->cfg;
	struct launch_uid_lease lease = LAUNCH_UID_LEASE_INIT;
	int r;

	if (want != (uid_t)-1)
		r = launch_uid_acquire_one(LAUNCH_UID_POOL_DIR, want, &lease);
	else
		r = launch_uid_acquire(LAUNCH_UID_POOL_DIR, cfg->uid_pool_base,
				       cfg->uid_pool_base + cfg->uid_pool_size - 1, 0, &lease);
	if (r < 0)
		return r;
	s->pool_uid = lease.uid;
	s->pool_gid = lease.gid;
	s->uid_lock_fd = lease.lock_fd;
	return 0;
}

/* Opens the mounted view into s->view_fd; an existing fd number is kept (dup3 swaps the mount behind it for requests that hold it). */
static int open_view(struct api_session *s)
{
	int fd = open(s->view, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), r;

	if (fd < 0)
		return -errno;
	if (s->view_fd < 0) {
		s->view_fd = fd;
		return 0;
	}
	r = dup3(fd, s->view_fd, O_CLOEXEC) < 0 ? -errno : 0;
	safe_close(fd);
	return r;
}

static int sessions_count_reserve(struct api_server *srv)
{
	struct api_registry *reg = srv->reg;
	int r = 0;

	pthread_mutex_lock(&reg->lock);
	if (reg->n + reg->creating >= srv->cfg->max_sessions)
		r = -EUSERS;
	else
		reg->creating++;
	pthread_mutex_unlock(&reg->lock);
	return r;
}

static void sessions_count_release(struct api_server *srv)
{
	pthread_mutex_lock(&srv->reg->lock);
	srv->reg->creating--;
	pthread_mutex_unlock(&srv->reg->lock);
}

int api_session_create(struct api_server *srv, const cJSON *body, struct api_session **ret, struct api_error *err)
{
	struct api_session *s;
	_cleanup_close_ int dfd = -1;
	bool uid_given = false, gid_given = false, dir_made = false, mounted = false;
	int r;

	s = session_new(srv);
	if (!s)
		return -ENOMEM;
	r = parse_create(srv, body, s, &uid_given, &gid_given, err);
	if (r < 0)
		goto fail;
	r = check_workspace(srv, s, uid_given, gid_given, err);
	if (r < 0)
		goto fail;
	r = sessions_count_reserve(srv);
	if (r < 0) {
		api_error_set(err, r, 503, API_E_UNAVAILABLE, "session limit of %u reached", srv->cfg->max_sessions);
		goto fail;
	}
	r = new_uuid(s->id);
	if (r < 0)
		goto fail_reserved;
	r = session_paths(s);
	if (r < 0)
		goto fail_reserved;
	s->created_at = s->last_run_at = api_now_ms();

	r = acquire_uid(s, (uid_t)-1);
	if (r < 0) {
		api_error_set(err, r, 503, API_E_UNAVAILABLE, "no free sandbox uid: %s", strerror(-r));
		goto fail_reserved;
	}
	if (mkdirat(srv->sessions_fd, s->id, 0700) < 0) {
		r = api_error_set(err, -errno, 500, API_E_RUNTIME, "cannot create the session dir: %m");
		goto fail_reserved;
	}
	dir_made = true;
	dfd = openat(srv->sessions_fd, s->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		r = api_error_set(err, -errno, 500, API_E_RUNTIME, "cannot open the session dir: %m");
		goto fail_reserved;
	}
	/* session.json first: from here on the upper is the session's and a restart keeps it */
	r = api_session_save(s);
	if (r < 0) {
		api_error_set(err, r, 500, API_E_RUNTIME, "cannot write session.json: %s", strerror(-r));
		goto fail_reserved;
	}
	if (mkdirat(dfd, "upper", 0755) < 0 || mkdirat(dfd, "work", 0700) < 0 || mkdirat(dfd, "view", 0755) < 0 ||
	    mkdirat(dfd, "runs", 0700) < 0) {
		r = api_error_set(err, -errno, 500, API_E_RUNTIME, "cannot create the session layout: %m");
		goto fail_reserved;
	}
	/* the view's root takes the upper's root metadata: give it the workspace root's */
	{
		struct stat wst;

		if (stat(s->workspace, &wst) < 0 ||
		    fchownat(dfd, "upper", wst.st_uid, wst.st_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
		    fchmodat(dfd, "upper", wst.st_mode & 07777, 0) < 0) {
			r = api_error_set(err, -errno, 500, API_E_RUNTIME, "cannot prepare the upper: %m");
			goto fail_reserved;
		}
	}
	r = api_mount_view(s, err);
	if (r < 0)
		goto fail_reserved;
	mounted = true;
	r = open_view(s);
	if (r < 0) {
		api_error_set(err, r, 500, API_E_RUNTIME, "cannot open the view: %s", strerror(-r));
		goto fail_reserved;
	}

	pthread_mutex_lock(&srv->reg->lock);
	srv->reg->creating--;
	r = registry_add(srv->reg, s);
	pthread_mutex_unlock(&srv->reg->lock);
	if (r < 0) {
		api_error_set(err, r, 500, API_E_RUNTIME, "out of memory");
		goto fail;
	}
	api_metric_inc(srv->metrics.sessions_created);
	log_info("created session %s (workspace '%s', mode %s, profile %s, sandbox uid %u)", s->id, s->workspace,
		 mode_name(s->mode), s->profile, (unsigned)s->pool_uid);
	*ret = s;
	return 0;

fail_reserved:
	sessions_count_release(srv);
fail:
	if (mounted)
		api_umount_view(s->view);
	if (dir_made)
		api_rm_rf_at(srv->sessions_fd, s->id); /* nothing of value yet: the upper is empty */
	if (err->status == 0)
		api_error_set(err, r, 500, API_E_RUNTIME, "cannot create the session: %s", strerror(-r));
	api_session_unref(s);
	return r;
}

/* Drops the session's list of background runs (each run holds the session: a cycle otherwise). */
static void session_drop_runs(struct api_session *s)
{
	struct api_run *list, *next;

	pthread_mutex_lock(&s->lock);
	list = s->runs;
	s->runs = NULL;
	s->n_runs = 0;
	pthread_mutex_unlock(&s->lock);
	for (; list; list = next) {
		next = list->next;
		list->next = NULL;
		api_run_unref(list);
	}
}

int api_session_op_begin(struct api_session *s)
{
	int r = 0;

	pthread_mutex_lock(&s->lock);
	if (s->deleted)
		r = -ESRCH;
	else
		s->ops++;
	pthread_mutex_unlock(&s->lock);
	if (r == 0)
		api_session_revive(s);
	return r;
}

/* True when the view is a FUSE mount whose daemon is gone. */
static bool view_dead(int fd)
{
	struct statfs sf;

	/*
	 * ENOTCONN once the daemon's /dev/fuse is closed; ECONNABORTED after an
	 * abort. Over FUSE io_uring the kernel tears a dead daemon's queues down
	 * after the process is gone, and a request caught in that fails with
	 * ECONNABORTED or ECANCELED (docs/fs.md, Request transport).
	 */
	return fstatfs(fd, &sf) < 0 && (errno == ENOTCONN || errno == ECONNABORTED || errno == ECANCELED);
}

void api_session_revive(struct api_session *s)
{
	static pthread_mutex_t revive_lock = PTHREAD_MUTEX_INITIALIZER;
	struct api_error err = {};
	int r;

	if (_likely_(!view_dead(s->view_fd)))
		return;
	pthread_mutex_lock(&revive_lock);
	if (!view_dead(s->view_fd)) { /* another request did it */
		pthread_mutex_unlock(&revive_lock);
		return;
	}
	log_warning("session %s: its draftfs is gone (the view says ENOTCONN), remounting from the upper", s->id);
	r = api_umount_view(s->view);
	if (r >= 0)
		r = api_mount_view(s, &err);
	if (r >= 0)
		r = open_view(s);
	if (r < 0)
		log_error_errno(r, "session %s: cannot remount the view: %s", s->id, err.message[0] ? err.message : strerror(-r));
	else
		log_info("session %s: remounted from its upper", s->id);
	pthread_mutex_unlock(&revive_lock);
}

void api_session_op_end(struct api_session *s)
{
	pthread_mutex_lock(&s->lock);
	s->ops--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

bool api_session_deleting(struct api_session *s)
{
	bool d;

	pthread_mutex_lock(&s->lock);
	d = s->deleted;
	pthread_mutex_unlock(&s->lock);
	return d;
}

void api_session_touch(struct api_session *s)
{
	pthread_mutex_lock(&s->lock);
	s->last_run_at = api_now_ms();
	pthread_mutex_unlock(&s->lock);
	(void)api_session_save(s);
}

void api_session_files_root(struct api_session *s, struct api_files_root *root)
{
	*root = (struct api_files_root){
		.root_fd = s->view_fd,
		.prefix = s->workspace,
		.uid = s->pool_uid,
		.gid = s->pool_gid,
	};
}

int api_session_delete(struct api_session *s, bool idle, struct api_error *err)
{
	struct api_server *srv = s->srv;
	struct timespec ts;
	int r;

	pthread_mutex_lock(&s->lock);
	if (s->deleted) {
		pthread_mutex_unlock(&s->lock);
		return api_error_set(err, -ESRCH, 404, API_E_SESSION_NOT_FOUND, "session not found");
	}
	if (idle && s->busy) {
		pthread_mutex_unlock(&s->lock);
		return -EBUSY; /* the collector retries later */
	}
	s->deleted = true;
	/* cancel every run still going; they release busy as they end */
	if (s->current)
		api_run_cancel(s->current);
	for (struct api_run *run = s->runs; run; run = run->next)
		if (run->running)
			api_run_cancel(run);
	while (s->busy || s->ops > 0) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&s->cond, &s->lock, &ts);
		if (s->current)
			api_run_cancel(s->current); /* escalates to SIGKILL after the grace time */
	}
	pthread_mutex_unlock(&s->lock);

	if (registry_remove(srv->reg, s))
		api_session_unref(s);
	session_drop_runs(s);

	/* a save that started before "deleted" was set finishes before the directory goes */
	pthread_mutex_lock(&save_lock);
	pthread_mutex_unlock(&save_lock);
	/* no run and no operation (uploads included) is left, and none can start: nobody uses view_fd */
	s->view_fd = safe_close(s->view_fd);
	r = api_umount_view(s->view);
	if (r < 0)
		log_warning_errno(r, "cannot unmount '%s', removing the session anyway", s->view);
	/* draftfs writes its state dir (work/draftfs) until it exits: let it finish first */
	wait_draftfs_gone(s->view);
	/* rename first: a crash in the middle of the removal leaves a dir the next start finishes */
	{
		char doomed[64];

		snprintf(doomed, sizeof(doomed), ".deleting-%s", s->id);
		if (renameat(srv->sessions_fd, s->id, srv->sessions_fd, doomed) == 0)
			r = api_rm_rf_at(srv->sessions_fd, doomed);
		else
			r = api_rm_rf_at(srv->sessions_fd, s->id);
	}
	if (r < 0) {
		log_error_errno(r, "cannot remove session dir '%s'", s->dir);
		return api_error_set(err, r, 500, API_E_RUNTIME, "session removed but its directory could not be: %s",
				     strerror(-r));
	}
	s->uid_lock_fd = safe_close(s->uid_lock_fd);
	if (idle)
		api_metric_inc(srv->metrics.sessions_collected);
	else
		api_metric_inc(srv->metrics.sessions_deleted);
	log_info("deleted session %s%s", s->id, idle ? " (idle)" : "");
	return 0;
}

cJSON *api_session_to_json(struct api_session *s, bool summary)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	char created[40], last[40];
	uint64_t last_ms, now = api_now_ms();
	bool busy;

	if (!o)
		return NULL;
	pthread_mutex_lock(&s->lock);
	last_ms = s->last_run_at;
	busy = s->busy;
	pthread_mutex_unlock(&s->lock);
	if (!cJSON_AddStringToObject(o, "session_id", s->id) || !cJSON_AddStringToObject(o, "status", "active") ||
	    !cJSON_AddStringToObject(o, "created_at", api_format_time(s->created_at, created, sizeof(created))) ||
	    !cJSON_AddStringToObject(o, "last_run_at", api_format_time(last_ms, last, sizeof(last))))
		return NULL;
	if (s->idle_timeout > 0) {
		int64_t remaining = (int64_t)s->idle_timeout - (int64_t)((now - last_ms) / 1000);

		if (busy)
			remaining = s->idle_timeout;
		if (!cJSON_AddNumberToObject(o, "idle_remaining_seconds", (double)(remaining < 0 ? 0 : remaining)))
			return NULL;
	}
	if (summary) {
		/* an addition to execd's summary (clients ignore unknown fields): which workspace */
		cJSON *ws = cJSON_AddObjectToObject(o, "workspace");

		if (!ws || !cJSON_AddStringToObject(ws, "path", s->workspace) ||
		    !cJSON_AddStringToObject(ws, "mode", mode_name(s->mode)))
			return NULL;
		return TAKE_PTR(o);
	}
	if (add_params(o, s) < 0 || !cJSON_AddStringToObject(o, "view", s->view) ||
	    !cJSON_AddBoolToObject(o, "running", busy))
		return NULL;
	return TAKE_PTR(o);
}

static int session_cmp(const void *a, const void *b)
{
	const struct api_session *x = *(struct api_session *const *)a, *y = *(struct api_session *const *)b;

	return x->created_at < y->created_at ? -1 : x->created_at > y->created_at;
}

/* Returns new references to all live sessions, sorted by creation. */
static struct api_session **sessions_snapshot(struct api_server *srv, size_t *ret_n)
{
	struct api_registry *reg = srv->reg;
	struct api_session **v;
	size_t n;

	pthread_mutex_lock(&reg->lock);
	n = reg->n;
	v = calloc(n + 1, sizeof(*v));
	if (v)
		for (size_t i = 0; i < n; i++)
			v[i] = session_ref(reg->v[i]);
	pthread_mutex_unlock(&reg->lock);
	if (!v)
		return NULL;
	qsort(v, n, sizeof(*v), session_cmp);
	*ret_n = n;
	return v;
}

static void sessions_snapshot_free(struct api_session **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		api_session_unref(v[i]);
	free(v);
}

char **api_sessions_other_workspaces(struct api_server *srv, const struct api_session *self)
{
	struct api_registry *reg = srv->reg;
	char **v = calloc(1, sizeof(char *));
	bool oom = !v;

	pthread_mutex_lock(&reg->lock);
	for (size_t i = 0; i < reg->n && !oom; i++) {
		const char *ws = reg->v[i]->workspace; /* fixed at creation */

		if (reg->v[i] != self && strcmp(ws, self->workspace) != 0 && !strv_contains(v, ws))
			oom = strv_push(&v, ws) < 0;
	}
	pthread_mutex_unlock(&reg->lock);
	if (oom) {
		strv_free(v);
		return NULL;
	}
	return v;
}

cJSON *api_sessions_list_json(struct api_server *srv, unsigned *ret_count)
{
	cJSON *a = cJSON_CreateArray();
	struct api_session **v;
	size_t n = 0;

	if (!a)
		return NULL;
	v = sessions_snapshot(srv, &n);
	if (!v) {
		cJSON_Delete(a);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		cJSON *o = api_session_to_json(v[i], true);

		if (!o || !cJSON_AddItemToArray(a, o)) {
			cJSON_Delete(o);
			cJSON_Delete(a);
			a = NULL;
			break;
		}
	}
	sessions_snapshot_free(v, n);
	if (ret_count)
		*ret_count = (unsigned)n;
	return a;
}

static void usage_walk(int fd, dev_t dev, unsigned depth, uint64_t *bytes, uint64_t *inodes, uint64_t *budget)
{
	_cleanup_closedir_ DIR *d = fdopendir(fd);
	struct dirent *de;

	if (!d) {
		close(fd);
		return;
	}
	while ((de = readdir(d)) && *budget > 0) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		(*budget)--;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		(*inodes)++;
		*bytes += (uint64_t)st.st_blocks * 512;
		if (S_ISDIR(st.st_mode) && st.st_dev == dev && depth < 256) {
			int cfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (cfd >= 0)
				usage_walk(cfd, dev, depth + 1, bytes, inodes, budget);
		}
	}
}

void api_sessions_upper_usage(struct api_server *srv, uint64_t *ret_bytes, uint64_t *ret_inodes)
{
	struct api_session **v;
	uint64_t bytes = 0, inodes = 0, budget = 1000000;
	size_t n = 0;

	v = sessions_snapshot(srv, &n);
	for (size_t i = 0; v && i < n; i++) {
		char path[PATH_MAX];
		struct stat st;
		int fd;

		snprintf(path, sizeof(path), "%s/upper", v[i]->dir);
		fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) < 0) {
			close(fd);
			continue;
		}
		usage_walk(fd, st.st_dev, 0, &bytes, &inodes, &budget);
	}
	sessions_snapshot_free(v, n);
	*ret_bytes = bytes;
	*ret_inodes = inodes;
}

/* ------------------------------------------------------------------ restart */

static int load_strv(const cJSON *o, const char *key, char ***ret)
{
	int r = json_get_strv(o, key, ret);

	return r == -ENOENT ? 0 : r;
}

/* Loads <sessions>/<id>/session.json into a new session. Returns 0 or -errno. */
static int session_load(struct api_server *srv, const char *id, struct api_session **ret)
{
	_cleanup_close_ int dfd = -1, fd = -1;
	_cleanup_free_ char *text = NULL;
	_cleanup_json_ cJSON *o = NULL;
	struct api_session *s;
	const cJSON *ws, *env;
	const char *str;
	int64_t v;
	size_t len;
	int r;

	dfd = openat(srv->sessions_fd, id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	fd = openat(dfd, "session.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = read_full_fd(fd, 1024 * 1024, &text, &len);
	if (r < 0)
		return r;
	o = cJSON_ParseWithLength(text, len);
	if (!o || !cJSON_IsObject(o))
		return -EBADMSG;
	s = session_new(srv);
	if (!s)
		return -ENOMEM;
	snprintf(s->id, sizeof(s->id), "%.36s", id);
	r = -EBADMSG;
	ws = cJSON_GetObjectItemCaseSensitive(o, "workspace");
	if (!cJSON_IsObject(ws) || json_get_string(ws, "path", &str) < 0 || !(s->workspace = strdup(str)))
		goto fail;
	if (json_get_string(ws, "mode", &str) < 0)
		goto fail;
	s->mode = !strcmp(str, "rw") ? API_WS_RW : !strcmp(str, "ro") ? API_WS_RO : API_WS_OVERLAY;
	if (json_get_string(o, "profile", &str) < 0 || !(s->profile = strdup(str)))
		goto fail;
	if (load_strv(o, "extra_writable", &s->extra_writable) < 0)
		goto fail;
	s->binds = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(o, "binds"), true);
	if (!s->binds && !(s->binds = cJSON_CreateArray()))
		goto fail;
	(void)json_get_bool(o, "share_net", &s->share_net);
	env = cJSON_GetObjectItemCaseSensitive(o, "env_passthrough");
	if (!cJSON_IsObject(env) || json_get_string(env, "mode", &str) < 0 || !(s->env_mode = strdup(str)))
		goto fail;
	if (load_strv(env, "keys", &s->env_keys) < 0)
		goto fail;
	if (json_get_int64(o, "uid", 0, UINT32_MAX - 1, &v) < 0)
		goto fail;
	s->owner_uid = (uid_t)v;
	if (json_get_int64(o, "gid", 0, UINT32_MAX - 1, &v) < 0)
		goto fail;
	s->owner_gid = (gid_t)v;
	if (json_get_int64(o, "sandbox_uid", 1, UINT32_MAX - 1, &v) < 0)
		goto fail;
	s->pool_uid = (uid_t)v;
	if (json_get_int64(o, "sandbox_gid", 1, UINT32_MAX - 1, &v) < 0)
		goto fail;
	s->pool_gid = (gid_t)v;
	if (json_get_int64(o, "idle_timeout_seconds", 0, INT32_MAX, &v) < 0)
		goto fail;
	s->idle_timeout = (unsigned)v;
	if (json_get_int64(o, "created_at_ms", 0, INT64_MAX, &v) < 0)
		goto fail;
	s->created_at = (uint64_t)v;
	s->last_run_at = s->created_at;
	if (json_get_int64(o, "last_run_at_ms", 0, INT64_MAX, &v) == 0)
		s->last_run_at = (uint64_t)v;
	r = session_paths(s);
	if (r < 0)
		goto fail;
	*ret = s;
	return 0;
fail:
	api_session_unref(s);
	return r;
}

/* Brings a loaded session back: keeps a live mount, remounts a dead or missing one. */
static int session_adopt(struct api_server *srv, struct api_session *s)
{
	_cleanup_free_ char *fstype = NULL;
	struct api_error err = {};
	struct stat st;
	int r;

	r = acquire_uid(s, s->pool_uid);
	if (r < 0)
		log_warning_errno(r, "session %s: cannot take back sandbox uid %u", s->id, (unsigned)s->pool_uid);
	r = api_mount_info(s->view, &fstype);
	if (r > 0) {
		if (stat(s->view, &st) == 0 && open_view(s) == 0) {
			log_info("session %s: re-adopted the live %s mount", s->id, fstype);
			return 0;
		}
		log_warning("session %s: the %s mount at '%s' is dead, remounting from the upper", s->id, fstype, s->view);
		(void)api_umount_view(s->view);
	}
	r = api_mount_view(s, &err);
	if (r < 0)
		return log_error_errno(r, "session %s: cannot remount: %s", s->id, err.message);
	r = open_view(s);
	if (r < 0)
		return log_error_errno(r, "session %s: cannot open the remounted view", s->id);
	log_info("session %s: remounted from its upper", s->id);
	return 0;
}

static void cleanup_unknown_dir(struct api_server *srv, const char *name)
{
	char view[PATH_MAX];

	/* never wipe: an upper without a readable session.json may still hold someone's work */
	snprintf(view, sizeof(view), "%s/sessions/%s/view", srv->cfg->state_dir, name);
	if (api_mount_info(view, NULL) > 0) {
		log_warning("unmounting orphan mount '%s'", view);
		(void)api_umount_view(view);
	}
	log_warning("keeping unreadable session dir '%s/sessions/%s' (not removed, inspect by hand)",
		    srv->cfg->state_dir, name);
}

/* True if /proc/@pid/cmdline's program is @prog and one argument lies below @prefix. */
static bool proc_matches(const char *pid, const char *prog, const char *prefix)
{
	char path[64], buf[8192];
	_cleanup_close_ int fd = -1;
	const char *base;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	base = strrchr(buf, '/');
	base = base ? base + 1 : buf;
	if (strcmp(base, prog) != 0)
		return false;
	for (char *a = buf + strlen(buf) + 1; a < buf + n; a += strlen(a) + 1)
		if (strstr(a, prefix))
			return true;
	return false;
}

/*
 * Orphans of a crashed server: draftbox-run processes working on our sessions
 * (no run is ours yet at start), and draftfs daemons of views that are not
 * mounted any more. Both are stopped.
 */
static void kill_orphan_processes(struct api_server *srv)
{
	_cleanup_closedir_ DIR *d = opendir("/proc");
	char prefix[PATH_MAX];
	struct dirent *de;

	if (!d)
		return;
	snprintf(prefix, sizeof(prefix), "%s/sessions/", srv->cfg->state_dir);
	while ((de = readdir(d))) {
		pid_t pid;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		pid = (pid_t)atoi(de->d_name);
		if (pid == getpid())
			continue;
		if (proc_matches(de->d_name, "draftbox-run", prefix)) {
			log_warning("stopping orphan draftbox-run %d", (int)pid);
			kill(pid, SIGTERM);
		} else if (proc_matches(de->d_name, "draftfs", prefix)) {
			char path[64], buf[8192];
			_cleanup_close_ int fd = -1;
			ssize_t n;
			const char *last = NULL;

			/* the mountpoint is draftfs' last argument */
			snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			n = read(fd, buf, sizeof(buf) - 1);
			if (n <= 0)
				continue;
			buf[n] = '\0';
			for (char *a = buf; a < buf + n; a += strlen(a) + 1)
				last = a;
			if (last && strncmp(last, prefix, strlen(prefix)) == 0 && api_mount_info(last, NULL) == 0) {
				log_warning("stopping orphan draftfs %d (nothing mounted at '%s')", (int)pid, last);
				kill(pid, SIGTERM);
			}
		}
	}
}

/* The pid of a draftfs whose command line names @view, or 0. */
static pid_t find_draftfs(const char *view)
{
	_cleanup_closedir_ DIR *d = opendir("/proc");
	struct dirent *de;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (de->d_name[0] >= '1' && de->d_name[0] <= '9' && proc_matches(de->d_name, "draftfs", view))
			return (pid_t)atoi(de->d_name);
	return 0;
}

/*
 * Waits (up to 10 s) until no draftfs serves @view any more: on a pidfd of the
 * one found, so the wait ends when it exits (a look every 50 ms without pidfds).
 */
static void wait_draftfs_gone(const char *view)
{
	uint64_t deadline = api_mono_ms() + 10000;
	pid_t pid;

	while ((pid = find_draftfs(view)) > 0) {
		_cleanup_close_ int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
		uint64_t now = api_mono_ms();

		if (now >= deadline) {
			log_warning("draftfs for '%s' is still running after the unmount", view);
			return;
		}
		if (pfd >= 0) {
			struct pollfd p = { .fd = pfd, .events = POLLIN };

			(void)poll(&p, 1, (int)MIN(deadline - now, (uint64_t)1000));
		} else {
			usleep(50 * 1000);
		}
	}
}

/* A session whose removal a crash interrupted: unmount what is left and finish it. */
static void finish_deletion(struct api_server *srv, const char *name)
{
	char view[PATH_MAX], served[PATH_MAX];
	int r;

	snprintf(view, sizeof(view), "%s/sessions/%s/view", srv->cfg->state_dir, name);
	if (api_mount_info(view, NULL) > 0)
		(void)api_umount_view(view);
	/* draftfs writes its state dir until it exits, as in a normal delete; it
	 * still names the view by the path from before the rename */
	snprintf(served, sizeof(served), "%s/sessions/%s/view", srv->cfg->state_dir, name + strlen(".deleting-"));
	wait_draftfs_gone(served);
	r = api_rm_rf_at(srv->sessions_fd, name);
	if (r < 0)
		log_warning_errno(r, "cannot finish removing '%s/sessions/%s'", srv->cfg->state_dir, name);
	else
		log_info("finished removing '%s', deleted before a crash", name);
}

int api_sessions_init(struct api_server *srv)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int fd, r;

	srv->reg = calloc(1, sizeof(*srv->reg));
	if (!srv->reg)
		return -ENOMEM;
	pthread_mutex_init(&srv->reg->lock, NULL);
	if (mkdirat(srv->state_fd, "sessions", 0700) < 0 && errno != EEXIST)
		return log_error_errno(-errno, "cannot create '%s/sessions'", srv->cfg->state_dir);
	srv->sessions_fd = openat(srv->state_fd, "sessions", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (srv->sessions_fd < 0)
		return log_error_errno(-errno, "cannot open '%s/sessions'", srv->cfg->state_dir);
	fd = fd_reopen(srv->sessions_fd, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return log_error_errno(fd, "cannot read '%s/sessions'", srv->cfg->state_dir);
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	kill_orphan_processes(srv);
	while ((de = readdir(d))) {
		struct api_session *s = NULL;
		int dfd;

		if (strncmp(de->d_name, ".deleting-", 10) == 0) {
			finish_deletion(srv, de->d_name);
			continue;
		}
		if (de->d_name[0] == '.')
			continue;
		if (!api_session_id_valid(de->d_name)) {
			log_warning("ignoring '%s' in '%s/sessions'", de->d_name, srv->cfg->state_dir);
			continue;
		}
		dfd = openat(srv->sessions_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd >= 0) {
			api_run_reap_orphan(dfd, de->d_name);
			close(dfd);
		}
		r = session_load(srv, de->d_name, &s);
		if (r < 0) {
			log_warning_errno(r, "cannot load session '%s'", de->d_name);
			cleanup_unknown_dir(srv, de->d_name);
			continue;
		}
		r = session_adopt(srv, s);
		if (r < 0) {
			api_session_unref(s);
			continue;
		}
		pthread_mutex_lock(&srv->reg->lock);
		r = registry_add(srv->reg, s);
		pthread_mutex_unlock(&srv->reg->lock);
		api_session_unref(s);
		if (r < 0)
			return r;
	}
	log_info("%zu session(s) restored", srv->reg->n);
	return 0;
}

static void *gc_main(void *arg)
{
	struct api_server *srv = arg;

	for (;;) {
		struct api_session **v;
		struct timespec ts;
		size_t n = 0;
		uint64_t now;

		pthread_mutex_lock(&srv->stop_lock);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		while (!srv->stopping && pthread_cond_timedwait(&srv->stop_cond, &srv->stop_lock, &ts) == 0)
			;
		if (srv->stopping) {
			pthread_mutex_unlock(&srv->stop_lock);
			break;
		}
		pthread_mutex_unlock(&srv->stop_lock);

		now = api_now_ms();
		v = sessions_snapshot(srv, &n);
		for (size_t i = 0; v && i < n; i++) {
			struct api_session *s = v[i];
			struct api_error err = {};
			bool expired;

			pthread_mutex_lock(&s->lock);
			expired = s->idle_timeout > 0 && !s->busy && s->ops == 0 &&
				  now > s->last_run_at + (uint64_t)s->idle_timeout * 1000;
			pthread_mutex_unlock(&s->lock);
			if (expired)
				(void)api_session_delete(s, true, &err);
		}
		sessions_snapshot_free(v, n);
	}
	return NULL;
}

int api_sessions_start_gc(struct api_server *srv)
{
	int r = pthread_create(&srv->gc_thread, NULL, gc_main, srv);

	if (r != 0)
		return -r;
	srv->gc_started = true;
	return 0;
}

void api_sessions_shutdown(struct api_server *srv)
{
	struct api_session **v;
	size_t n = 0;

	pthread_mutex_lock(&srv->stop_lock);
	srv->stopping = true;
	pthread_cond_broadcast(&srv->stop_cond);
	pthread_mutex_unlock(&srv->stop_lock);
	if (srv->gc_started)
		pthread_join(srv->gc_thread, NULL);
	if (!srv->reg)
		return;
	v = sessions_snapshot(srv, &n);
	for (size_t i = 0; v && i < n; i++) {
		struct api_session *s = v[i];
		struct timespec ts;

		pthread_mutex_lock(&s->lock);
		if (s->current)
			api_run_cancel(s->current);
		for (struct api_run *run = s->runs; run; run = run->next)
			if (run->running)
				api_run_cancel(run);
		for (int tries = 0; s->busy && tries < 10; tries++) {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&s->cond, &s->lock, &ts);
			if (s->current)
				api_run_cancel(s->current);
		}
		pthread_mutex_unlock(&s->lock);
		(void)api_session_save(s);
		session_drop_runs(s);
	}
	sessions_snapshot_free(v, n);
	pthread_mutex_lock(&srv->reg->lock);
	for (size_t i = 0; i < srv->reg->n; i++)
		api_session_unref(srv->reg->v[i]);
	srv->reg->n = 0;
	pthread_mutex_unlock(&srv->reg->lock);
}

void api_sessions_free(struct api_server *srv)
{
	if (!srv->reg)
		return;
	pthread_mutex_destroy(&srv->reg->lock);
	free(srv->reg->v);
	free(srv->reg);
	srv->reg = NULL;
}
