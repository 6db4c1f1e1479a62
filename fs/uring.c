// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * FUSE over io_uring (Linux 6.14+, with the fuse module's enable_uring=Y):
 * requests reach the daemon through one queue per possible CPU instead of
 * read() on /dev/fuse. A request is queued on the queue of the CPU its
 * caller runs on, and that queue's threads are pinned to that CPU, so the
 * caller and the thread serving it hand over on one CPU. On a VM, where
 * waking a thread on an idle vCPU costs tens of microseconds, that is most
 * of the cost of a round trip (docs/performance.md). Each reply and the
 * fetch of the next request are one io_uring_enter() call.
 *
 * libfuse 3.14 knows nothing of it, so this file does the transport and
 * hands each request to libfuse's own dispatcher (fuse_session_process_buf),
 * with every handler unchanged:
 *   - INIT still arrives on /dev/fuse. While handling it (ovl_uring_init)
 *     the threads are started; each pins itself, creates its ring and maps
 *     its buffers. Only if all of them succeed does the reply ask for
 *     FUSE_OVER_IO_URING (devio.c), because from then on the kernel holds
 *     every request until each queue has an entry. Once the reply is out,
 *     the threads register their entries.
 *   - Each thread owns one ring with one entry: a header buffer (the
 *     fuse_in_header and the opcode's fixed argument struct, or on reply the
 *     fuse_out_header) and a payload buffer (names, write data; on reply
 *     the reply body). The request is rebuilt contiguously just before the
 *     payload, so write data is never copied. Several threads per queue
 *     keep a slow request (a copy-up, a writer held by a live commit) from
 *     stalling its CPU's other requests.
 *   - The handler replies on the thread that serves the request, through
 *     the session's writev hook, which gives the reply to this thread's
 *     entry (ovl_uring_take_reply) when its unique matches; the thread
 *     then commits it and fetches the next request in one submission.
 *     Notifications (unique 0) and replies to requests that came on
 *     /dev/fuse still go to the device.
 *   - FORGET and INTERRUPT keep coming on /dev/fuse, so libfuse's loop
 *     keeps running beside the rings.
 *   - The kernel ends every entry with -ENOTCONN when the connection goes
 *     (unmount, abort); ovl_uring_stop() also wakes the threads through an
 *     eventfd each ring polls, and joins them.
 * Splice replies are turned off when the rings are in use (a reply must
 * land in the entry's buffer, not in /dev/fuse).
 *
 * Lock order: uring.lock is a leaf; the serving path takes no lock of its own.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "ops.h"
#include "ovl.h"

/* Kernel ABI 7.42 (Linux 6.14), absent from the 6.1 uapi headers Debian 12 ships. */
#define U_FUSE_OVER_IO_URING (1ULL << 41)
#define U_CMD_REGISTER 1
#define U_CMD_COMMIT_AND_FETCH 2
#define U_IN_OUT_SZ 128
#define U_OP_IN_SZ 128

struct u_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;  /* the request's unique */
	uint32_t payload_sz; /* bytes used in the payload buffer, either way */
	uint32_t padding;
	uint64_t reserved;
};

struct u_req_header {
	char in_out[U_IN_OUT_SZ]; /* fuse_in_header, or fuse_out_header on reply */
	char op_in[U_OP_IN_SZ];   /* the opcode's fixed argument struct */
	struct u_ent_in_out ent;
};

struct u_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

_Static_assert(sizeof(struct u_req_header) == 288, "fuse_uring_req_header layout");
_Static_assert(sizeof(struct u_cmd_req) == 24, "fuse_uring_cmd_req layout");

/* Payload buffer of an entry: the largest request or reply (max_write and max_pages are 1 MiB, ops-file.c). */
#define U_PAYLOAD (1024 * 1024)
/* Room before the payload to rebuild the request contiguously (in header + op struct); keeps the payload aligned. */
#define U_HEADROOM 4096
#define U_RING_DEPTH 4
#define U_TAG_ENTRY 1
#define U_TAG_STOP 2

