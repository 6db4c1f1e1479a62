# SPDX-License-Identifier: LGPL-2.1-or-later
"""Metadata-only copy-up (metacopy=on, the default).

A chmod, chown, utime, xattr change, rename or link of a lower regular file
puts a file without data blocks in upper, carrying the metadata plus
trusted.overlay.metacopy and an absolute trusted.overlay.redirect to its
data below. Opening it for writing or truncating it copies the data in
place (as does the first write of a lower file that never had a metacopy),
marks the file with this boot's id and leaves the sync to the finalizer:
an fsync, the unmount or the finalizer thread make it a plain file. These tests look at the upper directly (the on-disk format), at the
view, across remounts and kills, and have the kernel read the upper
(metacopy=on). Uppers the kernel wrote with metacopy=on are read too, and
hand-made bad redirects must fail with EIO without reaching outside the
lower layers.
"""
import errno
import os
import stat
import struct
import subprocess
import sys
import time

import pytest

from fsutil import KERNEL_VERIFY_OPTS, fsenv, require_impl, write_file, xattr  # noqa: F401
from fsutil import read_file as read

MC = "trusted.overlay.metacopy"
REDIRECT = "trusted.overlay.redirect"
FILLED = "trusted.draftbox.filled"
BIG = 1 << 20


def data(seed, n=BIG):
    out = bytearray()
    x = seed
    while len(out) < n:
        x = (x * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        out += x.to_bytes(8, "little")
    return bytes(out[:n])


def assert_metacopy(upper_file, redirect):
    st = os.lstat(upper_file)
    assert xattr(upper_file, MC) is not None, f"{upper_file} is not a metacopy"
    assert xattr(upper_file, REDIRECT) == os.fsencode(redirect)
    # No data blocks: at most one block for the xattrs that do not fit the inode.
    assert st.st_blocks * 512 <= 8192 < st.st_size, f"{upper_file} holds data: {st.st_blocks} blocks"


def assert_full_copy(upper_file, content):
    assert xattr(upper_file, MC) is None and xattr(upper_file, REDIRECT) is None
    assert read(upper_file) == content
    assert os.lstat(upper_file).st_blocks * 512 >= len(content) // 2


def sync_view(path):
    """fsync through the mount: finalizes a deferred copy-up of the file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lower_tree(fsenv):
    lower = fsenv.dir("lower")
    os.makedirs(os.path.join(lower, "src"))
    for name, seed in (("a.bin", 1), ("b.bin", 2), ("c.bin", 3), ("d.bin", 4), ("e.bin", 5)):
        write_file(os.path.join(lower, "src", name), data(seed))
    write_file(os.path.join(lower, "src", "small.txt"), b"small\n")
    os.makedirs(os.path.join(lower, "dst"))
    return lower


def test_metadata_changes_copy_no_data(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower])
    v = os.path.join(m.path, "src")
    os.chmod(os.path.join(v, "a.bin"), 0o600)
    os.chown(os.path.join(v, "b.bin"), 1234, 5678)
    os.utime(os.path.join(v, "c.bin"), (1_000_000_000, 1_000_000_000))
    os.setxattr(os.path.join(v, "d.bin"), "user.tag", b"v1")
    for name, seed in (("a.bin", 1), ("b.bin", 2), ("c.bin", 3), ("d.bin", 4)):
        assert_metacopy(os.path.join(m.upper, "src", name), "/src/" + name)
        assert read(os.path.join(v, name)) == data(seed)
        lst = os.lstat(os.path.join(lower, "src", name))
        vst = os.lstat(os.path.join(v, name))
        assert vst.st_size == BIG and vst.st_blocks == lst.st_blocks, "st_blocks must be the data's"
        assert vst.st_ino == lst.st_ino
        assert not [x for x in os.listxattr(os.path.join(v, name)) if x.startswith("trusted.")]
    assert stat.S_IMODE(os.lstat(os.path.join(v, "a.bin")).st_mode) == 0o600
    st = os.lstat(os.path.join(v, "b.bin"))
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    assert os.lstat(os.path.join(v, "c.bin")).st_mtime == 1_000_000_000
    assert os.getxattr(os.path.join(v, "d.bin"), "user.tag") == b"v1"
    # The lower layer is untouched.
    assert stat.S_IMODE(os.lstat(os.path.join(lower, "src", "a.bin")).st_mode) == 0o644
    # The same after a remount, and through the kernel reading this upper.
    m.stop()
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work)
    assert read(os.path.join(m.path, "src", "c.bin")) == data(3)
    assert os.lstat(os.path.join(m.path, "src", "b.bin")).st_uid == 1234
    m.stop()
    k = fsenv.mount("kernel", [lower], upper=m.upper, opts=KERNEL_VERIFY_OPTS)
    for name, seed in (("a.bin", 1), ("b.bin", 2), ("c.bin", 3), ("d.bin", 4)):
        assert read(os.path.join(k.path, "src", name)) == data(seed)
    assert os.lstat(os.path.join(k.path, "src", "c.bin")).st_mtime == 1_000_000_000


def test_write_open_copies_data_in_place(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower])
    p = os.path.join(m.path, "src", "a.bin")
    up = os.path.join(m.upper, "src", "a.bin")
    os.chmod(p, 0o640)
    os.setxattr(p, "user.keep", b"yes")
    # A file capability (v2: cap_net_raw permitted), which the kernel drops on any write to the file.
    caps = struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0)
    os.setxattr(p, "security.capability", caps)
    os.utime(p, (1_100_000_000, 1_200_000_000))
    ino = os.lstat(p).st_ino
    assert_metacopy(up, "/src/a.bin")
    reader = os.open(p, os.O_RDONLY)
    fd = os.open(p, os.O_WRONLY)  # copies the data up, writes nothing
    os.close(fd)
    sync_view(p)
    assert_full_copy(up, data(1))
    assert xattr(up, FILLED) is None
    st = os.lstat(p)
    assert st.st_mtime == 1_200_000_000, "the data copy-up changed the file's mtime"
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_ino == ino
    assert os.getxattr(p, "user.keep") == b"yes"
    assert os.getxattr(p, "security.capability") == caps, "the data copy-up dropped the file capability"
    with open(p, "ab") as f:
        f.write(b"tail")
    assert read(p) == data(1) + b"tail"
    assert read(up) == data(1) + b"tail"
    assert os.pread(reader, 16, 0) == data(1)[:16]
    os.close(reader)
    assert read(os.path.join(lower, "src", "a.bin")) == data(1)


def test_truncate_copies_what_survives(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower])
    v = os.path.join(m.path, "src")
    for name in ("a.bin", "b.bin", "c.bin"):
        os.chmod(os.path.join(v, name), 0o600)
    os.truncate(os.path.join(v, "a.bin"), 100)
    assert read(os.path.join(v, "a.bin")) == data(1)[:100]
    sync_view(os.path.join(v, "a.bin"))
    assert_full_copy(os.path.join(m.upper, "src", "a.bin"), data(1)[:100])
    fd = os.open(os.path.join(v, "b.bin"), os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    assert read(os.path.join(v, "b.bin")) == b""
    sync_view(os.path.join(v, "b.bin"))
    assert xattr(os.path.join(m.upper, "src", "b.bin"), MC) is None
    os.truncate(os.path.join(v, "c.bin"), BIG + 10)
    assert read(os.path.join(v, "c.bin")) == data(3) + bytes(10)
    assert stat.S_IMODE(os.lstat(os.path.join(v, "c.bin")).st_mode) == 0o600


def test_rename_and_link_keep_their_data(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower])
    v = m.path
    os.chmod(os.path.join(v, "src", "a.bin"), 0o600)
    os.rename(os.path.join(v, "src", "a.bin"), os.path.join(v, "dst", "moved.bin"))
    os.link(os.path.join(v, "dst", "moved.bin"), os.path.join(v, "dst", "linked.bin"))
    os.utime(os.path.join(v, "src", "b.bin"))
    os.rename(os.path.join(v, "src"), os.path.join(v, "src2"))  # a merged dir: moved as a copy
    assert_metacopy(os.path.join(m.upper, "dst", "moved.bin"), "/src/a.bin")
    # The moved dir's lower files are metacopies too (no data copied), its upper ones are linked.
    assert_metacopy(os.path.join(m.upper, "src2", "c.bin"), "/src/c.bin")
    assert_metacopy(os.path.join(m.upper, "src2", "b.bin"), "/src/b.bin")
    assert xattr(os.path.join(m.upper, "src2", "small.txt"), REDIRECT) == b"/src/small.txt"
    assert not os.path.exists(os.path.join(v, "src"))
    for path, seed in (("dst/moved.bin", 1), ("dst/linked.bin", 1), ("src2/b.bin", 2), ("src2/c.bin", 3)):
        assert read(os.path.join(v, path)) == data(seed), path
    assert os.lstat(os.path.join(v, "dst", "linked.bin")).st_nlink == 2
    # Removing a moved metacopy where nothing lies below leaves no whiteout.
    os.mkdir(os.path.join(v, "fresh"))
    os.rename(os.path.join(v, "dst", "linked.bin"), os.path.join(v, "fresh", "x.bin"))
    os.unlink(os.path.join(v, "fresh", "x.bin"))
    assert os.listdir(os.path.join(m.upper, "fresh")) == []
    m.stop()
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work)
    for path, seed in (("dst/moved.bin", 1), ("src2/b.bin", 2), ("src2/a.bin", None)):
        p = os.path.join(m.path, path)
        if seed is None:
            assert not os.path.exists(p)
        else:
            assert read(p) == data(seed), path
    with open(os.path.join(m.path, "dst", "moved.bin"), "r+b") as f:
        f.write(b"HEAD")
    assert read(os.path.join(m.path, "dst", "moved.bin")) == b"HEAD" + data(1)[4:]
    m.stop()
    k = fsenv.mount("kernel", [lower], upper=m.upper, opts=KERNEL_VERIFY_OPTS)
    assert read(os.path.join(k.path, "dst", "moved.bin")) == b"HEAD" + data(1)[4:]
    assert read(os.path.join(k.path, "src2", "b.bin")) == data(2)
    assert read(os.path.join(k.path, "src2", "c.bin")) == data(3)
    assert read(os.path.join(k.path, "src2", "small.txt")) == b"small\n"


def test_metacopy_off_copies_data(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower], opts="metacopy=off")
    os.chmod(os.path.join(m.path, "src", "a.bin"), 0o600)
    assert_full_copy(os.path.join(m.upper, "src", "a.bin"), data(1))


def test_killed_daemon_leaves_a_valid_metacopy(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower])
    for name in ("a.bin", "b.bin", "c.bin"):
        os.chmod(os.path.join(m.path, "src", name), 0o600)
    with open(os.path.join(m.path, "src", "b.bin"), "ab") as f:
        f.write(b"+")
    m.kill()
    m.stop(check=False)
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work)
    assert read(os.path.join(m.path, "src", "a.bin")) == data(1)
    assert read(os.path.join(m.path, "src", "b.bin")) == data(2) + b"+"
    assert stat.S_IMODE(os.lstat(os.path.join(m.path, "src", "c.bin")).st_mode) == 0o600


def kernel_metacopy_upper(fsenv, lower):
    """An upper the kernel wrote with metacopy=on: a relative and an absolute redirect."""
    upper, work, mnt = fsenv.dir("k.upper"), fsenv.dir("k.work"), fsenv.dir("k.mnt")
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={lower},upperdir={upper},workdir={work},metacopy=on,index=off,xino=off",
                        mnt], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"kernel overlayfs refuses metacopy=on here: {r.stderr.strip()}")
    try:
        os.chmod(os.path.join(mnt, "src", "a.bin"), 0o600)
        os.rename(os.path.join(mnt, "src", "a.bin"), os.path.join(mnt, "src", "a2.bin"))
        os.chmod(os.path.join(mnt, "src", "b.bin"), 0o600)
        os.rename(os.path.join(mnt, "src", "b.bin"), os.path.join(mnt, "dst", "b.bin"))
        os.chmod(os.path.join(mnt, "src", "c.bin"), 0o600)
    finally:
        subprocess.run(["umount", mnt], check=True)
    return upper


def test_reads_kernel_metacopy_upper(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    upper = kernel_metacopy_upper(fsenv, lower)
    if xattr(os.path.join(upper, "src", "a2.bin"), MC) is None:
        pytest.skip("the kernel did not write a metacopy")
    assert xattr(os.path.join(upper, "src", "a2.bin"), REDIRECT) == b"a.bin"
    m = fsenv.mount("draftfs", [lower], upper=upper)
    v = m.path
    assert read(os.path.join(v, "src", "a2.bin")) == data(1)
    assert read(os.path.join(v, "dst", "b.bin")) == data(2)
    assert read(os.path.join(v, "src", "c.bin")) == data(3)
    assert sorted(os.listdir(os.path.join(v, "src"))) == ["a2.bin", "c.bin", "d.bin", "e.bin", "small.txt"]
    # A relative redirect cannot move to another dir: the data comes up first (the file stays marked, its
    # metacopy and redirect xattrs kept, until the finalizer, an fsync or the unmount syncs it).
    os.rename(os.path.join(v, "src", "a2.bin"), os.path.join(v, "dst", "a3.bin"))
    assert read(os.path.join(upper, "dst", "a3.bin")) == data(1)
    sync_view(os.path.join(v, "dst", "a3.bin"))
    assert_full_copy(os.path.join(upper, "dst", "a3.bin"), data(1))
    # An absolute one can, and a metacopy without redirect is moved with an absolute one.
    os.rename(os.path.join(v, "dst", "b.bin"), os.path.join(v, "b.bin"))
    assert_metacopy(os.path.join(upper, "b.bin"), "/src/b.bin")
    os.rename(os.path.join(v, "src", "c.bin"), os.path.join(v, "dst", "c.bin"))
    assert read(os.path.join(v, "dst", "c.bin")) == data(3)
    m.stop()
    m = fsenv.mount("draftfs", [lower], upper=upper, work=m.work)
    for path, seed in (("dst/a3.bin", 1), ("b.bin", 2), ("dst/c.bin", 3)):
        assert read(os.path.join(m.path, path)) == data(seed), path


@pytest.mark.parametrize("redirect", [b"/../outside/secret", b"/src/../../outside/secret", b"/link/secret",
                                      b"/src", b"/missing", b"a/b", b"", b"/src//a.bin", b"/src/a.bin\0x"])
def test_bad_redirect_is_eio(fsenv, redirect):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    outside = fsenv.dir("outside")
    write_file(os.path.join(outside, "secret"), b"SECRET")
    os.symlink(outside, os.path.join(lower, "link"))
    upper = fsenv.dir("hand.upper")
    os.makedirs(os.path.join(upper, "dst"))
    for name, value in (("bad.bin", redirect), ("good.bin", b"/src/a.bin")):
        p = os.path.join(upper, "dst", name)
        with open(p, "wb") as f:
            f.truncate(BIG)
        os.setxattr(p, MC, b"")
        os.setxattr(p, REDIRECT, value)
    m = fsenv.mount("draftfs", [lower], upper=upper)
    bad = os.path.join(m.path, "dst", "bad.bin")
    with pytest.raises(OSError) as e:
        read(bad)
    assert e.value.errno == errno.EIO, f"redirect {redirect!r}: {e.value}"
    assert read(os.path.join(m.path, "dst", "good.bin")) == data(1)
    assert "bad.bin" in os.listdir(os.path.join(m.path, "dst"))


def test_quota_counts_no_metacopy_data(fsenv):
    """A metacopy holds no data: the byte quota charges it nothing, also after a remount (which counts the upper
    afresh), and charges its size when its data comes up."""
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    opts = "quota_bytes=%d" % (3 * BIG + 4096)
    m = fsenv.mount("draftfs", [lower], opts=opts)
    for name in ("a.bin", "b.bin", "c.bin", "d.bin", "e.bin"):
        os.chmod(os.path.join(m.path, "src", name), 0o600)
    write_file(os.path.join(m.path, "new1.bin"), data(9, 2 * BIG))
    m.stop()
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work, opts=opts)
    write_file(os.path.join(m.path, "new2.bin"), data(10, BIG // 2))  # 2.5 MiB of 3 used
    with pytest.raises(OSError) as e:
        with open(os.path.join(m.path, "src", "a.bin"), "ab") as f:  # its 1 MiB comes up: over the quota
            f.write(b"x")
    assert e.value.errno == errno.ENOSPC
    assert read(os.path.join(m.path, "src", "a.bin")) == data(1)
    os.unlink(os.path.join(m.path, "new2.bin"))
    with open(os.path.join(m.path, "src", "a.bin"), "ab") as f:
        f.write(b"x")
    assert read(os.path.join(m.path, "src", "a.bin")) == data(1) + b"x"


def test_a_big_copy_up_holds_up_no_other(fsenv):
    """The copy of a big file's data runs without the copy-up lock: a chmod and a write of another lower file
    finish while it is under way (they used to wait for the whole copy)."""
    require_impl("draftfs")
    lower = fsenv.dir("lower")
    os.makedirs(os.path.join(lower, "src"))
    block = os.urandom(1 << 20)
    with open(os.path.join(lower, "src", "big.bin"), "wb") as f:
        for _ in range(256):
            f.write(block)
    write_file(os.path.join(lower, "src", "small.txt"), b"small\n")
    m = fsenv.mount("draftfs", [lower], opts="bgfill=0")  # the copy before the open returns (test_fs_bgfill.py: after)
    v_big, v_small = os.path.join(m.path, "src", "big.bin"), os.path.join(m.path, "src", "small.txt")
    up_big = os.path.join(m.upper, "src", "big.bin")
    os.stat(v_small)
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")  # the copy reads the 256 MiB from the disk: it takes a while
    writer = subprocess.Popen([sys.executable, "-c", "import os, sys\n"
                               "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
                               "print('opened', flush=True)\nos.write(fd, b'!')", v_big],
                              stdout=subprocess.PIPE)
    os.set_blocking(writer.stdout.fileno(), False)
    under_way = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and writer.poll() is None:
        try:
            st = os.lstat(up_big)
        except FileNotFoundError:
            continue
        if (1 << 20) <= st.st_blocks * 512 < (200 << 20):
            under_way = True
            break
    if under_way:
        os.chmod(v_small, 0o600)
        with open(v_small, "ab") as f:
            f.write(b"x")
        opened = writer.stdout.read() or b""
    assert writer.wait(timeout=60) == 0
    if not under_way:
        pytest.skip("the copy of big.bin was over before it was seen under way: nothing to race with")
    assert b"opened" not in opened, "the chmod and the write of small.txt waited for the copy of big.bin"
    assert read(v_small) == b"small\nx"
    assert stat.S_IMODE(os.stat(v_small).st_mode) == 0o600
    with open(v_big, "rb") as f:
        for _ in range(256):
            assert f.read(1 << 20) == block
        assert f.read() == b"!"
