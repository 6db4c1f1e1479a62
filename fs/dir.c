// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Merged directory listings: upper first, then each lower dir of the
 * stack; a name is shown once (the topmost), whiteouts hide the name in the
 * layers below and are never shown. d_ino matches st_ino: for upper
 * entries of an impure directory (one that holds copied-up entries) the
 * origin record is read. A listing is a snapshot taken when a stream
 * starts (and again at rewind), like fuse-overlayfs and kernel overlayfs'
 * merge cache, shared by the readers of the directory (see "shared
 * listings" below).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdpath.h"
#include "macro.h"
#include "ovl.h"
#include "siphash.h"

struct name_set {
	size_t cap, n;
	int32_t *slot; /* index into ents, -1 empty; whiteouts stored with ~index into wh */
};

struct lister {
	struct ovl_dirent *ents;
	size_t n, cap;
	char **wh; /* hidden names (whiteouts) */
	size_t nwh, capwh;
	ino_t *lower_ino; /* per entry: ino of the same name in a lower layer (0 none) */
	struct name_set set;
};

static uint64_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return h;
}

static const char *slot_name(struct lister *l, int32_t v)
{
	return v >= 0 ? l->ents[v].name : l->wh[~v];
}

static int set_grow(struct lister *l)
{
	size_t nc = l->set.cap ? l->set.cap * 2 : 256;
	int32_t *ns = malloc(nc * sizeof(*ns));

	if (!ns)
		return -ENOMEM;
	for (size_t i = 0; i < nc; i++)
		ns[i] = INT32_MIN;
	for (size_t i = 0; i < l->set.cap; i++) {
		int32_t v = l->set.slot[i];
		size_t b;

		if (v == INT32_MIN)
			continue;
		for (b = hash_str(slot_name(l, v)) & (nc - 1); ns[b] != INT32_MIN; b = (b + 1) & (nc - 1))
			;
		ns[b] = v;
	}
	free(l->set.slot);
	l->set.slot = ns;
	l->set.cap = nc;
	return 0;
}

/* Returns the slot value for @name, or INT32_MIN. */
static int32_t set_find(struct lister *l, const char *name)
{
	if (!l->set.cap)
		return INT32_MIN;
	for (size_t b = hash_str(name) & (l->set.cap - 1);; b = (b + 1) & (l->set.cap - 1)) {
		int32_t v = l->set.slot[b];

		if (v == INT32_MIN)
			return INT32_MIN;
		if (strcmp(slot_name(l, v), name) == 0)
			return v;
	}
}

static int set_add(struct lister *l, int32_t v)
{
	size_t b;
	int r;

	if ((l->set.n + 1) * 2 > l->set.cap) {
		r = set_grow(l);
		if (r < 0)
			return r;
	}
	for (b = hash_str(slot_name(l, v)) & (l->set.cap - 1); l->set.slot[b] != INT32_MIN; b = (b + 1) & (l->set.cap - 1))
		;
	l->set.slot[b] = v;
	l->set.n++;
	return 0;
}

static int add_entry(struct lister *l, const char *name, ino_t ino, unsigned char type)
{
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 64;
		struct ovl_dirent *ne = realloc(l->ents, nc * sizeof(*ne));
		ino_t *nl;

		if (!ne)
			return -ENOMEM;
		l->ents = ne;
		nl = realloc(l->lower_ino, nc * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		l->lower_ino = nl;
		l->cap = nc;
	}
	l->ents[l->n].name = strdup(name);
	if (!l->ents[l->n].name)
		return -ENOMEM;
	l->ents[l->n].ino = ino;
	l->ents[l->n].type = type;
	l->lower_ino[l->n] = 0;
	l->n++;
	return set_add(l, (int32_t)(l->n - 1));
}

static int add_whiteout(struct lister *l, const char *name)
{
	if (l->nwh == l->capwh) {
		size_t nc = l->capwh ? l->capwh * 2 : 16;
		char **nw = realloc(l->wh, nc * sizeof(*nw));

		if (!nw)
			return -ENOMEM;
		l->wh = nw;
		l->capwh = nc;
	}
	l->wh[l->nwh] = strdup(name);
	if (!l->wh[l->nwh])
		return -ENOMEM;
	l->nwh++;
	return set_add(l, ~(int32_t)(l->nwh - 1));
}

static void lister_free(struct lister *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->ents[i].name);
	free(l->ents);
	for (size_t i = 0; i < l->nwh; i++)
		free(l->wh[i]);
	free(l->wh);
	free(l->lower_ino);
	free(l->set.slot);
}

