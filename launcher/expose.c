/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * --expose rules: parsing, the allowlist, and resolving sources. A source
 * is resolved with realpath() (so a symlink cannot point the bind somewhere
 * the allowlist does not cover) and bound by its resolved path.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "macro.h"

int launch_expose_parse(const char *spec, struct launch_expose *ret)
{
	_cleanup_free_ char *copy = NULL, *src = NULL, *dest = NULL;
	char *parts[3] = {};
	size_t n = 0;
	bool rw = false;
	char *p;
	int r;

	copy = strdup(spec);
	if (!copy)
		return -ENOMEM;
	for (p = copy; p && n < 3;)
		parts[n++] = strsep(&p, ":");
	if (p) /* a fourth part: a path with ':' or garbage */
		return -EINVAL;
	if (n >= 2 && (strcmp(parts[n - 1], "ro") == 0 || strcmp(parts[n - 1], "rw") == 0)) {
		rw = parts[n - 1][1] == 'w';
		n--;
	}
	if (n > 2 || n == 0)
		return -EINVAL;
	r = launch_path_normalize(parts[0], &src);
	if (r < 0)
		return -EINVAL;
	r = launch_path_normalize(n == 2 ? parts[1] : parts[0], &dest);
	if (r < 0)
		return -EINVAL;
	*ret = (struct launch_expose){ .src = TAKE_PTR(src), .dest = TAKE_PTR(dest), .rw = rw, .fd = -1 };
	return 0;
}

int launch_allow_load(const char *path, char ***allow)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t len;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	while ((len = getline(&line, &cap, f)) >= 0) {
		char *s = line, *e;
		_cleanup_free_ char *norm = NULL;
		int r;

		while (*s == ' ' || *s == '\t')
			s++;
		e = s + strlen(s);
		while (e > s && (e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			*--e = 0;
		if (!*s || *s == '#')
			continue;
		r = launch_path_normalize(s, &norm);
		if (r < 0)
			return -EINVAL;
		r = strv_push(allow, norm);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * Opens @path (already resolved) as O_PATH without following a final
 * symlink, and checks that the kernel's idea of the fd's path is still
 * @path, so a component swapped for a symlink after realpath() is caught.
 */
static int pin_path(const char *path, int *ret_fd)
{
	_cleanup_close_ int fd = -1;
	char proc[64], buf[PATH_MAX];
	ssize_t n;

	fd = open(path, O_PATH | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, buf, sizeof(buf) - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	if (strcmp(buf, path) != 0)
		return -ELOOP;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int launch_expose_resolve(struct launch_config *c, const char **ret_bad)
{
	_cleanup_strv_free_ char **allow = NULL;
	size_t out = 0;

	/* resolve the allowlist itself: a prefix given through a symlink means its target */
	for (char **a = c->allow; a && *a; a++) {
		char buf[PATH_MAX];

		if (!realpath(*a, buf))
			continue; /* an absent prefix allows nothing */
		if (strv_push(&allow, buf) < 0)
			return -ENOMEM;
	}

	for (size_t i = 0; i < c->n_exposes; i++) {
		struct launch_expose *e = &c->exposes[i];
		char buf[PATH_MAX];
		bool ok = false;
		char *resolved;
		int r;

		if (!realpath(e->src, buf)) {
			r = -errno;
			*ret_bad = e->src;
			return r;
		}
		for (char **a = allow; a && *a && !ok; a++)
			ok = launch_path_has_prefix(buf, *a);
		if (!ok) {
			*ret_bad = e->src;
			return -EPERM;
		}
		resolved = strdup(buf);
		if (!resolved)
			return -ENOMEM;
		free(e->src);
		e->src = resolved;
		/* pin what was checked: bwrap binds this fd, not the path again */
		r = pin_path(e->src, &e->fd);
		if (r < 0) {
			*ret_bad = e->src;
			return r;
		}
	}

	/* the last rule for a dest wins: keep a rule only if no later one has its dest */
	for (size_t i = 0; i < c->n_exposes; i++) {
		bool overridden = false;

		for (size_t j = i + 1; j < c->n_exposes && !overridden; j++)
			overridden = strcmp(c->exposes[i].dest, c->exposes[j].dest) == 0;
		if (overridden) {
			free(c->exposes[i].src);
			free(c->exposes[i].dest);
			safe_close(c->exposes[i].fd);
			continue;
		}
		c->exposes[out++] = c->exposes[i];
	}
	c->n_exposes = out;
	return 0;
}
