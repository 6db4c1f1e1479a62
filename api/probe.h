/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Host capability probe (probe.c). Fills srv->caps once at start.
 */
#pragma once

#include "api.h"

#ifndef API_HAVE_CTL
#define API_HAVE_CTL 0
#endif

/* Probes the launcher, draftfs, /dev/fuse and idmapped mounts; never fails (missing pieces are reported). */
void api_probe(struct api_server *srv);

/* Frees what api_probe() stored. */
void api_caps_done(struct api_caps *c);
