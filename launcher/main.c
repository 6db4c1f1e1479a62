/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* draftbox-run: runs one command in a bubblewrap sandbox. Everything lives in liblauncher. */
#include "launch.h"

int main(int argc, char **argv)
{
	return launch_main(argc, argv);
}
