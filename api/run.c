// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Runs (see run.h): the draftbox-run command line for a session, the pump
 * that feeds the code to bash's stdin (its commands read /dev/null) and
 * reads output, result JSON and the launcher's exit through one poll(), the
 * SSE response of a foreground run (which cancels the run when its client
 * goes away), background runs with
 * their log, and the pid file that lets a restart kill runs of a crashed
 * server.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fdpath.h"
#include "launch.h"
#include "log.h"
#include "run.h"
#include "spawn.h"

extern char **environ;

#define LINE_MAX_BYTES (64 * 1024)
#define STEP_OUTPUT_MAX (64 * 1024) /* bytes of each pipe one step reads at most */
#define CANCEL_KILL_MS 8000     /* SIGKILL the launcher's group this long after a cancel */
#define MAX_KEPT_RUNS 32
#define LOG_READ_MAX (16u * 1024 * 1024)

struct run_proc {
	int pidfd;
	bool exited;
	char json[4096];
	size_t json_len;
};

struct api_run *api_run_ref(struct api_run *run)
{
	__atomic_add_fetch(&run->refcount, 1, __ATOMIC_RELAXED);
	return run;
}

void api_run_unref(struct api_run *run)
{
	if (!run || __atomic_sub_fetch(&run->refcount, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	safe_close(run->in_fd);
	safe_close(run->out_fd);
	safe_close(run->err_fd);
	safe_close(run->json_fd);
	safe_close(run->log_fd);
	free(run->code);
	free(run->error);
	free(run->line[0]);
	free(run->line[1]);
	api_session_unref(run->s);
	free(run);
}

/* ------------------------------------------------------------------ argv */

struct argv_buf {
	char **v;
	size_t n, cap;
	bool oom;
};

static void arg(struct argv_buf *a, const char *s)
{
	if (a->oom)
		return;
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		char **v = realloc(a->v, cap * sizeof(char *));

		if (!v) {
			a->oom = true;
			return;
		}
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n] = strdup(s);
	if (!a->v[a->n]) {
		a->oom = true;
		return;
	}
	a->v[++a->n] = NULL;
}

static void argf(struct argv_buf *a, const char *fmt, ...) _printf_(2, 3);
static void argf(struct argv_buf *a, const char *fmt, ...)
{
	_cleanup_free_ char *s = NULL;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (r < 0) {
		a->oom = true;
		return;
	}
	arg(a, s);
}

static char *join_keys(char **keys)
{
	size_t n = 0;
	char *s, *w;

	for (char **k = keys; k && *k; k++)
		n += strlen(*k) + 1;
	s = w = malloc(n + 1);
	if (!s)
		return NULL;
	*s = '\0';
	for (char **k = keys; k && *k; k++)
		w += sprintf(w, "%s%s", w == s ? "" : ",", *k);
	return s;
}

/*
 * The environment draftbox-run starts with: ours, plus the request's variables as
 * LAUNCH_SETENV_PREFIX0=K=V, ... (read by --setenv-from-env). A root process's
 * environment is readable only by root; its command line, by every host user.
 * Returns a new vector or NULL.
 */
static char **run_environ(const struct api_run_request *rq)
{
	_cleanup_strv_free_ char **env = NULL;
	unsigned i = 0;

	for (char **e = environ; e && *e; e++)
		if (strncmp(*e, LAUNCH_SETENV_PREFIX, sizeof(LAUNCH_SETENV_PREFIX) - 1) != 0 && strv_push(&env, *e) < 0)
			return NULL;
	for (char **e = rq->envs; e && *e; e++, i++) {
		_cleanup_free_ char *kv = NULL;

		if (asprintf(&kv, LAUNCH_SETENV_PREFIX "%u=%s", i, *e) < 0 || strv_push(&env, kv) < 0)
			return NULL;
	}
	if (!env)
		env = calloc(1, sizeof(char *));
	return TAKE_PTR(env);
}

/* The draftbox-run command line of one run. Returns a new vector or NULL. */
static char **build_argv(struct api_session *s, const struct api_run_request *rq, unsigned timeout)
{
	const struct api_config *cfg = s->srv->cfg;
	struct argv_buf a = {};
	const cJSON *b;

	arg(&a, cfg->launcher);
	if (s->mode == API_WS_OVERLAY) {
		arg(&a, "--workspace"), arg(&a, s->workspace);
		arg(&a, "--mode"), arg(&a, "overlay");
		arg(&a, "--view"), arg(&a, s->view);
	} else {
		/* the idmapped view, shown at the workspace's own path */
		arg(&a, "--workspace"), arg(&a, s->view);
		arg(&a, "--mode"), arg(&a, s->mode == API_WS_RW ? "rw" : "ro");
		arg(&a, "--workspace-dest"), arg(&a, s->workspace);
	}
	if (rq->cwd)
		arg(&a, "--cwd"), arg(&a, rq->cwd);
	arg(&a, "--profile"), arg(&a, s->profile);
	if (s->share_net)
		arg(&a, "--share-net");
	cJSON_ArrayForEach(b, s->binds) {
		const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "source"));
		const char *dest = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(b, "dest"));
		bool ro = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "readonly"));

		if (!src || !dest)
			continue;
		arg(&a, "--allow"), arg(&a, src);
		arg(&a, "--expose"), argf(&a, "%s:%s:%s", src, dest, ro ? "ro" : "rw");
	}
	for (char **p = s->extra_writable; p && *p; p++) {
		arg(&a, "--allow"), arg(&a, *p);
		arg(&a, "--extra-writable"), arg(&a, *p);
	}
	arg(&a, "--state-dir"), arg(&a, cfg->state_dir);
	/*
	 * Other sessions' workspaces (their files, not only their changes, are
	 * theirs) and the operator's hidden dirs; skipped where they would hide
	 * what this session is given.
	 */
	{
		_cleanup_strv_free_ char **others = api_sessions_other_workspaces(s->srv, s);

		if (!others)
			a.oom = true;
		for (char **o = others; o && *o; o++)
			arg(&a, "--hide-if-free"), arg(&a, *o);
		for (char **h = cfg->hidden; h && *h; h++)
			arg(&a, "--hide-if-free"), arg(&a, *h);
	}
	arg(&a, "--uid"), argf(&a, "%u", (unsigned)s->pool_uid);
	arg(&a, "--gid"), argf(&a, "%u", (unsigned)s->pool_gid);
	arg(&a, "--home-dir"), argf(&a, "%s/home", s->dir);
	if (s->env_keys && s->env_keys[0]) {
		_cleanup_free_ char *keys = join_keys(s->env_keys);

		if (!keys)
			a.oom = true;
		else
			arg(&a, strcmp(s->env_mode, "allow") == 0 ? "--env-allow" : "--env-deny"), arg(&a, keys);
	} else if (strcmp(s->env_mode, "allow") == 0) {
		arg(&a, "--env-allow"), arg(&a, "DRAFTBOX_NO_HOST_VARIABLE");
	}
	/*
	 * Sanitizer settings of our own binaries are not the sandbox's business, and an
	 * ASan-built draftbox-exec fails inside the seccomp sandbox when they ask for leak checks.
	 */
	if (strcmp(s->env_mode, "allow") != 0)
		arg(&a, "--env-deny"), arg(&a, "ASAN_OPTIONS,LSAN_OPTIONS,UBSAN_OPTIONS,MSAN_OPTIONS,TSAN_OPTIONS");
	/* the request's variables go by our environment (run_environ), not on a command line anyone can read */
	if (rq->envs && rq->envs[0])
		arg(&a, "--setenv-from-env");
	if (timeout)
		arg(&a, "--timeout"), argf(&a, "%u", timeout);
	arg(&a, "--stdin-fd"), arg(&a, "0");
	arg(&a, "--json-fd"), arg(&a, "3");
	arg(&a, "--");
	/*
	 * bash reads the whole script from its stdin before it runs a line of
	 * it, and its commands get /dev/null: a command that reads stdin (cat,
	 * read, python -) must not eat the rest of the script. cat, because
	 * bash's read builtin takes a pipe byte by byte and the sandbox uid may
	 * not reopen our pipe as /dev/stdin.
	 */
	arg(&a, "/bin/bash"), arg(&a, "--noprofile"), arg(&a, "--norc"), arg(&a, "-c");
	arg(&a, "c=$(command -p cat); exec </dev/null; eval \"$c\"$'\\n'"), arg(&a, "/bin/bash");
	if (a.oom) {
		strv_free(a.v);
		return NULL;
	}
	return a.v;
}

