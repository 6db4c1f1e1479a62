// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The content of upper regular files (ctl-data.h): where a metacopy's data
 * is, opening it, giving a metacopy its own data, finding the metacopies
 * that depend on another path, and consistent snapshots of upper content.
 * The metacopy format itself is read by metacopy.c (shared with the core);
 * the data path is looked up in the lower view as overlayfs does
 * (ovl_lower_lookup_path: lower whiteouts and opaque dirs honoured).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "bgfill.h"
#include "ctl-data.h"
#include "diff.h"
#include "fdpath.h"
#include "metacopy.h"

void ovl_data_loc_done(struct ovl_data_loc *loc)
{
	free(loc->path);
	*loc = (struct ovl_data_loc){ 0 };
}

static cJSON *one_path(const char *path)
{
	cJSON *a = cJSON_CreateArray();

	if (a)
		cJSON_AddItemToArray(a, cJSON_CreateString(path));
	return a;
}

/*
 * The lower-view path of the data of the metacopy at @path, from what
 * ovl_metacopy_get() returned (@kind 1 or 2, @value). Returns 0 and *ret
 * (new string), -EBADMSG when it is no clean relative path, or -ENOMEM.
 */
static int data_path_of(const char *path, int kind, const char *value, char **ret)
{
	const char *slash = strrchr(path, '/');
	char *p;

	if (kind == 1)
		p = strdup(*value ? value : path);
	else if (asprintf(&p, "%.*s%s%s", slash ? (int)(slash - path) : 0, path, slash ? "/" : "", value) < 0)
		p = NULL;
	if (!p)
		return -ENOMEM;
	if (!*p || path_check_relative(p) < 0) {
		free(p);
		return -EBADMSG;
	}
	*ret = p;
	return 0;
}

/* Reads the metacopy state of @fd: 0 (a full copy), or 1 and *ret_data_path (new string), or -errno. */
static int read_state(int fd, const char *path, char **ret_data_path)
{
	char value[PATH_MAX];
	int kind;

	kind = ovl_metacopy_get(fd, value);
	/* Being filled in the background: the view takes its data as the upper file's; wait until it is. */
	if (kind > 0 && ovl_bgfill_holds(fd)) {
		int r = ovl_bgfill_wait_fd(fd);

		if (r < 0)
			return r;
		kind = ovl_metacopy_get(fd, value);
	}
	if (kind <= 0)
		return kind;
	return data_path_of(path, kind, value, ret_data_path) < 0 ? -EBADMSG : 1;
}

static int bad_state(cJSON **ret_error, int r, const char *path)
{
	if (r == -EBADMSG)
		return ovl_ctl_error(ret_error, r, "io", one_path(path),
		                     "'%s' is a metacopy whose " OVL_XATTR_REDIRECT " is malformed", path);
	return ovl_ctl_error(ret_error, r, "io", one_path(path), "cannot read the metacopy xattrs of '%s'", path);
}

int ovl_upper_data_locate_fd(const struct ovl_layers *l, int fd, const char *path, struct ovl_data_loc *ret,
                             cJSON **ret_error)
{
	_cleanup_free_ char *dpath = NULL;
	struct stat st;
	int layer, r;

	r = read_state(fd, path, &dpath);
	if (r < 0)
		return bad_state(ret_error, r, path);
	if (r == 0) {
		*ret = (struct ovl_data_loc){ 0 };
		return 0;
	}
	r = ovl_lower_lookup_path(l, dpath, &st, &layer, NULL);
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "io", one_path(path),
		                     "cannot look up the data of metacopy '%s' ('/%s' in the lower layers)", path, dpath);
	if (r == 0 || !S_ISREG(st.st_mode))
		return ovl_ctl_error(ret_error, -EIO, "io", one_path(path),
		                     "the data of metacopy '%s' is missing: '/%s' is %s in the lower layers", path, dpath,
		                     r == 0 ? "not found" : "not a regular file");
	*ret = (struct ovl_data_loc){ .metacopy = true, .path = TAKE_PTR(dpath), .layer = layer, .st = st };
	return 0;
}

