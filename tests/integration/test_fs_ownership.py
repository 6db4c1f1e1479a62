# SPDX-License-Identifier: LGPL-2.1-or-later
"""Ownership, ID mapping and inode numbers through a draftfs mount.

Objects created by uid 10001 (a child that setresuid's via setpriv) are
owned by 10001 in the view and in upper. With an ID mapping, a workspace
owned by 1000 with 0644 files is writable by uid 10001 through the mount,
and what 10001 creates lands in upper owned by 1000.

The mapping is written in draftfs's (and fuse-overlayfs') order, disk id
first: `uidmapping=1000:10001:1` shows disk uid 1000 as 10001 (docs/fs.md,
"ID mapping"). st_ino stays the same across copy-up and remount and equals
readdir's d_ino.
"""
import errno
import os
import stat
import subprocess
import sys

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401

USER = 10001
# security.capability: VFS_CAP_REVISION_2 | effective, permitted = CAP_NET_BIND_SERVICE
CAPS = (0x02000001).to_bytes(4, "little") + (1 << 10).to_bytes(4, "little") + bytes(12)


def as_user(code, *args, uid=USER, gid=USER):
    r = fsutil.run_as(uid, gid, [sys.executable, "-c", code] + list(args), capture_output=True, timeout=60)
    assert r.returncode == 0, f"as uid {uid}: {code!r} {args}: rc {r.returncode}: {r.stderr.decode()[-1500:]}"
    return r.stdout.decode()


CREATE = """
import os, sys
d = sys.argv[1]
with open(os.path.join(d, "file"), "w") as f: f.write("mine")
os.mkdir(os.path.join(d, "dir"))
os.symlink("file", os.path.join(d, "link"))
os.mkfifo(os.path.join(d, "fifo"))
with open(os.path.join(d, "dir", "nested"), "w") as f: f.write("nested")
"""


def owners(root, names):
    return {n: (os.lstat(os.path.join(root, n)).st_uid, os.lstat(os.path.join(root, n)).st_gid) for n in names}


NAMES = ["file", "dir", "link", "fifo", "dir/nested"]


def test_created_by_user_owned_by_user(fsenv):
    fsutil.require_impl()
    os.chmod(fsenv.base, 0o755)
    lower = fsenv.dir("lower")
    os.makedirs(os.path.join(lower, "pub"))
    os.chmod(os.path.join(lower, "pub"), 0o1777)
    os.chmod(lower, 0o755)
    m = fsenv.mount_impl([lower], name="impl")
    as_user(CREATE, os.path.join(m.path, "pub"))
    want = {n: (USER, USER) for n in NAMES}
    assert owners(os.path.join(m.path, "pub"), NAMES) == want, "owners in the view"
    assert owners(os.path.join(m.upper, "pub"), NAMES) == want, "owners in upper"
    # the copied-up parent keeps its lower owner and mode
    st = os.lstat(os.path.join(m.upper, "pub"))
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o1777)
    # sticky dir: another user cannot remove it, root can chown it
    r = fsutil.run_as(10002, 10002, ["rm", "-f", os.path.join(m.path, "pub", "file")], capture_output=True)
    assert r.returncode != 0 and os.path.exists(os.path.join(m.path, "pub", "file"))
    os.chown(os.path.join(m.path, "pub", "file"), 10003, 10004)
    assert owners(os.path.join(m.upper, "pub"), ["file"]) == {"file": (10003, 10004)}