/* ------------------------------------------------------------------ pid file */

static int proc_starttime(pid_t pid, unsigned long long *ret)
{
	char path[64], buf[1024], *p;
	_cleanup_close_ int fd = -1;
	ssize_t n;
	int field = 2;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	for (p++; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (field != 22)
		return -EIO;
	*ret = strtoull(p, NULL, 10);
	return 0;
}

static void pidfile_write(struct api_run *run)
{
	_cleanup_close_ int dfd = -1, fd = -1;
	unsigned long long st = 0;
	char buf[64];

	dfd = openat(run->s->srv->sessions_fd, run->s->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return;
	(void)proc_starttime(run->pid, &st);
	fd = openat(dfd, "run.pid", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	snprintf(buf, sizeof(buf), "%d %llu\n", (int)run->pid, st);
	(void)write_full(fd, buf, strlen(buf));
}

static void pidfile_remove(struct api_run *run)
{
	_cleanup_close_ int dfd = openat(run->s->srv->sessions_fd, run->s->id,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (dfd >= 0)
		(void)unlinkat(dfd, "run.pid", 0);
}

void api_run_reap_orphan(int session_dir_fd, const char *session_id)
{
	_cleanup_close_ int fd = openat(session_dir_fd, "run.pid", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char buf[64] = {};
	unsigned long long want = 0, have = 0;
	int pid = 0;
	ssize_t n;

	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n > 0 && sscanf(buf, "%d %llu", &pid, &want) == 2 && pid > 1 && proc_starttime(pid, &have) == 0 &&
	    have == want) {
		log_warning("session %s: stopping run %d left by a previous server", session_id, pid);
		kill(pid, SIGTERM);
		for (int i = 0; i < 50 && proc_starttime(pid, &have) == 0 && have == want; i++)
			usleep(100 * 1000);
		if (proc_starttime(pid, &have) == 0 && have == want) {
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
		}
	}
	(void)unlinkat(session_dir_fd, "run.pid", 0);
}

/* ------------------------------------------------------------------ start */

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

#define SETUP_GATE_MS 3000

/* The sandbox is up (or gone): mounts may change again. */
static void setup_done(struct api_run *run)
{
	if (run->in_setup) {
		run->in_setup = false;
		api_mount_gate_setup_end();
	}
}

/* Waits until the session is free and takes it. Returns 0 or -ESRCH (deleted). */
static int session_acquire(struct api_session *s, struct api_run *run)
{
	pthread_mutex_lock(&s->lock);
	while (s->busy && !s->deleted)
		pthread_cond_wait(&s->cond, &s->lock);
	if (s->deleted) {
		pthread_mutex_unlock(&s->lock);
		return -ESRCH;
	}
	s->busy = true;
	s->current = run;
	run->running = true;
	pthread_mutex_unlock(&s->lock);
	api_session_revive(s);
	return 0;
}

static void session_release(struct api_session *s, struct api_run *run)
{
	pthread_mutex_lock(&s->lock);
	if (s->current == run) {
		s->current = NULL;
		s->busy = false;
	}
	run->running = false;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static int open_run_log(struct api_run *run)
{
	_cleanup_close_ int dfd = -1;
	char name[64];

	dfd = openat(run->s->srv->sessions_fd, run->s->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	snprintf(name, sizeof(name), "runs/%s.log", run->id);
	run->log_fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	return run->log_fd < 0 ? -errno : 0;
}

/* Removes the log of a run the session no longer keeps (it is not reachable any more; readers keep their fd). */
static void remove_run_log(struct api_run *run)
{
	_cleanup_close_ int dfd = -1;
	char name[64];

	if (run->log_fd < 0)
		return;
	dfd = openat(run->s->srv->sessions_fd, run->s->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return;
	snprintf(name, sizeof(name), "runs/%s.log", run->id);
	if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
		log_warning_errno(-errno, "session %s: cannot remove the log of run %s", run->s->id, run->id);
}

static int new_run_id(char buf[40])
{
	unsigned char b[16];

	if (getentropy(b, sizeof(b)) < 0)
		return -errno;
	b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
	b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
	snprintf(buf, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	return 0;
}

int api_run_start(struct api_session *s, const struct api_run_request *rq, struct api_run **ret, struct api_error *err)
{
	const struct api_config *cfg = s->srv->cfg;
	struct api_run *run;
	_cleanup_strv_free_ char **argv = NULL, **envp = NULL;
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, errp[2] = { -1, -1 }, js[2] = { -1, -1 };
	unsigned timeout;
	int r;

	run = calloc(1, sizeof(*run));
	if (!run)
		return -ENOMEM;
	run->refcount = 1;
	run->s = api_session_ref(s);
	run->in_fd = run->out_fd = run->err_fd = run->json_fd = run->log_fd = -1;
	run->exit_code = -1;
	run->background = rq->background;
	run->stream_stderr = rq->stream_stderr && !rq->background;
	run->code = malloc(rq->code_len + 2);
	if (!run->code || new_run_id(run->id) < 0) {
		api_run_unref(run);
		return -ENOMEM;
	}
	memcpy(run->code, rq->code, rq->code_len);
	run->code_len = rq->code_len;
	if (run->code_len == 0 || run->code[run->code_len - 1] != '\n')
		run->code[run->code_len++] = '\n';

	timeout = rq->timeout;
	if (timeout == 0 || (cfg->max_run_timeout && timeout > cfg->max_run_timeout))
		timeout = cfg->max_run_timeout;
	if (rq->background)
		timeout = 0; /* background runs are not time-limited (as OpenSandbox); delete cancels them */

	r = session_acquire(s, run);
	if (r < 0) {
		api_run_unref(run);
		return api_error_set(err, r, 404, API_E_SESSION_NOT_FOUND, "session not found");
	}
	if (rq->background) {
		r = open_run_log(run);
		if (r < 0) {
			api_error_set(err, r, 500, API_E_RUNTIME, "cannot create the run log: %s", strerror(-r));
			goto fail;
		}
	}
	argv = build_argv(s, rq, timeout);
	envp = run_environ(rq);
	if (!argv || !envp) {
		r = api_error_set(err, -ENOMEM, 500, API_E_RUNTIME, "out of memory");
		goto fail;
	}
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(js, O_CLOEXEC) < 0 ||
	    (run->stream_stderr && pipe2(errp, O_CLOEXEC) < 0)) {
		r = api_error_set(err, -errno, 500, API_E_RUNTIME, "cannot create pipes: %m");
		goto fail_pipes;
	}
	/* fd 3 in the launcher is the JSON result pipe (--json-fd 3) */
	api_mount_gate_setup_begin();
	run->in_setup = true;
	r = api_spawn_full((const char *const *)argv, envp, in[0], out[1], run->stream_stderr ? errp[1] : out[1], js[1],
			   true, &run->pid);
	if (r < 0) {
		setup_done(run);
		api_error_set(err, r, 503, API_E_UNAVAILABLE, "cannot start draftbox-run: %s", strerror(-r));
		goto fail_pipes;
	}
	close(in[0]);
	close(out[1]);
	close(js[1]);
	safe_close(errp[1]);
	run->in_fd = in[1];
	run->out_fd = out[0];
	run->err_fd = errp[0];
	run->json_fd = js[0];
	set_nonblock(run->in_fd);
	set_nonblock(run->out_fd);
	set_nonblock(run->json_fd);
	if (run->err_fd >= 0)
		set_nonblock(run->err_fd);
	run->started_at = api_now_ms();
	run->start_mono = api_mono_ms();
	if (timeout)
		run->deadline_mono = run->start_mono + (uint64_t)timeout * 1000 + 15000; /* backstop after the launcher's own */
	pidfile_write(run);
	if (rq->background) {
		struct api_run *old = NULL;

		pthread_mutex_lock(&s->lock);
		run->next = s->runs;
		s->runs = api_run_ref(run);
		if (++s->n_runs > MAX_KEPT_RUNS) {
			struct api_run **pp = &s->runs;

			/* drop the oldest finished run */
			for (struct api_run **q = &s->runs; *q; q = &(*q)->next)
				if (!(*q)->running)
					pp = q;
			if (*pp && !(*pp)->running) {
				old = *pp;
				*pp = old->next;
				old->next = NULL;
				s->n_runs--;
			}
		}
		pthread_mutex_unlock(&s->lock);
		if (old)
			remove_run_log(old);
		api_run_unref(old);
	}
	log_debug("session %s: run %s started (pid %d%s)", s->id, run->id, (int)run->pid,
		  rq->background ? ", background" : "");
	*ret = run;
	return 0;

fail_pipes:
	for (int i = 0; i < 2; i++) {
		safe_close(in[i]);
		safe_close(out[i]);
		safe_close(errp[i]);
		safe_close(js[i]);
	}
fail:
	session_release(s, run);
	api_run_unref(run);
	return r;
}

void api_run_cancel(struct api_run *run)
{
	pid_t pid = __atomic_load_n(&run->pid, __ATOMIC_ACQUIRE);
	uint64_t now = api_mono_ms();

	uint64_t zero = 0, began;

	if (pid <= 0)
		return;
	/* called from the run's own thread and from delete/shutdown: the first caller starts the cancel */
	if (__atomic_compare_exchange_n(&run->cancel_mono, &zero, now, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&run->cancelled, true, __ATOMIC_RELEASE);
		kill(pid, SIGTERM); /* draftbox-run stops the whole tree (SIGINT, SIGTERM, SIGKILL) */
		return;
	}
	began = __atomic_load_n(&run->cancel_mono, __ATOMIC_ACQUIRE);
	if (now - began > CANCEL_KILL_MS) {
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
	}
}

/* ------------------------------------------------------------------ pump */

typedef int (*output_fn)(void *userdata, bool is_stderr, const char *data, size_t size, bool flush);

/* Parses the launcher's JSON result into the run. */
static void apply_result(struct api_run *run, const char *json, size_t len, int status)
{
	_cleanup_json_ cJSON *o = NULL;
	int64_t v;
	bool b;

	/* the exit status of draftbox-run is the command's (124: timeout, 125: launcher failure) */
	if (WIFEXITED(status))
		run->exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		run->exit_code = 128 + WTERMSIG(status);
	if (len > 0) {
		o = cJSON_ParseWithLength(json, len);
		if (o) {
			if (json_get_bool(o, "timed_out", &b) == 0 && b)
				run->timed_out = true;
			if (json_get_bool(o, "cancelled", &b) == 0 && b)
				run->cancelled = true;
			if (json_get_int64(o, "exit_code", 0, 255, &v) == 0 && !run->timed_out)
				run->exit_code = (int)v;
		}
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 125 && !o) {
		free(run->error);
		run->error = strdup("the sandbox could not be started (draftbox-run exit status 125)");
		run->failed_to_start = true;
	}
}

static void drain_json(struct api_run *run, struct run_proc *p)
{
	while (run->json_fd >= 0) {
		ssize_t n = read(run->json_fd, p->json + p->json_len, sizeof(p->json) - 1 - p->json_len);

		if (n > 0) {
			p->json_len += (size_t)n;
			if (p->json_len >= sizeof(p->json) - 1)
				run->json_fd = safe_close(run->json_fd);
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			run->json_fd = safe_close(run->json_fd);
		break;
	}
}

/*
 * Reads what is available on one output fd, at most about @max bytes, so
 * a command that writes without pause cannot keep a step from returning
 * (and its frames from being sent, and a hangup from being seen); closes
 * the fd at EOF. Returns 0 or -errno from @out.
 */
static int drain_output(struct api_run *run, int *fd, bool is_stderr, size_t max, output_fn out, void *userdata)
{
	char buf[16384];
	size_t got = 0;

	while (*fd >= 0 && got < max) {
		ssize_t n = read(*fd, buf, sizeof(buf));
		int r;

		if (n > 0) {
			got += (size_t)n;
			r = out(userdata, is_stderr, buf, (size_t)n, false);
			if (r < 0)
				return r;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		*fd = safe_close(*fd);
		return out(userdata, is_stderr, NULL, 0, true);
	}
	return 0;
}

/*
 * One step: waits up to @timeout_ms for output, the code pipe, the
 * launcher's exit or (foreground) a hangup on @client_fd. Returns 0 to be
 * called again, 1 when the run ended (reaped, result applied), -ECONNRESET
 * when the client went away, or -errno.
 */
static int pump_step(struct api_run *run, struct run_proc *p, int client_fd, int timeout_ms, output_fn out,
		     void *userdata)
{
	struct pollfd pfd[6];
	int idx_in = -1, idx_out = -1, idx_err = -1, idx_json = -1, idx_pid = -1, idx_client = -1;
	nfds_t n = 0;
	uint64_t now = api_mono_ms();
	int r, status;

	if (run->in_setup && now - run->start_mono > SETUP_GATE_MS)
		setup_done(run);
	if (run->deadline_mono && now > run->deadline_mono && !__atomic_load_n(&run->cancel_mono, __ATOMIC_ACQUIRE)) {
		log_warning("session %s: run %s outlived its timeout, stopping it", run->s->id, run->id);
		run->timed_out = true;
		api_run_cancel(run);
	}
	if (__atomic_load_n(&run->cancel_mono, __ATOMIC_ACQUIRE))
		api_run_cancel(run); /* escalates when overdue */

	if (run->in_fd >= 0 && run->code_off < run->code_len)
		idx_in = (int)n, pfd[n++] = (struct pollfd){ .fd = run->in_fd, .events = POLLOUT };
	if (run->out_fd >= 0)
		idx_out = (int)n, pfd[n++] = (struct pollfd){ .fd = run->out_fd, .events = POLLIN };
	if (run->err_fd >= 0)
		idx_err = (int)n, pfd[n++] = (struct pollfd){ .fd = run->err_fd, .events = POLLIN };
	if (run->json_fd >= 0)
		idx_json = (int)n, pfd[n++] = (struct pollfd){ .fd = run->json_fd, .events = POLLIN };
	if (p->pidfd >= 0 && !p->exited)
		idx_pid = (int)n, pfd[n++] = (struct pollfd){ .fd = p->pidfd, .events = POLLIN };
	if (client_fd >= 0)
		idx_client = (int)n, pfd[n++] = (struct pollfd){ .fd = client_fd, .events = POLLRDHUP };

	r = poll(pfd, n, __atomic_load_n(&run->cancel_mono, __ATOMIC_ACQUIRE) || run->in_setup ? MIN(timeout_ms, 200) : timeout_ms);
	if (r < 0 && errno != EINTR)
		return -errno;
	if (r <= 0)
		goto check_exit;

	if (idx_client >= 0 && (pfd[idx_client].revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return -ECONNRESET;
	if (idx_in >= 0 && pfd[idx_in].revents) {
		ssize_t w = write(run->in_fd, run->code + run->code_off, run->code_len - run->code_off);

		if (w > 0)
			run->code_off += (size_t)w;
		else if (w < 0 && errno != EAGAIN && errno != EINTR)
			run->code_off = run->code_len; /* bash is gone: stop feeding */
		if (run->code_off >= run->code_len)
			run->in_fd = safe_close(run->in_fd); /* EOF: bash ends after the last line */
	}
	if ((idx_out >= 0 && pfd[idx_out].revents) || (idx_err >= 0 && pfd[idx_err].revents))
		setup_done(run); /* the command runs: bwrap is done with the mount table */
	if (idx_out >= 0 && pfd[idx_out].revents) {
		r = drain_output(run, &run->out_fd, false, STEP_OUTPUT_MAX, out, userdata);
		if (r < 0)
			return r;
	}
	if (idx_err >= 0 && pfd[idx_err].revents) {
		r = drain_output(run, &run->err_fd, true, STEP_OUTPUT_MAX, out, userdata);
		if (r < 0)
			return r;
	}
	if (idx_json >= 0 && pfd[idx_json].revents)
		drain_json(run, p);
	if (idx_pid >= 0 && pfd[idx_pid].revents)
		p->exited = true;

check_exit:
	if (p->pidfd < 0 && !p->exited) {
		/* no pidfd: poll the child */
		pid_t w = waitpid(run->pid, &status, WNOHANG);

		if (w == run->pid) {
			p->exited = true;
			goto reaped;
		}
	}
	if (!p->exited)
		return 0;
	setup_done(run);
	/* the launcher is gone and its sandbox with it: take what is left in the pipes, then reap it */
	r = drain_output(run, &run->out_fd, false, SIZE_MAX, out, userdata);
	if (r < 0)
		return r;
	r = drain_output(run, &run->err_fd, true, SIZE_MAX, out, userdata);
	if (r < 0)
		return r;
	drain_json(run, p);
	if (api_wait_pid(run->pid, -1, &status) < 0)
		status = 0xff00;
reaped:
	setup_done(run);
	__atomic_store_n(&run->pid, 0, __ATOMIC_RELEASE);
	run->in_fd = safe_close(run->in_fd);
	if (run->out_fd >= 0)
		(void)out(userdata, false, NULL, 0, true);
	if (run->err_fd >= 0)
		(void)out(userdata, true, NULL, 0, true);
	run->out_fd = safe_close(run->out_fd);
	run->err_fd = safe_close(run->err_fd);
	run->json_fd = safe_close(run->json_fd);
	apply_result(run, p->json, p->json_len, status);
	return 1;
}

/* Bookkeeping once a run ended: metrics, session free again, activity recorded. */
static void run_finished(struct api_run *run)
{
	struct api_metrics *m = &run->s->srv->metrics;
	uint64_t elapsed = api_mono_ms() - run->start_mono;

	run->finished_at = api_now_ms();
	if (run->timed_out)
		api_metric_inc(m->runs_timeout);
	else if (run->cancelled)
		api_metric_inc(m->runs_cancelled);
	else if (run->exit_code == 0 && !run->error)
		api_metric_inc(m->runs_ok);
	else
		api_metric_inc(m->runs_failed);
	api_metrics_observe_run(m, elapsed);
	pidfile_remove(run);
	log_debug("session %s: run %s ended (exit %d%s%s) after %lu ms", run->s->id, run->id, run->exit_code,
		  run->timed_out ? ", timed out" : "", run->cancelled ? ", cancelled" : "", (unsigned long)elapsed);
	session_release(run->s, run);
	api_session_touch(run->s);
}

/* Blocks until a run that lost its consumer is stopped and reaped. */
static void run_stop_and_reap(struct api_run *run, struct run_proc *p, output_fn out, void *userdata)
{
	api_run_cancel(run);
	while (pump_step(run, p, -1, 500, out, userdata) == 0)
		;
}

static int open_pidfd(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* ------------------------------------------------------------------ SSE */

struct sse {
	struct api_run *run;
	struct run_proc proc;
	int client_fd;
	struct api_frames frames;
	size_t off; /* sent of frames */
	bool done, finished;
};

static int emit_line(void *userdata, const char *text, size_t len);

struct emit_ctx {
	struct sse *sse;
	bool is_stderr;
};

static int emit_line(void *userdata, const char *text, size_t len)
{
	struct emit_ctx *c = userdata;

	if (len == 0)
		return 0; /* OpenSandbox does not send empty lines either */
	return api_frame_output(&c->sse->frames, c->is_stderr, text, len, api_now_ms());
}

static int sse_output(void *userdata, bool is_stderr, const char *data, size_t size, bool flush)
{
	struct sse *sse = userdata;
	struct emit_ctx c = { sse, is_stderr };
	int i = is_stderr ? 1 : 0;

	return api_lines_feed(&sse->run->line[i], &sse->run->line_len[i], data ? data : "", size, flush,
			      LINE_MAX_BYTES, emit_line, &c);
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sse *sse = cls;
	size_t n;

	while (sse->off == sse->frames.len) {
		int r;

		sse->off = sse->frames.len = 0;
		if (sse->done)
			return MHD_CONTENT_READER_END_OF_STREAM;
		r = pump_step(sse->run, &sse->proc, sse->client_fd, 1000, sse_output, sse);
		if (r == -ECONNRESET) {
			log_info("session %s: client of run %s went away, cancelling it", sse->run->s->id, sse->run->id);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (r < 0) {
			log_warning_errno(r, "session %s: run %s failed", sse->run->s->id, sse->run->id);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (r == 1) {
			struct api_run *run = sse->run;

			sse->finished = true;
			run_finished(run);
			if (api_frame_final(&sse->frames, run->exit_code, run->timed_out, run->cancelled, run->error,
					    api_now_ms(), run->finished_at - run->started_at) < 0)
				return MHD_CONTENT_READER_END_WITH_ERROR;
			sse->done = true;
		}
	}
	n = MIN(max, sse->frames.len - sse->off);
	memcpy(buf, sse->frames.buf + sse->off, n);
	sse->off += n;
	return (ssize_t)n;
}

static int discard_output(void *userdata, bool is_stderr, const char *data, size_t size, bool flush)
{
	return 0;
}

static void sse_free(void *cls)
{
	struct sse *sse = cls;

	if (!sse->finished) {
		/* the client left, or MHD gave up: the run must not outlive its stream */
		run_stop_and_reap(sse->run, &sse->proc, discard_output, NULL);
		run_finished(sse->run);
	}
	safe_close(sse->proc.pidfd);
	api_run_unref(sse->run);
	api_frames_done(&sse->frames);
	free(sse);
}

struct MHD_Response *api_run_sse_response(struct api_run *run, int client_fd)
{
	struct MHD_Response *resp;
	struct sse *sse = calloc(1, sizeof(*sse));

	if (!sse) {
		struct run_proc p = { .pidfd = open_pidfd(run->pid) };

		run_stop_and_reap(run, &p, discard_output, NULL);
		run_finished(run);
		safe_close(p.pidfd);
		api_run_unref(run);
		return NULL;
	}
	sse->run = run;
	sse->client_fd = client_fd;
	sse->proc.pidfd = open_pidfd(run->pid);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, sse, sse_free);
	if (!resp) {
		sse_free(sse);
		return NULL;
	}
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return resp;
}

/* ------------------------------------------------------------------ background */

static int log_output(void *userdata, bool is_stderr, const char *data, size_t size, bool flush)
{
	struct api_run *run = userdata;
	uint64_t max = run->s->srv->cfg->max_run_log;

	if (!data || size == 0 || run->log_fd < 0)
		return 0;
	if (max && run->log_size + size > max) {
		if (!run->log_truncated) {
			static const char note[] = "\n[draftbox: log truncated]\n";

			run->log_truncated = true;
			if (write_full(run->log_fd, note, sizeof(note) - 1) == 0)
				__atomic_add_fetch(&run->log_size, sizeof(note) - 1, __ATOMIC_RELEASE);
		}
		return 0;
	}
	if (write_full(run->log_fd, data, size) == 0)
		__atomic_add_fetch(&run->log_size, size, __ATOMIC_RELEASE);
	return 0;
}

static void *background_main(void *arg)
{
	struct api_run *run = arg;
	struct run_proc p = { .pidfd = open_pidfd(run->pid) };
	int r;

	while ((r = pump_step(run, &p, -1, 1000, log_output, run)) == 0)
		;
	if (r < 0) {
		run_stop_and_reap(run, &p, discard_output, NULL);
		free(run->error);
		run->error = strdup(strerror(-r));
	}
	safe_close(p.pidfd);
	pthread_mutex_lock(&run->s->lock);
	if (run->cancelled && !run->error)
		run->error = strdup(run->s->deleted ? "session terminated" : "run cancelled");
	pthread_mutex_unlock(&run->s->lock);
	run_finished(run);
	api_run_unref(run);
	return NULL;
}

int api_run_detach(struct api_run *run)
{
	pthread_attr_t attr;
	pthread_t t;
	int r;

	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &attr, background_main, run);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		struct run_proc p = { .pidfd = open_pidfd(run->pid) };

		run_stop_and_reap(run, &p, discard_output, NULL);
		run_finished(run);
		safe_close(p.pidfd);
		api_run_unref(run);
		return -r;
	}
	return 0;
}

struct api_run *api_run_find(struct api_session *s, const char *run_id)
{
	struct api_run *found = NULL;

	pthread_mutex_lock(&s->lock);
	for (struct api_run *r = s->runs; r; r = r->next)
		if (strcmp(r->id, run_id) == 0) {
			found = api_run_ref(r);
			break;
		}
	pthread_mutex_unlock(&s->lock);
	return found;
}

cJSON *api_run_status_json(struct api_run *run)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	char t[40];
	bool running;
	int exit_code;
	const char *error;

	if (!o)
		return NULL;
	pthread_mutex_lock(&run->s->lock);
	running = run->running;
	exit_code = run->exit_code;
	error = run->error;
	if (!cJSON_AddStringToObject(o, "session_id", run->s->id) || !cJSON_AddStringToObject(o, "run_id", run->id) ||
	    !cJSON_AddBoolToObject(o, "running", running) ||
	    !cJSON_AddStringToObject(o, "started_at", api_format_time(run->started_at, t, sizeof(t))))
		goto oom;
	if (!running) {
		if ((exit_code >= 0 && !cJSON_AddNumberToObject(o, "exit_code", exit_code)) ||
		    !cJSON_AddStringToObject(o, "finished_at", api_format_time(run->finished_at, t, sizeof(t))))
			goto oom;
		if (error && !cJSON_AddStringToObject(o, "error", error))
			goto oom;
		if (run->timed_out && !cJSON_AddBoolToObject(o, "timed_out", true))
			goto oom;
	}
	pthread_mutex_unlock(&run->s->lock);
	return TAKE_PTR(o);
oom:
	pthread_mutex_unlock(&run->s->lock);
	return NULL;
}
