// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Where a caller wakes up after its reply (ring_sched=idle, the default over
 * FUSE io_uring).
 *
 * A queue thread serves a request on the CPU its caller sleeps on
 * (fs/uring.c). When it replies, the scheduler of Linux 6.18 and before
 * sees that CPU busy (the thread that replied still runs) and wakes the
 * caller on an idle CPU instead, if there is one. On a VM that wake goes
 * through the hypervisor: untar of 10k files moved tar to the other vCPU
 * 60k times and took twice as long as with tar bound to one CPU. (A later
 * kernel change wakes the caller on the replying CPU itself.)
 *
 * The scheduler counts a CPU that runs only SCHED_IDLE tasks as free
 * (sched_idle_cpu()): it wakes the caller there, and the caller preempts
 * the thread. So while requests flow and the machine is calm, the queue
 * threads run as SCHED_IDLE, and so do the daemon's other threads (the
 * /dev/fuse workers left with FORGET and INTERRUPT, the control plane,
 * the fill and finalizer threads): a SCHED_OTHER one would win every CPU
 * it shares with a queue thread, and the FORGETs of rm -rf of 5k files
 * made it 2.5x slower that way. The price is starvation under load: a
 * SCHED_IDLE thread gets next to nothing of a CPU shared with a busy task
 * of its own scheduling group, and so does the request it serves (300
 * creates took 67 s instead of 0.3 s beside a busy loop in the daemon's
 * session). So a guard thread (SCHED_OTHER, not pinned) watches the queue
 * threads while they are SCHED_IDLE:
 *   - every GUARD_TICK it reads each one's /proc/self/task/TID/schedstat
 *     (time run, time waited for a CPU, times run). A thread starves in a
 *     tick if it is runnable yet ran not at all since the last tick, or if
 *     it waited more than STARVED_AVG_NS on average each time it got a
 *     CPU. A calm thread waits a few microseconds: the caller that woke it
 *     only has to go to sleep. When one thread starves STRIKES ticks in a
 *     row, all go back to SCHED_OTHER for a backoff (50 ms, doubling up
 *     to 8 s while it recurs), then try again;
 *   - when no request was served for QUIET_NS, the threads go back to
 *     SCHED_OTHER and the guard sleeps until a queue thread wakes it (the
 *     first request it serves afterwards). No queue thread is ever
 *     SCHED_IDLE without the guard awake.
 * Beside busy loops in the daemon's own session, 300 to 3000 creates then
 * take 1.1-1.5x as long as with ring_sched=normal (the starved ticks before
 * each backoff). A sandbox is its own session (bwrap --new-session): where
 * sessions are scheduling groups (autogroup, the default outside cgroups
 * with a cpu controller) its busy loops do not starve the threads at all.
 *
 * Only the guard changes the threads' policy, always with
 * SCHED_RESET_ON_FORK (a thread or child started meanwhile begins as
 * SCHED_OTHER, never inherits SCHED_IDLE). It
 * is off when the daemon may not return a thread from SCHED_IDLE (no
 * CAP_SYS_NICE, RLIMIT_NICE below 20: tried on a throwaway thread first),
 * or when the kernel keeps no run_delay.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "ops.h"
#include "ovl.h"

#define GUARD_TICK_NS (4 * 1000000LL)
#define STARVED_AVG_NS (200 * 1000LL)
/* Ticks in a row one thread starves in that send the threads back to SCHED_OTHER. */
#define STRIKES 2
#define QUIET_NS (50 * 1000000LL)
#define BACKOFF_MIN_NS (50 * 1000000LL)
#define BACKOFF_MAX_NS (8 * 1000 * 1000000LL)
/* Calm this long in a row: the next backoff starts from the minimum again. */
#define CALM_RESET_NS (30 * 1000 * 1000000LL)

enum { G_OFF, G_PARKED, G_WATCHING, G_BACKOFF };

struct watched {
	pid_t tid;
	int schedstat_fd;   /* /proc/self/task/TID/schedstat: time run, time waited to run */
	int stat_fd;        /* /proc/self/task/TID/stat: the state letter */
	uint64_t run, delay, slices; /* at the last tick */
	unsigned strikes;            /* ticks in a row it starved in */
};

static struct {
	pthread_t thread;
	bool started;
	unsigned n;
	struct watched *w;
	const _Atomic uint64_t *served;
	_Atomic int wake;           /* futex word: 1 = look again (a request after parking, or stop) */
	atomic_bool parked;
	atomic_bool stop;
	_Atomic int state;
	_Atomic uint64_t backoffs;
} G = {
	.state = G_OFF,
};

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int set_policy(pid_t tid, int policy)
{
	struct sched_param sp = { 0 };

	if (sched_setscheduler(tid, policy | SCHED_RESET_ON_FORK, &sp) < 0)
		return -errno;
	return 0;
}

