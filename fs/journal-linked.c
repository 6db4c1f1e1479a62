// SPDX-License-Identifier: LGPL-2.1-or-later
/* The journal's linked set (journal-linked.h). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "journal-linked.h"

int ovl_linked_add(struct ovl_linked_set *s, const struct ovl_linked *l)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		struct ovl_linked *v = reallocarray(s->v, cap, sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = *l;
	return 0;
}

static int cmp_id(dev_t ad, ino_t ai, dev_t bd, ino_t bi)
{
	if (ad != bd)
		return ad < bd ? -1 : 1;
	return ai < bi ? -1 : ai > bi;
}

static int cmp_linked(const void *a, const void *b)
{
	const struct ovl_linked *x = a, *y = b;

	return cmp_id(x->dev, x->ino, y->dev, y->ino);
}

void ovl_linked_seal(struct ovl_linked_set *s)
{
	size_t w = 0;

	if (s->n == 0)
		return;
	qsort(s->v, s->n, sizeof(*s->v), cmp_linked);
	for (size_t i = 1; i < s->n; i++)
		if (cmp_linked(&s->v[w], &s->v[i]) != 0)
			s->v[++w] = s->v[i];
	s->n = w + 1;
}

const struct ovl_linked *ovl_linked_find(const struct ovl_linked_set *s, dev_t dev, ino_t ino)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = cmp_id(s->v[mid].dev, s->v[mid].ino, dev, ino);

		if (c == 0)
			return &s->v[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

void ovl_linked_done(struct ovl_linked_set *s)
{
	free(s->v);
	*s = (struct ovl_linked_set){ 0 };
}

cJSON *ovl_linked_to_json(const struct ovl_linked_set *s)
{
	cJSON *a = cJSON_CreateArray();

	for (size_t i = 0; a && i < s->n; i++) {
		const struct ovl_linked *l = &s->v[i];
		char buf[192];

		snprintf(buf, sizeof(buf), "%" PRIu64 ":%" PRIu64 ":%" PRIu32 ":%" PRIu32 ":%" PRIu32 ":%" PRId64 ":%" PRId64
		         ":%ld", (uint64_t)l->dev, (uint64_t)l->ino, (uint32_t)l->mode, (uint32_t)l->uid, (uint32_t)l->gid,
		         (int64_t)l->size, (int64_t)l->mtime.tv_sec, l->mtime.tv_nsec);
		if (!cJSON_AddItemToArray(a, cJSON_CreateString(buf))) {
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

/* One field: decimal digits (after a '-' when @sign), no space, ending at @end; at most @max in magnitude. */
static bool parse_field(const char **p, char end, bool sign, uint64_t max, int64_t *ret)
{
	const char *s = *p;
	bool neg = sign && *s == '-';
	uint64_t v = 0;

	s += neg;
	if (!isdigit((unsigned char)*s))
		return false;
	for (; isdigit((unsigned char)*s); s++) {
		uint64_t d = (uint64_t)(*s - '0');

		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	if (*s != end)
		return false;
	*p = end ? s + 1 : s;
	*ret = neg ? -(int64_t)v : (int64_t)v;
	return true;
}

static bool parse_linked(const char *p, struct ovl_linked *l)
{
	int64_t dev, ino, mode, uid, gid, size, sec, nsec;

	if (!parse_field(&p, ':', false, INT64_MAX, &dev) || !parse_field(&p, ':', false, INT64_MAX, &ino) ||
	    !parse_field(&p, ':', false, UINT32_MAX, &mode) || !parse_field(&p, ':', false, UINT32_MAX, &uid) ||
	    !parse_field(&p, ':', false, UINT32_MAX, &gid) || !parse_field(&p, ':', false, INT64_MAX, &size) ||
	    !parse_field(&p, ':', true, INT64_MAX, &sec) || !parse_field(&p, '\0', false, 999999999, &nsec))
		return false;
	if (ino == 0 || (int64_t)(dev_t)dev != dev || (int64_t)(ino_t)ino != ino || (int64_t)(time_t)sec != sec)
		return false;
	*l = (struct ovl_linked){ .dev = (dev_t)dev, .ino = (ino_t)ino, .mode = (mode_t)mode, .uid = (uid_t)uid,
		                  .gid = (gid_t)gid, .size = (off_t)size,
		                  .mtime = { .tv_sec = (time_t)sec, .tv_nsec = (long)nsec } };
	return true;
}

int ovl_linked_from_json(const cJSON *array, struct ovl_linked_set *ret)
{
	const cJSON *it;

	if (!cJSON_IsArray(array))
		return -EUCLEAN;
	cJSON_ArrayForEach(it, array) {
		struct ovl_linked l;
		int r;

		if (!cJSON_IsString(it) || !parse_linked(it->valuestring, &l))
			return -EUCLEAN;
		r = ovl_linked_add(ret, &l);
		if (r < 0)
			return r;
	}
	ovl_linked_seal(ret);
	return 0;
}
