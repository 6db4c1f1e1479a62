/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The seccomp filter: an allowlist in the spirit of Docker's default
 * profile, with argument filters for clone, ioctl, socket and personality,
 * built with libseccomp and exported as BPF. bwrap loads it (--seccomp FD)
 * right before it execs the exec helper, so everything the sandbox runs is
 * filtered.
 *
 * Compiling costs milliseconds, so the exported program is cached per
 * (rules, profile, network, arch, libseccomp version) in a root-owned 0700
 * directory and verified (owner, mode, magic, key, checksum) before use.
 * Anything wrong with the cache means "compile again", never "run without".
 *
 * Built with LAUNCH_LITE (the musl draftbox-run, see meson.build) only the
 * cache half is here: a miss is -ENOPKG, and draftbox-run hands the run
 * to draftbox-run-full, which compiles and stores the program.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#ifndef LAUNCH_LITE
#include <linux/sched.h>
#include <seccomp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdpath.h"
#include "launch.h"
#include "macro.h"

/* Bump when the rule code below changes in a way the tables do not show. */
#define RULES_VERSION "draftbox-seccomp-4"


/* Allowed without conditions in both profiles. */
static const char *const allow_common[] = {
	"accept", "accept4", "access", "alarm", "arch_prctl", "bind", "brk", "cachestat",
	"capget", "capset", "chdir", "chown", "clock_getres", "clock_gettime",
	"clock_nanosleep", "close", "close_range", "connect", "copy_file_range", 
	"dup", "dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_pwait",
	"epoll_pwait2", "epoll_wait", "eventfd", "eventfd2", "execve", "execveat", "exit",
	"exit_group", "faccessat", "faccessat2", "fadvise64", "fallocate", "fchdir", 
	"fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr",
	"flistxattr", "flock", "fork", "fremovexattr", "fsetxattr", "fstat", "fstatfs", "fsync",
	"ftruncate", "futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake",
	"futimesat", "getcpu", "getcwd", "getdents", "getdents64", "getegid", "geteuid",
	"getgid", "getgroups", "getitimer", "getpeername", "getpgid", "getpgrp", "getpid",
	"getppid", "getpriority", "getrandom", "getresgid", "getresuid", "getrlimit",
	"get_robust_list", "getrusage", "getsid", "getsockname", "getsockopt", "gettid",
	"gettimeofday", "getuid", "getxattr", "inotify_add_watch", "inotify_init",
	"inotify_init1", "inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents",
	"io_pgetevents", "ioprio_get", "io_setup", "io_submit", "kill", "landlock_add_rule",
	"landlock_create_ruleset", "landlock_restrict_self", "lchown", "lgetxattr", "link",
	"linkat", "listen", "listxattr", "llistxattr", "lremovexattr", "lseek", "lsetxattr",
	"lstat", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "mincore",
	"mkdir", "mkdirat", "mlock", "mlock2", "mlockall", "mmap",
	"mprotect", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend",
	"mq_unlink", "mremap", "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock",
	"munlockall", "munmap", "nanosleep", "newfstatat", 
	"pause", "pidfd_open", "pidfd_send_signal", "pipe", "pipe2", "pkey_alloc", "pkey_free",
	"pkey_mprotect", "poll", "ppoll", "prctl", "pread64", "preadv", "preadv2", "prlimit64",
	"pselect6", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
	"readlinkat", "readv", "recvfrom", "recvmmsg", "recvmsg", "removexattr", "rename",
	"renameat", "renameat2", "restart_syscall", "rmdir", "rseq", "rt_sigaction",
	"rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
	"rt_sigtimedwait", "rt_tgsigqueueinfo", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_get_priority_max", "sched_get_priority_min",
	"sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity", "sched_setattr",
	"sched_setparam", "sched_setscheduler", "sched_yield", "seccomp", "select", "semctl",
	"semget", "semop", "semtimedop", "sendfile", "sendmmsg", "sendmsg", "sendto",
	"setfsgid", "setfsuid", "setgid", "setgroups", "setitimer", "setpgid", "setpriority",
	"setregid", "setresgid", "setresuid", "setreuid", "setrlimit", "set_robust_list",
	"setsid", "setsockopt", "set_tid_address", "setuid", "setxattr", "shmat", "shmctl",
	"shmdt", "shmget", "shutdown", "sigaltstack", "signalfd", "signalfd4", 
	"splice", "stat", "statfs", "statx", "symlink", "symlinkat", "sync", "sync_file_range",
	"syncfs", "sysinfo", "tee", "tgkill", "time", "timer_create", "timer_delete",
	"timer_getoverrun", "timer_gettime", "timer_settime", "timerfd_create",
	"timerfd_gettime", "timerfd_settime", "times", "tkill", "truncate", "umask", "uname",
	"unlink", "unlinkat", "utime", "utimensat", "utimes", "vfork", "vmsplice", "wait4",
	"waitid", "write", "writev",
	NULL
};

