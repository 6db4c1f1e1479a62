/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * POSIX ACLs (acl=on, the default). With FUSE_POSIX_ACL the kernel caches
 * each inode's ACLs, checks them itself (default_permissions), and leaves
 * the umask to us (FUSE_DONT_MASK), because only the filesystem knows
 * whether the parent has a default ACL, in which case the umask does not
 * apply. We let the upper filesystem decide, as for any process: the
 * create runs with the caller's umask in a thread that has its own
 * fs_struct, and an object built in work/ (over a whiteout) is built in a
 * dir that carries the parent's default ACL. ACL xattrs name uids and
 * gids; with uidmapping/gidmapping they are mapped like st_uid and st_gid.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "ovl.h"

/* Asks for FUSE_POSIX_ACL and FUSE_DONT_MASK when acl=on and the kernel offers both; sets ovl_fs->posix_acl. */
void ovl_acl_init(struct fuse_conn_info *conn);

/* system.posix_acl_access or system.posix_acl_default */
bool ovl_acl_is_name(const char *name);

/* system.posix_acl_access */
bool ovl_acl_is_access(const char *name);

/*
 * After @req set the access ACL of the upper object @fd (O_PATH is fine):
 * clears S_ISGID when the caller is neither in the file's group nor
 * privileged, as the kernel's posix_acl_update_mode() would. The kernel
 * tells a FUSE filesystem so only through FUSE_SETXATTR_EXT's kill flag,
 * which libfuse 3.14 cannot pass on, and the upper filesystem sees the
 * daemon (root) set the ACL. So it is decided from the request: its fsgid
 * and supplementary groups (fuse_req_getgroups, /proc), and uid 0 stands
 * for CAP_FSETID, as for writes (fs/ops-file.c). Returns 0 or -errno.
 */
int ovl_acl_kill_sgid(fuse_req_t req, int fd);

/*
 * Maps the uids and gids of the ACL xattr @value in place, disk to view or
 * (@to_disk) back, per uidmapping/gidmapping. Returns 0, or -EINVAL when
 * @value is not an ACL xattr (left as it is).
 */
int ovl_acl_map_ids(void *value, size_t size, bool to_disk);

/*
 * Before a create-like syscall in the dir @dir on behalf of @req: when the
 * umask is ours to apply, clears its bits from *@mode if @dir has no
 * default ACL (or where this thread cannot have a umask of its own), and
 * else sets it as this thread's (it has its own fs_struct from the first
 * call on), for the upper filesystem to ignore in favour of the default
 * ACL. Returns whether ovl_umask_end() must put the umask back.
 */
bool ovl_umask_begin(fuse_req_t req, struct ovl_node *dir, mode_t *mode);
void ovl_umask_end(bool set);

/*
 * For an object built in work/ and then moved over a whiteout in the dir
 * @pfd: when ACLs are on and @pfd has a default ACL, makes a dir in work/
 * carrying the same default ACL, so the object inherits what it would have
 * inherited in place. Returns its fd and fills @name, -ENODATA when there
 * is nothing to inherit, or -errno.
 */
int ovl_acl_inherit_dir(int pfd, char name[static 64]);
