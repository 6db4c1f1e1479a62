# SPDX-License-Identifier: LGPL-2.1-or-later
"""A data copy-up leaves its sync to the finalizer (fs/finalize.c).

The first write of a lower file makes it a metacopy, copies the data into
it in place and marks it with this boot's id (trusted.draftbox.filled);
the finalizer thread then fdatasyncs it and removes the metacopy, redirect
and marker xattrs. These tests check each way a marked file becomes plain
(the thread, an fsync, the unmount, the next mount after a kill), that a
marker of another boot leaves a plain metacopy (the data may never have
reached the disk), and that the kernel reads the result.
"""
import errno
import json
import os
import subprocess
import time

import pytest

from fsutil import KERNEL_VERIFY_OPTS, boot_id, draftfs_bin, fsenv, require_impl, write_file, xattr  # noqa: F401
from fsutil import read_file as read

MC = "trusted.overlay.metacopy"
REDIRECT = "trusted.overlay.redirect"
FILLED = "trusted.draftbox.filled"
SIZE = 4 << 20


def data(seed, n=SIZE):
    block = seed.to_bytes(4, "little") * 1024 + bytes(range(256)) * 16
    return (block * (n // len(block) + 1))[:n]


def is_plain(path):
    return all(xattr(path, n) is None for n in (MC, REDIRECT, FILLED))


def lower_tree(fsenv, n=3):
    lower = fsenv.dir("lower")
    os.makedirs(os.path.join(lower, "src"))
    for i in range(n):
        write_file(os.path.join(lower, "src", "f%d.bin" % i), data(i + 1))
    return lower


def flag(m):
    return os.path.join(m.work, "draftfs", "unsynced")


def test_copy_up_is_finalized_in_the_background(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower])
    v, up = os.path.join(m.path, "src", "f0.bin"), os.path.join(m.upper, "src", "f0.bin")
    ino = os.lstat(v).st_ino
    with open(v, "ab") as f:
        f.write(b"+")
    assert read(v) == data(1) + b"+"
    # Either still marked (the data in place, the metacopy xattrs still there) or already plain.
    if not is_plain(up):
        assert xattr(up, FILLED) == boot_id()
        assert xattr(up, REDIRECT) == b"/src/f0.bin"
    deadline = time.monotonic() + 30
    while not is_plain(up) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert is_plain(up), "the finalizer left the copy-up a metacopy for 30 s"
    assert read(up) == data(1) + b"+"
    assert os.lstat(v).st_ino == ino
    assert os.path.exists(flag(m)), "no 'unsynced' flag while the mount may hold marked files"


def test_fsync_finalizes_at_once(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower])
    for i in range(3):
        v, up = os.path.join(m.path, "src", "f%d.bin" % i), os.path.join(m.upper, "src", "f%d.bin" % i)
        with open(v, "r+b") as f:
            f.write(b"HEAD")
            f.flush()
            if i == 0:
                os.fsync(f.fileno())
            else:
                os.fdatasync(f.fileno())
            assert is_plain(up), "fsync returned with the copy-up not finalized"
        assert read(up) == b"HEAD" + data(i + 1)[4:]


def test_unmount_finalizes_and_the_kernel_reads_it(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv, 8)
    m = fsenv.mount("draftfs", [lower])
    for i in range(8):
        with open(os.path.join(m.path, "src", "f%d.bin" % i), "ab") as f:
            f.write(b"%d" % i)
    os.truncate(os.path.join(m.path, "src", "f7.bin"), 10)
    m.stop()
    for i in range(8):
        up = os.path.join(m.upper, "src", "f%d.bin" % i)
        assert is_plain(up), f"f{i}.bin still marked after the unmount"
    assert not os.path.exists(flag(m)), "the 'unsynced' flag outlived a clean unmount"
    k = fsenv.mount("kernel", [lower], upper=m.upper, opts=KERNEL_VERIFY_OPTS)
    for i in range(7):
        assert read(os.path.join(k.path, "src", "f%d.bin" % i)) == data(i + 1) + b"%d" % i
    assert read(os.path.join(k.path, "src", "f7.bin")) == data(8)[:10]