/* Allowed in balanced only (strict answers EPERM): rarely needed, larger surface. */
static const char *const allow_balanced[] = {
	"name_to_handle_at", "kcmp", "pidfd_getfd", "process_madvise", "mbind",
	"set_mempolicy", "get_mempolicy", "migrate_pages", "move_pages", "remap_file_pages",
	"ioprio_set", "fanotify_mark", "process_mrelease",
	NULL
};

#ifndef LAUNCH_LITE
DEFINE_TRIVIAL_CLEANUP_FUNC(scmp_filter_ctx, seccomp_release)

/* personality() values: strict allows PER_LINUX and the query. */
static const unsigned long personality_strict[] = { 0x0, 0xffffffff };
static const unsigned long personality_balanced[] = {
	0x0, 0xffffffff, PER_LINUX32, UNAME26, PER_LINUX32 | UNAME26,
	ADDR_NO_RANDOMIZE, PER_LINUX32 | ADDR_NO_RANDOMIZE,
};

#define CLONE_NS_FLAGS \
	(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP)

static int add_names(scmp_filter_ctx ctx, const char *const *names)
{
	for (; *names; names++) {
		int nr = seccomp_syscall_resolve_name(*names);
		int r;

		if (nr == __NR_SCMP_ERROR)
			continue; /* not on this arch or unknown to this libseccomp */
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
		if (r < 0)
			return r;
	}
	return 0;
}

