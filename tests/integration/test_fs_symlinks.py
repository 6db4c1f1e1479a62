# SPDX-License-Identifier: LGPL-2.1-or-later
"""No operation through a draftfs mount reads or writes outside its layers.

The lower and upper layers hold hostile symlinks: to a canary directory
outside (absolute and as `..` chains), to /etc, to /, and symlinks standing
where another layer has a directory (in the middle of paths, in upper and
in lower). Every access from the test goes through openat2 with
RESOLVE_IN_ROOT on the mount root, so the test's own path walks never leave
the view: anything that reaches the canary (or /etc) went through draftfs
following a layer symlink itself. The canary tree (content, modes, mtimes,
listing) and /etc/passwd must be unchanged at the end, and the view must
show symlinks as symlinks, not what they point to.
"""
import hashlib
import os
import random
import stat

import pytest

import fsutil
import test_fs_differential as td
from fsutil import RESOLVE_IN_ROOT, fsenv, openat2  # noqa: F401


def canary_state(root):
    snap = fsutil.tree_snapshot(root, mtime=True)
    for rel in snap:
        st = os.lstat(os.path.join(root, rel))
        snap[rel]["dir_mtime"] = st.st_mtime_ns if stat.S_ISDIR(st.st_mode) else None
    return snap


def etc_state():
    with open("/etc/passwd", "rb") as f:
        data = f.read()
    st = os.stat("/etc/passwd")
    return hashlib.sha256(data).hexdigest(), st.st_mtime_ns, st.st_mode, st.st_uid, sorted(os.listdir("/etc"))


def build(env):
    canary = env.dir("canary")
    os.makedirs(os.path.join(canary, "sub"))
    with open(os.path.join(canary, "canary.txt"), "w") as f:
        f.write("canary\n")
    with open(os.path.join(canary, "sub", "inner"), "w") as f:
        f.write("inner\n")
    lowers = fsutil.make_standard_lowers(env.dir("layers"), outside_canary=canary)
    top, bottom = lowers
    rel_canary = os.path.relpath(canary, bottom)
    # a dir in the top lower, a symlink to the canary under it: must not merge
    os.makedirs(os.path.join(top, "mix"))
    with open(os.path.join(top, "mix", "mine"), "w") as f:
        f.write("mine\n")
    os.symlink(canary, os.path.join(bottom, "mix"))
    os.makedirs(os.path.join(top, "mix2", "deeper"))
    os.makedirs(os.path.join(bottom, "mix2"))
    os.symlink(canary, os.path.join(bottom, "mix2", "deeper"))  # symlinked dir in the middle, lower
    os.symlink(rel_canary, os.path.join(bottom, "rel_canary"))
    os.symlink("../" * 12 + canary.lstrip("/"), os.path.join(bottom, "a", "dotdot_canary"))
    # an upper left by an earlier session, with symlinks where lower has dirs
    upper = env.dir("upper")
    os.makedirs(os.path.join(upper, "a"))
    os.symlink(canary, os.path.join(upper, "d"))  # lower has dir d/
    os.symlink(canary, os.path.join(upper, "a", "b"))  # lower has dir a/b/, in the middle of paths
    os.makedirs(os.path.join(upper, "e"))
    os.symlink(os.path.join(canary, "sub"), os.path.join(upper, "e", "sub2"))
    return canary, lowers, upper


