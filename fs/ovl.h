/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Internal interfaces of the draftfs core: mount options, ID mapping, the
 * inode table, layer resolution, copy-up, merged directories and the FUSE
 * operations. See docs/fs.md for the design (lock order, caching, on-disk
 * format) and control.h for the control-plane contract.
 */
#pragma once

#define FUSE_USE_VERSION 314

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "control.h"

/* ---------------------------------------------------------------- options */

#define OVL_MAX_LOWER 128
#define OVL_WH_POOL 256
#define OVL_REAP_MAX 1024

/* How requests reach the daemon (uring=), see fs/uring.c. */
enum ovl_uring {
	OVL_URING_AUTO, /* io_uring when the kernel offers it, else /dev/fuse */
	OVL_URING_ON,   /* io_uring; refuse to mount when the kernel cannot */
	OVL_URING_OFF,  /* /dev/fuse only */
};

/* Which files the kernel reads and writes directly (passthrough=), see fs/passthrough.c. */
enum ovl_passthrough {
	OVL_PT_OFF,   /* none: every read and write comes to the daemon */
	OVL_PT_UPPER, /* upper files only: lower files are read through the daemon */
	OVL_PT_ALL,   /* also lower files opened read-only */
};

struct ovl_idmap_range {
	uint32_t disk; /* id stored in the layers ("container" id in fuse-overlayfs terms) */
	uint32_t view; /* id shown through the mount ("host" id) */
	uint32_t len;
};

struct ovl_idmap {
	size_t n;
	struct ovl_idmap_range *r;
};

struct ovl_options {
	char **lowerdirs; /* NULL-terminated, leftmost (top) first */
	size_t n_lower;
	char *upperdir;
	char *workdir;
	char *statedir;       /* NULL: <workdir>/draftfs */
	char *mountpoint;
	char *source;         /* fsname shown in mount tables */
	struct ovl_idmap uidmap, gidmap;
	double timeout;       /* entry/attr timeout, seconds */
	bool foreground;
	bool debug;
	bool allow_other;     /* default: true when root */
	bool default_permissions;
	bool writeback;
	uint8_t passthrough;  /* enum ovl_passthrough: kernel passthrough of file data (default all) */
	uint8_t uring;        /* enum ovl_uring: request transport (default auto) */
	bool ring_sched_idle; /* io_uring queue threads SCHED_IDLE while calm (default true), see fs/ring-sched.c */
	bool fsync;           /* honour fsync requests (default true) */
	bool metacopy;        /* metadata-only copy-up of regular files (default true), see fs/metacopy.h */
	bool acl;             /* POSIX ACLs kept and enforced by the kernel (default true), see fs/acl.h */
	bool xino;            /* layers on several filesystems: st_ino carries the layer's filesystem (default true) */
	bool read_only;
	unsigned threads;     /* max /dev/fuse worker threads; io_uring: spread over the queues, at least 2 each */
	uint64_t quota_bytes, quota_inodes; /* 0 = unlimited */
	uint64_t bgfill;      /* data copy-ups of files this big run in the background (fs/bgfill.h); 0 = never */
	char *fuse_opts;      /* generic mount options passed to libfuse (comma list) */
};

/*
 * Parses a draftfs command line (argv[0] is the program name) into @o.
 * Accepts "SOURCE MOUNTPOINT" (mount helper form) or "MOUNTPOINT", -o lists
 * (repeatable), -f, -d. Returns 0, or -EINVAL with a one-line message in
 * @err (size @errlen). @o must be zeroed; free it with ovl_options_free().
 */
int ovl_options_parse(int argc, char **argv, struct ovl_options *o, char *err, size_t errlen);

/* Parses one "CONTAINER:HOST:SIZE[:CONTAINER:HOST:SIZE...]" list. Returns 0 or -EINVAL. */
int ovl_idmap_parse(const char *s, struct ovl_idmap *ret);

/* Maps a view id to the on-disk id. Unmapped ids pass through unchanged. */
uint32_t ovl_idmap_to_disk(const struct ovl_idmap *m, uint32_t view);
/* Maps an on-disk id to the view id. Unmapped ids pass through unchanged. */
uint32_t ovl_idmap_to_view(const struct ovl_idmap *m, uint32_t disk);

/* Frees what ovl_options_parse() allocated. */
void ovl_options_free(struct ovl_options *o);

/* ------------------------------------------------------------------ nodes */

struct file_handle;

