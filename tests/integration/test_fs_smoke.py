# SPDX-License-Identifier: LGPL-2.1-or-later
"""Quick checks of the draftfs core by its owner: daemon life cycle (background
start only once live, errors with exit 1, SIGTERM), the mount(8) helper path,
basic overlay semantics cross-checked with kernel overlayfs over the same
upper, copy-up records, ownership, ID mapping, st_ino stability and the
control-socket xattr. The big suites live in test_fs_*.py of the fs test owner.
"""
import errno
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import build_path

DRAFTFS = build_path("fs", "draftfs")


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def umount(path):
    if not is_mounted(path):
        return
    if subprocess.run(["umount", path], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", path], capture_output=True)


def wait_gone(pid, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def daemon_pid(mnt):
    """The pid of the draftfs process serving @mnt (by its command line)."""
    real = os.path.realpath(mnt)
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"draftfs") and real.encode() in argv:
            return int(p)
    return None


class Env:
    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="draftfs-smoke-", dir="/tmp")
        os.chmod(self.base, 0o755)  # other uids must reach the mountpoint
        self.mounts = []
        self.pids = []
        for d in ("l1", "l2", "u", "w", "m"):
            os.mkdir(self.p(d))

    def p(self, *parts):
        return os.path.join(self.base, *parts)

    def opts(self, extra=""):
        o = f"lowerdir={self.p('l1')}:{self.p('l2')},upperdir={self.p('u')},workdir={self.p('w')}"
        return o + ("," + extra if extra else "")

    def mount(self, extra="", mnt=None, env_extra=None):
        mnt = mnt or self.p("m")
        r = subprocess.run([DRAFTFS, "-o", self.opts(extra), mnt], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, **(env_extra or {})))
        assert r.returncode == 0, f"draftfs failed: {r.stderr}"
        assert is_mounted(mnt), "parent exited 0 before the mount was live"
        self.mounts.append(mnt)
        pid = daemon_pid(mnt)
        if pid:
            self.pids.append(pid)
        return mnt

    def kernel(self, mnt):
        o = (f"lowerdir={self.p('l1')}:{self.p('l2')},upperdir={self.p('u')},workdir={self.p('kw')},"
             "redirect_dir=on,index=off,metacopy=on,xino=off")
        os.makedirs(self.p("kw"), exist_ok=True)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", o, mnt], check=True)
        self.mounts.append(mnt)
        return mnt

    def unmount_all(self):
        for m in reversed(self.mounts):
            umount(m)
        for pid in self.pids:
            wait_gone(pid)
        self.mounts, self.pids = [], []

    def cleanup(self):
        self.unmount_all()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def env():
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("needs root and /dev/fuse")
    e = Env()
    yield e
    e.cleanup()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tree(root):
    """path -> (type, mode, uid, gid, size or target, content digest) with no symlink followed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in sorted(dirnames + filenames):
            full = os.path.join(dirpath, n)
            st = os.lstat(full)
            rel = os.path.relpath(full, root)
            if stat.S_ISREG(st.st_mode):
                extra = read(full)
            elif stat.S_ISLNK(st.st_mode):
                extra = os.readlink(full)
            else:
                extra = None
            out[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, extra)
    return out


def make_lowers(env):
    write(env.p("l1", "a"), b"hello\n")
    write(env.p("l2", "a"), b"hidden by l1\n")
    write(env.p("l2", "b"), b"from l2\n")
    os.makedirs(env.p("l1", "d", "sub"))
    os.makedirs(env.p("l2", "d", "deep"))
    write(env.p("l1", "d", "f"), b"x" * 100000)
    write(env.p("l2", "d", "deep", "g"), b"g\n")
    os.symlink("/etc/passwd", env.p("l1", "link"))
    os.chown(env.p("l1", "a"), 1234, 1234)


def test_mount_basic_and_kernel_agrees(env):
    make_lowers(env)
    m = env.mount()
    assert sorted(os.listdir(m)) == ["a", "b", "d", "link"]
    assert read(os.path.join(m, "a")) == b"hello\n"
    assert sorted(os.listdir(os.path.join(m, "d"))) == ["deep", "f", "sub"]
    assert os.readlink(os.path.join(m, "link")) == "/etc/passwd"
    ino_a = os.lstat(os.path.join(m, "a")).st_ino
    assert ino_a == os.lstat(env.p("l1", "a")).st_ino

    # copy-up keeps st_ino, owner and leaves an origin record
    with open(os.path.join(m, "a"), "ab") as f:
        f.write(b"more\n")
    st = os.lstat(os.path.join(m, "a"))
    assert st.st_ino == ino_a and st.st_uid == 1234
    assert read(env.p("u", "a")) == b"hello\nmore\n"
    assert read(env.p("l1", "a")) == b"hello\n", "lower must never change"
    origin = os.getxattr(env.p("u", "a"), "trusted.draftbox.origin").decode()
    assert origin.startswith(f"v1 layer=0 dev={os.lstat(env.p('l1', 'a')).st_dev} ino={ino_a} size=6 ")
    assert "trusted.draftbox.origin" not in os.listxattr(os.path.join(m, "a"))
    with pytest.raises(OSError) as e:
        os.setxattr(os.path.join(m, "a"), "trusted.overlay.opaque", b"y")
    assert e.value.errno == errno.EOPNOTSUPP

    # whiteouts, opaque dirs, rename of a lower dir, hard links
    os.unlink(os.path.join(m, "b"))
    assert not os.path.exists(os.path.join(m, "b"))
    wst = os.lstat(env.p("u", "b"))
    assert stat.S_ISCHR(wst.st_mode) and wst.st_rdev == 0
    os.rename(os.path.join(m, "d"), os.path.join(m, "d2"))
    assert sorted(os.listdir(os.path.join(m, "d2"))) == ["deep", "f", "sub"]
    assert read(os.path.join(m, "d2", "deep", "g")) == b"g\n"
    assert os.getxattr(env.p("u", "d2"), "trusted.overlay.opaque") == b"y"
    os.rmdir(os.path.join(m, "d2", "sub"))
    os.mkdir(os.path.join(m, "d"))
    assert os.listdir(os.path.join(m, "d")) == []
    os.link(os.path.join(m, "a"), os.path.join(m, "a2"))
    assert os.lstat(os.path.join(m, "a")).st_nlink == 2
    os.symlink("a", os.path.join(m, "s"))
    os.mkfifo(os.path.join(m, "fifo"))
    with pytest.raises(OSError) as e:
        os.mknod(os.path.join(m, "wh"), stat.S_IFCHR | 0o600, 0)
    assert e.value.errno == errno.EPERM
    with pytest.raises(OSError) as e:
        os.open(os.path.join(m, "x" * 256), os.O_CREAT | os.O_WRONLY)
    assert e.value.errno == errno.ENAMETOOLONG
    view = tree(m)
    env.unmount_all()

    # the kernel sees the same tree over our upper
    k = env.kernel(env.p("m"))
    assert tree(k) == view
    env.unmount_all()

    # and st_ino survives a remount
    m = env.mount()
    assert os.lstat(os.path.join(m, "a")).st_ino == ino_a
    assert tree(m) == view


def test_copy_up_keeps_directory_times(env):
    # a copy-up adds nothing to a directory as the view shows it: like the
    # kernel, it keeps the times of every directory it copies into
    os.makedirs(env.p("l1", "deep", "a"))
    write(env.p("l1", "deep", "a", "f"), b"f\n")
    write(env.p("l1", "top"), b"t\n")
    old = 978307200 * 10**9  # 2001-01-01
    for d in ("deep/a", "deep"):
        os.utime(env.p("l1", d), ns=(old, old))
    m = env.mount()
    root_before = os.stat(env.p("u")).st_mtime_ns
    time.sleep(0.05)
    os.chmod(os.path.join(m, "deep", "a", "f"), 0o600)  # copies up deep, deep/a, then f
    os.chmod(os.path.join(m, "top"), 0o600)
    with open(os.path.join(m, "deep", "a", "f"), "ab") as f:  # and the data, into a copied dir
        f.write(b"more\n")
    os.listdir(m)
    os.listdir(os.path.join(m, "deep"))
    for d in ("deep/a", "deep"):
        assert os.stat(os.path.join(m, d)).st_mtime_ns == old, d
        assert os.stat(env.p("u", d)).st_mtime_ns == old, d
    assert os.stat(env.p("u")).st_mtime_ns == root_before, "the upper root's time changed"
    # a real change to the directory still moves its time
    write(os.path.join(m, "deep", "new"), b"n\n")
    assert os.stat(os.path.join(m, "deep")).st_mtime_ns > old
    env.unmount_all()
    m = env.mount()
    assert os.stat(os.path.join(m, "deep", "a")).st_mtime_ns == old


def test_copy_up_never_hides_a_concurrent_change_of_its_directory(env):
    # a copy-up sets its directory's times back; a create that lands in the
    # directory meanwhile must not be hidden by that (git's untracked cache
    # trusts a directory's mtime). The daemon's test hooks make the create
    # land between the copy-up's rename and its setting the times back.
    os.makedirs(env.p("l1", "d"))
    write(env.p("l1", "d", "f1"), b"x")
    write(env.p("l1", "d", "f2"), b"x")
    old = 978307200 * 10**9
    os.utime(env.p("l1", "d"), ns=(old, old))
    m = env.mount(env_extra={"DRAFTFS_TEST_CREATE_DELAY_MS": "300", "DRAFTFS_TEST_COPYUP_DELAY_MS": "600"})
    d = os.path.join(m, "d")
    os.chmod(os.path.join(d, "f1"), 0o600)  # d is in upper now, with its lower times
    assert os.stat(env.p("u", "d")).st_mtime_ns == old
    os.stat(os.path.join(d, "f2"))  # cached: the chmod's walk needs no lock of d, which the create holds
    # t=0: the create passes its checks, then waits 300 ms; t=100 ms: the
    # copy-up of f2 renames into d, then waits 600 ms; t=300 ms: the create
    # lands; t=700 ms: the copy-up sets d's times back
    t = threading.Thread(target=lambda: os.close(os.open(os.path.join(d, "new"), os.O_CREAT | os.O_WRONLY, 0o644)))
    t.start()
    time.sleep(0.1)
    os.chmod(os.path.join(d, "f2"), 0o600)
    t.join()
    assert os.path.exists(env.p("u", "d", "new"))
    made = os.stat(env.p("u", "d", "new")).st_mtime_ns
    assert os.stat(env.p("u", "d")).st_mtime_ns >= made, "the copy-up set d's time back over the create"
    assert os.stat(d).st_mtime_ns >= made


def test_readdir_ino_follows_a_split_hard_link(env):
    # the copy-up of a lower hard link gives it its own st_ino: a listing
    # the kernel cached before must not keep handing out the old d_ino
    os.makedirs(env.p("l1", "d"))
    write(env.p("l1", "d", "hl1"), b"x\n")
    os.link(env.p("l1", "d", "hl1"), env.p("l1", "d", "hl2"))
    m = env.mount()
    d = os.path.join(m, "d")
    for _ in range(2):
        inos = {e.name: e.inode() for e in os.scandir(d)}
    assert inos["hl1"] == inos["hl2"] == os.lstat(os.path.join(d, "hl1")).st_ino
    with open(os.path.join(d, "hl1"), "ab") as f:
        f.write(b"y\n")
    st = os.lstat(os.path.join(d, "hl1"))
    assert st.st_ino != inos["hl1"] and st.st_nlink == 1
    inos = {e.name: e.inode() for e in os.scandir(d)}
    assert inos["hl1"] == st.st_ino, "readdir's d_ino is the old one"
    assert inos["hl2"] == os.lstat(os.path.join(d, "hl2")).st_ino


def test_ownership_and_idmap(env):
    make_lowers(env)
    os.chmod(env.p("l1", "d"), 0o777)
    m = env.mount()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(10001)
            os.setuid(10001)
            write(os.path.join(m, "d", "mine"), b"x")
            os.mkdir(os.path.join(m, "d", "mydir"))
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    for n in ("mine", "mydir"):
        assert os.lstat(os.path.join(m, "d", n)).st_uid == 10001
        assert os.lstat(env.p("u", "d", n)).st_uid == 10001
    env.unmount_all()

    # disk 1234 shows as 20000; what 20000 creates is stored as 1234; others pass through
    m = env.mount("uidmapping=1234:20000:1,gidmapping=1234:20000:1")
    st = os.lstat(os.path.join(m, "a"))
    assert (st.st_uid, st.st_gid) == (20000, 20000)
    assert os.lstat(os.path.join(m, "b")).st_uid == 0
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(20000)
            os.setuid(20000)
            with open(os.path.join(m, "a"), "ab") as f:  # owner write through the mapping
                f.write(b"!")
            write(os.path.join(m, "d", "mapped"), b"y")
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert os.lstat(env.p("u", "d", "mapped")).st_uid == 1234
    assert os.lstat(os.path.join(m, "d", "mapped")).st_uid == 20000


def test_bad_input(env):
    make_lowers(env)
    cases = [
        (f"lowerdir={env.p('nope')},upperdir={env.p('u')},workdir={env.p('w')}", "lowerdir"),
        (f"lowerdir={env.p('l1')},upperdir={env.p('l1', 'd')},workdir={env.p('w')}", "inside"),
        (f"lowerdir={env.p('u', 'x')},upperdir={env.p('u')},workdir={env.p('w')}", "lowerdir"),
        (f"lowerdir={env.p('l1')},upperdir={env.p('u')},workdir={env.p('w')},frobnicate", "frobnicate"),
        (f"lowerdir={env.p('l1')},upperdir={env.p('u')}", "workdir"),
        (f"lowerdir={env.p('l1')},upperdir={env.p('u')},workdir=/dev/shm", "same filesystem"),
    ]
    os.makedirs(env.p("u", "x"))
    for opts, word in cases:
        r = subprocess.run([DRAFTFS, "-o", opts, env.p("m")], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, (opts, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and word in lines[0], (opts, r.stderr)
        assert not is_mounted(env.p("m"))

    write(env.p("w", "junk"), b"")
    r = subprocess.run([DRAFTFS, "-o", env.opts(), env.p("m")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "not empty" in r.stderr
    os.unlink(env.p("w", "junk"))

    env.mount()
    # a second draftfs on the same workdir, and on the busy mountpoint
    os.mkdir(env.p("m2"))
    r = subprocess.run([DRAFTFS, "-o", env.opts(), env.p("m2")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "in use" in r.stderr
    os.makedirs(env.p("w2"))
    r = subprocess.run([DRAFTFS, "-o", env.opts().replace(env.p("w"), env.p("w2")), env.p("m")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "already in use" in r.stderr


def test_sigterm_and_leftovers(env):
    make_lowers(env)
    # leftovers of a killed run in work/ are cleaned at mount
    os.makedirs(env.p("w", "work", "#draftfs-1-1"))
    write(env.p("w", "work", "#draftfs-1-2"), b"partial")
    m = env.mount()
    left = [n for n in os.listdir(env.p("w", "work")) if not n.startswith("#draftfs-wh-")]  # the whiteout pool
    assert left == []
    write(os.path.join(m, "new"), b"data")
    pid = daemon_pid(m)
    assert pid
    os.kill(pid, signal.SIGTERM)
    assert wait_gone(pid), "draftfs did not exit on SIGTERM"
    assert not is_mounted(m)
    assert read(env.p("u", "new")) == b"data"


def test_control_xattr(env):
    make_lowers(env)
    m = env.mount()
    sock = os.getxattr(m, "trusted.draftbox.control").decode()
    assert sock == os.path.join(os.path.realpath(env.p("w")), "draftfs", "ctl.sock")
    assert "trusted.draftbox.control" not in os.listxattr(m)
    assert stat.S_IMODE(os.stat(env.p("w", "draftfs")).st_mode) == 0o700


def test_mount_helper(env):
    """mount -t fuse.draftfs finds draftfs on the plain system PATH (a temporary symlink)."""
    if not shutil.which("mount.fuse3", path="/sbin:/usr/sbin"):
        pytest.skip("mount.fuse3 is not installed")
    link = "/usr/sbin/draftfs"
    if os.path.lexists(link) and os.path.realpath(link) != os.path.realpath(DRAFTFS):
        pytest.skip(f"{link} exists and is not ours")
    make_lowers(env)
    created = not os.path.lexists(link)
    if created:
        os.symlink(os.path.realpath(DRAFTFS), link)
    try:
        r = subprocess.run(["mount", "-t", "fuse.draftfs", "draftfs-smoke", env.p("m"),
                            "-o", env.opts("noatime,nofail,x-test=1")],
                           capture_output=True, text=True, timeout=60, env={"PATH": "/sbin:/bin:/usr/sbin:/usr/bin"})
        assert r.returncode == 0, r.stderr
        env.mounts.append(env.p("m"))
        assert read(env.p("m", "a")) == b"hello\n"
        with open("/proc/self/mountinfo") as f:
            line = [ln for ln in f if ln.split()[4] == os.path.realpath(env.p("m"))][0]
        assert "fuse.draftfs" in line and "draftfs-smoke" in line
        env.unmount_all()
        r = subprocess.run(["mount", "-t", "fuse.draftfs", "draftfs-smoke", env.p("m"), "-o", "lowerdir=/nonexistent"],
                           capture_output=True, text=True, timeout=60, env={"PATH": "/sbin:/bin:/usr/sbin:/usr/bin"})
        assert r.returncode != 0
    finally:
        if created:
            os.unlink(link)
