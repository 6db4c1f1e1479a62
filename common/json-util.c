// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of json-util.h.
 */
#include <errno.h>
#include <math.h>
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
