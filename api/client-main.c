// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * draftbox: the command-line client of draftboxd. Everything is in
 * client.c and client-files.c; see `draftbox --help` and docs/api.md.
 */
#include "client.h"

int main(int argc, char **argv)
{
	return client_main(argc, argv);
}
