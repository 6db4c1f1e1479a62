/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * draftboxd's lifecycle: state dir, token, probe, sessions, HTTP, then
 * wait for SIGINT/SIGTERM and stop (leaving mounts and uppers for the next
 * start).
 */
#pragma once

#include "settings.h"

/* Runs the server until a termination signal. Returns an exit status. */
int api_server_main(struct api_config *cfg);