def rd(root_fd, path, flags=os.O_RDONLY):
    fd = openat2(root_fd, path, flags | os.O_NONBLOCK)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def test_symlinks_stay_inside(fsenv):
    fsutil.require_impl()
    canary, lowers, upper = build(fsenv)
    before_canary, before_etc = canary_state(canary), etc_state()
    m = fsenv.mount_impl(lowers, upper=upper, name="impl")
    root = os.open(m.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        # symlinks show as symlinks, with their targets, never as what they point to
        for name, target in [("d", canary), ("a/b", canary), ("canary_abs", canary), ("abs_etc", "/etc/passwd"),
                             ("mix2/deeper", None), ("e/sub2", os.path.join(canary, "sub"))]:
            full = os.path.join(m.path, name)
            if target is None:
                assert stat.S_ISDIR(os.lstat(full).st_mode), f"'{name}' from the top layer is a dir"
                continue
            assert stat.S_ISLNK(os.lstat(full).st_mode), f"'{name}' should be a symlink in the view"
            assert os.readlink(full) == target
        # a lower symlink under a dir of a higher layer does not merge the canary in
        assert sorted(os.listdir(os.path.join(m.path, "mix"))) == ["mine"]
        assert sorted(os.listdir(os.path.join(m.path, "mix2", "deeper"))) == []
        for p in ("mix/canary.txt", "mix2/deeper/canary.txt", "d/canary.txt", "a/b/canary.txt",
                  "canary_abs/canary.txt", "rel_canary/canary.txt", "a/dotdot_canary/canary.txt",
                  "a/b/dotdot_etc/passwd", "root_link/etc/passwd", "abs_etc"):
            with pytest.raises(OSError):
                rd(root, p)
        # writes through hostile paths stay inside the view (or fail)
        for p in ("mix/canary.txt", "mix/new", "d/new", "a/b/new", "canary_abs/new", "canary_file",
                  "rel_canary/canary.txt", "a/dotdot_canary/new", "root_link/etc/evil", "abs_etc",
                  "a/b/dotdot_etc/evil", "mix2/deeper/new", "e/sub2/inner"):
            try:
                fd = openat2(root, p, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK, 0o644)
                os.write(fd, b"x")
                os.close(fd)
            except OSError:
                pass
        # metadata ops on the symlinks themselves
        for p in ("d", "canary_abs", "canary_file", "abs_etc", "a/b"):
            os.utime(os.path.join(m.path, p), ns=(1, 1), follow_symlinks=False)
            os.lchown(os.path.join(m.path, p), 0, 0)
            with pytest.raises(OSError):
                os.setxattr(os.path.join(m.path, p), "user.x", b"1", follow_symlinks=False)
        # unlinking and renaming the symlinks (and dirs holding them) leaves their targets alone
        os.rename(os.path.join(m.path, "a"), os.path.join(m.path, "a_moved"))  # copy-up of a lower dir
        assert os.readlink(os.path.join(m.path, "a_moved", "dotdot_canary")) == "../" * 12 + canary.lstrip("/")
        assert stat.S_ISLNK(os.lstat(os.path.join(m.path, "a_moved", "b")).st_mode)
        os.rename(os.path.join(m.path, "mix2"), os.path.join(m.path, "mix2_moved"))
        os.unlink(os.path.join(m.path, "d"))  # upper symlink over a lower dir: now a whiteout
        assert not os.path.lexists(os.path.join(m.path, "d"))
        os.unlink(os.path.join(m.path, "canary_abs"))
        os.mkdir(os.path.join(m.path, "d"))
        assert os.listdir(os.path.join(m.path, "d")) == []
        with open(os.path.join(m.path, "d", "f"), "w") as f:
            f.write("in the view")
        # a random workload over all of it, every path resolved inside the root
        rng = random.Random(5)
        gen = td.Generator(rng)
        side = td.Side(m.path)
        try:
            for i in range(1500):
                if i % 8 == 0:
                    gen.refresh(m.path)
                td.run_op(side, gen.next())
        finally:
            side.close()
    finally:
        os.close(root)
    after_canary = canary_state(canary)
    diffs = fsutil.diff_snapshots(before_canary, after_canary, "before", "after")
    assert not diffs, "the canary outside the layers changed:\n" + "\n".join(diffs)
    assert etc_state() == before_etc, "/etc changed"
    m.stop()
    assert canary_state(canary) == before_canary
    # the upper holds no copy of the canary's content either
    for dirpath, _, files in os.walk(upper):
        for n in files:
            p = os.path.join(dirpath, n)
            if stat.S_ISREG(os.lstat(p).st_mode):
                with open(p, "rb") as f:
                    assert f.read() not in (b"canary\n", b"inner\n"), f"'{p}' is a copy of a canary file"