def test_id_mapping(fsenv):
    fsutil.require_impl()
    if fsutil.IMPL == "kernel":
        pytest.skip("kernel overlayfs has no uidmapping option")
    os.chmod(fsenv.base, 0o755)
    ws = fsenv.dir("ws")
    os.chmod(ws, 0o755)
    os.makedirs(os.path.join(ws, "src"))
    for p in ("README", "src/main.c"):
        with open(os.path.join(ws, p), "w") as f:
            f.write("original\n")
        os.chmod(os.path.join(ws, p), 0o644)
    with open(os.path.join(ws, "rootfile"), "w") as f:
        f.write("root's\n")
    os.chmod(os.path.join(ws, "rootfile"), 0o644)
    for p in ("", "src", "README", "src/main.c"):
        os.lchown(os.path.join(ws, p), 1000, 1000)
    upper = fsenv.dir("upper")
    os.chown(upper, 1000, 1000)  # the view's root takes the upper root's owner, as in kernel overlayfs
    m = fsenv.mount_impl([ws], upper=upper, name="impl", opts="uidmapping=1000:10001:1,gidmapping=1000:10001:1")
    st = os.stat(m.path)
    assert (st.st_uid, st.st_gid) == (USER, USER), "the root dir (upper root, disk 1000) is shown as 10001"
    st = os.stat(os.path.join(m.path, "README"))
    assert (st.st_uid, st.st_gid) == (USER, USER), "disk 1000 is shown as 10001"
    st = os.stat(os.path.join(m.path, "rootfile"))
    assert (st.st_uid, st.st_gid) == (0, 0), "unmapped ids pass through"
    as_user("""
import os, sys
m = sys.argv[1]
with open(os.path.join(m, "README"), "a") as f: f.write("more\\n")
with open(os.path.join(m, "src", "main.c"), "w") as f: f.write("rewritten\\n")
with open(os.path.join(m, "src", "new.c"), "w") as f: f.write("new\\n")
os.mkdir(os.path.join(m, "build"))
os.rename(os.path.join(m, "src", "new.c"), os.path.join(m, "build", "new.c"))
try:
    open(os.path.join(m, "rootfile"), "a")
    sys.exit("wrote a root-owned 0644 file")
except PermissionError:
    pass
""", m.path)
    with open(os.path.join(m.path, "README")) as f:
        assert f.read() == "original\nmore\n"
    for p in ("README", "src/main.c", "build", "build/new.c"):
        st = os.lstat(os.path.join(m.path, p))
        assert (st.st_uid, st.st_gid) == (USER, USER), f"view owner of '{p}'"
        st = os.lstat(os.path.join(m.upper, p))
        assert (st.st_uid, st.st_gid) == (1000, 1000), f"upper owner of '{p}' is {st.st_uid}:{st.st_gid}"
    os.chown(os.path.join(m.path, "rootfile"), USER, USER)
    st = os.lstat(os.path.join(m.upper, "rootfile"))
    assert (st.st_uid, st.st_gid) == (1000, 1000), "chown to the view id stores the disk id"
    st = os.lstat(os.path.join(ws, "README"))
    assert (st.st_uid, st.st_size) == (1000, 9), "the workspace itself is untouched"


def dinos(path):
    with os.scandir(path) as it:
        return {e.name: e.inode() for e in it}


def distinct_files_distinct_inodes(root, when):
    """Paths sharing an st_ino must be one file: same content, same nlink, at least as many links."""
    groups = {}
    for dirpath, dirnames, files in os.walk(root):
        for n in files + dirnames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            data = fsutil.file_digest(p) if stat.S_ISREG(st.st_mode) else None
            groups.setdefault(st.st_ino, []).append((os.path.relpath(p, root), st.st_nlink, data, st.st_mode))
    for ino, g in groups.items():
        if len(g) > 1:
            same = len({(nl, d, mode) for _, nl, d, mode in g}) == 1 and g[0][1] >= len(g) \
                and stat.S_ISREG(g[0][3])
            assert same, f"{when}: different files share st_ino {ino}: {g}"


