// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of strv.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "strv.h"

size_t strv_length(char *const *v)
{
	size_t n = 0;

	while (v && v[n])
		n++;
	return n;
}

bool strv_contains(char *const *v, const char *s)
{
	for (; v && *v; v++)
		if (strcmp(*v, s) == 0)
			return true;
	return false;
}

int strv_push(char ***v, const char *s)
{
	size_t n = strv_length(*v);
	char **nv;
	char *copy;

	copy = strdup(s);
	if (!copy)
		return -ENOMEM;
	nv = realloc(*v, (n + 2) * sizeof(char *));
	if (!nv) {
		free(copy);
		return -ENOMEM;
	}
	nv[n] = copy;
	nv[n + 1] = NULL;
	*v = nv;
	return 0;
}