struct ovl_lower {
	int fd;         /* O_PATH */
	uint16_t layer; /* index into the lower list */
};

/*
 * One FUSE inode: an object of the merged view.
 *
 * Identity (key_dev, key_ino) is the upper object if there is one, else the
 * lower object; lower hard links (nlink > 1) are not merged (kernel
 * overlayfs with index=off breaks them on copy-up), such nodes are found by
 * name only. The view's st_ino (ino) is the origin's for a copied-up
 * object, so it does not change on copy-up. The node also
 * remembers one name (parent, name) so copy-up can rebuild the path and the
 * control plane can find it by path.
 *
 * Lock order (outermost first):
 *   1. fs->quiesce   (rwlock; mutating requests hold it shared)
 *   2. fs->copyup_lock (mutex; copy-up, rename, changed(), stale refresh:
 *                       everything that replaces or closes node fds)
 *   3. node->lock    (rwlock; at most one node at a time, never nested)
 *   4. fs->table_lock (mutex; hash tables, nlookup, refs, parent/name)
 * fuse_lowlevel_notify_*() is called with none of them held.
 */
struct ovl_node {
	struct ovl_node *id_next;   /* table_lock */
	struct ovl_node *name_next; /* table_lock */
	struct ovl_node *parent;    /* table_lock; holds a ref on the parent */
	struct ovl_node *all_prev, *all_next; /* table_lock: list of all nodes but the root */
	char *name;                 /* table_lock */
	uint64_t nlookup;           /* table_lock */
	uint32_t refs;              /* table_lock: children whose ->parent is us */
	bool id_hashed, name_hashed; /* table_lock */
	bool removed;                /* table_lock: its name was unlinked (never re-resolve it by name) */
	atomic_bool split;           /* set once (pt_lock): replaced by a fresh node (passthrough.c); never indexed again */
	bool hot;                    /* table_lock: on fs->all_* (holds fds), else on fs->cold_* */
	atomic_bool used;            /* set on use, cleared by the eviction scan (second chance) */
	bool filling;                /* fs->fill_lock: a data copy-up into its metacopy runs, without copyup_lock */
	mode_t type;                /* S_IFMT, immutable */
	dev_t key_dev;              /* table_lock (re-keyed on copy-up) */
	ino_t key_ino;              /* table_lock */
	ino_t ino;                  /* the view's st_ino (changes only when a lower hard link is copied up) */

	pthread_rwlock_t lock;
	/* Below: read under lock (shared); changed with lock exclusive AND copyup_lock held. */
	int upper_fd;               /* O_PATH of the upper object or -1 */
	int lower_fd;               /* O_PATH of the top lower object or -1 */
	uint16_t lower_layer;
	uint16_t n_extra;           /* dirs: further lower dirs merged below lower_fd */
	bool opaque;                /* dirs: upper dir is opaque (no lower merged) */
	bool metacopy;              /* regular files: upper holds metadata only, the data is lower_fd */
	bool handle_upper;          /* handle is of the upper object (else of lower layer lower_layer) */
	atomic_bool stale;          /* fds must be re-resolved before use (a lazy or evicted node has none) */
	atomic_uint gen;            /* bumped when a commit, discard or invalidation changed its objects (live.c): handles opened before rebind (ovl_fh_rebind) */
	atomic_uint xattr_absent;   /* xattrs the top object is known not to have (xattr.c), with an epoch above them */
	struct ovl_lower *extra;
	struct file_handle *handle; /* evicted non-dirs: the top object, to re-open it once its name is gone (copyup_lock) */
	union {
		struct ovl_open *open;       /* regular files, passthrough.c's lock: open-file state, NULL while none is open */
		struct ovl_listing *listing; /* dirs, dir.c's listing_lock: the listing readers share, or NULL */
	};
};

/* The result of resolving one name in a directory across the layers. Owns its fds. */
struct ovl_res {
	int upper_fd, lower_fd;
	uint16_t lower_layer;
	uint16_t n_extra;
	struct ovl_lower extra[OVL_MAX_LOWER];
	bool opaque;
	bool metacopy;           /* the upper regular file is a metacopy: lower_fd is its data (st_blocks is the data's) */
	bool lower_nofd;         /* a lower-only non-directory found by stat only: lower_fd stays -1 (lazy node) */
	bool whiteout_in_upper;  /* upper holds a whiteout for the name */
	bool lower_exists;       /* some lower holds the name (visible or not under upper) */
	struct stat st;          /* of the top object */
	dev_t key_dev;           /* hash identity (see struct ovl_node) */
	ino_t key_ino;
	bool hashable;           /* false: a lower hard link, found by name only */
	ino_t ino;               /* the view's st_ino */
	dev_t new_of_dev;        /* upper objects with a " new" origin record: the lower object it names (else 0) */
	ino_t new_of_ino;
};

