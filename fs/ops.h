/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Shared pieces of the FUSE operation files (ops-entry.c, ops-rename.c,
 * ops-file.c, xattr.c): the handlers each file provides to the operations
 * table and the small helpers they share.
 */
#pragma once

#include "ovl.h"
#include "uring.h"

/* An open file: the fd and whether it points at a lower object (opened before any copy-up). */
/* How the kernel does I/O on an open file (see fs/passthrough.c). */
enum ovl_iomode {
	OVL_IO_CACHED,    /* reads and writes come to us; the kernel may cache pages */
	OVL_IO_PT,        /* the kernel reads, writes and maps the backing file itself */
	OVL_IO_PT_DIRECT, /* passthrough mmap only; reads and writes come to us */
};

struct ovl_fh {
	int fd;
	struct ovl_bgfill *bf; /* the upper file's background fill (fs/bgfill.h), a reference; NULL: none */
	bool lower;
	bool counted;        /* counted in the node's open state (ovl_pt_open) */
	uint8_t mode;        /* enum ovl_iomode */
	int32_t backing_id;
	int wflags;          /* a writable handle's open flags, for its next upper object (ovl_fh_rebind); -1 read-only */
	atomic_uint gen;     /* the node's gen the fd belongs to */
};

static inline int ovl_fh_fd(struct fuse_file_info *fi)
{
	return ((struct ovl_fh *)(uintptr_t)fi->fh)->fd;
}
static inline struct ovl_bgfill *ovl_fh_bgfill(struct fuse_file_info *fi)
{
	return ((struct ovl_fh *)(uintptr_t)fi->fh)->bf;
}
static inline bool ovl_fh_is_lower(struct fuse_file_info *fi)
{
	return ((struct ovl_fh *)(uintptr_t)fi->fh)->lower;
}

/*
 * Before a read or write through @fi, with ovl_mutate_begin() held (a
 * writable handle's rebind copies up): if a commit or discard on the live
 * mount moved or dropped the object the handle was opened on, moves the
 * handle onto the file the view shows now (copied up again for a writable
 * one), behind the same fd number (fs/rebind.c). Returns 0 or -errno.
 */
int ovl_fh_rebind(struct ovl_node *n, struct fuse_file_info *fi);

/* Whether ovl_fh_rebind() has anything to do: a commit or discard touched @n since @fi's handle was bound. */
static inline bool ovl_fh_is_stale(struct ovl_node *n, struct fuse_file_info *fi)
{
	return atomic_load(&((struct ovl_fh *)(uintptr_t)fi->fh)->gen) != atomic_load(&n->gen);
}

/* State of a create-like request: the parent's upper fd and the new owner. */
struct ovl_create {
	fuse_req_t req;      /* the caller's (its umask), NULL for a link */
	struct ovl_node *p;  /* the parent */
	int pfd;             /* owned: dup of the parent's upper dir */
	int wfd;             /* owned, -1 for work/: where to build over a whiteout (ovl_create_work_fd) */
	char wname[64];      /* that dir's name in work/ (fs/acl.h, ovl_acl_inherit_dir) */
	uid_t uid;           /* on-disk owner, (uid_t)-1 to keep root */
	gid_t gid;
	bool over_whiteout;  /* the name holds a whiteout: build in work/ and rename over it */
	bool unresolved;     /* not looked up (an upper-only parent): on EEXIST, ovl_prepare_create_again() */
	char origin[256];    /* origin record for the new object ("" none): the whiteout's, or "v1 none" */
};

/* Writes c->origin on the new object @name in @dir (best effort). */
void ovl_create_set_origin(const struct ovl_create *c, int dir, const char *name, int fd);

/*
 * Checks that @name can be created in @p (not in the view, valid), copies
 * @p up and fills @c. @req gives the caller's ids and umask (NULL: keep
 * root's, a link). Returns 0 or -errno; ovl_create_done() in any case.
 * In an upper-only @p the name is not looked up (c->unresolved): the
 * create itself must be exclusive, and an EEXIST from it goes through
 * ovl_prepare_create_again() and one more try.
 */
int ovl_prepare_create(fuse_req_t req, struct ovl_node *p, const char *name, struct ovl_create *c);
/*
 * After the create of a c->unresolved @c failed with EEXIST: prepares @c
 * again, this time looking the name up (EEXIST if it is in the view, else
 * over_whiteout). Returns 0 or -errno.
 */
