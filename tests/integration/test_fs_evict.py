# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftfs with a tiny fd budget: node fds are evicted and re-opened by name.

The daemon runs with RLIMIT_NOFILE 320 and without CAP_SYS_RESOURCE (so it
cannot raise the limit), which leaves 64 fds for nodes: walking, reading,
changing and renaming a tree of ~1500 entries must then close and re-open
node fds all the time, and the view must stay exactly what a plain copy of
the tree shows (content, modes, st_ino stable across walks), with the
daemon's fd count bounded. Also with data copy-ups running in parallel
threads while walks evict and re-resolve their nodes.
"""
import os
import shutil
import stat
import subprocess
import threading
import traceback

import pytest

from fsutil import (IMPL, Mount, diff_snapshots, draftfs_bin, fsenv, require_impl,  # noqa: F401
                    tree_snapshot, wait_mounted, write_file)

NOFILE = 320


class LimitedMount(Mount):
    """A draftfs mount whose daemon has a small fd limit it cannot raise."""

    def start(self):
        os.makedirs(self.path, exist_ok=True)
        self.stderr_path = self.path.rstrip("/") + ".stderr"
        with open(self.stderr_path, "wb") as errf:
            self.proc = subprocess.Popen(
                ["prlimit", "--nofile=%d:%d" % (NOFILE, NOFILE), "setpriv", "--bounding-set=-sys_resource",
                 draftfs_bin(), "-f", "-o", self.option_string(), self.path],
                stdin=subprocess.DEVNULL, stdout=errf, stderr=errf)
        wait_mounted(self.path, self.proc)
        return self


def make_tree(root):
    for d in range(24):
        sub = os.path.join(root, "d%02d" % d, "sub")
        os.makedirs(sub)
        for f in range(30):
            write_file(os.path.join(root, "d%02d" % d, "f%02d" % f), b"%d/%d\n" % (d, f) * (f + 1),
                       0o600 if f % 3 == 0 else 0o644)
        for f in range(25):
            write_file(os.path.join(sub, "g%02d" % f), b"sub %d/%d\n" % (d, f))
        os.symlink("f01", os.path.join(root, "d%02d" % d, "link"))


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


@pytest.fixture
def limited(fsenv):  # noqa: F811
    require_impl()
    if IMPL != "draftfs":
        pytest.skip("the fd budget is a draftfs mechanism")
    if not shutil.which("prlimit") or not shutil.which("setpriv"):
        pytest.skip("needs prlimit and setpriv (util-linux)")
    lower = fsenv.dir("lower")
    make_tree(lower)
    plain = os.path.join(fsenv.base, "plain")
    shutil.copytree(lower, plain, symlinks=True)
    m = LimitedMount("draftfs", [lower], fsenv.dir("upper"), fsenv.dir("work"), os.path.join(fsenv.base, "mnt"))
    fsenv.mounts.append(m)
    m.start()
    with open("/proc/%d/limits" % m.pid) as f:
        limit = [ln for ln in f if ln.startswith("Max open files")][0].split()[3]
    if int(limit) != NOFILE:
        pytest.skip("the daemon raised its fd limit to %s (has CAP_SYS_RESOURCE in a user namespace?)" % limit)
    return m, plain


def test_walks_and_changes_under_eviction(limited):
    m, plain = limited
    mnt = m.path
    first = tree_snapshot(mnt, ino=True)
    assert diff_snapshots(tree_snapshot(plain), first, "plain", "draftfs") == []
    assert fd_count(m.pid) < NOFILE
    # a second walk re-opens evicted nodes by name: same view, same inode numbers
    second = tree_snapshot(mnt, ino=True)
    assert second == first

    # changes on nodes whose fds were evicted long ago: copy-up, chmod, rename of a dir with cached children
    for root in (mnt, plain):
        with open(os.path.join(root, "d00", "f05"), "ab") as f:
            f.write(b"appended\n")
        os.chmod(os.path.join(root, "d01", "sub", "g03"), 0o640)
        os.rename(os.path.join(root, "d02"), os.path.join(root, "d02-moved"))
        os.unlink(os.path.join(root, "d03", "f07"))
        os.rename(os.path.join(root, "d04", "f00"), os.path.join(root, "d05", "sub", "from-d04"))
    after = tree_snapshot(mnt, ino=True)
    assert diff_snapshots(tree_snapshot(plain), after, "plain", "draftfs") == []
    assert after["d00/f05"]["ino"] == first["d00/f05"]["ino"], "st_ino changed on copy-up"
    assert after["d02-moved/sub/g01"]["ino"] == first["d02/sub/g01"]["ino"]
    assert fd_count(m.pid) < NOFILE


def test_open_files_survive_eviction_and_unlink(limited):
    m, _ = limited
    mnt = m.path
    new = os.path.join(mnt, "d07", "new")
    write_file(new, b"upper file\n")
    fds = {}
    try:
        for path, data in ((os.path.join(mnt, "d06", "f10"), b"6/10\n" * 11), (new, b"upper file\n")):
            fds[path] = (os.open(path, os.O_RDONLY), data)
        tree_snapshot(mnt)  # evicts the fds of the open files' nodes
        for path, (fd, data) in fds.items():
            os.unlink(path)
            st = os.fstat(fd)
            assert st.st_size == len(data), path
            assert os.pread(fd, len(data), 0) == data, path
            assert not os.path.exists(path)
    finally:
        for fd, _ in fds.values():
            os.close(fd)


def test_changes_through_fds_of_removed_objects(limited):
    """A chmod, an xattr change, a utime or a truncate through an fd kept open on a file after its unlink works
    as on a local filesystem, for a lower file too: its copy-up has no name left to go to in upper, so it is
    made in work/ and unlinked there at once. Also across evictions, and for a removed directory. The view
    and the upper keep only the whiteouts; nothing of the copies is left once the fds are closed."""
    m, _ = limited
    mnt = m.path
    paths = {"opath": os.path.join(mnt, "d09", "f04"), "rdonly": os.path.join(mnt, "d09", "f05"),
             "dir": os.path.join(mnt, "d10", "sub")}
    for g in os.listdir(paths["dir"]):
        os.unlink(os.path.join(paths["dir"], g))
    fds = {"opath": os.open(paths["opath"], os.O_PATH), "rdonly": os.open(paths["rdonly"], os.O_RDONLY),
           "dir": os.open(paths["dir"], os.O_PATH | os.O_DIRECTORY)}
    try:
        os.unlink(paths["opath"])
        os.unlink(paths["rdonly"])
        os.rmdir(paths["dir"])
        tree_snapshot(mnt)  # evicts what it can
        p = "/proc/self/fd/%d" % fds["opath"]
        os.chmod(p, 0o600)
        os.setxattr(p, "user.k", b"v")
        os.utime(p, ns=(10**9, 2 * 10**9))
        assert os.stat(fds["opath"]).st_mtime_ns == 2 * 10**9
        os.truncate(p, 3)
        st = os.stat(fds["opath"])
        assert (stat.S_IMODE(st.st_mode), st.st_size, st.st_nlink) == (0o600, 3, 0)
        assert os.getxattr(p, "user.k") == b"v"
        os.fchmod(fds["rdonly"], 0o604)
        st = os.fstat(fds["rdonly"])
        assert (stat.S_IMODE(st.st_mode), st.st_nlink) == (0o604, 0)
        assert os.pread(fds["rdonly"], 100, 0) == b"9/5\n" * 6
        os.chmod("/proc/self/fd/%d" % fds["dir"], 0o701)
        assert stat.S_IMODE(os.stat(fds["dir"]).st_mode) == 0o701
        tree_snapshot(mnt)
        st = os.stat(fds["opath"])
        assert (stat.S_IMODE(st.st_mode), st.st_size) == (0o600, 3), "the change did not survive a walk"
    finally:
        for fd in fds.values():
            os.close(fd)
    for path in paths.values():
        assert not os.path.lexists(path)
        ust = os.lstat(os.path.join(m.upper, os.path.relpath(path, mnt)))
        assert stat.S_ISCHR(ust.st_mode) and ust.st_rdev == 0, path + ": not a whiteout in upper"
    assert fd_count(m.pid) < NOFILE
    m.stop()
    left = [e.name for e in os.scandir(os.path.join(m.work, "work")) if not stat.S_ISCHR(e.stat(follow_symlinks=False).st_mode)]
    assert left == [], "copies left in work/: %s" % left


def test_metacopies_under_eviction(limited):
    """A chmod of every file makes ~1500 metacopies, each a node with two fds (upper metadata, lower data):
    they must be evicted and re-opened like any node, also one unlinked while open (its upper by file handle,
    its data by its redirect)."""
    m, plain = limited
    mnt = m.path
    for root in (mnt, plain):
        for dirpath, _, files in os.walk(root):
            for f in files:
                p = os.path.join(dirpath, f)
                if not os.path.islink(p):
                    os.chmod(p, 0o640)
    upper_file = os.path.join(m.upper, "d08", "f11")
    assert os.getxattr(upper_file, "trusted.overlay.metacopy") == b""
    assert fd_count(m.pid) < NOFILE
    assert diff_snapshots(tree_snapshot(plain), tree_snapshot(mnt), "plain", "draftfs") == []
    path = os.path.join(mnt, "d08", "f11")
    data = b"8/11\n" * 12
    fd = os.open(path, os.O_RDONLY)
    try:
        tree_snapshot(mnt)  # evicts the open file's node
        os.unlink(path)
        tree_snapshot(mnt)  # and again, now that its name is gone
        st = os.fstat(fd)
        assert st.st_size == len(data) and stat.S_IMODE(st.st_mode) == 0o640
        assert os.pread(fd, len(data), 0) == data
    finally:
        os.close(fd)
    assert fd_count(m.pid) < NOFILE


def test_concurrent_copy_ups_under_eviction(limited):
    """Data copy-ups run in parallel (each copies its data without the copy-up lock) while chmods, renames and
    stat walks evict and re-resolve nodes: every file must end with its lower data and exactly what was
    appended, in the view and, once unmounted, in the upper as a plain file."""
    m, plain = limited
    mnt = m.path
    names = ["d%02d/f%02d" % (d, f) for d in range(24) for f in range(30)]
    errors, stop = [], threading.Event()

    def writer(k):
        try:
            for i in range(k, len(names), 6):
                for root in (mnt, plain):
                    p = os.path.join(root, names[i])
                    if i % 4 == 0:
                        os.chmod(p, 0o640)  # a metacopy first: its fill comes later
                    with open(p, "ab") as f:
                        f.write(b"+%d" % i)
                    if i % 5 == 0:
                        os.rename(p, p + ".r")
                        p += ".r"
                    with open(p, "ab") as f:
                        f.write(b"-")
        except Exception:  # reported below: a thread's exception would be lost
            errors.append(traceback.format_exc())

    def walker():
        while not stop.is_set():
            for dirpath, _, files in os.walk(mnt):
                for f in files:
                    try:
                        os.lstat(os.path.join(dirpath, f))
                    except FileNotFoundError:
                        pass

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    walkers = [threading.Thread(target=walker) for _ in range(2)]
    for t in threads + walkers:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    for t in walkers:
        t.join()
    assert not errors, errors
    assert diff_snapshots(tree_snapshot(plain), tree_snapshot(mnt), "plain", "draftfs") == []
    assert fd_count(m.pid) < NOFILE
    m.stop()
    for dirpath, _, files in os.walk(m.upper):
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.lstat(p)
            if not stat.S_ISREG(st.st_mode):
                continue
            rel = os.path.relpath(p, m.upper)
            xs = os.listxattr(p, follow_symlinks=False)
            # every file in upper was written: a full copy, finalized by the unmount
            assert "trusted.overlay.metacopy" not in xs and "trusted.draftbox.filled" not in xs, (rel, xs)
            with open(p, "rb") as fh, open(os.path.join(plain, rel), "rb") as fp:
                assert fh.read() == fp.read(), rel