struct uring_thread {
	pthread_t tid;
	pid_t os_tid;
	bool started;
	bool ring_ok;
	uint16_t qid;
	struct io_uring ring;
	char *area;                 /* mmap: header at 0, payload at U_HEADROOM */
	struct u_req_header *hdr;
	char *payload;
	struct iovec iov[2];        /* registered with the kernel */
	uint64_t unique;            /* the request being served */
	bool replied;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct uring_thread *t;
	unsigned n, nq, per_q;
	unsigned n_reported;
	int err;                  /* first setup error */
	bool go, stop;
	int stop_efd;
	int dev_fd;
	struct fuse_session *se;
	atomic_bool registered;   /* the INIT reply asked for io_uring and the threads registered */
	atomic_bool refused;      /* the kernel refused an entry: requests stay on /dev/fuse */
	_Atomic uint64_t served;  /* requests served over the rings */
} U = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.stop_efd = -1,
	.dev_fd = -1,
};

static __thread struct uring_thread *cur;

/* Number of possible CPUs, the kernel's queue count (num_possible_cpus()). */
static unsigned possible_cpus(void)
{
	_cleanup_fclose_ FILE *f = fopen("/sys/devices/system/cpu/possible", "re");
	unsigned n = 0, a, b;
	char sep;

	if (f) {
		while (fscanf(f, "%u", &a) == 1) {
			b = a;
			if (fscanf(f, "%c", &sep) == 1 && sep == '-') {
				if (fscanf(f, "%u", &b) != 1)
					break;
				if (fscanf(f, "%c", &sep) != 1)
					sep = '\n';
			}
			if (b >= a)
				n += b - a + 1;
			if (sep != ',')
				break;
		}
	}
	if (n == 0) {
		int c = get_nprocs_conf();

		n = c > 0 ? (unsigned)c : 1;
	}
	return n;
}

bool ovl_uring_available(char *why, size_t whylen)
{
	_cleanup_fclose_ FILE *f = fopen("/sys/module/fuse/parameters/enable_uring", "re");
	struct io_uring_params p = { .flags = IORING_SETUP_SQE128 };
	struct io_uring ring;
	int c, r;

	if (!f) {
		snprintf(why, whylen, "this kernel has no FUSE over io_uring (no /sys/module/fuse/parameters/enable_uring)");
		return false;
	}
	c = fgetc(f);
	if (c != 'Y' && c != 'y' && c != '1') {
		snprintf(why, whylen,
			 "FUSE over io_uring is off in this kernel (echo Y > /sys/module/fuse/parameters/enable_uring)");
		return false;
	}
	r = io_uring_queue_init_params(U_RING_DEPTH, &ring, &p);
	if (r < 0) {
		snprintf(why, whylen, "cannot create an io_uring: %s", strerror(-r));
		return false;
	}
	io_uring_queue_exit(&ring);
	return true;
}

static void pin_to(uint16_t cpu)
{
	cpu_set_t allowed, one;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0 || !CPU_ISSET(cpu, &allowed))
		return; /* not ours to run on (cpuset, offline): serve it from wherever we run */
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	(void)pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
}

static int ring_setup(struct uring_thread *t)
{
	struct io_uring_params p = {
		/* Task work (a request being handed to us) runs only when we wait: no interruption mid-request. */
		.flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
	};
	int r;

	pin_to(t->qid);
	r = io_uring_queue_init_params(U_RING_DEPTH, &t->ring, &p);
	if (r == -EINVAL) { /* before Linux 6.1 */
		p = (struct io_uring_params){ .flags = IORING_SETUP_SQE128 };
		r = io_uring_queue_init_params(U_RING_DEPTH, &t->ring, &p);
	}
	if (r < 0)
		return r;
	t->ring_ok = true;
	t->area = mmap(NULL, U_HEADROOM + U_PAYLOAD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t->area == MAP_FAILED) {
		t->area = NULL;
		return -errno;
	}
	t->hdr = (struct u_req_header *)t->area;
	t->payload = t->area + U_HEADROOM;
	t->iov[0] = (struct iovec){ t->hdr, sizeof(*t->hdr) };
	t->iov[1] = (struct iovec){ t->payload, U_PAYLOAD };
	return 0;
}

