/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Small macros used everywhere: cleanup attributes, ownership transfer and
 * array helpers. Every destructor here accepts NULL / -1.
 */
#pragma once

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _noreturn_ __attribute__((noreturn))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)
#define _must_check_ __attribute__((warn_unused_result))

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Takes ownership of a pointer: returns it and leaves NULL behind. */
#define TAKE_PTR(p)                          \
	({                                   \
		__typeof__(p) _p_ = (p);     \
		(p) = NULL;                  \
		_p_;                         \
	})

/* Takes ownership of an fd: returns it and leaves -1 behind. */
#define TAKE_FD(fd)                          \
	({                                   \
		int _fd_ = (fd);             \
		(fd) = -1;                   \
		_fd_;                        \
	})

/* Defines func##p(type *p) that calls func(*p) when *p is not NULL. */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)          \
	static inline void func##p(type *p)              \
	{                                                \
		if (*p)                                  \
			func(*p);                        \
	}

static inline void freep(void *p)
{
	free(*(void **)p);
}

/* Closes an fd, preserving errno. Returns -1 so callers can write fd = safe_close(fd). */
static inline int safe_close(int fd)
{
	if (fd >= 0) {
		int saved = errno;
		close(fd);
		errno = saved;
	}
	return -1;
}

static inline void closep(int *fd)
{
	safe_close(*fd);
}

static inline void fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

static inline void closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

/* Frees a NULL-terminated string vector. */
static inline void strv_free(char **v)
{
	if (!v)
		return;
	for (char **s = v; *s; s++)
		free(*s);
	free(v);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, strv_free)

#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)
#define _cleanup_closedir_ _cleanup_(closedirp)
#define _cleanup_strv_free_ _cleanup_(strv_freep)

/* Retries an expression while it fails with EINTR. */
#define RETRY_EINTR(expr)                                    \
	({                                                   \
		__typeof__(expr) _r_;                        \
		do                                           \
			_r_ = (expr);                        \
		while (_r_ < 0 && errno == EINTR);           \
		_r_;                                         \
	})
