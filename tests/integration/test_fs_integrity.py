# SPDX-License-Identifier: LGPL-2.1-or-later
"""Data integrity in the style of fsx, on a draftfs mount.

Random pwrite, pread, truncate (grow and shrink), MAP_SHARED writes and
reads, fsync and reopen on large files, checked against an in-memory model
after every read and at the end; the file starts in a lower layer (first
write copies it up) or is new. At the end the upper file itself and the
kernel's view of the upper must hold the model's bytes too.

DRAFTFS_FSX_OPS sets operations per file (default 1500); a failure names
the seed, op index and the first differing offset.
"""
import errno
import mmap
import os
import random
import stat

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401

OPS = int(os.environ.get("DRAFTFS_FSX_OPS", "1500"))
MAXLEN = 6 << 20
PAGE = mmap.PAGESIZE


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(i + 4096, n)):
                if a[j] != b[j]:
                    return j
    return n if len(a) != len(b) else -1


def check(what, got, model, ctx):
    if got != bytes(model):
        off = first_diff(got, model)
        raise AssertionError(f"{ctx}: {what} differs from the model at offset {off} "
                             f"(got len {len(got)}, model len {len(model)}; "
                             f"got {got[off:off + 16].hex()} model {bytes(model[off:off + 16]).hex()})")


def read_all(fd):
    size = os.fstat(fd).st_size
    out = bytearray()
    off = 0
    while off < size:
        b = os.pread(fd, min(1 << 20, size - off), off)
        if not b:
            break
        out += b
        off += len(b)
    return bytes(out)


def fsx(path, model, seed, nops):
    rng = random.Random(seed)
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    log = []
    try:
        for i in range(nops):
            size = len(model)
            k = rng.choices(["write", "read", "trunc", "mapwrite", "mapread", "fsync", "reopen"],
                            [30, 25, 8, 15, 10, 4, 4])[0]
            ctx = f"seed {seed} op #{i} {k} on '{os.path.basename(path)}' (last ops: {log[-6:]})"
            if k == "write":
                off = rng.randrange(0, min(MAXLEN, size + 200000))
                n = rng.choice([1, 100, 4096, rng.randrange(1, 150000)])
                data = rng.randbytes(n)
                log.append(("pwrite", off, n))
                assert os.pwrite(fd, data, off) == n, ctx
                if off > size:
                    model.extend(b"\0" * (off - size))
                model[off:off + n] = data
            elif k == "read":
                if size == 0:
                    continue
                off = rng.randrange(0, size)
                n = rng.randrange(1, 200000)
                log.append(("pread", off, n))
                check("pread", os.pread(fd, n, off), model[off:off + n], ctx)
            elif k == "trunc":
                n = rng.choice([0, rng.randrange(0, size + 1), rng.randrange(0, MAXLEN)])
                log.append(("ftruncate", n))
                os.ftruncate(fd, n)
                if n < size:
                    del model[n:]
                else:
                    model.extend(b"\0" * (n - size))
            elif k in ("mapwrite", "mapread"):
                if size < PAGE:
                    continue
                start = rng.randrange(0, size // PAGE) * PAGE
                length = rng.randrange(1, min(size - start, 300000) + 1)
                log.append((k, start, length))
                with mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=start) as mm:
                    if k == "mapwrite":
                        o = rng.randrange(0, length)
                        n = rng.randrange(1, length - o + 1)
                        data = rng.randbytes(n)
                        mm[o:o + n] = data
                        model[start + o:start + o + n] = data
                        if rng.random() < 0.5:
                            mm.flush()
                    else:
                        check("mmap read", mm[:], model[start:start + length], ctx)
            elif k == "fsync":
                log.append(("fsync",))
                os.fsync(fd)
            else:
                log.append(("reopen",))
                os.close(fd)
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            if os.fstat(fd).st_size != len(model):
                raise AssertionError(f"{ctx}: size {os.fstat(fd).st_size}, model {len(model)}")
        check("final content", read_all(fd), model, f"seed {seed} after {nops} ops")
    finally:
        os.close(fd)


