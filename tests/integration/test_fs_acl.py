# SPDX-License-Identifier: LGPL-2.1-or-later
"""POSIX ACLs through a draftfs mount (acl=on, the default).

The kernel enforces the ACLs of lower and upper objects (FUSE_POSIX_ACL):
a named-user entry denies or grants what the mode bits alone would not.
setfacl through the mount copies the file up, and upper carries the ACL in
the kernel's xattr form. A new object inherits its parent's default ACL and
the umask applies only where there is none, also when the object replaces a
whiteout (draftfs builds it in work/ first). With an ID mapping, the ids in
ACL entries are mapped like st_uid. A discard forgets the kernel's cached
ACL. acl=off keeps the old mode-bits-only behaviour.

The checks of semantics run on kernel overlayfs too (DRAFTFS_IMPL=kernel);
those of draftfs's own options and commands skip there.
"""
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401

USER, OTHER = 10001, 10002


def need_acls(fsenv):
    fsutil.require_impl()
    if not shutil.which("setfacl") or not shutil.which("getfacl"):
        pytest.skip("setfacl/getfacl not installed (Debian package acl)")
    probe = os.path.join(fsenv.dir("probe"), "f")
    open(probe, "w").close()
    r = subprocess.run(["setfacl", "-m", f"u:{USER}:r", probe], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"the scratch filesystem has no POSIX ACLs: {r.stderr.decode().strip()}")
    os.chmod(fsenv.base, 0o755)


def need_draftfs():
    if fsutil.IMPL != "draftfs":
        pytest.skip("a draftfs option or command")


def setfacl(*args):
    r = subprocess.run(["setfacl"] + list(args), capture_output=True)
    assert r.returncode == 0, f"setfacl {args}: {r.stderr.decode()}"


def acl(path):
    """The ACL entries of @path, numeric ids, no header, no effective-rights comments."""
    r = subprocess.run(["getfacl", "-n", "-E", "-p", "--omit-header", path], capture_output=True)
    assert r.returncode == 0, f"getfacl {path}: {r.stderr.decode()}"
    return [line for line in r.stdout.decode().splitlines() if line]


def can_read(uid, path):
    r = fsutil.run_as(uid, uid, ["cat", path], capture_output=True, timeout=60)
    if r.returncode == 0:
        return True
    assert b"Permission denied" in r.stderr, f"uid {uid} cat {path}: {r.stderr.decode()}"
    return False


def lower_with(fsenv, files):
    """A lower dir holding @files: {name: (data, mode, setfacl -m spec or None)}."""
    lower = fsenv.dir("lower")
    os.chmod(lower, 0o755)
    for name, (data, mode, spec) in files.items():
        p = os.path.join(lower, name)
        fsutil.write_file(p, data, mode)
        os.chmod(p, mode)
        if spec:
            setfacl("-m", spec, p)
    return lower


def test_lower_acl_enforced(fsenv):
    need_acls(fsenv)
    lower = lower_with(fsenv, {"deny": (b"secret\n", 0o644, f"u:{USER}:---"),
                               "allow": (b"open\n", 0o600, f"u:{USER}:r")})
    m = fsenv.mount_impl([lower], name="impl")
    deny, allow = os.path.join(m.path, "deny"), os.path.join(m.path, "allow")
    assert not can_read(USER, deny), "a named-user entry denies what 'other' would allow"
    assert can_read(OTHER, deny), "other users keep the mode bits"
    assert can_read(USER, allow), "a named-user entry grants what the mode bits do not"
    assert not can_read(OTHER, allow)
    assert stat.S_IMODE(os.stat(allow).st_mode) == 0o640, "group bits show the ACL mask"
    assert f"user:{USER}:r--" in acl(allow)
    assert not os.path.exists(os.path.join(m.upper, "allow")), "reading the ACL copies nothing up"


def test_acl_off_is_mode_bits_only(fsenv):
    need_acls(fsenv)
    need_draftfs()
    lower = lower_with(fsenv, {"deny": (b"secret\n", 0o644, f"u:{USER}:---"),
                               "allow": (b"open\n", 0o600, f"u:{USER}:r")})
    m = fsenv.mount_impl([lower], name="impl", opts="acl=off")
    assert can_read(USER, os.path.join(m.path, "deny")), "acl=off: ACLs are not enforced"
    assert not can_read(USER, os.path.join(m.path, "allow"))
    # still stored and shown as xattrs
    assert f"user:{USER}:r--" in acl(os.path.join(m.path, "allow"))


