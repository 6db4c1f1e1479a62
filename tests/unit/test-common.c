// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Unit tests for common/: path validation and symlink-free walks, string
 * vectors, SipHash-2-4.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdpath.h"
#include "json-util.h"
#include "macro.h"
#include "siphash.h"
#include "strv.h"
#include "tap.h"

static void test_names(void)
{
	char longname[NAME_MAX + 2];

	ok(name_is_valid("a"), "plain name is valid");
	ok(!name_is_valid(""), "empty name is invalid");
	ok(!name_is_valid("."), "dot is invalid");
	ok(!name_is_valid(".."), "dotdot is invalid");
	ok(!name_is_valid("a/b"), "slash is invalid");
	memset(longname, 'x', sizeof(longname) - 1);
	longname[NAME_MAX + 1] = '\0';
	ok(!name_is_valid(longname), "name over NAME_MAX is invalid");
	longname[NAME_MAX] = '\0';
	ok(name_is_valid(longname), "name of NAME_MAX bytes is valid");
}

static void test_relative(void)
{
	_cleanup_free_ char *n = NULL;

	is_int(path_check_relative(""), 0, "empty path is the root");
	is_int(path_check_relative("a/b/c"), 0, "clean path accepted");
	is_int(path_check_relative("/a"), -EINVAL, "absolute path rejected");
	is_int(path_check_relative("a/../b"), -EINVAL, "dotdot rejected");
	is_int(path_check_relative("a//b"), -EINVAL, "empty component rejected");
	is_int(path_check_relative("a/"), -EINVAL, "trailing slash rejected");
	is_int(path_normalize_relative("/x//./y/", 8, &n), 0, "normalize accepts slashes and dots");
	is_str(n, "x/y", "normalized path");
	free(TAKE_PTR(n));
	is_int(path_normalize_relative("x/../y", 6, &n), -EINVAL, "normalize rejects dotdot");
	is_int(path_normalize_relative("x\0y", 3, &n), -EINVAL, "normalize rejects NUL");
}

static void test_beneath(void)
{
	char tmpl[] = "/tmp/test-common-XXXXXX";
	_cleanup_close_ int dfd = -1, fd = -1;

	ok(mkdtemp(tmpl) != NULL, "mkdtemp");
	dfd = open(tmpl, O_PATH | O_DIRECTORY | O_CLOEXEC);
	ok(dfd >= 0, "open tmpdir");

	fd = mkdirat_beneath_p(dfd, "a/b/c", 0755);
	ok(fd >= 0, "mkdirat_beneath_p creates a/b/c");
	fd = safe_close(fd);
	ok(symlinkat("/etc", dfd, "a/evil") == 0, "plant symlink to /etc");
	ok(symlinkat("../../..", dfd, "a/b/up") == 0, "plant .. symlink");

	fd = openat_beneath(dfd, "a/b/c", O_PATH | O_DIRECTORY, 0);
	ok(fd >= 0, "openat_beneath opens a real dir");
	fd = safe_close(fd);
	fd = openat_beneath(dfd, "a/evil/passwd", O_RDONLY, 0);
	ok(fd < 0, "symlink in the middle is not followed (%d)", fd);
	fd = safe_close(fd);
	fd = openat_beneath(dfd, "a/evil", O_RDONLY, 0);
	ok(fd < 0, "symlink as last component is not followed (%d)", fd);
	fd = safe_close(fd);
	fd = openat_beneath(dfd, "a/b/up/etc/passwd", O_RDONLY, 0);
	ok(fd < 0, "dotdot symlink is not followed (%d)", fd);
	fd = safe_close(fd);
	fd = mkdirat_beneath_p(dfd, "a/evil/x", 0755);
	ok(fd < 0, "mkdir -p does not walk through a symlink (%d)", fd);
	fd = safe_close(fd);
	ok(faccessat(AT_FDCWD, "/etc/x", F_OK, 0) < 0, "nothing created in /etc");

	{
		const char *name = NULL;
		int pfd = openat_beneath_parent(dfd, "a/b/file", &name);

		ok(pfd >= 0, "parent of a/b/file opens");
		is_str(name, "file", "last component returned");
		safe_close(pfd);
	}

	{
		uint64_t inodes = 0, bytes = 0;
		_cleanup_close_ int f = openat(dfd, "a/b/c/data", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

		ok(f >= 0 && write(f, "12345", 5) == 5, "write a 5-byte file");
		is_int(dir_usage_at(dfd, NULL, &inodes, &bytes), 0, "dir_usage_at walks the tree");
		/* a, a/b, a/b/c, a/b/c/data, a/evil, a/b/up; symlinks count, their targets don't */
		is_int(inodes, 6, "every entry counts once, symlinks not followed");
		is_int(bytes, 5, "only regular file sizes add up");
	}

	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
		(void)!system(cmd);
	}
}

static void test_utf8(void)
{
	static const struct {
		const char *in;
		size_t len;
		const char *out;
		const char *what;
	} cases[] = {
		{ "plain", 5, "plain", "ASCII passes" },
		{ "h\xc3\xa9", 3, "h\xc3\xa9", "valid 2-byte sequence passes" },
		{ "\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80", "valid 4-byte sequence passes" },
		{ "a\xff" "b", 3, "a\xef\xbf\xbd" "b", "invalid byte becomes U+FFFD" },
		{ "a\0b", 3, "a\xef\xbf\xbd" "b", "NUL becomes U+FFFD" },
		{ "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd", "overlong encoding is rejected" },
		{ "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", "surrogate is rejected" },
		{ "x\xe2\x82", 3, "x\xef\xbf\xbd\xef\xbf\xbd", "truncated sequence at the end is replaced" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		_cleanup_free_ char *o = json_utf8_sanitize(cases[i].in, cases[i].len);

		is_str(o, cases[i].out, "%s", cases[i].what);
	}
}

static void test_strv(void)
{
	_cleanup_strv_free_ char **v = NULL;

	is_int(strv_length(NULL), 0, "a NULL vector is empty");
	is_int(strv_push(&v, "a"), 0, "push onto NULL");
	is_int(strv_push(&v, "b"), 0, "push again");
	is_int(strv_length(v), 2, "two strings");
	is_str(v[1], "b", "order kept");
	ok(v[2] == NULL, "still NULL-terminated");
}

/* The reference vectors: key 00 01 .. 0f, message 00 01 .. len-1 (len 15 is the paper's worked example). */
static void test_siphash(void)
{
	static const struct {
		size_t len;
		uint64_t want;
	} v[] = {
		{ 0, 0x726fdb47dd0e0e31ULL },
		{ 1, 0x74f839c593dc67fdULL },
		{ 7, 0xab0200f58b01d137ULL },
		{ 8, 0x93f5f5799a932462ULL },
		{ 15, 0xa129ca6149be45e5ULL },
	};
	uint64_t key[2] = { 0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL };
	unsigned char msg[64];

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)i;
	for (size_t i = 0; i < ARRAY_SIZE(v); i++)
		ok(siphash24(key, msg, v[i].len) == v[i].want, "siphash24 of %zu bytes: %016llx", v[i].len,
		   (unsigned long long)siphash24(key, msg, v[i].len));
	key[0] ^= 1;
	ok(siphash24(key, msg, 15) != 0xa129ca6149be45e5ULL, "another key, another hash");
}

int main(void)
{
	test_siphash();
	test_strv();
	test_utf8();
	test_names();
	test_relative();
	test_beneath();
	return tap_done();
}
