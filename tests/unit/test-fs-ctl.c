// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unit tests of the draftfs control plane: path checks and ordering,
 * selections, the wire protocol with fd passing, the change list of a small
 * hand-built overlay (whiteout, opaque dir, copy-up without change), and
 * the client API on offline layers (commit + discard + errors).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ctl-client.h"
#include "ctl-proto.h"
#include "ctl-util.h"
#include "diff.h"
#include "journal-linked.h"
#include "json-util.h"
#include "tap.h"

static void test_path_check(void)
{
	static const struct {
		const char *in;
		size_t len;
		const char *out; /* NULL: error */
	} cases[] = {
		{ "a/b", 3, "a/b" },     { "./a//b/", 7, "a/b" }, { "", 0, "" },       { ".", 1, "" },
		{ "/etc", 4, NULL },     { "..", 2, NULL },       { "a/../b", 6, NULL }, { "a\0b", 3, NULL },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char *out = NULL;
		const char *why = NULL;
		int r = ovl_ctl_path_check(cases[i].in, cases[i].len, &out, &why);

		if (cases[i].out) {
			ok(r == 0, "path '%s' accepted", cases[i].in);
			is_str(out, cases[i].out, "path '%s' normalized", cases[i].in);
		} else {
			ok(r < 0 && why && *why, "path %zu rejected (%s)", i, why ? why : "");
		}
		free(out);
	}
}

static void test_order_and_selection(void)
{
	struct ovl_sel s = { 0 };
	char *paths[] = { (char *)"src", (char *)"docs/a.md", NULL };
	char *bad[] = { (char *)"ok", (char *)"/abs", NULL };
	cJSON *err = NULL;

	ok(ovl_path_cmp("dir", "dir/a") < 0, "dir before its subtree");
	ok(ovl_path_cmp("dir/a", "dir-x") < 0, "subtree before a sibling with a higher byte");
	ok(ovl_path_cmp("a", "b") < 0 && ovl_path_cmp("b", "a") > 0 && ovl_path_cmp("x/y", "x/y") == 0, "order");
	ok(ovl_sel_parse(paths, &s, NULL) == 0 && s.n == 2, "selection parsed");
	is_int(ovl_sel_match(&s, "src/x/y.c"), OVL_SEL_INSIDE, "inside a selected dir");
	is_int(ovl_sel_match(&s, "src"), OVL_SEL_INSIDE, "the selected dir");
	is_int(ovl_sel_match(&s, "srcx"), OVL_SEL_NONE, "prefix is by component");
	is_int(ovl_sel_match(&s, "docs"), OVL_SEL_ANCESTOR, "ancestor of a selected path");
	is_int(ovl_sel_match(&s, ""), OVL_SEL_ANCESTOR, "root is an ancestor");
	ovl_sel_done(&s);
	ok(ovl_sel_parse(bad, &s, &err) == -EINVAL && err, "absolute path refused");
	{
		const char *code = NULL;

		ok(json_get_string(err, "code", &code) == 0 && strcmp(code, "invalid_path") == 0, "code invalid_path");
	}
	cJSON_Delete(err);
}

static void test_proto(void)
{
	int sv[2], p[2], got = -1;
	cJSON *msg = cJSON_CreateObject(), *back = NULL;
	const char *op = NULL;
	char buf[8] = { 0 };

	cJSON_AddStringToObject(msg, "op", "diff");
	ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0 && pipe2(p, O_CLOEXEC) == 0, "socketpair");
	ok(ovl_proto_send(sv[0], msg, p[1]) == 0, "send with an fd");
	ok(ovl_proto_recv(sv[1], &back, &got) == 0 && got >= 0, "receive with an fd");
	ok(back && json_get_string(back, "op", &op) == 0 && strcmp(op, "diff") == 0, "message intact");
	ok(write(got, "hi", 2) == 2 && read(p[0], buf, 2) == 2 && strcmp(buf, "hi") == 0, "passed fd works");
	close(sv[0]);
	cJSON_Delete(back);
	back = NULL;
	ok(ovl_proto_recv(sv[1], &back, NULL) == -ECONNRESET, "EOF reported");
	close(sv[1]);
	close(p[0]);
	close(p[1]);
	close(got);
	cJSON_Delete(msg);
}

static void write_file(const char *path, const char *content)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(content, f);
		fclose(f);
	}
}

static const struct ovl_change *find(const struct ovl_changes *c, const char *path)
{
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->v[i].path, path) == 0)
			return &c->v[i];
	return NULL;
}

