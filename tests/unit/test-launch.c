/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Unit tests for liblauncher: option parsing, sizes and paths, the
 * environment filter, expose rules and the allowlist, the uid pool, the
 * bwrap argument vector and the seccomp filter (compiled, not loaded).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch.h"
#include "macro.h"
#include "tap.h"

static int parse(struct launch_config *c, const char *const *args)
{
	char *argv[64];
	int n = 0;

	argv[n++] = (char *)"draftbox-run";
	for (; *args; args++)
		argv[n++] = (char *)*args;
	argv[n] = NULL;
	launch_config_init(c);
	return launch_parse_args(n, argv, c);
}

/* Index of the first @a followed by @b in @v, or -1. */
static ssize_t pair_index(char **v, const char *a, const char *b)
{
	for (ssize_t i = 0; v && v[i] && v[i + 1]; i++)
		if (strcmp(v[i], a) == 0 && strcmp(v[i + 1], b) == 0)
			return i;
	return -1;
}

/* True if @a then @b appear next to each other in @v. */
static bool strv_has_pair(char **v, const char *a, const char *b)
{
	return pair_index(v, a, b) >= 0;
}

static void test_sizes_and_paths(void)
{
	uint64_t v;
	double d;
	char *p;

	ok(launch_parse_size("4096", &v) == 0 && v == 4096, "size plain");
	ok(launch_parse_size("64M", &v) == 0 && v == 64ULL << 20, "size M");
	ok(launch_parse_size("1.5G", &v) == 0 && v == 3ULL << 29, "size fraction");
	ok(launch_parse_size("2KiB", &v) == 0 && v == 2048, "size KiB");
	ok(launch_parse_size("-1", &v) == -EINVAL, "size negative");
	ok(launch_parse_size("12X", &v) == -EINVAL, "size bad suffix");
	ok(launch_parse_seconds("0.25", &d) == 0 && d == 0.25, "seconds");
	ok(launch_parse_seconds("x", &d) == -EINVAL, "seconds bad");

	ok(launch_path_normalize("//a/./b//", &p) == 0 && strcmp(p, "/a/b") == 0, "normalize");
	free(p);
	ok(launch_path_normalize("/", &p) == 0 && strcmp(p, "/") == 0, "normalize root");
	free(p);
	ok(launch_path_normalize("a/b", &p) == -EINVAL, "relative refused");
	ok(launch_path_normalize("/a/../b", &p) == -EINVAL, "dotdot refused");
	ok(launch_path_has_prefix("/a/b", "/a"), "prefix");
	ok(launch_path_has_prefix("/a", "/a/"), "prefix equal");
	ok(!launch_path_has_prefix("/ab", "/a"), "prefix component-wise");
	ok(launch_path_has_prefix("/x", "/"), "prefix root");
}

static void test_args(void)
{
	struct launch_config c;

	is_int(parse(&c, (const char *const[]){ "--workspace", "/w", "--", "echo", "hi", NULL }), 0, "minimal");
	is_str(c.workspace_dest, "/w", "dest defaults to workspace");
	is_str(c.cwd, "/w", "cwd defaults to dest");
	ok(c.mode == LAUNCH_MODE_OVERLAY && c.profile == LAUNCH_PROFILE_STRICT, "defaults");
	ok(c.memory == LAUNCH_DEFAULT_MEMORY && c.pids == LAUNCH_DEFAULT_PIDS, "limit defaults");
	is_str(c.argv[1], "hi", "command");
	launch_config_free(&c);

	is_int(parse(&c, (const char *const[]){ "--workspace", "/w", "--mode", "ro", "--profile", "balanced",
						 "--uid", "12345", "--gid", "12346", "--memory", "64M", "--pids",
						 "10", "--timeout", "1.5", "--env-deny", "A,B", "--env-deny", "C",
						 "--setenv", "K=V", "--", "true", NULL }),
	       0, "many options");
	ok(c.mode == LAUNCH_MODE_RO && c.profile == LAUNCH_PROFILE_BALANCED, "mode and profile");
	ok(c.uid_explicit && c.uid == 12345 && c.gid == 12346, "explicit ids");
	ok(c.memory == 64 << 20 && c.pids == 10 && c.timeout == 1.5, "limits");
	is_int(strv_length(c.env_deny), 3, "env-deny split and repeated");
	launch_config_free(&c);

	ok(parse(&c, (const char *const[]){ "--workspace", "w", "--", "true", NULL }) < 0, "relative workspace");
	launch_config_free(&c);
	ok(parse(&c, (const char *const[]){ "--bogus", "--", "true", NULL }) < 0, "unknown option");
	launch_config_free(&c);
	ok(parse(&c, (const char *const[]){ "--workspace", "/w", NULL }) < 0, "no command");
	launch_config_free(&c);
	ok(parse(&c, (const char *const[]){ "--workspace", "/w", "true", NULL }) < 0, "command without --");
	launch_config_free(&c);
	ok(parse(&c, (const char *const[]){ "--workspace", "/w", "--uid", "5", "--", "true", NULL }) < 0,
	   "uid without gid");
	launch_config_free(&c);
	ok(parse(&c, (const char *const[]){ "--workspace", "/w", "--uid", "0", "--gid", "0", "--", "x", NULL }) < 0,
	   "uid 0 refused");
	launch_config_free(&c);
	ok(parse(&c, (const char *const[]){ "--workspace", "/w", "--mode", "rw", "--view", "/v", "--", "x", NULL }) < 0,
	   "view needs overlay");
	launch_config_free(&c);
	ok(parse(&c, (const char *const[]){ "--workspace", "/w", "--uid-pool", "9-3", "--", "x", NULL }) < 0,
	   "bad pool");
	launch_config_free(&c);
	ok(parse(&c, (const char *const[]){ "--workspace", "/w", "--timeout", NULL }) < 0, "missing value");
	launch_config_free(&c);
}