/* The layers of one directory, as borrowed fds: upper (or -1) and the merged lower dirs. */
struct ovl_stack {
	int upper_fd;
	bool opaque;
	uint16_t n;
	struct ovl_lower l[OVL_MAX_LOWER];
};

struct ovl_fs {
	struct ovl_options *opt;
	int upper_fd, work_fd, workwork_fd, state_fd, lock_fd, upper_lock_fd;
	int lower_fds[OVL_MAX_LOWER];
	dev_t lower_devs[OVL_MAX_LOWER];
	dev_t upper_dev;
	size_t n_lower;
	unsigned xino_shift;                /* 0: st_ino passes through; else ovl_view_ino() puts the fsid at this bit */
	uint8_t upper_fsid;                 /* 0: on the workspace's (lowerdir 0) filesystem, else 1.. per other one */
	uint8_t lower_fsid[OVL_MAX_LOWER];
	struct ovl_node root;
	struct fuse_session *se;
	double timeout;
	bool no_opendir;       /* the kernel sends no OPENDIR/RELEASEDIR (we answered the first with ENOSYS) */
	bool posix_acl;        /* FUSE_POSIX_ACL and FUSE_DONT_MASK negotiated (fs/acl.h) */
	uint64_t dir_key[2];   /* per-mount secret of the directory offsets (fs/dir.c) */

	pthread_mutex_t table_lock;
	struct ovl_node **id_tab, **name_tab;
	size_t tab_size, n_nodes;
	struct ovl_node *all_first, *all_last;   /* nodes holding fds, most recently used first */
	struct ovl_node *cold_first, *cold_last; /* nodes holding none (lazy or evicted) */
	size_t n_hot;                            /* nodes on all_* */

	/* Open layer fds held by nodes, and how many we allow (RLIMIT_NOFILE minus room for open files). */
	atomic_long n_fds;
	long fd_budget;
	pthread_mutex_t evict_lock;

	pthread_mutex_t copyup_lock;
	/* Data copy-ups in progress (node->filling): their end is broadcast on fill_cond. Taken with no other lock needed. */
	pthread_mutex_t fill_lock;
	pthread_cond_t fill_cond;
	pthread_rwlock_t quiesce;
	atomic_uint_fast64_t tmp_seq;

	atomic_int_fast64_t used_bytes, used_inodes; /* quota accounting */
	/* Requests that may change a directory, in flight and ended (ovl_mutate_entry_begin(); copy-up reads them). */
	atomic_uint entry_ops;
	atomic_uint_fast64_t entry_gen;

	/* Pre-made whiteouts in the work dir (creating one costs a slow mknod). */
	pthread_mutex_t wh_lock;
	pthread_cond_t wh_cond;
	uint64_t wh_pool[OVL_WH_POOL];
	size_t wh_avail;
	uint64_t wh_seq;
	bool wh_stop, wh_running, wh_failed;
	pthread_t wh_thread;
	/* work/ names the same thread removes in the background (wh_lock): ring of reap_n from reap_head. */
	char reap[OVL_REAP_MAX][64];
	size_t reap_head, reap_n;

	struct ovl_layers layers;
	struct ovl_live live;
	struct ovl_control *ctl;
	char *ctl_sock_path; /* absolute <statedir>/ctl.sock */
};

extern struct ovl_fs *ovl_fs;

/* Creates the tables. Returns 0 or -ENOMEM. */
int ovl_table_init(struct ovl_fs *fs);
/* Frees every node (at unmount). */
void ovl_table_free(struct ovl_fs *fs);

/* Maps a FUSE inode number to a node (no reference taken: the kernel holds one). */
static inline struct ovl_node *ovl_node_from_ino(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? &ovl_fs->root : (struct ovl_node *)(uintptr_t)ino;
}
static inline fuse_ino_t ovl_node_ino(struct ovl_node *n)
{
	return n == &ovl_fs->root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
}

/*
 * Finds the node for @res's identity or makes one under @parent/@name, and
 * adds one lookup. Takes ownership of @res's fds either way. Returns 0 and
 * *ret, or -ENOMEM.
 */
