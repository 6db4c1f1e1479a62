// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The change list (diff.h): one walk of upper, readdir + fstatat only, with
 * each upper entry looked up in the lower stack of its directory. Bytes are
 * compared only for regular files that exist on both sides with the same
 * size, so that a copy-up without a real change (open O_RDWR and close, or
 * touch and restore the mtime) is not reported. A metacopy's content is
 * its lower data file: when that is the very lower entry it shadows (a
 * chmod, chown or touch of a lower file), nothing is read at all.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl-data.h"
#include "diff.h"
#include "fdpath.h"
#include "json-util.h"

struct walk {
	const struct ovl_layers *layers;
	const struct ovl_sel *sel;
	unsigned flags;
	struct ovl_changes *out;
	cJSON *error; /* the error object of a failure that names its path */
};

void ovl_lstack_done(struct ovl_lstack *s)
{
	for (size_t i = 0; i < s->n; i++)
		safe_close(s->fds[i]);
	s->n = 0;
}

static void lstack_donep(struct ovl_lstack *s)
{
	ovl_lstack_done(s);
}
#define _cleanup_lstack_ _cleanup_(lstack_donep)

int ovl_lstack_root(const struct ovl_layers *layers, struct ovl_lstack *ret)
{
	struct ovl_lstack s = { 0 };

	if (layers->n_lower > ARRAY_SIZE(s.fds))
		return -E2BIG;
	for (size_t i = 0; i < layers->n_lower; i++) {
		int fd = openat(layers->lower_fds[i], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (fd < 0) {
			int r = -errno;

			ovl_lstack_done(&s);
			return r;
		}
		s.fds[s.n] = fd;
		s.layer[s.n++] = (int)i;
		if (ovl_dir_is_opaque(fd))
			break;
	}
	*ret = s;
	return 0;
}

int ovl_lstack_lookup(const struct ovl_lstack *s, const char *name, struct stat *ret_st, int *ret_layer,
                      struct ovl_lstack *ret_child)
{
	struct ovl_lstack child = { 0 };
	bool found = false;

	for (size_t i = 0; i < s->n; i++) {
		struct stat st;
		int fd;

		if (fstatat(s->fds[i], name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT || errno == ENOTDIR)
				continue;
			ovl_lstack_done(&child);
			return -errno;
		}
		if (ovl_is_whiteout(&st))
			break;
		if (!found) {
			*ret_st = st;
			*ret_layer = s->layer[i];
			found = true;
			if (!S_ISDIR(st.st_mode) || !ret_child)
				break;
		} else if (!S_ISDIR(st.st_mode)) {
			break;
		}
		fd = openat(s->fds[i], name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			int r = -errno;

			ovl_lstack_done(&child);
			return r;
		}
		child.fds[child.n] = fd;
		child.layer[child.n++] = s->layer[i];
		if (ovl_dir_is_opaque(fd))
			break;
	}
	if (ret_child)
		*ret_child = child;
	return found ? 1 : 0;
}

int ovl_lower_lookup_path(const struct ovl_layers *layers, const char *path, struct stat *ret_st, int *ret_layer,
                          struct ovl_lstack *ret_stack)
{
	_cleanup_lstack_ struct ovl_lstack cur = { 0 };
	_cleanup_free_ char *copy = strdup(path);
	struct stat st = { 0 };
	int layer = 0, r;
	char *p, *slash;

	if (!copy)
		return -ENOMEM;
	r = ovl_lstack_root(layers, &cur);
	if (r < 0)
		return r;
	if (cur.n == 0)
		return 0;
	if (fstat(cur.fds[0], &st) < 0)
		return -errno;
	layer = cur.layer[0];
	for (p = copy; *p; p = slash + 1) {
		struct ovl_lstack next = { 0 };

		slash = strchr(p, '/');
		if (slash)
			*slash = '\0';
		if (!S_ISDIR(st.st_mode))
			return 0;
		r = ovl_lstack_lookup(&cur, p, &st, &layer, &next);
		if (r <= 0)
			return r;
		ovl_lstack_done(&cur);
		cur = next;
		if (!slash)
			break;
	}
	*ret_st = st;
	*ret_layer = layer;
	if (ret_stack) {
		*ret_stack = cur;
		cur.n = 0;
	}
	return 1;
}

enum ovl_ftype ovl_ftype_from_mode(mode_t m)
{
	if (S_ISREG(m))
		return OVL_FT_FILE;
	if (S_ISDIR(m))
		return OVL_FT_DIR;
	if (S_ISLNK(m))
		return OVL_FT_SYMLINK;
	return OVL_FT_OTHER;
}

const char *ovl_status_to_string(enum ovl_status s)
{
	switch (s) {
	case OVL_ADDED:
		return "added";
	case OVL_MODIFIED:
		return "modified";
	case OVL_DELETED:
		return "deleted";
	case OVL_TYPE_CHANGED:
		return "type_changed";
	}
	return "unknown";
}

const char *ovl_ftype_to_string(enum ovl_ftype t)
{
	switch (t) {
	case OVL_FT_FILE:
		return "file";
	case OVL_FT_DIR:
		return "dir";
	case OVL_FT_SYMLINK:
		return "symlink";
	case OVL_FT_OTHER:
		return "other";
	case OVL_FT_NONE:
		break;
	}
	return "none";
}

static void change_done(struct ovl_change *c)
{
	free(c->path);
	free(c->old.target);
	free(c->new.target);
	free(c->origin);
	free(c->data_path);
}

void ovl_changes_free(struct ovl_changes *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++)
		change_done(&c->v[i]);
	free(c->v);
	free(c);
}

