// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Resolution of a name across the layers, the way kernel overlayfs does it:
 * an upper entry hides lower ones, a whiteout (char device 0/0) hides the
 * name, an opaque upper or lower directory stops the merge, a non-directory
 * stops it too, trusted.overlay.redirect on an upper directory points the
 * lower lookup elsewhere. Everything goes through O_PATH fds and
 * openat(O_NOFOLLOW) of one component; nothing in a layer is ever followed.
 * Also: the origin record (trusted.draftbox.origin) that keeps st_ino
 * stable across copy-up, and xattr access on O_PATH fds.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "bgfill.h"
#include "fdpath.h"
#include "log.h"
#include "macro.h"
#include "metacopy.h"
#include "ovl.h"

bool ovl_xattr_is_private(const char *name)
{
	return strncmp(name, "trusted.overlay.", 16) == 0 || strncmp(name, "trusted.draftbox.", 17) == 0;
}

static void proc_path(char buf[static 64], int fd)
{
	snprintf(buf, 64, "/proc/self/fd/%d", fd);
}

/*
 * The *xattrat() syscalls refuse O_PATH fds, so go through /proc/self/fd:
 * the magic link resolves to the object itself, a symlink included (it is
 * not followed further), which is what l*xattr() on a path would give.
 */
ssize_t ovl_fgetxattr(int fd, const char *name, void *value, size_t size)
{
	char p[64];
	ssize_t r;

	proc_path(p, fd);
	r = getxattr(p, name, value, size);
	return r < 0 ? -errno : r;
}

int ovl_fsetxattr(int fd, const char *name, const void *value, size_t size, int flags)
{
	char p[64];

	proc_path(p, fd);
	return setxattr(p, name, value, size, flags) < 0 ? -errno : 0;
}

/*
 * A directory's through getxattrat(fd, "."): where the kernel has it (Linux
 * 6.13) a walk of one component, a tenth of what the /proc magic link costs
 * (0.3 against 3.6 us here), and a lookup of an upper directory reads two or
 * three xattrs. The name is "." of the object itself, so no entry can be
 * swapped in between. Other types have no such path. The walk needs search
 * permission on the directory, which the magic link does not: a daemon
 * without CAP_DAC_READ_SEARCH asking of a directory it cannot search takes
 * the magic link.
 */
ssize_t ovl_getxattr_obj(int fd, mode_t mode, const char *name, void *value, size_t size)
{
	if (S_ISDIR(mode)) {
		ssize_t n = ovl_xattr_at(fd, ".", name, value, size);

		if (n != -EACCES)
			return n;
	}
	return ovl_fgetxattr(fd, name, value, size);
}

ssize_t ovl_flistxattr(int fd, char *list, size_t size)
{
	char p[64];
	ssize_t r;

	proc_path(p, fd);
	r = listxattr(p, list, size);
	return r < 0 ? -errno : r;
}

int ovl_fremovexattr(int fd, const char *name)
{
	char p[64];

	proc_path(p, fd);
	return removexattr(p, name) < 0 ? -errno : 0;
}

