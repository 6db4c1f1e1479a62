/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The metacopy format, shared by the core and the control plane: an upper
 * regular file that carries trusted.overlay.metacopy holds the object's
 * metadata only (owner, mode, times, xattrs, size; no data blocks), and its
 * data is the lower regular file named by trusted.overlay.redirect (an
 * absolute path from the lower roots), or, without a redirect, the lower
 * file at the upper file's own path. Kernel overlayfs writes and reads the
 * same with metacopy=on (docs/fs.md, On-disk format).
 */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#define OVL_XATTR_METACOPY "trusted.overlay.metacopy"
/* A metacopy's data (above), or where a directory moved by kernel overlayfs (redirect_dir=on) came from. */
#define OVL_XATTR_REDIRECT "trusted.overlay.redirect"
/*
 * The fill marker: a metacopy whose data was copied into it (a data
 * copy-up, fs/finalize.c) before that data was synced. Its value is the
 * boot id of the fill. Within that boot the page cache holds the data
 * whatever happened to the daemon, so the file holds its own data; after
 * a reboot the data may never have reached the disk, so the file is a
 * plain metacopy again (its data is below, as before the fill).
 */
#define OVL_XATTR_FILLED "trusted.draftbox.filled"
/* On a metacopy being filled in the background (fs/bgfill.h): this boot's id. */
#define OVL_XATTR_BGFILL "trusted.draftbox.bgfill"
/*
 * Beside it, which chunks are in, kept up to date under the file's lock
 * before a request may write to a chunk: struct ovl_bgfill_map_hdr
 * (little-endian), then a bit per chunk (bit c % 8 of byte c / 8).
 */
#define OVL_XATTR_BGFILL_MAP "trusted.draftbox.bgfill.map"
struct ovl_bgfill_map_hdr {
	uint64_t end;   /* the fill end: the data below ends here for this file (a truncate lowers it) */
	uint64_t chunk; /* bytes per chunk */
};
#define OVL_BOOT_ID_LEN 36

/* The longest redirect draftfs writes, '/' included: kernel overlayfs follows none longer (its redirect_max default). */
#define OVL_MC_REDIRECT_MAX 256

/*
 * Reads the metacopy state of the upper regular file @fd (any fd; an
 * O_PATH fd goes through its /proc/self/fd link). Returns 0 when the file
 * holds its own data (no metacopy xattr, or a fill marker of this boot); 1 for a metacopy, with @data_path set to the
 * relative path of its data in the lower view (the redirect without its
 * leading '/'), or to "" when it has no redirect (the data is at the
 * file's own path); 2 for a metacopy with a relative redirect (the kernel
 * writes one on a rename within a directory), with @data_path set to one
 * name, looked up in the lower directories of the file's own parent; or
 * -errno: -EBADMSG for a redirect that is neither a clean absolute path
 * nor one name ("." / ".." / empty components, a NUL inside, too long).
 */
int ovl_metacopy_get(int fd, char data_path[static PATH_MAX]);

/* This boot's id (/proc/sys/kernel/random/boot_id, 36 chars), or NULL if it cannot be read. */
const char *ovl_boot_id(void);

/* True if @value (@n bytes, or -errno: no marker) is a fill marker of this boot. */
bool ovl_fill_marker_is_current(const char *value, ssize_t n);

/*
 * 1 if entry @name of @dir_fd is a metacopy carrying a fill marker of this
 * boot: its data is filled in but not yet finalized (fs/finalize.h). 0
 * otherwise.
 */
int ovl_metacopy_filled_at(int dir_fd, const char *name);

/*
 * 1 if entry @name of @dir_fd (one component, not followed) is a
 * metacopy (carries trusted.overlay.metacopy and no fill marker of this
 * boot), 0 if not, or -errno.
 */
int ovl_metacopy_at(int dir_fd, const char *name);

/* getxattr @xname of entry @name of @dir_fd, not followed, in one syscall where the kernel can. Size or -errno. */
ssize_t ovl_xattr_at(int dir_fd, const char *name, const char *xname, void *value, size_t size);

/*
 * The data copy-up of a metacopy, in place (fs/copyup-meta.c; the core's
 * copy-up and the control plane's partial commit). ovl_metacopy_fill()
 * copies the first min(@size, its size) bytes of the data @data_fd into
 * the metacopy @fd (writable; FICLONE, else copy_file_range, holes kept
 * where @fd has no blocks of its own), makes @size its size and puts back
 * its mode, times and security.capability (a write drops it). @writeback:
 * start writing the copy out as it goes (a sync follows). Then
 * ovl_metacopy_make_plain() makes it a plain file: with @sync, fdatasync
 * first and fsync after; in between it removes the metacopy, redirect and
 * fill-marker xattrs, metacopy first. Both return 0 or -errno.
 */
int ovl_metacopy_fill(int fd, int data_fd, off_t size, bool writeback);
/*
 * Copies into the metacopy @fd, from @data_fd, the chunks below @end that
 * @map (a bit per @chunk bytes, OVL_XATTR_BGFILL_MAP) says are not in yet,
 * keeping its size, times, mode and capabilities. Returns 0 or -errno.
 */
int ovl_metacopy_fill_chunks(int fd, int data_fd, off_t end, off_t chunk, const uint8_t *map);
int ovl_metacopy_make_plain(int fd, bool sync);

/*
 * The bytes upper regular file @name of @dir_fd (stat @st) holds for the
 * quota and status: its size, or 0 for a metacopy (its data is below; the
 * core charges it when the data comes up). A dir_usage_bytes_fn.
 */
uint64_t ovl_upper_file_bytes(int dir_fd, const char *name, const struct stat *st);