int ovl_node_get(struct ovl_node *parent, const char *name, struct ovl_res *res, struct ovl_node **ret);

/* Adds one lookup to @n (an entry reply that hands @n out again, e.g. link). */
void ovl_node_ref(struct ovl_node *n);
/* Drops @count lookups; frees the node when unused. abort()s if the count would go negative. */
void ovl_node_forget(struct ovl_node *n, uint64_t count);

/* Sets @n's remembered name to @parent/@name (after rename, link). Returns 0 or -ENOMEM. */
int ovl_node_set_name(struct ovl_node *n, struct ovl_node *parent, const char *name);
/* Re-keys @n under the identity of its new upper object (after copy-up or replacement). True if that changed it. */
bool ovl_node_rekey(struct ovl_node *n, dev_t dev, ino_t ino);

/* Changes the view's st_ino of @n (a split lower hard link after copy-up). */
void ovl_node_set_ino(struct ovl_node *n, ino_t ino);

/*
 * Splits @n off (passthrough.c): takes it out of both indexes for good, so
 * the next lookup of any of its names makes a fresh node for the object.
 * The kernel's inode of @n stays for the files open on it; see
 * ovl_node_is_split().
 */
void ovl_node_split(struct ovl_node *n);
/*
 * True if @n was split off. Its opens and links fail with ESTALE (the
 * kernel walks the path again with LOOKUP_REVAL and meets the fresh node),
 * and its attributes are never cached by the kernel.
 */
bool ovl_node_is_split(struct ovl_node *n);
/*
 * After a change made through the split node @n: drops the kernel's cached
 * attributes of the node that took its place, if any. No lock held.
 */
void ovl_node_split_changed(struct ovl_node *n);
/*
 * Drops the kernel's cached attributes of the node indexed under the
 * identity (@dev, @ino), if any: its st_nlink or ctime changed through a
 * name that may lead the kernel to another inode (a split node). No lock held.
 */
void ovl_node_inval_identity(dev_t dev, ino_t ino);

/* Removes @n from the name index, and from the identity index if @also_identity. */
void ovl_node_unhash_name(struct ovl_node *n, bool also_identity);

/* Like ovl_node_find_child() but pins the node (it cannot be freed) until ovl_node_unpin(). */
struct ovl_node *ovl_node_find_child_pinned(struct ovl_node *parent, const char *name);
/* Drops a pin taken by ovl_node_find_child_pinned(); accepts NULL and the root. */
void ovl_node_unpin(struct ovl_node *n);

/* The FUSE inode number of @n's parent, 0 when it has none (the root, a removed node). Caller holds nothing. */
fuse_ino_t ovl_node_parent_ino(struct ovl_node *n);

/* Looks up a child node by name in the name index; no reference taken. Caller holds nothing. */
struct ovl_node *ovl_node_find_child(struct ovl_node *parent, const char *name);

/*
 * Calls @fn for every node that has @n as a proper ancestor, with
 * table_lock held (so @fn must not take locks other than atomic ops).
 */
void ovl_node_foreach_descendant(struct ovl_node *n, void (*fn)(struct ovl_node *d, void *ud), void *ud);

/* Replaces @n's layer state with @res (taking its fds), closing the old fds. copyup_lock must be held. */
void ovl_node_apply(struct ovl_node *n, struct ovl_res *res);

/* Closes @n's fds and marks it stale. copyup_lock must be held. */
void ovl_node_drop_state(struct ovl_node *n);

/*
 * Marks @n and its cached subtree stale: the layers changed under them; each
 * re-resolves by name at its next use, and bumps their gen (their open
 * handles rebind at their next read or write, fs/rebind.c).
 */
void ovl_node_invalidate_subtree(struct ovl_node *n);

/* Copies the names of @n's cached children (NULL-terminated vector). Returns 0 or -ENOMEM. */
int ovl_node_child_names(struct ovl_node *n, char ***ret, size_t *ret_n);

/* Builds the relative path of @n ("" for the root). Returns 0 and a new string in *ret, or -errno. */
int ovl_node_path(struct ovl_node *n, char **ret);

/* Copies the parent and name of @n under table_lock. Returns 0, -ESTALE (no name: the root, removed) or -ENOMEM. */
int ovl_node_parent_name(struct ovl_node *n, struct ovl_node **ret_parent, char **ret_name);

