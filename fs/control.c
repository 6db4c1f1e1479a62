// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The control server of a mounted draftfs (control.h): a Unix stream socket
 * "ctl.sock" in the private state dir (0700), one JSON request and one JSON
 * reply per connection (ctl-proto.h), a thread per connection so a long
 * diff does not hold up a status or another mount's invalidate. Mutating
 * operations (commit, discard, recover) are serialized by a mutex. Only
 * root and the daemon's own uid may talk to it (SO_PEERCRED).
 *
 * While it runs, the daemon holds an exclusive flock on "lock" in the state
 * dir, which offline commits/discards take too, and the mount is listed in
 * the registry of live mounts (registry.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "ctl-ops.h"
#include "ctl-proto.h"
#include "journal.h"
#include "json-util.h"
#include "log.h"
#include "registry.h"


struct ovl_control {
	const struct ovl_layers *layers; /* owned by the core, valid until ovl_control_stop() */
	struct ovl_live live;
	struct ovl_ctl_env env;
	int listen_fd;
	int stop_pipe[2];
	int lock_fd;
	char *socket_path;
	char *state_path;
	char *upper_path;
	char **lower_paths;
	char *registry_name;
	pthread_t thread;
	bool thread_started;
	/* lock order: op_lock, then count_lock */
	pthread_mutex_t op_lock;
	pthread_mutex_t count_lock;
	pthread_cond_t count_cond;
	unsigned active;
};

int ovl_ctl_take_lock(int state_fd, bool wait)
{
	_cleanup_close_ int fd = -1;

	fd = openat(state_fd, OVL_CTL_LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	return TAKE_FD(fd);
}

static int parse_commit_opts(const cJSON *req, struct ovl_commit_opts *o, cJSON **ret_error)
{
	const char *owner = NULL;
	int64_t v;
	int r;

	*o = (struct ovl_commit_opts){ 0 };
	if ((r = json_get_bool(req, "force", &o->force)) == -EINVAL ||
	    (r = json_get_bool(req, "allow_setid", &o->allow_setid)) == -EINVAL ||
	    (r = json_get_bool(req, "allow_special", &o->allow_special)) == -EINVAL ||
	    (r = json_get_bool(req, "allow_xattrs", &o->allow_xattrs)) == -EINVAL ||
	    (r = json_get_bool(req, "dry_run", &o->dry_run)) == -EINVAL)
		return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL, "commit flags must be booleans");
	r = json_get_string(req, "owner", &owner);
	if (r == -EINVAL)
		return ovl_ctl_error(ret_error, r, "invalid_argument", NULL, "'owner' must be a string");
	if (!owner || strcmp(owner, "workspace") == 0)
		o->owner = OVL_OWNER_WORKSPACE;
	else if (strcmp(owner, "preserve") == 0)
		o->owner = OVL_OWNER_PRESERVE;
	else if (strcmp(owner, "fixed") == 0)
		o->owner = OVL_OWNER_FIXED;
	else
		return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL,
		                     "unknown owner mode '%s' (workspace, preserve, fixed)", owner);
	if (o->owner == OVL_OWNER_FIXED) {
		if (json_get_int64(req, "uid", 0, UINT32_MAX - 1, &v) < 0)
			return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL, "owner 'fixed' needs 'uid'");
		o->uid = (uid_t)v;
		if (json_get_int64(req, "gid", 0, UINT32_MAX - 1, &v) < 0)
			return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL, "owner 'fixed' needs 'gid'");
		o->gid = (gid_t)v;
	}
	return 0;
}

/* The error of a failed request when its op gave none. */
static int request_failed(cJSON **ret_error, int r)
{
	return ovl_ctl_error(ret_error, r, "io", NULL, "request failed");
}