static void test_diff_and_commit(void)
{
	char root[] = "/tmp/test-fs-ctl-XXXXXX", p[1024], low[256], up[256], work[256];
	struct ovl_changes *c = NULL;
	struct ovl_sel all = { 0 };
	struct ovl_layers l = { 0 };
	int lfd;
	struct stat st;
	struct timespec ts[2];
	struct ovl_ctl *ctl = NULL;
	cJSON *res = NULL, *err = NULL;
	char *sel[] = { (char *)"nope", NULL };

	if (!mkdtemp(root)) {
		ok(0, "mkdtemp");
		return;
	}
	snprintf(low, sizeof(low), "%s/lower", root);
	snprintf(up, sizeof(up), "%s/upper", root);
	snprintf(work, sizeof(work), "%s/work", root);
	mkdir(low, 0755);
	mkdir(up, 0755);
	mkdir(work, 0755);
	snprintf(p, sizeof(p), "%s/same", low);
	write_file(p, "same\n");
	stat(p, &st);
	snprintf(p, sizeof(p), "%s/same", up); /* a copy-up without a change */
	write_file(p, "same\n");
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	utimensat(AT_FDCWD, p, ts, 0);
	snprintf(p, sizeof(p), "%s/del", low);
	write_file(p, "x\n");
	snprintf(p, sizeof(p), "%s/del", up);
	ok(mknod(p, S_IFCHR | 0, makedev(0, 0)) == 0, "whiteout created");
	snprintf(p, sizeof(p), "%s/d", low);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/d/old", low);
	write_file(p, "old\n");
	snprintf(p, sizeof(p), "%s/d", up);
	mkdir(p, 0755);
	ok(setxattr(p, "trusted.overlay.opaque", "y", 1, 0) == 0, "opaque dir created");
	snprintf(p, sizeof(p), "%s/d/new", up);
	write_file(p, "new\n");

	lfd = open(low, O_PATH | O_DIRECTORY | O_CLOEXEC);
	l.upper_fd = open(up, O_PATH | O_DIRECTORY | O_CLOEXEC);
	l.work_fd = -1;
	l.state_fd = open(work, O_PATH | O_DIRECTORY | O_CLOEXEC);
	l.n_lower = 1;
	l.lower_fds = &lfd;
	ok(ovl_diff_compute(&l, &all, 0, &c, NULL) == 0, "diff computed");
	if (c) {
		const struct ovl_change *e;

		ok(!find(c, "same"), "unchanged copy-up not reported");
		ok((e = find(c, "del")) && e->status == OVL_DELETED, "whiteout is a deletion");
		ok((e = find(c, "d/old")) && e->status == OVL_DELETED, "opaque dir hides lower child");
		ok((e = find(c, "d/new")) && e->status == OVL_ADDED, "new file in opaque dir");
		is_int(c->summary.deleted, 2, "summary deleted");
	}
	ovl_changes_free(c);
	close(lfd);
	close(l.upper_fd);
	close(l.state_fd);

	ok(ovl_ctl_open_offline(low, up, work, NULL, &ctl) == 0, "offline handle");
	if (ctl) {
		ok(ovl_ctl_commit(ctl, sel, NULL, &res, &err) == -ENOENT && err, "unknown path refused");
		cJSON_Delete(err);
		err = NULL;
		ok(ovl_ctl_commit(ctl, NULL, NULL, &res, &err) == 0, "commit all");
		cJSON_Delete(res);
		res = NULL;
		snprintf(p, sizeof(p), "%s/d/new", low);
		ok(access(p, F_OK) == 0, "committed file in lower");
		snprintf(p, sizeof(p), "%s/d/old", low);
		ok(access(p, F_OK) < 0, "deleted file gone from lower");
		snprintf(p, sizeof(p), "%s/del", up);
		ok(access(p, F_OK) < 0, "whiteout pruned from upper");
		ok(ovl_ctl_status(ctl, &res, &err) == 0, "status");
		{
			int64_t total = -1;
			cJSON *s = cJSON_GetObjectItemCaseSensitive(res, "summary");

			ok(json_get_int64(s, "total", 0, INT64_MAX, &total) == 0 && total == 0, "no change left");
		}
		cJSON_Delete(res);
		res = NULL;
		{
			int r = ovl_ctl_discard(ctl, NULL, &res, &err);
			const char *msg = NULL;

			if (err)
				(void)json_get_string(err, "error", &msg);
			ok(r == 0, "discard all (%d %s)", r, msg ? msg : "");
			cJSON_Delete(err);
			err = NULL;
		}
		cJSON_Delete(res);
		ovl_ctl_close(ctl);
	}
	{
		char cmd[400];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		(void)!system(cmd);
	}
}