/* True if @n's name was removed (unlink, rmdir, a rename over it): it is still served to the fds open on it. */
bool ovl_node_is_removed(struct ovl_node *n);

/* ------------------------------------------------------------------ layers */

#define OVL_XATTR_OPAQUE "trusted.overlay.opaque"
#define OVL_XATTR_ORIGIN_KERNEL "trusted.overlay.origin"
#define OVL_XATTR_ORIGIN "trusted.draftbox.origin"
#define OVL_XATTR_IMPURE "trusted.draftbox.impure"
#define OVL_XATTR_CONTROL "trusted.draftbox.control"

/* True for a kernel overlayfs whiteout: a char device 0/0 (any mode). */
static inline bool ovl_is_whiteout(const struct stat *st)
{
	return S_ISCHR(st->st_mode) && st->st_rdev == 0;
}

/* True for xattr names that belong to the overlay and are hidden from the view. */
bool ovl_xattr_is_private(const char *name);

/*
 * Forgets which xattrs @n's top object is known not to have (xattr.c). Called
 * wherever its top object changes or may have changed: with n->lock held
 * exclusive (copy-up, the end of a fill, a re-resolution that found another
 * object), when it is marked stale for a change (a commit, discard or
 * invalidation, a directory's subtree copy), and after an xattr was set or
 * removed through it. Not when its fds are only closed to save them (an
 * eviction): the object stays the same.
 */
void ovl_xattr_absent_forget(struct ovl_node *n);
/* @n is a file the daemon just created: it has no file capabilities (only a setxattr gives a file some). */
void ovl_xattr_absent_created(struct ovl_node *n);
/*
 * Whether the dir @dir has no default ACL (the answer remembered as above:
 * no system call once known). A create in it then applies the caller's
 * umask to the mode itself.
 */
bool ovl_xattr_no_default_acl(struct ovl_node *dir);

static inline void ovl_res_init(struct ovl_res *r)
{
	r->ino = 0;
	r->new_of_dev = 0;
	r->new_of_ino = 0;
	r->hashable = false;
	r->upper_fd = r->lower_fd = -1;
	r->n_extra = 0;
	r->opaque = r->metacopy = r->whiteout_in_upper = r->lower_exists = r->lower_nofd = false;
}
/* Closes the fds held by @r. */
void ovl_res_done(struct ovl_res *r);

/*
 * Resolves @name in directory @dir across the layers, as kernel overlayfs
 * does (upper hides lower, whiteouts, opaque dirs, redirects). On success
 * fills @res (owning fds) and returns 0; returns -ENOENT if the name does
 * not exist in the view (res->whiteout_in_upper / lower_exists still set),
 * or another -errno. Takes @dir's lock shared.
 */
int ovl_resolve_child(struct ovl_node *dir, const char *name, struct ovl_res *res);

/*
 * Like ovl_resolve_child(), for LOOKUP and READDIRPLUS replies: a
 * lower-only non-directory (not a lower hard link) is only stat()ed, no fd
 * is opened (res->lower_nofd). ovl_node_get() then makes a lazy node that
 * opens its fd by name at its first use, or keeps an existing node as is.
 */
int ovl_resolve_child_lazy(struct ovl_node *dir, const char *name, struct ovl_res *res);

/* Fills @s with @n's layers (borrowed: hold @n's lock while using them). */
void ovl_node_stack(struct ovl_node *n, struct ovl_stack *s);
/* Fills @s with the layers of the directory described by @r (borrowed from @r). */
void ovl_res_stack(const struct ovl_res *r, struct ovl_stack *s);
/*
 * Stats the object an absolute redirect @path ("a/b", no leading '/')
 * finds from the lower roots, as a lookup follows it. Returns 0, -ENOENT
 * or -errno.
 */
int ovl_lower_stat_abs(const char *path, struct stat *ret_st);

/* ovl_resolve_child() on an explicit stack. */
int ovl_resolve_in_stack(const struct ovl_stack *s, const char *name, struct ovl_res *res);

/* Refreshes @n if needed and takes its lock shared, with its fds valid. Returns 0 or -errno (lock not held). */
int ovl_node_rdlock_fresh(struct ovl_node *n);

/*
 * Closes the fds of the least recently used nodes when over fd_budget (they
 * re-resolve by name when used); directories with cached children go last.
 * Call with no lock held.
 */
void ovl_node_maybe_evict(void);

/* Counts fds taken or closed by nodes. */
static inline void ovl_fds_account(long delta)
{
	atomic_fetch_add(&ovl_fs->n_fds, delta);
}