static void test_env(void)
{
	struct launch_config c;
	char *host[] = { "PATH=/usr/bin", "OPENAI_API_KEY=s", "github_token=s", "AWS_REGION=x", "Db_Password=s",
			 "LD_PRELOAD=/x.so", "KUBE_CONFIG=x", "HOME=/root", "LANG=C", "ALIYUN_X=1", "K8S_Y=1",
			 "MY_SECRET=1", "SAFE=1", "PG=postgres://app:pw@db/app", NULL };
	char **env = NULL;

	ok(launch_env_default_denied("FOO_API_KEY", NULL) && launch_env_default_denied("foo_api_key", NULL), "glob case-insensitive");
	ok(launch_env_default_denied("STRIPE_SECRET_KEY", "x") && launch_env_default_denied("GH_PAT", "x") &&
	   launch_env_default_denied("SSH_AUTH_SOCK", "/tmp/s") && launch_env_default_denied("DATABASE_URL", "x") &&
	   launch_env_default_denied("OPENAI_API_KEYS", "x") && launch_env_default_denied("GITHUB_TOKEN_2", "x") &&
	   launch_env_default_denied("GOOGLE_APPLICATION_CREDENTIALS", "/k.json") &&
	   launch_env_default_denied("NPM_CONFIG__AUTH", "x") && launch_env_default_denied("SENTRY_DSN", "x") &&
	   launch_env_default_denied("KUBECONFIG", "/k") && launch_env_default_denied("AZURE_CLIENT_ID", "x"),
	   "credentials by their usual names");
	ok(launch_env_default_denied("CACHE", "redis://:hunter2@cache:6379/0") &&
	   launch_env_default_denied("MIRRORS", "http://a/ ftp://u:p@b/x") &&
	   !launch_env_default_denied("HTTP_PROXY", "http://proxy:3128") &&
	   !launch_env_default_denied("REPO", "https://git@example.org/x:y@z"), "a URL with a password, whatever the name");
	ok(!launch_env_default_denied("PATH", "/usr/bin") && !launch_env_default_denied("LANG", "C.UTF-8") &&
	   !launch_env_default_denied("TOKENIZERS_PARALLELISM", "false") && !launch_env_default_denied("TERM", "xterm") &&
	   !launch_env_default_denied("MONKEY", "1") && !launch_env_default_denied("PWD", "/w"),
	   "harmless names pass");

	launch_config_init(&c);
	ok(launch_env_build(&c, host, "/h", &env) == 0, "build default");
	ok(strv_contains(env, "PATH=/usr/bin") && strv_contains(env, "LANG=C") && strv_contains(env, "SAFE=1"), "harmless kept");
	ok(!strv_contains(env, "OPENAI_API_KEY=s") && !strv_contains(env, "github_token=s") && !strv_contains(env, "AWS_REGION=x") &&
	   !strv_contains(env, "Db_Password=s") && !strv_contains(env, "LD_PRELOAD=/x.so") && !strv_contains(env, "KUBE_CONFIG=x") &&
	   !strv_contains(env, "ALIYUN_X=1") && !strv_contains(env, "K8S_Y=1") && !strv_contains(env, "MY_SECRET=1") &&
	   !strv_contains(env, "PG=postgres://app:pw@db/app"),
	   "secrets dropped");
	ok(strv_contains(env, "HOME=/h/home") && strv_contains(env, "TMPDIR=/h/tmp") && strv_contains(env, "XDG_CONFIG_HOME=/h/config") &&
	   strv_contains(env, "XDG_CACHE_HOME=/h/cache") && strv_contains(env, "XDG_STATE_HOME=/h/state") &&
	   strv_contains(env, "XDG_DATA_HOME=/h/data") && !strv_contains(env, "HOME=/root"), "dirs redirected");
	strv_free(env);
	env = NULL;

	strv_push(&c.env_deny, "SAFE");
	strv_push(&c.setenv, "NEW=1");
	strv_push(&c.setenv, "LANG=fr");
	ok(launch_env_build(&c, host, NULL, &env) == 0, "build with deny and setenv");
	ok(!strv_contains(env, "SAFE=1") && strv_contains(env, "NEW=1") && strv_contains(env, "LANG=fr") && !strv_contains(env, "LANG=C"),
	   "deny and setenv applied");
	strv_free(env);
	env = NULL;

	c.env_allow_mode = true;
	strv_push(&c.env_allow, "PATH");
	strv_push(&c.env_allow, "aws_*");
	ok(launch_env_build(&c, host, NULL, &env) == 0, "build allow mode");
	ok(strv_contains(env, "PATH=/usr/bin") && strv_contains(env, "AWS_REGION=x") && !strv_contains(env, "SAFE=1") &&
	   !strv_contains(env, "HOME=/root"), "allow mode passes only the listed names");
	strv_free(env);
	launch_config_free(&c);
}

