// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Extended attributes through the mount. Overlay-private names
 * (trusted.overlay.*, trusted.draftbox.*) are hidden from listxattr and
 * cannot be read, set or removed (EOPNOTSUPP, as kernel overlayfs does),
 * except trusted.draftbox.control on the root, which tells root on the host
 * where the control socket is. Changing an xattr of a lower object copies
 * it up first. The uids and gids in ACL xattrs are mapped like st_uid and
 * st_gid (fs/acl.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "acl.h"
#include "bgfill.h"
#include "macro.h"
#include "ops.h"
#include "ovl.h"

#define XATTR_MAX_VALUE (64 * 1024)

static int top_fd_dup(struct ovl_node *n, bool *ret_upper)
{
	int fd, r;

	r = ovl_node_rdlock_fresh(n);
	if (r < 0)
		return r;
	fd = n->upper_fd >= 0 ? n->upper_fd : n->lower_fd;
	if (ret_upper)
		*ret_upper = n->upper_fd >= 0;
	r = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -ESTALE;
	if (fd >= 0 && r < 0)
		r = -errno;
	pthread_rwlock_unlock(&n->lock);
	return r;
}

/*
 * The names the kernel asks for over and over and files seldom have:
 * security.capability (on every chown, and before a write once attributes
 * were refreshed) and security.selinux (on every `ls -l` entry); and one
 * the daemon asks for on every create: a dir's system.posix_acl_default
 * (ovl_xattr_no_default_acl()). Their absence is remembered per node, one
 * bit each in n->xattr_absent, with an epoch above the bits that
 * ovl_xattr_absent_forget() bumps: an answer read
 * before a change is never recorded after it. A node's objects change with
 * its lock held exclusive (copy-up, end of a fill, re-resolution,
 * commit/discard invalidation), while the answer is read and recorded under
 * the shared lock; xattrs set or removed through the mount bump the epoch
 * after the change. Not for a metacopy or a file being filled in the
 * background (a fill drops caps and puts them back), nor with timeout=0
 * (nothing behind the mount is cached then). Only what the
 * view shows is spared: the upper filesystem still drops caps itself when
 * the daemon writes or chowns.
 */
#define ABSENT_BITS 3

static unsigned absent_bit(const char *name)
{
	if (ovl_fs->opt->timeout <= 0)
		return 0;
	if (strcmp(name, "security.capability") == 0)
		return 1;
	if (strcmp(name, "security.selinux") == 0)
		return 2;
	if (strcmp(name, "system.posix_acl_default") == 0)
		return 4;
	return 0;
}

void ovl_xattr_absent_created(struct ovl_node *n)
{
	atomic_fetch_or(&n->xattr_absent, absent_bit("security.capability"));
}

void ovl_xattr_absent_forget(struct ovl_node *n)
{
	unsigned v = atomic_load(&n->xattr_absent);

	while (!atomic_compare_exchange_weak(&n->xattr_absent, &v, ((v >> ABSENT_BITS) + 1) << ABSENT_BITS))
		;
}

/* getxattr of @n's top object under its lock (no fd dup: the kernel asks for security.capability before every write). */
static ssize_t top_getxattr(struct ovl_node *n, const char *name, void *value, size_t size)
{
	unsigned bit = absent_bit(name), seen;
	ssize_t len;
	int fd, r;

	r = ovl_node_rdlock_fresh(n);
	if (r < 0)
		return r;
	seen = atomic_load(&n->xattr_absent);
	if (seen & bit) {
		pthread_rwlock_unlock(&n->lock);
		return -ENODATA;
	}
	fd = n->upper_fd >= 0 ? n->upper_fd : n->lower_fd;
	/* A file being filled in the background loses its caps for a moment after each chunk (bgfill.c). */
	if (bit && (n->metacopy || (fd >= 0 && S_ISREG(n->type) && ovl_bgfill_holds(fd))))
		bit = 0;
	len = fd >= 0 ? ovl_getxattr_obj(fd, n->type, name, value, size) : -ESTALE;
	/* Fails, and records nothing, if the epoch (or another bit) moved since @seen. */
	if (bit && len == -ENODATA)
		(void)atomic_compare_exchange_strong(&n->xattr_absent, &seen, seen | bit);
	pthread_rwlock_unlock(&n->lock);
	return len;
}

bool ovl_xattr_no_default_acl(struct ovl_node *dir)
{
	ssize_t len = top_getxattr(dir, "system.posix_acl_default", NULL, 0);

	return len == -ENODATA || len == -EOPNOTSUPP;
}

static void reply_value(fuse_req_t req, const void *v, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, v, len);
}

