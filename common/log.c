// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Implementation of log.h: formats one line per call and writes it to stderr
 * with a single write(2), so lines from threads never interleave.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static const char *log_program = "draftbox";
static int log_max_level = -1;
static bool log_structured;

void log_set_program(const char *name)
{
	const char *slash = strrchr(name, '/');

	log_program = slash ? slash + 1 : name;
}

void log_set_max_level(enum log_level level)
{
	log_max_level = level;
}

enum log_level log_get_max_level(void)
{
	if (log_max_level < 0) {
		const char *e = getenv("DRAFTBOX_DEBUG");

		log_max_level = (e && *e && strcmp(e, "0") != 0) ? LOG_LEVEL_DEBUG : LOG_LEVEL_INFO;
	}
	return log_max_level;
}

void log_set_structured(bool on)
{
	log_structured = on;
}

static const char *level_name(enum log_level level)
{
	switch (level) {
	case LOG_LEVEL_ERROR:
		return "error";
	case LOG_LEVEL_WARNING:
		return "warning";
	case LOG_LEVEL_INFO:
		return "info";
	default:
		return "debug";
	}
}

/* Appends @s to @buf as a logfmt quoted value. */
static size_t append_quoted(char *buf, size_t pos, size_t size, const char *s)
{
	if (pos < size)
		buf[pos++] = '"';
	for (; *s && pos + 2 < size; s++) {
		if (*s == '"' || *s == '\\') {
			buf[pos++] = '\\';
			buf[pos++] = *s;
		} else if ((unsigned char)*s < 0x20) {
			buf[pos++] = ' ';
		} else {
			buf[pos++] = *s;
		}
	}
	if (pos < size)
		buf[pos++] = '"';
	return pos;
}

int log_internal(enum log_level level, int error, const char *file, int line, const char *fmt, ...)
{
	int saved_errno = errno;
	char msg[2048], out[4096];
	size_t n;
	va_list ap;
	int ret = error < 0 ? error : (level <= LOG_LEVEL_ERROR ? -EIO : 0);

	if ((int)level > (int)log_get_max_level()) {
		errno = saved_errno;
		return ret;
	}

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (error != 0) {
		size_t l = strlen(msg);

		snprintf(msg + l, sizeof(msg) - l, ": %s", strerror(error < 0 ? -error : error));
	}

	if (log_structured) {
		struct timespec ts;
		struct tm tm;
		char tbuf[64];

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		strftime(tbuf, sizeof(tbuf), "%Y-%m-%dT%H:%M:%S", &tm);
		n = (size_t)snprintf(out, sizeof(out), "ts=%s.%03ldZ level=%s prog=%s msg=", tbuf,
				     ts.tv_nsec / 1000000, level_name(level), log_program);
		if (n >= sizeof(out))
			n = sizeof(out) - 1;
		n = append_quoted(out, n, sizeof(out) - 1, msg);
		if (level >= LOG_LEVEL_DEBUG)
			n += (size_t)snprintf(out + n, sizeof(out) - n, " src=%s:%d", file, line);
	} else if (level >= LOG_LEVEL_DEBUG) {
		n = (size_t)snprintf(out, sizeof(out), "%s: debug: %s (%s:%d)", log_program, msg, file, line);
	} else if (level == LOG_LEVEL_WARNING) {
		n = (size_t)snprintf(out, sizeof(out), "%s: warning: %s", log_program, msg);
	} else {
		n = (size_t)snprintf(out, sizeof(out), "%s: %s", log_program, msg);
	}
	if (n >= sizeof(out) - 1)
		n = sizeof(out) - 2;
	out[n++] = '\n';
	(void)!write(STDERR_FILENO, out, n);

	errno = saved_errno;
	return ret;
}
