// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The OCI layer tar (layertar.h), written by hand: the format is small
 * (512-byte ustar headers, pax 'x' records for long names, big numbers and
 * xattrs) and we need exact control over whiteout order. Order rules:
 * entries follow the change list order (parents first); a whiteout for a
 * name comes before anything this layer puts at that name; an opaque
 * directory is written with its ".wh..wh..opq" marker and its whole upper
 * subtree, and the change list entries below it are then skipped.
 *
 * Each file's content is first copied into an unnamed temp file (a
 * consistent snapshot, see ovl_snapshot_tmpfile) so the size in the header
 * always matches the bytes that follow, even while writers keep writing.
 * A metacopy's content is its lower data file; overlay-private xattrs
 * (trusted.overlay.*, trusted.draftbox.*) never go into the tar.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ctl-data.h"
#include "ctl-util.h"
#include "fdpath.h"
#include "layertar.h"
#include "prefetch.h"

struct tarw {
	const struct ovl_ctl_env *env;
	int fd;
	int tmp_dir_fd;
	char buf[65536];
	size_t len;
	char *unrepresentable; /* the first name a layer cannot hold (see write_upper_entry) */
};

static int flush(struct tarw *t)
{
	int r;

	if (t->len == 0)
		return 0;
	r = write_full(t->fd, t->buf, t->len);
	t->len = 0;
	return r;
}

