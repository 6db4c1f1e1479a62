// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The JSON format of the change list, streamed to an fd through stdio (no
 * DOM for 10k entries), and the summary object shared by every reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "diff.h"
#include "json-util.h"

cJSON *ovl_summary_to_json(const struct ovl_summary *s)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return NULL;
	json_add_u64(o, "added", s->added);
	json_add_u64(o, "modified", s->modified);
	json_add_u64(o, "deleted", s->deleted);
	json_add_u64(o, "type_changed", s->type_changed);
	json_add_u64(o, "total", s->added + s->modified + s->deleted + s->type_changed);
	json_add_u64(o, "content_changed", s->content_changed);
	json_add_u64(o, "metadata_only", s->metadata_only);
	json_add_u64(o, "bytes_added", s->bytes_added);
	json_add_u64(o, "bytes_removed", s->bytes_removed);
	return o;
}

/* Writes @s as a JSON string. Bytes >= 0x80 pass through (paths are bytes; UTF-8 names stay readable). */
static void put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

static void put_meta(FILE *f, const char *key, const struct ovl_meta *m)
{
	fprintf(f, ",\"%s\":{\"mode\":%u,\"size\":%" PRId64 ",\"uid\":%u,\"gid\":%u,\"mtime\":\"%lld.%09ld\"", key,
	        (unsigned)m->mode, (int64_t)m->size, (unsigned)m->uid, (unsigned)m->gid, (long long)m->mtime.tv_sec,
	        m->mtime.tv_nsec);
	if (m->target) {
		fputs(",\"target\":", f);
		put_str(f, m->target);
	}
	fputc('}', f);
}

int ovl_diff_write_json(const struct ovl_changes *c, int fd)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_json_ cJSON *summary = NULL;
	_cleanup_cjson_str_ char *stext = NULL;
	int dfd;

	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return -errno;
	f = fdopen(dfd, "w");
	if (!f) {
		safe_close(dfd);
		return -errno;
	}
	fputs("{\"changes\":[", f);
	for (size_t i = 0; i < c->n; i++) {
		const struct ovl_change *e = &c->v[i];
		enum ovl_ftype t = e->new_type != OVL_FT_NONE ? e->new_type : e->old_type;

		fputs(i ? ",\n{\"path\":" : "\n{\"path\":", f);
		put_str(f, e->path);
		fprintf(f, ",\"status\":\"%s\",\"type\":\"%s\"", ovl_status_to_string(e->status), ovl_ftype_to_string(t));
		if (e->old_type != OVL_FT_NONE)
			fprintf(f, ",\"old_type\":\"%s\"", ovl_ftype_to_string(e->old_type));
		fprintf(f, ",\"content\":%s,\"metadata\":%s", e->content ? "true" : "false",
		        e->metadata ? "true" : "false");
		if (e->upper_opaque)
			fputs(",\"opaque\":true", f);
		if (e->old_type != OVL_FT_NONE)
			put_meta(f, "old", &e->old);
		if (e->new_type != OVL_FT_NONE)
			put_meta(f, "new", &e->new);
		fputc('}', f);
	}
	summary = ovl_summary_to_json(&c->summary);
	if (!summary)
		return -ENOMEM;
	stext = cJSON_PrintUnformatted(summary);
	if (!stext)
		return -ENOMEM;
	fprintf(f, "\n],\"summary\":%s}\n", stext);
	if (fflush(f) != 0 || ferror(f))
		return errno ? -errno : -EIO;
	return 0;
}