int ovl_upper_data_locate(const struct ovl_layers *l, int dir_fd, const char *name, const char *path,
                          struct ovl_data_loc *ret, cJSON **ret_error)
{
	_cleanup_close_ int fd = -1;
	int r;

	r = ovl_metacopy_at(dir_fd, name);
	if (r <= 0) {
		if (r < 0 && r != -ENOENT) /* gone: a writer removed it since the caller saw it */
			return bad_state(ret_error, r, path);
		*ret = (struct ovl_data_loc){ 0 };
		return 0;
	}
	fd = openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return ovl_ctl_error(ret_error, -errno, "io", one_path(path), "cannot open '%s' in upper", path);
	return ovl_upper_data_locate_fd(l, fd, path, ret, ret_error);
}

int ovl_upper_data_open(const struct ovl_layers *l, const struct ovl_data_loc *loc, int flags, struct stat *ret_st)
{
	_cleanup_close_ int pfd = -1;
	struct stat st;
	int fd;

	if (!loc->metacopy || loc->layer < 0 || (size_t)loc->layer >= l->n_lower)
		return -EINVAL;
	pfd = openat_beneath(l->lower_fds[loc->layer], loc->path, O_PATH, 0);
	if (pfd == -ENOENT || pfd == -ENOTDIR || pfd == -ELOOP || pfd == -EXDEV)
		return -EIO; /* changed since it was located */
	if (pfd < 0)
		return pfd;
	if (fstat(pfd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_dev != loc->st.st_dev || st.st_ino != loc->st.st_ino)
		return -EIO;
	fd = fd_reopen(pfd, O_RDONLY | O_NOCTTY | flags);
	if (fd < 0)
		return fd;
	if (ret_st)
		*ret_st = st;
	return fd;
}

int ovl_upper_data_copy(int upper_fd, int data_fd, off_t data_size, int out_fd, off_t size)
{
	int r;

	if (data_fd < 0)
		return ovl_copy_fd(upper_fd, out_fd, (uint64_t)size);
	r = ovl_copy_fd(data_fd, out_fd, (uint64_t)MIN(data_size, size));
	if (r < 0)
		return r;
	if (data_size < size && ftruncate(out_fd, size) < 0)
		return -errno;
	return 0;
}

int ovl_upper_materialize(const struct ovl_layers *l, const char *path, cJSON **ret_error)
{
	_cleanup_data_loc_ struct ovl_data_loc loc = { 0 };
	_cleanup_close_ int pfd = -1, fd = -1, in = -1;
	struct stat st, dst;
	int r;

	/* O_PATH first: only a regular file is ever opened for writing */
	pfd = openat_beneath(l->upper_fd, path, O_PATH, 0);
	if (pfd == -ENOENT)
		return 0;
	if (pfd < 0)
		return ovl_ctl_error(ret_error, pfd, "io", one_path(path), "cannot open '%s' in upper", path);
	if (fstat(pfd, &st) < 0)
		return ovl_ctl_error(ret_error, -errno, "io", one_path(path), "cannot stat '%s' in upper", path);
	if (!S_ISREG(st.st_mode))
		return 0;
	r = ovl_upper_data_locate_fd(l, pfd, path, &loc, ret_error);
	if (r < 0)
		return r;
	if (!loc.metacopy)
		return 0;
	in = ovl_upper_data_open(l, &loc, 0, &dst);
	if (in < 0)
		return ovl_ctl_error(ret_error, in, "io", one_path(path), "cannot open the data of metacopy '%s' ('/%s')",
		                     path, loc.path);
	fd = fd_reopen(pfd, O_WRONLY | O_NOCTTY);
	if (fd < 0)
		return ovl_ctl_error(ret_error, fd, "io", one_path(path), "cannot open '%s' in upper for writing", path);
	r = ovl_metacopy_fill(fd, in, st.st_size, true);
	if (r >= 0)
		r = ovl_metacopy_make_plain(fd, true);
	if (r < 0)
		return ovl_ctl_error(ret_error, r, "io", one_path(path),
		                     "cannot copy the data of metacopy '%s' ('/%s') into upper", path, loc.path);
	return 1;
}

struct redirected_walk {
	const struct ovl_sel *skip;
	cJSON **ret_error;
	int (*cb)(const char *path, const char *data_path, void *userdata);
	void *userdata;
};

static int visit_redirected(const struct redirected_walk *w, int dir_fd, const char *name, const char *path)
{
	_cleanup_free_ char *dpath = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	r = ovl_metacopy_at(dir_fd, name);
	if (r <= 0)
		return r;
	fd = openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = read_state(fd, path, &dpath);
	if (r < 0)
		return bad_state(w->ret_error, r, path);
	if (r == 0 || strcmp(dpath, path) == 0)
		return 0;
	return w->cb(path, dpath, w->userdata);
}

static int walk_redirected(const struct redirected_walk *w, int dir_fd, const char *dirpath, unsigned depth)
{
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int r;

	if (depth > 4096)
		return -ELOOP;
	r = opendir_at(dir_fd, &d);
	if (r < 0)
		return r;
	while ((errno = 0, de = readdir(d))) {
		_cleanup_free_ char *path = NULL;
		unsigned char type = de->d_type;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		path = ovl_path_join(dirpath, de->d_name);
		if (!path)
			return -ENOMEM;
		if (w->skip && ovl_sel_match(w->skip, path) == OVL_SEL_INSIDE)
			continue;
		if (type == DT_UNKNOWN) {
			struct stat st;

			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				continue;
			type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_UNKNOWN;
		}
		if (type == DT_DIR) {
			_cleanup_close_ int cfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (cfd < 0)
				return errno == ENOENT ? 0 : -errno;
			r = walk_redirected(w, cfd, path, depth + 1);
		} else if (type == DT_REG) {
			r = visit_redirected(w, dirfd(d), de->d_name, path);
		} else {
			r = 0;
		}
		if (r != 0)
			return r;
	}
	return errno ? -errno : 0;
}

int ovl_upper_foreach_redirected(const struct ovl_layers *l, const struct ovl_sel *skip,
                                 int (*cb)(const char *path, const char *data_path, void *userdata), void *userdata,
                                 cJSON **ret_error)
{
	struct redirected_walk w = { .skip = skip, .ret_error = ret_error, .cb = cb, .userdata = userdata };
	int r;

	r = walk_redirected(&w, l->upper_fd, "", 0);
	if (r < 0 && ret_error && !*ret_error)
		ovl_ctl_error(ret_error, r, "io", NULL, "cannot walk the upper layer for metacopies");
	return r;
}

/* --- consistent snapshots --- */

static bool stat_same(const struct stat *a, const struct stat *b)
{
	return a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
	       a->st_mtim.tv_nsec == b->st_mtim.tv_nsec && a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
	       a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * The fd to read the content of @fd from: a metacopy's lower data (a new
 * fd in *ret_data) or @fd itself (*ret_data = -1; also when @l is NULL).
 * Asked again on every try: a writer may have given the file its data.
 */
static int open_content(const struct ovl_layers *l, int fd, const char *path, int *ret_data, struct stat *ret_st)
{
	_cleanup_data_loc_ struct ovl_data_loc loc = { 0 };
	int r;

	*ret_data = -1;
	if (!l)
		return 0;
	r = ovl_upper_data_locate_fd(l, fd, path, &loc, NULL);
	if (r < 0 || !loc.metacopy)
		return r;
	r = ovl_upper_data_open(l, &loc, O_NONBLOCK, ret_st);
	if (r < 0)
		return r;
	*ret_data = r;
	return 0;
}

/* One read of the content of @fd. *ret_stable: @fd's size and times did not move meanwhile. */
static int read_once(const struct ovl_layers *l, int fd, const char *path, size_t max, char **ret, size_t *ret_size,
                     bool *ret_stable)
{
	_cleanup_close_ int data = -1;
	struct stat before, after, dst;
	char *buf = NULL;
	size_t size = 0;
	int in, r;

	/* before the metacopy check: giving the file its data moves its ctime */
	if (fstat(fd, &before) < 0)
		return -errno;
	r = open_content(l, fd, path, &data, &dst);
	if (r < 0)
		return r;
	in = data >= 0 ? data : fd;
	if (lseek(in, 0, SEEK_SET) < 0)
		return -errno;
	r = read_full_fd(in, max, &buf, &size);
	if (r < 0)
		return r;
	if (fstat(fd, &after) < 0) {
		r = -errno;
		free(buf);
		return r;
	}
	*ret_stable = stat_same(&before, &after) && (data >= 0 || (off_t)size == after.st_size);
	if (data >= 0 && (off_t)size != after.st_size) {
		/* a metacopy shows its data cut or zero-extended to its own size */
		if ((uint64_t)after.st_size > max) {
			free(buf);
			return -EFBIG;
		}
		if ((off_t)size < after.st_size) {
			char *nb = realloc(buf, (size_t)after.st_size + 1);

			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			memset(buf + size, 0, (size_t)after.st_size - size);
		}
		size = (size_t)after.st_size;
		buf[size] = '\0';
	}
	*ret = buf;
	*ret_size = size;
	return 0;
}

int ovl_snapshot_read(const struct ovl_layers *l, int dir_fd, const char *name, const char *path,
                      const struct ovl_live *live, size_t max, char **ret, size_t *ret_size)
{
	_cleanup_close_ int fd = -1;
	char *buf = NULL;
	size_t size = 0;
	bool stable = false;
	int r;

	fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	for (int tries = 0; tries < 3; tries++) {
		r = read_once(l, fd, path, max, &buf, &size, &stable);
		if (r < 0)
			return r;
		if (stable || !live) {
			*ret = buf;
			*ret_size = size;
			return 0;
		}
		free(buf);
		buf = NULL;
	}
	/* Writers keep changing it: read once with them held back. */
	live->quiesce(live->userdata, true);
	r = read_once(l, fd, path, max, &buf, &size, &stable);
	live->quiesce(live->userdata, false);
	if (r < 0)
		return r;
	*ret = buf;
	*ret_size = size;
	return 0;
}

/* One copy of the content of @fd into @tmp. *ret_after: @fd's stat at the end. */
static int copy_once(const struct ovl_layers *l, int fd, const char *path, int tmp, struct stat *ret_after,
                     bool *ret_stable)
{
	_cleanup_close_ int data = -1;
	struct stat before, dst = { 0 };
	int r;

	if (fstat(fd, &before) < 0)
		return -errno;
	r = open_content(l, fd, path, &data, &dst);
	if (r < 0)
		return r;
	r = ovl_upper_data_copy(fd, data, dst.st_size, tmp, before.st_size);
	if (r < 0)
		return r;
	if (fstat(fd, ret_after) < 0)
		return -errno;
	*ret_stable = stat_same(&before, ret_after);
	return 0;
}

int ovl_snapshot_tmpfile(const struct ovl_layers *l, int dir_fd, const char *name, const char *path,
                         const struct ovl_live *live, int tmp_dir_fd, int *ret_fd, struct stat *ret_st)
{
	_cleanup_close_ int fd = -1;
	int r;

	fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	for (int tries = 0; tries < 4; tries++) {
		_cleanup_close_ int tmp = -1;
		bool held = live && tries == 3, stable = false;
		struct stat after;

		tmp = openat(tmp_dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (tmp < 0)
			return -errno;
		if (held)
			live->quiesce(live->userdata, true);
		r = copy_once(l, fd, path, tmp, &after, &stable);
		if (held)
			live->quiesce(live->userdata, false);
		if (r < 0)
			return r;
		if (!held && live && !stable)
			continue;
		if (fstat(tmp, ret_st) < 0)
			return -errno;
		ret_st->st_mode = after.st_mode;
		ret_st->st_uid = after.st_uid;
		ret_st->st_gid = after.st_gid;
		ret_st->st_mtim = after.st_mtim;
		if (lseek(tmp, 0, SEEK_SET) < 0)
			return -errno;
		*ret_fd = TAKE_FD(tmp);
		return 0;
	}
	return -EBUSY;
}

/* --- metacopies whose data a partial commit changes --- */

struct dependents {
	const char **paths; /* of the changes that replace or remove a lower entry, in ovl_path_cmp order */
	size_t n;
	char **hits;
	size_t n_hits;
};

/* True if @path is one of d->paths or an ancestor or a descendant of one. */
static bool depends_on_changes(const struct dependents *d, const char *path)
{
	_cleanup_free_ char *copy = strdup(path);
	size_t lo = 0, hi = d->n;

	if (!copy)
		return true; /* the safe side */
	/* the first change path at or after @path: @path itself or the start of its subtree */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ovl_path_cmp(d->paths[mid], path) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < d->n && ovl_path_has_prefix(d->paths[lo], path))
		return true;
	/* a change at an ancestor of @path */
	for (char *slash = strrchr(copy, '/'); slash; slash = strrchr(copy, '/')) {
		*slash = '\0';
		lo = 0;
		hi = d->n;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			int c = ovl_path_cmp(d->paths[mid], copy);

			if (c == 0)
				return true;
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
	}
	return false;
}

static int collect_dependent(const char *path, const char *data_path, void *userdata)
{
	struct dependents *d = userdata;
	char **v;

	if (!depends_on_changes(d, data_path))
		return 0;
	v = realloc(d->hits, (d->n_hits + 1) * sizeof(char *));
	if (!v)
		return -ENOMEM;
	d->hits = v;
	v[d->n_hits] = strdup(path);
	if (!v[d->n_hits])
		return -ENOMEM;
	d->n_hits++;
	return 0;
}

int ovl_upper_materialize_dependents(const struct ovl_layers *l, const struct ovl_live *live,
                                     const struct ovl_sel *sel, const struct ovl_changes *changes, cJSON *done,
                                     cJSON **ret_error)
{
	struct dependents d = { 0 };
	int r = 0, n = 0;

	d.paths = malloc(MAX(changes->n, (size_t)1) * sizeof(char *));
	if (!d.paths)
		return -ENOMEM;
	for (size_t i = 0; i < changes->n; i++) {
		const struct ovl_change *e = &changes->v[i];

		/* a lower entry goes or is replaced (a dir staying a dir keeps its entries) */
		if (e->old_type != OVL_FT_NONE && !(e->old_type == OVL_FT_DIR && e->new_type == OVL_FT_DIR))
			d.paths[d.n++] = e->path;
	}
	if (d.n > 0)
		r = ovl_upper_foreach_redirected(l, sel, collect_dependent, &d, ret_error);
	for (size_t i = 0; i < d.n_hits; i++) {
		if (r >= 0) {
			r = ovl_upper_materialize(l, d.hits[i], ret_error);
			/* 0: no metacopy any more; maybe another name of an inode done just now: tell the core anyway */
			if (r >= 0 && live)
				live->changed(live->userdata, d.hits[i]);
			if (r > 0) {
				n++;
				if (done)
					cJSON_AddItemToArray(done, cJSON_CreateString(d.hits[i]));
				ovl_fault_point("materialize");
			}
		}
		free(d.hits[i]);
	}
	free(d.hits);
	free(d.paths);
	if (r == -ENOMEM)
		return ovl_ctl_error(ret_error, r, "io", NULL, "cannot protect the metacopies outside the selection");
	return r < 0 ? r : n;
}
