// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * The inode table: every object the kernel knows (one FUSE nodeid each) is
 * a struct ovl_node, found by identity (dev, ino of the underlying object or
 * of its copy-up origin) and by its remembered name (parent, name). Both
 * are intrusive chained hash tables that double when full, under one
 * mutex that is only held for pointer work, never across a syscall.
 * Lookup counts follow the kernel: each entry reply adds one, forget
 * subtracts; a node is freed when the kernel forgot it and no child points
 * at it. Nodes that hold layer fds are on an LRU list (fs->all_*), the
 * others (lazy lower files, evicted nodes) on fs->cold_*; over the fd
 * budget the least recently used are evicted (CLOCK: a node used since the
 * last scan, or a directory with cached children, gets a second round).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bgfill.h"
#include "macro.h"
#include "metacopy.h"
#include "ovl.h"

#define INITIAL_TAB 4096

static size_t hash_id(dev_t dev, ino_t ino)
{
	uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ULL ^ (uint64_t)dev * 0xc2b2ae3d27d4eb4fULL;

	return (size_t)(h ^ (h >> 29));
}

static size_t hash_name(const struct ovl_node *parent, const char *name)
{
	uint64_t h = (uint64_t)(uintptr_t)parent * 0x9e3779b97f4a7c15ULL;

	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	return (size_t)(h ^ (h >> 31));
}

int ovl_table_init(struct ovl_fs *fs)
{
	fs->tab_size = INITIAL_TAB;
	fs->id_tab = calloc(fs->tab_size, sizeof(*fs->id_tab));
	fs->name_tab = calloc(fs->tab_size, sizeof(*fs->name_tab));
	if (!fs->id_tab || !fs->name_tab)
		return -ENOMEM;
	pthread_mutex_init(&fs->table_lock, NULL);
	return 0;
}

static void id_unlink(struct ovl_fs *fs, struct ovl_node *n)
{
	struct ovl_node **pp = &fs->id_tab[hash_id(n->key_dev, n->key_ino) & (fs->tab_size - 1)];

	if (!n->id_hashed)
		return;
	for (; *pp; pp = &(*pp)->id_next)
		if (*pp == n) {
			*pp = n->id_next;
			break;
		}
	n->id_next = NULL;
	n->id_hashed = false;
}

static void name_unlink(struct ovl_fs *fs, struct ovl_node *n)
{
	struct ovl_node **pp;

	if (!n->name_hashed)
		return;
	pp = &fs->name_tab[hash_name(n->parent, n->name) & (fs->tab_size - 1)];
	for (; *pp; pp = &(*pp)->name_next)
		if (*pp == n) {
			*pp = n->name_next;
			break;
		}
	n->name_next = NULL;
	n->name_hashed = false;
}

static struct ovl_node *id_find_locked(struct ovl_fs *fs, dev_t dev, ino_t ino)
{
	for (struct ovl_node *n = fs->id_tab[hash_id(dev, ino) & (fs->tab_size - 1)]; n; n = n->id_next)
		if (n->key_ino == ino && n->key_dev == dev)
			return n;
	return NULL;
}

static struct ovl_node *name_find_locked(struct ovl_fs *fs, struct ovl_node *parent, const char *name)
{
	for (struct ovl_node *n = fs->name_tab[hash_name(parent, name) & (fs->tab_size - 1)]; n; n = n->name_next)
		if (n->parent == parent && strcmp(n->name, name) == 0)
			return n;
	return NULL;
}

static void name_insert(struct ovl_fs *fs, struct ovl_node *n)
{
	struct ovl_node *old = name_find_locked(fs, n->parent, n->name);
	size_t b;

	if (old == n || atomic_load(&n->split))
		return;
	if (old)
		name_unlink(fs, old);
	b = hash_name(n->parent, n->name) & (fs->tab_size - 1);
	n->name_next = fs->name_tab[b];
	fs->name_tab[b] = n;
	n->name_hashed = true;
}

static void id_insert(struct ovl_fs *fs, struct ovl_node *n)
{
	size_t b = hash_id(n->key_dev, n->key_ino) & (fs->tab_size - 1);

	if (atomic_load(&n->split))
		return;
	n->id_next = fs->id_tab[b];
	fs->id_tab[b] = n;
	n->id_hashed = true;
}

