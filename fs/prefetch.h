/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Read-ahead of the upper files (or a metacopy's lower data) that commit,
 * the patch and the layer tar are about to read, in change order
 * (fs/prefetch.c).
 */
#pragma once

#include <stddef.h>

struct ovl_changes;
struct ovl_layers;
struct ovl_prefetch;

/*
 * Starts a thread that asks the kernel to read ahead the data of @c's
 * changed regular files (the upper file, or a metacopy's lower data
 * file), in order, a bounded window ahead of what ovl_prefetch_progress()
 * reports. Returns NULL when there are too few files to be worth it or
 * the thread cannot start (nothing is lost then). @l and @c must outlive
 * ovl_prefetch_stop().
 */
struct ovl_prefetch *ovl_prefetch_start(const struct ovl_layers *l, const struct ovl_changes *c);
/* The stager has finished changes [0, @done). Accepts NULL. */
void ovl_prefetch_progress(struct ovl_prefetch *p, size_t done);
/* Stops and joins the thread. Accepts NULL. */
void ovl_prefetch_stop(struct ovl_prefetch *p);
static inline void ovl_prefetch_stopp(struct ovl_prefetch **p)
{
	ovl_prefetch_stop(*p);
}