int ovl_origin_format(char *buf, size_t size, unsigned layer, const struct stat *st)
{
	return snprintf(buf, size, "v1 layer=%u dev=%llu ino=%llu size=%lld mtime=%lld.%09ld ctime=%lld.%09ld mode=%o",
			layer, (unsigned long long)st->st_dev, (unsigned long long)st->st_ino,
			(long long)st->st_size, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec,
			(long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec, (unsigned)st->st_mode);
}

int ovl_origin_get(int fd, mode_t mode, struct ovl_origin *ret)
{
	char buf[256];
	unsigned long long dev, ino;
	long long size = -1, mtime_s = 0;
	long mtime_ns = 0;
	unsigned layer;
	ssize_t n;

	n = ovl_getxattr_obj(fd, mode, OVL_XATTR_ORIGIN, buf, sizeof(buf) - 1);
	if (n < 0)
		return n == -EOPNOTSUPP ? -ENODATA : (int)n;
	buf[n] = '\0';
	if (sscanf(buf, "v1 layer=%u dev=%llu ino=%llu size=%lld mtime=%lld.%ld", &layer, &dev, &ino, &size, &mtime_s,
		   &mtime_ns) < 3)
		return -EBADMSG; /* "v1 none" too */
	*ret = (struct ovl_origin){
		.layer = layer,
		.dev = (dev_t)dev,
		.ino = (ino_t)ino,
		.size = (off_t)size,
		.mtime = { .tv_sec = (time_t)mtime_s, .tv_nsec = mtime_ns },
		.is_new = n >= 4 && strcmp(buf + n - 4, " new") == 0,
	};
	return 0;
}

/* The lower layer an origin record names: the one on its dev (the record's layer first), else its layer index. */
static int origin_layer(unsigned layer, dev_t dev)
{
	const struct ovl_fs *fs = ovl_fs;

	if (layer < fs->n_lower && fs->lower_devs[layer] == dev)
		return (int)layer;
	for (size_t i = 0; i < fs->n_lower; i++)
		if (fs->lower_devs[i] == dev)
			return (int)i;
	/* A dev number that changed since (not every filesystem keeps it across boots) */
	return layer < fs->n_lower ? (int)layer : -1;
}

int ovl_origin_view_ino(int fd, ino_t *ret_ino)
{
	struct ovl_origin o;
	int r = ovl_origin_get(fd, 0, &o);

	/* " new": created over a whiteout, or a split lower hard link: not a copy keeping the origin's st_ino */
	if (r == 0 && o.is_new)
		return -ENODATA;
	if (r == 0)
		*ret_ino = ovl_view_ino(origin_layer(o.layer, o.dev), o.ino);
	return r;
}

ino_t ovl_view_ino(int layer, ino_t ino)
{
	const struct ovl_fs *fs = ovl_fs;
	static atomic_bool warned;
	unsigned fsid = !fs->xino_shift ? 0 : layer < 0 ? fs->upper_fsid : fs->lower_fsid[layer];

	if (!fsid)
		return ino;
	if (_unlikely_(ino >> fs->xino_shift)) {
		if (!atomic_exchange(&warned, true))
			log_warning("xino: inode number %llu of layer %d (-1: the upper) does not leave %u bits free: such "
				    "inode numbers pass through and may equal another layer's", (unsigned long long)ino,
				    layer, 64 - fs->xino_shift);
		return ino;
	}
	return ino | (ino_t)fsid << fs->xino_shift;
}

/* The xino index of filesystem @dev: 0 for the workspace's (@devs[0]), else its place among the others in @devs. */
static uint8_t xino_fsid(dev_t devs[], unsigned *n, dev_t dev)
{
	unsigned id = 0;

	while (id < *n && devs[id] != dev)
		id++;
	if (id == *n)
		devs[(*n)++] = dev;
	return (uint8_t)id;
}

void ovl_xino_setup(struct ovl_fs *fs)
{
	dev_t devs[OVL_MAX_LOWER + 1];
	unsigned n = 0, bits = 0;

	for (size_t i = 0; i < fs->n_lower; i++)
		fs->lower_fsid[i] = xino_fsid(devs, &n, fs->lower_devs[i]);
	fs->upper_fsid = xino_fsid(devs, &n, fs->upper_dev);
	n--; /* the indexes past 0 */
	fs->xino_shift = 0;
	if (n == 0 || !fs->opt->xino)
		return;
	while ((1u << bits) <= n)
		bits++;
	/* Below the top bit, which stays clear (st_ino as a signed number stays positive). */
	fs->xino_shift = 63 - bits;
	log_info("the layers are on %u filesystems: the view's st_ino carries a layer's filesystem in bits %u-62 (xino)",
		 n + 1, fs->xino_shift);
}

/* Of a directory (@fd). */
static bool xattr_is_y(int fd, const char *name)
{
	char v[4];
	ssize_t n = ovl_getxattr_obj(fd, S_IFDIR, name, v, sizeof(v));

	return n == 1 && v[0] == 'y';
}

/* True if a dir of lower layer @layer is opaque; the bottom layer has nothing below it to hide, so it is not asked. */
static bool lower_is_opaque(int fd, unsigned layer)
{
	return layer + 1 < ovl_fs->n_lower && xattr_is_y(fd, OVL_XATTR_OPAQUE);
}

static int open_stat(int dir_fd, const char *name, struct stat *st)
{
	int fd = openat(dir_fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

/* Adds one lower object found at the name to @res. Returns true to go on to the next layer. */
static bool add_lower(struct ovl_res *res, int fd, unsigned layer, const struct stat *st)
{
	bool have_upper = res->upper_fd >= 0;
	bool is_dir = S_ISDIR(st->st_mode);

	res->lower_exists = true;
	if (have_upper) {
		bool upper_dir = S_ISDIR(res->st.st_mode);

		if (!upper_dir || !is_dir) {
			/* Shadowed: remember the top one only for a non-dir upper (origin, whiteout). */
			if (!upper_dir && res->lower_fd < 0) {
				res->lower_fd = fd;
				res->lower_layer = (uint16_t)layer;
			} else {
				close(fd);
			}
			return false;
		}
	} else if (res->lower_fd < 0) {
		res->lower_fd = fd;
		res->lower_layer = (uint16_t)layer;
		res->st = *st;
		if (!is_dir)
			return false;
		return !lower_is_opaque(fd, layer);
	}
	if (!is_dir) {
		close(fd);
		return false;
	}
	if (res->lower_fd < 0) {
		res->lower_fd = fd;
		res->lower_layer = (uint16_t)layer;
	} else {
		res->extra[res->n_extra].fd = fd;
		res->extra[res->n_extra].layer = (uint16_t)layer;
		res->n_extra++;
	}
	return !lower_is_opaque(fd, layer);
}

/* Looks @name up in one lower dir. Returns true to continue with the next layer. */
static bool lookup_lower(struct ovl_res *res, int dir_fd, unsigned layer, const char *name, int *err)
{
	struct stat st;
	int fd;

	fd = open_stat(dir_fd, name, &st);
	if (fd < 0) {
		if (fd != -ENOENT && fd != -ENOTDIR && *err == 0)
			*err = fd;
		return fd == -ENOENT;
	}
	if (ovl_is_whiteout(&st)) {
		close(fd);
		return false;
	}
	return add_lower(res, fd, layer, &st);
}

/*
 * A lazy lookup of a name no upper object holds: stat it first, and open
 * it only if it is a directory (merged further down, and its children
 * resolve through its fds) or a lower hard link (found by name, and copy-up
 * must see st_nlink). Returns true to continue with the next layer.
 */
static bool lookup_lower_lazy(struct ovl_res *res, int dir_fd, unsigned layer, const char *name, int *err)
{
	struct stat st;

	if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT && errno != ENOTDIR && *err == 0)
			*err = -errno;
		return errno == ENOENT;
	}
	if (ovl_is_whiteout(&st))
		return false;
	if (S_ISDIR(st.st_mode) || st.st_nlink > 1)
		return lookup_lower(res, dir_fd, layer, name, err);
	res->lower_exists = true;
	res->lower_nofd = true;
	res->lower_layer = (uint16_t)layer;
	res->st = st;
	return false;
}

/* Follows an absolute redirect ("/a/b") from the lower roots. */
static void lookup_redirect_abs(struct ovl_res *res, const char *path, int *err)
{
	for (size_t i = 0; i < ovl_fs->n_lower; i++) {
		struct stat st;
		int fd;

		fd = *path ? openat_beneath(ovl_fs->lower_fds[i], path, O_PATH, 0) : fcntl(ovl_fs->lower_fds[i], F_DUPFD_CLOEXEC, 3);
		if (fd < 0) {
			if (fd == -ENOENT || fd == -ENOTDIR)
				continue;
			if (*err == 0)
				*err = fd;
			return;
		}
		if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
			close(fd);
			continue;
		}
		if (ovl_is_whiteout(&st)) {
			close(fd);
			return;
		}
		if (!add_lower(res, fd, (unsigned)i, &st))
			return;
	}
}

