# SPDX-License-Identifier: LGPL-2.1-or-later
"""Real programs on a draftfs mount: git, make, tar, sqlite.

git clones into the view, reports a clean status, commits, and fsck passes
(also for a repository that lives in the lower layer); make builds a small
C project from the lower layer, rebuilds only what a touch made stale and
then has nothing to do; tar extracts into the view exactly what it extracts
into a plain directory; sqlite runs with a rollback journal and with WAL.
After unmounting, the kernel's view of the upper agrees (git fsck, the
built binary, the tar tree).
"""
import os
import shutil
import sqlite3
import subprocess
import time

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401


def sh(cmd, cwd, env=None, check=True):
    e = dict(os.environ, HOME=cwd, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
             GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com", LC_ALL="C")
    e.update(env or {})
    r = subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, timeout=120, shell=isinstance(cmd, str))
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} in '{cwd}': rc {r.returncode}\n{r.stdout.decode()[-2000:]}"
                             f"\n{r.stderr.decode()[-2000:]}")
    return r.stdout.decode()


def need(*progs):
    for p in progs:
        if not shutil.which(p):
            pytest.skip(f"'{p}' is not installed")


def make_repo(path, nfiles=40):
    os.makedirs(path)
    sh(["git", "init", "-q", "-b", "main"], path)
    for i in range(nfiles):
        d = os.path.join(path, f"dir{i % 5}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"file{i}.txt"), "w") as f:
            f.write(f"line {i}\n" * (i + 1))
    os.symlink("dir0/file0.txt", os.path.join(path, "link"))
    with open(os.path.join(path, "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho run\n")
    os.chmod(os.path.join(path, "run.sh"), 0o755)
    sh(["git", "add", "-A"], path)
    sh(["git", "commit", "-q", "-m", "initial"], path)
    with open(os.path.join(path, "dir1", "file1.txt"), "a") as f:
        f.write("second\n")
    sh(["git", "commit", "-q", "-am", "second"], path)


def test_git(fsenv):
    fsutil.require_impl()
    need("git")
    src = os.path.join(fsenv.dir("src"), "repo")
    make_repo(src)
    lower = fsenv.dir("lower")
    make_repo(os.path.join(lower, "inlower"))
    m = fsenv.mount_impl([lower], name="impl")
    clone = os.path.join(m.path, "clone")
    sh(["git", "clone", "-q", src, clone], m.path)
    assert sh(["git", "status", "--porcelain"], clone) == ""
    with open(os.path.join(clone, "dir2", "file2.txt"), "a") as f:
        f.write("changed in the view\n")
    os.rename(os.path.join(clone, "dir3"), os.path.join(clone, "dir3-renamed"))
    assert sh(["git", "status", "--porcelain"], clone) != ""
    sh(["git", "add", "-A"], clone)
    sh(["git", "commit", "-q", "-m", "in the view"], clone)
    assert sh(["git", "status", "--porcelain"], clone) == ""
    sh(["git", "fsck", "--strict", "--no-progress"], clone)
    sh(["git", "gc", "-q"], clone)
    sh(["git", "fsck", "--strict", "--no-progress"], clone)
    # a repository in the lower layer: clean status, then a commit copies up what it touches
    inlower = os.path.join(m.path, "inlower")
    assert sh(["git", "status", "--porcelain"], inlower) == ""
    with open(os.path.join(inlower, "dir4", "file4.txt"), "w") as f:
        f.write("rewritten\n")
    sh(["git", "commit", "-q", "-am", "on lower"], inlower)
    assert sh(["git", "status", "--porcelain"], inlower) == ""
    sh(["git", "fsck", "--strict", "--no-progress"], inlower)
    head = sh(["git", "rev-parse", "HEAD"], inlower)
    assert sh(["git", "rev-parse", "HEAD"], os.path.join(lower, "inlower")) != head, "the lower repo changed"
    m.stop()
    v = fsenv.mount("kernel", [lower], upper=m.upper, name="verify", opts=fsutil.KERNEL_VERIFY_OPTS)
    sh(["git", "fsck", "--strict", "--no-progress"], os.path.join(v.path, "clone"))
    assert sh(["git", "status", "--porcelain"], os.path.join(v.path, "clone")) == ""
    assert sh(["git", "rev-parse", "HEAD"], os.path.join(v.path, "inlower")) == head


C_FILES = {
    "main.c": '#include <stdio.h>\n#include "lib.h"\nint main(void) { printf("%d\\n", add(2, 3)); return 0; }\n',
    "lib.c": '#include "lib.h"\nint add(int a, int b) { return a + b; }\n',
    "lib.h": "int add(int a, int b);\n",
    "Makefile": "CFLAGS = -O0\nprog: main.o lib.o\n\t$(CC) -o $@ main.o lib.o\n"
                "main.o: main.c lib.h\nlib.o: lib.c lib.h\nclean:\n\trm -f prog *.o\n",
}


def test_make(fsenv):
    fsutil.require_impl()
    need("make", "cc")
    lower = fsenv.dir("lower")
    os.makedirs(os.path.join(lower, "proj"))
    old = time.time() - 3600
    for n, text in C_FILES.items():
        p = os.path.join(lower, "proj", n)
        with open(p, "w") as f:
            f.write(text)
        os.utime(p, (old, old))
    m = fsenv.mount_impl([lower], name="impl")
    proj = os.path.join(m.path, "proj")
    sh(["make", "-j2"], proj)
    assert sh(["./prog"], proj) == "5\n"
    assert subprocess.run(["make", "-q"], cwd=proj).returncode == 0, "make thinks a fresh build is stale"
    with open(os.path.join(proj, "lib.c"), "w") as f:
        f.write('#include "lib.h"\nint add(int a, int b) { return a * b; }\n')
    out = sh(["make"], proj)
    assert "-o lib.o" in out and "-o main.o" not in out, f"rebuilt the wrong things:\n{out}"
    assert sh(["./prog"], proj) == "6\n"
    assert subprocess.run(["make", "-q"], cwd=proj).returncode == 0, "make still sees stale targets"
    os.utime(os.path.join(proj, "lib.h"))
    out = sh(["make"], proj)
    assert "-o lib.o" in out and "-o main.o" in out, f"touching lib.h must rebuild both:\n{out}"
    sh(["make", "clean"], proj)
    assert sorted(os.listdir(proj)) == sorted(C_FILES)
    sh(["make", "-j2"], proj)
    m.stop()
    v = fsenv.mount("kernel", [lower], upper=m.upper, name="verify", opts=fsutil.KERNEL_VERIFY_OPTS)
    assert sh(["./prog"], os.path.join(v.path, "proj")) == "6\n"
    assert subprocess.run(["make", "-q"], cwd=os.path.join(v.path, "proj")).returncode == 0


def test_tar(fsenv):
    fsutil.require_impl()
    need("tar")
    src = fsenv.dir("src")
    tree = os.path.join(src, "tree")
    os.makedirs(os.path.join(tree, "d", "e"))
    for i in range(30):
        with open(os.path.join(tree, "d" if i % 2 else "d/e", f"f{i}"), "wb") as f:
            f.write(os.urandom(i * 997))
    os.link(os.path.join(tree, "d", "f1"), os.path.join(tree, "hard"))
    os.symlink("d/f1", os.path.join(tree, "sym"))
    os.symlink("/etc/passwd", os.path.join(tree, "abs"))
    os.mkfifo(os.path.join(tree, "fifo"))
    os.chmod(os.path.join(tree, "d", "f3"), 0o4755)
    os.setxattr(os.path.join(tree, "d", "f5"), "user.tag", b"value")
    os.utime(os.path.join(tree, "d", "f7"), ns=(10 ** 9, 123456789 * 10 ** 9))
    tarball = os.path.join(src, "t.tar")
    sh(["tar", "--xattrs", "-cf", tarball, "-C", src, "tree"], src)
    plain = fsenv.dir("plain")
    sh(["tar", "--xattrs", "--xattrs-include=user.*", "-xpf", tarball, "-C", plain], plain)
    lower = fsenv.dir("lower")
    m = fsenv.mount_impl([lower], name="impl")
    sh(["tar", "--xattrs", "--xattrs-include=user.*", "-xpf", tarball, "-C", m.path], m.path)
    want = fsutil.tree_snapshot(os.path.join(plain, "tree"), mtime=True)
    got = fsutil.tree_snapshot(os.path.join(m.path, "tree"), mtime=True)
    ign = (lambda p, k: k == "mtime" and os.path.isdir(os.path.join(plain, "tree", p)))
    diffs = fsutil.diff_snapshots(want, got, "plain dir", "view", ignore=ign)
    assert not diffs, "tar extracted differently into the view:\n" + "\n".join(diffs)
    # tar reads it back the same: same member list with modes, sizes and link targets
    def listing(d):
        out = sh(["tar", "--sort=name", "-cvvf", "/dev/null", "--numeric-owner", "."], d)
        return [" ".join(line.split()[:3] + line.split()[5:]) for line in out.splitlines()]
    assert listing(os.path.join(m.path, "tree")) == listing(os.path.join(plain, "tree"))
    m.stop()
    v = fsenv.mount("kernel", [lower], upper=m.upper, name="verify", opts=fsutil.KERNEL_VERIFY_OPTS)
    got = fsutil.tree_snapshot(os.path.join(v.path, "tree"), mtime=True)
    diffs = fsutil.diff_snapshots(want, got, "plain dir", "kernel over upper", ignore=ign)
    assert not diffs, "the kernel reads the extracted tree differently:\n" + "\n".join(diffs)


@pytest.mark.parametrize("journal", ["DELETE", "WAL"])
def test_sqlite(fsenv, journal):
    fsutil.require_impl()
    lower = fsenv.dir("lower")
    seed_db = os.path.join(lower, "seed.db")
    c = sqlite3.connect(seed_db)
    c.execute("create table t (k integer primary key, v text)")
    c.executemany("insert into t values (?, ?)", [(i, f"lower {i}") for i in range(500)])
    c.commit()
    c.close()
    m = fsenv.mount_impl([lower], name="impl")
    for name in ("new.db", "seed.db"):  # a new database and one copied up from lower
        path = os.path.join(m.path, name)
        c = sqlite3.connect(path)
        assert c.execute(f"pragma journal_mode={journal}").fetchone()[0].upper() == journal
        c.execute("create table if not exists t (k integer primary key, v text)")
        for batch in range(20):
            with c:
                c.executemany("insert or replace into t values (?, ?)",
                              [(batch * 100 + i, f"v{batch}-{i}" * 10) for i in range(100)])
        with c:
            c.execute("delete from t where k % 7 = 0")
        try:
            with c:
                c.execute("insert into t values (1, 'dup')")  # fails: rolls back
        except sqlite3.IntegrityError:
            pass
        assert c.execute("pragma integrity_check").fetchone()[0] == "ok"
        n = c.execute("select count(*) from t").fetchone()[0]
        c.close()
        c = sqlite3.connect(path)
        assert c.execute("pragma integrity_check").fetchone()[0] == "ok"
        assert c.execute("select count(*) from t").fetchone()[0] == n
        assert n == len([k for k in range(2000) if k % 7]), f"{name}: {n} rows"
        c.close()
    m.stop()
    v = fsenv.mount("kernel", [lower], upper=m.upper, name="verify", opts=fsutil.KERNEL_VERIFY_OPTS)
    for name in ("new.db", "seed.db"):
        c = sqlite3.connect(os.path.join(v.path, name))
        assert c.execute("pragma integrity_check").fetchone()[0] == "ok"
        c.close()
