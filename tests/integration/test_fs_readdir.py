# SPDX-License-Identifier: LGPL-2.1-or-later
"""Directory streams on draftfs: shared listings and stable offsets (fs/dir.c).

Without OPENDIR, readers of a directory share one listing whose offsets
come from a keyed hash of each name, so a stream resumes after the last
name it got whatever was rebuilt meanwhile. Checked with getdents64 and a
small buffer (a few entries per call): a stream interrupted by another
stream listing the same directory from the start, while a name is added
and one it has not reached is removed, still returns every name that was
there all along exactly once; lseek back to an offset it was given
continues right after that entry, also after the directory changed; two
interleaved streams each see the whole directory; an empty directory lists
only "." and "..". With kernel support the daemon sees no OPENDIR after
the first (answered ENOSYS) and no RELEASEDIR at all.
"""
import ctypes
import os
import struct
import subprocess

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401

_libc = ctypes.CDLL(None, use_errno=True)
SYS_GETDENTS64 = 217
N = 1500


def getdents(fd, bufsize=512):
    """One getdents64 call: [(d_off, name)], empty at the end."""
    buf = ctypes.create_string_buffer(bufsize)
    n = _libc.syscall(SYS_GETDENTS64, ctypes.c_int(fd), buf, ctypes.c_uint(bufsize))
    if n < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    out, pos, raw = [], 0, buf.raw[:n]
    while pos < n:
        _, off, reclen, _ = struct.unpack_from("<QqHB", raw, pos)
        name = raw[pos + 19:pos + reclen].split(b"\0", 1)[0].decode()
        out.append((off, name))
        pos += reclen
    return out


def read_all(fd, bufsize=512):
    got = []
    while True:
        batch = getdents(fd, bufsize)
        if not batch:
            return got
        got += batch


def lower_with_many(env):
    lower = env.dir("lower")
    os.makedirs(os.path.join(lower, "many"))
    os.makedirs(os.path.join(lower, "empty"))
    for i in range(N):
        with open(os.path.join(lower, "many", "entry-%04d" % i), "w") as f:
            f.write("x")
    return lower


def test_stream_survives_a_rebuild(fsenv):
    fsutil.require_impl()
    m = fsenv.mount_impl([lower_with_many(fsenv)])
    d = os.path.join(m.path, "many")
    everyone = {"entry-%04d" % i for i in range(N)}
    a = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = []
        while len(first) < 200:
            first += getdents(a)
        seen = {name for _, name in first}
        unseen = sorted(everyone - seen)
        gone = unseen[len(unseen) // 2]
        os.unlink(os.path.join(d, gone))
        with open(os.path.join(d, "added-late"), "w") as f:
            f.write("y")
        # another stream from the start: a new listing for the directory
        b = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            names_b = [n for _, n in read_all(b)]
        finally:
            os.close(b)
        assert sorted(names_b) == sorted((everyone - {gone}) | {"added-late", ".", ".."})
        rest = read_all(a)
    finally:
        os.close(a)
    names_a = [n for _, n in first + rest]
    assert len(names_a) == len(set(names_a)), "a name came twice in one stream"
    stayed = everyone - {gone}
    missing = stayed - set(names_a)
    assert not missing, f"names there all along were skipped: {sorted(missing)[:5]}"
    assert set(names_a) <= stayed | {gone, "added-late", ".", ".."}
    m.stop()


def test_seek_back_to_a_given_offset(fsenv):
    fsutil.require_impl()
    if fsutil.IMPL == "kernel":
        pytest.skip("kernel overlayfs numbers a merged dir's entries by position: old offsets do not survive a change")
    m = fsenv.mount_impl([lower_with_many(fsenv)])
    d = os.path.join(m.path, "many")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        all_once = read_all(fd)
        names = [n for _, n in all_once]
        assert sorted(names) == sorted(["entry-%04d" % i for i in range(N)] + [".", ".."])
        k = len(all_once) // 3
        off_k, name_k = all_once[k]
        # the directory changes (a new listing is made), then we seek back to entry k's offset
        with open(os.path.join(d, "new-one"), "w") as f:
            f.write("z")
        os.lseek(fd, 0, os.SEEK_SET)
        getdents(fd)
        os.lseek(fd, off_k, os.SEEK_SET)
        after = [n for _, n in read_all(fd)]
        before = set(names[:k + 1])
        assert name_k not in after, "the entry at the offset we seeked to came again"
        assert not (set(after) & before), "entries before the seek offset came again"
        assert set(names[k + 1:]) <= set(after), "entries after the seek offset were skipped"
    finally:
        os.close(fd)
    m.stop()


def test_interleaved_streams_and_empty_dir(fsenv):
    fsutil.require_impl()
    m = fsenv.mount_impl([lower_with_many(fsenv)])
    d = os.path.join(m.path, "many")
    want = sorted(["entry-%04d" % i for i in range(N)] + [".", ".."])
    fds = [os.open(d, os.O_RDONLY | os.O_DIRECTORY) for _ in range(3)]
    try:
        got = [[] for _ in fds]
        done = [False] * len(fds)
        while not all(done):
            for i, fd in enumerate(fds):
                if not done[i]:
                    batch = getdents(fd, 256 + 128 * i)
                    done[i] = not batch
                    got[i] += [n for _, n in batch]
        for g in got:
            assert sorted(g) == want
    finally:
        for fd in fds:
            os.close(fd)
    assert sorted(os.listdir(os.path.join(m.path, "empty"))) == []
    fd = os.open(os.path.join(m.path, "empty"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert sorted(n for _, n in read_all(fd)) == [".", ".."]
    finally:
        os.close(fd)
    m.stop()


def test_no_opendir_round_trips(fsenv):
    fsutil.require_impl()
    if fsutil.IMPL != "draftfs":
        pytest.skip("draftfs's request stream")
    lower = lower_with_many(fsenv)
    d = fsenv.dir("dbg")
    for s in ("upper", "work", "mnt"):
        os.makedirs(os.path.join(d, s))
    log = open(os.path.join(d, "debug.log"), "wb")
    p = subprocess.Popen([fsutil.draftfs_bin(), "-f", "-d", "-o",
                          f"lowerdir={lower},upperdir={d}/upper,workdir={d}/work", f"{d}/mnt"],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        fsutil.wait_mounted(f"{d}/mnt", p)
        for _ in range(3):
            for sub in ("many", "empty", ""):
                os.listdir(os.path.join(d, "mnt", sub))
    finally:
        subprocess.run(["umount", f"{d}/mnt"], check=False)
        p.wait(timeout=30)
        log.close()
    with open(os.path.join(d, "debug.log"), "rb") as f:
        text = f.read().decode(errors="replace")
    opendirs = text.count("opcode: OPENDIR")
    releasedirs = text.count("opcode: RELEASEDIR")
    assert "opcode: READDIR" in text, "no directory was read through the daemon at all"
    assert opendirs <= 1, f"{opendirs} OPENDIR requests: the kernel did not take the zero-message opendir"
    assert releasedirs == 0, f"{releasedirs} RELEASEDIR requests"