void ovl_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	_cleanup_free_ char *buf = NULL;
	ssize_t len;

	if (ovl_xattr_is_private(name)) {
		const char *sock = ovl_fs->ctl_sock_path;

		if (n == &ovl_fs->root && strcmp(name, OVL_XATTR_CONTROL) == 0 && sock) {
			reply_value(req, sock, strlen(sock), size);
			return;
		}
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (size == 0) {
		len = top_getxattr(n, name, NULL, 0);
		if (len < 0)
			fuse_reply_err(req, (int)-len);
		else
			fuse_reply_xattr(req, (size_t)len);
		return;
	}
	buf = malloc(MIN(size, (size_t)XATTR_MAX_VALUE));
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	len = top_getxattr(n, name, buf, MIN(size, (size_t)XATTR_MAX_VALUE));
	if (len > 0 && ovl_acl_is_name(name))
		(void)ovl_acl_map_ids(buf, (size_t)len, false); /* not an ACL: as it is, the kernel says what it thinks */
	if (len < 0)
		fuse_reply_err(req, (int)-len);
	else
		fuse_reply_buf(req, buf, (size_t)len);
}

void ovl_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *list = NULL;
	ssize_t len;
	size_t out = 0;

	fd = top_fd_dup(ovl_node_from_ino(ino), NULL);
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	for (;;) {
		len = ovl_flistxattr(fd, NULL, 0);
		if (len < 0) {
			fuse_reply_err(req, (int)-len);
			return;
		}
		free(list);
		list = malloc((size_t)len + 1);
		if (!list) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		len = ovl_flistxattr(fd, list, (size_t)len);
		if (len == -ERANGE)
			continue; /* grew meanwhile */
		if (len < 0) {
			fuse_reply_err(req, (int)-len);
			return;
		}
		break;
	}
	/* Compact in place, dropping private names. */
	for (char *p = list; p < list + len;) {
		size_t l = strlen(p) + 1;

		if (!ovl_xattr_is_private(p)) {
			memmove(list + out, p, l);
			out += l;
		}
		p += l;
	}
	reply_value(req, list, out, size);
}

void ovl_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size, int flags)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *mapped = NULL;
	int r;

	if (ovl_xattr_is_private(name)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (ovl_fs->opt->read_only) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (ovl_acl_is_name(name) && size > 0) {
		/* The ids in an ACL are the view's: store the disk's, as for st_uid. */
		mapped = malloc(size);
		if (!mapped) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		memcpy(mapped, value, size);
		r = ovl_acl_map_ids(mapped, size, true);
		if (r < 0) {
			fuse_reply_err(req, -r);
			return;
		}
		value = mapped;
	}
	ovl_mutate_begin();
	r = ovl_copy_up(n);
	if (r >= 0) {
		fd = ovl_node_upper_dup(n);
		if (fd < 0) {
			r = fd;
		} else {
			/* Under a background fill's lock: its copy drops security.capability and puts back what it saw. */
			struct ovl_bgfill *bf = ovl_bgfill_get(fd);

			ovl_bgfill_lock(bf);
			r = ovl_fsetxattr(fd, name, value, size, flags);
			if (r >= 0 && strcmp(name, "security.capability") == 0) {
				ovl_bgfill_note_caps(bf, value, size, false);
			} else if (r >= 0 && ovl_acl_is_access(name)) {
				/* The upper filesystem made the mode match the ACL: a fill puts back this mode, not the old one. */
				if (ovl_fs->posix_acl)
					r = ovl_acl_kill_sgid(req, fd);
				ovl_bgfill_note_attr(bf, (struct timespec[2]){ { .tv_nsec = UTIME_OMIT }, { .tv_nsec = UTIME_OMIT } },
						     false);
			}
			ovl_bgfill_unlock(bf);
			ovl_bgfill_put(bf);
		}
	}
	ovl_mutate_end();
	ovl_xattr_absent_forget(n);
	if (r >= 0)
		ovl_node_split_changed(n); /* its ctime */
	fuse_reply_err(req, -r);
}

void ovl_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct ovl_node *n = ovl_node_from_ino(ino);
	_cleanup_close_ int fd = -1;
	bool upper = false;
	int r;

	if (ovl_xattr_is_private(name)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (ovl_fs->opt->read_only) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fd = top_fd_dup(n, &upper);
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	if (!upper) {
		/* Nothing to remove: don't copy up (kernel overlayfs does the same). */
		ssize_t l = ovl_fgetxattr(fd, name, NULL, 0);

		if (l < 0) {
			fuse_reply_err(req, (int)-l);
			return;
		}
	}
	fd = safe_close(fd);
	ovl_mutate_begin();
	r = ovl_copy_up(n);
	if (r >= 0) {
		fd = ovl_node_upper_dup(n);
		if (fd < 0) {
			r = fd;
		} else {
			struct ovl_bgfill *bf = ovl_bgfill_get(fd);

			ovl_bgfill_lock(bf);
			r = ovl_fremovexattr(fd, name);
			if (r >= 0 && strcmp(name, "security.capability") == 0)
				ovl_bgfill_note_caps(bf, NULL, 0, true);
			ovl_bgfill_unlock(bf);
			ovl_bgfill_put(bf);
		}
	}
	ovl_mutate_end();
	if (r >= 0)
		ovl_node_split_changed(n); /* its ctime */
	fuse_reply_err(req, -r);
}