@pytest.mark.parametrize("start", ["lower", "new"])
def test_fsx(fsenv, start):
    fsutil.require_impl()
    seed = 1000 + (start == "new")
    lower = fsenv.dir("lower")
    init = random.Random(seed).randbytes(3 << 20) if start == "lower" else b""
    with open(os.path.join(lower, "big"), "wb") as f:
        f.write(init)
    m = fsenv.mount_impl([lower], name="impl")
    path = os.path.join(m.path, "big" if start == "lower" else "newfile")
    if start == "new":
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
    model = bytearray(init)
    fsx(path, model, seed, OPS)
    m.stop()
    name = os.path.basename(path)
    with open(os.path.join(m.upper, name), "rb") as f:
        check("upper file", f.read(), model, f"seed {seed} after unmount")
    with open(os.path.join(lower, "big"), "rb") as f:
        assert f.read() == init, "the lower file changed"
    v = fsenv.mount("kernel", [lower], upper=m.upper, name="verify", opts=fsutil.KERNEL_VERIFY_OPTS)
    with open(os.path.join(v.path, name), "rb") as f:
        check("kernel view of upper", f.read(), model, f"seed {seed} kernel over upper")


def open_lower_file(fsenv, opts=None):
    """Mounts a lower holding f (10000 x 'a') and opens f read-only: returns (path in the mount, fd, lower)."""
    lower = fsenv.dir("lower")
    with open(os.path.join(lower, "f"), "wb") as f:
        f.write(b"a" * 10000)
    m = fsenv.mount_impl([lower], name="impl", **({"opts": opts} if opts else {}))
    p = os.path.join(m.path, "f")
    ro = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
    assert os.pread(ro, 10, 0) == b"a" * 10
    return p, ro, lower


def require_passthrough():
    """Skips unless draftfs is tested on a kernel with FUSE passthrough (Linux 6.9+)."""
    fsutil.require_impl()
    if fsutil.IMPL == "kernel":
        pytest.skip("draftfs passthrough option")
    if tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2]) < (6, 9):
        pytest.skip("FUSE passthrough needs Linux 6.9 or later")


@pytest.mark.parametrize("passthrough", ["upper", "off"])
def test_open_fd_survives_copy_up(fsenv, passthrough):
    """With lower files read through the daemon, a read-only fd opened before a copy-up sees the new data."""
    fsutil.require_impl()
    if fsutil.IMPL == "kernel":
        pytest.skip("kernel overlayfs keeps serving the lower file to fds opened before copy-up")
    p, ro, _ = open_lower_file(fsenv, f"passthrough={passthrough}")
    try:
        with open(p, "r+b") as f:
            f.write(b"B" * 10)
        assert os.pread(ro, 10, 0) == b"B" * 10, "fd opened before copy-up reads stale lower data"
        assert os.fstat(ro).st_ino == os.stat(p).st_ino
    finally:
        os.close(ro)


def test_passthrough_fd_across_copy_up(fsenv):
    """Default passthrough=all: an fd opened read-only on a lower file keeps the lower data after another
    fd copies the file up (as fuse-overlayfs does); the writer's open succeeds, every new open sees the new
    data, the lower file is never written, and a writable reopen of the old fd through /proc fails with ESTALE."""
    require_passthrough()
    p, ro, lower = open_lower_file(fsenv)
    try:
        with open(p, "r+b") as f:
            f.write(b"B" * 10)
            f.flush()
            # A second opener while the old fd is still open: reads come through the daemon, fresh.
            with open(p, "rb") as g:
                assert g.read(10) == b"B" * 10
        with open(p, "rb") as g:
            assert g.read(12) == b"B" * 10 + b"aa"
        assert os.pread(ro, 10, 0) == b"a" * 10, "the old fd should keep its backing lower file"
        assert os.fstat(ro).st_ino == os.stat(p).st_ino
        with pytest.raises(OSError) as e:
            os.open(f"/proc/self/fd/{ro}", os.O_WRONLY | os.O_CLOEXEC)
        assert e.value.errno == errno.ESTALE
    finally:
        os.close(ro)
    with open(os.path.join(lower, "f"), "rb") as f:
        assert f.read() == b"a" * 10000, "the lower file changed"
    # Once the old fd is closed, opens use the upper file directly again, and writable mmap works.
    fd = os.open(p, os.O_RDWR | os.O_CLOEXEC)
    try:
        mm = mmap.mmap(fd, 0)
        mm[0:3] = b"MAP"
        mm.flush()
        mm.close()
    finally:
        os.close(fd)
    with open(p, "rb") as g:
        assert g.read(12) == b"MAPBBBBBBBaa"