static int build(scmp_filter_ctx ctx, enum launch_profile profile, bool share_net)
{
	const int domains[] = { AF_UNIX, AF_INET, AF_INET6 };
	const int types[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET };
	const unsigned long *pers;
	size_t n_pers;
	int r;

	r = add_names(ctx, allow_common);
	if (r < 0)
		return r;
	if (profile == LAUNCH_PROFILE_BALANCED) {
		r = add_names(ctx, allow_balanced);
		if (r < 0)
			return r;
	}

	/* clone only without namespace flags; clone3 hides its flags in memory, so ENOSYS (libc falls back) */
	r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NS_FLAGS, 0));
	if (r < 0)
		return r;
	r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (r < 0)
		return r;

	/*
	 * ioctl: everything except TIOCSTI (0x5412) and TIOCLINUX (0x541c). The
	 * kernel truncates the command to an unsigned int, and libseccomp's
	 * SCMP_A1_32 only truncates the datum (LT/GT still compare 64 bits, so
	 * 0x100005412 passed a "GT TIOCLINUX" rule). So only masked equality
	 * with masks inside the low 32 bits: a command is allowed if one of the
	 * bits outside 0xe differs from 0x5410 (the two denied numbers agree
	 * there), or it is one of the six others of the form 0x5410 | 0xe.
	 */
	{
		const uint32_t base = 0x5410, free_bits = 0xe;

		_Static_assert(TIOCSTI == 0x5412 && TIOCLINUX == 0x541c, "tty ioctl numbers");
		for (unsigned b = 0; b < 32; b++) {
			uint32_t bit = 1u << b;

			if (bit & free_bits)
				continue;
			r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
					     SCMP_A1(SCMP_CMP_MASKED_EQ, bit, (~base) & bit));
			if (r < 0)
				return r;
		}
		for (uint32_t v = base; v <= (base | free_bits); v += 2) {
			if (v == TIOCSTI || v == TIOCLINUX)
				continue;
			r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
					     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, v));
			if (r < 0)
				return r;
		}
	}

	/*
	 * No set-user/group-ID bits: in rw mode (and in exposed rw dirs, the home
	 * dir, balanced's host /tmp) a file the sandbox marks 04755 is a setuid
	 * program on the host, owned by the pool uid or, through the ID mapping,
	 * by the workspace owner, that any host user could run. A mode argument
	 * with S_ISUID or S_ISGID is EPERM (open/openat only when they create).
	 * openat2 hides its mode in memory: ENOSYS, and libc and tools fall back.
	 */
	{
		static const struct {
			const char *name;
			unsigned mode_arg, flags_arg; /* flags_arg 0: the mode always counts */
		} setid[] = {
			{ "chmod", 1, 0 },   { "fchmod", 1, 0 },  { "fchmodat", 2, 0 }, { "fchmodat2", 2, 0 },
			{ "creat", 1, 0 },   { "mknod", 1, 0 },   { "mknodat", 2, 0 },  { "open", 2, 1 },
			{ "openat", 3, 2 },
		};
		const uint64_t creating = O_CREAT | (O_TMPFILE & ~O_DIRECTORY);

		for (size_t i = 0; i < ARRAY_SIZE(setid); i++) {
			int nr = seccomp_syscall_resolve_name(setid[i].name);

			if (nr == __NR_SCMP_ERROR)
				continue;
			r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
					     SCMP_CMP(setid[i].mode_arg, SCMP_CMP_MASKED_EQ, S_ISUID | S_ISGID, 0));
			if (r >= 0 && setid[i].flags_arg)
				r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
						     SCMP_CMP(setid[i].flags_arg, SCMP_CMP_MASKED_EQ, creating, 0));
			if (r < 0)
				return r;
		}
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0);
		if (r < 0)
			return r;
	}

	/* socketpair: AF_UNIX only (other families would reach their kernel code, or load a module) */
	r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socketpair), 1, SCMP_A0_32(SCMP_CMP_EQ, AF_UNIX));
	if (r < 0)
		return r;

	/* socket: AF_UNIX always, AF_INET/AF_INET6 only with the host network */
	for (size_t d = 0; d < ARRAY_SIZE(domains); d++) {
		if (domains[d] != AF_UNIX && !share_net)
			continue;
		if (profile == LAUNCH_PROFILE_BALANCED) {
			r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, SCMP_A0_32(SCMP_CMP_EQ, domains[d]));
			if (r < 0)
				return r;
			continue;
		}
		for (size_t t = 0; t < ARRAY_SIZE(types); t++) {
			r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 2,
					     SCMP_A0_32(SCMP_CMP_EQ, domains[d]),
					     SCMP_A1_32(SCMP_CMP_MASKED_EQ, 0xf, types[t]));
			if (r < 0)
				return r;
		}
	}

	if (profile == LAUNCH_PROFILE_BALANCED) {
		pers = personality_balanced;
		n_pers = ARRAY_SIZE(personality_balanced);
	} else {
		pers = personality_strict;
		n_pers = ARRAY_SIZE(personality_strict);
	}
	for (size_t i = 0; i < n_pers; i++) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1, SCMP_A0_32(SCMP_CMP_EQ, pers[i]));
		if (r < 0)
			return r;
	}
	return 0;
}

int launch_seccomp_compile_fd(enum launch_profile profile, bool share_net)
{
	_cleanup_(seccomp_releasep) scmp_filter_ctx ctx = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	/* everything not allowed: EPERM, like Docker; other architectures (i386, x32): killed */
	ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!ctx)
		return -ENOMEM;
	r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r < 0)
		return r;
	/* bwrap loads the program; no_new_privs is the exec helper's job */
	r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
	if (r < 0)
		return r;
	r = build(ctx, profile, share_net);
	if (r < 0)
		return r;
	fd = memfd_create("draftbox-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = seccomp_export_bpf(ctx, fd);
	if (r < 0)
		return r;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	return TAKE_FD(fd);
}

#endif /* !LAUNCH_LITE */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint64_t hash_str(uint64_t h, const char *s)
{
	return fnv1a(h, s, strlen(s) + 1);
}

/* The cache key: everything the program depends on. */
static uint64_t cache_key(enum launch_profile profile, bool share_net)
{
	char buf[128];
	uint64_t h = 0xcbf29ce484222325ULL;

#ifdef LAUNCH_LITE
	/*
	 * What the full build reads from libseccomp at run time, as known
	 * when this was built. Should libseccomp change under us, the keys
	 * differ: every run is a miss and goes to draftbox-run-full, which is
	 * slower but never wrong.
	 */
#if defined(__x86_64__) && !defined(__ILP32__)
	const unsigned arch = 0xc000003eU; /* AUDIT_ARCH_X86_64 */
#elif defined(__aarch64__)
	const unsigned arch = 0xc00000b7U; /* AUDIT_ARCH_AARCH64 */
#else
	const unsigned arch = 0; /* unknown here: never matches, always the full build */
#endif
	snprintf(buf, sizeof(buf), "%s|%d|%d|%s|%u", RULES_VERSION, (int)profile, (int)share_net,
		 LAUNCH_LIBSECCOMP_VERSION, arch);
#else
	const struct scmp_version *v = seccomp_version();

	snprintf(buf, sizeof(buf), "%s|%d|%d|%u.%u.%u|%u", RULES_VERSION, (int)profile, (int)share_net,
		 v->major, v->minor, v->micro, seccomp_arch_native());
#endif
	h = hash_str(h, buf);
	for (const char *const *s = allow_common; *s; s++)
		h = hash_str(h, *s);
	for (const char *const *s = allow_balanced; *s; s++)
		h = hash_str(h, *s);
	return h;
}