int ovl_prepare_create_again(struct ovl_create *c, const char *name);
void ovl_create_done(struct ovl_create *c);
/* The dir to build in when c->over_whiteout: work/, or one that carries the parent's default ACL. */
static inline int ovl_create_work_fd(const struct ovl_create *c)
{
	return c->wfd >= 0 ? c->wfd : ovl_fs->workwork_fd;
}
/*
 * Where the create of @name goes: the parent's upper dir and @name, or
 * (c->over_whiteout) a fresh name, written to @tmp, in ovl_create_work_fd().
 * Returns the dir and sets *@at.
 */
static inline int ovl_create_target(const struct ovl_create *c, const char *name, char tmp[static 64],
				    const char **at)
{
	*at = name;
	if (!c->over_whiteout)
		return c->pfd;
	ovl_tmp_name(tmp);
	*at = tmp;
	return ovl_create_work_fd(c);
}
/*
 * After the create of @name failed with *@r: whether to try it once more,
 * an EEXIST of a c->unresolved @c, then prepared again by
 * ovl_prepare_create_again() (whose error, if any, goes to *@r).
 */
static inline bool ovl_create_retry(struct ovl_create *c, const char *name, int *r)
{
	if (*r != -EEXIST || !c->unresolved)
		return false;
	*r = ovl_prepare_create_again(c, name);
	return *r >= 0;
}
/* Sets the setuid/setgid/sticky bits of @mode on the new object @fd/@at (@at NULL: @fd itself), keeping the permissions it got. */
int ovl_create_special_bits(int fd, const char *at, mode_t mode);
/* Moves work/@tmp over the whiteout at @name when c->over_whiteout. Returns 0 or -errno. */
int ovl_finish_create(struct ovl_create *c, const char *name, const char *tmp, bool is_dir);
/* Creates in the work dir a whiteout carrying the origin record for replacing @res. Returns 0 or -errno. */
int ovl_whiteout_tmp_for(const struct ovl_res *res, char tmp[static 64]);

/* Resolves @name in @p, gets its node (one lookup added) and its view attributes. Returns 0 or -errno. */
int ovl_lookup_node(struct ovl_node *p, const char *name, struct ovl_node **ret, struct stat *ret_st);
/*
 * The node of an object just created at @pfd/@name (the parent @p's upper
 * dir) by a create-like request, without resolving the name across the
 * layers again: upper only, opaque if @opaque (a dir made over a whiteout).
 * Adds one lookup. Returns 0, *ret and the view's attributes (and, if
 * @ret_upper_st is not NULL, the upper object's own), or -errno.
 */
int ovl_new_node(struct ovl_node *p, const char *name, int pfd, bool opaque, struct ovl_node **ret,
		 struct stat *ret_st, struct stat *ret_upper_st);
/* Fills an entry reply for @n with the mount's timeouts. */
void ovl_fill_entry(struct fuse_entry_param *e, struct ovl_node *n, const struct stat *st);

void ovl_op_init(void *userdata, struct fuse_conn_info *conn);
void ovl_op_destroy(void *userdata);
void ovl_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		   const char *newname, unsigned int flags);
void ovl_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ovl_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi);
void ovl_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void ovl_op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off,
		      struct fuse_file_info *fi);
void ovl_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ovl_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void ovl_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ovl_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void ovl_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void ovl_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ovl_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void ovl_op_access(fuse_req_t req, fuse_ino_t ino, int mask);
void ovl_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
		      struct fuse_file_info *fi);
void ovl_op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in, struct fuse_file_info *fi_in,
			    fuse_ino_t ino_out, off_t off_out, struct fuse_file_info *fi_out, size_t len,
			    int flags);
void ovl_op_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence, struct fuse_file_info *fi);
void ovl_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
		     int flags);
void ovl_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void ovl_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void ovl_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

/*
 * The set-id bits a write or truncate by a caller without CAP_FSETID clears
 * from @mode: S_ISUID, and S_ISGID when group exec is set (as the kernel's
 * should_remove_suid()). With FUSE_HANDLE_KILLPRIV_V2 (passthrough.c) that
 * is ours to do, since our own writes as root would keep them.
 */
static inline mode_t ovl_setid_to_kill(mode_t mode)
{
	mode_t kill = mode & S_ISUID;

	if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))
		kill |= S_ISGID;
	return kill;
}

/* ---- the session's device I/O (fs/devio.c) */

/* Installs the I/O hooks on ovl_fs->se (before the loop). Returns 0 or -ENOMEM. */
int ovl_devio_setup(struct ovl_fs *fs);
/*
 * From the INIT handler: adds @flags and @flags2 (and max_stack_depth, if
 * not 0) to the INIT reply this thread is about to send. flags2 bits are
 * sent only when libfuse's reply carries FUSE_INIT_EXT.
 */