/* Refreshes @n if it is stale (re-resolves it by name in its parent). Returns 0 or -errno (-ESTALE). */
int ovl_node_ensure(struct ovl_node *n);

/* Fills @st for @n as the view shows it (ids mapped, st_ino stable). Returns 0 or -errno. */
int ovl_node_getattr(struct ovl_node *n, struct stat *st);

/* Converts an on-disk stat into the view's in place (ids, ino, nlink of merged dirs). */
void ovl_stat_to_view(struct ovl_node *n, struct stat *st, bool merged_dir);

/* An origin record (trusted.draftbox.origin, docs/fs.md): the lower object an upper one shadows or was copied from. */
struct ovl_origin {
	unsigned layer;
	dev_t dev;
	ino_t ino;
	off_t size;            /* -1 when the record has none */
	struct timespec mtime; /* the lower object's at copy-up */
	bool is_new;           /* " new": not a copy keeping the origin's st_ino (over a whiteout, a split hard link) */
};

/*
 * Reads the origin record of @fd (O_PATH is fine), an object of type @mode
 * (S_IFMT bits; 0 if not known). Returns 0, -ENODATA, -EBADMSG ("v1 none"
 * too) or -errno.
 */
int ovl_origin_get(int fd, mode_t mode, struct ovl_origin *ret);

/*
 * Reads the origin record of @fd (O_PATH of an upper object): the view's
 * st_ino of a copy that keeps its origin's (ovl_view_ino()). Returns 0,
 * -ENODATA (none, or a " new" object with its own st_ino) or -errno.
 */
int ovl_origin_view_ino(int fd, ino_t *ret_ino);

/*
 * xino, as kernel overlayfs's: with the layers on more than one filesystem,
 * inode numbers of different layers can be equal, and tar, rsync -H, du or
 * find would take two files for hard links of one. The view's st_ino of
 * inode @ino of lower layer @layer (-1: the upper) then carries the
 * layer's filesystem index in its high bits. Index 0, whose numbers pass
 * through unchanged, is the filesystem of lowerdir 0, the workspace: its
 * files keep the st_ino the host shows, which tools recorded there (the
 * upper, when elsewhere, is mapped instead). An inode number too big for that
 * passes through (logged once). Set up by ovl_xino_setup() from the
 * layers' st_dev.
 */
ino_t ovl_view_ino(int layer, ino_t ino);
void ovl_xino_setup(struct ovl_fs *fs);

/* Formats the origin record of a lower object (layer index, stat). Returns the length. */
int ovl_origin_format(char *buf, size_t size, unsigned layer, const struct stat *st);

/* get/set/list/remove xattrs on an O_PATH fd of any type (symlinks included). Return like the syscalls, -errno on failure. */
ssize_t ovl_fgetxattr(int fd, const char *name, void *value, size_t size);
/* ovl_fgetxattr() of an object of known type @mode (S_IFMT bits; 0 if not known): cheaper for a directory. */
ssize_t ovl_getxattr_obj(int fd, mode_t mode, const char *name, void *value, size_t size);
int ovl_fsetxattr(int fd, const char *name, const void *value, size_t size, int flags);
ssize_t ovl_flistxattr(int fd, char *list, size_t size);
int ovl_fremovexattr(int fd, const char *name);

/* ------------------------------------------------------------------ copy-up */

/*
 * Makes sure @n exists in upper (copying it and its parents up), for a
 * change of its metadata: a regular file becomes a metacopy (metacopy=on),
 * its data stays below. Returns 0 or -errno.
 */
int ovl_copy_up(struct ovl_node *n);
/* Same, with the data: a regular file's data is in upper after it, copied only up to @size bytes (truncate on open/setattr; all if < 0). */
int ovl_copy_up_size(struct ovl_node *n, off_t size);

/*
 * Like ovl_copy_up(), and a metacopy then names its data by an absolute
 * redirect (else its data is copied up): before it moves to another name
 * (rename, link, the subtree copy of a directory move). Returns 0 or -errno.
 */
int ovl_copy_up_movable(struct ovl_node *n);

