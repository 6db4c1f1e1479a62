// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * draftfs: an overlay filesystem in userspace with a change record.
 * "draftfs [-f] -o lowerdir=...,upperdir=...,workdir=... MOUNTPOINT" mounts;
 * "draftfs diff|commit|discard|status|invalidate|recover ..." talks to a
 * running mount's control plane.
 */
#include "control.h"
#include "ovl.h"

int main(int argc, char **argv)
{
	if (argc > 1 && ovl_ctl_is_subcommand(argv[1]))
		return ovl_ctl_main(argc - 1, argv + 1);
	return ovl_daemon_main(argc, argv);
}