#define CACHE_MAGIC "DBXSECC1"
struct cache_header {
	char magic[8];
	uint64_t key;
	uint64_t size;
	uint64_t sum;
};

/* Opens (creating) the cache dir; refuses one not owned by us or open to others. */
static int cache_dir_open(const char *dir)
{
	_cleanup_close_ int fd = -1;
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	fd = openat(AT_FDCWD, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_uid != geteuid() || (st.st_mode & 0077))
		return -EPERM;
	return TAKE_FD(fd);
}

/* Returns an fd positioned at a verified cached program, or -errno. */
static int cache_load(int dir_fd, const char *name, uint64_t key)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	struct cache_header h;
	struct stat st;
	size_t size;
	int r;

	fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0022) || st.st_size > (1 << 20))
		return -EPERM;
	r = read_full_fd(fd, 1 << 20, &buf, &size);
	if (r < 0)
		return r;
	if (size < sizeof(h))
		return -EBADMSG;
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, CACHE_MAGIC, 8) != 0 || h.key != key || h.size != size - sizeof(h) ||
	    h.size == 0 || h.size % 8 != 0 || fnv1a(0xcbf29ce484222325ULL, buf + sizeof(h), h.size) != h.sum)
		return -EBADMSG;
	if (lseek(fd, sizeof(h), SEEK_SET) < 0)
		return -errno;
	return TAKE_FD(fd);
}

#ifndef LAUNCH_LITE
/* Stores the program in @prog_fd (at offset 0) under @name, atomically. */
static int cache_store(int dir_fd, const char *name, uint64_t key, int prog_fd)
{
	_cleanup_free_ char *buf = NULL, *out = NULL;
	_cleanup_close_ int fd = -1;
	struct cache_header h = { .magic = CACHE_MAGIC };
	char tmp[64];
	size_t size;
	int r;

	r = read_full_fd(prog_fd, 1 << 20, &buf, &size);
	if (r < 0)
		return r;
	if (lseek(prog_fd, 0, SEEK_SET) < 0)
		return -errno;
	h.key = key;
	h.size = size;
	h.sum = fnv1a(0xcbf29ce484222325ULL, buf, size);
	out = malloc(sizeof(h) + size);
	if (!out)
		return -ENOMEM;
	memcpy(out, &h, sizeof(h));
	memcpy(out + sizeof(h), buf, size);

	snprintf(tmp, sizeof(tmp), ".tmp.%d", (int)getpid());
	fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = write_full(fd, out, sizeof(h) + size);
	if (r < 0 || renameat(dir_fd, tmp, dir_fd, name) < 0) {
		r = r < 0 ? r : -errno;
		unlinkat(dir_fd, tmp, 0);
		return r;
	}
	return 0;
}
#endif

int launch_seccomp_fd(const char *cache_dir, enum launch_profile profile, bool share_net)
{
	_cleanup_close_ int dir_fd = -1, prog = -1;
	uint64_t key = cache_key(profile, share_net);
	char name[40];
	int fd;

	snprintf(name, sizeof(name), "%016llx.bpf", (unsigned long long)key);
	if (cache_dir) {
		dir_fd = cache_dir_open(cache_dir);
		if (dir_fd >= 0) {
			fd = cache_load(dir_fd, name, key);
			if (fd >= 0)
				return fd;
		}
	}
#ifdef LAUNCH_LITE
	(void)prog;
	return -ENOPKG;
#else
	prog = launch_seccomp_compile_fd(profile, share_net);
	if (prog < 0)
		return prog;
	if (dir_fd >= 0)
		(void)cache_store(dir_fd, name, key, prog); /* best effort: a failed store only costs time */
	return TAKE_FD(prog);
#endif
}