def test_inode_numbers(fsenv):
    """st_ino survives copy-up, rename and remount and equals d_ino (lower hard links aside, see below)."""
    fsutil.require_impl()
    lowers = fsutil.make_standard_lowers(fsenv.dir("layers"))
    m = fsenv.mount_impl(lowers, name="impl")
    os.mkdir(os.path.join(m.path, "newdir"))
    with open(os.path.join(m.path, "newdir", "nf"), "w") as f:
        f.write("n")
    dirs = [".", "a", "a/b", "opq", "e", "tofile", "newdir", "d"]

    def check_dino(root, when):
        for d in dirs:
            full = os.path.join(root, d)
            for name, ino in dinos(full).items():
                st = os.lstat(os.path.join(full, name))
                assert ino == st.st_ino, f"{when}: d_ino {ino} != st_ino {st.st_ino} for '{d}/{name}'"

    check_dino(m.path, "before copy-up")
    names = ["ro", "a/af", "a/b/bf", "sl_f1", "a", "a/b", "big", "exe", "a/b/c/cf"]
    before = {n: os.lstat(os.path.join(m.path, n)).st_ino for n in names}
    for n in ("f1", "a/b/bf", "big"):
        with open(os.path.join(m.path, n), "ab") as f:
            f.write(b"!")
    os.chmod(os.path.join(m.path, "ro"), 0o400)
    os.utime(os.path.join(m.path, "a"), ns=(5, 5))
    os.setxattr(os.path.join(m.path, "a/b"), "user.x", b"1")
    os.lchown(os.path.join(m.path, "sl_f1"), 0, 0)
    os.utime(os.path.join(m.path, "sl_f1"), ns=(5, 5), follow_symlinks=False)
    with open(os.path.join(m.path, "e/ef"), "r+b") as f:
        f.truncate(1)
    with open(os.path.join(m.path, "exe"), "r+b"):
        pass  # open for writing copies up
    after = {n: os.lstat(os.path.join(m.path, n)).st_ino for n in names}
    assert after == before, "st_ino changed across copy-up"
    check_dino(m.path, "after copy-up")
    os.rename(os.path.join(m.path, "a/af"), os.path.join(m.path, "a_af_moved"))
    assert os.lstat(os.path.join(m.path, "a_af_moved")).st_ino == before["a/af"], "st_ino changed across rename"
    check_dino(m.path, "after rename")
    m.stop()
    m2 = fsenv.mount_impl(lowers, upper=m.upper, work=m.work, name="again")
    moved = {n: i for n, i in before.items() if n != "a/af"}
    again = {n: os.lstat(os.path.join(m2.path, n)).st_ino for n in moved}
    assert again == moved, "st_ino changed across remount"
    assert os.lstat(os.path.join(m2.path, "a_af_moved")).st_ino == before["a/af"]
    check_dino(m2.path, "after remount")