static void ring_teardown(struct uring_thread *t)
{
	if (t->ring_ok)
		io_uring_queue_exit(&t->ring);
	t->ring_ok = false;
	if (t->area)
		(void)munmap(t->area, U_HEADROOM + U_PAYLOAD);
	t->area = NULL;
}

static void prep_cmd(struct uring_thread *t, uint32_t op)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
	struct u_cmd_req *c;

	/* Never full: one entry command and one poll at most, in a ring of U_RING_DEPTH. */
	if (!sqe)
		abort();
	memset(sqe, 0, 2 * sizeof(*sqe)); /* an SQE128 slot */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = U.dev_fd;
	sqe->cmd_op = op;
	sqe->user_data = U_TAG_ENTRY;
	if (op == U_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)t->iov;
		sqe->len = ARRAY_SIZE(t->iov);
	}
	c = (struct u_cmd_req *)sqe->cmd;
	c->qid = t->qid;
	c->commit_id = op == U_CMD_COMMIT_AND_FETCH ? t->unique : 0;
}

static void reply_err(struct uring_thread *t, int err)
{
	struct fuse_out_header oh = { .len = sizeof(oh), .error = -err, .unique = t->unique };

	memcpy(t->hdr->in_out, &oh, sizeof(oh));
	t->hdr->ent.payload_sz = 0;
	t->replied = true;
}

/* Hands the request in @t's entry to libfuse; the handler's reply lands in the entry (ovl_uring_take_reply). */
static void serve_one(struct uring_thread *t)
{
	struct fuse_in_header in;
	uint32_t psz = t->hdr->ent.payload_sz;
	_cleanup_free_ char *bounce = NULL;
	struct fuse_buf fb = { 0 };
	size_t op_sz;
	char *start;

	memcpy(&in, t->hdr->in_out, sizeof(in));
	t->unique = t->hdr->ent.commit_id;
	t->replied = false;
	if (in.len < sizeof(in) || psz > U_PAYLOAD || in.len - sizeof(in) < psz ||
	    in.len - sizeof(in) - psz > U_OP_IN_SZ || in.unique != t->unique) {
		reply_err(t, EIO);
		return;
	}
	op_sz = in.len - sizeof(in) - psz;
	start = t->payload - op_sz - sizeof(in);
	if (_unlikely_((uintptr_t)start % 8)) {
		/* Every fixed argument struct is a multiple of 8 bytes; keep libfuse's reads aligned regardless. */
		bounce = malloc(in.len);
		if (!bounce) {
			reply_err(t, ENOMEM);
			return;
		}
		memcpy(bounce + sizeof(in) + op_sz, t->payload, psz);
		start = bounce;
	}
	memcpy(start, &in, sizeof(in));
	memcpy(start + sizeof(in), t->hdr->op_in, op_sz);
	fb.mem = start;
	fb.size = in.len;

	cur = t;
	fuse_session_process_buf(U.se, &fb);
	cur = NULL;
	atomic_fetch_add_explicit(&U.served, 1, memory_order_relaxed);
	ovl_ring_sched_note();
	if (!t->replied) {
		/* Every opcode the kernel sends on a queue is answered by its handler; never leave an entry hanging. */
		log_error("io_uring queue %u: no reply to request %llu (opcode %u)", t->qid,
			  (unsigned long long)in.unique, in.opcode);
		reply_err(t, EIO);
	}
}

