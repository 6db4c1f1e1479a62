// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The data half of api/files.h: download, atomic upload (temporary file in
 * the target directory + renameat), content replacement, remove, move and
 * permissions. Every path goes through api_files_resolve() and an
 * fd-relative walk that refuses symlinks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdpath.h"
#include "files-internal.h"

int api_files_open_read(const struct api_files_root *root, const char *path, int *ret_fd, uint64_t *ret_size)
{
	_cleanup_free_ char *rel = NULL;
	_cleanup_close_ int pfd = -1, fd = -1;
	struct stat st;
	int r;

	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	pfd = openat_beneath(root->root_fd, rel, O_PATH, 0);
	if (pfd < 0)
		return pfd;
	if (fstat(pfd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (S_ISLNK(st.st_mode))
		return -ELOOP;
	if (!S_ISREG(st.st_mode))
		return -ENODEV; /* never open a FIFO or a device: it could block or have side effects */
	fd = fd_reopen(pfd, O_RDONLY | O_NOCTTY);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENODEV;
	*ret_size = (uint64_t)st.st_size;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/*
 * Upload data comes in whatever pieces the HTTP layer has (often a few KiB);
 * each write(2) on a FUSE view is a round trip to the daemon, so pieces are
 * gathered and written in blocks of this size.
 */
#define UPLOAD_BUFFER (1024u * 1024u)

struct api_upload {
	int dir_fd;       /* O_PATH fd of the target's directory */
	int fd;           /* the temporary file, O_WRONLY */
	char *buf;        /* pending data, UPLOAD_BUFFER bytes once allocated */
	size_t buf_len;
	char *name;       /* target name in dir_fd */
	char tmp[64];     /* temporary name in dir_fd */
	mode_t mode;
	uint64_t written, max;
	bool committed;
};

void api_upload_free(struct api_upload *u)
{
	if (!u)
		return;
	safe_close(u->fd);
	if (!u->committed && u->tmp[0])
		(void)unlinkat(u->dir_fd, u->tmp, 0);
	safe_close(u->dir_fd);
	free(u->name);
	free(u->buf);
	free(u);
}

/* Starts an upload of @rel (not "") with exactly this mode and owner. */
static int upload_begin_rel(const struct api_files_root *root, const char *rel, int mode, uid_t uid, gid_t gid,
			    uint64_t max_size, struct api_upload **ret)
{
	_cleanup_upload_ struct api_upload *u = NULL;
	_cleanup_free_ char *parent = NULL;
	const char *slash, *name;
	struct stat st;
	int r;

	if (!*rel)
		return -EISDIR;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->dir_fd = u->fd = -1;
	u->max = max_size;

	slash = strrchr(rel, '/');
	name = slash ? slash + 1 : rel;
	if (slash) {
		parent = strndup(rel, (size_t)(slash - rel));
		if (!parent)
			return -ENOMEM;
		r = api_mkdir_p_owned(root->root_fd, parent, 0755, root->uid, root->gid);
		if (r < 0)
			return r;
		u->dir_fd = r;
	} else {
		u->dir_fd = openat(root->root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (u->dir_fd < 0)
			return -errno;
	}
	u->name = strdup(name);
	if (!u->name)
		return -ENOMEM;

	if (fstatat(u->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			return -EISDIR;
		if (mode < 0 && S_ISREG(st.st_mode))
			mode = (int)(st.st_mode & 07777);
	} else if (errno != ENOENT)
		return -errno;
	u->mode = mode < 0 ? 0644 : (mode_t)mode;

	for (int attempt = 0;; attempt++) {
		uint64_t rnd;

		if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
			return -EIO;
		snprintf(u->tmp, sizeof(u->tmp), ".draftbox-upload.%016llx", (unsigned long long)rnd);
		u->fd = openat(u->dir_fd, u->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
		if (u->fd >= 0)
			break;
		if (errno != EEXIST || attempt >= 8) {
			u->tmp[0] = '\0';
			return -errno;
		}
	}
	if (fchown(u->fd, uid, gid) < 0)
		return -errno;
	*ret = TAKE_PTR(u);
	return 0;
}

int api_upload_begin(const struct api_files_root *root, const char *path, const struct api_file_meta *meta,
		     uint64_t max_size, struct api_upload **ret)
{
	_cleanup_free_ char *rel = NULL;
	uid_t uid;
	gid_t gid;
	int r;

	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	r = api_meta_uid(meta, root->uid, &uid);
	if (r < 0)
		return r;
	r = api_meta_gid(meta, root->gid, &gid);
	if (r < 0)
		return r;
	return upload_begin_rel(root, rel, meta ? meta->mode : -1, uid, gid, max_size, ret);
}

static int upload_flush(struct api_upload *u)
{
	int r;

	if (u->buf_len == 0)
		return 0;
	r = write_full(u->fd, u->buf, u->buf_len);
	u->buf_len = 0;
	return r;
}

int api_upload_write(struct api_upload *u, const void *buf, size_t size)
{
	const char *p = buf;
	int r;

	if (u->fd < 0 || u->committed)
		return -EBADF;
	if (u->max && (size > u->max || u->written > u->max - size))
		return -EFBIG;
	u->written += size;
	if (size >= UPLOAD_BUFFER) {
		/* large pieces go straight through, after what is pending */
		r = upload_flush(u);
		if (r < 0)
			return r;
		return write_full(u->fd, p, size);
	}
	if (!u->buf) {
		u->buf = malloc(UPLOAD_BUFFER);
		if (!u->buf)
			return -ENOMEM;
	}
	while (size > 0) {
		size_t n = MIN(size, UPLOAD_BUFFER - u->buf_len);

		memcpy(u->buf + u->buf_len, p, n);
		u->buf_len += n;
		p += n;
		size -= n;
		if (u->buf_len == UPLOAD_BUFFER) {
			r = upload_flush(u);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

int api_upload_commit(struct api_upload *u, uint64_t *ret_bytes)
{
	int r;

	if (u->fd < 0 || u->committed)
		return -EBADF;
	r = upload_flush(u);
	if (r < 0)
		return r;
	/* fchmod after the data: a setuid bit would be cleared by the writes. */
	if (fchmod(u->fd, u->mode) < 0)
		return -errno;
	if (fdatasync(u->fd) < 0 && errno != EINVAL)
		return -errno;
	if (renameat(u->dir_fd, u->tmp, u->dir_fd, u->name) < 0)
		return -errno;
	u->committed = true;
	u->fd = safe_close(u->fd);
	if (ret_bytes)
		*ret_bytes = u->written;
	return 0;
}

int api_files_write(const struct api_files_root *root, const char *path, const struct api_file_meta *meta,
		    const void *buf, size_t size)
{
	_cleanup_upload_ struct api_upload *u = NULL;
	int r;

	r = api_upload_begin(root, path, meta, 0, &u);
	if (r < 0)
		return r;
	r = api_upload_write(u, buf, size);
	if (r < 0)
		return r;
	return api_upload_commit(u, NULL);
}

int api_files_write_fd(const struct api_files_root *root, const char *path, const struct api_file_meta *meta, int fd,
		       uint64_t max_size, uint64_t *ret_bytes)
{
	_cleanup_upload_ struct api_upload *u = NULL;
	_cleanup_free_ char *buf = NULL;
	int r;

	r = api_upload_begin(root, path, meta, max_size, &u);
	if (r < 0)
		return r;
	buf = malloc(UPLOAD_BUFFER);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n = read(fd, buf, UPLOAD_BUFFER);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		r = api_upload_write(u, buf, (size_t)n);
		if (r < 0)
			return r;
	}
	return api_upload_commit(u, ret_bytes);
}

int api_files_remove(const struct api_files_root *root, const char *path)
{
	_cleanup_free_ char *rel = NULL;
	_cleanup_close_ int parent = -1;
	const char *name;
	int r;

	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	if (!*rel)
		return -EISDIR;
	parent = api_open_parent(root, rel, &name);
	if (parent < 0)
		return parent;
	if (unlinkat(parent, name, 0) < 0)
		return -errno; /* EISDIR for a directory */
	return 0;
}

int api_files_move(const struct api_files_root *root, const char *src, const char *dest)
{
	_cleanup_free_ char *srel = NULL, *drel = NULL, *dparent_path = NULL;
	_cleanup_close_ int sparent = -1, dparent = -1;
	const char *sname, *dname, *slash;
	struct stat st;
	size_t slen;
	int r;

	r = api_files_resolve_str(root, src, &srel);
	if (r < 0)
		return r;
	r = api_files_resolve_str(root, dest, &drel);
	if (r < 0)
		return r;
	if (!*srel || !*drel)
		return -EINVAL;
	slen = strlen(srel);
	if (strncmp(drel, srel, slen) == 0 && drel[slen] == '/')
		return -EINVAL;

	sparent = api_open_parent(root, srel, &sname);
	if (sparent < 0)
		return sparent;
	if (fstatat(sparent, sname, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;

	slash = strrchr(drel, '/');
	if (slash) {
		dparent_path = strndup(drel, (size_t)(slash - drel));
		if (!dparent_path)
			return -ENOMEM;
		dparent = api_mkdir_p_owned(root->root_fd, dparent_path, 0755, root->uid, root->gid);
		dname = slash + 1;
	} else {
		dparent = openat(root->root_fd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (dparent < 0)
			dparent = -errno;
		dname = drel;
	}
	if (dparent < 0)
		return dparent;
	if (renameat(sparent, sname, dparent, dname) < 0)
		return -errno;
	return 0;
}

int api_files_set_permissions(const struct api_files_root *root, const char *path, const struct api_file_meta *meta)
{
	_cleanup_free_ char *rel = NULL;
	_cleanup_close_ int fd = -1;
	struct stat st;
	uid_t uid = (uid_t)-1;
	gid_t gid = (gid_t)-1;
	int r;

	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	if (meta->owner) {
		r = api_lookup_uid(meta->owner, &uid);
		if (r < 0)
			return r;
	}
	if (meta->group) {
		r = api_lookup_gid(meta->group, &gid);
		if (r < 0)
			return r;
	}
	fd = openat_beneath(root->root_fd, rel, O_PATH, 0);
	if (fd < 0)
		return fd;
	/* openat2 hands out an O_PATH fd for a trailing symlink: never chown or chmod one. */
	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISLNK(st.st_mode))
		return -ELOOP;
	if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchownat(fd, "", uid, gid, AT_EMPTY_PATH) < 0)
		return -errno;
	/* After chown, which clears setuid/setgid bits: the requested mode wins. */
	if (meta->mode >= 0) {
		r = api_fchmod_path_fd(fd, (mode_t)meta->mode);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Counts non-overlapping occurrences of @old in @buf, left to right. */
static size_t count_occurrences(const char *buf, size_t size, const char *old, size_t old_len)
{
	size_t n = 0;
	const char *p = buf, *end = buf + size;

	while ((size_t)(end - p) >= old_len) {
		const char *hit = memmem(p, (size_t)(end - p), old, old_len);

		if (!hit)
			break;
		n++;
		p = hit + old_len;
	}
	return n;
}

int api_files_replace(const struct api_files_root *root, const char *path, const char *old, size_t old_len,
		      const char *new_str, size_t new_len, size_t *ret_count)
{
	_cleanup_upload_ struct api_upload *u = NULL;
	_cleanup_free_ char *rel = NULL, *data = NULL, *out = NULL;
	_cleanup_close_ int fd = -1;
	const char *p, *end;
	uint64_t size64;
	size_t size, count, out_size;
	struct stat st;
	char *o;
	int r;

	if (!old || old_len == 0 || (!new_str && new_len))
		return -EINVAL;
	r = api_files_resolve_str(root, path, &rel);
	if (r < 0)
		return r;
	r = api_files_open_read(root, path, &fd, &size64);
	if (r < 0)
		return r;
	if (size64 > API_REPLACE_MAX_SIZE)
		return -EFBIG;
	if (fstat(fd, &st) < 0)
		return -errno;
	r = read_full_fd(fd, API_REPLACE_MAX_SIZE, &data, &size);
	if (r < 0)
		return r;

	count = count_occurrences(data, size, old, old_len);
	if (count == 0) {
		if (ret_count)
			*ret_count = 0;
		return 0;
	}
	if (new_len > old_len && (new_len - old_len) > (API_REPLACE_MAX_SIZE - size) / count)
		return -EFBIG;
	out_size = size - count * old_len + count * new_len;
	out = malloc(out_size + 1);
	if (!out)
		return -ENOMEM;
	for (p = data, end = data + size, o = out; p < end;) {
		const char *hit = (size_t)(end - p) >= old_len ? memmem(p, (size_t)(end - p), old, old_len) : NULL;

		if (!hit) {
			memcpy(o, p, (size_t)(end - p));
			o += end - p;
			break;
		}
		memcpy(o, p, (size_t)(hit - p));
		o += hit - p;
		if (new_len)
			memcpy(o, new_str, new_len);
		o += new_len;
		p = hit + old_len;
	}

	/* Same mode and owner as the file it replaces. */
	r = upload_begin_rel(root, rel, (int)(st.st_mode & 07777), st.st_uid, st.st_gid, 0, &u);
	if (r < 0)
		return r;
	r = api_upload_write(u, out, out_size);
	if (r < 0)
		return r;
	r = api_upload_commit(u, NULL);
	if (r < 0)
		return r;
	if (ret_count)
		*ret_count = count;
	return 0;
}