def test_layers_on_two_filesystems_get_distinct_inodes(fsenv):
    """xino: a lower layer on one tmpfs and the upper on another number
    their inodes from the same small values; the view must not show two
    files under one st_ino (tar, rsync -H and du would take them for hard
    links). The workspace's numbers pass through; the upper's carry its
    filesystem. With xino=off they do collide, which shows the test can
    fail."""
    fsutil.require_impl("draftfs")
    fa, fb = fsenv.dir("fs_a"), fsenv.dir("fs_b")
    for d in (fa, fb):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", d], check=True)
    try:
        lower = os.path.join(fa, "lower")
        os.makedirs(os.path.join(lower, "ld"))
        # enough that the lower's inode numbers cover those the upper hands out (a few hundred up)
        for i in range(1000):
            fsutil.write_file(os.path.join(lower, "l%02d" % i), b"lower %d\n" % i)
        for i in range(10):
            fsutil.write_file(os.path.join(lower, "ld", "x%d" % i), b"x%d\n" % i)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "safe.directory=*"]
        subprocess.run(git + ["init", "-q", "repo"], cwd=lower, check=True)
        fsutil.write_file(os.path.join(lower, "repo", "a.c"), b"int a;\n")
        os.utime(os.path.join(lower, "repo", "a.c"), (1_600_000_000, 1_600_000_000))  # not racily clean
        subprocess.run(git + ["add", "a.c"], cwd=os.path.join(lower, "repo"), check=True)
        subprocess.run(git + ["commit", "-q", "-m", "a"], cwd=os.path.join(lower, "repo"), check=True)
        subprocess.run(git + ["status", "-s"], cwd=os.path.join(lower, "repo"), check=True, capture_output=True)
        upper, work = os.path.join(fb, "upper"), os.path.join(fb, "work")
        os.makedirs(upper)
        os.makedirs(work)
        m = fsenv.mount("draftfs", [lower], upper=upper, work=work, name="xino")
        os.mkdir(os.path.join(m.path, "nd"))
        for i in range(40):
            fsutil.write_file(os.path.join(m.path, "nd", "n%02d" % i), b"new %d\n" % i)
        for n in ("l03", "ld/x1"):
            with open(os.path.join(m.path, n), "ab") as f:
                f.write(b"!")
        os.chmod(os.path.join(m.path, "l05"), 0o600)
        distinct_files_distinct_inodes(m.path, "xino")
        # the index the host made stays valid in the view (st_ino, times, size as on the host): git status
        # rewrites nothing, so nothing is copied up
        r = subprocess.run(git + ["status", "--porcelain"], cwd=os.path.join(m.path, "repo"), capture_output=True)
        assert r.returncode == 0 and r.stdout == b"", r
        assert not os.path.exists(os.path.join(upper, "repo", ".git", "index"))
        views = {}
        for d in (".", "ld", "nd"):
            for name, ino in dinos(os.path.join(m.path, d)).items():
                p = os.path.normpath(os.path.join(d, name))
                st = os.lstat(os.path.join(m.path, p))
                assert ino == st.st_ino, f"d_ino {ino} != st_ino {st.st_ino} for '{p}'"
                views[p] = st.st_ino
        # the workspace's (lowerdir 0) numbers pass through, so a git index made on the host stays valid
        assert views["l00"] == os.lstat(os.path.join(lower, "l00")).st_ino
        assert views["l03"] == os.lstat(os.path.join(lower, "l03")).st_ino, "a copy keeps its origin's"
        assert views["nd/n00"] != os.lstat(os.path.join(upper, "nd", "n00")).st_ino, "the upper's carries its fs"
        m.stop()
        m2 = fsenv.mount("draftfs", [lower], upper=upper, work=work, name="xino-again")
        again = {p: os.lstat(os.path.join(m2.path, p)).st_ino for p in views}
        assert again == views, "st_ino changed across remount"
        m2.stop()
        m3 = fsenv.mount("draftfs", [lower], upper=upper, work=work, opts="xino=off", name="xino-off")
        with pytest.raises(AssertionError, match="different files share st_ino"):
            distinct_files_distinct_inodes(m3.path, "xino=off")
        m3.stop()
    finally:
        for d in (fa, fb):
            subprocess.run(["umount", "-l", d], check=False)


def test_split_hard_links_get_distinct_inodes(fsenv):
    """Copy-up splits a lower hard link (f1 / d/hl_f1, e/ef / a/b/hl_ef) into two files, as the kernel
    with index=off does; from then on they must not share an st_ino, or tar, rsync, cp -a and du take
    them for one file (tar would archive one as a hard link to the other: data loss)."""
    fsutil.require_impl()
    lowers = fsutil.make_standard_lowers(fsenv.dir("layers"))
    m = fsenv.mount_impl(lowers, name="impl")
    distinct_files_distinct_inodes(m.path, "before copy-up")
    with open(os.path.join(m.path, "f1"), "ab") as f:
        f.write(b"!")
    with open(os.path.join(m.path, "e/ef"), "r+b"):
        pass  # open for writing copies up, no data change
    for a, b in (("f1", "d/hl_f1"), ("e/ef", "a/b/hl_ef")):
        sa, sb = os.lstat(os.path.join(m.path, a)), os.lstat(os.path.join(m.path, b))
        assert (sa.st_nlink, sb.st_nlink) == (1, 2), f"copy-up of '{a}' splits it from '{b}': nlink " \
                                                    f"{sa.st_nlink}, {sb.st_nlink}"
    distinct_files_distinct_inodes(m.path, "after copy-up")
    ia, ib = os.lstat(os.path.join(m.path, "e/ef")).st_ino, os.lstat(os.path.join(m.path, "a/b/hl_ef")).st_ino
    assert ia != ib, f"e/ef (upper, nlink 1) and a/b/hl_ef (lower, nlink 2) share st_ino {ia}"
    m.stop()
    m2 = fsenv.mount_impl(lowers, upper=m.upper, work=m.work, name="again")
    distinct_files_distinct_inodes(m2.path, "after remount")


