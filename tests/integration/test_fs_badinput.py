# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftfs refuses bad mount input cleanly, and the view guards its format.

Each bad mount must exit 1 with exactly one line on stderr and leave nothing
mounted. Through a good mount: names over 255 bytes give ENAMETOOLONG,
trusted.overlay.* cannot be set and is never listed, a whiteout lookalike
(char 0/0) cannot be created.

Not covered: an unreadable lower dir, since root reads through mode 000; a
lowerdir that is a regular file stands in for "cannot be used as a layer".
"""
import errno
import os
import stat
import subprocess

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401

pytestmark = pytest.mark.skipif(fsutil.IMPL != "draftfs", reason="exit status and messages are draftfs's own")


def run_draftfs(opts, mnt, extra=()):
    return subprocess.run([fsutil.draftfs_bin()] + list(extra) + ["-o", opts, mnt],
                          capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


def assert_refused(env, opts, mnt, what, extra=()):
    before = fsutil.mounts_under(env.base)
    r = run_draftfs(opts, mnt, extra)
    err = r.stderr.decode(errors="replace")
    after = fsutil.mounts_under(env.base)
    for m in after:  # never leave a stray mount behind, even when failing
        if m not in before:
            fsutil.force_unmount(m[0])
    assert r.returncode == 1, f"{what}: exit status {r.returncode}, stderr {err!r}"
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].strip(), f"{what}: want one error line on stderr, got {err!r}"
    assert "Sanitizer" not in err and "runtime error" not in err, f"{what}: {err}"
    assert after == before, f"{what}: mounts changed: {before} -> {after}"
    return lines[0]


def layout(env, tag):
    d = env.dir(tag)
    for s in ("lower", "upper", "work", "mnt"):
        os.makedirs(os.path.join(d, s), exist_ok=True)
    with open(os.path.join(d, "lower", "f"), "w") as f:
        f.write("x")
    return [os.path.join(d, s) for s in ("lower", "upper", "work", "mnt")]


def test_bad_mount_options(fsenv):
    fsutil.require_impl()
    lo, up, wk, mnt = layout(fsenv, "t")
    good = f"lowerdir={lo},upperdir={up},workdir={wk}"
    assert_refused(fsenv, f"upperdir={up},workdir={wk}", mnt, "missing lowerdir")
    assert_refused(fsenv, f"lowerdir={lo}/nonexistent,upperdir={up},workdir={wk}", mnt, "nonexistent lowerdir")
    assert_refused(fsenv, f"lowerdir={lo}/f,upperdir={up},workdir={wk}", mnt, "lowerdir is a file")
    assert_refused(fsenv, f"lowerdir={lo},upperdir={up}/nonexistent,workdir={wk}", mnt, "nonexistent upperdir")
    os.makedirs(os.path.join(lo, "up"))
    os.makedirs(os.path.join(lo, "wk"))
    assert_refused(fsenv, f"lowerdir={lo},upperdir={lo}/up,workdir={lo}/wk", mnt, "upperdir inside lowerdir")
    inner = os.path.join(up, "lowerinside")
    os.makedirs(inner)
    assert_refused(fsenv, f"lowerdir={inner},upperdir={up},workdir={wk}", mnt, "lowerdir inside upperdir")
    assert_refused(fsenv, f"lowerdir={lo},upperdir={up},workdir={up}", mnt, "workdir same as upperdir")
    assert_refused(fsenv, good + ",frobnicate=1", mnt, "unknown option")
    assert_refused(fsenv, good + ",frobnicate", mnt, "unknown flag option")
    assert_refused(fsenv, good, os.path.join(mnt, "nonexistent"), "nonexistent mountpoint")


def test_workdir_on_other_filesystem(fsenv):
    fsutil.require_impl()
    lo, up, wk, mnt = layout(fsenv, "t")
    tmpfs = fsenv.dir("tmpfs")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", tmpfs], check=True)
    try:
        os.makedirs(os.path.join(tmpfs, "work"))
        assert_refused(fsenv, f"lowerdir={lo},upperdir={up},workdir={tmpfs}/work", mnt, "workdir on another fs")
    finally:
        subprocess.run(["umount", tmpfs], check=True)


def test_workdir_with_foreign_content(fsenv):
    fsutil.require_impl()
    lo, up, wk, mnt = layout(fsenv, "t")
    with open(os.path.join(wk, "precious"), "w") as f:
        f.write("not yours")
    os.makedirs(os.path.join(wk, "somedir"))
    assert_refused(fsenv, f"lowerdir={lo},upperdir={up},workdir={wk}", mnt, "workdir with foreign content")
    with open(os.path.join(wk, "precious")) as f:
        assert f.read() == "not yours", "a refused mount touched foreign files in workdir"


def test_workdir_or_mountpoint_in_use(fsenv):
    fsutil.require_impl()
    lo, up, wk, mnt = layout(fsenv, "t")
    live = fsenv.mount("draftfs", [lo], upper=up, work=wk, name="live")
    up2 = fsenv.dir("up2")
    mnt2 = fsenv.dir("mnt2")
    assert_refused(fsenv, f"lowerdir={lo},upperdir={up2},workdir={wk}", mnt2, "workdir in use by a live mount")
    wk2 = fsenv.dir("wk2")
    assert_refused(fsenv, f"lowerdir={lo},upperdir={up},workdir={wk2}", mnt2, "upperdir in use by a live mount")
    assert_refused(fsenv, f"lowerdir={lo},upperdir={up2},workdir={wk2}", live.path, "mountpoint already mounted")
    # the live mount is unharmed
    with open(os.path.join(live.path, "f")) as f:
        assert f.read() == "x"


@pytest.fixture
def view(fsenv):
    fsutil.require_impl()
    lowers = fsutil.make_standard_lowers(fsenv.dir("layers"))
    return fsenv.mount_impl(lowers, name="v")


def test_long_names(view):
    m = view.path
    long = "n" * 256
    ok = "n" * 255
    calls = {
        "create": lambda: os.close(os.open(os.path.join(m, long), os.O_CREAT | os.O_WRONLY, 0o644)),
        "mkdir": lambda: os.mkdir(os.path.join(m, long)),
        "symlink": lambda: os.symlink("f1", os.path.join(m, long)),
        "link": lambda: os.link(os.path.join(m, "f1"), os.path.join(m, long)),
        "rename": lambda: os.rename(os.path.join(m, "f1"), os.path.join(m, long)),
        "mknod": lambda: os.mkfifo(os.path.join(m, long)),
        "stat": lambda: os.stat(os.path.join(m, long)),
        "stat-in-lower-dir": lambda: os.stat(os.path.join(m, "a", long)),
    }
    for name, fn in calls.items():
        with pytest.raises(OSError) as e:
            fn()
        assert e.value.errno == errno.ENAMETOOLONG, f"{name} with a 256-byte name: {e.value}"
    # 255 is fine, and a copy-up below a 255-byte directory name works
    os.mkdir(os.path.join(m, ok))
    os.rename(os.path.join(m, "a"), os.path.join(m, ok, ok))
    with open(os.path.join(m, ok, ok, "b", "bf"), "ab") as f:
        f.write(b"!")
    assert os.path.getsize(os.path.join(m, ok, ok, "b", "bf")) == 256 * 64 + 1


def test_overlay_xattrs_are_private(view):
    m = view.path
    targets = ["opq", "f1", "a", "a/b/bf", "e"]  # opaque dir, lower file, merged dirs
    os.rename(os.path.join(m, "d"), os.path.join(m, "a", "d_moved"))  # may leave a redirect in upper
    os.unlink(os.path.join(m, "e", "ef"))  # whiteout inside a merged dir
    with open(os.path.join(m, "a", "b", "bf"), "ab") as f:  # copy-up (origin xattrs in upper)
        f.write(b"x")
    os.mkdir(os.path.join(m, "gone"))  # dir over a whiteout: opaque in upper
    targets += ["a/d_moved", "gone"]
    for t in targets:
        p = os.path.join(m, t)
        names = os.listxattr(p, follow_symlinks=False)
        assert not [n for n in names if n.startswith("trusted.overlay.")], f"'{t}' lists {names}"
        for n in ("trusted.overlay.opaque", "trusted.overlay.redirect", "trusted.overlay.origin"):
            with pytest.raises(OSError) as e:
                os.getxattr(p, n, follow_symlinks=False)
            assert e.value.errno in (errno.ENODATA, errno.EPERM, errno.EOPNOTSUPP), f"getxattr {n} on '{t}'"
        for n in ("trusted.overlay.opaque", "trusted.overlay.whiteout", "trusted.overlay.x"):
            with pytest.raises(OSError, match="") as e:
                os.setxattr(p, n, b"y", follow_symlinks=False)
            assert e.value.errno in (errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP, errno.EACCES), \
                f"setxattr {n} on '{t}': {e.value}"
            with pytest.raises(OSError):
                os.removexattr(p, n, follow_symlinks=False)
    # the setxattr attempts did not change the view: opq still shows only its own entries
    assert sorted(os.listdir(os.path.join(m, "opq"))) == ["fresh", "new"]
    assert sorted(os.listdir(os.path.join(m, "gone"))) == []


def test_no_whiteout_lookalike(view):
    m = view.path
    for name in ("newwh", "f1", "a/newwh"):
        p = os.path.join(m, name)
        existed = os.path.lexists(p)
        with pytest.raises(OSError) as e:
            os.mknod(p, stat.S_IFCHR | 0o644, os.makedev(0, 0))
        assert e.value.errno in (errno.EPERM, errno.EEXIST if existed else errno.EPERM), f"mknod 0/0 '{name}'"
    assert not os.path.lexists(os.path.join(m, "newwh"))
    assert os.path.exists(os.path.join(m, "f1"))
    # other device numbers and fifos are fine for root, like kernel overlayfs
    os.mkfifo(os.path.join(m, "fifo"))
    assert stat.S_ISFIFO(os.lstat(os.path.join(m, "fifo")).st_mode)
