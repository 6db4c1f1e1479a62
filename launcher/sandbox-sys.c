/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The sandbox's own /sys. `--ro-bind / /` would show the host's: every NIC
 * and its MAC address, the whole cgroup tree (other runs' names), debugfs,
 * tracefs, securityfs and the fuse connections. bwrap cannot mount a
 * sysfs, so the launcher's child does it before exec'ing bwrap, in a mount
 * namespace (and, for isolated runs, a network namespace) of its own that
 * bwrap then inherits and binds as the sandbox's root:
 *
 *   - a fresh sysfs, read-only, at /sys: mounted from inside the new
 *     network namespace, so its net directories (class/net, the devices'
 *     net/ dirs) show only that namespace's lo. Its submounts are not
 *     there: /sys/fs/cgroup is an empty dir, no debug or tracing fs;
 *   - /sys/firmware and /sys/devices/virtual/powercap covered by empty
 *     read-only tmpfs (what runc and Docker mask: ACPI tables and the
 *     energy counters of the RAPL side channel);
 *   - on cgroup v2, the run's own cgroup read-only at /sys/fs/cgroup, as a
 *     container sees it: cgroup-aware runtimes read their limits there;
 *   - lo up in the new network namespace (bwrap's --unshare-net would make
 *     a second one; this one is the sandbox's).
 *
 * Runs in the launcher's CLONE_VM child: system calls only, no allocation.
 * On failure returns -errno and sets *step to what failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "launch.h"

#define SYS_FLAGS (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)

/* Kernel ABI (5.2), spelled out: musl has no wrappers, and glibc's need 2.36. */
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#define DB_OPEN_TREE_CLONE 1
#define DB_MOVE_MOUNT_F_EMPTY_PATH 0x4

static int loopback_up(void)
{
	struct ifreq ifr = {};
	int fd, r = 0;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(ifr.ifr_name, "lo", 3);
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		r = -errno;
	else {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
			r = -errno;
	}
	close(fd);
	return r;
}

/* An empty read-only tmpfs over @path, when it exists in the new sysfs. Sets errno on failure. */
static int mask(const char *path)
{
	if (access(path, F_OK) < 0)
		return errno == ENOENT ? 0 : -1;
	return mount("tmpfs", path, "tmpfs", SYS_FLAGS, "size=0,mode=0555");
}

int launch_sandbox_sys(bool new_net, const char *cgroup_path, const char **step)
{
	int r, cg = -1;

	*step = "unshare the mount and network namespaces";
	if (unshare(CLONE_NEWNS | (new_net ? CLONE_NEWNET : 0)) < 0)
		return -errno;
	/* nothing done below may reach the host's mount table */
	*step = "make the mount namespace a slave";
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return -errno;
	/*
	 * A detached copy of the run's cgroup dir, taken from this namespace's
	 * copy of the host's mounts (a bind needs its source in the caller's
	 * namespace) before they go.
	 */
	if (cgroup_path) {
		*step = "clone the run's cgroup";
		cg = (int)syscall(SYS_open_tree, AT_FDCWD, cgroup_path,
				  DB_OPEN_TREE_CLONE | O_CLOEXEC | AT_SYMLINK_NOFOLLOW);
		if (cg < 0)
			return -errno;
	}
	*step = "detach the host's /sys";
	if (umount2("/sys", MNT_DETACH) < 0 && errno != EINVAL)
		goto fail;
	*step = "mount a sysfs at /sys";
	if (mount("sysfs", "/sys", "sysfs", SYS_FLAGS, NULL) < 0)
		goto fail;
	*step = "mask /sys/firmware";
	if (mask("/sys/firmware") < 0)
		goto fail;
	*step = "mask /sys/devices/virtual/powercap";
	if (mask("/sys/devices/virtual/powercap") < 0)
		goto fail;
	if (cg >= 0) {
		*step = "bind the run's cgroup at /sys/fs/cgroup";
		if (syscall(SYS_move_mount, cg, "", AT_FDCWD, "/sys/fs/cgroup", DB_MOVE_MOUNT_F_EMPTY_PATH) < 0)
			goto fail;
		close(cg);
		cg = -1;
		if (mount(NULL, "/sys/fs/cgroup", NULL, MS_BIND | MS_REMOUNT | SYS_FLAGS, NULL) < 0)
			return -errno;
	}
	if (new_net) {
		*step = "bring up lo";
		r = loopback_up();
		if (r < 0)
			return r;
	}
	*step = NULL;
	return 0;
fail:
	r = -errno;
	if (cg >= 0)
		close(cg);
	return r;
}