static void test_inoset(void)
{
	struct ovl_inoset s = { 0 };
	bool all = true, none = true;
	int r = 0;

	ok(!ovl_inoset_has(&s, 1, 1), "empty inode set has nothing");
	for (ino_t i = 1; i <= 20000 && r == 0; i++)
		r = ovl_inoset_add(&s, (dev_t)(i % 3), i * 4096);
	is_int(r, 0, "20k inodes added");
	r = ovl_inoset_add(&s, 1, 4096); /* 4096 % 3 == 1: already there */
	is_int(r, 0, "adding one twice is fine");
	is_int((int)s.n, 20000, "and counts once");
	for (ino_t i = 1; i <= 20000; i++) {
		all = all && ovl_inoset_has(&s, (dev_t)(i % 3), i * 4096);
		none = none && !ovl_inoset_has(&s, (dev_t)((i + 1) % 3), i * 4096) && !ovl_inoset_has(&s, 0, i * 4096 + 1);
	}
	ok(all, "every added inode is found");
	ok(none, "no other inode (same number on another device, or another number) is found");
	is_int(ovl_inoset_add(&s, 5, 0), -EINVAL, "inode number 0 is refused");
	ovl_inoset_done(&s);
	ok(s.cap == 0 && !ovl_inoset_has(&s, 1, 4096), "done empties it");
}

static void test_linked_set(void)
{
	const struct ovl_linked big = { .dev = 7, .ino = (ino_t)1 << 60 | 3, .mode = 0100644, .uid = 4294967295u,
		                        .gid = 5, .size = (off_t)1 << 40, .mtime = { -86401, 999999999 } };
	const struct ovl_linked small = { .dev = 7, .ino = 2, .mode = 0100755, .size = 1, .mtime = { 1, 0 } };
	struct ovl_linked_set s = { 0 }, back = { 0 };
	_cleanup_json_ cJSON *j = NULL, *bad = NULL;
	const struct ovl_linked *f;
	_cleanup_free_ char *text = NULL;

	ok(!ovl_linked_find(&s, 7, 2), "empty linked set has nothing");
	is_int(ovl_linked_add(&s, &big) | ovl_linked_add(&s, &small) | ovl_linked_add(&s, &big), 0, "three records added");
	ovl_linked_seal(&s);
	is_int((int)s.n, 2, "sealed: one record per inode");
	f = ovl_linked_find(&s, 7, big.ino);
	ok(f && f->uid == big.uid && f->mtime.tv_sec == -86401, "a record is found by dev and ino");
	ok(!ovl_linked_find(&s, 8, 2) && !ovl_linked_find(&s, 7, 3), "another inode is not");
	j = ovl_linked_to_json(&s);
	text = j ? cJSON_PrintUnformatted(j) : NULL;
	is_str(text, "[\"7:2:33261:0:0:1:1:0\",\"7:1152921504606846979:33188:4294967295:5:1099511627776:-86401:999999999\"]",
	       "as JSON: decimal strings, sorted");
	is_int(ovl_linked_from_json(j, &back), 0, "read back");
	f = ovl_linked_find(&back, 7, big.ino);
	ok(back.n == 2 && f && f->dev == big.dev && f->ino == big.ino && f->mode == big.mode && f->uid == big.uid &&
	           f->gid == big.gid && f->size == big.size && f->mtime.tv_sec == big.mtime.tv_sec &&
	           f->mtime.tv_nsec == big.mtime.tv_nsec,
	   "exactly, past 2^53 and before 1970");
	bad = cJSON_Parse("[\"7:2:33261:0:0:1:1:1000000000\"]");
	is_int(ovl_linked_from_json(bad, &back), -EUCLEAN, "nanoseconds past a second are refused");
	ovl_linked_done(&s);
	ovl_linked_done(&back);
	ok(s.n == 0 && s.v == NULL, "done empties it");
}

int main(void)
{
	test_path_check();
	test_inoset();
	test_linked_set();
	test_order_and_selection();
	test_proto();
	if (geteuid() == 0)
		test_diff_and_commit();
	else
		ok(1, "# SKIP diff/commit need root (whiteouts, trusted.* xattrs)");
	return tap_done();
}
