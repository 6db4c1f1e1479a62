/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * NULL-terminated string vectors (char **), as used for argv-like lists
 * parsed from the command line, config files and JSON. strv_free() and its
 * cleanup attribute live in macro.h.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "macro.h"

/* Number of strings in @v; 0 for NULL. */
size_t strv_length(char *const *v);

/* True if @s is one of the strings of @v (which may be NULL). */
bool strv_contains(char *const *v, const char *s);

/*
 * Appends a copy of @s to *@v (which may be NULL), keeping it NULL-terminated.
 * Returns 0 or -ENOMEM; on failure *@v is unchanged.
 */
int strv_push(char ***v, const char *s);
