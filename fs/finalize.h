/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The deferred end of a data copy-up (fs/finalize.c). A data copy-up is
 * made as a metacopy, filled in place, and marked with this boot's id
 * (OVL_XATTR_FILLED, metacopy.h); the finalizer thread then syncs the
 * data and removes the metacopy, redirect and marker xattrs, in that
 * order. Until then every reader (lookup, control plane, quota) takes the
 * marked file as holding its data, the kernel's page cache holding it in
 * this boot; after a reboot an unfinalized file is a metacopy of the data
 * below again: its unsynced writes are lost, the file is never half
 * copied. An fsync of the file, a commit or discard (quiesce) and the
 * unmount finalize first.
 */
#pragma once

#include <stdbool.h>

struct ovl_fs;
struct ovl_layers;

/*
 * Starts the finalizer thread. When the state dir holds the "unsynced"
 * flag (a daemon of this upper stopped without finalizing), the thread
 * first walks the upper and finalizes the marked files of this boot.
 * Returns 0 or -errno.
 */
int ovl_finalize_start(struct ovl_fs *fs);

/* Finalizes everything queued, syncs the upper fs once, removes the flag. */
void ovl_finalize_stop(struct ovl_fs *fs);

/* True if a data copy-up may leave its sync to the finalizer (fsync=1, metacopy=on, boot id known, thread running). */
bool ovl_finalize_enabled(void);

/*
 * Marks the filled metacopy @fd (writable) and queues it for the
 * finalizer (a dup of @fd). Returns 0, or -errno: the caller syncs and
 * finalizes the file itself (ovl_finalize_fd()).
 */
int ovl_finalize_defer(int fd);

/*
 * Finalizes @fd now if it is a marked metacopy (an fsync of the file).
 * Returns 1 if it did (the caller then fsyncs to make the xattr removal
 * durable too), 0 if there was nothing to do, or -errno.
 */
int ovl_finalize_fd(int fd);

/*
 * A flag in the state dir (an empty file @name): made before the state it
 * stands for can exist (0 or -errno), removed once it cannot any more
 * (a failure is logged).
 */
int ovl_state_flag_raise(int state_fd, const char *name);
void ovl_state_flag_lower(int state_fd, const char *name);

/*
 * Offline (`draftfs recover` with no daemon): when the "unsynced" flag says
 * a killed daemon may have left marked files, finalizes those of this boot
 * in the upper of @l and removes the flag, so kernel overlayfs reads them
 * as the plain files they are. *@ret_done: how many. Returns 0 or the
 * first -errno (the flag then stays).
 */
int ovl_finalize_offline(const struct ovl_layers *l, unsigned *ret_done);

/* Waits until everything queued before the call is finalized. Returns 0, or the first error since the last call. */
int ovl_finalize_flush(void);