static bool node_has_fds(const struct ovl_node *n)
{
	return n->upper_fd >= 0 || n->lower_fd >= 0 || n->n_extra > 0;
}

/* Takes @n off its list (hot or cold). table_lock held. */
static void list_unlink(struct ovl_fs *fs, struct ovl_node *n)
{
	struct ovl_node **first = n->hot ? &fs->all_first : &fs->cold_first;
	struct ovl_node **last = n->hot ? &fs->all_last : &fs->cold_last;

	if (n->all_prev)
		n->all_prev->all_next = n->all_next;
	else
		*first = n->all_next;
	if (n->all_next)
		n->all_next->all_prev = n->all_prev;
	else
		*last = n->all_prev;
	n->all_prev = n->all_next = NULL;
	if (n->hot)
		fs->n_hot--;
}

/* Puts @n at the head (most recently used end) of the hot or the cold list. table_lock held, @n on no list. */
static void list_push(struct ovl_fs *fs, struct ovl_node *n, bool hot)
{
	struct ovl_node **first = hot ? &fs->all_first : &fs->cold_first;
	struct ovl_node **last = hot ? &fs->all_last : &fs->cold_last;

	n->hot = hot;
	n->all_prev = NULL;
	n->all_next = *first;
	if (*first)
		(*first)->all_prev = n;
	else
		*last = n;
	*first = n;
	if (hot)
		fs->n_hot++;
}

/* Moves @n to the list its fds say. copyup_lock held (fds cannot change). */
static void list_update(struct ovl_node *n)
{
	struct ovl_fs *fs = ovl_fs;
	bool hot = node_has_fds(n);

	if (n == &fs->root)
		return;
	pthread_mutex_lock(&fs->table_lock);
	if (hot != n->hot) {
		list_unlink(fs, n);
		list_push(fs, n, hot);
	}
	pthread_mutex_unlock(&fs->table_lock);
}

/* Iterates over every node but the root (hot list, then cold list). table_lock held. */
#define FOREACH_NODE(fs, d)                                                                     \
	for (struct ovl_node *d = (fs)->all_first ? (fs)->all_first : (fs)->cold_first; d;      \
	     d = d->all_next ? d->all_next : (d->hot ? (fs)->cold_first : NULL))

/* Doubles both tables; on allocation failure keeps the old (longer chains, still correct). */
static void maybe_grow(struct ovl_fs *fs)
{
	size_t ns = fs->tab_size * 2;
	struct ovl_node **nid, **nname;

	if (fs->n_nodes < fs->tab_size)
		return;
	nid = calloc(ns, sizeof(*nid));
	nname = calloc(ns, sizeof(*nname));
	if (!nid || !nname) {
		free(nid);
		free(nname);
		return;
	}
	for (size_t i = 0; i < fs->tab_size; i++) {
		struct ovl_node *n, *next;

		for (n = fs->id_tab[i]; n; n = next) {
			size_t b = hash_id(n->key_dev, n->key_ino) & (ns - 1);

			next = n->id_next;
			n->id_next = nid[b];
			nid[b] = n;
		}
		for (n = fs->name_tab[i]; n; n = next) {
			size_t b = hash_name(n->parent, n->name) & (ns - 1);

			next = n->name_next;
			n->name_next = nname[b];
			nname[b] = n;
		}
	}
	free(fs->id_tab);
	free(fs->name_tab);
	fs->id_tab = nid;
	fs->name_tab = nname;
	fs->tab_size = ns;
}

static void close_state(struct ovl_node *n)
{
	long closed = (n->upper_fd >= 0) + (n->lower_fd >= 0) + n->n_extra;

	if (n != &ovl_fs->root)
		ovl_fds_account(-closed);
	n->upper_fd = safe_close(n->upper_fd);
	n->lower_fd = safe_close(n->lower_fd);
	n->metacopy = false;
	for (uint16_t i = 0; i < n->n_extra; i++)
		safe_close(n->extra[i].fd);
	free(n->extra);
	n->extra = NULL;
	n->n_extra = 0;
}

