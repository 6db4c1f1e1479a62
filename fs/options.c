// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Command line and mount option parsing for draftfs. Options use the
 * spelling of kernel overlayfs and fuse-overlayfs (lowerdir=A:B, upperdir=,
 * workdir=, uidmapping=, gidmapping=); generic mount(8) options are
 * accepted and either handed to libfuse (rw, ro, nosuid, ...) or dropped
 * (auto, nofail, _netdev, x-*). Only syntax is checked here; the daemon
 * validates the directories.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "ovl.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) _printf_(3, 4);
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int parse_u32(const char *s, uint32_t *ret)
{
	unsigned long long v;
	char *end;

	if (!*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return -EINVAL;
	*ret = (uint32_t)v;
	return 0;
}

static bool ranges_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

int ovl_idmap_parse(const char *s, struct ovl_idmap *ret)
{
	_cleanup_free_ char *copy = strdup(s);
	_cleanup_free_ struct ovl_idmap_range *r = NULL;
	char *fields[3 * 64];
	size_t nf = 0, n;
	char *p, *save = NULL;

	if (!copy)
		return -ENOMEM;
	if (!*s || s[strlen(s) - 1] == ':' || strstr(s, "::"))
		return -EINVAL;
	for (p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		if (nf >= ARRAY_SIZE(fields))
			return -E2BIG;
		fields[nf++] = p;
	}
	if (nf == 0 || nf % 3 != 0)
		return -EINVAL;
	n = nf / 3;
	r = calloc(n, sizeof(*r));
	if (!r)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (parse_u32(fields[3 * i], &r[i].disk) < 0 || parse_u32(fields[3 * i + 1], &r[i].view) < 0 ||
		    parse_u32(fields[3 * i + 2], &r[i].len) < 0 || r[i].len == 0)
			return -EINVAL;
		if ((uint64_t)r[i].disk + r[i].len > (uint64_t)UINT32_MAX + 1 ||
		    (uint64_t)r[i].view + r[i].len > (uint64_t)UINT32_MAX + 1)
			return -ERANGE;
		for (size_t j = 0; j < i; j++)
			if (ranges_overlap(r[i].disk, r[i].len, r[j].disk, r[j].len) ||
			    ranges_overlap(r[i].view, r[i].len, r[j].view, r[j].len))
				return -ENOTUNIQ;
	}
	free(ret->r);
	ret->r = TAKE_PTR(r);
	ret->n = n;
	return 0;
}

uint32_t ovl_idmap_to_disk(const struct ovl_idmap *m, uint32_t view)
{
	for (size_t i = 0; i < m->n; i++)
		if (view >= m->r[i].view && view - m->r[i].view < m->r[i].len)
			return m->r[i].disk + (view - m->r[i].view);
	return view;
}

uint32_t ovl_idmap_to_view(const struct ovl_idmap *m, uint32_t disk)
{
	for (size_t i = 0; i < m->n; i++)
		if (disk >= m->r[i].disk && disk - m->r[i].disk < m->r[i].len)
			return m->r[i].view + (disk - m->r[i].disk);
	return disk;
}

void ovl_options_free(struct ovl_options *o)
{
	strv_free(o->lowerdirs);
	free(o->upperdir);
	free(o->workdir);
	free(o->statedir);
	free(o->mountpoint);
	free(o->source);
	free(o->uidmap.r);
	free(o->gidmap.r);
	free(o->fuse_opts);
	*o = (struct ovl_options){ 0 };
}

static int append_fuse_opt(struct ovl_options *o, const char *opt)
{
	size_t old = o->fuse_opts ? strlen(o->fuse_opts) : 0;
	char *n = realloc(o->fuse_opts, old + strlen(opt) + 2);

	if (!n)
		return -ENOMEM;
	if (old)
		n[old++] = ',';
	strcpy(n + old, opt);
	o->fuse_opts = n;
	return 0;
}

static int set_str(char **dst, const char *v)
{
	char *n = strdup(v);

	if (!n)
		return -ENOMEM;
	free(*dst);
	*dst = n;
	return 0;
}

