/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Whether this host can serve FUSE over io_uring (fs/uring.c), for the
 * daemon's uring=on check and for draftboxd's capabilities.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/*
 * True if this kernel can serve FUSE over io_uring now (the fuse module's
 * enable_uring is on and an io_uring can be made); else false with the
 * reason in @why.
 */
bool ovl_uring_available(char *why, size_t whylen);