static int take_res(struct ovl_node *n, struct ovl_res *res)
{
	struct ovl_lower *extra = NULL;

	if (res->n_extra > 0) {
		extra = malloc(res->n_extra * sizeof(*extra));
		if (!extra)
			return -ENOMEM;
		memcpy(extra, res->extra, res->n_extra * sizeof(*extra));
	}
	if (n != &ovl_fs->root)
		ovl_fds_account((res->upper_fd >= 0) + (res->lower_fd >= 0) + res->n_extra);
	n->upper_fd = res->upper_fd;
	n->lower_fd = res->lower_fd;
	n->lower_layer = res->lower_layer;
	n->n_extra = res->n_extra;
	n->extra = extra;
	n->opaque = res->opaque;
	n->metacopy = res->metacopy;
	/* The fds are the node's now; the rest of @res (identity, ino) stays readable. */
	res->upper_fd = res->lower_fd = -1;
	res->n_extra = 0;
	return 0;
}

void ovl_res_done(struct ovl_res *r)
{
	safe_close(r->upper_fd);
	safe_close(r->lower_fd);
	for (uint16_t i = 0; i < r->n_extra; i++)
		safe_close(r->extra[i].fd);
	ovl_res_init(r);
}

void ovl_node_apply(struct ovl_node *n, struct ovl_res *res)
{
	char data_path[PATH_MAX];
	/* A node found by name only (a lower hard link) has no key to tell its object by. */
	bool other = !res->hashable || ovl_node_rekey(n, res->key_dev, res->key_ino);

	if (res->ino && res->ino != n->ino && n != &ovl_fs->root)
		ovl_node_set_ino(n, res->ino); /* e.g. a lower hard link split by a subtree copy */
	pthread_rwlock_wrlock(&n->lock);
	/*
	 * @res was read without copyup_lock: a metacopy then may hold its data
	 * by now (a data copy-up, which ends without copyup_lock, finished in
	 * between). Taking it as a metacopy would read below, and the next
	 * write would copy the lower data over the upper's. Asked under the
	 * node's lock, which the end of a fill takes after marking the file.
	 */
	if (res->metacopy && res->upper_fd >= 0 && ovl_bgfill_metacopy_get(res->upper_fd, data_path) == 0) {
		if (res->lower_fd >= 0)
			res->lower_fd = safe_close(res->lower_fd);
		res->metacopy = false;
	}
	close_state(n);
	if (other)
		ovl_xattr_absent_forget(n);
	free(n->handle);
	n->handle = NULL;
	if (take_res(n, res) < 0)
		ovl_res_done(res); /* stays stale: the next access retries */
	else
		atomic_store(&n->stale, false);
	pthread_rwlock_unlock(&n->lock);
	atomic_store(&n->used, true);
	list_update(n);
}

void ovl_node_drop_state(struct ovl_node *n)
{
	if (n == &ovl_fs->root)
		return; /* the layer roots never change */
	pthread_rwlock_wrlock(&n->lock);
	atomic_store(&n->stale, true);
	close_state(n);
	pthread_rwlock_unlock(&n->lock);
	list_update(n);
}

static void node_free(struct ovl_node *n)
{
	close_state(n);
	if (n->type == S_IFDIR)
		ovl_listing_drop(n);
	free(n->handle);
	pthread_rwlock_destroy(&n->lock);
	free(n->name);
	free(n);
}

/* Frees @n and, up the chain, parents that become unused. table_lock held. */
static void release_locked(struct ovl_fs *fs, struct ovl_node *n)
{
	while (n && n != &fs->root && n->nlookup == 0 && n->refs == 0) {
		struct ovl_node *parent = n->parent;

		id_unlink(fs, n);
		name_unlink(fs, n);
		list_unlink(fs, n);
		fs->n_nodes--;
		node_free(n);
		if (!parent)
			break;
		if (parent->refs == 0)
			abort();
		parent->refs--;
		n = parent;
	}
}