void ovl_node_stack(struct ovl_node *n, struct ovl_stack *s)
{
	s->upper_fd = n->upper_fd;
	s->opaque = n->opaque;
	s->n = 0;
	if (n->type != S_IFDIR || (n->upper_fd >= 0 && n->opaque))
		return;
	if (n->lower_fd >= 0) {
		s->l[s->n].fd = n->lower_fd;
		s->l[s->n++].layer = n->lower_layer;
	}
	for (uint16_t i = 0; i < n->n_extra; i++)
		s->l[s->n++] = n->extra[i];
}

void ovl_res_stack(const struct ovl_res *r, struct ovl_stack *s)
{
	s->upper_fd = r->upper_fd;
	s->opaque = r->opaque;
	s->n = 0;
	if (!S_ISDIR(r->st.st_mode) || (r->upper_fd >= 0 && r->opaque))
		return;
	if (r->lower_fd >= 0) {
		s->l[s->n].fd = r->lower_fd;
		s->l[s->n++].layer = r->lower_layer;
	}
	for (uint16_t i = 0; i < r->n_extra; i++)
		s->l[s->n++] = r->extra[i];
}

/*
 * True if the lower object @res found for a metacopy is regular-file data;
 * then the view's st_blocks are the data's (du, and tar's sparse-file
 * guess, see them).
 */