def test_split_hard_links_by_dir_move(fsenv):
    """Moving a directory that holds a lower hard link copies that file up (draftfs materialises the
    directory; the kernel makes `mv` copy it): the copy has nlink 1 and an st_ino of its own, while
    its lower partner keeps both."""
    fsutil.require_impl()
    lower = fsenv.dir("lower")
    os.makedirs(os.path.join(lower, "d", "sub"))
    with open(os.path.join(lower, "f"), "w") as f:
        f.write("shared\n")
    os.link(os.path.join(lower, "f"), os.path.join(lower, "d", "hl"))
    m = fsenv.mount_impl([lower], name="impl")
    with pytest.raises(OSError):
        os.removexattr(os.path.join(m.path, "d", "hl"), "user.none")  # caches hl's attributes
    os.mkdir(os.path.join(m.path, "x"))
    r = subprocess.run(["mv", os.path.join(m.path, "d"), os.path.join(m.path, "x", "d2")], capture_output=True)
    assert r.returncode == 0, r.stderr
    moved, partner = os.lstat(os.path.join(m.path, "x", "d2", "hl")), os.lstat(os.path.join(m.path, "f"))
    assert moved.st_nlink == 1, f"the moved copy of a lower hard link shows nlink {moved.st_nlink}"
    assert partner.st_nlink == 2
    assert moved.st_ino != partner.st_ino, f"moved 'x/d2/hl' and lower 'f' share st_ino {moved.st_ino}"
    distinct_files_distinct_inodes(m.path, "after the move")


KILL = """
import os, sys
op, p = sys.argv[1], sys.argv[2]
if op == "write":
    fd = os.open(p, os.O_WRONLY)
    os.pwrite(fd, b"w", 0)
    os.pwrite(fd, b"w", 1)
    os.close(fd)
elif op == "truncate":
    os.truncate(p, 1)
elif op == "otrunc":
    os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
"""


@pytest.mark.parametrize("where", ["upper", "lower"])
@pytest.mark.parametrize("op", ["write", "truncate", "otrunc"])
def test_write_kills_setid_bits(fsenv, op, where):
    """Writing or truncating a set-id file as another user clears S_ISUID and S_ISGID (with group exec), as
    the kernel does on any filesystem, also when the data passes through the daemon as root; root keeps them."""
    fsutil.require_impl()
    os.chmod(fsenv.base, 0o755)
    lower = fsenv.dir("lower")
    os.chmod(lower, 0o755)
    for name in ("f", "g"):
        with open(os.path.join(lower, name), "wb") as f:
            f.write(b"0123456789")
        os.chown(os.path.join(lower, name), USER, USER)
        os.chmod(os.path.join(lower, name), 0o6777)
    m = fsenv.mount_impl([lower], name="impl")
    p, g = os.path.join(m.path, "f"), os.path.join(m.path, "g")
    if where == "upper":
        for x in (p, g):
            os.chmod(x, 0o6777)  # copied up, still set-id
    as_user(KILL, op, p, uid=USER + 1, gid=USER + 1)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o777, oct(os.stat(p).st_mode)
    # root (CAP_FSETID) keeps the bits
    with open(g, "r+b") as f:
        f.write(b"r")
    assert stat.S_IMODE(os.stat(g).st_mode) == 0o6777, oct(os.stat(g).st_mode)
    m.stop()
    if fsutil.IMPL != "kernel":
        up = os.path.join(m.upper, "f")
        assert stat.S_IMODE(os.stat(up).st_mode) == 0o777, "upper keeps set-id bits: " + oct(os.stat(up).st_mode)


def test_write_drops_file_caps(fsenv):
    """A write clears security.capability (file capabilities), through the daemon as on any filesystem."""
    fsutil.require_impl()
    os.chmod(fsenv.base, 0o755)
    lower = fsenv.dir("lower")
    os.chmod(lower, 0o755)
    with open(os.path.join(lower, "f"), "wb") as f:
        f.write(b"0123456789")
    os.chmod(os.path.join(lower, "f"), 0o777)
    m = fsenv.mount_impl([lower], name="impl")
    p = os.path.join(m.path, "f")
    os.setxattr(p, "security.capability", CAPS)
    assert os.getxattr(p, "security.capability") == CAPS
    as_user(KILL, "write", p, uid=USER + 1, gid=USER + 1)
    with pytest.raises(OSError):
        os.getxattr(p, "security.capability")


