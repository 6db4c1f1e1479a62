// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of json-util.h.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"

int json_get_string(const cJSON *obj, const char *key, const char **ret)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (!v || cJSON_IsNull(v))
		return -ENOENT;
	if (!cJSON_IsString(v) || !v->valuestring)
		return -EINVAL;
	*ret = v->valuestring;
	return 0;
}

int json_get_bool(const cJSON *obj, const char *key, bool *ret)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (!v || cJSON_IsNull(v))
		return -ENOENT;
	if (!cJSON_IsBool(v))
		return -EINVAL;
	*ret = cJSON_IsTrue(v);
	return 0;
}

int json_get_int64(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *ret)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	double d;

	if (!v || cJSON_IsNull(v))
		return -ENOENT;
	if (!cJSON_IsNumber(v))
		return -EINVAL;
	d = v->valuedouble;
	if (!isfinite(d) || d != floor(d) || d < (double)min || d > (double)max)
		return -EINVAL;
	*ret = (int64_t)d;
	return 0;
}

int json_get_strv(const cJSON *obj, const char *key, char ***ret)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key), *e;
	char **out;
	size_t n = 0, i = 0;

	if (!v || cJSON_IsNull(v))
		return -ENOENT;
	if (!cJSON_IsArray(v))
		return -EINVAL;
	cJSON_ArrayForEach(e, v) {
		if (!cJSON_IsString(e) || !e->valuestring)
			return -EINVAL;
		n++;
	}
	out = calloc(n + 1, sizeof(char *));
	if (!out)
		return -ENOMEM;
	cJSON_ArrayForEach(e, v) {
		out[i] = strdup(e->valuestring);
		if (!out[i]) {
			strv_free(out);
			return -ENOMEM;
		}
		i++;
	}
	*ret = out;
	return 0;
}

int json_add_u64(cJSON *obj, const char *key, uint64_t v)
{
	return cJSON_AddNumberToObject(obj, key, (double)v) ? 0 : -ENOMEM;
}

char *json_utf8_sanitize(const char *s, size_t len)
{
	char *out = malloc(len * 3 + 1), *w = out;
	size_t i = 0;

	if (!out)
		return NULL;
	while (i < len) {
		unsigned char c = (unsigned char)s[i];
		size_t need = 0;
		uint32_t cp = 0, min = 0;

		if (c >= 0x01 && c < 0x80) {
			*w++ = (char)c;
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			need = 1, cp = c & 0x1f, min = 0x80;
		else if (c >= 0xe0 && c <= 0xef)
			need = 2, cp = c & 0x0f, min = 0x800;
		else if (c >= 0xf0 && c <= 0xf4)
			need = 3, cp = c & 0x07, min = 0x10000;
		if (need && i + need < len) {
			size_t k;

			for (k = 1; k <= need; k++) {
				unsigned char cc = (unsigned char)s[i + k];

				if ((cc & 0xc0) != 0x80)
					break;
				cp = (cp << 6) | (cc & 0x3f);
			}
			if (k > need && cp >= min && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff)) {
				memcpy(w, s + i, need + 1);
				w += need + 1;
				i += need + 1;
				continue;
			}
		}
		/* U+FFFD */
		*w++ = (char)0xef;
		*w++ = (char)0xbf;
		*w++ = (char)0xbd;
		i++;
	}
	*w = '\0';
	return out;
}

bool json_text_has_escaped_nul(const char *buf, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (buf[i] != '\\')
			continue;
		if (buf[i + 1] == 'u' && i + 5 < len && memcmp(buf + i + 2, "0000", 4) == 0)
			return true;
		i++; /* skip the escaped character */
	}
	return false;
}
