/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fd-relative path handling. Paths that come from a layer, the API or the
 * sandbox are never resolved by the kernel from "/" and never through a
 * symlink: they are validated here, then walked one component at a time
 * below a directory fd (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS where the
 * kernel has it, an O_NOFOLLOW walk otherwise).
 */
#pragma once

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* True if @name is one valid path component: non-empty, not "." or "..", no '/', at most NAME_MAX bytes. */
bool name_is_valid(const char *name);

/*
 * Checks that @path is a clean relative path: not absolute, no "." or ".."
 * component, no empty component (no "//"), no component over NAME_MAX, total
 * under PATH_MAX. "" means the root itself and is accepted.
 * Returns 0, -EINVAL or -ENAMETOOLONG.
 */
int path_check_relative(const char *path);

/*
 * Normalizes an API path into a clean relative path: strips leading and
 * trailing slashes, folds "//" and "./". Rejects ".." anywhere (-EINVAL) and
 * NUL bytes (the caller passes @len). On success *ret is a new string the
 * caller frees; "" is the root.
 */
int path_normalize_relative(const char *path, size_t len, char **ret);

/*
 * Opens @path (relative, checked with path_check_relative) below @dir_fd
 * without following any symlink, including in the last component, and
 * without leaving @dir_fd's tree. @flags gets O_CLOEXEC|O_NOFOLLOW added.
 * With O_CREAT only the last component is created. Returns the fd or -errno
 * (-ELOOP when a symlink is met, -EXDEV when the walk would escape).
 */
int openat_beneath(int dir_fd, const char *path, int flags, mode_t mode);

/*
 * Opens the parent directory of @path below @dir_fd as openat_beneath()
 * would (O_PATH|O_DIRECTORY) and returns its fd; *ret_name points at the
 * last component inside @path. @path must not be "". Returns fd or -errno.
 */
int openat_beneath_parent(int dir_fd, const char *path, const char **ret_name);

/*
 * Creates every missing directory of @path below @dir_fd (like mkdir -p),
 * never following symlinks. Returns an O_PATH|O_DIRECTORY fd of the last one
 * or -errno.
 */
int mkdirat_beneath_p(int dir_fd, const char *path, mode_t mode);

/* Reads the whole of @fd (from its current offset) into a new NUL-terminated buffer. Returns 0 or -errno; -EFBIG past @max bytes. */
int read_full_fd(int fd, size_t max, char **ret, size_t *ret_size);

/* Writes all of @buf to @fd, retrying on short writes and EINTR. Returns 0 or -errno. */
int write_full(int fd, const void *buf, size_t size);

/* Reopens an O_PATH fd with real @flags through /proc/self/fd (never a symlink in a layer). Returns fd or -errno. */
int fd_reopen(int fd, int flags);

/*
 * chmod of the object @fd refers to, an O_PATH fd included: fchmodat2(fd,
 * "", AT_EMPTY_PATH) (Linux 6.6), else through /proc/self/fd. Not for a
 * symlink (the /proc fallback would follow it). Returns 0 or -errno.
 */
int fd_chmod(int fd, mode_t mode);

/*
 * Opens the directory @dir_fd refers to (an O_PATH fd is fine) as a new DIR
 * stream with its own open file description. Returns 0 and *ret (the caller
 * closedir()s it), or -errno.
 */
int opendir_at(int dir_fd, DIR **ret);

/* The bytes regular file @name of @dir_fd (stat @st) counts for (see dir_usage_at()). */
typedef uint64_t (*dir_usage_bytes_fn)(int dir_fd, const char *name, const struct stat *st);

/*
 * Adds up the tree below @dir_fd without following symlinks or crossing into
 * other directories by name: every entry counts one inode, regular files add
 * their st_size, or what @bytes_of says (when not NULL). Entries that vanish
 * during the walk are skipped. Returns 0 or -errno (-ELOOP past 4096 levels).
 */
int dir_usage_at(int dir_fd, dir_usage_bytes_fn bytes_of, uint64_t *ret_inodes, uint64_t *ret_bytes);

/* True if the kernel supports openat2(RESOLVE_BENEATH). Cached. */
bool have_openat2(void);