def test_setfacl_through_the_mount(fsenv):
    need_acls(fsenv)
    lower = lower_with(fsenv, {"f": (b"data\n", 0o644, None)})
    m = fsenv.mount_impl([lower], name="impl")
    f = os.path.join(m.path, "f")
    assert can_read(USER, f)
    setfacl("-m", f"u:{USER}:---", f)
    assert not can_read(USER, f), "the new ACL applies at once"
    assert can_read(OTHER, f)
    up = os.path.join(m.upper, "f")
    assert os.path.exists(up), "setfacl copies the file up"
    assert f"user:{USER}:---" in acl(up), "upper carries the ACL in the kernel's form"
    assert f"user:{USER}:---" in acl(f)
    assert fsutil.read_file(f) == b"data\n"
    # chmod recomputes the mask, and the kernel forgets the ACL it cached
    os.chmod(f, 0o604)
    assert "mask::---" in acl(f)
    setfacl("-x", f"u:{USER}", f)
    assert can_read(USER, f), "a removed entry stops applying at once"
    assert "mask::---" not in acl(f)


def test_setfacl_clears_sgid_outside_the_group(fsenv):
    """As on any filesystem: the owner setting an access ACL loses S_ISGID
    unless it is in the file's group (its own gid or a supplementary one);
    root keeps it."""
    need_acls(fsenv)
    group = 10005
    files = {n: (b"x\n", 0o2775, None) for n in ("out", "own", "supp", "root", "dir")}
    lower = lower_with(fsenv, files)
    os.unlink(os.path.join(lower, "dir"))
    os.mkdir(os.path.join(lower, "dir"))
    for n, gid in (("out", group), ("own", USER), ("supp", group), ("root", group), ("dir", group)):
        os.chown(os.path.join(lower, n), USER, gid)
        os.chmod(os.path.join(lower, n), 0o2775)  # after the chown, which clears it
    assert all(os.stat(os.path.join(lower, n)).st_mode & stat.S_ISGID for n in files)
    m = fsenv.mount_impl([lower], name="impl")

    def setfacl_as(name, groups=None):
        argv = ["setpriv", f"--reuid={USER}", f"--regid={USER}"]
        argv += [f"--groups={groups}"] if groups else ["--clear-groups"]
        r = subprocess.run(argv + ["--", "setfacl", "-m", f"u:{OTHER}:r", os.path.join(m.path, name)],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr.decode()

    def mode(name):
        return stat.S_IMODE(os.stat(os.path.join(m.path, name)).st_mode)

    setfacl_as("out")
    setfacl_as("own")
    setfacl_as("supp", groups=str(group))
    setfacl_as("dir")
    setfacl("-m", f"u:{OTHER}:r", os.path.join(m.path, "root"))
    assert mode("out") == 0o775, "not in the group: S_ISGID falls"
    assert mode("dir") == 0o775, "directories too"
    assert mode("own") == 0o2775, "the caller's own gid"
    assert mode("supp") == 0o2775, "a supplementary group"
    assert mode("root") == 0o2775, "root keeps it"
    assert f"user:{OTHER}:r--" in acl(os.path.join(m.path, "out"))
    if fsutil.IMPL == "draftfs":
        assert stat.S_IMODE(os.stat(os.path.join(m.upper, "out")).st_mode) == 0o775


CREATE = """
import os, sys
os.umask(int(sys.argv[1], 8))
d = sys.argv[2]
os.close(os.open(os.path.join(d, "f"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o666))
os.mkdir(os.path.join(d, "sub"), 0o777)
os.mkfifo(os.path.join(d, "fifo"), 0o666)
"""


def create_in(d, umask):
    r = subprocess.run([sys.executable, "-c", CREATE, "%o" % umask, d], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()


def modes(d, names=("f", "sub", "fifo")):
    return {n: stat.S_IMODE(os.lstat(os.path.join(d, n)).st_mode) for n in names}


def test_default_acl_and_umask(fsenv):
    need_acls(fsenv)
    lower = fsenv.dir("lower")
    os.chmod(lower, 0o755)
    m = fsenv.mount_impl([lower], name="impl")
    plain, shared = os.path.join(m.path, "plain"), os.path.join(m.path, "shared")
    os.mkdir(plain, 0o755)
    os.mkdir(shared, 0o755)
    setfacl("-d", "-m", f"u:{USER}:rwx", shared)
    # no default ACL: the caller's umask applies
    create_in(plain, 0o027)
    assert modes(plain) == {"f": 0o640, "sub": 0o750, "fifo": 0o640}
    # a default ACL: inherited, and the umask does not apply
    create_in(shared, 0o077)
    assert modes(shared) == {"f": 0o664, "sub": 0o775, "fifo": 0o664}
    assert acl(os.path.join(shared, "f")) == ["user::rw-", f"user:{USER}:rwx", "group::r-x", "mask::rw-",
                                              "other::r--"]
    sub = acl(os.path.join(shared, "sub"))
    assert f"user:{USER}:rwx" in sub and f"default:user:{USER}:rwx" in sub, sub
    assert can_read(USER, os.path.join(shared, "f"))


def test_default_acl_set_after_creates(fsenv):
    """draftfs remembers that a dir has no default ACL (it then applies the umask itself, with no umask()
    calls): a default ACL set through the mount afterwards must be inherited by the next creates, and the
    umask no longer apply; removed again, the umask is back."""
    need_acls(fsenv)
    lower = fsenv.dir("lower")
    os.chmod(lower, 0o755)
    m = fsenv.mount_impl([lower], name="impl")
    d = os.path.join(m.path, "d")
    os.mkdir(d, 0o755)

    def again(umask):
        for n in ("f", "fifo"):
            os.unlink(os.path.join(d, n))
        os.rmdir(os.path.join(d, "sub"))
        create_in(d, umask)

    create_in(d, 0o027)
    assert modes(d) == {"f": 0o640, "sub": 0o750, "fifo": 0o640}
    again(0o027)
    assert modes(d) == {"f": 0o640, "sub": 0o750, "fifo": 0o640}, "the remembered answer is the same"
    setfacl("-d", "-m", f"u:{USER}:rwx", d)
    again(0o077)
    assert modes(d) == {"f": 0o664, "sub": 0o775, "fifo": 0o664}, "the new default ACL applies, not the umask"
    assert f"user:{USER}:rwx" in acl(os.path.join(d, "f"))
    setfacl("-k", d)
    again(0o027)
    assert modes(d) == {"f": 0o640, "sub": 0o750, "fifo": 0o640}, "no default ACL: the umask again"
    assert f"user:{USER}:rwx" not in acl(os.path.join(d, "f"))


def test_default_acl_over_whiteout(fsenv):
    """A name that hides a lower entry: the new object is built elsewhere and moved over the whiteout."""
    need_acls(fsenv)
    lower = fsenv.dir("lower")
    os.chmod(lower, 0o755)
    d = os.path.join(lower, "d")
    os.mkdir(d, 0o755)
    setfacl("-d", "-m", f"g:{USER}:rwx", d)
    for n in ("f", "fifo"):
        fsutil.write_file(os.path.join(d, n), b"old\n")
    os.mkdir(os.path.join(d, "sub"))
    m = fsenv.mount_impl([lower], name="impl")
    md = os.path.join(m.path, "d")
    for n in ("f", "fifo"):
        os.unlink(os.path.join(md, n))
    os.rmdir(os.path.join(md, "sub"))
    create_in(md, 0o077)
    assert modes(md) == {"f": 0o664, "sub": 0o775, "fifo": 0o664}
    assert f"group:{USER}:rwx" in acl(os.path.join(md, "f"))
    sub = acl(os.path.join(md, "sub"))
    assert f"group:{USER}:rwx" in sub and f"default:group:{USER}:rwx" in sub, sub
    assert os.listdir(os.path.join(md, "sub")) == [], "the new dir is opaque"
    if fsutil.IMPL == "draftfs":
        left = [e for e in os.scandir(os.path.join(m.work, "work")) if e.is_dir(follow_symlinks=False)]
        assert left == [], f"no build dir left in work/: {[e.name for e in left]}"


def test_acl_ids_follow_the_id_mapping(fsenv):
    need_acls(fsenv)
    need_draftfs()
    lower = lower_with(fsenv, {"f": (b"data\n", 0o600, f"u:1000:r,u:4242:r,g:1000:r")})
    m = fsenv.mount_impl([lower], name="impl", opts="uidmapping=1000:10001:1,gidmapping=1000:10001:1")
    f = os.path.join(m.path, "f")
    assert {"user:10001:r--", "user:4242:r--", "group:10001:r--"} <= set(acl(f)), acl(f)
    assert can_read(10001, f), "the mapped entry grants the view's uid"
    setfacl("-m", "u:10001:---,g:10001:rw", f)
    assert not can_read(10001, f)
    on_disk = acl(os.path.join(m.upper, "f"))
    assert {"user:1000:---", "user:4242:r--", "group:1000:rw-"} <= set(on_disk), on_disk


def test_discard_forgets_the_cached_acl(fsenv):
    need_acls(fsenv)
    need_draftfs()
    lower = lower_with(fsenv, {"f": (b"data\n", 0o644, None)})
    m = fsenv.mount_impl([lower], name="impl")
    f = os.path.join(m.path, "f")
    setfacl("-m", f"u:{USER}:---", f)
    assert not can_read(USER, f)  # the kernel holds the ACL now
    deadline = time.monotonic() + 20
    while True:  # the control socket comes up right after the mount
        r = subprocess.run([fsutil.draftfs_bin(), "discard", m.path, "f"], capture_output=True, timeout=60)
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert r.returncode == 0, r.stderr.decode()
    assert can_read(USER, f), "after a discard the lower file's (empty) ACL applies"
    assert not os.path.exists(os.path.join(m.upper, "f"))
