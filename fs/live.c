// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The core's side of the control-plane contract (struct ovl_live):
 * quiesce, a writer-preferring rwlock that mutating FUSE requests hold
 * shared (reads, lookups and getattr never touch it), and changed(), which
 * drops what the core cached about a path and its subtree and invalidates
 * the kernel's dentry, attribute and page caches for it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fdpath.h"
#include "log.h"
#include "macro.h"
#include "ovl.h"

void ovl_live_quiesce(void *userdata, bool on)
{
	struct ovl_fs *fs = userdata;

	if (on)
		pthread_rwlock_wrlock(&fs->quiesce);
	else
		pthread_rwlock_unlock(&fs->quiesce);
}

void ovl_live_changed(void *userdata, const char *path)
{
	struct ovl_fs *fs = userdata;
	_cleanup_free_ char *copy = NULL;
	struct ovl_node *n = &fs->root, *parent = NULL, *target = NULL;
	const char *last = NULL;
	char *p, *save = NULL;
	fuse_ino_t parent_ino = 0, target_ino = 0;
	char **names = NULL;
	size_t cnt = 0;

	if (path_check_relative(path) < 0)
		return;
	copy = strdup(path);
	if (!copy)
		return;

	pthread_mutex_lock(&fs->copyup_lock);
	target = n;
	for (p = strtok_r(copy, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
		struct ovl_node *c = ovl_node_find_child_pinned(n, p);

		/* Keep the pin on the parent of the current node only. */
		ovl_node_unpin(parent);
		parent = n;
		last = p;
		if (!c) {
			target = NULL; /* not cached below here: only a (negative) dentry to drop */
			break;
		}
		n = c;
		target = c;
	}
	/*
	 * Copy what the notifications need now: once copyup_lock is dropped a
	 * FORGET may free these nodes. Stale nodeids in a notification are
	 * harmless (the kernel answers ENOENT).
	 */
	if (target) {
		ovl_node_invalidate_subtree(target);
		target_ino = ovl_node_ino(target);
		if (target->type == S_IFDIR)
			(void)ovl_node_child_names(target, &names, &cnt);
	}
	if (parent)
		parent_ino = ovl_node_ino(parent);
	if (target != &fs->root)
		ovl_node_unpin(target);
	ovl_node_unpin(parent);
	pthread_mutex_unlock(&fs->copyup_lock);

	/* No lock held: the notifications may wait for the kernel. */
	if (fs->se) {
		if (parent_ino && last)
			(void)fuse_lowlevel_notify_inval_entry(fs->se, parent_ino, last, strlen(last));
		if (target_ino) {
			(void)fuse_lowlevel_notify_inval_inode(fs->se, target_ino, 0, 0);
			/* Its children may have changed too: drop their dentries (the kernel drops their subtrees). */
			for (size_t i = 0; i < cnt; i++)
				(void)fuse_lowlevel_notify_inval_entry(fs->se, target_ino, names[i], strlen(names[i]));
		}
	}
	strv_free(names);
}