static void serve_loop(struct uring_thread *t)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
	struct io_uring_cqe *cqe;

	if (!sqe)
		abort();
	io_uring_prep_poll_add(sqe, U.stop_efd, POLLIN);
	sqe->user_data = U_TAG_STOP;
	prep_cmd(t, U_CMD_REGISTER);
	for (;;) {
		int r = io_uring_submit_and_wait(&t->ring, 1);

		if (r < 0) {
			if (r == -EINTR)
				continue;
			log_error_errno(r, "io_uring queue %u: cannot submit", t->qid);
			return;
		}
		while (io_uring_peek_cqe(&t->ring, &cqe) == 0) {
			uint64_t tag = cqe->user_data;
			int res = cqe->res;

			io_uring_cqe_seen(&t->ring, cqe);
			if (tag == U_TAG_STOP)
				return;
			if (res < 0) {
				/* -ENOTCONN: the connection ended. Anything else: the kernel refused the entry. */
				if (res != -ENOTCONN && res != -ECANCELED && !atomic_exchange(&U.refused, true))
					log_info("io_uring: the kernel refused queue %u (%s), requests go through /dev/fuse",
						 t->qid, strerror(-res));
				return;
			}
			serve_one(t);
			prep_cmd(t, U_CMD_COMMIT_AND_FETCH);
		}
	}
}

static void *ring_main(void *arg)
{
	struct uring_thread *t = arg;
	char name[16];
	int r;
	bool run;

	t->os_tid = gettid();
	snprintf(name, sizeof(name), "draftfs-q%u", (unsigned)t->qid);
	(void)pthread_setname_np(pthread_self(), name);
	r = ring_setup(t);

	pthread_mutex_lock(&U.lock);
	if (r < 0 && !U.err)
		U.err = r;
	U.n_reported++;
	pthread_cond_broadcast(&U.cond);
	while (r >= 0 && !U.go && !U.stop)
		pthread_cond_wait(&U.cond, &U.lock);
	run = r >= 0 && U.go && !U.stop;
	pthread_mutex_unlock(&U.lock);
	if (run)
		serve_loop(t);
	ring_teardown(t);
	return NULL;
}

static void stop_threads(void)
{
	pthread_mutex_lock(&U.lock);
	U.stop = true;
	pthread_cond_broadcast(&U.cond);
	pthread_mutex_unlock(&U.lock);
	if (U.stop_efd >= 0)
		(void)eventfd_write(U.stop_efd, 1);
	for (unsigned i = 0; i < U.n; i++)
		if (U.t[i].started)
			pthread_join(U.t[i].tid, NULL);
	free(U.t);
	U.t = NULL;
	U.n = 0;
	U.stop_efd = safe_close(U.stop_efd);
}