int ovl_node_get(struct ovl_node *parent, const char *name, struct ovl_res *res, struct ovl_node **ret)
{
	struct ovl_fs *fs = ovl_fs;
	struct ovl_node *n;
	mode_t type = res->st.st_mode & S_IFMT;
	bool need_apply = false, res_hashable;

	pthread_mutex_lock(&fs->table_lock);
	if (res->hashable) {
		n = id_find_locked(fs, res->key_dev, res->key_ino);
		if (n && n->type != type) {
			/* The identity was reused by an object of another type: forget the old mapping. */
			id_unlink(fs, n);
			n = NULL;
		}
	} else {
		/* A lower hard link: one node per name. */
		n = name_find_locked(fs, parent, name);
		if (n && (n->type != type || n->ino != res->ino || n->id_hashed))
			n = NULL;
	}
	if (!n) {
		/*
		 * A stale node under this very name (its layers changed: a
		 * moved or copied subtree, the control plane) is the object the
		 * kernel knows there: keep its nodeid, give it the new layers.
		 */
		struct ovl_node *m = name_find_locked(fs, parent, name);

		/*
		 * Same object: a directory (re-created by a subtree copy), a non-dir
		 * with the same view inode, or a lower hard link (a name-only node)
		 * whose copy a subtree copy split off: the copy has its own st_ino and
		 * names that link in its " new" origin record (the node takes the new st_ino).
		 */
		if (m && m->type == type && atomic_load(&m->stale) &&
		    (type == S_IFDIR || m->ino == res->ino ||
		     (!m->id_hashed && res->new_of_ino && m->key_dev == res->new_of_dev && m->key_ino == res->new_of_ino)))
			n = m;
	}
	if (n) {
		n->nlookup++;
		if (!atomic_load(&n->used))
			atomic_store(&n->used, true);
		if (n->name_hashed && n->parent == parent && strcmp(n->name, name) == 0) {
			/* Same name (a lazy node looked up again): nothing to rename. */
			need_apply = atomic_load(&n->stale) && !res->lower_nofd;
		} else if (atomic_load(&n->stale) || !n->name_hashed) {
			/* Give it the name it was just found under. */
			char *nn = strdup(name);

			if (nn) {
				name_unlink(fs, n);
				if (n->parent != parent) {
					struct ovl_node *old = n->parent;

					parent->refs++;
					n->parent = parent;
					old->refs--;
					release_locked(fs, old);
				}
				free(n->name);
				n->name = nn;
				n->removed = false;
				name_insert(fs, n);
			}
			/* A lazy result has no fds to give: the node opens them by name when used. */
			need_apply = atomic_load(&n->stale) && !res->lower_nofd;
		}
		pthread_mutex_unlock(&fs->table_lock);
		if (need_apply) {
			pthread_mutex_lock(&fs->copyup_lock);
			if (atomic_load(&n->stale))
				ovl_node_apply(n, res);
			pthread_mutex_unlock(&fs->copyup_lock);
		}
		ovl_res_done(res);
		*ret = n;
		return 0;
	}
	pthread_mutex_unlock(&fs->table_lock);

	res_hashable = res->hashable;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->name = strdup(name);
	if (!n->name || take_res(n, res) < 0) {
		free(n->name);
		free(n);
		return -ENOMEM;
	}
	pthread_rwlock_init(&n->lock, NULL);
	n->type = type;
	n->key_dev = res->key_dev;
	n->key_ino = res->key_ino;
	n->ino = res->ino;
	n->nlookup = 1;
	/* A lazy node (lower file found by stat only) opens its fd by name at its first use. */
	atomic_store(&n->stale, res->lower_nofd);

	pthread_mutex_lock(&fs->table_lock);
	n->parent = parent;
	parent->refs++;
	if (res_hashable)
		id_insert(fs, n);
	name_insert(fs, n);
	list_push(fs, n, node_has_fds(n));
	fs->n_nodes++;
	maybe_grow(fs);
	pthread_mutex_unlock(&fs->table_lock);
	*ret = n;
	return 0;
}

void ovl_node_ref(struct ovl_node *n)
{
	pthread_mutex_lock(&ovl_fs->table_lock);
	n->nlookup++;
	pthread_mutex_unlock(&ovl_fs->table_lock);
}

void ovl_node_forget(struct ovl_node *n, uint64_t count)
{
	struct ovl_fs *fs = ovl_fs;

	pthread_mutex_lock(&fs->table_lock);
	if (n->nlookup < count)
		abort(); /* the kernel forgot more than we handed out: a bookkeeping bug */
	n->nlookup -= count;
	release_locked(fs, n);
	pthread_mutex_unlock(&fs->table_lock);
}

int ovl_node_set_name(struct ovl_node *n, struct ovl_node *parent, const char *name)
{
	struct ovl_fs *fs = ovl_fs;
	char *nn = strdup(name);
	struct ovl_node *oldparent;

	if (!nn)
		return -ENOMEM;
	pthread_mutex_lock(&fs->table_lock);
	name_unlink(fs, n);
	oldparent = n->parent;
	free(n->name);
	n->name = nn;
	parent->refs++;
	n->parent = parent;
	n->removed = false;
	name_insert(fs, n);
	if (oldparent) {
		oldparent->refs--;
		release_locked(fs, oldparent);
	}
	pthread_mutex_unlock(&fs->table_lock);
	return 0;
}

