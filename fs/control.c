// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Control plane entry points (see control.h). Placeholder until the control
 * plane lands: every operation reports -EOPNOTSUPP.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "control.h"

int ovl_control_start(const struct ovl_layers *layers, const struct ovl_live *live, struct ovl_control **ret)
{
	*ret = NULL;
	return 0;
}

void ovl_control_stop(struct ovl_control *c)
{
}

int ovl_journal_recover(const struct ovl_layers *layers)
{
	return 0;
}

bool ovl_ctl_is_subcommand(const char *verb)
{
	static const char *const verbs[] = { "diff", "commit", "discard", "status", "invalidate", "recover" };

	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strcmp(verb, verbs[i]) == 0)
			return true;
	return false;
}

int ovl_ctl_main(int argc, char **argv)
{
	fprintf(stderr, "draftfs: '%s' is not available yet\n", argv[0]);
	return 1;
}
