/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * A minimal TAP producer for unit tests run by `meson test` (protocol: tap).
 * Usage: ok(cond, "name"), is_int(a, b, "name"), is_str(a, b, "name"),
 * then return tap_done() from main(). tap_skip_all("why") exits 77.
 */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...)                                                      \
	do {                                                               \
		int _c = !!(cond);                                         \
		tap_n++;                                                   \
		if (!_c)                                                   \
			tap_failed++;                                      \
		printf("%sok %d - ", _c ? "" : "not ", tap_n);             \
		printf(__VA_ARGS__);                                       \
		printf("\n");                                              \
		if (!_c)                                                   \
			printf("# failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
	} while (0)

#define is_int(a, b, ...)                                                         \
	do {                                                                      \
		long long _a = (long long)(a), _b = (long long)(b);               \
		ok(_a == _b, __VA_ARGS__);                                        \
		if (_a != _b)                                                     \
			printf("#   got %lld, expected %lld\n", _a, _b);          \
	} while (0)

#define is_str(a, b, ...)                                                          \
	do {                                                                       \
		const char *_a = (a), *_b = (b);                                   \
		int _eq = (_a && _b) ? strcmp(_a, _b) == 0 : _a == _b;             \
		ok(_eq, __VA_ARGS__);                                              \
		if (!_eq)                                                          \
			printf("#   got '%s', expected '%s'\n", _a ? _a : "(null)", \
			       _b ? _b : "(null)");                                \
	} while (0)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

static inline void tap_skip_all(const char *why)
{
	printf("1..0 # SKIP %s\n", why);
	exit(77);
}