bool ovl_node_rekey(struct ovl_node *n, dev_t dev, ino_t ino)
{
	struct ovl_fs *fs = ovl_fs;
	bool changed = false;

	if (n == &fs->root)
		return false;
	pthread_mutex_lock(&fs->table_lock);
	if (!n->id_hashed || n->key_dev != dev || n->key_ino != ino) {
		changed = n->key_dev != dev || n->key_ino != ino;
		id_unlink(fs, n);
		n->key_dev = dev;
		n->key_ino = ino;
		id_insert(fs, n);
	}
	pthread_mutex_unlock(&fs->table_lock);
	return changed;
}

void ovl_node_set_ino(struct ovl_node *n, ino_t ino)
{
	pthread_mutex_lock(&ovl_fs->table_lock);
	n->ino = ino;
	pthread_mutex_unlock(&ovl_fs->table_lock);
}

void ovl_node_split(struct ovl_node *n)
{
	pthread_mutex_lock(&ovl_fs->table_lock);
	id_unlink(ovl_fs, n);
	name_unlink(ovl_fs, n);
	atomic_store(&n->split, true);
	pthread_mutex_unlock(&ovl_fs->table_lock);
}

bool ovl_node_is_split(struct ovl_node *n)
{
	return n != &ovl_fs->root && atomic_load(&n->split);
}

/* Drops the kernel's cached attributes of @id (0: none). No lock held. */
static void inval_attrs(fuse_ino_t id)
{
	/* If the node was forgotten meanwhile, its nodeid names nothing or a node that merely re-reads its attributes. */
	if (id && ovl_fs->se)
		(void)fuse_lowlevel_notify_inval_inode(ovl_fs->se, id, -1, 0);
}

void ovl_node_inval_identity(dev_t dev, ino_t ino)
{
	struct ovl_node *m;
	fuse_ino_t id;

	pthread_mutex_lock(&ovl_fs->table_lock);
	m = id_find_locked(ovl_fs, dev, ino);
	id = m ? ovl_node_ino(m) : 0;
	pthread_mutex_unlock(&ovl_fs->table_lock);
	inval_attrs(id);
}

void ovl_node_split_changed(struct ovl_node *n)
{
	struct ovl_node *m;
	fuse_ino_t id;

	if (!ovl_node_is_split(n))
		return;
	pthread_mutex_lock(&ovl_fs->table_lock);
	m = id_find_locked(ovl_fs, n->key_dev, n->key_ino);
	id = m ? ovl_node_ino(m) : 0;
	pthread_mutex_unlock(&ovl_fs->table_lock);
	inval_attrs(id);
}

void ovl_node_unhash_name(struct ovl_node *n, bool also_identity)
{
	pthread_mutex_lock(&ovl_fs->table_lock);
	name_unlink(ovl_fs, n);
	n->removed = true;
	if (also_identity)
		id_unlink(ovl_fs, n);
	pthread_mutex_unlock(&ovl_fs->table_lock);
}

struct ovl_node *ovl_node_find_child_pinned(struct ovl_node *parent, const char *name)
{
	struct ovl_node *n;

	pthread_mutex_lock(&ovl_fs->table_lock);
	n = name_find_locked(ovl_fs, parent, name);
	if (n)
		n->refs++;
	pthread_mutex_unlock(&ovl_fs->table_lock);
	return n;
}

void ovl_node_unpin(struct ovl_node *n)
{
	if (!n || n == &ovl_fs->root)
		return;
	pthread_mutex_lock(&ovl_fs->table_lock);
	if (n->refs == 0)
		abort();
	n->refs--;
	release_locked(ovl_fs, n);
	pthread_mutex_unlock(&ovl_fs->table_lock);
}

fuse_ino_t ovl_node_parent_ino(struct ovl_node *n)
{
	fuse_ino_t id = 0;

	pthread_mutex_lock(&ovl_fs->table_lock);
	if (n != &ovl_fs->root && n->parent)
		id = ovl_node_ino(n->parent);
	pthread_mutex_unlock(&ovl_fs->table_lock);
	return id;
}