/* Runs one request. Returns 0 and *ret_result, or -errno and *ret_error. */
static int dispatch(struct ovl_control *c, const cJSON *req, int passed_fd, cJSON **ret_result, cJSON **ret_error)
{
	_cleanup_strv_free_ char **paths = NULL;
	const char *op = NULL, *fmt = "json";
	int r;

	if (json_get_string(req, "op", &op) < 0)
		return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL, "request without 'op'");
	r = json_get_strv(req, "paths", &paths);
	if (r == -EINVAL)
		return ovl_ctl_error(ret_error, r, "invalid_argument", NULL, "'paths' must be an array of strings");
	/* an empty list is a caller's mistake, never "everything" (that is 'paths' left out) */
	if (r >= 0 && !paths[0] && (strcmp(op, "commit") == 0 || strcmp(op, "discard") == 0))
		return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL,
		                     "'paths' is empty: name at least one path, or leave 'paths' out to %s everything", op);

	if (strcmp(op, "diff") == 0) {
		enum ovl_diff_format f;

		if (json_get_string(req, "format", &fmt) == -EINVAL || ovl_diff_format_from_string(fmt, &f) < 0)
			return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL,
			                     "unknown diff format (json, patch, tar)");
		if (passed_fd < 0)
			return ovl_ctl_error(ret_error, -EBADF, "invalid_argument", NULL,
			                     "diff needs an output fd passed with the request");
		return ovl_op_diff(&c->env, f, paths, passed_fd, ret_result, ret_error);
	}
	if (strcmp(op, "status") == 0)
		return ovl_op_status(&c->env, ret_result, ret_error);
	if (strcmp(op, "invalidate") == 0)
		return ovl_op_invalidate(&c->env, paths, ret_result, ret_error);
	if (strcmp(op, "commit") == 0 || strcmp(op, "discard") == 0 || strcmp(op, "recover") == 0) {
		struct ovl_commit_opts o;
		bool force = false;

		if (op[0] == 'c') {
			r = parse_commit_opts(req, &o, ret_error);
			if (r < 0)
				return r;
		} else if (op[0] == 'r' && json_get_bool(req, "force", &force) == -EINVAL) {
			return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL, "'force' must be a boolean");
		}
		pthread_mutex_lock(&c->op_lock);
		if (op[0] == 'c')
			r = ovl_op_commit(&c->env, paths, &o, ret_result, ret_error);
		else if (op[0] == 'd')
			r = ovl_op_discard(&c->env, paths, ret_result, ret_error);
		else
			r = ovl_op_recover(&c->env, force, ret_result, ret_error);
		/* A commit that stopped part-way left its journal: the caller learns it from the error itself. */
		if (r < 0 && ovl_journal_pending(c->env.layers->state_fd) > 0) {
			if (!*ret_error)
				(void)request_failed(ret_error, r);
			if (*ret_error)
				cJSON_AddBoolToObject(*ret_error, "journal_pending", true);
		}
		pthread_mutex_unlock(&c->op_lock);
		return r;
	}
	return ovl_ctl_error(ret_error, -EINVAL, "invalid_argument", NULL, "unknown operation '%s'", op);
}

struct conn {
	struct ovl_control *c;
	int fd;
};

static void *conn_thread(void *arg)
{
	struct conn *cn = arg;
	struct ovl_control *c = cn->c;
	_cleanup_close_ int fd = cn->fd, passed = -1;
	_cleanup_json_ cJSON *req = NULL, *result = NULL, *error = NULL, *reply = NULL;
	struct timeval tv = { .tv_sec = 30 };
	int r;

	free(cn);
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	r = ovl_proto_recv(fd, &req, &passed);
	if (r < 0) {
		(void)ovl_ctl_error(&error, r, r == -EBADMSG ? "invalid_path" : "invalid_argument", NULL,
		                    r == -EBADMSG ? "malformed request (not one JSON object, or a NUL byte in a string)"
		                                  : "malformed request");
	} else {
		r = dispatch(c, req, passed, &result, &error);
		if (r < 0 && !error)
			(void)request_failed(&error, r);
	}
	passed = safe_close(passed);
	reply = cJSON_CreateObject();
	if (reply) {
		cJSON_AddBoolToObject(reply, "ok", r >= 0);
		if (r >= 0)
			cJSON_AddItemToObject(reply, "result", result ? TAKE_PTR(result) : cJSON_CreateObject());
		else if (error)
			cJSON_AddItemToObject(reply, "error", TAKE_PTR(error));
		(void)ovl_proto_send(fd, reply, -1);
	}
	pthread_mutex_lock(&c->count_lock);
	c->active--;
	pthread_cond_broadcast(&c->count_cond);
	pthread_mutex_unlock(&c->count_lock);
	return NULL;
}

static bool peer_allowed(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return false;
	return cr.uid == 0 || cr.uid == geteuid();
}

static void *accept_thread(void *arg)
{
	struct ovl_control *c = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = c->listen_fd, .events = POLLIN }, { .fd = c->stop_pipe[0], .events = POLLIN } };
		struct conn *cn;
		pthread_t t;
		pthread_attr_t attr;
		int fd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		if (!peer_allowed(fd)) {
			close(fd);
			continue;
		}
		cn = malloc(sizeof(*cn));
		if (!cn) {
			close(fd);
			continue;
		}
		cn->c = c;
		cn->fd = fd;
		pthread_mutex_lock(&c->count_lock);
		c->active++;
		pthread_mutex_unlock(&c->count_lock);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &attr, conn_thread, cn) != 0) {
			close(fd);
			free(cn);
			pthread_mutex_lock(&c->count_lock);
			c->active--;
			pthread_mutex_unlock(&c->count_lock);
		}
		pthread_attr_destroy(&attr);
	}
	return NULL;
}

