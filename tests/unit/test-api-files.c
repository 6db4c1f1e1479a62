// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unit tests for api/files.h: path mapping, the errno table, metadata
 * parsing, and every operation against a real directory tree seeded with
 * hostile entries (symlinks to /etc and to an "outside" directory, ".."
 * chains, hard links to outside files), including a rename race that swaps
 * a directory for a symlink while uploads run.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/files.h"
#include "fdpath.h"
#include "json-util.h"
#include "tap.h"

#define UID 12345
#define GID 23456

static char base[] = "/tmp/test-api-files.XXXXXX";
static char rootdir[256], outside[256];
static struct api_files_root R;

static char *p_in(const char *rel)
{
	static char buf[4][512];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", rootdir, rel);
	return buf[i];
}

static void put(const char *path, const char *data)
{
	FILE *f = fopen(path, "we");

	if (!f || fputs(data, f) < 0 || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

/* Content of @path (no symlink following), or NULL. Caller frees. */
static char *get(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char *buf = NULL;

	if (fd < 0 || read_full_fd(fd, 1 << 20, &buf, NULL) < 0)
		return NULL;
	return buf;
}

static bool exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

static void test_resolve(void)
{
	struct { const char *in; const char *out; int r; } cases[] = {
		{ "a/b", "a/b", 0 },
		{ "", "", 0 },
		{ "/work/proj", "", 0 },
		{ "/work/proj/", "", 0 },
		{ "//work//proj/./a//b/", "a/b", 0 },
		{ "/work/proj/a", "a", 0 },
		{ "/work/projx/a", NULL, -EXDEV },
		{ "/work", NULL, -EXDEV },
		{ "/etc/passwd", NULL, -EXDEV },
		{ "/", NULL, -EXDEV },
		{ "..", NULL, -EINVAL },
		{ "a/../../etc", NULL, -EINVAL },
		{ "/work/proj/../proj/a", NULL, -EINVAL },
		{ "/work/proj/..", NULL, -EINVAL },
		{ "%2e%2e/x", "%2e%2e/x", 0 }, /* the server decodes; undecoded it is a plain name */
	};
	char nul[] = "a\0/../../etc";
	char *rel = NULL;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		int r = api_files_resolve(&R, cases[i].in, strlen(cases[i].in), &rel);

		is_int(r, cases[i].r, "resolve '%s' returns %d", cases[i].in, cases[i].r);
		if (r == 0 && cases[i].out)
			is_str(rel, cases[i].out, "resolve '%s' gives '%s'", cases[i].in, cases[i].out);
		if (r == 0)
			free(rel);
		rel = NULL;
	}
	is_int(api_files_resolve(&R, nul, sizeof(nul) - 1, &rel), -EINVAL, "resolve with an embedded NUL fails");
	ok(rel == NULL, "no result written on failure");

	/* Without a prefix, absolute paths are relative to the root. */
	{
		struct api_files_root r2 = R;

		r2.prefix = NULL;
		is_int(api_files_resolve(&r2, "/x/y", 4, &rel), 0, "resolve without prefix");
		is_str(rel, "x/y", "absolute path maps onto the root without prefix");
		free(rel);
	}
	{
		char *d = NULL;

		api_files_display_path(&R, "a/b", &d);
		is_str(d, "/work/proj/a/b", "display path joins the prefix");
		free(d);
		api_files_display_path(&R, "", &d);
		is_str(d, "/work/proj", "display path of the root is the prefix");
		free(d);
	}
}

/* Random API paths: whatever resolve accepts is a clean relative path, and no ".." component ever gets through. */
static void test_resolve_random(void)
{
	static const char *parts[] = { "a", "b", "..", ".", "", "work", "proj", "projx", "%2e%2e", "...", ".a", "a..b" };
	unsigned seed = 12345, accepted = 0, bad = 0;

	for (int i = 0; i < 5000; i++) {
		char path[256] = "";
		int n = (int)(rand_r(&seed) % 7);
		bool has_dotdot = false;
		char *rel = NULL;
		int r;

		if (rand_r(&seed) % 2)
			strcat(path, "/");
		for (int k = 0; k < n; k++) {
			const char *p = parts[rand_r(&seed) % ARRAY_SIZE(parts)];

			if (strcmp(p, "..") == 0)
				has_dotdot = true;
			strcat(path, p);
			if (k + 1 < n || rand_r(&seed) % 3 == 0)
				strcat(path, "/");
		}
		r = api_files_resolve(&R, path, strlen(path), &rel);
		if (r == 0) {
			accepted++;
			/* path_check_relative() refuses "..", ".", "" components and a leading '/' */
			if (has_dotdot || path_check_relative(rel) < 0) {
				bad++;
				printf("# accepted '%s' as '%s'\n", path, rel);
			}
			if (path[0] == '/') {
				/* absolute: must have been /work/proj or below */
				char norm[256];
				char *out = NULL;

				if (path_normalize_relative(path, strlen(path), &out) == 0) {
					snprintf(norm, sizeof(norm), "%s", out);
					free(out);
					if (strncmp(norm, "work/proj", 9) != 0 || (norm[9] != '\0' && norm[9] != '/')) {
						bad++;
						printf("# accepted '%s' outside the workspace\n", path);
					}
				}
			}
			free(rel);
		} else if (r != -EINVAL && r != -EXDEV && r != -ENAMETOOLONG) {
			bad++;
			printf("# unexpected error %d for '%s'\n", r, path);
		}
	}
	is_int(bad, 0, "5000 random paths: nothing unclean accepted (%u accepted)", accepted);
	ok(accepted > 500, "and a fair share accepted");
}

static void test_errno_table(void)
{
	const char *code = NULL;

	is_int(api_errno_to_code(-ENOENT, &code), 404, "ENOENT is 404");
	is_str(code, "FILE_NOT_FOUND", "ENOENT code");
	is_int(api_errno_to_code(EINVAL, &code), 400, "positive EINVAL accepted");
	is_str(code, "INVALID_REQUEST_BODY", "EINVAL code");
	is_int(api_errno_to_code(-EDQUOT, &code), 507, "EDQUOT is 507");
	is_str(code, "QUOTA_EXCEEDED", "EDQUOT code");
	is_int(api_errno_to_code(-ENOSPC, &code), 507, "ENOSPC is 507");
	is_int(api_errno_to_code(-EXDEV, &code), 400, "EXDEV is 400");
	is_str(code, "PATH_OUTSIDE_WORKSPACE", "EXDEV code");
	is_int(api_errno_to_code(-EIO, &code), 500, "unknown errno is 500");
	is_str(code, "RUNTIME_ERROR", "unknown errno code");
}

static void test_meta(void)
{
	struct { const char *json; int r; int mode; } cases[] = {
		{ "{\"mode\":644}", 0, 0644 },
		{ "{\"mode\":755,\"owner\":\"root\",\"group\":\"0\"}", 0, 0755 },
		{ "{\"mode\":\"0640\"}", 0, 0640 },
		{ "{\"mode\":4755}", 0, 04755 },
		{ "{}", 0, -1 },
		{ "{\"mode\":null}", 0, -1 },
		{ "{\"mode\":888}", -EINVAL, 0 },
		{ "{\"mode\":99999}", -EINVAL, 0 },
		{ "{\"mode\":-1}", -EINVAL, 0 },
		{ "{\"mode\":6.5}", -EINVAL, 0 },
		{ "{\"mode\":\"rwx\"}", -EINVAL, 0 },
		{ "{\"owner\":5}", -EINVAL, 0 },
		{ "[1]", -EINVAL, 0 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		_cleanup_json_ cJSON *o = cJSON_Parse(cases[i].json);
		struct api_file_meta m = { .mode = -42 };
		int r = api_file_meta_from_json(o, &m);

		is_int(r, cases[i].r, "meta %s -> %d", cases[i].json, cases[i].r);
		if (r == 0)
			is_int(m.mode, cases[i].mode, "meta %s mode %o", cases[i].json, cases[i].mode);
	}
	{
		uid_t u = 1;
		gid_t g = 1;

		is_int(api_lookup_uid("root", &u), 0, "root user by name");
		is_int(u, 0, "root is uid 0");
		is_int(api_lookup_uid("4242", &u), 0, "numeric uid");
		is_int(u, 4242, "numeric uid value");
		is_int(api_lookup_uid("no-such-user-draftbox", &u), -EINVAL, "unknown user is EINVAL");
		is_int(api_lookup_gid("root", &g), 0, "root group by name");
		is_int(g, 0, "root group is gid 0");
		is_int(api_lookup_gid("-1", &g), -EINVAL, "negative id rejected");
	}
}

static void test_write_read(void)
{
	struct api_file_meta meta = API_FILE_META_INIT;
	struct stat st;
	uint64_t size = 0;
	int fd = -1;
	char buf[64] = { 0 };
	char *s;

	is_int(api_files_write(&R, "/work/proj/new/sub/a.txt", NULL, "hello", 5), 0, "write creates parents");
	ok(stat(p_in("new/sub/a.txt"), &st) == 0 && st.st_uid == UID && st.st_gid == GID, "new file owned by the view uid/gid");
	is_int(st.st_mode & 07777, 0644, "new file mode 0644 by default");
	ok(stat(p_in("new"), &st) == 0 && st.st_uid == UID && (st.st_mode & 07777) == 0755, "new parent dir owned by view uid, 0755");
	is_int(api_files_open_read(&R, "new/sub/a.txt", &fd, &size), 0, "open_read");
	is_int(size, 5, "size");
	ok(fd >= 0 && read(fd, buf, sizeof(buf)) == 5 && memcmp(buf, "hello", 5) == 0, "content read back");
	ok(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC), "download fd is O_CLOEXEC");
	safe_close(fd);

	chmod(p_in("new/sub/a.txt"), 0600);
	is_int(api_files_write(&R, "new/sub/a.txt", NULL, "again", 5), 0, "overwrite");
	ok(stat(p_in("new/sub/a.txt"), &st) == 0 && (st.st_mode & 07777) == 0600, "overwrite keeps the old mode");
	meta.mode = 0751;
	meta.owner = "0";
	meta.group = "root";
	is_int(api_files_write(&R, "new/x.sh", &meta, "#!/bin/sh\n", 10), 0, "write with metadata");
	ok(stat(p_in("new/x.sh"), &st) == 0 && (st.st_mode & 07777) == 0751 && st.st_uid == 0 && st.st_gid == 0,
	   "metadata mode and owner applied");
	meta.owner = "no-such-user-draftbox";
	is_int(api_files_write(&R, "new/y", &meta, "", 0), -EINVAL, "unknown owner refused");
	ok(!exists(p_in("new/y")), "nothing created for a refused upload");

	is_int(api_files_open_read(&R, "new", &fd, &size), -EISDIR, "download of a directory is EISDIR");
	is_int(api_files_open_read(&R, "missing", &fd, &size), -ENOENT, "download of a missing file is ENOENT");
	mkfifo(p_in("fifo"), 0644);
	is_int(api_files_open_read(&R, "fifo", &fd, &size), -ENODEV, "download of a FIFO is refused without blocking");
	is_int(api_files_write(&R, "new", NULL, "x", 1), -EISDIR, "upload over a directory is EISDIR");
	is_int(api_files_write(&R, "", NULL, "x", 1), -EISDIR, "upload to the root is EISDIR");
	is_int(api_files_write(&R, "/etc/passwd", NULL, "x", 1), -EXDEV, "upload outside the workspace is EXDEV");

	s = get(p_in("new/sub/a.txt"));
	is_str(s, "again", "overwritten content");
	free(s);
}

static void test_atomic_upload(void)
{
	struct api_upload *u = NULL;
	uint64_t n = 0;
	char *s;
	int count = 0;
	DIR *d;
	struct dirent *de;

	put(p_in("atom"), "old content");
	is_int(api_upload_begin(&R, "atom", NULL, 0, &u), 0, "upload begin");
	is_int(api_upload_write(u, "new ", 4), 0, "upload write 1");
	s = get(p_in("atom"));
	is_str(s, "old content", "target unchanged while the upload runs");
	free(s);
	api_upload_free(u);
	u = NULL;
	s = get(p_in("atom"));
	is_str(s, "old content", "aborted upload leaves the target alone");
	free(s);
	d = opendir(rootdir);
	while (d && (de = readdir(d)))
		if (strncmp(de->d_name, ".draftbox-upload", 16) == 0)
			count++;
	if (d)
		closedir(d);
	is_int(count, 0, "aborted upload removes its temporary file");

	is_int(api_upload_begin(&R, "atom", NULL, 0, &u), 0, "upload begin again");
	api_upload_write(u, "new ", 4);
	api_upload_write(u, "content", 7);
	is_int(api_upload_commit(u, &n), 0, "commit");
	is_int(n, 11, "byte count");
	is_int(api_upload_write(u, "x", 1), -EBADF, "write after commit refused");
	api_upload_free(u);
	s = get(p_in("atom"));
	is_str(s, "new content", "committed content");
	free(s);

	/* small pieces are gathered, large ones pass through; the bytes stay in order */
	{
		size_t total = 3 * 1024 * 1024 + 777 + 2 * 1024 * 1024 + 5, off = 0;
		char *data = malloc(total), *back = NULL;
		size_t back_len = 0;
		int bad = 0, fd;

		for (size_t k = 0; k < total; k++)
			data[k] = (char)(k * 7 + k / 4096);
		is_int(api_upload_begin(&R, "pieces.bin", NULL, 0, &u), 0, "upload in pieces");
		while (off < 3 * 1024 * 1024 + 777) {
			size_t piece = MIN((size_t)1000, 3 * 1024 * 1024 + 777 - off);

			bad += api_upload_write(u, data + off, piece) < 0;
			off += piece;
		}
		bad += api_upload_write(u, data + off, 2 * 1024 * 1024) < 0;
		off += 2 * 1024 * 1024;
		bad += api_upload_write(u, data + off, 5) < 0;
		is_int(bad, 0, "all pieces accepted");
		is_int(api_upload_commit(u, &n), 0, "commit of a pieced upload");
		is_int(n, total, "byte count of a pieced upload");
		api_upload_free(u);
		fd = open(p_in("pieces.bin"), O_RDONLY | O_CLOEXEC);
		ok(fd >= 0 && read_full_fd(fd, total + 1, &back, &back_len) == 0 && back_len == total &&
		   memcmp(back, data, total) == 0, "pieced upload content intact");
		safe_close(fd);
		free(back);
		free(data);
		unlink(p_in("pieces.bin"));
	}

	/* from an fd: a pipe, read to EOF */
	{
		int pfd[2];
		uint64_t got = 0;
		char *back;

		if (pipe2(pfd, O_CLOEXEC) == 0) {
			if (write(pfd[1], "through a pipe", 14) != 14)
				ok(false, "pipe write");
			close(pfd[1]);
			is_int(api_files_write_fd(&R, "from-fd/x.txt", NULL, pfd[0], 0, &got), 0, "write from an fd");
			is_int(got, 14, "bytes from the fd");
			back = get(p_in("from-fd/x.txt"));
			is_str(back, "through a pipe", "content from the fd");
			free(back);
			close(pfd[0]);
		}
		if (pipe2(pfd, O_CLOEXEC) == 0) {
			if (write(pfd[1], "0123456789abc", 13) != 13)
				ok(false, "pipe write");
			close(pfd[1]);
			is_int(api_files_write_fd(&R, "from-fd/y.txt", NULL, pfd[0], 10, NULL), -EFBIG, "fd over the bound");
			ok(!exists(p_in("from-fd/y.txt")), "nothing left by a refused fd upload");
			close(pfd[0]);
		}
	}

	is_int(api_upload_begin(&R, "big", NULL, 10, &u), 0, "bounded upload");
	is_int(api_upload_write(u, "0123456789", 10), 0, "write up to the bound");
	is_int(api_upload_write(u, "x", 1), -EFBIG, "write past the bound is EFBIG");
	api_upload_free(u);
	ok(!exists(p_in("big")), "a failed upload creates nothing");
}

static void test_hostile_links(void)
{
	struct api_file_meta meta = API_FILE_META_INIT;
	struct stat st_before, st;
	uint64_t size;
	int fd = -1;
	cJSON *j = NULL;
	bool trunc;
	char *s;

	symlink("/etc", p_in("evil"));
	symlink("../../../../../../etc/passwd", p_in("dots"));
	mkdir(p_in("d"), 0755);
	symlink("..", p_in("d/up"));
	symlink(outside, p_in("out"));
	put(p_in("../outside/secret.txt"), "secret");
	stat("/etc/passwd", &st_before);

	is_int(api_files_open_read(&R, "evil/passwd", &fd, &size), -ELOOP, "download through a symlink dir is ELOOP");
	is_int(api_files_open_read(&R, "dots", &fd, &size), -ELOOP, "download of a .. symlink is ELOOP");
	is_int(api_files_open_read(&R, "d/up/d/up/atom", &fd, &size), -ELOOP, "download through a .. chain is ELOOP");
	is_int(api_files_open_read(&R, "/work/proj/out/secret.txt", &fd, &size), -ELOOP, "download via a link to outside is ELOOP");
	is_int(api_files_write(&R, "evil/draftbox-test", NULL, "x", 1), -ELOOP, "upload below a symlink is ELOOP");
	ok(!exists("/etc/draftbox-test"), "nothing written in /etc");
	is_int(api_files_write(&R, "out/secret.txt", NULL, "pwned", 5), -ELOOP, "upload through a link to outside is ELOOP");
	s = get(p_in("../outside/secret.txt"));
	is_str(s, "secret", "outside file untouched");
	free(s);

	meta.mode = 0777;
	is_int(api_files_set_permissions(&R, "dots", &meta), -ELOOP, "chmod of a symlink is ELOOP");
	is_int(api_files_set_permissions(&R, "evil/passwd", &meta), -ELOOP, "chmod through a symlink is ELOOP");
	stat("/etc/passwd", &st);
	is_int(st.st_mode, st_before.st_mode, "/etc/passwd mode untouched");
	is_int(api_files_replace(&R, "out/secret.txt", "secret", 6, "x", 1, NULL), -ELOOP, "replace through a link is ELOOP");
	is_int(api_files_move(&R, "out/secret.txt", "stolen"), -ELOOP, "move from below a link is ELOOP");
	is_int(api_files_move(&R, "atom", "out/planted"), -ELOOP, "move to below a link is ELOOP");
	ok(!exists(p_in("../outside/planted")), "nothing moved outside");
	is_int(api_dirs_create(&R, "evil/newdir", NULL), -ELOOP, "mkdir below a symlink is ELOOP");
	is_int(api_dirs_remove(&R, "evil"), -ENOTDIR, "rmdir of a symlink is ENOTDIR");
	is_int(api_dirs_remove(&R, "out"), -ENOTDIR, "rmdir of a link to outside is ENOTDIR");
	ok(exists(p_in("../outside/secret.txt")), "outside tree untouched by rmdir");

	is_int(api_files_stat(&R, "evil", &j), 0, "stat of a symlink works");
	is_str(j ? cJSON_GetStringValue(cJSON_GetObjectItem(j, "type")) : NULL, "symlink", "reported as a symlink");
	cJSON_Delete(j);
	j = NULL;
	is_int(api_files_stat(&R, "evil/passwd", &j), -ELOOP, "stat through a symlink is ELOOP");

	is_int(api_files_search(&R, "", "secret*", NULL, &j, &trunc), 0, "search from the root");
	is_int(cJSON_GetArraySize(j), 0, "search does not enter links to outside");
	cJSON_Delete(j);
	is_int(api_files_search(&R, "", "passwd", NULL, &j, &trunc), 0, "search for passwd");
	is_int(cJSON_GetArraySize(j), 0, "search does not enter links to /etc");
	cJSON_Delete(j);
	is_int(api_files_search(&R, "evil", "*", NULL, &j, &trunc), -ELOOP, "search starting at a link is ELOOP");

	/* Replacing a symlink by upload replaces the link itself. */
	is_int(api_files_write(&R, "dots", NULL, "plain", 5), 0, "upload over a symlink");
	ok(lstat(p_in("dots"), &st) == 0 && S_ISREG(st.st_mode), "the link became a regular file");
	stat("/etc/passwd", &st);
	ok(st.st_size == st_before.st_size && st.st_mtime == st_before.st_mtime, "/etc/passwd not written");

	/* Removing a symlink removes the link. */
	is_int(api_files_remove(&R, "evil"), 0, "remove a symlink");
	ok(!exists(p_in("evil")) && exists("/etc/passwd"), "link gone, target intact");

	/* rm -r of a directory holding links to outside removes the links only. */
	mkdir(p_in("tree"), 0755);
	mkdir(p_in("tree/sub"), 0755);
	symlink(outside, p_in("tree/sub/out"));
	symlink("/etc", p_in("tree/etc"));
	put(p_in("tree/sub/f"), "f");
	is_int(api_dirs_remove(&R, "tree"), 0, "rm -r of a tree with hostile links");
	ok(!exists(p_in("tree")), "tree removed");
	ok(exists(p_in("../outside/secret.txt")) && exists("/etc/passwd"), "link targets intact");
}

static void test_hard_link(void)
{
	char *s;

	put(p_in("../outside/hl-target"), "outside data");
	if (link(p_in("../outside/hl-target"), p_in("hl")) < 0) {
		ok(false, "cannot create hard link: %m");
		return;
	}
	is_int(api_files_write(&R, "hl", NULL, "replaced", 8), 0, "upload over a hard link");
	s = get(p_in("../outside/hl-target"));
	is_str(s, "outside data", "the other name of the hard link is not written through");
	free(s);
	s = get(p_in("hl"));
	is_str(s, "replaced", "the view sees the new file");
	free(s);

	link(p_in("../outside/hl-target"), p_in("hl2"));
	is_int(api_files_replace(&R, "hl2", "outside", 7, "inside", 6, NULL), 0, "replace in a hard-linked file");
	s = get(p_in("../outside/hl-target"));
	is_str(s, "outside data", "replace does not write through a hard link");
	free(s);
}

static void test_replace(void)
{
	struct stat st, st2;
	size_t count = 99;
	char *s;

	put(p_in("r.txt"), "hello world hello");
	chmod(p_in("r.txt"), 0640);
	chown(p_in("r.txt"), 777, 778);
	is_int(api_files_replace(&R, "r.txt", "hello", 5, "bye", 3, &count), 0, "replace");
	is_int(count, 2, "two replacements");
	s = get(p_in("r.txt"));
	is_str(s, "bye world bye", "replaced content");
	free(s);
	ok(stat(p_in("r.txt"), &st) == 0 && (st.st_mode & 07777) == 0640 && st.st_uid == 777 && st.st_gid == 778,
	   "replace keeps mode and owner");
	is_int(api_files_replace(&R, "r.txt", "nothing", 7, "x", 1, &count), 0, "replace with no match");
	is_int(count, 0, "zero replacements");
	ok(stat(p_in("r.txt"), &st2) == 0 && st2.st_ino == st.st_ino, "no match leaves the file alone");
	is_int(api_files_replace(&R, "r.txt", "", 0, "x", 1, &count), -EINVAL, "empty old string refused");
	is_int(api_files_replace(&R, "r.txt", "bye", 3, "", 0, &count), 0, "replace with empty string");
	s = get(p_in("r.txt"));
	is_str(s, " world ", "deleted occurrences");
	free(s);
	put(p_in("aaa"), "aaaa");
	api_files_replace(&R, "aaa", "aa", 2, "b", 1, &count);
	is_int(count, 2, "non-overlapping count");
	is_int(api_files_replace(&R, "new", "a", 1, "b", 1, &count), -EISDIR, "replace in a directory is EISDIR");
}

static void test_remove_move_perms(void)
{
	struct api_file_meta meta = API_FILE_META_INIT;
	struct stat st;

	put(p_in("rm-me"), "x");
	is_int(api_files_remove(&R, "rm-me"), 0, "remove a file");
	ok(!exists(p_in("rm-me")), "file removed");
	is_int(api_files_remove(&R, "rm-me"), -ENOENT, "remove a missing file is ENOENT");
	is_int(api_files_remove(&R, "new"), -EISDIR, "remove of a directory is EISDIR");
	is_int(api_files_remove(&R, "/work/proj"), -EISDIR, "remove of the root is EISDIR");

	put(p_in("mv-src"), "m");
	is_int(api_files_move(&R, "/work/proj/mv-src", "/work/proj/mvdir/deep/dst"), 0, "move creates dest parents");
	ok(!exists(p_in("mv-src")) && exists(p_in("mvdir/deep/dst")), "moved");
	ok(stat(p_in("mvdir"), &st) == 0 && st.st_uid == UID, "move-created parent owned by view uid");
	is_int(api_files_move(&R, "mvdir", "mvdir/deep/inside"), -EINVAL, "move of a dir into itself is EINVAL");
	is_int(api_files_move(&R, "", "x"), -EINVAL, "move of the root is EINVAL");
	is_int(api_files_move(&R, "mvdir", "/etc/x"), -EXDEV, "move outside is EXDEV");
	is_int(api_files_move(&R, "nope", "x"), -ENOENT, "move of a missing file is ENOENT");

	meta.mode = 0604;
	meta.owner = "4242";
	meta.group = "root";
	is_int(api_files_set_permissions(&R, "mvdir/deep/dst", &meta), 0, "set permissions");
	ok(stat(p_in("mvdir/deep/dst"), &st) == 0 && (st.st_mode & 07777) == 0604 && st.st_uid == 4242 && st.st_gid == 0,
	   "mode and owner set");
	meta.owner = NULL;
	meta.group = NULL;
	meta.mode = 04755;
	is_int(api_files_set_permissions(&R, "mvdir/deep/dst", &meta), 0, "setuid mode");
	ok(stat(p_in("mvdir/deep/dst"), &st) == 0 && (st.st_mode & 07777) == 04755 && st.st_uid == 4242, "mode only; owner kept");
	meta.owner = "no-such-user-draftbox";
	is_int(api_files_set_permissions(&R, "mvdir/deep/dst", &meta), -EINVAL, "unknown owner is EINVAL");
}

static void test_dirs(void)
{
	struct api_file_meta meta = API_FILE_META_INIT;
	struct api_walk_limits lim = { 0 };
	struct stat st;
	cJSON *j = NULL, *e;
	bool trunc = false;
	mode_t old_umask;
	char path[4096];
	int r, n;

	old_umask = umask(0777);
	meta.mode = 0750;
	is_int(api_dirs_create(&R, "/work/proj/mk/a/b", &meta), 0, "mkdir -p");
	umask(old_umask);
	ok(stat(p_in("mk/a/b"), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0750 && st.st_uid == UID,
	   "mkdir mode exact (umask ignored) and owned by the view uid");
	is_int(api_dirs_create(&R, "mk/a/b", NULL), 0, "mkdir -p of an existing dir is fine");
	put(p_in("mk/file"), "f");
	is_int(api_dirs_create(&R, "mk/file/sub", NULL), -ENOTDIR, "mkdir through a file is ENOTDIR");

	put(p_in("mk/a/b/one.txt"), "1");
	put(p_in("mk/a/two.txt"), "2");
	put(p_in("mk/a/b/three.md"), "3");

	is_int(api_dirs_list(&R, "mk", 1, NULL, &j, &trunc), 0, "list depth 1");
	is_int(cJSON_GetArraySize(j), 2, "two children of mk");
	e = cJSON_GetArrayItem(j, 0);
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(e, "path")), "/work/proj/mk/a", "first entry path");
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")), "directory", "first entry is a directory");
	is_int(cJSON_GetObjectItem(e, "mode")->valuedouble, 750, "mode sent as octal digits");
	{
		const char *t = cJSON_GetStringValue(cJSON_GetObjectItem(e, "modified_at"));

		ok(t && strlen(t) >= 20 && t[4] == '-' && t[10] == 'T' && t[strlen(t) - 1] == 'Z', "modified_at is RFC 3339 UTC ('%s')", t ? t : "");
		ok(cJSON_GetStringValue(cJSON_GetObjectItem(e, "created_at")) != NULL, "created_at present");
		is_str(cJSON_GetStringValue(cJSON_GetObjectItem(e, "owner")), "12345", "owner without passwd entry is the id");
	}
	cJSON_Delete(j);
	is_int(api_dirs_list(&R, "mk", 3, NULL, &j, &trunc), 0, "list depth 3");
	is_int(cJSON_GetArraySize(j), 6, "all entries down to depth 3");
	ok(!trunc, "not truncated");
	cJSON_Delete(j);
	lim.max_results = 3;
	is_int(api_dirs_list(&R, "mk", 3, &lim, &j, &trunc), 0, "list with a result bound");
	is_int(cJSON_GetArraySize(j), 3, "bounded to 3");
	ok(trunc, "reported truncated");
	cJSON_Delete(j);
	is_int(api_dirs_list(&R, "mk/file", 1, NULL, &j, &trunc), -ENOTDIR, "list of a file is ENOTDIR");

	is_int(api_files_search(&R, "/work/proj/mk", "*.txt", NULL, &j, &trunc), 0, "search *.txt");
	is_int(cJSON_GetArraySize(j), 2, "two .txt files");
	cJSON_Delete(j);
	is_int(api_files_search(&R, "mk", NULL, NULL, &j, &trunc), 0, "search default pattern");
	is_int(cJSON_GetArraySize(j), 4, "files only, no directories");
	cJSON_Delete(j);
	lim.max_results = 0;
	lim.max_depth = 1;
	is_int(api_files_search(&R, "mk", "*", &lim, &j, &trunc), 0, "search depth 1");
	is_int(cJSON_GetArraySize(j), 1, "only mk/file at depth 1");
	ok(trunc, "depth bound reported");
	cJSON_Delete(j);

	is_int(api_dirs_remove(&R, "mk"), 0, "rm -r");
	ok(!exists(p_in("mk")), "removed");
	is_int(api_dirs_remove(&R, "mk"), -ENOENT, "rm -r of a missing dir is ENOENT");
	is_int(api_dirs_remove(&R, "/work/proj"), -EBUSY, "rm -r of the root is EBUSY");
	is_int(api_dirs_remove(&R, ""), -EBUSY, "rm -r of '' is EBUSY");
	put(p_in("plain"), "p");
	is_int(api_dirs_remove(&R, "plain"), -ENOTDIR, "rm -r of a file is ENOTDIR");

	/* More entries than one removal batch, and a visit bound smaller than the directory. */
	mkdir(p_in("wide"), 0755);
	for (n = 0; n < 5000; n++) {
		char name[64];

		snprintf(name, sizeof(name), "wide/f%05d", n);
		put(p_in(name), "");
	}
	lim = (struct api_walk_limits){ .max_visited = 100 };
	is_int(api_dirs_list(&R, "wide", 1, &lim, &j, &trunc), 0, "list with a visit bound");
	ok(cJSON_GetArraySize(j) == 100 && trunc, "visit bound stops the walk and reports it (%d)", cJSON_GetArraySize(j));
	{
		bool sorted = true;

		for (int k = 1; k < cJSON_GetArraySize(j); k++)
			if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(j, k - 1), "path")),
				   cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(j, k), "path"))) >= 0)
				sorted = false;
		ok(sorted, "a truncated listing is still sorted");
	}
	cJSON_Delete(j);
	is_int(api_dirs_remove(&R, "wide"), 0, "rm -r of a directory larger than a batch");
	ok(!exists(p_in("wide")), "wide removed");

	/* A tree deeper than the walk bound: refused, nothing outside touched. */
	snprintf(path, sizeof(path), "%s", p_in("deep"));
	r = 0;
	for (n = 0; n < (int)API_WALK_MAX_DEPTH + 2 && r == 0; n++) {
		r = mkdir(path, 0755);
		strcat(path, "/d");
	}
	is_int(api_dirs_remove(&R, "deep"), -ENAMETOOLONG, "rm -r past the depth bound is ENAMETOOLONG");
	is_int(api_dirs_list(&R, "deep", 1000, NULL, &j, &trunc), 0, "list with a huge depth is capped");
	is_int(cJSON_GetArraySize(j), (int)API_WALK_MAX_DEPTH, "list stops at API_WALK_MAX_DEPTH");
	cJSON_Delete(j);
}