def test_xattrs_of_unsearchable_dir_without_dac_caps(fsenv, monkeypatch):
    """A daemon without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH still reads the xattrs of a directory it
    cannot search (mode 0600), in lower and in upper. draftfs reads a directory's xattrs with
    getxattrat(fd, "."), a path walk that needs search permission; the /proc magic link, its fallback, does not."""
    if fsutil.IMPL != "draftfs":
        pytest.skip("draftfs's own xattr path")
    fsutil.require_impl()
    os.chmod(fsenv.base, 0o755)
    lower = fsenv.dir("lower")
    os.mkdir(os.path.join(lower, "d"))
    os.setxattr(os.path.join(lower, "d"), "user.k", b"low")
    os.chmod(os.path.join(lower, "d"), 0o600)
    wrapper = os.path.join(fsenv.base, "draftfs-nodac")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec setpriv --bounding-set=-dac_override,-dac_read_search %s \"$@\"\n"
                % fsutil.draftfs_bin())
    os.chmod(wrapper, 0o755)
    monkeypatch.setattr(fsutil, "draftfs_bin", lambda: wrapper)
    m = fsenv.mount_impl([lower], name="nodac")
    try:
        with open(f"/proc/{m.pid}/status") as f:
            eff = int(next(ln for ln in f if ln.startswith("CapEff:")).split()[1], 16)
        assert not eff & (1 << 1 | 1 << 2), "the daemon still has CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH"
        assert os.getxattr(os.path.join(m.path, "d"), "user.k") == b"low"
        up = os.path.join(m.path, "u")
        os.mkdir(up)
        os.setxattr(up, "user.k", b"up")
        os.chmod(up, 0o600)
        assert os.getxattr(up, "user.k") == b"up"
    finally:
        os.chmod(os.path.join(lower, "d"), 0o700)


def test_absent_security_xattrs_forgotten_on_change(fsenv):
    """draftfs remembers that a file has no security.capability or security.selinux (the kernel asks for the
    first on every chown, ls -l for the second on every entry); a setxattr or removexattr through the mount
    makes it read the file again, so the view never shows an xattr missing that is there."""
    if fsutil.IMPL != "draftfs":
        pytest.skip("draftfs's own xattr path")
    fsutil.require_impl()
    lower = fsenv.dir("lower")
    xattrs = (("security.capability", CAPS), ("security.selinux", b"system_u:object_r:tmp_t:s0\0"))
    for name, _ in xattrs:
        with open(os.path.join(lower, "low" + name[9:]), "wb") as f:
            f.write(b"data")
    m = fsenv.mount_impl([lower], name="absent")

    def absent(v, name):
        for _ in range(2):  # the second answer is the daemon's memory of the first
            with pytest.raises(OSError) as e:
                os.getxattr(v, name)
            assert e.value.errno == errno.ENODATA, name

    for name, value in xattrs:
        # a lower file: the first setxattr copies it up (a metacopy: remembered no more)
        v = os.path.join(m.path, "low" + name[9:])
        absent(v, name)
        os.setxattr(v, name, value)
        assert os.getxattr(v, name) == value
        # a file made through the mount, its data in upper: remembered until changed
        v = os.path.join(m.path, "new" + name[9:])
        with open(v, "wb") as f:
            f.write(b"data")
        absent(v, name)
        os.setxattr(v, name, value)
        assert os.getxattr(v, name) == value
        os.removexattr(v, name)
        absent(v, name)
        os.setxattr(v, name, value)
        assert os.getxattr(v, name) == value
        os.chown(v, 0, 0)  # the kernel asks for caps on chown, and the upper filesystem drops them
        if name == "security.capability":
            absent(v, name)
        else:
            assert os.getxattr(v, name) == value
