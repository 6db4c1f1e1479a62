/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * cJSON helpers: cleanup functions and typed getters that tell "missing"
 * from "wrong type", so request parsers can give a precise error.
 */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON *, cJSON_Delete)
#define _cleanup_json_ _cleanup_(cJSON_Deletep)

static inline void cjson_freep(char **p)
{
	if (*p)
		cJSON_free(*p);
}
#define _cleanup_cjson_str_ _cleanup_(cjson_freep)

/*
 * Getters: return 0 and set *ret when @key is present with the right type,
 * -ENOENT when it is absent or null (and leave *ret alone), -EINVAL when it
 * has another type or is out of range.
 */
int json_get_string(const cJSON *obj, const char *key, const char **ret);
int json_get_bool(const cJSON *obj, const char *key, bool *ret);
int json_get_int64(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *ret);
/* Array of strings: *ret is a new NULL-terminated vector (free with strv_free). */
int json_get_strv(const cJSON *obj, const char *key, char ***ret);

/* Adds a number that may exceed 2^53 as a JSON number (cJSON stores doubles). Returns 0 or -ENOMEM. */
int json_add_u64(cJSON *obj, const char *key, uint64_t v);

/*
 * Copies @s (@len bytes) with each invalid UTF-8 sequence and each NUL
 * replaced by U+FFFD, as Go's encoding/json (OpenSandbox's execd) does:
 * names and output come from sandboxed code and may be any bytes, and strict
 * JSON parsers reject invalid UTF-8. Returns a new string (free()), or NULL
 * on ENOMEM.
 */
char *json_utf8_sanitize(const char *s, size_t len);

/*
 * True if a string in the JSON text @buf (@len bytes) holds the escape
 * "\u0000". cJSON keeps strings NUL-terminated and would silently cut such a
 * string there ("keep\u0000" is "keep", "\u0000x" is ""): callers refuse the
 * text instead.
 */
bool json_text_has_escaped_nul(const char *buf, size_t len);