def hand_made_fill(upper, name, content, marker):
    """An upper metacopy of lower src/@name holding @content, marked with @marker."""
    p = os.path.join(upper, "src", name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    write_file(p, content)
    os.setxattr(p, REDIRECT, b"/src/" + name.encode(), follow_symlinks=False)
    os.setxattr(p, MC, b"", follow_symlinks=False)
    os.setxattr(p, FILLED, marker, follow_symlinks=False)
    return p


def test_marker_of_another_boot_is_a_metacopy(fsenv):
    """After a reboot a marked file may hold anything where its data should be: its data is below again."""
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    upper, work = fsenv.dir("upper"), fsenv.dir("work")
    up = hand_made_fill(upper, "f0.bin", bytes(SIZE) + b"lost", b"00000000-0000-0000-0000-000000000000")
    m = fsenv.mount("draftfs", [lower], upper=upper, work=work)
    v = os.path.join(m.path, "src", "f0.bin")
    assert read(v) == data(1)
    with open(v, "ab") as f:
        f.write(b"!")
        os.fsync(f.fileno())
    assert is_plain(up)
    # The fill copies the lower data and keeps the metacopy's size: past the lower file's end the file holds
    # what the upper file held there (what reached the disk of a lost append, else a hole), then the new byte.
    assert read(v) == data(1) + b"lost" + b"!"
    assert read(up) == read(v)


def left_by_a_killed_daemon(fsenv):
    """Layers as a daemon killed in this boot leaves them: src/f0.bin filled and marked, the 'unsynced' flag up."""
    lower = lower_tree(fsenv)
    upper, work = fsenv.dir("upper"), fsenv.dir("work")
    up = hand_made_fill(upper, "f0.bin", b"written before the kill", boot_id())
    os.makedirs(os.path.join(work, "draftfs"), mode=0o700)
    open(os.path.join(work, "draftfs", "unsynced"), "w").close()
    return lower, upper, work, up


def test_marks_left_by_a_killed_daemon_are_finalized(fsenv):
    """The same boot: the page cache holds what the dead daemon wrote. The next mount shows it and finalizes it."""
    require_impl("draftfs")
    lower, upper, work, up = left_by_a_killed_daemon(fsenv)
    m = fsenv.mount("draftfs", [lower], upper=upper, work=work)
    assert read(os.path.join(m.path, "src", "f0.bin")) == b"written before the kill"
    assert read(os.path.join(m.path, "src", "f1.bin")) == data(2)
    m.stop()
    assert is_plain(up)
    assert read(up) == b"written before the kill"
    assert not os.path.exists(flag(m))


def test_offline_recover_finalizes_for_the_kernel(fsenv):
    """After a kill, `draftfs recover` with no mount finalizes the marked files of this boot, so kernel
    overlayfs reads them as the plain files they are (it would read the data below)."""
    require_impl("draftfs")
    lower, upper, work, up = left_by_a_killed_daemon(fsenv)
    r = subprocess.run([draftfs_bin(), "recover", "--lowerdir", lower, "--upperdir", upper, "--workdir", work],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["finalized"] == 1
    assert is_plain(up) and read(up) == b"written before the kill"
    assert not os.path.exists(os.path.join(work, "draftfs", "unsynced"))
    k = fsenv.mount("kernel", [lower], upper=upper, opts=KERNEL_VERIFY_OPTS)
    assert read(os.path.join(k.path, "src", "f0.bin")) == b"written before the kill"
    assert read(os.path.join(k.path, "src", "f1.bin")) == data(2)


def test_kill_right_after_a_copy_up(fsenv):
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower])
    for i in range(3):
        with open(os.path.join(m.path, "src", "f%d.bin" % i), "ab") as f:
            f.write(b"tail")
    m.kill()
    m.stop(check=False)
    for i in range(3):
        up = os.path.join(m.upper, "src", "f%d.bin" % i)
        assert is_plain(up) or xattr(up, FILLED) == boot_id()
        assert read(up) == data(i + 1) + b"tail"
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work)
    for i in range(3):
        assert read(os.path.join(m.path, "src", "f%d.bin" % i)) == data(i + 1) + b"tail"
    m.stop()
    for i in range(3):
        assert is_plain(os.path.join(m.upper, "src", "f%d.bin" % i))


def test_over_quota_copy_up_leaves_nothing(fsenv):
    """The metacopy to be filled is charged its data before it is made: over the quota, the upper stays as it was."""
    require_impl("draftfs")
    lower = lower_tree(fsenv)
    m = fsenv.mount("draftfs", [lower], opts="quota_bytes=%d" % (SIZE // 2))
    v = os.path.join(m.path, "src", "f0.bin")
    with pytest.raises(OSError) as e:
        with open(v, "ab") as f:
            f.write(b"x")
    assert e.value.errno == errno.ENOSPC
    assert not os.path.lexists(os.path.join(m.upper, "src", "f0.bin"))
    assert read(v) == data(1)
    os.chmod(v, 0o600)  # a metacopy costs no data: still fine
    assert os.path.lexists(os.path.join(m.upper, "src", "f0.bin"))
