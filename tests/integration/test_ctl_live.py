# SPDX-License-Identifier: LGPL-2.1-or-later
"""The control plane on live draftfs mounts: diff/commit/discard/status
through the control socket, the view staying the same across a commit,
discard reverting at once, commit and diff while a process keeps writing,
a daemon killed in the middle of a commit, bad requests on the socket, a
commit in one mount seen at once by another mount of the same workspace,
and a partial commit that takes away the data of a metacopy."""
import errno
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from ctlutil import Session, draftfs_bin, is_metacopy, snapshot, umount


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Live:
    """A draftfs daemon (-f) over the layers of a Session, at @mnt."""

    def __init__(self, s, upper=None, work=None, mnt=None, env=None, opts=None):
        self.s = s
        self.upper = upper or s.upper
        self.work = work or s.work
        self.mnt = mnt or s.mnt
        os.makedirs(self.mnt, exist_ok=True)
        e = dict(os.environ)
        e.update(env or {})
        opts = "lowerdir=%s,upperdir=%s,workdir=%s" % (":".join(s.lowers), self.upper, self.work) + \
            ("," + opts if opts else "")
        self.errf = open(self.mnt.rstrip("/") + ".stderr", "wb")
        self.proc = subprocess.Popen([draftfs_bin(), "-f", "-o", opts, self.mnt], stdin=subprocess.DEVNULL,
                                     stdout=self.errf, stderr=self.errf, env=e)
        deadline = time.monotonic() + 20
        while not is_mounted(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("draftfs did not mount: %s" % self.stderr())
            time.sleep(0.02)
        # the control socket comes up right after the mount
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                os.getxattr(self.mnt, "trusted.draftbox.control")
                if os.path.exists(self.socket()):
                    break
            except OSError:
                pass
            time.sleep(0.02)

    def stderr(self):
        with open(self.mnt.rstrip("/") + ".stderr", "rb") as f:
            return f.read().decode(errors="replace")

    def socket(self):
        return os.getxattr(self.mnt, "trusted.draftbox.control").decode()

    def run(self, verb, *extra, check=True, binary=False, env=None):
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.run([draftfs_bin(), verb, self.mnt] + list(extra), capture_output=True, timeout=120, env=e)
        if check and p.returncode != 0:
            raise AssertionError("draftfs %s failed (%d): %s" % (verb, p.returncode, p.stderr.decode(errors="replace")))
        if not binary:
            p.stdout = p.stdout.decode(errors="surrogateescape")
        p.stderr = p.stderr.decode(errors="replace")
        return p

    def changes(self, *paths):
        return {c["path"]: c for c in json.loads(self.run("diff", *paths).stdout)["changes"]}

    def stop(self):
        if is_mounted(self.mnt):
            umount(self.mnt)
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errf.close()
        err = self.stderr()
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            assert marker not in err, "draftfs stderr has sanitizer reports:\n" + err[-4000:]


@pytest.fixture
def live():
    s = Session()
    draftfs_bin()
    mounts = []

    def start(**kw):
        m = Live(s, **kw)
        mounts.append(m)
        return m
    try:
        yield s, start
    finally:
        for m in reversed(mounts):
            m.stop()
        s.close()


def populate(low):
    os.makedirs(os.path.join(low, "src"))
    with open(os.path.join(low, "src/a.c"), "w") as f:
        f.write("int a;\n")
    with open(os.path.join(low, "README"), "w") as f:
        f.write("readme\n")
    os.makedirs(os.path.join(low, "old/deep"))
    with open(os.path.join(low, "old/deep/x"), "w") as f:
        f.write("x\n")


def test_live_diff_commit_discard(live):
    s, start = live
    populate(s.lower)
    m = start()
    mp = m.mnt
    with open(os.path.join(mp, "src/a.c"), "a") as f:
        f.write("int b;\n")
    with open(os.path.join(mp, "src/new.c"), "w") as f:
        f.write("new\n")
    subprocess.run(["rm", "-rf", os.path.join(mp, "old")], check=True)
    with open(os.path.join(mp, "README"), "w") as f:
        f.write("changed readme\n")
    ch = m.changes()
    assert ch["src/a.c"]["status"] == "modified" and ch["src/new.c"]["status"] == "added"
    assert ch["old"]["status"] == "deleted" and ch["old/deep/x"]["status"] == "deleted"
    st = json.loads(m.run("status").stdout)
    assert st["mounted"] and st["journal"] == "none" and st["summary"]["total"] == len(ch)
    # the patch applies to a copy of the workspace
    patch = m.run("diff", "--format", "patch", binary=True).stdout
    assert b"src/new.c" in patch
    view_before = snapshot(mp)
    out = json.loads(m.run("commit", "src", "old").stdout)
    assert "src/new.c" in out["committed"]
    assert snapshot(mp) == view_before
    assert open(os.path.join(s.lower, "src/a.c")).read() == "int a;\nint b;\n"
    assert not os.path.exists(os.path.join(s.lower, "old"))
    assert set(m.changes()) == {"README"}
    # discard reverts the view at once
    with open(os.path.join(mp, "README")) as f:
        assert f.read() == "changed readme\n"
    m.run("discard", "README")
    with open(os.path.join(mp, "README")) as f:
        assert f.read() == "readme\n"
    assert m.changes() == {}
    # absolute paths below the mountpoint are accepted, others refused
    with open(os.path.join(mp, "z"), "w") as f:
        f.write("z")
    assert set(m.changes(os.path.join(mp, "z"))) == {"z"}
    p = m.run("diff", "/etc/passwd", check=False)
    assert p.returncode == 2 and "outside the mount" in p.stderr
    assert json.loads(m.run("invalidate", "src").stdout)["invalidated"] == 1
    assert json.loads(m.run("recover").stdout)["recovered"] is False
    # --socket reaches the same daemon
    st = json.loads(subprocess.run([draftfs_bin(), "status", "--socket", m.socket()], capture_output=True,
                                   check=True).stdout)
    assert st["mounted"] and st["mountpoint"] == os.path.realpath(mp)
    # offline commands refuse a mounted session (the daemon holds the session lock)
    p = s.run("commit", check=False)
    assert p.returncode == 1 and "mounted" in p.stderr


def fill_to_quota(mp, prefix, size):
    """Writes files of @size bytes until the quota refuses one; returns how many fit."""
    for i in range(64):
        try:
            with open(os.path.join(mp, "%s%d" % (prefix, i)), "wb") as f:
                f.write(b"q" * size)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            os.unlink(os.path.join(mp, "%s%d" % (prefix, i)))
            return i
    raise AssertionError("the quota never refused a write")


@pytest.mark.parametrize("how", ["discard", "discard-path", "commit", "commit-path"])
def test_live_quota_given_back(live, how):
    """Commit and discard take files out of the upper: the quota gets their bytes and inodes back, as an rm in
    the view does (it used to count them until the next mount, so a session ran out of space for good)."""
    s, start = live
    populate(s.lower)
    m = start(opts="quota_bytes=1M,quota_inodes=40")
    mp = m.mnt
    os.mkdir(os.path.join(mp, "d"))
    fitted = fill_to_quota(os.path.join(mp, "d"), "f", 256 << 10)
    assert 3 <= fitted <= 4
    with pytest.raises(OSError) as e:
        with open(os.path.join(mp, "README"), "a") as f:
            f.write("x" * (512 << 10))
    assert e.value.errno == errno.ENOSPC
    verb, paths = how.split("-")[0], (["d"] if how.endswith("-path") else [])
    m.run(verb, *paths)
    assert "d" not in m.changes()
    assert fill_to_quota(mp, "again", 256 << 10) == fitted  # all of it back, bytes ...
    for i in range(fitted):
        os.unlink(os.path.join(mp, "again%d" % i))
    m.run("discard")
    for i in range(39):  # ... and inodes
        os.mkdir(os.path.join(mp, "n%d" % i))
    m.run("discard")
    os.mkdir(os.path.join(mp, "n"))


def test_live_commit_while_writing(live):
    """A writer keeps rewriting files with one repeated byte; whatever the
    commit and the diff capture must be one of the writer's versions."""
    s, start = live
    m = start()
    path = os.path.join(m.mnt, "busy.bin")
    size = 256 * 1024
    with open(path, "wb") as f:
        f.write(b"a" * size)
    stop = threading.Event()

    def writer():
        n = 0
        fd = os.open(path, os.O_WRONLY)
        try:
            while not stop.is_set():
                c = bytes([ord("a") + n % 26])
                # one version = size bytes of one letter, written in 4 KiB pieces
                for off in range(0, size, 4096):
                    os.pwrite(fd, c * 4096, off)
                n += 1
        finally:
            os.close(fd)
    t = threading.Thread(target=writer)
    t.start()
    try:
        for i in range(5):
            tar = m.run("diff", "--format", "tar", binary=True)
            assert tar.returncode == 0
            m.run("commit", "--force")
            with open(os.path.join(s.lower, "busy.bin"), "rb") as f:
                data = f.read()
            assert len(data) == size
            # quiesce holds writers between FUSE requests, so a version may be
            # mid-way (4 KiB granularity) but never torn inside a request
            letters = []
            for off in range(0, size, 4096):
                chunk = data[off:off + 4096]
                assert chunk == chunk[:1] * 4096, "torn write at %d" % off
                if not letters or letters[-1] != chunk[:1]:
                    letters.append(chunk[:1])
            # one instant of the file: the writer's current pass over its previous one
            assert len(letters) <= 2, letters
    finally:
        stop.set()
        t.join()


def test_live_bad_requests(live):
    s, start = live
    m = start()
    sock = m.socket()

    def call(raw):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(10)
        c.connect(sock)
        c.sendall(raw)
        c.shutdown(socket.SHUT_WR)
        data = b""
        while not data.endswith(b"\n"):
            b = c.recv(65536)
            if not b:
                break
            data += b
        c.close()
        return json.loads(data)
    r = call(b'{"op":"status"}\n')
    assert r["ok"] and r["result"]["mounted"]
    r = call(b'{"op":"diff","paths":["a\\u0000b"]}\n')
    assert not r["ok"] and "NUL" in r["error"]["error"]
    r = call(b'{"op":"commit","paths":["../etc"]}\n')
    assert not r["ok"] and r["error"]["code"] == "invalid_path"
    r = call(b'{"op":"commit","paths":["/etc"]}\n')
    assert not r["ok"] and r["error"]["code"] == "invalid_path"
    r = call(b'{"op":"frobnicate"}\n')
    assert not r["ok"] and "unknown operation" in r["error"]["error"]
    r = call(b'not json\n')
    assert not r["ok"]
    r = call(b'{"op":"diff","format":"json"}\n')
    assert not r["ok"] and "fd" in r["error"]["error"]
    r = call(b'{"op":"commit","paths":"x"}\n')
    assert not r["ok"] and r["error"]["code"] == "invalid_argument"
    r = call(b'{"op":"recover","force":"yes"}\n')
    assert not r["ok"] and r["error"]["code"] == "invalid_argument" and "boolean" in r["error"]["error"], r
    # an empty list is refused, not read as "everything"
    with open(os.path.join(m.mnt, "keep.txt"), "w") as f:
        f.write("mine\n")
    for op in (b"commit", b"discard"):
        r = call(b'{"op":"' + op + b'","paths":[]}\n')
        assert not r["ok"] and r["error"]["code"] == "invalid_argument" and "empty" in r["error"]["error"], r
    with open(os.path.join(m.mnt, "keep.txt")) as f:
        assert f.read() == "mine\n", "a refused discard changes nothing"
    assert not os.path.exists(os.path.join(s.lower, "keep.txt")), "a refused commit changes nothing"
    # the daemon is still fine
    assert call(b'{"op":"status"}\n')["ok"]


def _chain(root, total, first):
    """Makes dirs below @root (one at a time, by fd) down to a file whose relative path is @total bytes."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    path, comp = "", (first + "d" * 200)[:200]
    try:
        while total - len(path) - (1 if path else 0) > 255:
            os.mkdir(comp, dir_fd=fd)
            nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
            path += ("/" if path else "") + comp
            comp = "d" * 200
        name = "x" * (total - len(path) - (1 if path else 0))
        os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
        return path + "/" + name
    finally:
        os.close(fd)


def _exists_below(root, rel):
    """Whether @rel exists below @root, looked up one component at a time (it may exceed PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        *dirs, name = rel.split("/")
        for d in dirs:
            nfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.stat(name, dir_fd=fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)


def test_live_commit_refuses_paths_too_long_and_changes_nothing(live):
    """The view can hold paths of PATH_MAX bytes and more (made one dir at a time); commit
    cannot name them, so it refuses before staging, not after making half of the dirs."""
    s, start = live
    m = start()
    ok = _chain(m.mnt, 4095, "A")
    at_max = _chain(m.mnt, 4096, "B")
    long = _chain(m.mnt, 6000, "C")
    assert len(ok) == 4095 and len(at_max) == 4096 and len(long) == 6000
    lower_before = snapshot(s.lower)
    p = m.run("commit", check=False)
    assert p.returncode == 3, p
    assert "PATH_MAX" in p.stderr and "too long" in p.stderr, p.stderr[-500:]
    assert snapshot(s.lower) == lower_before, "a refused commit changes nothing"
    assert {ok, at_max, long} <= set(m.changes())
    # the path of 4095 bytes is fine on its own
    m.run("commit", ok.split("/")[0])
    assert _exists_below(s.lower, ok) and not _exists_below(s.lower, long.split("/")[0])
    assert list(m.changes()) and all(p[0] in "BC" for p in m.changes())


def _killed_mid_commit(live):
    """A daemon that changed src/f0..7 and deleted README, killed at its commit's 6th step and
    unmounted, its journal left; returns the view it had."""
    s, start = live
    populate(s.lower)
    m = start(env={"DRAFTFS_FAULT": "exit:6"})
    for i in range(8):
        with open(os.path.join(m.mnt, "src/f%d" % i), "w") as f:
            f.write("v2 %d\n" % i)
    os.unlink(os.path.join(m.mnt, "README"))
    want = snapshot(m.mnt)
    assert m.run("commit", check=False).returncode != 0  # the daemon died under it
    m.proc.wait(timeout=30)
    assert m.proc.returncode == 99
    umount(m.mnt)
    assert os.path.exists(os.path.join(s.work, "draftfs", "commit.journal"))
    return want


def test_live_kill_during_commit_recovers_at_start(live):
    s, start = live
    want = _killed_mid_commit(live)
    m2 = start()  # the next start finishes the commit before going live
    assert not os.path.exists(os.path.join(s.work, "draftfs", "commit.journal"))
    assert snapshot(m2.mnt) == want
    assert snapshot(s.lower) == want
    assert m2.changes() == {}


def test_live_start_refuses_a_recovery_over_host_edits(live):
    """The daemon is killed mid-commit, then the host edits two paths of the commit: the next
    start does not recover over them (it would delete README and replace src/f3). It exits
    naming both, mounts nothing and changes nothing; 'recover --force' then finishes."""
    s, start = live
    want = _killed_mid_commit(live)
    for name in ("README", "src/f3"):
        with open(os.path.join(s.lower, name), "w") as f:
            f.write("host\n")
    before = snapshot(s.lower)
    opts = "lowerdir=%s,upperdir=%s,workdir=%s" % (s.lower, s.upper, s.work)
    p = subprocess.run([draftfs_bin(), "-f", "-o", opts, s.mnt], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and not is_mounted(s.mnt), p
    assert "README: changed in the workspace after the commit began; recovery would delete it" in p.stderr, p.stderr
    assert "src/f3: changed in the workspace after the commit began; recovery would replace it" in p.stderr
    assert snapshot(s.lower) == before
    assert os.path.exists(os.path.join(s.work, "draftfs", "commit.journal"))
    s.run("recover", "--force")
    m2 = start()
    assert snapshot(m2.mnt) == want and snapshot(s.lower) == want
    assert m2.changes() == {}


def test_cross_mount_invalidate(live):
    s, start = live
    populate(s.lower)
    a = start()
    upper_b = os.path.join(s.root, "upper_b")
    work_b = os.path.join(s.root, "work_b")
    os.makedirs(upper_b)
    os.makedirs(work_b)
    b = start(upper=upper_b, work=work_b, mnt=os.path.join(s.root, "mnt_b"))
    # B reads (and caches) the file; A changes and commits it
    assert open(os.path.join(b.mnt, "README")).read() == "readme\n"
    os.listdir(os.path.join(b.mnt, "src"))
    with open(os.path.join(a.mnt, "README"), "w") as f:
        f.write("from A\n")
    with open(os.path.join(a.mnt, "src/added.c"), "w") as f:
        f.write("added\n")
    out = json.loads(a.run("commit").stdout)
    assert out["invalidated_mounts"] >= 1
    assert open(os.path.join(b.mnt, "README")).read() == "from A\n"
    assert "added.c" in os.listdir(os.path.join(b.mnt, "src"))
    # a path B changed itself keeps B's version
    with open(os.path.join(b.mnt, "src/a.c"), "w") as f:
        f.write("B's\n")
    with open(os.path.join(a.mnt, "src/a.c"), "w") as f:
        f.write("A's\n")
    a.run("commit")
    assert open(os.path.join(b.mnt, "src/a.c")).read() == "B's\n"
    # an offline commit of a third (unmounted) session reaches the live mounts too
    upper_c = os.path.join(s.root, "upper_c")
    work_c = os.path.join(s.root, "work_c")
    os.makedirs(upper_c)
    os.makedirs(work_c)
    with open(os.path.join(upper_c, "README"), "w") as f:
        f.write("from C\n")
    assert open(os.path.join(b.mnt, "README")).read() == "from A\n"
    p = subprocess.run([draftfs_bin(), "commit", "--force", "--lowerdir", s.lower, "--upperdir", upper_c,
                        "--workdir", work_c], capture_output=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["invalidated_mounts"] >= 2
    assert open(os.path.join(b.mnt, "README")).read() == "from C\n"


def test_live_conflict_from_core_origin(live):
    """The core records each lower entry's identity on copy-up: a host edit
    after that is a conflict; force overrides."""
    s, start = live
    populate(s.lower)
    m = start()
    with open(os.path.join(m.mnt, "README"), "a") as f:
        f.write("session\n")
    subprocess.run(["rm", "-rf", os.path.join(m.mnt, "old")], check=True)
    with open(os.path.join(m.mnt, "src/a.c"), "a") as f:
        f.write("session\n")
    assert os.getxattr(os.path.join(s.upper, "README"), "trusted.draftbox.origin").startswith(b"v1 ")
    with open(os.path.join(s.lower, "README"), "a") as f:
        f.write("host\n")
    with open(os.path.join(s.lower, "old/deep/x"), "a") as f:
        f.write("host\n")
    p = m.run("commit", check=False)
    assert p.returncode == 3
    assert "README" in p.stderr and "old/deep/x" in p.stderr and "src/a.c" not in p.stderr
    assert open(os.path.join(s.lower, "src/a.c")).read() == "int a;\n"
    m.run("commit", "src")
    assert open(os.path.join(s.lower, "src/a.c")).read() == "int a;\nsession\n"
    m.run("commit", "--force")
    assert open(os.path.join(s.lower, "README")).read() == "readme\nsession\n"
    assert not os.path.exists(os.path.join(s.lower, "old"))


@pytest.mark.parametrize("seed", range(int(os.environ.get("CTL_RANDOM_SEEDS", "3"))))
def test_live_random_edits(live, seed):
    """Random edits through draftfs itself (its own copy-up, rename and
    whiteout handling), then: the tar and the patch reproduce the view on a
    copy of lower, and a commit leaves the view as it was and lower equal
    to it."""
    import random
    import shutil
    from ctlutil import files_only, oci_apply
    from test_ctl_random import rand_tree, random_edits
    rng = random.Random(1000 + seed)
    s, start = live
    rand_tree(rng, s.lower)
    m = start()
    random_edits(rng, m.mnt, 30)
    want = snapshot(m.mnt)
    tf = os.path.join(s.root, "layer.tar")
    with open(tf, "wb") as f:
        f.write(m.run("diff", "--format", "tar", binary=True).stdout)
    applied = os.path.join(s.root, "applied")
    shutil.copytree(s.lower, applied, symlinks=True)
    oci_apply(tf, applied)
    assert snapshot(applied) == want
    pf = os.path.join(s.root, "p.diff")
    with open(pf, "wb") as f:
        f.write(m.run("diff", "--format", "patch", binary=True).stdout)
    gitdir = os.path.join(s.root, "git")
    shutil.copytree(s.lower, gitdir, symlinks=True)
    r = subprocess.run(["git", "apply", "--binary", pf], cwd=gitdir, capture_output=True)
    assert r.returncode == 0, r.stderr
    assert files_only(snapshot(gitdir), git_modes=True) == files_only(want, git_modes=True)
    m.run("commit")
    assert snapshot(m.mnt) == want
    assert snapshot(s.lower) == want
    assert m.changes() == {}


def test_live_rename_conflicts(live):
    """A file moved in the session carries its source's identity: the move
    commits cleanly, unless the source changed on the host since."""
    s, start = live
    populate(s.lower)
    m = start()
    os.rename(os.path.join(m.mnt, "README"), os.path.join(m.mnt, "README.md"))
    os.rename(os.path.join(m.mnt, "src/a.c"), os.path.join(m.mnt, "src/b.c"))
    with open(os.path.join(s.lower, "src/a.c"), "a") as f:
        f.write("host edit\n")
    p = m.run("commit", check=False)
    assert p.returncode == 3 and "src/b.c" in p.stderr and "README.md" not in p.stderr
    m.run("commit", "README.md")  # the source need not be selected
    assert os.path.exists(os.path.join(s.lower, "README"))
    m.run("commit", "README")
    assert open(os.path.join(s.lower, "README.md")).read() == "readme\n"
    assert not os.path.exists(os.path.join(s.lower, "README"))
    m.run("commit", "--force")
    assert open(os.path.join(s.lower, "src/b.c")).read() == "int a;\n"
    assert not os.path.exists(os.path.join(s.lower, "src/a.c"))


def test_live_hardlink_in_session(live):
    s, start = live
    populate(s.lower)
    m = start()
    os.link(os.path.join(m.mnt, "README"), os.path.join(m.mnt, "README.link"))
    with open(os.path.join(m.mnt, "README"), "a") as f:
        f.write("both\n")
    want = snapshot(m.mnt)
    m.run("commit")
    assert snapshot(m.mnt) == want
    assert open(os.path.join(s.lower, "README.link")).read() == "readme\nboth\n"


def test_live_discard_inside_replaced_dir(live):
    s, start = live
    populate(s.lower)
    m = start()
    subprocess.run(["rm", "-rf", os.path.join(m.mnt, "src")], check=True)
    os.mkdir(os.path.join(m.mnt, "src"))
    with open(os.path.join(m.mnt, "src/new.c"), "w") as f:
        f.write("new\n")
    assert sorted(os.listdir(os.path.join(m.mnt, "src"))) == ["new.c"]
    m.run("discard", "src/a.c")
    assert sorted(os.listdir(os.path.join(m.mnt, "src"))) == ["a.c", "new.c"]
    assert open(os.path.join(m.mnt, "src/a.c")).read() == "int a;\n"
    ch = m.changes()
    assert set(ch) == {"src", "src/new.c"} and ch["src"].get("opaque") is True  # the dir still replaces lower
    m.run("discard", "src")
    assert sorted(os.listdir(os.path.join(m.mnt, "src"))) == ["a.c"]
    assert m.changes() == {}


def test_live_metacopy_partial_commit(live):
    """mv big moved (a metacopy written by the kernel, its data still at big), then a live
    commit of big alone: the daemon gives moved its own data first and tells the core,
    so moved keeps its content through the mount, after a remount and in the diff."""
    s, start = live
    populate(s.lower)
    big = bytes(range(256)) * 64
    with open(os.path.join(s.lower, "big"), "wb") as f:
        f.write(big)
    s.change(lambda mp: os.rename(os.path.join(mp, "big"), os.path.join(mp, "moved")), metacopy=True)
    assert is_metacopy(os.path.join(s.upper, "moved"))
    m = start()
    ch = m.changes()
    assert ch["moved"]["status"] == "added" and ch["moved"]["new"]["size"] == len(big)
    assert ch["big"]["status"] == "deleted"
    with open(os.path.join(m.mnt, "moved"), "rb") as f:
        f.read()  # whatever the core shows, it is in the kernel's caches now
    out = json.loads(m.run("commit", "big").stdout)
    assert out["committed"] == ["big"] and out["materialized"] == ["moved"]
    assert not os.path.exists(os.path.join(s.lower, "big"))
    assert not is_metacopy(os.path.join(s.upper, "moved"))
    with open(os.path.join(m.mnt, "moved"), "rb") as f:
        assert f.read() == big
    assert m.changes()["moved"]["new"]["size"] == len(big)
    m.stop()
    m = start()
    with open(os.path.join(m.mnt, "moved"), "rb") as f:
        assert f.read() == big
    m.run("commit")
    with open(os.path.join(s.lower, "moved"), "rb") as f:
        assert f.read() == big
    assert m.changes() == {}


def test_live_metacopies_made_by_the_core(live):
    """chmod and a rename through draftfs leave metacopies (absolute redirects): diff, tar
    and commits through the socket see their data."""
    s, start = live
    populate(s.lower)
    m = start()
    os.chmod(os.path.join(m.mnt, "README"), 0o755)
    os.rename(os.path.join(m.mnt, "src/a.c"), os.path.join(m.mnt, "a.c"))
    if not is_metacopy(os.path.join(s.upper, "a.c")):
        pytest.skip("this core copies data up (metacopy off)")
    assert os.getxattr(os.path.join(s.upper, "a.c"), "trusted.overlay.redirect") == b"/src/a.c"
    ch = m.changes()
    assert not ch["README"]["content"] and ch["README"]["metadata"]
    assert ch["a.c"]["status"] == "added" and ch["a.c"]["new"]["size"] == 7
    tar = m.run("diff", "--format", "tar", "a.c", binary=True).stdout
    assert b"int a;\n" in tar and b"trusted." not in tar
    out = json.loads(m.run("commit", "src").stdout)
    assert out["materialized"] == ["a.c"] and not os.path.exists(os.path.join(s.lower, "src/a.c"))
    with open(os.path.join(m.mnt, "a.c")) as f:
        assert f.read() == "int a;\n"
    # a.c's origin record names src/a.c, which that commit deleted: the conflict check
    # cannot tell this from a deletion on the host (full copies too), hence --force
    p = m.run("commit", check=False)
    assert p.returncode == 3 and "a.c: deleted in the workspace" in p.stderr
    m.run("commit", "--force")
    assert open(os.path.join(s.lower, "a.c")).read() == "int a;\n"
    assert stat_mode(os.path.join(s.lower, "README")) == 0o755
    assert open(os.path.join(s.lower, "README")).read() == "readme\n"
    assert m.changes() == {}


def stat_mode(p):
    return os.stat(p).st_mode & 0o7777


def test_live_metacopy_hard_links(live):
    """Two names of one metacopy inode (links made by the core), their data's name deleted
    and committed alone: one materialization gives both names the data."""
    s, start = live
    populate(s.lower)
    m = start()
    for n in ["R2", "R3"]:
        os.link(os.path.join(m.mnt, "README"), os.path.join(m.mnt, n))
    os.unlink(os.path.join(m.mnt, "README"))
    if not is_metacopy(os.path.join(s.upper, "R2")):
        pytest.skip("this core copies data up on link")
    for n in ["R2", "R3"]:
        with open(os.path.join(m.mnt, n)) as f:
            assert f.read() == "readme\n"
    out = json.loads(m.run("commit", "README").stdout)
    assert len(out["materialized"]) == 1 and out["materialized"][0] in ("R2", "R3")
    assert not os.path.exists(os.path.join(s.lower, "README"))
    for n in ["R2", "R3"]:
        assert not is_metacopy(os.path.join(s.upper, n))
        with open(os.path.join(m.mnt, n)) as f:
            assert f.read() == "readme\n"
    m.run("commit", "--force")  # their origin names README, gone now (see above)
    for n in ["R2", "R3"]:
        assert open(os.path.join(s.lower, n)).read() == "readme\n"


def test_live_moved_dir_of_metacopies(live):
    """A merged directory moved through draftfs: its lower files become metacopies in the
    new subtree, redirected to the old paths. Committing the old dir's deletion alone gives
    them their data first; the moved dir then commits with its content."""
    s, start = live
    populate(s.lower)
    m = start()
    os.rename(os.path.join(m.mnt, "old"), os.path.join(m.mnt, "new"))
    u = os.path.join(s.upper, "new/deep/x")
    if not is_metacopy(u):
        pytest.skip("this core copies the data of a moved directory")
    assert os.getxattr(u, "trusted.overlay.redirect") == b"/old/deep/x"
    ch = m.changes()
    assert ch["new/deep/x"]["status"] == "added" and ch["new/deep/x"]["new"]["size"] == 2
    assert ch["old/deep/x"]["status"] == "deleted"
    want = snapshot(m.mnt)
    out = json.loads(m.run("commit", "old").stdout)
    assert out["materialized"] == ["new/deep/x"]
    assert not os.path.exists(os.path.join(s.lower, "old")) and not is_metacopy(u)
    assert snapshot(m.mnt) == want
    m.run("commit", "--force", "new")  # the origin records name old/..., committed away (see above)
    assert open(os.path.join(s.lower, "new/deep/x")).read() == "x\n"
    assert snapshot(m.mnt) == want and m.changes() == {}


def test_live_moved_dir_commit_all(live):
    s, start = live
    populate(s.lower)
    m = start()
    os.rename(os.path.join(m.mnt, "old"), os.path.join(m.mnt, "new"))
    os.rename(os.path.join(m.mnt, "src"), os.path.join(m.mnt, "new/src"))
    want = snapshot(m.mnt)
    m.run("commit")
    assert snapshot(s.lower) == want and snapshot(m.mnt) == want
    assert open(os.path.join(s.lower, "new/src/a.c")).read() == "int a;\n"
    assert m.changes() == {}


def test_live_writer_across_commit_and_discard(live):
    """A file kept open for writing across a commit and a discard: its next
    writes land in the file the view shows (copied up again), so the diff
    shows them and the next commit takes them; none goes to the removed
    upper object. A new file discarded while open stays writable, as an
    unlinked file does, and does not come back."""
    s, start = live
    populate(s.lower)
    m = start()
    a = os.path.join(m.mnt, "src/a.c")
    fd = os.open(a, os.O_RDWR)
    wfd = os.open(os.path.join(m.mnt, "README"), os.O_WRONLY | os.O_APPEND)
    nfd = xfd = -1
    try:
        os.pwrite(fd, b"int b;\n", 7)
        m.run("commit")
        assert open(os.path.join(s.lower, "src/a.c")).read() == "int a;\nint b;\n"
        assert m.changes() == {}
        os.pwrite(fd, b"int c;\n", 14)
        assert open(a).read() == "int a;\nint b;\nint c;\n"
        assert os.pread(fd, 100, 0) == b"int a;\nint b;\nint c;\n"
        assert m.changes()["src/a.c"]["status"] == "modified"
        m.run("commit")
        assert open(os.path.join(s.lower, "src/a.c")).read() == "int a;\nint b;\nint c;\n"
        # ftruncate through the handle after a commit
        os.ftruncate(fd, 7)
        assert open(a).read() == "int a;\n"
        assert open(os.path.join(s.lower, "src/a.c")).read() == "int a;\nint b;\nint c;\n"
        # discard: the view is the workspace's again, and the handle writes there
        os.write(wfd, b"one\n")
        nfd = os.open(os.path.join(m.mnt, "new.txt"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(nfd, b"new\n")
        # a file made in the session over a deleted lower one: another file than the one a discard brings back
        x = os.path.join(m.mnt, "old/deep/x")
        os.unlink(x)
        xfd = os.open(x, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(xfd, b"mine\n")
        m.run("discard")
        assert open(os.path.join(m.mnt, "README")).read() == "readme\n"
        assert open(a).read() == "int a;\nint b;\nint c;\n"
        os.write(wfd, b"two\n")
        assert open(os.path.join(m.mnt, "README")).read() == "readme\ntwo\n"
        assert open(os.path.join(s.lower, "README")).read() == "readme\n"
        # the new file left the view with the discard and does not come back
        assert not os.path.exists(os.path.join(m.mnt, "new.txt"))
        assert os.write(nfd, b"orphan\n") == 7
        assert not os.path.exists(os.path.join(m.mnt, "new.txt"))
        assert os.write(xfd, b"more\n") == 5
        assert open(x).read() == "x\n", "the lower file the discard brought back is not written"
        assert set(m.changes()) == {"README"}
    finally:
        if xfd >= 0:
            os.close(xfd)
        os.close(fd)
        os.close(wfd)
        if nfd >= 0:
            os.close(nfd)


def test_live_reader_and_writer_across_a_commit(live):
    """A file kept open read-write across a commit (a database, say): after
    another process writes the file the view shows, reads through the old
    handle see that write, not the removed upper object."""
    s, start = live
    populate(s.lower)
    m = start()
    a = os.path.join(m.mnt, "src/a.c")
    fd = os.open(a, os.O_RDWR)
    try:
        os.pwrite(fd, b"int b;\n", 7)
        m.run("commit")
        with open(a, "r+b") as f:
            f.seek(0, os.SEEK_END)
            f.write(b"int c;\n")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # the read goes to the daemon, not the page cache
        assert os.pread(fd, 100, 0) == b"int a;\nint b;\nint c;\n"
        os.pwrite(fd, b"int d;\n", 21)
        assert open(a, "rb").read() == b"int a;\nint b;\nint c;\nint d;\n"
        assert m.changes()["src/a.c"]["status"] == "modified"
    finally:
        os.close(fd)


def test_live_discard_brings_back_caps(live):
    """A copy that lost its file caps (a write drops them) shows them again once discarded: what the daemon
    remembers of the copy (that it has no security.capability, fs/xattr.c) goes with it."""
    s, start = live
    p = os.path.join(s.lowers[0], "tool")
    with open(p, "wb") as f:
        f.write(b"#!/bin/sh\n")
    os.chmod(p, 0o755)
    # VFS_CAP_REVISION_2 | effective, permitted = CAP_NET_BIND_SERVICE
    caps = (0x02000001).to_bytes(4, "little") + (1 << 10).to_bytes(4, "little") + bytes(12)
    os.setxattr(p, "security.capability", caps)
    m = start()
    v = os.path.join(m.mnt, "tool")
    assert os.getxattr(v, "security.capability") == caps
    with open(v, "ab") as f:
        f.write(b"true\n")
    for _ in range(2):  # the second answer is the daemon's memory of the first
        with pytest.raises(OSError) as e:
            os.getxattr(v, "security.capability")
        assert e.value.errno == errno.ENODATA
    m.run("discard", "tool")
    assert os.getxattr(v, "security.capability") == caps
    with open(v, "rb") as f:
        assert f.read() == b"#!/bin/sh\n"