static bool take_metacopy_data(struct ovl_res *res)
{
	struct stat dst;

	if (res->lower_fd < 0 || fstatat(res->lower_fd, "", &dst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ||
	    !S_ISREG(dst.st_mode))
		return false;
	res->st.st_blocks = dst.st_blocks;
	return true;
}

/* True if a lower dir of @s holds @name (not hidden by a whiteout above it). */
static bool name_in_lower(const struct ovl_stack *s, const char *name)
{
	for (uint16_t i = 0; i < s->n; i++) {
		struct stat lst;

		if (fstatat(s->l[i].fd, name, &lst, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		return !ovl_is_whiteout(&lst);
	}
	return false;
}

static int resolve_in_stack(const struct ovl_stack *s, const char *name, struct ovl_res *res, bool lazy)
{
	char redirect[PATH_MAX];
	const char *lname = name, *abs_path = NULL;
	struct stat st;
	int r = 0, err = 0;

	ovl_res_init(res);
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;

	if (s->upper_fd >= 0) {
		int fd = open_stat(s->upper_fd, name, &st);

		if (fd >= 0) {
			if (ovl_is_whiteout(&st)) {
				close(fd);
				res->whiteout_in_upper = true;
				/* What it hides: a dir moved over it must turn opaque, a file take its record. */
				res->lower_exists = name_in_lower(s, name);
				return -ENOENT;
			}
			res->upper_fd = fd;
			res->st = st;
			if (S_ISREG(st.st_mode)) {
				/* A metacopy's data is the lower file its redirect names, or the one at its own name. */
				/* Being filled in the background: its data is the upper file's, through us. */
				r = ovl_bgfill_metacopy_get(fd, redirect);
				if (r < 0) {
					ovl_res_done(res);
					return r == -EBADMSG ? -EIO : r;
				}
				res->metacopy = r > 0;
				if (r == 1 && redirect[0])
					abs_path = redirect;
				else if (r == 2)
					lname = redirect;
			} else if (S_ISDIR(st.st_mode)) {
				ssize_t n;

				if (xattr_is_y(fd, OVL_XATTR_OPAQUE)) {
					res->opaque = true;
				} else {
					n = ovl_getxattr_obj(fd, S_IFDIR, OVL_XATTR_REDIRECT, redirect,
					                     sizeof(redirect) - 1);
					if (n > 0) {
						redirect[n] = '\0';
						if (redirect[0] == '/')
							abs_path = redirect + 1 + strspn(redirect + 1, "/");
						else if (!strchr(redirect, '/') && strlen(redirect) <= NAME_MAX)
							lname = redirect;
					}
				}
			}
		} else if (fd != -ENOENT) {
			return fd;
		}
	}

	if (res->opaque) {
		/* Hidden below the opaque dir, but a rename or rmdir must still leave a whiteout. */
		res->lower_exists = name_in_lower(s, name);
	} else {
		if (abs_path) {
			lookup_redirect_abs(res, abs_path, &err);
		} else {
			for (uint16_t i = 0; i < s->n; i++) {
				bool more;

				/* Lazy only while nothing was found: below an upper or a lower dir, fds are needed. */
				if (lazy && res->upper_fd < 0 && res->lower_fd < 0)
					more = lookup_lower_lazy(res, s->l[i].fd, s->l[i].layer, lname, &err);
				else
					more = lookup_lower(res, s->l[i].fd, s->l[i].layer, lname, &err);
				if (!more)
					break;
			}
		}
	}

	if (res->upper_fd < 0 && res->lower_fd < 0 && !res->lower_nofd) {
		bool lower_exists = res->lower_exists;

		ovl_res_done(res);
		res->lower_exists = lower_exists;
		return err ? err : -ENOENT;
	}

	if (res->metacopy) {
		/* Data found elsewhere says nothing of the name: a remove leaves a whiteout only if a lower holds the name. */
		if (abs_path || lname != name)
			res->lower_exists = name_in_lower(s, name);

		/* No data below (a lower layer changed behind our back): the kernel answers EIO too. */
		if (!take_metacopy_data(res)) {
			ovl_res_done(res);
			return -EIO;
		}
	}

	/* Identity: the top object. The view's inode number: the origin's for copied-up objects. */
	res->key_dev = res->st.st_dev;
	res->key_ino = res->st.st_ino;
	res->ino = ovl_view_ino(res->upper_fd >= 0 ? -1 : res->lower_layer, res->st.st_ino);
	res->hashable = res->upper_fd >= 0 || S_ISDIR(res->st.st_mode) || res->st.st_nlink <= 1;
	if (res->upper_fd >= 0) {
		struct ovl_origin o;

		r = ovl_origin_get(res->upper_fd, res->st.st_mode, &o);
		if (r == 0 && !o.is_new) {
			res->ino = ovl_view_ino(origin_layer(o.layer, o.dev), o.ino);
		} else if (r == 0) {
			res->new_of_dev = o.dev;
			res->new_of_ino = o.ino;
		} else if (res->lower_fd >= 0) {
			struct stat lst;

			if (ovl_getxattr_obj(res->upper_fd, res->st.st_mode, OVL_XATTR_ORIGIN_KERNEL, NULL, 0) >= 0 &&
			    fstatat(res->lower_fd, "", &lst, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0 &&
			    (lst.st_mode & S_IFMT) == (res->st.st_mode & S_IFMT))
				res->ino = ovl_view_ino(res->lower_layer, lst.st_ino);
		}
	}
	return 0;
}

int ovl_lower_stat_abs(const char *path, struct stat *ret_st)
{
	struct ovl_res res;
	int err = 0;

	ovl_res_init(&res);
	lookup_redirect_abs(&res, path, &err);
	if (res.lower_fd < 0) {
		ovl_res_done(&res);
		return err ? err : -ENOENT;
	}
	*ret_st = res.st;
	ovl_res_done(&res);
	return 0;
}

int ovl_resolve_in_stack(const struct ovl_stack *s, const char *name, struct ovl_res *res)
{
	return resolve_in_stack(s, name, res, false);
}

int ovl_node_rdlock_fresh(struct ovl_node *n)
{
	if (!atomic_load(&n->used))
		atomic_store(&n->used, true); /* for the eviction's second chance; no store when already set */
	for (int tries = 0; tries < 8; tries++) {
		int r = ovl_node_ensure(n);

		if (r < 0)
			return r;
		pthread_rwlock_rdlock(&n->lock);
		if (!atomic_load(&n->stale) || n == &ovl_fs->root)
			return 0;
		pthread_rwlock_unlock(&n->lock); /* evicted meanwhile: refresh again */
	}
	return -ESTALE;
}

static int resolve_child(struct ovl_node *dir, const char *name, struct ovl_res *res, bool lazy)
{
	struct ovl_stack s;
	int r;

	ovl_res_init(res);
	if (strlen(name) > NAME_MAX)
		return -ENAMETOOLONG;
	if (dir->type != S_IFDIR)
		return -ENOTDIR;
	r = ovl_node_rdlock_fresh(dir);
	if (r < 0)
		return r;
	ovl_node_stack(dir, &s);
	r = resolve_in_stack(&s, name, res, lazy);
	pthread_rwlock_unlock(&dir->lock);
	return r;
}

int ovl_resolve_child(struct ovl_node *dir, const char *name, struct ovl_res *res)
{
	return resolve_child(dir, name, res, false);
}

int ovl_resolve_child_lazy(struct ovl_node *dir, const char *name, struct ovl_res *res)
{
	return resolve_child(dir, name, res, true);
}

/* Finds the lower object of an evicted lower-only non-dir whose name is gone, in its parent's lower dir. */
static int reopen_lower(struct ovl_node *n, struct ovl_res *res)
{
	char name[NAME_MAX + 1];
	struct ovl_node *parent;
	struct ovl_stack s;
	int r = -ESTALE;

	pthread_mutex_lock(&ovl_fs->table_lock);
	parent = n->parent;
	if (parent && n->name && strlen(n->name) <= NAME_MAX)
		strcpy(name, n->name);
	else
		parent = NULL;
	pthread_mutex_unlock(&ovl_fs->table_lock);
	if (!parent || ovl_node_rdlock_fresh(parent) < 0)
		return -ESTALE;
	ovl_node_stack(parent, &s);
	for (uint16_t i = 0; i < s.n; i++) {
		int fd;

		if (s.l[i].layer != n->lower_layer)
			continue;
		fd = open_stat(s.l[i].fd, name, &res->st);
		if (fd < 0)
			break;
		/* The very object the node was (lower layers do not change under us). */
		if (res->st.st_dev != n->key_dev || res->st.st_ino != n->key_ino ||
		    (res->st.st_mode & S_IFMT) != n->type) {
			close(fd);
			break;
		}
		res->lower_fd = fd;
		res->lower_layer = n->lower_layer;
		r = 0;
		break;
	}
	pthread_rwlock_unlock(&parent->lock);
	return r;
}

/*
 * The data of an upper file re-opened by its handle (its name is gone), if it
 * is a metacopy: by its absolute redirect (draftfs writes one on every
 * metacopy; a kernel-made one without it cannot be found: -ESTALE).
 */
static int reopen_metacopy_data(struct ovl_res *res)
{
	char path[PATH_MAX];
	int r, err = 0;

	r = ovl_bgfill_metacopy_get(res->upper_fd, path);
	if (r <= 0)
		return r == 0 ? 0 : -ESTALE;
	if (r != 1 || !path[0])
		return -ESTALE;
	lookup_redirect_abs(res, path, &err);
	if (!take_metacopy_data(res))
		return -ESTALE;
	res->metacopy = true;
	return 0;
}

/*
 * Re-opens an evicted non-dir whose name is gone (unlinked while open):
 * an upper one by the file handle taken at eviction, a lower-only one in
 * its parent's lower dir. copyup_lock held.
 */
static int reopen_removed(struct ovl_node *n)
{
	struct ovl_res res;
	int mfd, fd, r;

	if (n->type == S_IFDIR)
		return -ESTALE;
	ovl_res_init(&res);
	if (!n->handle_upper) {
		r = reopen_lower(n, &res);
		if (r < 0)
			return r;
	} else {
		if (!n->handle)
			return -ESTALE;
		/* Rare: the layer root is opened for it, as an O_PATH fd is refused here. */
		mfd = openat(ovl_fs->upper_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (mfd < 0)
			return -ESTALE;
		fd = open_by_handle_at(mfd, n->handle, O_PATH | O_CLOEXEC);
		close(mfd);
		if (fd < 0)
			return -ESTALE;
		if (fstatat(fd, "", &res.st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0 ||
		    (res.st.st_mode & S_IFMT) != n->type) {
			close(fd);
			return -ESTALE;
		}
		res.upper_fd = fd;
		if (n->type == S_IFREG) {
			r = reopen_metacopy_data(&res);
			if (r < 0) {
				ovl_res_done(&res);
				return r;
			}
		}
	}
	/* Not hashable, no ino: the node keeps its identity and st_ino. */
	ovl_node_apply(n, &res);
	ovl_res_done(&res);
	return 0;
}

int ovl_node_ensure(struct ovl_node *n)
{
	struct ovl_fs *fs = ovl_fs;
	_cleanup_free_ char *name = NULL;
	struct ovl_node *parent;
	struct ovl_res res;
	int r;

	if (_likely_(!atomic_load(&n->stale)))
		return 0;
	pthread_mutex_lock(&fs->copyup_lock);
	if (!atomic_load(&n->stale)) {
		pthread_mutex_unlock(&fs->copyup_lock);
		return 0;
	}
	r = ovl_node_parent_name(n, &parent, &name);
	if (r == -ESTALE) {
		r = reopen_removed(n); /* unlinked while open (and evicted before) */
		pthread_mutex_unlock(&fs->copyup_lock);
		return r;
	}
	if (r >= 0)
		r = ovl_node_ensure(parent);
	if (r >= 0)
		r = ovl_resolve_child(parent, name, &res);
	if (r >= 0) {
		if ((res.st.st_mode & S_IFMT) != n->type) {
			ovl_res_done(&res);
			r = -ESTALE;
		} else {
			ovl_node_apply(n, &res);
			ovl_res_done(&res);
		}
	}
	pthread_mutex_unlock(&fs->copyup_lock);
	if (r < 0)
		log_debug("cannot refresh node '%s': %s", name ? name : "(no name)", strerror(-r));
	return r == -ENOENT ? -ESTALE : r;
}

void ovl_stat_to_view(struct ovl_node *n, struct stat *st, bool merged_dir)
{
	const struct ovl_options *o = ovl_fs->opt;

	st->st_ino = n->ino;
	st->st_uid = ovl_idmap_to_view(&o->uidmap, st->st_uid);
	st->st_gid = ovl_idmap_to_view(&o->gidmap, st->st_gid);
	if (merged_dir)
		st->st_nlink = 1;
}

int ovl_node_getattr(struct ovl_node *n, struct stat *st)
{
	bool merged;
	int r, fd;

	r = ovl_node_rdlock_fresh(n);
	if (r < 0)
		return r;
	fd = n->upper_fd >= 0 ? n->upper_fd : n->lower_fd;
	merged = n->type == S_IFDIR && ((n->upper_fd >= 0 && n->lower_fd >= 0) || n->n_extra > 0);
	if (fd < 0)
		r = -ESTALE;
	else if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		r = -errno;
	if (r == 0 && n->metacopy && n->lower_fd >= 0) {
		struct stat dst;

		if (fstatat(n->lower_fd, "", &dst, AT_EMPTY_PATH) == 0)
			st->st_blocks = dst.st_blocks;
	}
	pthread_rwlock_unlock(&n->lock);
	if (r < 0)
		return r;
	ovl_stat_to_view(n, st, merged);
	return 0;
}
