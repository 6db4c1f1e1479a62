/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * try-syscall: attempts one system call that the draftbox sandbox must
 * refuse, so the launcher's integration tests can check it from inside a
 * real sandbox. Usage: try-syscall NAME [ARG]. Prints "NAME: ok" or
 * "NAME: errno=ENAME" and exits 0 if the call succeeded, 1 if it failed,
 * 2 on bad usage. A few entries are not syscalls but small attacks built
 * from them (forkbomb, memhog, i386).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static int result(const char *name, long r)
{
	if (r < 0) {
		int e = errno;

		printf("%s: errno=%s\n", name, strerrorname_np(e) ? strerrorname_np(e) : "?");
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}

/*
 * A tty ioctl on a file that is not a tty: past the filter the kernel says
 * ENOTTY, so EPERM can only be the filter's (on a pty, the kernel refuses
 * TIOCSTI on a terminal that is not the caller's controlling one with EPERM
 * too, which hid a filter that let the command through).
 */
static long tty_ioctl(unsigned long cmd)
{
	char c = 'x';
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -1;
	return syscall(SYS_ioctl, fd, cmd, &c);
}

/* Forks until fork fails; prints how many children it got. Exit 1 if it was stopped by EAGAIN. */
static int forkbomb(long max)
{
	long n = 0;
	int e = 0;

	for (; n < max; n++) {
		pid_t p = fork();

		if (p < 0) {
			e = errno;
			break;
		}
		if (p == 0) {
			pause();
			_exit(0);
		}
	}
	printf("forkbomb: %ld children, errno=%s\n", n, e ? strerrorname_np(e) : "none");
	fflush(stdout);
	kill(0, SIGKILL); /* take the children (and us) down */
	return e == EAGAIN ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *n;
	long arg = argc > 2 ? strtol(argv[2], NULL, 10) : 0;

	if (argc < 2) {
		fprintf(stderr, "usage: try-syscall NAME [ARG]\n");
		return 2;
	}
	n = argv[1];
	setvbuf(stdout, NULL, _IONBF, 0);

	if (!strcmp(n, "ptrace"))
		return result(n, ptrace(PTRACE_ATTACH, (pid_t)arg, 0, 0));
	if (!strcmp(n, "ptrace-traceme"))
		return result(n, ptrace(PTRACE_TRACEME, 0, 0, 0));
	if (!strcmp(n, "kill"))
		return result(n, kill((pid_t)arg, SIGTERM));
	if (!strcmp(n, "process_vm_readv")) {
		char buf[8];
		struct iovec l = { buf, sizeof(buf) }, r = { buf, sizeof(buf) };

		return result(n, syscall(SYS_process_vm_readv, arg ? arg : getppid(), &l, 1, &r, 1, 0));
	}
	if (!strcmp(n, "mount"))
		return result(n, mount("none", "/tmp", "tmpfs", 0, NULL));
	if (!strcmp(n, "umount"))
		return result(n, umount2("/proc", MNT_DETACH));
	if (!strcmp(n, "unshare-user"))
		return result(n, unshare(CLONE_NEWUSER));
	if (!strcmp(n, "unshare-mount"))
		return result(n, unshare(CLONE_NEWNS));
	if (!strcmp(n, "setns"))
		return result(n, setns(open("/proc/self/ns/net", O_RDONLY), 0));
	if (!strcmp(n, "clone-newuser")) {
		long r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);

		if (r == 0)
			_exit(0);
		if (r > 0)
			waitpid((pid_t)r, NULL, 0);
		return result(n, r);
	}
	if (!strcmp(n, "clone-plain")) {
		long r = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);

		if (r == 0)
			_exit(0);
		if (r > 0)
			waitpid((pid_t)r, NULL, 0);
		return result(n, r);
	}
	if (!strcmp(n, "clone3")) {
		uint64_t args[11] = { 0 };

		args[4] = SIGCHLD; /* exit_signal */
		long r = syscall(SYS_clone3, args, sizeof(args));

		if (r == 0)
			_exit(0);
		if (r > 0)
			waitpid((pid_t)r, NULL, 0);
		return result(n, r);
	}
	if (!strcmp(n, "keyctl"))
		return result(n, syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL));
	if (!strcmp(n, "add_key"))
		return result(n, syscall(SYS_add_key, "user", "draftbox", "x", 1, KEY_SPEC_SESSION_KEYRING));
	if (!strcmp(n, "request_key"))
		return result(n, syscall(SYS_request_key, "user", "draftbox", NULL, KEY_SPEC_SESSION_KEYRING));
	if (!strcmp(n, "bpf")) {
		union bpf_attr a;

		memset(&a, 0, sizeof(a));
		a.map_type = BPF_MAP_TYPE_ARRAY;
		a.key_size = 4;
		a.value_size = 4;
		a.max_entries = 1;
		return result(n, syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof(a)));
	}
	if (!strcmp(n, "userfaultfd"))
		return result(n, syscall(SYS_userfaultfd, 0));
	if (!strcmp(n, "io_uring_setup")) {
		struct io_uring_params p;

		memset(&p, 0, sizeof(p));
		return result(n, syscall(SYS_io_uring_setup, 4, &p));
	}
	if (!strcmp(n, "perf_event_open")) {
		struct perf_event_attr a;

		memset(&a, 0, sizeof(a));
		a.type = PERF_TYPE_SOFTWARE;
		a.size = sizeof(a);
		a.config = PERF_COUNT_SW_CPU_CLOCK;
		a.exclude_kernel = 1;
		return result(n, syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
	}
	if (!strcmp(n, "tiocsti"))
		return result(n, tty_ioctl(TIOCSTI));
	if (!strcmp(n, "tiocsti-high"))
		return result(n, tty_ioctl(TIOCSTI | (1UL << 32)));
	if (!strcmp(n, "tiocsti-high-all"))
		return result(n, tty_ioctl(TIOCSTI | 0xffffffff00000000UL));
	if (!strcmp(n, "tioclinux"))
		return result(n, tty_ioctl(TIOCLINUX));
	if (!strcmp(n, "tioclinux-high"))
		return result(n, tty_ioctl(TIOCLINUX | (1UL << 32)));
	if (!strcmp(n, "tiocnotty-high")) /* allowed: 0x5422 differs outside the denied pair's bits */
		return result(n, tty_ioctl(TIOCNOTTY | (1UL << 32)));
	if (!strcmp(n, "tiocgwinsz")) {
		struct winsize ws;
		int m = posix_openpt(O_RDWR | O_NOCTTY);

		return result(n, m < 0 ? -1 : ioctl(m, TIOCGWINSZ, &ws));
	}
	if (!strcmp(n, "socket-netlink"))
		return result(n, socket(AF_NETLINK, SOCK_RAW, 0));
	if (!strcmp(n, "socket-inet"))
		return result(n, socket(AF_INET, SOCK_STREAM, 0));
	if (!strcmp(n, "socket-inet6"))
		return result(n, socket(AF_INET6, SOCK_DGRAM, 0));
	if (!strcmp(n, "socket-unix"))
		return result(n, socket(AF_UNIX, SOCK_STREAM, 0));
	if (!strcmp(n, "socket-packet"))
		return result(n, socket(AF_PACKET, SOCK_RAW, 0));
	if (!strcmp(n, "socket-vsock"))
		return result(n, socket(40 /* AF_VSOCK */, SOCK_STREAM, 0));
	if (!strcmp(n, "personality-bsd"))
		return result(n, personality(0x0006 /* PER_BSD */));
	if (!strcmp(n, "personality-linux32"))
		return result(n, personality(PER_LINUX32));
	if (!strcmp(n, "personality-query"))
		return result(n, personality(0xffffffff));
	if (!strcmp(n, "kexec_load"))
		return result(n, syscall(SYS_kexec_load, 0, 0, NULL, 0));
	if (!strcmp(n, "init_module"))
		return result(n, syscall(SYS_init_module, NULL, 0, ""));
	if (!strcmp(n, "reboot"))
		return result(n, syscall(SYS_reboot, 0, 0, 0, NULL));
	if (!strcmp(n, "swapon"))
		return result(n, syscall(SYS_swapon, "/nonexistent", 0));
	if (!strcmp(n, "acct"))
		return result(n, syscall(SYS_acct, NULL));
	if (!strcmp(n, "open_by_handle_at"))
		return result(n, syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0));
	if (!strcmp(n, "fsopen"))
		return result(n, syscall(SYS_fsopen, "tmpfs", 0));
	if (!strcmp(n, "open_tree"))
		return result(n, syscall(SYS_open_tree, AT_FDCWD, "/", 0));
	if (!strcmp(n, "move_mount"))
		return result(n, syscall(SYS_move_mount, -1, "", -1, "", 0));
	if (!strcmp(n, "chroot"))
		return result(n, chroot("/"));
	if (!strcmp(n, "setuid0"))
		return result(n, setuid(0));
	if (!strcmp(n, "i386")) {
		/* a 32-bit syscall from a 64-bit process: the filter kills the whole process */
		long r;

		__asm__ volatile("int $0x80" : "=a"(r) : "a"(20 /* i386 getpid */) : "memory");
		printf("i386: returned %ld\n", r);
		return 0;
	}
	if (!strcmp(n, "memhog")) {
		/* touches ARG MiB, one MiB at a time */
		for (long i = 0; i < arg; i++) {
			char *p = malloc(1 << 20);

			if (!p)
				return result(n, -1);
			memset(p, (int)i, 1 << 20);
		}
		printf("memhog: %ld MiB\n", arg);
		return 0;
	}
	if (!strcmp(n, "forkbomb"))
		return forkbomb(arg ? arg : 100000);
	fprintf(stderr, "try-syscall: unknown name '%s'\n", n);
	return 2;
}
