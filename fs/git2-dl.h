/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libgit2, loaded on first use. Only the patch output (patch.c) needs it,
 * and linking it made every process of draftfs map it and the 15 libraries
 * it pulls in (Kerberos, mbedTLS, libssh2, ...): 4 ms and ~250 page faults
 * added to each mount, on the session-create path, for a library most
 * mounts never call. The functions patch.c uses are reached through the
 * sym_git_* pointers below, set by ovl_git2_load() from the soname the
 * headers were built against, with their prototypes from those headers.
 */
#pragma once

#include <git2.h>
#include <git2/sys/mempack.h>
#include <git2/sys/odb_backend.h>
#include <git2/sys/repository.h>

#define OVL_GIT2_SYMS(X)          \
	X(git_diff_free)          \
	X(git_diff_print)         \
	X(git_diff_tree_to_tree)  \
	X(git_index_add)          \
	X(git_index_clear)        \
	X(git_index_free)         \
	X(git_index_new)          \
	X(git_index_write_tree_to) \
	X(git_libgit2_init)       \
	X(git_mempack_new)        \
	X(git_mempack_reset)      \
	X(git_odb_add_backend)    \
	X(git_odb_free)           \
	X(git_odb_new)            \
	X(git_odb_write)          \
	X(git_oid_equal)          \
	X(git_repository_free)    \
	X(git_repository_new)     \
	X(git_repository_set_odb) \
	X(git_tree_free)          \
	X(git_tree_lookup)

#define OVL_GIT2_DECLARE(f) extern typeof(f) *sym_##f;
OVL_GIT2_SYMS(OVL_GIT2_DECLARE)
#undef OVL_GIT2_DECLARE

/*
 * Loads libgit2 and resolves every sym_git_* pointer, once per process (later
 * calls return the first result). Returns 0, or -ELIBACC when the library or
 * one of its functions is missing (logged once, with dlerror()).
 */
int ovl_git2_load(void);
