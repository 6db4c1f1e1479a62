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
#include <stdint.h>
#include <sys/stat.h>

#define OVL_XATTR_METACOPY "trusted.overlay.metacopy"
#define OVL_XATTR_MC_REDIRECT "trusted.overlay.redirect"
/* The longest redirect draftfs writes, '/' included: kernel overlayfs follows none longer (its redirect_max default). */
#define OVL_MC_REDIRECT_MAX 256

/*
 * Reads the metacopy state of the upper regular file @fd (any fd; an
 * O_PATH fd goes through its /proc/self/fd link). Returns 0 when the file
 * holds its own data; 1 for a metacopy, with @data_path set to the
 * relative path of its data in the lower view (the redirect without its
 * leading '/'), or to "" when it has no redirect (the data is at the
 * file's own path); 2 for a metacopy with a relative redirect (the kernel
 * writes one on a rename within a directory), with @data_path set to one
 * name, looked up in the lower directories of the file's own parent; or
 * -errno: -EBADMSG for a redirect that is neither a clean absolute path
 * nor one name ("." / ".." / empty components, a NUL inside, too long).
 */
int ovl_metacopy_get(int fd, char data_path[static PATH_MAX]);

/*
 * 1 if entry @name of @dir_fd (one component, not followed) carries
 * trusted.overlay.metacopy, 0 if not, or -errno.
 */
int ovl_metacopy_at(int dir_fd, const char *name);

/*
 * The bytes upper regular file @name of @dir_fd (stat @st) holds for the
 * quota and status: its size, or 0 for a metacopy (its data is below; the
 * core charges it when the data comes up). A dir_usage_bytes_fn.
 */
uint64_t ovl_upper_file_bytes(int dir_fd, const char *name, const struct stat *st);