static int parse_bool(const char *v, bool *ret)
{
	if (!v || strcmp(v, "1") == 0 || strcmp(v, "yes") == 0 || strcmp(v, "true") == 0 || strcmp(v, "on") == 0)
		*ret = true;
	else if (strcmp(v, "0") == 0 || strcmp(v, "no") == 0 || strcmp(v, "false") == 0 || strcmp(v, "off") == 0)
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

static int parse_size(const char *v, uint64_t *ret)
{
	unsigned long long n;
	char *end;

	if (!*v || *v == '-')
		return -EINVAL;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': n <<= 10; end++; break;
	case 'm': case 'M': n <<= 20; end++; break;
	case 'g': case 'G': n <<= 30; end++; break;
	case 't': case 'T': n <<= 40; end++; break;
	}
	if (*end)
		return -EINVAL;
	*ret = n;
	return 0;
}

/* Generic mount(8) options: passed to libfuse (kernel flags) or ignored. */
static const char *const generic_opts[] = {
	"rw", "ro", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync", "dirsync",
	"atime", "noatime", "diratime", "nodiratime", "relatime", "norelatime", "strictatime",
	"nostrictatime", "lazytime", "nolazytime",
};
static const char *const ignored_opts[] = {
	"auto", "noauto", "nofail", "_netdev", "user", "nouser", "users", "defaults", "owner", "group",
	"comment", "nonempty",
};

static bool in_list(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s, list[i]) == 0)
			return true;
	return false;
}

static int split_lowerdirs(struct ovl_options *o, const char *v, char *err, size_t errlen)
{
	_cleanup_free_ char *copy = strdup(v);
	_cleanup_strv_free_ char **dirs = NULL;
	size_t n = 0;
	char *p, *save = NULL;

	if (!copy)
		return -ENOMEM;
	if (!*v || v[0] == ':' || v[strlen(v) - 1] == ':' || strstr(v, "::"))
		return fail(err, errlen, "invalid lowerdir '%s': empty layer", v);
	for (p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		char **nd;

		if (n >= OVL_MAX_LOWER)
			return fail(err, errlen, "too many lower layers (at most %d)", OVL_MAX_LOWER);
		nd = realloc(dirs, (n + 2) * sizeof(char *));
		if (!nd)
			return -ENOMEM;
		dirs = nd;
		dirs[n] = strdup(p);
		if (!dirs[n])
			return -ENOMEM;
		dirs[++n] = NULL;
	}
	strv_free(o->lowerdirs);
	o->lowerdirs = TAKE_PTR(dirs);
	o->n_lower = n;
	return 0;
}