static void test_expose(const char *tmp)
{
	struct launch_config c;
	struct launch_expose e;
	char path[512], link[512];
	const char *bad = NULL;

	ok(launch_expose_parse("/a", &e) == 0 && !strcmp(e.src, "/a") && !strcmp(e.dest, "/a") && !e.rw, "expose plain");
	free(e.src), free(e.dest);
	ok(launch_expose_parse("/a:/b:rw", &e) == 0 && !strcmp(e.dest, "/b") && e.rw, "expose dest rw");
	free(e.src), free(e.dest);
	ok(launch_expose_parse("/a:ro", &e) == 0 && !strcmp(e.dest, "/a") && !e.rw, "expose ro");
	free(e.src), free(e.dest);
	ok(launch_expose_parse("a:/b", &e) == -EINVAL, "expose relative");
	ok(launch_expose_parse("/a:/b:/c", &e) == -EINVAL, "expose three paths");
	ok(launch_expose_parse("/a:/b:rw:x", &e) == -EINVAL, "expose four parts");

	snprintf(path, sizeof(path), "%s/allowed", tmp);
	mkdir(path, 0755);
	snprintf(link, sizeof(link), "%s/allowed/out", tmp);
	symlink("/etc", link);

	ok(parse(&c, (const char *const[]){ "--workspace", "/w", "--allow", path, "--expose", path,
					    "--expose", "/etc:/x", "--", "true", NULL }) == 0, "parse exposes");
	ok(launch_expose_resolve(&c, &bad) == -EPERM && bad && !strcmp(bad, "/etc"), "outside the allowlist");
	launch_config_free(&c);

	ok(parse(&c, (const char *const[]){ "--workspace", "/w", "--allow", path, "--expose", link, "--", "true",
					    NULL }) == 0, "parse symlink expose");
	ok(launch_expose_resolve(&c, &bad) == -EPERM, "symlink out of the allowlist refused");
	launch_config_free(&c);

	{
		char a[600], b[600];

		snprintf(a, sizeof(a), "%s:/d:ro", path);
		snprintf(b, sizeof(b), "%s:/d:rw", path);
		ok(parse(&c, (const char *const[]){ "--workspace", "/w", "--allow", path, "--expose", a, "--expose", b,
						    "--", "true", NULL }) == 0, "parse duplicate dest");
		ok(launch_expose_resolve(&c, &bad) == 0 && c.n_exposes == 1 && c.exposes[0].rw &&
		   c.exposes[0].fd >= 0, "last rule for a dest wins, source pinned");
		launch_config_free(&c);
	}
}

