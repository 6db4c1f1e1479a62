// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The git patch format (patch.h). Why libgit2 and not our own diff: git's
 * patch format has many details that `git apply` checks (index lines, mode
 * lines for new/deleted files, symlinks as blobs, "\ No newline at end of
 * file", the base85 "GIT binary patch" with literal/delta hunks, quoting of
 * odd names), and a hand-written Myers diff is one more thing to get wrong.
 * libgit2 writes exactly what git writes. The blobs only go to an
 * in-memory object database (mempack), nothing touches the disk.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <git2.h>
#include <git2/sys/mempack.h>
#include <git2/sys/odb_backend.h>
#include <git2/sys/repository.h>

#include "ctl-data.h"
#include "fdpath.h"
#include "patch.h"
#include "prefetch.h"

#define PATCH_MAX_FILE ((size_t)1 << 31)

DEFINE_TRIVIAL_CLEANUP_FUNC(git_repository *, git_repository_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(git_odb *, git_odb_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(git_index *, git_index_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(git_tree *, git_tree_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(git_diff *, git_diff_free)

static int git_to_errno(int e)
{
	if (e >= 0)
		return 0;
	if (e == GIT_ENOTFOUND)
		return -ENOENT;
	return -EIO;
}

static bool path_is_gittable(const char *path)
{
	const char *p = path;

	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);

		if (len == 4 && strncasecmp(p, ".git", 4) == 0)
			return false;
		if (!slash)
			break;
		p = slash + 1;
	}
	return true;
}

static uint32_t git_mode(const struct ovl_meta *m)
{
	if (S_ISLNK(m->mode))
		return GIT_FILEMODE_LINK;
	return (m->mode & 0100) ? GIT_FILEMODE_BLOB_EXECUTABLE : GIT_FILEMODE_BLOB;
}

/*
 * Adds the blob of one side of an entry to @idx. @layer_fd: the layer root
 * holding it; @upper_side: it is the upper (writers may be writing, and a
 * metacopy's content is its lower data).
 */
static int add_side(git_odb *odb, git_index *idx, const struct ovl_ctl_env *env, int layer_fd, bool upper_side,
                    const char *path, const struct ovl_meta *m)
{
	git_index_entry e = { 0 };
	git_oid oid;
	int r;

	if (S_ISLNK(m->mode)) {
		r = git_odb_write(&oid, odb, m->target, strlen(m->target), GIT_OBJECT_BLOB);
	} else {
		_cleanup_free_ char *buf = NULL;
		_cleanup_close_ int pfd = -1;
		const char *name;
		size_t size = 0;

		pfd = openat_beneath_parent(layer_fd, path, &name);
		if (pfd < 0)
			return pfd;
		r = ovl_snapshot_read(upper_side ? env->layers : NULL, pfd, name, path, upper_side ? env->live : NULL,
		                      PATCH_MAX_FILE, &buf, &size);
		if (r < 0)
			return r;
		r = git_odb_write(&oid, odb, buf, size, GIT_OBJECT_BLOB);
	}
	if (r < 0)
		return git_to_errno(r);
	e.mode = git_mode(m);
	e.id = oid;
	e.path = path;
	return git_to_errno(git_index_add(idx, &e));
}

struct out {
	int fd;
	int error;
};

static int print_line(const git_diff_delta *delta, const git_diff_hunk *hunk, const git_diff_line *line, void *payload)
{
	struct out *o = payload;
	char c = line->origin;
	int r;

	/* libgit2 1.5 prints "Binary files differ" for a mode-only change of a binary file: git does not */
	if (c == GIT_DIFF_LINE_BINARY && git_oid_equal(&delta->old_file.id, &delta->new_file.id))
		return 0;

	if (c == GIT_DIFF_LINE_CONTEXT || c == GIT_DIFF_LINE_ADDITION || c == GIT_DIFF_LINE_DELETION) {
		r = write_full(o->fd, &c, 1);
		if (r < 0) {
			o->error = r;
			return -1;
		}
	}
	r = write_full(o->fd, line->content, line->content_len);
	if (r < 0) {
		o->error = r;
		return -1;
	}
	return 0;
}

int ovl_patch_write(const struct ovl_ctl_env *env, const struct ovl_changes *c, int fd, cJSON *skipped)
{
	_cleanup_(git_repository_freep) git_repository *repo = NULL;
	_cleanup_(git_odb_freep) git_odb *odb = NULL;
	_cleanup_(git_index_freep) git_index *old_idx = NULL, *new_idx = NULL;
	_cleanup_(git_tree_freep) git_tree *old_tree = NULL, *new_tree = NULL;
	_cleanup_(git_diff_freep) git_diff *diff = NULL;
	_cleanup_(ovl_prefetch_stopp) struct ovl_prefetch *prefetch = NULL;
	git_diff_options opts = GIT_DIFF_OPTIONS_INIT;
	git_odb_backend *mempack = NULL;
	struct out o = { .fd = fd };
	git_oid oid;
	int r;

	git_libgit2_init();
	if (git_odb_new(&odb) < 0 || git_mempack_new(&mempack) < 0)
		return -ENOMEM;
	if (git_odb_add_backend(odb, mempack, 1) < 0) {
		mempack->free(mempack);
		return -ENOMEM;
	}
	if (git_repository_new(&repo) < 0 || git_repository_set_odb(repo, odb) < 0)
		return -ENOMEM;
	if (git_index_new(&old_idx) < 0 || git_index_new(&new_idx) < 0)
		return -ENOMEM;

	prefetch = ovl_prefetch_start(env->layers, c);
	for (size_t i = 0; i < c->n; i++) {
		const struct ovl_change *e = &c->v[i];
		bool old_ok = e->old_type == OVL_FT_FILE || e->old_type == OVL_FT_SYMLINK;
		bool new_ok = e->new_type == OVL_FT_FILE || e->new_type == OVL_FT_SYMLINK;

		ovl_prefetch_progress(prefetch, i);
		if (e->old_type == OVL_FT_DIR && e->new_type == OVL_FT_DIR)
			continue; /* git has no directories */
		if (!path_is_gittable(e->path) || (e->old_type == OVL_FT_OTHER) || (e->new_type == OVL_FT_OTHER)) {
			if (skipped)
				cJSON_AddItemToArray(skipped, cJSON_CreateString(e->path));
			if (!path_is_gittable(e->path))
				continue;
		}
		if (old_ok) {
			r = add_side(odb, old_idx, env, env->layers->lower_fds[e->old_layer], false, e->path, &e->old);
			if (r < 0)
				return r;
		}
		if (new_ok) {
			r = add_side(odb, new_idx, env, env->layers->upper_fd, true, e->path, &e->new);
			if (r < 0)
				return r;
		}
	}
	r = git_index_write_tree_to(&oid, old_idx, repo);
	if (r >= 0)
		r = git_tree_lookup(&old_tree, repo, &oid);
	if (r >= 0)
		r = git_index_write_tree_to(&oid, new_idx, repo);
	if (r >= 0)
		r = git_tree_lookup(&new_tree, repo, &oid);
	if (r < 0)
		return git_to_errno(r);
	opts.flags = GIT_DIFF_SHOW_BINARY;
	opts.id_abbrev = GIT_OID_HEXSZ; /* full index lines: git apply needs them for binary hunks */
	r = git_diff_tree_to_tree(&diff, repo, old_tree, new_tree, &opts);
	if (r < 0)
		return git_to_errno(r);
	r = git_diff_print(diff, GIT_DIFF_FORMAT_PATCH, print_line, &o);
	if (o.error < 0)
		return o.error;
	return git_to_errno(r);
}