/*
 * The data copy-up of a metacopy (fs/copyup-meta.c), in two steps, so that
 * the copy itself runs without copyup_lock and other copy-ups go on:
 * ovl_metacopy_claim_fill(), with copyup_lock held, waits for another
 * thread's fill of @n to end, then claims the fill (@n->filling) and takes
 * what it needs in @f: returns 1, or 0 when @n holds its data (nothing to
 * do), or -errno. ovl_metacopy_run_fill(), with or without copyup_lock,
 * copies the data into the upper file (@size bytes at most, all if < 0;
 * then truncated to @size; @charged: the quota was charged for it already),
 * leaving its sync to the finalizer when it can (fs/finalize.h), and ends
 * the claim. ovl_metacopy_wait_fill() waits for a fill of @n to end.
 */
struct ovl_fill {
	int ufd, lfd;
	off_t size;
	bool charged;
};
int ovl_metacopy_claim_fill(struct ovl_node *n, off_t size, bool charged, struct ovl_fill *f);
int ovl_metacopy_run_fill(struct ovl_node *n, struct ovl_fill *f);
void ovl_metacopy_wait_fill(struct ovl_node *n);

/*
 * What a copy of data into an upper file must leave as it was: mode,
 * times, security.capability (a write changes or drops them).
 * ovl_keep_save() reads them from @fd, ovl_keep_restore() puts them back
 * and frees @k (after a failed save, it only frees); ovl_keep_apply() puts
 * back a saved @k and keeps it. All return 0 or -errno.
 */
struct ovl_keep {
	struct stat st;
	void *caps;
	ssize_t ncaps;
	bool saved; /* else ovl_keep_restore() only frees */
};
int ovl_keep_save(int fd, struct ovl_keep *k);
int ovl_keep_restore(int fd, struct ovl_keep *k);
int ovl_keep_apply(int fd, const struct ovl_keep *k);

/* True when the upper metacopy @upper_fd names its data by an absolute redirect (it can move anywhere). */
bool ovl_metacopy_is_movable(int upper_fd);

/*
 * Copies @size bytes of @src_fd into @dst_fd (new and empty, or all holes).
 * @sparse: keep the source's holes; @writeback: start writing each chunk
 * out as it is copied (the caller fdatasyncs next). Returns 0 or -errno.
 */
int ovl_copy_data(int src_fd, int dst_fd, off_t size, bool sparse, bool writeback);
/*
 * Copies [@pos, @end) of @src_fd into @dst_fd at the same offsets (less if
 * the source is shorter; @sparse: its holes skipped). Returns 0 or -errno.
 */
int ovl_copy_range(int src_fd, int dst_fd, off_t pos, off_t end, bool sparse);

/* Marks the upper dir @fd as holding entries with origin records (for d_ino in readdir). Best effort. */
void ovl_mark_impure(int fd);

/* Returns a dup of @n's upper fd (after copy-up by the caller), or -errno. */
int ovl_node_upper_dup(struct ovl_node *n);

/*
 * Creates a whiteout (plus origin record of @lower_st in @layer, if not
 * NULL) as a temporary in the work dir. Returns 0 and the name in @tmp.
 */
int ovl_make_whiteout_tmp(char tmp[static 64], unsigned layer, const struct stat *lower_st);

/* Same, carrying the origin record @record (@len bytes; NULL: none). */
int ovl_make_whiteout_rec(char tmp[static 64], const char *record, size_t len);

/*
 * Sets xattr @xname on @name (one component, not "." or "..") in directory
 * @dir_fd, not following a symlink at @name: one path walk through the
 * dir's /proc/self/fd magic link. Returns 0 or -errno.
 */
int ovl_lsetxattr_at(int dir_fd, const char *name, const char *xname, const void *value, size_t size, int flags);

/*
 * Removes work/@tmp (recursively) in the background, or right away when the
 * queue is full or the helper thread is not running. Leftovers of a killed
 * daemon are cleaned at the next mount.
 */
void ovl_work_reap(const char *tmp);
/*
 * ovl_work_reap() of an upper directory a subtree copy replaced: its
 * non-directories with other links (the upper files the copy linked) are
 * unlinked now, as until then each would show one link too many in the
 * view; the rest goes in the background.
 */
void ovl_work_reap_replaced(const char *tmp);

/* Starts/stops the thread that keeps a pool of ready whiteouts in the work dir (and empties the ovl_work_reap() queue). */
int ovl_whiteout_pool_start(struct ovl_fs *fs);
void ovl_whiteout_pool_stop(struct ovl_fs *fs);

/* Makes a fresh unique temporary name for the work dir. */
void ovl_tmp_name(char tmp[static 64]);

