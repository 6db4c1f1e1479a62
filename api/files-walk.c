// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The tree half of api/files.h: search, directory listing, mkdir -p and
 * recursive removal. Walks hold one directory fd per level, opened with
 * O_NOFOLLOW|O_DIRECTORY relative to its parent, so a symlink swapped in by
 * sandboxed code mid-walk is never entered, and they are bounded in depth,
 * results and entries visited.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fdpath.h"
#include "files-internal.h"
#include "json-util.h"

struct walk {
	const struct api_files_root *root;
	const char *pattern;   /* search: glob on names; NULL for list */
	bool dirs_too;         /* list: report directories as well */
	unsigned max_depth;
	size_t max_results, max_visited, visited, results;
	dev_t dev;             /* never cross into another mount */
	cJSON *out;
	bool truncated;
};

/* One directory's entries as read: the name and readdir's d_type (DT_UNKNOWN when the filesystem does not say). */
struct dir_entry {
	char *name;
	unsigned char type;
};

struct dir_list {
	struct dir_entry *e;
	size_t n;
};

static void dir_list_done(struct dir_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->e[i].name);
	free(l->e);
	l->e = NULL;
	l->n = 0;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct dir_entry *)a)->name, ((const struct dir_entry *)b)->name);
}

/*
 * Reads at most @max entries of @dir_fd, sorted by name, into *ret (freed
 * with dir_list_done(), also on failure); *ret_more (if not NULL) tells
 * whether more were left unread.
 */
static int read_names(int dir_fd, size_t max, struct dir_list *ret, bool *ret_more)
{
	_cleanup_closedir_ DIR *d = NULL;
	size_t alloc = 0;
	struct dirent *de;
	int r;

	*ret = (struct dir_list){ 0 };
	if (ret_more)
		*ret_more = false;
	r = opendir_at(dir_fd, &d);
	if (r < 0)
		return r;
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			if (errno)
				return -errno;
			break;
		}
		if (!name_is_valid(de->d_name))
			continue;
		if (ret->n >= max) {
			if (ret_more)
				*ret_more = true;
			break;
		}
		if (ret->n + 1 > alloc) {
			size_t na = alloc ? alloc * 2 : 32;
			struct dir_entry *ne = realloc(ret->e, na * sizeof(*ne));

			if (!ne)
				return -ENOMEM;
			ret->e = ne;
			alloc = na;
		}
		ret->e[ret->n].name = strdup(de->d_name);
		if (!ret->e[ret->n].name)
			return -ENOMEM;
		ret->e[ret->n++].type = de->d_type;
	}
	if (ret->n > 1)
		qsort(ret->e, ret->n, sizeof(*ret->e), cmp_entry);
	return 0;
}

static int join_rel(const char *dir, const char *name, char **ret)
{
	return asprintf(ret, "%s%s%s", dir, *dir ? "/" : "", name) < 0 ? -ENOMEM : 0;
}

/* Visits the entries of @dir_fd (relative path @rel_dir) at @depth (1 for the start directory's children). */
static int walk_dir(struct walk *w, int dir_fd, const char *rel_dir, unsigned depth)
{
	_cleanup_(dir_list_done) struct dir_list list = { 0 };
	bool more = false;
	int r;

	/* Never hold more names than may still be visited: a directory can hold millions. */
	r = read_names(dir_fd, w->max_visited - w->visited, &list, &more);
	if (r < 0)
		return r;
	if (more)
		w->truncated = true;
	for (size_t i = 0; i < list.n; i++) {
		_cleanup_free_ char *rel = NULL, *display = NULL;
		const char *name = list.e[i].name;
		unsigned char type = list.e[i].type;
		struct statx stx;
		bool report;

		if (w->visited >= w->max_visited) {
			w->truncated = true;
			return 0;
		}
		w->visited++;
		/* A search skips the stat of what readdir already says is a non-matching non-directory. */
		if (w->pattern && type != DT_UNKNOWN && type != DT_DIR && fnmatch(w->pattern, name, 0) != 0)
			continue;
		if (statx(dir_fd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_SYNC_AS_STAT,
			  STATX_BASIC_STATS | STATX_BTIME, &stx) < 0) {
			if (errno == ENOENT)
				continue; /* removed under us */
			return -errno;
		}
		r = join_rel(rel_dir, name, &rel);
		if (r < 0)
			return r;

		if (w->pattern)
			report = !S_ISDIR(stx.stx_mode) && fnmatch(w->pattern, name, 0) == 0;
		else
			report = w->dirs_too || !S_ISDIR(stx.stx_mode);
		if (report) {
			cJSON *info;

			if (w->results >= w->max_results) {
				w->truncated = true;
				return 0;
			}
			r = api_files_display_path(w->root, rel, &display);
			if (r < 0)
				return r;
			r = api_files_info_from_statx(&stx, display, &info);
			if (r < 0)
				return r;
			cJSON_AddItemToArray(w->out, info);
			w->results++;
		}

		if (S_ISDIR(stx.stx_mode)) {
			_cleanup_close_ int sub = -1;

			if (depth >= w->max_depth) {
				/* Deeper entries exist but are out of bounds for a search; a list just stops. */
				if (w->pattern)
					w->truncated = true;
				continue;
			}
			if (makedev(stx.stx_dev_major, stx.stx_dev_minor) != w->dev)
				continue;
			sub = openat(dir_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
					continue; /* replaced under us: not entered */
				return -errno;
			}
			r = walk_dir(w, sub, rel, depth + 1);
			if (r < 0)
				return r;
			if (w->truncated)
				return 0;
		}
	}
	return 0;
}

