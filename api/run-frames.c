// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The run stream's wire format, kept apart so unit tests can pin it: each
 * frame is one bare JSON object followed by a blank line (OpenSandbox's
 * execd format, not "data:" lines), output is split into lines, and text is
 * made valid UTF-8 so any JSON parser accepts it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "run.h"

void api_frames_done(struct api_frames *f)
{
	free(f->buf);
	*f = (struct api_frames){};
}

/* Makes room for @n more bytes (and a NUL) in @f. Returns 0 or -ENOMEM. */
static int reserve(struct api_frames *f, size_t n)
{
	size_t cap;
	char *nb;

	if (f->len + n + 1 <= f->cap)
		return 0;
	cap = MAX(MAX(f->cap * 2, f->len + n + 1), (size_t)4096);
	nb = realloc(f->buf, cap);
	if (!nb)
		return -ENOMEM;
	f->buf = nb;
	f->cap = cap;
	return 0;
}

static int append_object(struct api_frames *f, cJSON *o)
{
	_cleanup_cjson_str_ char *s = cJSON_PrintUnformatted(o);
	size_t n;
	int r;

	if (!s)
		return -ENOMEM;
	n = strlen(s);
	r = reserve(f, n + 2);
	if (r < 0)
		return r;
	memcpy(f->buf + f->len, s, n);
	memcpy(f->buf + f->len + n, "\n\n", 3);
	f->len += n + 2;
	return 0;
}

static bool is_plain_ascii(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] - 1u >= 0x7fu) /* NUL or a byte >= 0x80 */
			return false;
	return true;
}

/*
 * Output frames are written by hand, the way cJSON would print them (the
 * unit tests hold the two to the same bytes): a run may print millions of
 * lines, and cJSON's number printing alone cost a third of the server's
 * time per line.
 */
int api_frame_output(struct api_frames *f, bool is_stderr, const char *text, size_t text_len, uint64_t ts)
{
	static const char hex[] = "0123456789abcdef";
	_cleanup_free_ char *clean = NULL;
	const char *head = is_stderr ? "{\"type\":\"stderr\",\"text\":\"" : "{\"type\":\"stdout\",\"text\":\"";
	size_t head_len = strlen(head);
	char *w;
	int r, n;

	if (!is_plain_ascii(text, text_len)) {
		clean = json_utf8_sanitize(text, text_len);
		if (!clean)
			return -ENOMEM;
		text = clean;
		text_len = strlen(clean);
	}
	/* the head, each byte escaped as \u00XX at worst, the tail with a 20-digit timestamp */
	r = reserve(f, head_len + 6 * text_len + 40);
	if (r < 0)
		return r;
	w = f->buf + f->len;
	memcpy(w, head, head_len);
	w += head_len;
	for (size_t i = 0; i < text_len; i++) {
		unsigned char c = (unsigned char)text[i];

		switch (c) {
		case '"': *w++ = '\\', *w++ = '"'; break;
		case '\\': *w++ = '\\', *w++ = '\\'; break;
		case '\b': *w++ = '\\', *w++ = 'b'; break;
		case '\f': *w++ = '\\', *w++ = 'f'; break;
		case '\n': *w++ = '\\', *w++ = 'n'; break;
		case '\r': *w++ = '\\', *w++ = 'r'; break;
		case '\t': *w++ = '\\', *w++ = 't'; break;
		default:
			if (c < 0x20) {
				memcpy(w, "\\u00", 4);
				w[4] = hex[c >> 4];
				w[5] = hex[c & 15];
				w += 6;
			} else
				*w++ = (char)c;
		}
	}
	n = snprintf(w, 40, "\",\"timestamp\":%llu}\n\n", (unsigned long long)ts);
	if (n < 0 || n >= 40)
		return -EINVAL;
	f->len = (size_t)(w + n - f->buf);
	return 0;
}