def test_split_node_keeps_hard_links_coherent(fsenv):
    """A reader holds lower f open (passthrough to the lower file) while its hard link g is written: the
    writer's open gets a fresh node for the file (the old one keeps the reader). The old node must not
    live on as a second kernel inode of the same file: stat, reads, writes, chmod and link through the
    names f and h, whose dentries still lead to the old node, agree with g at once (as on kernel overlayfs),
    an unlink of h included."""
    require_passthrough()
    p, ro, lower = open_lower_file(fsenv)
    d = os.path.dirname(p)
    f, g = p, os.path.join(d, "g")
    try:
        os.link(f, g)
        os.link(f, os.path.join(d, "h"))
        with open(g, "r+b") as w:
            w.write(b"B" * 20000)
        assert os.stat(f).st_size == os.stat(g).st_size == 20000, "stat through the old name is stale"
        os.unlink(os.path.join(d, "h"))  # its dentry leads to the old node: the new one's st_nlink changes too
        assert os.stat(g).st_nlink == os.stat(f).st_nlink == 2
        with open(f, "rb") as r:
            assert r.read() == b"B" * 20000
        assert os.pread(ro, 10, 0) == b"a" * 10, "the reader keeps its lower file"
    finally:
        os.close(ro)
    with open(f, "ab") as w:
        w.write(b"C" * 5)
    assert os.stat(g).st_size == 20005
    with open(g, "rb") as r:
        assert r.read() == b"B" * 20000 + b"C" * 5
    os.chmod(f, 0o600)
    assert stat.S_IMODE(os.stat(g).st_mode) == 0o600
    os.link(f, os.path.join(d, "h"))
    assert os.stat(g).st_nlink == os.stat(f).st_nlink == 3
    assert len({os.stat(os.path.join(d, n)).st_ino for n in "fgh"}) == 1
    with open(os.path.join(d, "h"), "ab") as w:
        w.write(b"D")
    assert [os.stat(os.path.join(d, n)).st_size for n in "fgh"] == [20006] * 3
    with open(os.path.join(lower, "f"), "rb") as r:
        assert r.read() == b"a" * 10000, "the lower file changed"


def test_late_release_does_not_split(fsenv):
    """close(2) returns before the daemon hears of it, so the next open can be served first. A read-only
    passthrough open of lower f whose RELEASE is late (DRAFTFS_PT_RELEASE_DELAY_MS) must not make a
    writable open of its hard link g split the file's node: the daemon waits for the release. An O_PATH
    fd of f, held across, then still reopens for writing, and every name agrees."""
    require_passthrough()
    lower = fsenv.dir("lower")
    with open(os.path.join(lower, "f"), "wb") as w:
        w.write(b"a" * 4096)
    m = fsenv.mount_impl([lower], name="impl", extra_env={"DRAFTFS_PT_RELEASE_DELAY_MS": "50"})
    f, g = os.path.join(m.path, "f"), os.path.join(m.path, "g")
    path_fd = os.open(f, os.O_PATH | os.O_CLOEXEC)
    try:
        os.link(f, g)  # a metacopy: the data stays below, and the read passes through to the lower file
        with open(f, "rb") as r:
            assert r.read() == b"a" * 4096
        with open(g, "ab") as w:  # copies the data up while that read's RELEASE is still on its way
            w.write(b"b" * 100)
        fd = os.open(f"/proc/self/fd/{path_fd}", os.O_RDWR | os.O_CLOEXEC)
        try:
            os.pwrite(fd, b"c", 4196)
            assert os.fstat(fd).st_size == 4197
        finally:
            os.close(fd)
    finally:
        os.close(path_fd)
    assert os.stat(f).st_size == os.stat(g).st_size == 4197
    with open(g, "rb") as r:
        assert r.read() == b"a" * 4096 + b"b" * 100 + b"c"


@pytest.mark.parametrize("hold_reader", [False, True])
def test_quota_counts_writes_with_passthrough(fsenv, hold_reader):
    """With quota_bytes, writable opens never bypass the daemon: also while a passthrough reader holds the file."""
    fsutil.require_impl()
    if fsutil.IMPL == "kernel":
        pytest.skip("draftfs quota option")
    lower = fsenv.dir("lower")
    m = fsenv.mount_impl([lower], name="impl", opts="quota_bytes=1M")
    p = os.path.join(m.path, "f")
    with open(p, "wb") as f:
        f.write(b"x" * 1000)
    ro = os.open(p, os.O_RDONLY | os.O_CLOEXEC) if hold_reader else -1
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            with pytest.raises(OSError) as e:
                for _ in range(64):
                    os.write(fd, b"y" * 65536)
            assert e.value.errno in (errno.ENOSPC, errno.EDQUOT), e.value
        finally:
            os.close(fd)
        if hold_reader:
            assert os.pread(ro, 4, 0) == b"xxxx"
    finally:
        if ro >= 0:
            os.close(ro)
    assert os.stat(p).st_size <= 1024 * 1024 + 65536


