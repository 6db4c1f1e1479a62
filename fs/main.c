// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * draftfs: an overlay filesystem in userspace with a change record.
 * "draftfs [-f] -o lowerdir=...,upperdir=...,workdir=... MOUNTPOINT" mounts;
 * "draftfs diff|commit|discard|status|invalidate|recover ..." talks to a
 * running mount's control plane.
 */
#include <stdio.h>
#include <string.h>

#include "control.h"
#include "ovl.h"

static void usage(void)
{
	printf("Usage: draftfs [-f] [-d] -o lowerdir=A[:B...],upperdir=U,workdir=W[,OPTIONS] MOUNTPOINT\n"
	       "       draftfs SOURCE MOUNTPOINT -o OPTIONS        (as run by mount -t fuse.draftfs)\n"
	       "       draftfs diff|commit|discard|status|invalidate|recover ...   (see 'draftfs diff --help')\n"
	       "\n"
	       "An overlay filesystem with a change record. Options (see docs/fs.md):\n"
	       "  lowerdir=A:B:C        lower layers, leftmost on top (required)\n"
	       "  upperdir=U            writable layer (required)\n"
	       "  workdir=W             scratch dir on U's filesystem (required)\n"
	       "  statedir=S            control socket and journal (default W/draftfs)\n"
	       "  uidmapping=D:V:N[:...], gidmapping=...   disk id D shows as view id V (fuse-overlayfs syntax)\n"
	       "  timeout=SECONDS       kernel cache lifetime (default 86400)\n"
	       "  passthrough=all|upper|off   kernel reads open files from the layers (default all)\n"
	       "  uring=auto|on|off     requests over FUSE io_uring queues, one per CPU (default auto:\n"
	       "                        when the fuse module's enable_uring is on)\n"
	       "  ring_sched=idle|normal  io_uring threads SCHED_IDLE while the CPU is otherwise calm, so\n"
	       "                        a caller wakes on its own CPU (default idle; docs/fs.md)\n"
	       "  xino=auto|off         layers on several filesystems: st_ino carries the layer's (default auto)\n"
	       "  writeback=0|1  fsync=0|1  threads=N  quota_bytes=SIZE  quota_inodes=N\n"
	       "  bgfill=SIZE (default 64M; 0: copy every data copy-up before the open returns)\n"
	       "  allow_other default_permissions (default when root), rw ro nosuid nodev noexec noatime ...\n"
	       "  -f  stay in the foreground     -d  libfuse debug output\n");
}

int main(int argc, char **argv)
{
	if (argc > 1 && ovl_ctl_is_subcommand(argv[1]))
		return ovl_ctl_main(argc - 1, argv + 1);
	if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage();
		return 0;
	}
	if (argc > 1 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)) {
		printf("draftfs %s\n", DRAFTBOX_VERSION);
		return 0;
	}
	return ovl_daemon_main(argc, argv);
}