static int put(struct tarw *t, const void *data, size_t size)
{
	const char *p = data;
	int r;

	while (size > 0) {
		size_t n = MIN(size, sizeof(t->buf) - t->len);

		memcpy(t->buf + t->len, p, n);
		t->len += n;
		p += n;
		size -= n;
		if (t->len == sizeof(t->buf)) {
			r = flush(t);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int pad(struct tarw *t, uint64_t size)
{
	static const char zero[512];
	size_t rest = (size_t)(size % 512);

	return rest ? put(t, zero, 512 - rest) : 0;
}

/* Writes @v as width-1 octal digits and a NUL; callers keep v in range. */
static void octal(char *field, size_t width, uint64_t v)
{
	char tmp[32];

	snprintf(tmp, sizeof(tmp), "%0*" PRIo64, (int)width - 1, v);
	memcpy(field, tmp + strlen(tmp) - (width - 1), width - 1);
	field[width - 1] = '\0';
}

struct tar_entry {
	const char *path; /* without leading "./", dirs without trailing "/" */
	char type;        /* '0' file, '2' symlink, '3' chr, '4' blk, '5' dir, '6' fifo */
	mode_t mode;
	uid_t uid;
	gid_t gid;
	uint64_t size;
	int64_t mtime;
	const char *link;
	dev_t rdev;
	char **xattrs; /* "name=hex" */
};

static int pax_record(char **buf, size_t *len, const char *key, const char *val, size_t vlen)
{
	size_t base = strlen(key) + vlen + 3, n = base, digits;
	char *nb;

	/* the length prefix counts itself */
	for (;;) {
		digits = (size_t)snprintf(NULL, 0, "%zu", n);
		if (base + digits == n)
			break;
		n = base + digits;
	}
	nb = realloc(*buf, *len + n + 1);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	snprintf(nb + *len, n + 1, "%zu %s=", n, key);
	memcpy(nb + *len + digits + 1 + strlen(key) + 1, val, vlen);
	nb[*len + n - 1] = '\n';
	*len += n;
	return 0;
}

static int unhex(const char *hex, char **ret, size_t *ret_len)
{
	size_t n = strlen(hex) / 2;
	char *out = malloc(n + 1);

	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1) {
			free(out);
			return -EINVAL;
		}
		out[i] = (char)v;
	}
	*ret = out;
	*ret_len = n;
	return 0;
}

static int write_header(struct tarw *t, const struct tar_entry *e)
{
	char h[512];
	_cleanup_free_ char *pax = NULL;
	size_t pax_len = 0, plen = strlen(e->path) + (e->type == '5' ? 1 : 0);
	unsigned sum = 0;
	int r;

	if (plen > 100 || (e->link && strlen(e->link) > 100)) {
		_cleanup_free_ char *p = NULL;

		if (asprintf(&p, "%s%s", e->path, e->type == '5' ? "/" : "") < 0)
			return -ENOMEM;
		r = pax_record(&pax, &pax_len, "path", p, strlen(p));
		if (r >= 0 && e->link && strlen(e->link) > 100)
			r = pax_record(&pax, &pax_len, "linkpath", e->link, strlen(e->link));
		if (r < 0)
			return r;
	}
	if (e->size > 077777777777ULL) {
		char v[32];

		snprintf(v, sizeof(v), "%" PRIu64, e->size);
		r = pax_record(&pax, &pax_len, "size", v, strlen(v));
		if (r < 0)
			return r;
	}
	if (e->uid > 07777777 || e->gid > 07777777) {
		char v[32];

		snprintf(v, sizeof(v), "%u", (unsigned)e->uid);
		r = pax_record(&pax, &pax_len, "uid", v, strlen(v));
		snprintf(v, sizeof(v), "%u", (unsigned)e->gid);
		if (r >= 0)
			r = pax_record(&pax, &pax_len, "gid", v, strlen(v));
		if (r < 0)
			return r;
	}
	for (char **x = e->xattrs; x && *x; x++) {
		_cleanup_free_ char *key = NULL, *val = NULL;
		const char *eq = strchr(*x, '=');
		size_t vlen;

		if (!eq)
			continue;
		if (asprintf(&key, "SCHILY.xattr.%.*s", (int)(eq - *x), *x) < 0)
			return -ENOMEM;
		r = unhex(eq + 1, &val, &vlen);
		if (r >= 0)
			r = pax_record(&pax, &pax_len, key, val, vlen);
		if (r < 0)
			return r;
	}
	if (pax) {
		struct tar_entry x = { .path = "PaxHeaders/entry", .type = 'x', .mode = 0644, .size = pax_len,
		                       .mtime = e->mtime };

		r = write_header(t, &x);
		if (r >= 0)
			r = put(t, pax, pax_len);
		if (r >= 0)
			r = pad(t, pax_len);
		if (r < 0)
			return r;
	}

	memset(h, 0, sizeof(h));
	if (plen <= 100) {
		memcpy(h, e->path, strlen(e->path));
		if (e->type == '5')
			h[plen - 1] = '/';
	} else {
		memcpy(h, e->path, 99); /* the pax 'path' record above wins */
	}
	octal(h + 100, 8, e->mode & 07777);
	octal(h + 108, 8, e->uid > 07777777 ? 0 : e->uid);
	octal(h + 116, 8, e->gid > 07777777 ? 0 : e->gid);
	octal(h + 124, 12, e->size > 077777777777ULL ? 0 : e->size);
	octal(h + 136, 12, e->mtime > 0 ? (uint64_t)e->mtime : 0);
	memset(h + 148, ' ', 8);
	h[156] = e->type;
	if (e->link)
		strncpy(h + 157, e->link, 100);
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	if (e->type == '3' || e->type == '4') {
		octal(h + 329, 8, major(e->rdev));
		octal(h + 337, 8, minor(e->rdev));
	}
	for (size_t i = 0; i < sizeof(h); i++)
		sum += (unsigned char)h[i];
	snprintf(h + 148, 8, "%06o", sum);
	h[155] = ' ';
	return put(t, h, sizeof(h));
}

static int write_whiteout(struct tarw *t, const char *path, int64_t mtime)
{
	_cleanup_free_ char *wh = NULL;
	const char *slash = strrchr(path, '/');
	struct tar_entry e = { .type = '0', .mode = 0600, .mtime = mtime };

	if (slash) {
		if (asprintf(&wh, "%.*s/.wh.%s", (int)(slash - path), path, slash + 1) < 0)
			return -ENOMEM;
	} else if (asprintf(&wh, ".wh.%s", path) < 0) {
		return -ENOMEM;
	}
	e.path = wh;
	return write_header(t, &e);
}

/* Writes upper entry @name of @dir_fd at @path (content and all), not recursing. */
static int write_upper_entry(struct tarw *t, int dir_fd, const char *name, const char *path, const struct stat *st)
{
	_cleanup_strv_free_ char **xattrs = NULL;
	_cleanup_free_ char *target = NULL;
	_cleanup_close_ int tmp = -1;
	struct tar_entry e = { .path = path, .mode = st->st_mode, .uid = st->st_uid, .gid = st->st_gid,
	                       .mtime = st->st_mtim.tv_sec, .rdev = st->st_rdev };
	struct stat snap;
	int r;

	/*
	 * A real file named ".wh.X" would read as a whiteout of X (".wh..wh..opq" as
	 * an opaque marker) to every applier: the layer would delete what the view
	 * keeps. OCI layers have no escape for it, so the tar refuses such a name.
	 */
	if (strncmp(name, ".wh.", 4) == 0) {
		if (!t->unrepresentable)
			t->unrepresentable = strdup(path);
		return -EILSEQ;
	}
	if (!S_ISLNK(st->st_mode)) {
		r = ovl_list_xattrs_at(dir_fd, name, &xattrs);
		if (r < 0)
			return r;
		e.xattrs = xattrs;
	}
	switch (st->st_mode & S_IFMT) {
	case S_IFDIR:
		e.type = '5';
		return write_header(t, &e);
	case S_IFLNK: {
		char buf[4097];
		ssize_t n = readlinkat(dir_fd, name, buf, sizeof(buf) - 1);

		if (n < 0)
			return -errno;
		buf[n] = '\0';
		e.type = '2';
		e.link = buf;
		return write_header(t, &e);
	}
	case S_IFCHR:
		e.type = '3';
		return write_header(t, &e);
	case S_IFBLK:
		e.type = '4';
		return write_header(t, &e);
	case S_IFIFO:
		e.type = '6';
		return write_header(t, &e);
	case S_IFREG:
		break;
	default:
		return 0; /* sockets have no tar form */
	}
	r = ovl_snapshot_tmpfile(t->env->layers, dir_fd, name, path, t->env->live, t->tmp_dir_fd, &tmp, &snap);
	if (r < 0)
		return r;
	e.type = '0';
	e.size = (uint64_t)snap.st_size;
	e.mode = snap.st_mode;
	e.mtime = snap.st_mtim.tv_sec;
	r = write_header(t, &e);
	if (r >= 0)
		r = flush(t);
	if (r >= 0)
		r = ovl_copy_fd(tmp, t->fd, e.size);
	if (r >= 0)
		r = pad(t, e.size);
	return r;
}

/* Writes the whole upper subtree below dir @dir_fd at @dirpath (an opaque dir's content). */
static int write_subtree(struct tarw *t, int dir_fd, const char *dirpath, unsigned depth)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int r;

	if (depth > 4096)
		return -ELOOP;
	r = opendir_at(dir_fd, &d);
	if (r < 0)
		return r;
	while ((de = readdir(d))) {
		_cleanup_free_ char *path = NULL;
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || ovl_is_whiteout(&st))
			continue;
		path = ovl_path_join(dirpath, de->d_name);
		if (!path)
			return -ENOMEM;
		r = write_upper_entry(t, dirfd(d), de->d_name, path, &st);
		if (r < 0)
			return r;
		if (S_ISDIR(st.st_mode)) {
			_cleanup_close_ int cfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (cfd < 0)
				return -errno;
			r = write_subtree(t, cfd, path, depth + 1);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int ovl_layertar_write(const struct ovl_ctl_env *env, const struct ovl_changes *c, int fd, cJSON **ret_error)
{
	static const char zero[1024];
	_cleanup_(ovl_prefetch_stopp) struct ovl_prefetch *prefetch = NULL;
	struct tarw *t;
	const char *covered = NULL; /* a whiteout'd or opaque-written dir: skip what is below */
	int r = 0;

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->env = env;
	t->fd = fd;
	t->tmp_dir_fd = env->layers->work_fd >= 0 ? env->layers->work_fd : env->layers->state_fd;
	prefetch = ovl_prefetch_start(env->layers, c);
	for (size_t i = 0; i < c->n && r >= 0; i++) {
		const struct ovl_change *e = &c->v[i];
		_cleanup_close_ int pfd = -1;
		const char *name;
		struct stat st;

		ovl_prefetch_progress(prefetch, i);
		if (covered && ovl_path_has_prefix(e->path, covered) && strcmp(e->path, covered) != 0)
			continue;
		covered = NULL;
		if (e->new_type == OVL_FT_NONE) {
			r = write_whiteout(t, e->path, e->old.mtime.tv_sec);
			covered = e->path;
			continue;
		}
		if (e->status == OVL_TYPE_CHANGED) {
			r = write_whiteout(t, e->path, e->new.mtime.tv_sec);
			if (r < 0)
				break;
		}
		pfd = openat_beneath_parent(env->layers->upper_fd, e->path, &name);
		if (pfd < 0) {
			r = pfd;
			break;
		}
		if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = errno == ENOENT ? 0 : -errno; /* removed by a writer since the walk */
			continue;
		}
		r = write_upper_entry(t, pfd, name, e->path, &st);
		if (e->status == OVL_TYPE_CHANGED && e->old_type == OVL_FT_DIR)
			covered = e->path; /* the lower children went with the whiteout */
		if (r < 0 || !S_ISDIR(st.st_mode) || !e->upper_opaque || e->old_type != OVL_FT_DIR)
			continue;
		{
			_cleanup_free_ char *opq = NULL;
			_cleanup_close_ int dfd = -1;
			struct tar_entry m = { .type = '0', .mode = 0600, .mtime = st.st_mtim.tv_sec };

			if (asprintf(&opq, "%s/.wh..wh..opq", e->path) < 0) {
				r = -ENOMEM;
				break;
			}
			m.path = opq;
			r = write_header(t, &m);
			if (r < 0)
				break;
			dfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (dfd < 0) {
				r = -errno;
				break;
			}
			r = write_subtree(t, dfd, e->path, 0);
			covered = e->path;
		}
	}
	if (r >= 0)
		r = put(t, zero, sizeof(zero));
	if (r >= 0)
		r = flush(t);
	if (r == -EILSEQ && t->unrepresentable) {
		cJSON *bad = cJSON_CreateArray();

		if (bad)
			cJSON_AddItemToArray(bad, cJSON_CreateString(t->unrepresentable));
		r = ovl_ctl_error(ret_error, r, "refused", bad,
		                  "'%s' cannot be in an OCI layer: a name starting with '.wh.' is a whiteout there "
		                  "(the json and patch diffs show it)", t->unrepresentable);
	} else if (r < 0) {
		r = ovl_ctl_error(ret_error, r, "io", NULL, "cannot write the tar diff");
	}
	free(t->unrepresentable);
	free(t);
	return r;
}