@pytest.mark.parametrize("start", ["lower", "new"])
def test_write_only_fd_and_cached_readers(fsenv, start):
    """Write-only opens write directly (docs/fs.md, Caching): what they write is what an fd opened for
    reading and writing reads back (its cached pages are dropped), and what a shared mapping shows; an
    O_APPEND writer lands at the end; sizes agree across the fds."""
    fsutil.require_impl()
    lower = fsenv.dir("lower")
    if start == "lower":
        with open(os.path.join(lower, "f"), "wb") as f:
            f.write(b"a" * (3 * PAGE + 100))
    m = fsenv.mount_impl([lower], name="impl")
    p = os.path.join(m.path, "f")
    if start == "new":
        with open(p, "wb") as f:
            f.write(b"a" * (3 * PAGE + 100))
    model = bytearray(b"a" * (3 * PAGE + 100))
    rw = os.open(p, os.O_RDWR | os.O_CLOEXEC)
    try:
        assert os.pread(rw, len(model), 0) == bytes(model)  # pages now in the kernel's cache
        mm = mmap.mmap(rw, len(model))
        assert mm[PAGE:PAGE + 4] == b"aaaa"
        wo = os.open(p, os.O_WRONLY | os.O_CLOEXEC)
        try:
            for off, data in ((10, b"first"), (PAGE - 3, b"across-a-page"), (2 * PAGE, b"X" * PAGE)):
                assert os.pwrite(wo, data, off) == len(data)
                model[off:off + len(data)] = data
                assert os.pread(rw, len(model), 0) == bytes(model), f"stale read after a write at {off}"
                assert mm[:] == bytes(model), f"stale mapping after a write at {off}"
        finally:
            os.close(wo)
        mm.close()
        ap = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            os.write(ap, b"tail1")
            os.write(ap, b"tail2")
        finally:
            os.close(ap)
        model += b"tail1tail2"
        assert os.fstat(rw).st_size == len(model)
        assert os.pread(rw, len(model) + 10, 0) == bytes(model)
    finally:
        os.close(rw)
    with open(p, "rb") as f:
        assert f.read() == bytes(model)
    m.stop()
    if fsutil.IMPL != "kernel":
        with open(os.path.join(m.upper, "f"), "rb") as f:
            assert f.read() == bytes(model), "the upper file differs from what the mount showed"


def test_fd_on_moved_then_removed_object(fsenv):
    """An fd (O_PATH included) on a lower file or dir keeps working after its directory is renamed (draftfs
    copies the subtree, so the object gets another upper inode) and the object is then removed through its
    new name: fstat, listxattr and getxattr answer as on a local filesystem (st_nlink 0), not ESTALE. Found
    by test_fs_stress: getxattr through /proc/self/fd of a file another process had moved and unlinked."""
    fsutil.require_impl()
    if fsutil.IMPL == "kernel":
        pytest.skip("kernel overlayfs with its defaults refuses to rename a lower dir (EXDEV)")
    lower = fsenv.dir("lower")
    os.makedirs(os.path.join(lower, "d", "sub"))
    files = {"empty": b"", "full": b"hello\n"}
    for name, data in files.items():
        p = os.path.join(lower, "d", name)
        with open(p, "wb") as f:
            f.write(data)
        os.setxattr(p, "user.k", name.encode())
    m = fsenv.mount_impl([lower], name="impl").path
    fds = {name: os.open(os.path.join(m, "d", name), os.O_PATH) for name in list(files) + ["sub"]}
    reader = os.open(os.path.join(m, "d", "full"), os.O_RDONLY)
    try:
        os.rename(os.path.join(m, "d"), os.path.join(m, "e"))
        for name in files:
            os.unlink(os.path.join(m, "e", name))
        os.rmdir(os.path.join(m, "e", "sub"))
        for name, data in files.items():
            p = f"/proc/self/fd/{fds[name]}"
            st = os.stat(p)
            assert (st.st_nlink, st.st_size) == (0, len(data)), f"{name}: nlink {st.st_nlink}, size {st.st_size}"
            assert os.listxattr(p) == ["user.k"], name
            assert os.getxattr(p, "user.k") == name.encode(), name
        st = os.stat(f"/proc/self/fd/{fds['sub']}")
        assert stat.S_ISDIR(st.st_mode)
        assert os.pread(reader, 100, 0) == files["full"]
    finally:
        for fd in list(fds.values()) + [reader]:
            os.close(fd)