static bool is_impure(int fd)
{
	char v[4];

	return ovl_getxattr_obj(fd, S_IFDIR, OVL_XATTR_IMPURE, v, sizeof(v)) == 1 ||
	       ovl_getxattr_obj(fd, S_IFDIR, "trusted.overlay.impure", v, sizeof(v)) == 1;
}

/* Adds one raw entry of the directory @dfd of lower layer @layer (-1: the upper) to @l. */
static int list_entry(struct lister *l, int dfd, const char *name, ino_t ino, unsigned char type, int layer)
{
	bool upper = layer < 0;
	int32_t v;

	if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
		return 0;
	ino = ovl_view_ino(layer, ino);
	v = set_find(l, name);
	if (v != INT32_MIN) {
		if (v >= 0 && !upper && l->lower_ino[v] == 0)
			l->lower_ino[v] = ino;
		return 0;
	}
	if (type == DT_CHR || type == DT_UNKNOWN) {
		struct stat st;

		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return errno == ENOENT ? 0 : -errno;
		if (ovl_is_whiteout(&st))
			return add_whiteout(l, name);
		type = (unsigned char)IFTODT(st.st_mode);
	}
	return add_entry(l, name, ino, type);
}

/*
 * Lists one layer's directory @fd (O_PATH) into @l: opened relative to
 * itself and read with getdents64 directly (no /proc walk, no fdopendir
 * fstat+fcntl: 3 syscalls less per directory).
 */
static int list_layer(struct lister *l, int fd, int layer)
{
	_cleanup_close_ int dfd = -1;
	_cleanup_free_ char *buf = NULL;
	const size_t bufsize = 32768;

	dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	buf = malloc(bufsize);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n = getdents64(dfd, buf, bufsize);

		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		for (ssize_t off = 0; off < n;) {
			struct dirent64 *de = (struct dirent64 *)(void *)(buf + off);
			int r;

			off += de->d_reclen;
			r = list_entry(l, dfd, de->d_name, de->d_ino, de->d_type, layer);
			if (r < 0)
				return r;
		}
	}
}