static void test_uid_pool(const char *tmp)
{
	struct launch_uid_lease a = LAUNCH_UID_LEASE_INIT, b = LAUNCH_UID_LEASE_INIT, c = LAUNCH_UID_LEASE_INIT;
	char dir[512];
	uid_t lo, hi;

	snprintf(dir, sizeof(dir), "%s/uids", tmp);
	ok(launch_parse_uid_range("10-11", &lo, &hi) == 0 && lo == 10 && hi == 11, "range");
	ok(launch_parse_uid_range("0-5", &lo, &hi) < 0 && launch_parse_uid_range("5", &lo, &hi) < 0, "bad ranges");

	is_int(launch_uid_acquire(dir, 20000, 20001, 0, &a), 0, "first uid");
	is_int(launch_uid_acquire(dir, 20000, 20001, 0, &b), 0, "second uid");
	ok(a.uid != b.uid && a.gid == a.uid, "distinct uids, gid = uid");
	ok(launch_uid_is_held(dir, a.uid), "held");
	is_int(launch_uid_acquire(dir, 20000, 20001, 100, &c), -EAGAIN, "exhausted after a bounded wait");
	is_int(launch_uid_acquire_one(dir, a.uid, &c), -EBUSY, "taken uid is busy");
	launch_uid_release(&a);
	ok(a.lock_fd == -1 && !launch_uid_is_held(dir, b.uid == 20000 ? 20001 : 20000), "released");
	is_int(launch_uid_acquire(dir, 20000, 20001, 0, &c), 0, "reacquire after release");
	launch_uid_release(&b);
	launch_uid_release(&c);
	launch_uid_release(&c);
	ok(launch_uid_acquire("relative", 1, 2, 0, &a) == -EINVAL, "relative dir refused");
	chmod(dir, 0777);
	ok(launch_uid_acquire(dir, 20000, 20001, 0, &a) == -EPERM, "world-writable pool dir refused");
}

static void test_bwrap_args(void)
{
	struct launch_config c;
	struct launch_plan p = { .ws_source = "/src", .home_root = "/h", .helper = "/x/draftbox-exec",
				 .seccomp_fd = 7, .status_fd = 8, .uid = 10001, .gid = 10001, .ws_fd = -1 };
	char **args = NULL;

	parse(&c, (const char *const[]){ "--workspace", "/w", "--workspace-dest", "/tmp/a/w", "--mode", "ro",
					 "--state-dir", "/", "--", "cmd", "arg", NULL });
	ok(launch_bwrap_args(&c, &p, &args) == 0, "bwrap args");
	ok(strv_contains(args, "--unshare-pid") && strv_contains(args, "--unshare-ipc") && strv_contains(args, "--unshare-uts") &&
	   strv_contains(args, "--unshare-cgroup") && strv_contains(args, "--new-session") &&
	   strv_contains(args, "--die-with-parent"), "namespaces");
	ok(!strv_contains(args, "--unshare-net"), "no --unshare-net: the launcher's child makes the netns (sandbox-sys.c)");
	ok(!strv_contains(args, "--unshare-user"), "no user namespace (root bwrap, drop in the helper)");
	ok(strv_has_pair(args, "--tmpfs", "/run") && strv_has_pair(args, "--tmpfs", "/tmp") &&
	   strv_has_pair(args, "--size", "268435456"), "tmpfs /run and sized /tmp");
	ok(strv_has_pair(args, "--dir", "/tmp/a"), "parents of the workspace dest made 0755");
	ok(strv_has_pair(args, "--ro-bind", "/src"), "ro workspace");
	ok(strv_has_pair(args, "--seccomp", "7"), "seccomp fd");
	ok(strv_has_pair(args, "--", LAUNCH_HELPER_DEST) && strv_has_pair(args, "10001", "10001") &&
	   strv_has_pair(args, "cmd", "arg"), "helper and command");
	strv_free(args);
	args = NULL;
	launch_config_free(&c);

	/* hides as launch_hide_resolve() leaves them: another session's workspace, then /h over it */
	parse(&c, (const char *const[]){ "--workspace", "/w", "--workspace-dest", "/h/u/a", "--hide", "/h/u/b",
					 "--hide", "/h", "--state-dir", "/", "--", "x", NULL });
	ok(launch_bwrap_args(&c, &p, &args) == 0, "args with hides");
	{
		ssize_t tmpfs_h = pair_index(args, "--tmpfs", "/h"), dir_u = -1;

		/* the last --dir /h/u: the one made on /h's tmpfs, after the one for /h/u/b */
		for (ssize_t i = 0; args[i] && args[i + 1]; i++)
			if (strcmp(args[i], "--dir") == 0 && strcmp(args[i + 1], "/h/u") == 0)
				dir_u = i;
		ok(pair_index(args, "--tmpfs", "/h/u/b") >= 0 && tmpfs_h > pair_index(args, "--tmpfs", "/h/u/b"),
		   "hidden dirs in order");
		ok(dir_u > tmpfs_h && pair_index(args, "--bind", "/src") > dir_u,
		   "parents made again on a tmpfs that covered them, before the workspace bind");
	}
	strv_free(args);
	args = NULL;
	launch_config_free(&c);

	parse(&c, (const char *const[]){ "--workspace", "/w", "--profile", "balanced", "--share-net", "--", "x", NULL });
	ok(launch_bwrap_args(&c, &p, &args) == 0, "balanced args");
	ok(strv_has_pair(args, "--bind", "/tmp") && !strv_contains(args, "--unshare-net") &&
	   strv_has_pair(args, "--bind", "/src"), "balanced binds /tmp, share-net keeps the network");
	strv_free(args);
	args = NULL;
	p.ws_fd = 5;
	ok(launch_bwrap_args(&c, &p, &args) == 0 && strv_has_pair(args, "--bind-fd", "5") &&
	   !strv_has_pair(args, "--bind", "/src"), "workspace bound by its pinned fd");
	strv_free(args);
	launch_config_free(&c);
}

