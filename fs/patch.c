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

#include "ctl-data.h"
#include "fdpath.h"
#include "git2-dl.h"
#include "patch.h"
#include "prefetch.h"

#define PATCH_MAX_FILE ((size_t)1 << 31)
#define PATCH_BATCH_BYTES ((size_t)64 << 20) /* DRAFTFS_PATCH_BATCH_BYTES overrides it (tests) */

DEFINE_TRIVIAL_CLEANUP_FUNC(git_tree *, sym_git_tree_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(git_diff *, sym_git_diff_free)

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

struct out {
	int fd;
	int error;
};

/* One batch of paths: their blobs in the mempack, their entries in two indexes, diffed as two trees. */
struct batch {
	git_repository *repo;
	git_odb *odb;
	git_odb_backend *mempack;
	git_index *old_idx, *new_idx;
	size_t bytes; /* blob bytes in the mempack */
	struct out o;
};

/*
 * Adds the blob of one side of an entry to @idx. @layer_fd: the layer root
 * holding it; @upper_side: it is the upper (writers may be writing, and a
 * metacopy's content is its lower data).
 */
static int add_side(struct batch *b, const struct ovl_ctl_env *env, int layer_fd, bool upper_side, const char *path,
                    const struct ovl_meta *m)
{
	git_index *idx = upper_side ? b->new_idx : b->old_idx;
	git_index_entry e = { 0 };
	git_oid oid;
	int r;

	if (S_ISLNK(m->mode)) {
		r = sym_git_odb_write(&oid, b->odb, m->target, strlen(m->target), GIT_OBJECT_BLOB);
		b->bytes += strlen(m->target);
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
		r = sym_git_odb_write(&oid, b->odb, buf, size, GIT_OBJECT_BLOB);
		b->bytes += size;
	}
	if (r < 0)
		return git_to_errno(r);
	e.mode = git_mode(m);
	e.id = oid;
	e.path = path;
	return git_to_errno(sym_git_index_add(idx, &e));
}

static int print_line(const git_diff_delta *delta, const git_diff_hunk *hunk, const git_diff_line *line, void *payload)
{
	struct out *o = payload;
	char c = line->origin;
	int r;

	/* libgit2 1.5 prints "Binary files differ" for a mode-only change of a binary file: git does not */
	if (c == GIT_DIFF_LINE_BINARY && sym_git_oid_equal(&delta->old_file.id, &delta->new_file.id))
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

/* Prints the patch of the batch's paths (the trees and the diff are freed on return). */
static int batch_print(struct batch *b)
{
	_cleanup_(sym_git_tree_freep) git_tree *old_tree = NULL, *new_tree = NULL;
	_cleanup_(sym_git_diff_freep) git_diff *diff = NULL;
	git_diff_options opts = GIT_DIFF_OPTIONS_INIT;
	git_oid oid;
	int r;

	r = sym_git_index_write_tree_to(&oid, b->old_idx, b->repo);
	if (r >= 0)
		r = sym_git_tree_lookup(&old_tree, b->repo, &oid);
	if (r >= 0)
		r = sym_git_index_write_tree_to(&oid, b->new_idx, b->repo);
	if (r >= 0)
		r = sym_git_tree_lookup(&new_tree, b->repo, &oid);
	if (r < 0)
		return git_to_errno(r);
	opts.flags = GIT_DIFF_SHOW_BINARY;
	opts.id_abbrev = GIT_OID_HEXSZ; /* full index lines: git apply needs them for binary hunks */
	r = sym_git_diff_tree_to_tree(&diff, b->repo, old_tree, new_tree, &opts);
	if (r < 0)
		return git_to_errno(r);
	r = sym_git_diff_print(diff, GIT_DIFF_FORMAT_PATCH, print_line, &b->o);
	if (b->o.error < 0)
		return b->o.error;
	return git_to_errno(r);
}

/* Prints the patch of the batch's paths and empties it (after batch_print() freed what held its objects). */
static int batch_flush(struct batch *b)
{
	int r = batch_print(b);

	if (r < 0)
		return r;
	b->bytes = 0;
	if (sym_git_index_clear(b->old_idx) < 0 || sym_git_index_clear(b->new_idx) < 0 || sym_git_mempack_reset(b->mempack) < 0)
		return -ENOMEM;
	return 0;
}

static void batch_done(struct batch *b)
{
	sym_git_index_free(b->old_idx);
	sym_git_index_free(b->new_idx);
	sym_git_repository_free(b->repo);
	sym_git_odb_free(b->odb); /* frees the mempack backend with it */
}

static int batch_init(struct batch *b, int fd)
{
	*b = (struct batch){ .o.fd = fd };
	sym_git_libgit2_init();
	if (sym_git_odb_new(&b->odb) < 0 || sym_git_mempack_new(&b->mempack) < 0)
		return -ENOMEM;
	if (sym_git_odb_add_backend(b->odb, b->mempack, 1) < 0) {
		b->mempack->free(b->mempack);
		b->mempack = NULL;
		return -ENOMEM;
	}
	if (sym_git_repository_new(&b->repo) < 0 || sym_git_repository_set_odb(b->repo, b->odb) < 0)
		return -ENOMEM;
	if (sym_git_index_new(&b->old_idx) < 0 || sym_git_index_new(&b->new_idx) < 0)
		return -ENOMEM;
	return 0;
}

/* git's order of the file paths of a patch: plain byte order of the whole path (a tree sorts as "name/"). */
static int cmp_path(const void *a, const void *b)
{
	return strcmp((*(const struct ovl_change *const *)a)->path, (*(const struct ovl_change *const *)b)->path);
}

int ovl_patch_write(const struct ovl_ctl_env *env, const struct ovl_changes *c, int fd, cJSON *skipped)
{
	_cleanup_(ovl_prefetch_stopp) struct ovl_prefetch *prefetch = NULL;
	_cleanup_free_ const struct ovl_change **order = NULL;
	const char *env_batch = getenv("DRAFTFS_PATCH_BATCH_BYTES"); /* tests */
	size_t batch_bytes = env_batch ? strtoull(env_batch, NULL, 10) : PATCH_BATCH_BYTES;
	struct batch b;
	int r;

	/*
	 * Paths go in batches of about PATCH_BATCH_BYTES of content, each
	 * printed and dropped before the next is read, so memory stays bounded
	 * by a batch plus the largest file pair (which git's binary delta needs
	 * whole). Taken in git's path order, the batches print what one diff of
	 * all the paths would.
	 */
	r = ovl_git2_load();
	if (r < 0)
		return r;
	order = calloc(c->n ? c->n : 1, sizeof(*order));
	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < c->n; i++)
		order[i] = &c->v[i];
	qsort(order, c->n, sizeof(*order), cmp_path);
	r = batch_init(&b, fd);
	prefetch = r >= 0 ? ovl_prefetch_start(env->layers, c) : NULL;
	for (size_t i = 0; r >= 0 && i < c->n; i++) {
		const struct ovl_change *e = order[i];
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
		if (old_ok)
			r = add_side(&b, env, env->layers->lower_fds[e->old_layer], false, e->path, &e->old);
		if (r >= 0 && new_ok)
			r = add_side(&b, env, env->layers->upper_fd, true, e->path, &e->new);
		if (r >= 0 && b.bytes >= batch_bytes)
			r = batch_flush(&b);
	}
	if (r >= 0)
		r = batch_flush(&b);
	batch_done(&b);
	return r;
}