static int read_target(int dir_fd, const char *name, char **ret)
{
	char buf[4097];
	ssize_t n = readlinkat(dir_fd, name, buf, sizeof(buf) - 1);

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	*ret = strdup(buf);
	return *ret ? 0 : -ENOMEM;
}

static int meta_fill(struct ovl_meta *m, const struct stat *st, int dir_fd, const char *name)
{
	m->mode = st->st_mode;
	m->uid = st->st_uid;
	m->gid = st->st_gid;
	m->size = S_ISDIR(st->st_mode) ? 0 : st->st_size;
	m->rdev = st->st_rdev;
	m->mtime = st->st_mtim;
	m->ctime = st->st_ctim;
	m->dev = st->st_dev;
	m->ino = st->st_ino;
	m->nlink = st->st_nlink;
	if (S_ISLNK(st->st_mode))
		return read_target(dir_fd, name, &m->target);
	return 0;
}

static int add_change(struct walk *w, const char *path, enum ovl_status status, struct ovl_change **ret)
{
	struct ovl_changes *o = w->out;
	struct ovl_change *c;

	if (o->n == o->alloc) {
		size_t na = o->alloc ? o->alloc * 2 : 64;
		struct ovl_change *nv = realloc(o->v, na * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		o->v = nv;
		o->alloc = na;
	}
	c = &o->v[o->n];
	*c = (struct ovl_change){ .status = status, .old_layer = -1 };
	c->path = strdup(path);
	if (!c->path)
		return -ENOMEM;
	o->n++;
	*ret = c;
	return 0;
}

/* Fills the old side of @c from the lower entry @lst of @ls/@name. */
static int set_old(struct ovl_change *c, const struct stat *lst, int layer, const struct ovl_lstack *ls,
                   const char *name)
{
	c->old_type = ovl_ftype_from_mode(lst->st_mode);
	c->old_layer = layer;
	for (size_t i = 0; i < ls->n; i++)
		if (ls->layer[i] == layer)
			return meta_fill(&c->old, lst, ls->fds[i], name);
	return meta_fill(&c->old, lst, -1, name);
}

/* Fills the new side of @c from upper entry @ust of @upper_dir_fd/@name, whose data @loc (NULL: not a file) tells. */
static int set_new(const struct walk *w, struct ovl_change *c, const struct stat *ust, int upper_dir_fd,
                   const char *name, struct ovl_data_loc *loc)
{
	int r;

	c->new_type = ovl_ftype_from_mode(ust->st_mode);
	c->own_upper = true;
	if (w->flags & OVL_DIFF_ORIGINS) {
		char *origin = NULL;

		if (ovl_get_xattr_at(upper_dir_fd, name, OVL_XATTR_ORIGIN, &origin) >= 0) {
			c->has_origin = true;
			c->origin = origin;
		}
	}
	r = meta_fill(&c->new, ust, upper_dir_fd, name);
	if (r < 0 || !loc || !loc->metacopy)
		return r;
	c->metacopy = true;
	if (loc->path) {
		c->data_layer = loc->layer;
		c->data_path = TAKE_PTR(loc->path);
	}
	return 0;
}

/* Fills both sides of @c: the lower entry @lst and the upper entry @ust, both named @name. */
static int set_both(const struct walk *w, struct ovl_change *c, const struct stat *lst, int layer,
                    const struct ovl_lstack *ls, const struct stat *ust, int upper_dir_fd, const char *name,
                    struct ovl_data_loc *loc)
{
	int r = set_old(c, lst, layer, ls, name);

	return r < 0 ? r : set_new(w, c, ust, upper_dir_fd, name, loc);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct lname {
	char *name;
	size_t prio;
	bool whiteout;
};

static int cmp_lname(const void *a, const void *b)
{
	const struct lname *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	if (r)
		return r;
	return x->prio < y->prio ? -1 : x->prio > y->prio;
}

int ovl_lstack_names(const struct ovl_lstack *ls, char ***ret, size_t *ret_n)
{
	struct lname *v = NULL;
	size_t n = 0, alloc = 0, out_n = 0;
	char **out = NULL;
	int r = 0;

	for (size_t i = 0; i < ls->n && r >= 0; i++) {
		_cleanup_closedir_ DIR *d = NULL;
		int fd = openat(ls->fds[i], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		struct dirent *de;

		if (fd < 0) {
			r = -errno;
			break;
		}
		d = fdopendir(fd);
		if (!d) {
			r = -errno;
			safe_close(fd);
			break;
		}
		while ((errno = 0, de = readdir(d))) {
			struct stat st;
			bool wh = false;

			if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
				continue;
			/* a commit's temps (left by a crash until recovery): not workspace content */
			if (strncmp(de->d_name, OVL_COMMIT_TMP_PREFIX, strlen(OVL_COMMIT_TMP_PREFIX)) == 0)
				continue;
			if ((de->d_type == DT_CHR || de->d_type == DT_UNKNOWN) &&
			    fstatat(ls->fds[i], de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
				wh = ovl_is_whiteout(&st);
			if (n == alloc) {
				size_t na = alloc ? alloc * 2 : 32;
				struct lname *nv = realloc(v, na * sizeof(*nv));

				if (!nv) {
					r = -ENOMEM;
					break;
				}
				v = nv;
				alloc = na;
			}
			v[n].name = strdup(de->d_name);
			if (!v[n].name) {
				r = -ENOMEM;
				break;
			}
			v[n].prio = i;
			v[n++].whiteout = wh;
		}
		if (r >= 0 && errno)
			r = -errno;
	}
	if (r >= 0 && n > 0) {
		qsort(v, n, sizeof(*v), cmp_lname);
		out = calloc(n + 1, sizeof(char *));
		if (!out)
			r = -ENOMEM;
	}
	/* the first entry of each name (the highest layer) wins; a whiteout hides the name */
	for (size_t i = n; i-- > 0;)
		if (i > 0 && strcmp(v[i].name, v[i - 1].name) == 0)
			v[i].whiteout = true; /* shadowed by a higher layer: drop */
	for (size_t i = 0; i < n; i++) {
		if (r >= 0 && !v[i].whiteout)
			out[out_n++] = TAKE_PTR(v[i].name);
		free(v[i].name);
	}
	free(v);
	if (r < 0) {
		strv_free(out);
		return r;
	}
	*ret = out;
	*ret_n = out_n;
	return 0;
}

/* Reports every entry of the lower subtree @ls (at @dirpath) as deleted. */
static int walk_deleted(struct walk *w, const char *dirpath, const struct ovl_lstack *ls)
{
	_cleanup_strv_free_ char **names = NULL;
	size_t n = 0;
	int r;

	r = ovl_lstack_names(ls, &names, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		_cleanup_lstack_ struct ovl_lstack child = { 0 };
		_cleanup_free_ char *path = ovl_path_join(dirpath, names[i]);
		enum ovl_sel_match m;
		struct ovl_change *c;
		struct stat st;
		int layer;

		if (!path)
			return -ENOMEM;
		m = ovl_sel_match(w->sel, path);
		if (m == OVL_SEL_NONE)
			continue;
		r = ovl_lstack_lookup(ls, names[i], &st, &layer, &child);
		if (r < 0)
			return r;
		if (r == 0)
			continue;
		if (m == OVL_SEL_INSIDE) {
			r = add_change(w, path, OVL_DELETED, &c);
			if (r < 0)
				return r;
			c->content = true;
			r = set_old(c, &st, layer, ls, names[i]);
			if (r < 0)
				return r;
		}
		if (S_ISDIR(st.st_mode)) {
			r = walk_deleted(w, path, &child);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

/* 1 if the files open as @fa and @fb (read from their current offsets) hold the same bytes, 0 if not, or -errno. */
static int fds_equal(int fa, int fb)
{
	static __thread char ba[65536], bb[65536];

	for (;;) {
		ssize_t na = read(fa, ba, sizeof(ba)), nb, got = 0;

		if (na < 0)
			return -errno;
		while (got < na) {
			nb = read(fb, bb + got, (size_t)(na - got));
			if (nb < 0)
				return -errno;
			if (nb == 0)
				return 0;
			got += nb;
		}
		if (na == 0) {
			nb = read(fb, bb, 1);
			return nb == 0;
		}
		if (memcmp(ba, bb, (size_t)na) != 0)
			return 0;
	}
}

/*
 * Compares the content of upper file @name of @ufd (its data as @loc
 * says) with lower file @name of @lfd. Returns 1 if equal, 0 if not, or
 * -errno.
 */
static int files_equal(const struct walk *w, int ufd, const char *name, const struct ovl_data_loc *loc, int lfd)
{
	_cleanup_close_ int fa = -1, fb = -1;

	if (loc->metacopy)
		fa = ovl_upper_data_open(w->layers, loc, O_NONBLOCK, NULL);
	else
		fa = openat(ufd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fa < 0)
		return loc->metacopy ? fa : -errno;
	fb = openat(lfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fb < 0)
		return -errno;
	return fds_equal(fa, fb);
}

static int xattrs_differ(int dfd_a, const char *a, int dfd_b, const char *b)
{
	_cleanup_strv_free_ char **xa = NULL, **xb = NULL;
	int r;

	r = ovl_list_xattrs_at(dfd_a, a, &xa);
	if (r < 0)
		return r;
	r = ovl_list_xattrs_at(dfd_b, b, &xb);
	if (r < 0)
		return r;
	return !ovl_xattrs_equal(xa, xb);
}

static int lower_fd_of(const struct ovl_lstack *ls, int layer)
{
	for (size_t i = 0; i < ls->n; i++)
		if (ls->layer[i] == layer)
			return ls->fds[i];
	return -1;
}

/*
 * Compares the upper entry with the lower one of the same type. Sets
 * *content / *meta. Directories: mode and owner and xattrs only (their
 * mtime moves with every entry added, which is not a change of its own).
 * Regular files: @loc tells where the upper content is; a metacopy of the
 * very lower file it shadows has the same content, unread.
 */
static int compare_same_type(const struct walk *w, int ufd, const char *name, const struct stat *ust,
                             const struct ovl_data_loc *loc, int lfd, const struct stat *lst, bool *content,
                             bool *meta)
{
	int r;

	*content = false;
	*meta = ust->st_mode != lst->st_mode || ust->st_uid != lst->st_uid || ust->st_gid != lst->st_gid;
	if (!S_ISDIR(ust->st_mode) && !S_ISLNK(ust->st_mode))
		*meta = *meta || ust->st_mtim.tv_sec != lst->st_mtim.tv_sec ||
		        ust->st_mtim.tv_nsec != lst->st_mtim.tv_nsec;
	if (S_ISREG(ust->st_mode)) {
		if (loc->metacopy && (!loc->path || loc->st.st_size != ust->st_size)) {
			/* the data is gone (OVL_DIFF_LENIENT), or changed below the metacopy: cut or extended */
			*content = true;
		} else if (loc->metacopy && loc->st.st_dev == lst->st_dev && loc->st.st_ino == lst->st_ino) {
			*content = false;
		} else if (ust->st_size != lst->st_size) {
			*content = true;
		} else {
			r = files_equal(w, ufd, name, loc, lfd);
			if (r < 0)
				return r;
			*content = r == 0;
		}
	} else if (S_ISLNK(ust->st_mode)) {
		_cleanup_free_ char *ta = NULL, *tb = NULL;

		r = read_target(ufd, name, &ta);
		if (r < 0)
			return r;
		r = read_target(lfd, name, &tb);
		if (r < 0)
			return r;
		*content = strcmp(ta, tb) != 0;
	} else if (!S_ISDIR(ust->st_mode)) {
		*content = ust->st_rdev != lst->st_rdev;
	}
	if (!*meta && !S_ISLNK(ust->st_mode)) {
		r = xattrs_differ(ufd, name, lfd, name);
		if (r < 0)
			return r;
		*meta = r > 0;
	}
	return 0;
}

static int walk_upper(struct walk *w, const char *dirpath, int ufd, const struct ovl_lstack *ls, bool opaque);

/*
 * Where the content of upper regular file @name (at @path) is. Under
 * OVL_DIFF_LENIENT a metacopy whose data is gone or unreadable is
 * still a metacopy, with no data path.
 */
static int locate_data(struct walk *w, int ufd, const char *name, const char *path, struct ovl_data_loc *loc)
{
	_cleanup_json_ cJSON *err = NULL;
	int r;

	r = ovl_upper_data_locate(w->layers, ufd, name, path, loc, &err);
	if (r >= 0) {
		w->out->metacopies += loc->metacopy;
		return 0;
	}
	if ((w->flags & OVL_DIFF_LENIENT) && (r == -EIO || r == -EBADMSG)) {
		*loc = (struct ovl_data_loc){ .metacopy = true, .layer = -1 };
		w->out->metacopies++;
		return 0;
	}
	cJSON_Delete(w->error);
	w->error = TAKE_PTR(err);
	return r;
}

/*
 * An upper dir that kernel overlayfs moved with redirect_dir=on: below it,
 * the view merges the lower dir its redirect names, which this walk does
 * not follow. A diff would leave out what the move brought along, and a
 * commit of it would delete those files from the workspace: diff and
 * commit refuse it (status and discard, lenient, take the upper as it is,
 * so it can be discarded).
 */
static int refuse_redirected(struct walk *w, const char *path)
{
	cJSON *paths = cJSON_CreateArray();

	if (paths)
		cJSON_AddItemToArray(paths, cJSON_CreateString(path));
	cJSON_Delete(w->error);
	w->error = NULL;
	return ovl_ctl_error(&w->error, -EOPNOTSUPP, "refused", paths,
	                     "'%s' is a directory moved by kernel overlayfs with redirect_dir=on "
	                     "(trusted.overlay.redirect): its lower content is not followed here, so diff and commit "
	                     "refuse it; discard it, or move it back (and again through draftfs)",
	                     path);
}

/*
 * @hidden: an ancestor (or the parent) is an opaque upper dir, so no lower
 * content is visible at this depth: lower names missing from an upper dir
 * here are deletions, whatever the dir's own flag says (overlayfs stops
 * looking in lower layers below an opaque dir).
 */
static int visit_upper_entry(struct walk *w, const char *dirpath, int ufd, const char *name,
                             const struct ovl_lstack *ls, bool hidden)
{
	_cleanup_lstack_ struct ovl_lstack child = { 0 };
	_cleanup_free_ char *path = ovl_path_join(dirpath, name);
	_cleanup_data_loc_ struct ovl_data_loc loc = { 0 };
	struct ovl_lstack empty = { 0 };
	enum ovl_sel_match m;
	struct ovl_change *c = NULL;
	struct stat ust, lst;
	int layer = -1, found = 0, r;

	if (!path)
		return -ENOMEM;
	m = ovl_sel_match(w->sel, path);
	if (m == OVL_SEL_NONE)
		return 0;
	if (fstatat(ufd, name, &ust, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno; /* raced with a writer: gone */
	if (ls->n > 0) {
		found = ovl_lstack_lookup(ls, name, &lst, &layer, &child);
		if (found < 0)
			return found;
	}

	if (ovl_is_whiteout(&ust)) {
		if (!found)
			return 0;
		if (m == OVL_SEL_INSIDE) {
			r = add_change(w, path, OVL_DELETED, &c);
			if (r < 0)
				return r;
			c->content = true;
			r = set_both(w, c, &lst, layer, ls, &ust, ufd, name, NULL);
			c->new_type = OVL_FT_NONE;
			free(c->new.target);
			/* keep when the session deleted it (the whiteout's ctime), for conflict checks */
			c->new = (struct ovl_meta){ .ctime = ust.st_ctim };
			if (r < 0)
				return r;
		}
		if (S_ISDIR(lst.st_mode))
			return walk_deleted(w, path, &child);
		return 0;
	}

	if (S_ISDIR(ust.st_mode)) {
		_cleanup_close_ int cfd = -1;
		bool opq;

		cfd = openat(ufd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (cfd < 0)
			return errno == ENOENT ? 0 : -errno;
		opq = ovl_dir_is_opaque(cfd);
		if (!(w->flags & OVL_DIFF_LENIENT) && ovl_dir_is_redirected(cfd))
			return refuse_redirected(w, path);
		if (!found || !S_ISDIR(lst.st_mode)) {
			if (m == OVL_SEL_INSIDE) {
				r = add_change(w, path, found ? OVL_TYPE_CHANGED : OVL_ADDED, &c);
				if (r < 0)
					return r;
				c->content = true;
				c->upper_opaque = opq;
				r = found ? set_both(w, c, &lst, layer, ls, &ust, ufd, name, NULL)
				          : set_new(w, c, &ust, ufd, name, NULL);
				if (r < 0)
					return r;
			}
			return walk_upper(w, path, cfd, &empty, false);
		}
		if (m == OVL_SEL_INSIDE) {
			bool content, meta;

			r = compare_same_type(w, ufd, name, &ust, &loc, lower_fd_of(ls, layer), &lst, &content, &meta);
			if (r < 0)
				return r;
			if (meta || opq) {
				r = add_change(w, path, OVL_MODIFIED, &c);
				if (r < 0)
					return r;
				c->metadata = meta;
				c->upper_opaque = opq;
				r = set_both(w, c, &lst, layer, ls, &ust, ufd, name, NULL);
				if (r < 0)
					return r;
			}
		}
		return walk_upper(w, path, cfd, &child, opq || hidden);
	}

	if (m != OVL_SEL_INSIDE)
		return 0;
	/*
	 * Where the data is (one xattr read, from disk when cold): for the
	 * readers of data (OVL_DIFF_DATA), else only where the content must be
	 * compared with a lower file of the same size.
	 */
	if (S_ISREG(ust.st_mode) && ((w->flags & OVL_DIFF_DATA) || (found && S_ISREG(lst.st_mode) &&
								     ust.st_size == lst.st_size))) {
		r = locate_data(w, ufd, name, path, &loc);
		if (r < 0)
			return r;
	}
	if (!found) {
		r = add_change(w, path, OVL_ADDED, &c);
		if (r < 0)
			return r;
		c->content = true;
		return set_new(w, c, &ust, ufd, name, &loc);
	}
	if (S_ISDIR(lst.st_mode) || (ust.st_mode & S_IFMT) != (lst.st_mode & S_IFMT)) {
		r = add_change(w, path, OVL_TYPE_CHANGED, &c);
		if (r < 0)
			return r;
		c->content = true;
		r = set_both(w, c, &lst, layer, ls, &ust, ufd, name, &loc);
		if (r < 0)
			return r;
		if (S_ISDIR(lst.st_mode))
			return walk_deleted(w, path, &child);
		return 0;
	}
	{
		bool content, meta;

		r = compare_same_type(w, ufd, name, &ust, &loc, lower_fd_of(ls, layer), &lst, &content, &meta);
		if (r < 0)
			return r;
		if (!content && !meta)
			return 0;
		r = add_change(w, path, OVL_MODIFIED, &c);
		if (r < 0)
			return r;
		c->content = content;
		c->metadata = meta;
		return set_both(w, c, &lst, layer, ls, &ust, ufd, name, &loc);
	}
}

static int walk_upper(struct walk *w, const char *dirpath, int ufd, const struct ovl_lstack *ls, bool opaque)
{
	_cleanup_closedir_ DIR *d = NULL;
	char **names = NULL;
	size_t n = 0, alloc = 0;
	struct dirent *de;
	int r;

	r = opendir_at(ufd, &d);
	if (r < 0)
		return r;
	while ((errno = 0, de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n + 1 >= alloc) {
			size_t na = alloc ? alloc * 2 : 32;
			char **nv = realloc(names, na * sizeof(char *));

			if (!nv) {
				r = -ENOMEM;
				goto out;
			}
			names = nv;
			alloc = na;
		}
		names[n] = strdup(de->d_name);
		if (!names[n]) {
			r = -ENOMEM;
			goto out;
		}
		names[++n] = NULL;
	}
	if (errno) {
		r = -errno;
		goto out;
	}
	for (size_t i = 0; i < n && r >= 0; i++)
		r = visit_upper_entry(w, dirpath, ufd, names[i], ls, opaque);
	if (r >= 0 && opaque && ls->n > 0) {
		_cleanup_strv_free_ char **lnames = NULL;
		size_t ln = 0;

		if (n > 1)
			qsort(names, n, sizeof(char *), cmp_names);
		r = ovl_lstack_names(ls, &lnames, &ln);
		for (size_t i = 0; i < ln && r >= 0; i++) {
			_cleanup_lstack_ struct ovl_lstack child = { 0 };
			_cleanup_free_ char *path = NULL;
			const char *key = lnames[i];
			enum ovl_sel_match m;
			struct ovl_change *c;
			struct stat st;
			int layer;

			if (n > 0 && bsearch(&key, names, n, sizeof(char *), cmp_names))
				continue;
			path = ovl_path_join(dirpath, lnames[i]);
			if (!path) {
				r = -ENOMEM;
				break;
			}
			m = ovl_sel_match(w->sel, path);
			if (m == OVL_SEL_NONE)
				continue;
			r = ovl_lstack_lookup(ls, lnames[i], &st, &layer, &child);
			if (r <= 0)
				continue;
			if (m == OVL_SEL_INSIDE) {
				r = add_change(w, path, OVL_DELETED, &c);
				if (r < 0)
					break;
				c->content = true;
				r = set_old(c, &st, layer, ls, lnames[i]);
				if (r < 0)
					break;
			}
			if (S_ISDIR(st.st_mode))
				r = walk_deleted(w, path, &child);
		}
	}
out:
	strv_free(names);
	return r;
}

static int cmp_change(const void *a, const void *b)
{
	return ovl_path_cmp(((const struct ovl_change *)a)->path, ((const struct ovl_change *)b)->path);
}

int ovl_diff_compute(const struct ovl_layers *layers, const struct ovl_sel *sel, unsigned flags,
                     struct ovl_changes **ret, cJSON **ret_error)
{
	_cleanup_(ovl_changes_freep) struct ovl_changes *out = NULL;
	_cleanup_lstack_ struct ovl_lstack root = { 0 };
	_cleanup_close_ int ufd = -1;
	struct walk w = { 0 };
	int r;

	out = calloc(1, sizeof(*out));
	if (!out)
		return -ENOMEM;
	r = ovl_lstack_root(layers, &root);
	if (r >= 0) {
		ufd = openat(layers->upper_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (ufd < 0)
			r = -errno;
	}
	if (r >= 0) {
		w = (struct walk){ .layers = layers, .sel = sel, .flags = flags, .out = out };
		r = walk_upper(&w, "", ufd, &root, ovl_dir_is_opaque(ufd));
	}
	if (r < 0 && w.error && ret_error) {
		/* a path at fault, named */
		cJSON_Delete(*ret_error);
		*ret_error = TAKE_PTR(w.error);
		return r;
	}
	cJSON_Delete(w.error);
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "io", NULL, "cannot compute the changes of '%s'",
		                     layers->mountpoint ?: "the session");
	if (out->n > 1)
		qsort(out->v, out->n, sizeof(out->v[0]), cmp_change);
	for (size_t i = 0; i < out->n; i++) {
		const struct ovl_change *c = &out->v[i];
		struct ovl_summary *s = &out->summary;

		switch (c->status) {
		case OVL_ADDED:
			s->added++;
			break;
		case OVL_MODIFIED:
			s->modified++;
			break;
		case OVL_DELETED:
			s->deleted++;
			break;
		case OVL_TYPE_CHANGED:
			s->type_changed++;
			break;
		}
		if (c->content)
			s->content_changed++;
		else if (c->metadata)
			s->metadata_only++;
		if (c->content) {
			if (c->new_type == OVL_FT_FILE)
				s->bytes_added += (uint64_t)c->new.size;
			if (c->old_type == OVL_FT_FILE)
				s->bytes_removed += (uint64_t)c->old.size;
		}
	}
	*ret = TAKE_PTR(out);
	return 0;
}

int ovl_diff_check_selection(const struct ovl_layers *layers, const struct ovl_sel *sel,
                             const struct ovl_changes *c, cJSON **ret_error)
{
	_cleanup_json_ cJSON *missing = NULL;
	const char *first = NULL;

	for (size_t i = 0; i < sel->n; i++) {
		_cleanup_close_ int fd = -1;
		bool known = false;
		struct stat st;
		int layer;

		for (size_t j = 0; j < c->n && !known; j++)
			known = ovl_path_has_prefix(c->v[j].path, sel->v[i]);
		if (known)
			continue;
		fd = openat_beneath(layers->upper_fd, sel->v[i], O_PATH, 0);
		if (fd >= 0 && fstat(fd, &st) == 0 && !ovl_is_whiteout(&st))
			continue;
		if (fd < 0 && ovl_lower_lookup_path(layers, sel->v[i], &st, &layer, NULL) > 0)
			continue;
		if (!missing)
			missing = cJSON_CreateArray();
		if (!missing)
			return -ENOMEM;
		cJSON_AddItemToArray(missing, cJSON_CreateString(sel->v[i]));
		if (!first)
			first = sel->v[i];
	}
	if (!missing)
		return 0;
	return ovl_ctl_error(ret_error, -ENOENT, "not_found", TAKE_PTR(missing), "no such path in the session: '%s'",
	                     first);
}