/*
 * Sets @policy on every thread of the daemon but the guard, the queue
 * threads among them; on the queue threads alone if the task list cannot
 * be read.
 */
static void set_all(int policy)
{
	_cleanup_closedir_ DIR *d = opendir("/proc/self/task");
	pid_t self = gettid();
	struct dirent *de;

	if (!d) {
		for (unsigned i = 0; i < G.n; i++)
			(void)set_policy(G.w[i].tid, policy);
		return;
	}
	while ((de = readdir(d))) {
		pid_t tid = (pid_t)atoi(de->d_name);
		int r;

		if (tid <= 0 || tid == self)
			continue;
		r = set_policy(tid, policy);
		if (r < 0 && r != -ESRCH)
			log_debug_errno(r, "ring_sched: cannot set the policy of thread %d", (int)tid);
	}
}

/* Wakes the guard from its futex (a request after parking, or stop). */
static void poke(void)
{
	atomic_store(&G.wake, 1);
	(void)syscall(SYS_futex, &G.wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static ssize_t read_at0(int fd, char *buf, size_t size)
{
	ssize_t k = pread(fd, buf, size - 1, 0);

	if (k < 0)
		return -errno;
	buf[k] = '\0';
	return k;
}

/* A schedstat file: nanoseconds run, nanoseconds runnable but waiting for a CPU, times run. Returns 0 or -errno. */
static int read_schedstat(int fd, struct watched *ret)
{
	char buf[128];
	unsigned long long run, delay, slices;
	ssize_t k = read_at0(fd, buf, sizeof(buf));

	if (k < 0)
		return (int)k;
	if (sscanf(buf, "%llu %llu %llu", &run, &delay, &slices) != 3)
		return -EIO;
	ret->run = run;
	ret->delay = delay;
	ret->slices = slices;
	return 0;
}

/* True if the thread of a stat file is runnable (running, or waiting for a CPU). */
static bool runnable(int fd)
{
	char buf[512];
	const char *p;

	if (read_at0(fd, buf, sizeof(buf)) < 0)
		return false;
	p = strrchr(buf, ')'); /* the name may hold anything, the state follows its closing parenthesis */
	return p && p[1] == ' ' && p[2] == 'R';
}

/*
 * One tick: true if a queue thread starves. That is one still waiting:
 * runnable, yet it ran not at all since the last tick (a running thread's
 * time grows at least every scheduler tick, 4 ms at most); or one that,
 * since the last tick, waited on average more than STARVED_AVG_NS each
 * time before it got a CPU (run_delay grows when the wait ends). A calm
 * thread waits a few microseconds each time: the caller that woke it
 * still has to go to sleep.
 */
static bool tick_starved(void)
{
	bool starved = false;

	for (unsigned i = 0; i < G.n; i++) {
		struct watched *w = &G.w[i], now;
		bool s;

		if (read_schedstat(w->schedstat_fd, &now) < 0)
			continue;
		if (now.run == w->run)
			s = runnable(w->stat_fd);
		else
			s = now.slices > w->slices && now.delay > w->delay &&
			    (now.delay - w->delay) / (now.slices - w->slices) > (uint64_t)STARVED_AVG_NS;
		w->strikes = s ? w->strikes + 1 : 0;
		if (w->strikes >= STRIKES)
			starved = true;
		w->run = now.run;
		w->delay = now.delay;
		w->slices = now.slices;
	}
	return starved;
}

/* A fresh start for the watch: read every thread's figures, forget its strikes. */
static void reset_strikes(void)
{
	(void)tick_starved();
	for (unsigned i = 0; i < G.n; i++)
		G.w[i].strikes = 0;
}

static void guard_sleep(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };

	if (atomic_exchange(&G.wake, 0))
		return;
	(void)syscall(SYS_futex, &G.wake, FUTEX_WAIT_PRIVATE, 0, ns >= 0 ? &ts : NULL, NULL, 0);
}

static uint64_t served_now(void)
{
	return atomic_load_explicit(G.served, memory_order_relaxed);
}

static void *guard_main(void *arg)
{
	int64_t backoff = BACKOFF_MIN_NS, calm_since = mono_ns(), last_busy;
	uint64_t seen;

	(void)arg;
	(void)pthread_setname_np(pthread_self(), "draftfs-guard");
	while (!atomic_load(&G.stop)) {
		/* Parked: every queue thread SCHED_OTHER, until one serves a request. */
		atomic_store(&G.state, G_PARKED);
		seen = served_now();
		atomic_store(&G.parked, true);
		if (served_now() == seen)
			guard_sleep(-1);
		atomic_store(&G.parked, false);
		if (atomic_load(&G.stop))
			break;

		/* Watching: SCHED_IDLE while calm, until requests stop. */
		reset_strikes();
		set_all(SCHED_IDLE);
		atomic_store(&G.state, G_WATCHING);
		seen = served_now();
		last_busy = mono_ns();
		while (!atomic_load(&G.stop)) {
			int64_t now;
			uint64_t s;

			guard_sleep(GUARD_TICK_NS);
			now = mono_ns();
			if (tick_starved()) {
				set_all(SCHED_OTHER);
				atomic_store(&G.state, G_BACKOFF);
				atomic_fetch_add(&G.backoffs, 1);
				if (now - calm_since >= CALM_RESET_NS)
					backoff = BACKOFF_MIN_NS;
				log_debug("ring_sched: a queue thread starves, SCHED_OTHER for %lld ms", (long long)(backoff / 1000000));
				guard_sleep(backoff);
				backoff = MIN(backoff * 2, BACKOFF_MAX_NS);
				now = calm_since = mono_ns();
				if (atomic_load(&G.stop) || served_now() == seen)
					break; /* nothing served during the backoff: park */
				seen = served_now();
				last_busy = now;
				reset_strikes();
				set_all(SCHED_IDLE);
				atomic_store(&G.state, G_WATCHING);
				continue;
			}
			s = served_now();
			if (s != seen) {
				seen = s;
				last_busy = now;
			} else if (now - last_busy >= QUIET_NS) {
				break;
			}
		}
		set_all(SCHED_OTHER);
	}
	/* Every way out leaves the threads SCHED_OTHER: parked, after a backoff, or just set above. */
	atomic_store(&G.state, G_OFF);
	return NULL;
}

static void *probe_main(void *arg)
{
	int *ret = arg;

	*ret = set_policy(0, SCHED_IDLE);
	if (*ret == 0)
		*ret = set_policy(0, SCHED_OTHER);
	return NULL; /* if the way back failed, this thread ends here, still SCHED_IDLE: harmless */
}

/* Whether a thread of this daemon may go to SCHED_IDLE and come back. Returns 0 or -errno. */
static int probe(void)
{
	pthread_t t;
	int r = -EIO, k;

	k = pthread_create(&t, NULL, probe_main, &r);
	if (k != 0)
		return -k;
	pthread_join(t, NULL);
	return r;
}

static void release(void)
{
	for (unsigned i = 0; G.w && i < G.n; i++) {
		safe_close(G.w[i].schedstat_fd);
		safe_close(G.w[i].stat_fd);
	}
	free(G.w);
	G.w = NULL;
	G.n = 0;
}

static int open_task_file(pid_t tid, const char *name)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/%s", (int)tid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int ovl_ring_sched_start(const pid_t *tids, unsigned n, const _Atomic uint64_t *served)
{
	sigset_t all, old;
	int r;

	if (G.started || n == 0)
		return -EALREADY;
	r = probe();
	if (r < 0)
		return r;
	G.w = calloc(n, sizeof(*G.w));
	if (!G.w)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++)
		G.w[i] = (struct watched){ .tid = tids[i], .schedstat_fd = -1, .stat_fd = -1 };
	G.n = n;
	for (unsigned i = 0; i < n; i++) {
		struct watched *w = &G.w[i];

		/* No schedstat (a kernel without CONFIG_SCHED_INFO): nothing to guard with. */
		r = w->schedstat_fd = open_task_file(w->tid, "schedstat");
		if (r >= 0)
			r = w->stat_fd = open_task_file(w->tid, "stat");
		if (r >= 0)
			r = read_schedstat(w->schedstat_fd, w);
		if (r < 0) {
			release();
			return r;
		}
	}
	G.served = served;
	atomic_store(&G.stop, false);
	atomic_store(&G.wake, 0);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old); /* signals are for the session loop, as with the queue threads */
	r = -pthread_create(&G.thread, NULL, guard_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		release();
		return r;
	}
	G.started = true;
	atomic_store(&G.state, G_PARKED);
	return 0;
}

void ovl_ring_sched_note(void)
{
	if (_likely_(!atomic_load_explicit(&G.parked, memory_order_relaxed)))
		return;
	if (atomic_exchange(&G.parked, false))
		poke();
}

void ovl_ring_sched_stop(void)
{
	if (!G.started)
		return;
	atomic_store(&G.stop, true);
	poke();
	pthread_join(G.thread, NULL);
	G.started = false;
	release();
}

void ovl_ring_sched_info(struct ovl_live_info *ret)
{
	static const char *const names[] = { "off", "parked", "idle", "backoff" };
	int s = atomic_load(&G.state);

	ret->ring_sched = names[s];
	ret->ring_sched_backoffs = atomic_load(&G.backoffs);
}