static int parse_one(struct ovl_options *o, char *opt, char *err, size_t errlen)
{
	char *v = strchr(opt, '=');
	int r;

	if (v)
		*v++ = '\0';

	if (strcmp(opt, "lowerdir") == 0 && v)
		return split_lowerdirs(o, v, err, errlen);
	if (strcmp(opt, "upperdir") == 0 && v && *v)
		return set_str(&o->upperdir, v);
	if (strcmp(opt, "workdir") == 0 && v && *v)
		return set_str(&o->workdir, v);
	if (strcmp(opt, "statedir") == 0 && v && *v)
		return set_str(&o->statedir, v);
	if (strcmp(opt, "fsname") == 0 && v)
		return set_str(&o->source, v);
	if (strcmp(opt, "subtype") == 0)
		return 0; /* always "draftfs" */
	if ((strcmp(opt, "uidmapping") == 0 || strcmp(opt, "gidmapping") == 0) && v) {
		r = ovl_idmap_parse(v, opt[0] == 'u' ? &o->uidmap : &o->gidmap);
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			return fail(err, errlen, "invalid %s '%s': expected CONTAINER:HOST:SIZE[:...]%s", opt, v,
				    r == -ENOTUNIQ ? " without overlapping ranges" : "");
		return 0;
	}
	if (strcmp(opt, "timeout") == 0 && v) {
		char *end;
		double t;

		errno = 0;
		t = strtod(v, &end);
		if (errno || !*v || *end || !(t >= 0) || t > 1e9)
			return fail(err, errlen, "invalid timeout '%s': expected seconds", v);
		o->timeout = t;
		return 0;
	}
	if (strcmp(opt, "threads") == 0 && v) {
		uint32_t t;

		if (parse_u32(v, &t) < 0 || t < 1 || t > 256)
			return fail(err, errlen, "invalid threads '%s': expected 1..256", v);
		o->threads = t;
		return 0;
	}
	if (strcmp(opt, "passthrough") == 0) {
		if (v && (strcmp(v, "off") == 0 || strcmp(v, "0") == 0))
			o->passthrough = OVL_PT_OFF;
		else if (v && strcmp(v, "upper") == 0)
			o->passthrough = OVL_PT_UPPER;
		else if (!v || strcmp(v, "all") == 0 || strcmp(v, "1") == 0)
			o->passthrough = OVL_PT_ALL;
		else
			return fail(err, errlen, "invalid passthrough '%s': expected off, upper or all", v);
		return 0;
	}
	if (strcmp(opt, "ring_sched") == 0 && v) {
		if (strcmp(v, "idle") == 0)
			o->ring_sched_idle = true;
		else if (strcmp(v, "normal") == 0)
			o->ring_sched_idle = false;
		else
			return fail(err, errlen, "invalid ring_sched '%s': expected idle or normal", v);
		return 0;
	}
	if (strcmp(opt, "uring") == 0) {
		if (v && (strcmp(v, "off") == 0 || strcmp(v, "0") == 0))
			o->uring = OVL_URING_OFF;
		else if (!v || strcmp(v, "on") == 0 || strcmp(v, "1") == 0)
			o->uring = OVL_URING_ON;
		else if (strcmp(v, "auto") == 0)
			o->uring = OVL_URING_AUTO;
		else
			return fail(err, errlen, "invalid uring '%s': expected auto, on or off", v);
		return 0;
	}
	if (strcmp(opt, "metacopy") == 0) {
		if (v && (strcmp(v, "off") == 0 || strcmp(v, "0") == 0))
			o->metacopy = false;
		else if (!v || strcmp(v, "on") == 0 || strcmp(v, "1") == 0)
			o->metacopy = true;
		else
			return fail(err, errlen, "invalid metacopy '%s': expected on or off", v);
		return 0;
	}
	if (strcmp(opt, "acl") == 0) {
		if (v && (strcmp(v, "off") == 0 || strcmp(v, "0") == 0))
			o->acl = false;
		else if (!v || strcmp(v, "on") == 0 || strcmp(v, "1") == 0)
			o->acl = true;
		else
			return fail(err, errlen, "invalid acl '%s': expected on or off", v);
		return 0;
	}
	if (strcmp(opt, "xino") == 0) {
		if (v && (strcmp(v, "off") == 0 || strcmp(v, "0") == 0))
			o->xino = false;
		else if (!v || strcmp(v, "auto") == 0 || strcmp(v, "on") == 0 || strcmp(v, "1") == 0)
			o->xino = true;
		else
			return fail(err, errlen, "invalid xino '%s': expected auto, on or off", v);
		return 0;
	}
	if (!v && strcmp(opt, "noacl") == 0) { /* fuse-overlayfs' spelling */
		o->acl = false;
		return 0;
	}
	if (strcmp(opt, "writeback") == 0 || strcmp(opt, "fsync") == 0) {
		if (parse_bool(v, opt[0] == 'w' ? &o->writeback : &o->fsync) < 0)
			return fail(err, errlen, "invalid %s '%s': expected 0 or 1", opt, v);
		return 0;
	}
	if (strcmp(opt, "bgfill") == 0 && v) {
		if (parse_size(v, &o->bgfill) < 0)
			return fail(err, errlen, "invalid bgfill '%s': expected a size (k/M/G/T), 0 for off", v);
		return 0;
	}
	if ((strcmp(opt, "quota_bytes") == 0 || strcmp(opt, "quota_inodes") == 0) && v) {
		if (parse_size(v, opt[6] == 'b' ? &o->quota_bytes : &o->quota_inodes) < 0)
			return fail(err, errlen, "invalid %s '%s'", opt, v);
		return 0;
	}
	if (!v && strcmp(opt, "allow_other") == 0) {
		o->allow_other = true;
		return 0;
	}
	if (!v && strcmp(opt, "noallow_other") == 0) {
		o->allow_other = false;
		return 0;
	}
	if (!v && strcmp(opt, "default_permissions") == 0) {
		o->default_permissions = true;
		return 0;
	}
	if (!v && strcmp(opt, "debug") == 0) {
		o->debug = true;
		return 0;
	}
	if (!v && in_list(opt, generic_opts, ARRAY_SIZE(generic_opts))) {
		if (strcmp(opt, "ro") == 0)
			o->read_only = true;
		else if (strcmp(opt, "rw") == 0)
			o->read_only = false;
		return append_fuse_opt(o, opt);
	}
	if (in_list(opt, ignored_opts, ARRAY_SIZE(ignored_opts)) || strncmp(opt, "x-", 2) == 0)
		return 0;
	if (v)
		v[-1] = '=';
	return fail(err, errlen, "unknown or invalid option '%s'", opt);
}

