// SPDX-License-Identifier: LGPL-2.1-or-later
/* libgit2 loaded on first use (git2-dl.h says why). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

#include "git2-dl.h"
#include "log.h"

#define OVL_GIT2_DEFINE(f) typeof(f) *sym_##f;
OVL_GIT2_SYMS(OVL_GIT2_DEFINE)
#undef OVL_GIT2_DEFINE

#define OVL_GIT2_SONAME "libgit2.so." LIBGIT2_SOVERSION

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_result;

static void load(void)
{
	void *h = dlopen(OVL_GIT2_SONAME, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		load_result = log_error_errno(-ELIBACC, "patch output needs %s: %s", OVL_GIT2_SONAME, dlerror());
		return;
	}
#define OVL_GIT2_RESOLVE(f)                                                                              \
	sym_##f = (typeof(f) *)dlsym(h, #f);                                                             \
	if (!sym_##f) {                                                                                  \
		load_result = log_error_errno(-ELIBACC, "patch output: %s has no %s", OVL_GIT2_SONAME, #f); \
		return;                                                                                  \
	}
	OVL_GIT2_SYMS(OVL_GIT2_RESOLVE)
#undef OVL_GIT2_RESOLVE
	/* Stays loaded: the pointers above point into it. */
	load_result = 0;
}

int ovl_git2_load(void)
{
	pthread_once(&load_once, load);
	return load_result;
}
