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

#include "bgfill.h"
#include "fdpath.h"
#include "finalize.h"
#include "log.h"
#include "macro.h"
#include "ops.h"
#include "ovl.h"

/*
 * Kernel notifications may wait for FUSE requests (e.g. a writer holding
 * a page lock), and writers wait for the quiesce: so while quiesced,
 * changed() only drops the core's caches and queues the notifications;
 * quiesce(false) sends them after letting writers go. Either way they have
 * been sent when the call that ends the quiesce (or changed()) returns.
 */
struct pending_notify {
	struct pending_notify *next;
	fuse_ino_t parent; /* inval_entry(parent, name) when name, else inval_inode(parent) */
	char *name;
};

static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending_notify *pending_head, **pending_tail = &pending_head;
static atomic_bool quiesced;
/* The upper changed behind the quota's counters (a commit, discard or
 * materialize moved or removed files): count it again before writers go on. */
static atomic_bool quota_stale;

static void quota_recount(void)
{
	int r;

	if (!atomic_exchange(&quota_stale, false))
		return;
	r = ovl_quota_scan();
	if (r < 0)
		log_warning_errno(r, "cannot count the upper layer for the quota again; keeping the old count");
}

static void send_notify(struct ovl_fs *fs, fuse_ino_t parent, const char *name)
{
	if (!fs->se)
		return;
	if (name)
		(void)fuse_lowlevel_notify_inval_entry(fs->se, parent, name, strlen(name));
	else
		(void)fuse_lowlevel_notify_inval_inode(fs->se, parent, 0, 0);
}

/* Sends now, or queues while quiesced. */
static void notify(struct ovl_fs *fs, fuse_ino_t parent, const char *name)
{
	struct pending_notify *p;

	if (!atomic_load(&quiesced)) {
		send_notify(fs, parent, name);
		return;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return; /* the caches expire on their own */
	p->parent = parent;
	p->name = name ? strdup(name) : NULL;
	if (name && !p->name) {
		free(p);
		return;
	}
	pthread_mutex_lock(&pending_lock);
	*pending_tail = p;
	pending_tail = &p->next;
	pthread_mutex_unlock(&pending_lock);
}

static void flush_pending(struct ovl_fs *fs)
{
	struct pending_notify *p;

	pthread_mutex_lock(&pending_lock);
	p = pending_head;
	pending_head = NULL;
	pending_tail = &pending_head;
	pthread_mutex_unlock(&pending_lock);
	while (p) {
		struct pending_notify *next = p->next;

		send_notify(fs, p->parent, p->name);
		free(p->name);
		free(p);
		p = next;
	}
}

void ovl_live_quiesce(void *userdata, bool on)
{
	struct ovl_fs *fs = userdata;

	if (on) {
		pthread_rwlock_wrlock(&fs->quiesce);
		atomic_store(&quiesced, true);
		/* What the control plane reads and moves on disk is then what the view shows: no fill running, no marker left. */
		ovl_bgfill_flush();
		(void)ovl_finalize_flush();
	} else {
		quota_recount();
		atomic_store(&quiesced, false);
		pthread_rwlock_unlock(&fs->quiesce);
		flush_pending(fs);
	}
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
	/* Only what the control plane did under the quiesce moved upper files;
	 * an invalidation from another mount reports changes of the lower. */
	if (atomic_load(&quiesced))
		atomic_store(&quota_stale, true);
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

	/* No lock held: the notifications may wait for the kernel (queued while quiesced). */
	if (parent_ino && last)
		notify(fs, parent_ino, last);
	if (target_ino) {
		notify(fs, target_ino, NULL);
		/* Its children may have changed too: drop their dentries (the kernel drops their subtrees). */
		for (size_t i = 0; i < cnt; i++)
			notify(fs, target_ino, names[i]);
	}
	strv_free(names);
}

void ovl_live_info(void *userdata, struct ovl_live_info *ret)
{
	*ret = (struct ovl_live_info){ .passthrough = ovl_pt_enabled() };
	ovl_uring_info(ret);
}