static void test_seccomp(const char *tmp)
{
	char dir[512], name[1024];
	int a, b;
	struct stat st;

	a = launch_seccomp_compile_fd(LAUNCH_PROFILE_STRICT, false);
	b = launch_seccomp_compile_fd(LAUNCH_PROFILE_BALANCED, true);
	ok(a >= 0 && b >= 0, "filters compile");
	ok(fstat(a, &st) == 0 && st.st_size > 0 && st.st_size % 8 == 0, "exported BPF");
	close(a);
	close(b);

	snprintf(dir, sizeof(dir), "%s/seccomp", tmp);
	a = launch_seccomp_fd(dir, LAUNCH_PROFILE_STRICT, false);
	ok(a >= 0, "compiled and cached");
	ok(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700, "cache dir 0700");
	b = launch_seccomp_fd(dir, LAUNCH_PROFILE_STRICT, false);
	ok(b >= 0 && lseek(b, 0, SEEK_CUR) == 32, "served from the cache, at the program");
	close(a);
	close(b);
	/* a corrupted cache entry is recompiled, never used */
	{
		DIR *d = opendir(dir);
		struct dirent *de;

		while (d && (de = readdir(d)))
			if (strstr(de->d_name, ".bpf")) {
				int fd;

				snprintf(name, sizeof(name), "%s/%s", dir, de->d_name);
				fd = open(name, O_WRONLY);
				if (pwrite(fd, "XXXX", 4, 40) != 4)
					printf("# cannot corrupt %s\n", name);
				close(fd);
			}
		if (d)
			closedir(d);
	}
	a = launch_seccomp_fd(dir, LAUNCH_PROFILE_STRICT, false);
	ok(a >= 0 && lseek(a, 0, SEEK_CUR) == 0, "corrupt cache entry ignored");
	close(a);
	chmod(dir, 0755);
	a = launch_seccomp_fd(dir, LAUNCH_PROFILE_STRICT, false);
	ok(a >= 0 && lseek(a, 0, SEEK_CUR) == 0, "cache dir open to others is not trusted");
	close(a);
}

int main(void)
{
	char tmp[] = "/tmp/test-launch-XXXXXX";
	char cmd[600];

	if (!mkdtemp(tmp))
		return 1;
	test_sizes_and_paths();
	test_args();
	test_env();
	test_expose(tmp);
	test_uid_pool(tmp);
	test_bwrap_args();
	test_seccomp(tmp);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", tmp);
	return tap_done();
}