static int parse_list(struct ovl_options *o, const char *list, char *err, size_t errlen)
{
	_cleanup_free_ char *copy = strdup(list);
	char *p, *save = NULL;
	int r;

	if (!copy)
		return -ENOMEM;
	for (p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		r = parse_one(o, p, err, errlen);
		if (r < 0)
			return r;
	}
	return 0;
}

int ovl_options_parse(int argc, char **argv, struct ovl_options *o, char *err, size_t errlen)
{
	const char *pos[2];
	size_t npos = 0;
	int r;

	o->allow_other = o->default_permissions = geteuid() == 0;
	o->timeout = 86400;
	o->writeback = false; /* kernel-side mtimes are never written back to us: see docs/fs.md */
	o->fsync = true;
	o->metacopy = true;
	o->acl = true;
	o->xino = true;
	o->bgfill = (uint64_t)64 << 20;
	o->passthrough = OVL_PT_ALL;
	o->uring = OVL_URING_AUTO;
	o->ring_sched_idle = true;
	o->threads = 8;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-o") == 0) {
			if (i + 1 >= argc)
				return fail(err, errlen, "option '-o' needs an argument");
			r = parse_list(o, argv[++i], err, errlen);
		} else if (strncmp(a, "-o", 2) == 0) {
			r = parse_list(o, a + 2, err, errlen);
		} else if (strcmp(a, "-f") == 0) {
			o->foreground = true;
			r = 0;
		} else if (strcmp(a, "-d") == 0 || strcmp(a, "--debug") == 0) {
			o->debug = o->foreground = true;
			r = 0;
		} else if (strcmp(a, "-s") == 0) {
			r = 0; /* single-threaded: accepted for compatibility, ignored */
		} else if (a[0] == '-' && a[1]) {
			return fail(err, errlen, "unknown option '%s'", a);
		} else {
			if (npos >= 2)
				return fail(err, errlen, "unexpected argument '%s'", a);
			pos[npos++] = a;
			r = 0;
		}
		if (r < 0)
			return r;
	}
	if (npos == 0)
		return fail(err, errlen, "missing mountpoint");
	if (npos == 2 && !o->source && set_str(&o->source, pos[0]) < 0)
		return -ENOMEM;
	if (set_str(&o->mountpoint, pos[npos - 1]) < 0)
		return -ENOMEM;
	if (!o->source && set_str(&o->source, "draftfs") < 0)
		return -ENOMEM;
	if (!o->lowerdirs)
		return fail(err, errlen, "missing option 'lowerdir='");
	if (!o->upperdir)
		return fail(err, errlen, "missing option 'upperdir='");
	if (!o->workdir)
		return fail(err, errlen, "missing option 'workdir='");
	return 0;
}