void ovl_devio_init_add(uint32_t flags, uint32_t flags2, uint32_t max_stack_depth);
/* The kernel's INIT flags2 (its offer), 0 before INIT or without FUSE_INIT_EXT. */
uint32_t ovl_devio_kernel_flags2(void);

/* ---- passthrough (fs/passthrough.c) */

/* Remembers the device and whether passthrough is wanted (before the loop). Returns 0. */
int ovl_pt_setup(struct ovl_fs *fs);
/* From the INIT handler: asks the kernel for passthrough (and coherent direct writes) in the reply being built. */
void ovl_pt_init(struct fuse_conn_info *conn);
/* After the INIT reply went out with @flags2 added: passthrough (direct-write coherence) is on if it was among them. */
void ovl_pt_init_sent(uint32_t flags2);
/* True while the kernel accepts passthrough opens on this mount. */
bool ovl_pt_enabled(void);
/* True when a FOPEN_DIRECT_IO write drops the pages other opens cached (Linux 6.6+, negotiated at INIT). */
bool ovl_dio_writes_coherent(void);
/*
 * Chooses the io mode of a new open of node @n through @fd (the file the
 * handle reads and writes; @known its attributes, or NULL to read them)
 * and fills @fh->mode, ->backing_id and ->counted. Returns 0, -ESTALE when
 * a writable open meets passthrough files of an older object of the node
 * (the caller splits the node and fails the open with ESTALE), or -errno.
 */
int ovl_pt_open(struct ovl_node *n, int fd, const struct stat *known, bool write, struct ovl_fh *fh);
/* Undoes ovl_pt_open() at release (or when the open reply failed). */
void ovl_pt_release(struct ovl_node *n, const struct ovl_fh *fh);
/* fuse_reply_open() that also carries @fh's io mode and backing id. */
int ovl_pt_reply_open(fuse_req_t req, const struct fuse_file_info *fi, const struct ovl_fh *fh);

/* ---- FUSE over io_uring (fs/uring.c; ovl_uring_available() in uring.h) */

/*
 * From the INIT handler, last: if the kernel offers io_uring and uring= is
 * not off, starts one queue of threads per possible CPU (each pinned, with
 * its ring and buffers) and asks for FUSE_OVER_IO_URING in the reply. On
 * any failure nothing is asked for and requests stay on /dev/fuse.
 */
void ovl_uring_init(struct fuse_conn_info *conn);
/* The FUSE_OVER_IO_URING bit of INIT flags2. */
uint32_t ovl_uring_init_flags2(void);
/* True if the queues' buffers hold every request and reply of a connection with these INIT limits. */
bool ovl_uring_fits(uint32_t max_write, uint16_t max_pages);
/* After the INIT reply went out with @flags2 added: the threads register their entries, or stop. */
void ovl_uring_init_sent(uint32_t flags2);
/*
 * From the session's writev hook: if @iov is the reply to the request this
 * thread is serving from a queue, stores it in the entry (the thread
 * commits it) and returns true with its length in @ret; else false.
 */
bool ovl_uring_take_reply(struct iovec *iov, int count, ssize_t *ret);
/*
 * The entry's payload buffer when this thread serves a queue request and
 * @size fits, for a handler that reads a reply body into it directly
 * (fuse_reply_buf() with this pointer then copies nothing); else NULL.
 */
void *ovl_uring_reply_buf(size_t size);
/* Stops and joins the queue threads (after the loop ended and the mount is gone). */
void ovl_uring_stop(void);
/* Fills the transport fields of @ret (transport, queues, threads_per_queue, ring_requests, ring_sched) for "status". */
void ovl_uring_info(struct ovl_live_info *ret);

/*
 * ring_sched=idle (fs/ring-sched.c): starts the guard that runs the
 * daemon's threads as SCHED_IDLE while requests flow (@served counts them)
 * and none of the queue threads @tids waits to run. Returns 0, or -errno if
 * this daemon may not (its threads then stay SCHED_OTHER).
 */
int ovl_ring_sched_start(const pid_t *tids, unsigned n, const _Atomic uint64_t *served);
/* From a queue thread after each request it served: wakes the guard if it sleeps. */
void ovl_ring_sched_note(void);
/* Stops the guard; the daemon's threads are SCHED_OTHER again. */
void ovl_ring_sched_stop(void);
/* The guard's state for "status": ring_sched and ring_sched_backoffs of @ret. */
void ovl_ring_sched_info(struct ovl_live_info *ret);