static void test_utf8_names(void)
{
	cJSON *j = NULL;
	const char *path;

	mkdir(p_in("names"), 0755);
	put(p_in("names/bad\xff\xfe.txt"), "x");
	put(p_in("names/caf\xc3\xa9.txt"), "x");
	put(p_in("names/over\xc0\xaflong"), "x");
	put(p_in("names/trunc\xe2\x82"), "x");
	is_int(api_dirs_list(&R, "names", 1, NULL, &j, NULL), 0, "list names that are not UTF-8");
	is_int(cJSON_GetArraySize(j), 4, "four names");
	path = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "path"));
	is_str(path, "/work/proj/names/bad\xef\xbf\xbd\xef\xbf\xbd.txt", "invalid bytes become U+FFFD");
	path = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 1), "path"));
	is_str(path, "/work/proj/names/caf\xc3\xa9.txt", "valid UTF-8 kept");
	path = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 2), "path"));
	is_str(path, "/work/proj/names/over\xef\xbf\xbd\xef\xbf\xbdlong", "overlong encoding replaced");
	path = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 3), "path"));
	is_str(path, "/work/proj/names/trunc\xef\xbf\xbd\xef\xbf\xbd", "truncated sequence replaced");
	cJSON_Delete(j);
	is_int(api_dirs_remove(&R, "names"), 0, "remove names");
}