struct ovl_node *ovl_node_find_child(struct ovl_node *parent, const char *name)
{
	struct ovl_node *n;

	pthread_mutex_lock(&ovl_fs->table_lock);
	n = name_find_locked(ovl_fs, parent, name);
	pthread_mutex_unlock(&ovl_fs->table_lock);
	return n;
}

static bool is_descendant(const struct ovl_node *d, const struct ovl_node *a)
{
	for (const struct ovl_node *p = d->parent; p; p = p->parent)
		if (p == a)
			return true;
	return false;
}

void ovl_node_foreach_descendant(struct ovl_node *n, void (*fn)(struct ovl_node *d, void *ud), void *ud)
{
	struct ovl_fs *fs = ovl_fs;

	pthread_mutex_lock(&fs->table_lock);
	FOREACH_NODE(fs, d)
		if (is_descendant(d, n))
			fn(d, ud);
	pthread_mutex_unlock(&fs->table_lock);
}

void ovl_node_invalidate_subtree(struct ovl_node *n)
{
	struct ovl_fs *fs = ovl_fs;

	pthread_mutex_lock(&fs->table_lock);
	FOREACH_NODE(fs, d)
		if (d == n || is_descendant(d, n)) {
			atomic_store(&d->stale, true); /* re-resolved by name at the next access */
			atomic_fetch_add(&d->gen, 1);  /* its open handles too, at their next read or write */
			ovl_xattr_absent_forget(d);
		}
	pthread_mutex_unlock(&fs->table_lock);
}

int ovl_node_child_names(struct ovl_node *n, char ***ret, size_t *ret_n)
{
	struct ovl_fs *fs = ovl_fs;
	char **v = NULL;
	size_t cnt = 0, cap = 0;
	int r = 0;

	pthread_mutex_lock(&fs->table_lock);
	FOREACH_NODE(fs, d) {
		if (d->parent != n || !d->name_hashed)
			continue;
		if (cnt + 1 >= cap) {
			size_t nc = cap ? cap * 2 : 16;
			char **nv = realloc(v, nc * sizeof(char *));

			if (!nv) {
				r = -ENOMEM;
				break;
			}
			v = nv;
			cap = nc;
		}
		v[cnt] = strdup(d->name);
		if (!v[cnt]) {
			r = -ENOMEM;
			break;
		}
		v[++cnt] = NULL;
	}
	pthread_mutex_unlock(&fs->table_lock);
	if (r < 0) {
		strv_free(v);
		return r;
	}
	if (!v) {
		v = calloc(1, sizeof(char *));
		if (!v)
			return -ENOMEM;
	}
	*ret = v;
	*ret_n = cnt;
	return 0;
}

int ovl_node_path(struct ovl_node *n, char **ret)
{
	struct ovl_fs *fs = ovl_fs;
	size_t len = 0;
	char *buf, *p;

	pthread_mutex_lock(&fs->table_lock);
	for (struct ovl_node *c = n; c != &fs->root; c = c->parent) {
		if (!c->parent) {
			pthread_mutex_unlock(&fs->table_lock);
			return -ESTALE;
		}
		len += strlen(c->name) + 1;
	}
	buf = malloc(len + 1);
	if (!buf) {
		pthread_mutex_unlock(&fs->table_lock);
		return -ENOMEM;
	}
	p = buf + len;
	*p = '\0';
	for (struct ovl_node *c = n; c != &fs->root; c = c->parent) {
		size_t l = strlen(c->name);

		p -= l;
		memcpy(p, c->name, l);
		if (p > buf)
			*--p = '/';
	}
	pthread_mutex_unlock(&fs->table_lock);
	if (len > 0)
		memmove(buf, buf + 1, len); /* drop the leading '/' */
	else
		buf[0] = '\0';
	*ret = buf;
	return 0;
}

int ovl_node_parent_name(struct ovl_node *n, struct ovl_node **ret_parent, char **ret_name)
{
	struct ovl_fs *fs = ovl_fs;
	char *name;

	pthread_mutex_lock(&fs->table_lock);
	/* A node whose name slot another node took still knows where it lives; an unlinked one does not. */
	if (n == &fs->root || !n->parent || n->removed) {
		pthread_mutex_unlock(&fs->table_lock);
		return -ESTALE;
	}
	name = strdup(n->name);
	*ret_parent = n->parent;
	pthread_mutex_unlock(&fs->table_lock);
	if (!name)
		return -ENOMEM;
	*ret_name = name;
	return 0;
}