/* Starts the threads and waits until each has its ring and buffers. Returns 0 or the first -errno. */
static int start_threads(unsigned threads)
{
	struct timespec deadline;
	unsigned started = 0;
	sigset_t all, old;
	int r = 0;

	U.nq = possible_cpus();
	if (U.nq > UINT16_MAX)
		return -EINVAL;
	U.per_q = MAX((threads + U.nq - 1) / U.nq, MIN(threads, 2u));
	U.n = U.nq * U.per_q;
	U.t = calloc(U.n, sizeof(*U.t));
	if (!U.t)
		return -ENOMEM;
	U.stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (U.stop_efd < 0)
		return -errno;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (unsigned i = 0; i < U.n && r == 0; i++) {
		U.t[i].qid = (uint16_t)(i / U.per_q);
		r = -pthread_create(&U.t[i].tid, NULL, ring_main, &U.t[i]);
		U.t[i].started = r == 0;
		started += U.t[i].started;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 10;
	pthread_mutex_lock(&U.lock);
	while (U.n_reported < started) {
		if (pthread_cond_timedwait(&U.cond, &U.lock, &deadline) == ETIMEDOUT) {
			if (!U.err)
				U.err = -ETIMEDOUT;
			break;
		}
	}
	if (r == 0)
		r = U.err;
	pthread_mutex_unlock(&U.lock);
	return r;
}

/* ring_sched=idle: hands the queue threads to the guard (fs/ring-sched.c); without it they stay SCHED_OTHER. */
static void sched_start(void)
{
	_cleanup_free_ pid_t *tids = calloc(U.n, sizeof(*tids));
	int r;

	if (!tids)
		return;
	for (unsigned i = 0; i < U.n; i++)
		tids[i] = U.t[i].os_tid;
	r = ovl_ring_sched_start(tids, U.n, &U.served);
	if (r < 0)
		log_info("ring_sched=idle: not available here (%s), the io_uring threads stay SCHED_OTHER", strerror(-r));
}

uint32_t ovl_uring_init_flags2(void)
{
	return (uint32_t)(U_FUSE_OVER_IO_URING >> 32);
}

void ovl_uring_init(struct fuse_conn_info *conn)
{
	const struct ovl_options *o = ovl_fs->opt;
	int r;

	if (o->uring == OVL_URING_OFF || U.t)
		return;
	if (!(ovl_devio_kernel_flags2() & ovl_uring_init_flags2())) {
		if (o->uring == OVL_URING_ON)
			log_error("uring=on: the kernel did not offer FUSE over io_uring, requests go through /dev/fuse");
		return;
	}
	U.se = ovl_fs->se;
	U.dev_fd = fuse_session_fd(ovl_fs->se);
	r = start_threads(o->threads);
	if (r < 0) {
		if (o->uring == OVL_URING_ON)
			log_error_errno(r, "uring=on: cannot set up the io_uring queues, requests go through /dev/fuse");
		else
			log_info("io_uring: cannot set up the queues (%s), requests go through /dev/fuse", strerror(-r));
		stop_threads();
		return;
	}
	/* A reply must land in the entry's buffer, never be spliced into /dev/fuse. */
	conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	ovl_devio_init_add(0, ovl_uring_init_flags2(), 0);
}

bool ovl_uring_fits(uint32_t max_write, uint16_t max_pages)
{
	/* The kernel refuses entries smaller than max(8 KiB, max_write, max_pages pages). */
	return max_write <= U_PAYLOAD && (size_t)max_pages * (size_t)sysconf(_SC_PAGESIZE) <= U_PAYLOAD;
}

void ovl_uring_init_sent(uint32_t flags2)
{
	if (!U.t)
		return;
	if (!(flags2 & ovl_uring_init_flags2())) {
		stop_threads(); /* not asked for after all: nothing was registered */
		return;
	}
	atomic_store(&U.registered, true);
	pthread_mutex_lock(&U.lock);
	U.go = true;
	pthread_cond_broadcast(&U.cond);
	pthread_mutex_unlock(&U.lock);
	if (ovl_fs->opt->ring_sched_idle)
		sched_start();
}

bool ovl_uring_take_reply(struct iovec *iov, int count, ssize_t *ret)
{
	struct uring_thread *t = cur;
	struct fuse_out_header oh;
	size_t total = 0;
	char *p;

	if (!t || count < 1 || iov[0].iov_len < sizeof(oh))
		return false;
	memcpy(&oh, iov[0].iov_base, sizeof(oh));
	if (oh.unique != t->unique || t->replied)
		return false; /* a notification, or a reply to a request that came on /dev/fuse */
	for (int i = 1; i < count; i++)
		total += iov[i].iov_len;
	if (total > U_PAYLOAD) {
		/* Larger than any request allows (the kernel sized the entry): fail the request instead. */
		oh.error = -EIO;
		total = 0;
	}
	p = t->payload;
	for (int i = 1; i < count && total; i++) {
		if (iov[i].iov_base != p)
			memmove(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
	oh.len = (uint32_t)(sizeof(oh) + total);
	memcpy(t->hdr->in_out, &oh, sizeof(oh));
	t->hdr->ent.payload_sz = (uint32_t)total;
	t->replied = true;
	*ret = (ssize_t)oh.len;
	return true;
}

void *ovl_uring_reply_buf(size_t size)
{
	struct uring_thread *t = cur;

	return t && !t->replied && size <= U_PAYLOAD ? t->payload : NULL;
}

void ovl_uring_stop(void)
{
	ovl_ring_sched_stop();
	if (U.t)
		stop_threads();
	atomic_store(&U.registered, false);
}

void ovl_uring_info(struct ovl_live_info *ret)
{
	bool active = atomic_load(&U.registered) && !atomic_load(&U.refused);

	ret->transport = active ? "io_uring" : "/dev/fuse";
	ret->queues = active ? U.nq : 0;
	ret->threads_per_queue = active ? U.per_q : 0;
	ret->ring_requests = atomic_load_explicit(&U.served, memory_order_relaxed);
	if (active)
		ovl_ring_sched_info(ret);
}
