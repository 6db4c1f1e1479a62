// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * POSIX ACLs: negotiation, the umask of creates, inheritance over
 * whiteouts and the ID mapping of ACL xattrs (see acl.h and docs/fs.md,
 * "ACLs").
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acl.h"
#include "fdpath.h"
#include "macro.h"

/* The kernel's xattr form of an ACL (include/uapi/linux/posix_acl_xattr.h), little-endian. */
#define ACL_XATTR_VERSION 2
#define ACL_TAG_USER 0x02
#define ACL_TAG_GROUP 0x08
#define ACL_XATTR_ACCESS "system.posix_acl_access"
#define ACL_XATTR_DEFAULT "system.posix_acl_default"

struct acl_xattr_entry {
	uint16_t tag;
	uint16_t perm;
	uint32_t id;
};

void ovl_acl_init(struct fuse_conn_info *conn)
{
	const unsigned want = FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;

	ovl_fs->posix_acl = ovl_fs->opt->acl && (conn->capable & want) == want;
	if (ovl_fs->posix_acl)
		conn->want |= want;
	else
		conn->want &= ~want;
}

bool ovl_acl_is_name(const char *name)
{
	return strcmp(name, ACL_XATTR_ACCESS) == 0 || strcmp(name, ACL_XATTR_DEFAULT) == 0;
}

bool ovl_acl_is_access(const char *name)
{
	return strcmp(name, ACL_XATTR_ACCESS) == 0;
}

/* Whether the caller of @req has @gid (the view's) among its supplementary groups; false when they cannot be read. */
static bool caller_in_group(fuse_req_t req, gid_t gid)
{
	_cleanup_free_ gid_t *big = NULL;
	gid_t small[64], *list = small;
	int n = fuse_req_getgroups(req, (int)ARRAY_SIZE(small), small);

	if (n > (int)ARRAY_SIZE(small)) {
		big = calloc((size_t)n, sizeof(*big));
		if (!big)
			return false;
		list = big;
		n = MIN(n, fuse_req_getgroups(req, n, big));
	}
	for (int i = 0; i < n; i++)
		if (list[i] == gid)
			return true;
	return false;
}

int ovl_acl_kill_sgid(fuse_req_t req, int fd)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct stat st;
	gid_t gid;

	if (ctx->uid == 0)
		return 0;
	if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!(st.st_mode & S_ISGID) || S_ISLNK(st.st_mode))
		return 0;
	gid = ovl_idmap_to_view(&ovl_fs->opt->gidmap, st.st_gid);
	if (ctx->gid == gid || caller_in_group(req, gid))
		return 0;
	return fd_chmod(fd, st.st_mode & 07777 & ~S_ISGID);
}

int ovl_acl_map_ids(void *value, size_t size, bool to_disk)
{
	const struct ovl_options *o = ovl_fs->opt;
	uint8_t *p = value;
	uint32_t version;

	if (size < sizeof(version) || (size - sizeof(version)) % sizeof(struct acl_xattr_entry) != 0)
		return -EINVAL;
	memcpy(&version, p, sizeof(version));
	if (le32toh(version) != ACL_XATTR_VERSION)
		return -EINVAL;
	if (o->uidmap.n == 0 && o->gidmap.n == 0)
		return 0;
	for (size_t off = sizeof(version); off < size; off += sizeof(struct acl_xattr_entry)) {
		struct acl_xattr_entry e;
		const struct ovl_idmap *m;
		uint32_t id;

		memcpy(&e, p + off, sizeof(e));
		if (le16toh(e.tag) == ACL_TAG_USER)
			m = &o->uidmap;
		else if (le16toh(e.tag) == ACL_TAG_GROUP)
			m = &o->gidmap;
		else
			continue;
		id = le32toh(e.id);
		id = to_disk ? ovl_idmap_to_disk(m, id) : ovl_idmap_to_view(m, id);
		e.id = htole32(id);
		memcpy(p + off, &e, sizeof(e));
	}
	return 0;
}

/* 0: not tried yet; 1: this thread has its own fs_struct (its own umask); -1: it cannot have one */
static __thread signed char own_fs;

bool ovl_umask_begin(fuse_req_t req, struct ovl_node *dir, mode_t *mode)
{
	mode_t um;

	if (!ovl_fs->posix_acl || !req)
		return false;
	um = fuse_req_ctx(req)->umask & 0777;
	if (um == 0)
		return false;
	/* No default ACL to inherit: the umask applies as it is, with no two umask() calls around the create. */
	if (ovl_xattr_no_default_acl(dir)) {
		*mode &= ~um;
		return false;
	}
	if (own_fs == 0)
		own_fs = unshare(CLONE_FS) == 0 ? 1 : -1;
	if (own_fs < 0) {
		*mode &= ~um; /* no default ACL can apply then: as if the parent had none */
		return false;
	}
	umask(um);
	return true;
}

void ovl_umask_end(bool set)
{
	if (set)
		umask(0);
}

int ovl_acl_inherit_dir(int pfd, char name[static 64])
{
	_cleanup_free_ uint8_t *acl = NULL;
	ssize_t len;
	int fd, r;

	if (!ovl_fs->posix_acl)
		return -ENODATA;
	len = ovl_fgetxattr(pfd, ACL_XATTR_DEFAULT, NULL, 0);
	if (len == -ENODATA || len == -EOPNOTSUPP || len == 0)
		return -ENODATA;
	if (len < 0)
		return (int)len;
	acl = malloc((size_t)len);
	if (!acl)
		return -ENOMEM;
	len = ovl_fgetxattr(pfd, ACL_XATTR_DEFAULT, acl, (size_t)len);
	if (len < 0)
		return (int)len; /* -ERANGE: it changed meanwhile; the create fails, as a racing setfacl may make it */
	ovl_tmp_name(name);
	if (mkdirat(ovl_fs->workwork_fd, name, 0700) < 0)
		return -errno;
	fd = openat(ovl_fs->workwork_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto fail;
	}
	r = ovl_fsetxattr(fd, ACL_XATTR_DEFAULT, acl, (size_t)len, 0);
	if (r >= 0)
		return fd;
	safe_close(fd);
fail:
	(void)unlinkat(ovl_fs->workwork_fd, name, AT_REMOVEDIR);
	return r;
}