/* Removes @name (any type, recursively) from directory @dir_fd, never following symlinks. Returns 0 or -errno. */
int ovl_core_rm_rf_at(int dir_fd, const char *name);

/*
 * Copies the merged view of directory node @dir (recursively: data by
 * reflink/copy_file_range, metadata, xattrs, origin records) into a new
 * opaque directory in the work dir. Returns 0 and the temporary name in @tmp.
 */
int ovl_copy_tree_tmp(struct ovl_node *dir, char tmp[static 64]);

/* Cleans the work dir of leftovers from an earlier run. Returns 0 or -errno. */
int ovl_work_clean(int workwork_fd);

/* ------------------------------------------------------------------ dirs */

struct ovl_dirent {
	char *name;
	ino_t ino;
	uint64_t off;       /* in a listing: the entry's readdir offset */
	unsigned char type; /* DT_* */
};

/* A merged directory listing shared by the readers of one directory node (fs/dir.c). */
struct ovl_listing {
	uint32_t refs;             /* listing_lock: readers, and one while it hangs off its node */
	size_t n;
	struct ovl_dirent *ents;   /* sorted by off, each off unique and >= 3 */
};

/* Lists the merged directory of @s (no "." / ".."). Returns 0 and a new array (free with ovl_dirents_free), or -errno. */
int ovl_stack_list(const struct ovl_stack *s, struct ovl_dirent **ret, size_t *ret_n);
void ovl_dirents_free(struct ovl_dirent *e, size_t n);
/* Returns 1 if the merged directory of @s has no visible entry, 0 if it has, or -errno. */
int ovl_stack_is_empty(const struct ovl_stack *s);

/*
 * The listing of directory node @n (without "." and "..") to serve a
 * READDIR at @off, with a reference: the node's listing when @off > 0 and
 * it has one, else a new one, which then replaces the node's. Returns 0
 * and *ret, or -errno. Release with ovl_listing_put().
 */
int ovl_listing_get(struct ovl_node *n, off_t off, struct ovl_listing **ret);
/* Index of the first entry of @l past offset @off. */
size_t ovl_listing_seek(const struct ovl_listing *l, off_t off);
/* Drops the reference of ovl_listing_get(); @at_end: the READDIR found nothing left, @n lets the listing go. */
void ovl_listing_put(struct ovl_node *n, struct ovl_listing *l, bool at_end);
/* Lets go of @n's listing (the node is being freed). */
void ovl_listing_drop(struct ovl_node *n);

/* ------------------------------------------------------------------ ops */

/* The FUSE low-level operations table. */
extern const struct fuse_lowlevel_ops ovl_ops;

/* Mutating requests hold this for their duration (see struct ovl_live.quiesce). */
void ovl_mutate_begin(void);
void ovl_mutate_end(void);
/*
 * The same, for requests that may change a directory's entries or times
 * outside copyup_lock (create, mknod, mkdir, symlink, link, unlink, rmdir,
 * setattr): a copy-up that sets its parent's times back tells from these
 * counters whether one of them may have changed the parent meanwhile
 * (ovl_entry_ops_quiet()).
 */
void ovl_mutate_entry_begin(void);
void ovl_mutate_entry_end(void);
/* Whether no other such request was in flight or ended since @gen was read (ovl_entry_gen()). */
uint64_t ovl_entry_gen(void);
bool ovl_entry_ops_quiet(uint64_t gen);

/*
 * A test hook: sleeps for the milliseconds that the environment variable
 * @var names (read once, into @cache, which starts at -1), to widen a
 * window a test must hit. Unset, it costs a load.
 */
void ovl_test_delay(atomic_int *cache, const char *var);

/* Quota accounting: ovl_quota_check() reserves (or fails with -ENOSPC over the limit), ovl_quota_add() just counts (frees with negative values). */
int ovl_quota_check(off_t add_bytes, int add_inodes);
void ovl_quota_add(off_t bytes, int inodes);
/* Counts what the upper layer already uses (at mount, when a quota is set). Returns 0 or -errno. */
int ovl_quota_scan(void);

/* ------------------------------------------------------------------ daemon */

/* Runs the daemon (validation, mount, background, loop). Returns an exit status. */
int ovl_daemon_main(int argc, char **argv);

/* The control-plane callbacks (struct ovl_live). */
void ovl_live_quiesce(void *userdata, bool on);
void ovl_live_changed(void *userdata, const char *path);
void ovl_live_info(void *userdata, struct ovl_live_info *ret);