static void test_info(void)
{
	char *paths[] = { "/work/proj/atom", "plain", NULL };
	char *bad[] = { "atom", "missing", NULL };
	cJSON *j = NULL, *e;
	size_t failed = 99;

	is_int(api_files_info(&R, paths, &j, NULL), 0, "info of two paths");
	e = cJSON_GetObjectItem(j, "/work/proj/atom");
	ok(e != NULL, "keyed by the path as given");
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(e, "path")), "/work/proj/atom", "path field");
	is_int(cJSON_GetObjectItem(e, "size")->valuedouble, 11, "size field");
	is_str(cJSON_GetStringValue(cJSON_GetObjectItem(e, "type")), "file", "type field");
	ok(cJSON_GetObjectItem(j, "plain") != NULL, "second entry");
	cJSON_Delete(j);
	j = NULL;
	is_int(api_files_info(&R, bad, &j, &failed), -ENOENT, "info with a missing path");
	is_int(failed, 1, "failing index reported");
	ok(j == NULL, "no result on failure");
}

/*
 * A child swaps "flip" between a real directory and a symlink to the
 * outside directory (RENAME_EXCHANGE) as fast as it can, while we upload
 * and mkdir below "flip". Nothing may ever land outside.
 */
static void test_race(void)
{
	pid_t pid;
	int fails = 0, wins = 0;
	DIR *d;
	struct dirent *de;
	int leaked = 0;

	mkdir(p_in("flip"), 0755);
	symlink(outside, p_in("flip-link"));
	pid = fork();
	if (pid == 0) {
		int dfd = open(rootdir, O_PATH | O_DIRECTORY | O_CLOEXEC);

		for (;;)
			renameat2(dfd, "flip", dfd, "flip-link", RENAME_EXCHANGE);
	}
	for (int i = 0; i < 3000; i++) {
		char name[64];

		snprintf(name, sizeof(name), "flip/f%d", i);
		if (api_files_write(&R, name, NULL, "x", 1) == 0)
			wins++;
		else
			fails++;
		snprintf(name, sizeof(name), "flip/d%d/e", i);
		(void)api_dirs_create(&R, name, NULL);
		snprintf(name, sizeof(name), "flip/f%d", i);
		(void)api_files_set_permissions(&R, name, &(struct api_file_meta){ .mode = 0777 });
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	d = opendir(outside);
	while (d && (de = readdir(d)))
		if (de->d_name[0] == 'f' || de->d_name[0] == 'd' || de->d_name[0] == '.')
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				leaked++;
	if (d)
		closedir(d);
	is_int(leaked, 0, "no file or directory created outside during the swap race (%d uploads ok, %d refused)", wins, fails);
}

int main(void)
{
	char cmd[600];
	int fd;

	if (geteuid() != 0)
		tap_skip_all("needs root to create files owned by another uid");
	umask(022);
	if (!mkdtemp(base))
		return 1;
	snprintf(rootdir, sizeof(rootdir), "%s/root", base);
	snprintf(outside, sizeof(outside), "%s/outside", base);
	mkdir(rootdir, 0755);
	mkdir(outside, 0755);
	fd = open(rootdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	R = (struct api_files_root){ .root_fd = fd, .prefix = "/work/proj/", .uid = UID, .gid = GID };

	test_resolve();
	test_resolve_random();
	test_errno_table();
	test_meta();
	test_write_read();
	test_atomic_upload();
	test_hostile_links();
	test_hard_link();
	test_replace();
	test_remove_move_perms();
	test_dirs();
	test_info();
	test_utf8_names();
	test_race();

	close(fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", base);
	return tap_done();
}