/* Lists the merged directory of stack @s. */
static int list_stack(const struct ovl_stack *s, struct lister *l)
{
	size_t n_upper = 0;
	bool impure = false;
	int r;

	if (s->upper_fd >= 0) {
		r = list_layer(l, s->upper_fd, -1);
		if (r < 0)
			return r;
		n_upper = l->n;
		impure = is_impure(s->upper_fd);
	}
	for (uint16_t i = 0; i < s->n; i++) {
		r = list_layer(l, s->l[i].fd, s->l[i].layer);
		if (r < 0)
			return r;
	}
	if (!impure)
		return 0;
	for (size_t i = 0; i < n_upper; i++) {
		_cleanup_close_ int fd = openat(s->upper_fd, l->ents[i].name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		ino_t oi;

		if (fd < 0)
			continue;
		if (ovl_origin_view_ino(fd, &oi) == 0)
			l->ents[i].ino = oi;
		else if (l->lower_ino[i] && ovl_fgetxattr(fd, OVL_XATTR_ORIGIN_KERNEL, NULL, 0) >= 0)
			l->ents[i].ino = l->lower_ino[i];
	}
	return 0;
}

int ovl_stack_list(const struct ovl_stack *s, struct ovl_dirent **ret, size_t *ret_n)
{
	struct lister l = { 0 };
	int r;

	r = list_stack(s, &l);
	if (r < 0) {
		lister_free(&l);
		return r;
	}
	*ret = TAKE_PTR(l.ents);
	*ret_n = l.n;
	l.n = 0;
	lister_free(&l);
	return 0;
}

void ovl_dirents_free(struct ovl_dirent *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(e[i].name);
	free(e);
}

/* ---------------------------------------------------------- shared listings */

/*
 * With no OPENDIR (the kernel's no-opendir mode) a READDIR carries no
 * handle of ours, so readers of a directory share its node's listing.
 * Entries are sorted by an offset derived from a keyed hash of the name
 * (SipHash-2-4 under a per-mount secret: offsets are visible to sandboxed
 * code, which must not be able to make names collide). A reader resumes
 * after the offset of the last entry it got, whichever listing serves it
 * next, so a rebuild between its READDIRs never makes it skip or repeat an
 * entry that was there all along (POSIX leaves only added or removed
 * names open). Offsets are unique in a listing: a collision moves the
 * later name (by name order) up by one.
 *
 * A listing is built for a READDIR at offset 0 (a new stream, or a
 * rewind) or when the node has none; it hangs off the node until a stream
 * reads past its end, a new stream replaces it, or the node is freed, and
 * is freed when the last READDIR using it is done. At most MAX_ATTACHED
 * hang off nodes at once; beyond that a listing serves one READDIR only.
 * Lock: listing_lock, a leaf, held for pointer work only.
 */
#define MAX_ATTACHED 1024
/* Entry offsets: 1 and 2 are "." and ".."; names get [3, 2^62), with room above for collision bumps. */
#define OFF_FIRST 3

static pthread_mutex_t listing_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t n_attached;

static int cmp_off(const void *a, const void *b)
{
	const struct ovl_dirent *x = a, *y = b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return strcmp(x->name, y->name);
}

static void listing_free(struct ovl_listing *l)
{
	if (!l)
		return;
	ovl_dirents_free(l->ents, l->n);
	free(l);
}

static int listing_build(struct ovl_node *n, struct ovl_listing **ret)
{
	struct ovl_listing *l = calloc(1, sizeof(*l));
	struct ovl_stack s;
	int r;

	if (!l)
		return -ENOMEM;
	r = ovl_node_rdlock_fresh(n);
	if (r < 0) {
		free(l);
		return r;
	}
	ovl_node_stack(n, &s);
	if (s.upper_fd < 0 && s.n == 0)
		r = -ESTALE;
	else
		r = ovl_stack_list(&s, &l->ents, &l->n);
	pthread_rwlock_unlock(&n->lock);
	if (r < 0) {
		free(l);
		return r;
	}
	for (size_t i = 0; i < l->n; i++) {
		uint64_t h = siphash24(ovl_fs->dir_key, l->ents[i].name, strlen(l->ents[i].name));

		l->ents[i].off = OFF_FIRST + (h >> 2);
	}
	if (l->n > 1) /* an empty dir has no array at all */
		qsort(l->ents, l->n, sizeof(*l->ents), cmp_off);
	for (size_t i = 1; i < l->n; i++)
		if (l->ents[i].off <= l->ents[i - 1].off)
			l->ents[i].off = l->ents[i - 1].off + 1;
	*ret = l;
	return 0;
}

/* Detaches the listing of @n, if any; returns it when that dropped its last reference. listing_lock held. */
static struct ovl_listing *detach_locked(struct ovl_node *n)
{
	struct ovl_listing *l = n->listing;

	if (!l)
		return NULL;
	n->listing = NULL;
	n_attached--;
	return --l->refs == 0 ? l : NULL;
}

int ovl_listing_get(struct ovl_node *n, off_t off, struct ovl_listing **ret)
{
	struct ovl_listing *l = NULL, *old = NULL;
	int r;

	if (off > 0) {
		pthread_mutex_lock(&listing_lock);
		l = n->listing;
		if (l)
			l->refs++;
		pthread_mutex_unlock(&listing_lock);
		if (l) {
			*ret = l;
			return 0;
		}
	}
	r = listing_build(n, &l);
	if (r < 0)
		return r;
	l->refs = 1;
	pthread_mutex_lock(&listing_lock);
	old = detach_locked(n);
	if (n_attached < MAX_ATTACHED) {
		n->listing = l;
		l->refs++;
		n_attached++;
	}
	pthread_mutex_unlock(&listing_lock);
	listing_free(old);
	*ret = l;
	return 0;
}

size_t ovl_listing_seek(const struct ovl_listing *l, off_t off)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((off_t)l->ents[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void ovl_listing_put(struct ovl_node *n, struct ovl_listing *l, bool at_end)
{
	bool last;

	pthread_mutex_lock(&listing_lock);
	if (at_end && n->listing == l)
		(void)detach_locked(n); /* a stream read it all: the next one starts afresh; our reference keeps it */
	last = --l->refs == 0;
	pthread_mutex_unlock(&listing_lock);
	if (last)
		listing_free(l);
}

void ovl_listing_drop(struct ovl_node *n)
{
	struct ovl_listing *gone;

	pthread_mutex_lock(&listing_lock);
	gone = detach_locked(n);
	pthread_mutex_unlock(&listing_lock);
	listing_free(gone);
}

int ovl_stack_is_empty(const struct ovl_stack *s)
{
	struct ovl_dirent *ents;
	size_t cnt;
	int r;

	r = ovl_stack_list(s, &ents, &cnt);
	if (r < 0)
		return r;
	ovl_dirents_free(ents, cnt);
	return cnt == 0;
}