static int fd_path(int fd, char **ret)
{
	char proc[64], buf[PATH_MAX];
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, buf, sizeof(buf) - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	*ret = strdup(buf);
	return *ret ? 0 : -ENOMEM;
}

int ovl_control_start(const struct ovl_layers *layers, const struct ovl_live *live, struct ovl_control **ret)
{
	struct ovl_control *c;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int r;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->layers = layers;
	c->live = *live;
	c->env = (struct ovl_ctl_env){ .layers = layers, .live = &c->live, .in_daemon = true };
	c->listen_fd = c->lock_fd = c->stop_pipe[0] = c->stop_pipe[1] = -1;
	pthread_mutex_init(&c->op_lock, NULL);
	pthread_mutex_init(&c->count_lock, NULL);
	pthread_cond_init(&c->count_cond, NULL);

	r = ovl_ctl_take_lock(layers->state_fd, false);
	if (r < 0) {
		log_error_errno(r, "cannot lock the state dir of '%s' (is the session mounted twice?)",
		                layers->mountpoint ?: "?");
		goto fail;
	}
	c->lock_fd = r;
	r = fd_path(layers->state_fd, &c->state_path);
	if (r < 0)
		goto fail;
	c->env.state_path = c->state_path;
	if (fd_path(layers->upper_fd, &c->upper_path) >= 0)
		c->env.upper_path = c->upper_path;
	c->lower_paths = calloc(layers->n_lower + 1, sizeof(char *));
	for (size_t i = 0; c->lower_paths && i < layers->n_lower; i++)
		if (fd_path(layers->lower_fds[i], &c->lower_paths[i]) < 0)
			break;
	c->env.lower_paths = c->lower_paths;
	if (asprintf(&c->socket_path, "%s/" OVL_CTL_SOCKET_NAME, c->state_path) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	(void)unlinkat(layers->state_fd, OVL_CTL_SOCKET_NAME, 0);
	/* bind through /proc so a long state dir path still fits in sun_path */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/" OVL_CTL_SOCKET_NAME, layers->state_fd);
	c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->listen_fd < 0 || bind(c->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(c->listen_fd, 64) < 0) {
		r = log_error_errno(-errno, "cannot listen on '%s'", c->socket_path);
		goto fail;
	}
	(void)fchmodat(layers->state_fd, OVL_CTL_SOCKET_NAME, 0600, 0);
	if (pipe2(c->stop_pipe, O_CLOEXEC) < 0) {
		r = -errno;
		goto fail;
	}
	r = ovl_registry_add(layers, c->socket_path, &c->registry_name);
	if (r < 0)
		log_warning_errno(r, "cannot register the mount in the registry of live mounts; other mounts over "
		                     "the same workspace will not be told about its commits");
	if (pthread_create(&c->thread, NULL, accept_thread, c) != 0) {
		r = -EAGAIN;
		goto fail;
	}
	c->thread_started = true;
	*ret = c;
	return 0;
fail:
	ovl_control_stop(c);
	return r;
}

void ovl_control_stop(struct ovl_control *c)
{
	if (!c)
		return;
	if (c->thread_started) {
		char b = 1;

		(void)!write(c->stop_pipe[1], &b, 1);
		pthread_join(c->thread, NULL);
	}
	/* wait for requests in flight (they use the layers) */
	pthread_mutex_lock(&c->count_lock);
	while (c->active > 0)
		pthread_cond_wait(&c->count_cond, &c->count_lock);
	pthread_mutex_unlock(&c->count_lock);
	ovl_registry_remove(c->registry_name);
	if (c->listen_fd >= 0)
		(void)unlinkat(c->layers->state_fd, OVL_CTL_SOCKET_NAME, 0);
	safe_close(c->listen_fd);
	safe_close(c->stop_pipe[0]);
	safe_close(c->stop_pipe[1]);
	safe_close(c->lock_fd);
	free(c->socket_path);
	free(c->state_path);
	free(c->upper_path);
	strv_free(c->lower_paths);
	free(c->registry_name);
	pthread_mutex_destroy(&c->op_lock);
	pthread_mutex_destroy(&c->count_lock);
	pthread_cond_destroy(&c->count_cond);
	free(c);
}

bool ovl_ctl_is_subcommand(const char *verb)
{
	static const char *const verbs[] = { "diff", "commit", "discard", "status", "invalidate", "recover" };

	for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
		if (strcmp(verb, verbs[i]) == 0)
			return true;
	return false;
}