static int walk_start(const struct api_files_root *root, const char *path, struct walk *w, unsigned max_depth,
		      const struct api_walk_limits *limits, cJSON **ret, bool *ret_truncated)
{
	_cleanup_free_ char *rel = NULL;
	_cleanup_close_ int fd = -1;
	_cleanup_json_ cJSON *out = NULL;
	struct stat st;
	int r;

	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	fd = openat_beneath(root->root_fd, rel, O_PATH, 0);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISLNK(st.st_mode))
		return -ELOOP;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	out = cJSON_CreateArray();
	if (!out)
		return -ENOMEM;

	w->root = root;
	w->dev = st.st_dev;
	w->out = out;
	w->max_depth = MIN(max_depth, API_WALK_MAX_DEPTH);
	w->max_results = limits && limits->max_results ? limits->max_results : API_WALK_DEFAULT_RESULTS;
	w->max_visited = limits && limits->max_visited ? limits->max_visited : API_WALK_DEFAULT_VISITED;
	r = walk_dir(w, fd, rel, 1);
	if (r < 0)
		return r;
	if (ret_truncated)
		*ret_truncated = w->truncated;
	*ret = TAKE_PTR(out);
	return 0;
}

int api_files_search(const struct api_files_root *root, const char *path, const char *pattern,
		     const struct api_walk_limits *limits, cJSON **ret, bool *ret_truncated)
{
	struct walk w = {
		.pattern = pattern && *pattern ? pattern : "*",
	};
	unsigned depth = limits && limits->max_depth ? limits->max_depth : API_WALK_DEFAULT_DEPTH;

	return walk_start(root, path, &w, depth, limits, ret, ret_truncated);
}

int api_dirs_list(const struct api_files_root *root, const char *path, unsigned depth,
		  const struct api_walk_limits *limits, cJSON **ret, bool *ret_truncated)
{
	struct walk w = {
		.dirs_too = true,
	};

	if (depth == 0)
		depth = 1;
	if (limits && limits->max_depth && depth > limits->max_depth)
		depth = limits->max_depth;
	return walk_start(root, path, &w, depth, limits, ret, ret_truncated);
}

int api_dirs_create(const struct api_files_root *root, const char *path, const struct api_file_meta *meta)
{
	_cleanup_free_ char *rel = NULL;
	uid_t uid;
	gid_t gid;
	int r, fd;

	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	r = api_meta_uid(meta, root->uid, &uid);
	if (r < 0)
		return r;
	r = api_meta_gid(meta, root->gid, &gid);
	if (r < 0)
		return r;
	fd = api_mkdir_p_owned(root->root_fd, rel, meta && meta->mode >= 0 ? (mode_t)meta->mode : 0755, uid, gid);
	if (fd < 0)
		return fd;
	safe_close(fd);
	return 0;
}

#define REMOVE_BATCH 4096u
#define REMOVE_MAX_PASSES 4096u

/* Removes everything inside the directory @dir_fd (an O_RDONLY fd). */
static int remove_children(int dir_fd, dev_t dev, unsigned depth)
{
	/*
	 * Batches of names, re-read from the start each time (entries removed
	 * while reading may make a FUSE readdir skip others), until a pass finds
	 * nothing. Bounded, so code in the sandbox creating files as fast as we
	 * remove them cannot keep us here forever.
	 */
	for (unsigned pass = 0; pass < REMOVE_MAX_PASSES; pass++) {
		_cleanup_(dir_list_done) struct dir_list list = { 0 };
		int r;

		r = read_names(dir_fd, REMOVE_BATCH, &list, NULL);
		if (r < 0)
			return r;
		if (list.n == 0)
			return 0;
		for (size_t i = 0; i < list.n; i++) {
			_cleanup_close_ int sub = -1;
			const char *name = list.e[i].name;
			struct stat st;

			/* unlink first whatever d_type says: it may be stale, and a link must never be entered */
			if (unlinkat(dir_fd, name, 0) == 0 || errno == ENOENT)
				continue;
			if (errno != EISDIR && errno != EPERM)
				return -errno;
			if (depth >= API_WALK_MAX_DEPTH)
				return -ENAMETOOLONG;
			sub = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				if (errno == ENOENT)
					continue;
				return -errno; /* ELOOP/ENOTDIR: it was swapped for a link, unlink failed for a reason */
			}
			if (fstat(sub, &st) < 0)
				return -errno;
			if (st.st_dev != dev)
				return -EXDEV;
			r = remove_children(sub, dev, depth + 1);
			if (r < 0)
				return r;
			if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
				return -errno;
		}
	}
	return -EBUSY;
}

int api_dirs_remove(const struct api_files_root *root, const char *path)
{
	_cleanup_free_ char *rel = NULL;
	_cleanup_close_ int parent = -1, fd = -1;
	const char *name;
	struct stat st;
	int r;

	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	if (!*rel)
		return -EBUSY;
	parent = api_open_parent(root, rel, &name);
	if (parent < 0)
		return parent;
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP ? -ENOTDIR : -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	r = remove_children(fd, st.st_dev, 1);
	if (r < 0)
		return r;
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0)
		return -errno;
	return 0;
}
