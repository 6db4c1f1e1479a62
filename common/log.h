/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Logging. Log once, at the boundary: helpers return -errno and the caller
 * that decides what to do with the failure logs it. Lines go to stderr, as
 * "PROGRAM: message" or, with log_set_structured(), as logfmt key=value
 * lines for daemons.
 */
#pragma once

#include <stdbool.h>

#include "macro.h"

enum log_level {
	LOG_LEVEL_ERROR = 3,
	LOG_LEVEL_WARNING = 4,
	LOG_LEVEL_INFO = 6,
	LOG_LEVEL_DEBUG = 7,
};

/* Sets the program name printed with each line (not copied: pass a literal or argv[0]). */
void log_set_program(const char *name);
/* Sets the maximum level printed. Default LOG_LEVEL_INFO, or DEBUG if $DRAFTBOX_DEBUG is set. */
void log_set_max_level(enum log_level level);
enum log_level log_get_max_level(void);
/* Switches to logfmt lines: ts=... level=... prog=... msg="...". */
void log_set_structured(bool on);

/*
 * Logs a message. @error is a -errno value (or 0): when non-zero, ": strerror"
 * is appended. Returns @error when it is negative, else -EIO if level is error,
 * else 0, so that "return log_error_errno(r, ...)" propagates r.
 */
int log_internal(enum log_level level, int error, const char *file, int line, const char *fmt, ...) _printf_(5, 6);

#define log_full_errno(level, error, ...) log_internal(level, error, __FILE__, __LINE__, __VA_ARGS__)
#define log_error_errno(error, ...) log_full_errno(LOG_LEVEL_ERROR, error, __VA_ARGS__)
#define log_warning_errno(error, ...) log_full_errno(LOG_LEVEL_WARNING, error, __VA_ARGS__)
#define log_debug_errno(error, ...) log_full_errno(LOG_LEVEL_DEBUG, error, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_LEVEL_ERROR, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_LEVEL_WARNING, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_LEVEL_INFO, 0, __VA_ARGS__)
#define log_debug(...)                                                    \
	do {                                                              \
		if (_unlikely_(log_get_max_level() >= LOG_LEVEL_DEBUG)) \
			log_full_errno(LOG_LEVEL_DEBUG, 0, __VA_ARGS__);  \
	} while (0)