int api_frame_final(struct api_frames *f, int exit_code, bool timed_out, bool cancelled, const char *error,
		    uint64_t ts, uint64_t elapsed_ms)
{
	_cleanup_json_ cJSON *o = cJSON_CreateObject();
	char text[256], value[32];
	cJSON *e;

	if (!o)
		return -ENOMEM;
	if (exit_code == 0 && !timed_out && !cancelled && !error) {
		if (!cJSON_AddStringToObject(o, "type", "execution_complete") ||
		    !cJSON_AddNumberToObject(o, "timestamp", (double)ts) ||
		    !cJSON_AddNumberToObject(o, "execution_time", (double)elapsed_ms) ||
		    !cJSON_AddNumberToObject(o, "exit_code", 0))
			return -ENOMEM;
		return append_object(f, o);
	}
	if (error)
		snprintf(text, sizeof(text), "%s", error);
	else if (timed_out)
		snprintf(text, sizeof(text), "command timed out (exit code %d)", exit_code);
	else if (cancelled)
		snprintf(text, sizeof(text), "command cancelled (exit code %d)", exit_code);
	else
		snprintf(text, sizeof(text), "command exited with code %d", exit_code);
	snprintf(value, sizeof(value), "%d", exit_code);
	if (!cJSON_AddStringToObject(o, "type", "error") || !cJSON_AddStringToObject(o, "text", text) ||
	    !cJSON_AddNumberToObject(o, "timestamp", (double)ts))
		return -ENOMEM;
	e = cJSON_AddObjectToObject(o, "error");
	if (!e || !cJSON_AddStringToObject(e, "ename", timed_out ? "TimeoutError" : error ? "RuntimeError" : "ExitError") ||
	    !cJSON_AddStringToObject(e, "evalue", value) || !cJSON_AddArrayToObject(e, "traceback"))
		return -ENOMEM;
	if (!cJSON_AddNumberToObject(o, "exit_code", exit_code) ||
	    !cJSON_AddNumberToObject(o, "execution_time", (double)elapsed_ms))
		return -ENOMEM;
	return append_object(f, o);
}

int api_lines_feed(char **line, size_t *line_len, const char *data, size_t size, bool flush, size_t max,
		   int (*emit)(void *userdata, const char *text, size_t len), void *userdata)
{
	size_t i = 0;
	int r;

	while (i < size) {
		const char *nl = memchr(data + i, '\n', size - i);
		size_t chunk = nl ? (size_t)(nl - (data + i)) : size - i;
		char *nb;

		if (nl && *line_len == 0 && chunk < max) {
			/* a whole line in @data: no copy */
			r = emit(userdata, data + i, chunk > 0 && data[i + chunk - 1] == '\r' ? chunk - 1 : chunk);
			if (r < 0)
				return r;
			i += chunk + 1;
			continue;
		}
		/* keep the pending line under @max: emit it in pieces */
		while (*line_len + chunk >= max) {
			size_t take = max - *line_len;

			nb = realloc(*line, *line_len + take + 1);
			if (!nb)
				return -ENOMEM;
			*line = nb;
			memcpy(*line + *line_len, data + i, take);
			*line_len += take;
			r = emit(userdata, *line, *line_len);
			*line_len = 0;
			if (r < 0)
				return r;
			i += take;
			chunk -= take;
		}
		nb = realloc(*line, *line_len + chunk + 1);
		if (!nb)
			return -ENOMEM;
		*line = nb;
		memcpy(*line + *line_len, data + i, chunk);
		*line_len += chunk;
		i += chunk;
		if (nl) {
			i++; /* the '\n' */
			if (*line_len > 0 && (*line)[*line_len - 1] == '\r')
				(*line_len)--;
			r = emit(userdata, *line, *line_len);
			*line_len = 0;
			if (r < 0)
				return r;
		}
	}
	if (flush && *line_len > 0) {
		r = emit(userdata, *line, *line_len);
		*line_len = 0;
		if (r < 0)
			return r;
	}
	return 0;
}