bool ovl_node_is_removed(struct ovl_node *n)
{
	bool r;

	pthread_mutex_lock(&ovl_fs->table_lock);
	r = n->removed;
	pthread_mutex_unlock(&ovl_fs->table_lock);
	return r;
}

/*
 * Keeps a file handle of an evicted upper non-directory: if its name is
 * unlinked while a process still has it open, the name can no longer find
 * it, the handle can (ovl_node_ensure()). A lower-only one needs none: the
 * lower object is still in its parent's lower dir. Best effort (a layer
 * without handle support just loses that case). copyup_lock held.
 */
static void remember_handle(struct ovl_node *n)
{
	union {
		struct file_handle fh;
		char buf[sizeof(struct file_handle) + MAX_HANDLE_SZ];
	} h;
	int fd = n->upper_fd >= 0 ? n->upper_fd : n->lower_fd;
	struct file_handle *copy;
	int mnt_id;

	if (n->type == S_IFDIR || fd < 0)
		return;
	n->handle_upper = n->upper_fd >= 0;
	if (!n->handle_upper)
		return; /* a lower object stays where it is: found again in the parent's lower dir (ovl_node_ensure) */
	h.fh.handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", &h.fh, &mnt_id, AT_EMPTY_PATH) < 0)
		return;
	copy = malloc(sizeof(struct file_handle) + h.fh.handle_bytes);
	if (!copy)
		return;
	memcpy(copy, &h.fh, sizeof(struct file_handle) + h.fh.handle_bytes);
	free(n->handle);
	n->handle = copy;
}

void ovl_node_maybe_evict(void)
{
	struct ovl_fs *fs = ovl_fs;
	struct ovl_node *batch[256];
	long over;
	size_t cnt = 0;

	if (_likely_(atomic_load(&fs->n_fds) <= fs->fd_budget))
		return;
	if (pthread_mutex_trylock(&fs->evict_lock) != 0)
		return; /* someone else is at it */
	pthread_mutex_lock(&fs->copyup_lock); /* node fds cannot change under us */
	over = atomic_load(&fs->n_fds) - fs->fd_budget * 9 / 10;
	pthread_mutex_lock(&fs->table_lock);
	/*
	 * CLOCK over the hot list, from its least recently used end: a node
	 * used since the last round, or a directory whose cached children
	 * re-resolve through it, is moved to the head instead. Only when a
	 * whole round found nothing else are such nodes taken too. Each node
	 * is looked at once per round, so a call costs O(hot nodes) at worst
	 * and O(batch) when the tail is cold.
	 */
	for (int pass = 0; pass < 2 && cnt == 0; pass++) {
		for (size_t steps = fs->n_hot; steps > 0 && cnt < ARRAY_SIZE(batch) && over > 0; steps--) {
			struct ovl_node *d = fs->all_last;
			bool keep;

			if (!d)
				break;
			keep = d->removed || /* no name to re-resolve it by */
			       (pass == 0 && (atomic_exchange(&d->used, false) || (d->type == S_IFDIR && d->refs > 0)));
			list_unlink(fs, d);
			list_push(fs, d, true);
			if (keep)
				continue;
			d->refs++; /* pin */
			batch[cnt++] = d;
			over -= (d->upper_fd >= 0) + (d->lower_fd >= 0) + d->n_extra;
		}
	}
	pthread_mutex_unlock(&fs->table_lock);
	for (size_t i = 0; i < cnt; i++) {
		remember_handle(batch[i]);
		ovl_node_drop_state(batch[i]); /* moves it to the cold list */
		ovl_node_unpin(batch[i]);
	}
	pthread_mutex_unlock(&fs->copyup_lock);
	pthread_mutex_unlock(&fs->evict_lock);
}

void ovl_table_free(struct ovl_fs *fs)
{
	struct ovl_node *n, *next;

	for (int l = 0; l < 2; l++)
		for (n = l ? fs->cold_first : fs->all_first; n; n = next) {
			next = n->all_next;
			node_free(n);
		}
	fs->all_first = fs->all_last = fs->cold_first = fs->cold_last = NULL;
	fs->n_hot = 0;
	free(fs->id_tab);
	free(fs->name_tab);
	fs->id_tab = fs->name_tab = NULL;
}
