# SPDX-License-Identifier: LGPL-2.1-or-later
"""A draftfs daemon killed with SIGKILL in the middle of a big copy-up.

The lower holds a 256 MiB file; appending one byte copies it up. The daemon
is killed while the copy is under way (a partial copy is seen in upper or
workdir, or, for draftfs, which fills a metacopy in place, a metacopy with
some of the data). After the dead mount is lazily unmounted, the upper must
hold the file either not at all, as a metacopy (its data still the lower
file's), as a filled metacopy marked with this boot's id (complete: the
page cache holds what the daemon wrote), or complete and correct (never a
partial file under its real name that claims to hold its data); a new mount over the same upper and workdir must work and
show the right data, and the append can then be redone; the next mount
cleans the partial copy out of the workdir (as kernel overlayfs does).
"""
import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

import fsutil
from fsutil import boot_id, fsenv, xattr  # noqa: F401

SIZE = 256 << 20
CHUNK = 1 << 20
MC = "trusted.overlay.metacopy"
FILLED = "trusted.draftbox.filled"


def chunk(i):
    # distinct bytes per MiB, cheap to generate and to check
    return hashlib.sha256(str(i).encode()).digest() * (CHUNK // 32)


def expected_digest(extra=b""):
    h = hashlib.sha256()
    for i in range(SIZE // CHUNK):
        h.update(chunk(i))
    h.update(extra)
    return h.hexdigest()


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(4 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def partial_copies(upper, work):
    """Partial copies of big in upper or workdir: (path, size) with 1 MiB <= size < SIZE, or a
    metacopy holding 1 MiB <= data < SIZE (a fill in place, size then its allocated bytes)."""
    out = []
    for root in (upper, work):
        for dirpath, _, files in os.walk(root):
            for n in files:
                try:
                    st = os.lstat(os.path.join(dirpath, n))
                except FileNotFoundError:
                    continue
                if CHUNK <= st.st_size < SIZE:
                    out.append((os.path.join(dirpath, n), st.st_size))
                elif st.st_size >= SIZE and CHUNK <= st.st_blocks * 512 < SIZE:
                    try:
                        if xattr(os.path.join(dirpath, n), MC) is not None:
                            out.append((os.path.join(dirpath, n), st.st_blocks * 512))
                    except FileNotFoundError:
                        continue
    return out


@pytest.mark.parametrize("bgfill", ["off", "on"])
def test_kill_during_copy_up(fsenv, bgfill):
    """A daemon killed while it copies a big file up (draftfs: before the append returns, or, with the
    background copy-up, after it) leaves the old data or the new, never a partial file."""
    fsutil.require_impl()
    if bgfill == "off" and fsutil.IMPL != "draftfs":
        pytest.skip("bgfill= is a draftfs option")
    if fsutil.IMPL == "kernel":
        pytest.skip("no daemon to kill")
    lower = fsenv.dir("lower")
    with open(os.path.join(lower, "big"), "wb") as f:
        for i in range(SIZE // CHUNK):
            f.write(chunk(i))
    with open(os.path.join(lower, "small"), "w") as f:
        f.write("small")
    orig = expected_digest()
    with_byte = expected_digest(b"!")

    m = fsenv.mount_impl([lower], name="impl", **({"opts": "bgfill=0"} if bgfill == "off" else {}))
    # something already in upper before the crash must survive it
    with open(os.path.join(m.path, "before"), "w") as f:
        f.write("written before the crash")
    writer = subprocess.Popen([sys.executable, "-c",
                               "import sys\nwith open(sys.argv[1], 'ab') as f: f.write(b'!')",
                               os.path.join(m.path, "big")], stderr=subprocess.PIPE)
    seen = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and writer.poll() is None:
        p = partial_copies(m.upper, m.work)
        if p:
            seen = p
            break
    m.kill(signal.SIGKILL)
    try:
        writer.wait(timeout=30)
    except subprocess.TimeoutExpired:
        writer.kill()
        writer.wait()
        raise AssertionError("the writer hung after the daemon died")
    fsutil.force_unmount(m.path)
    assert not fsutil.is_mounted(m.path)

    up_big = os.path.join(m.upper, "big")
    if os.path.lexists(up_big):
        st = os.lstat(up_big)
        assert st.st_size in (SIZE, SIZE + 1), f"partial copy-up under the real name: {st.st_size} bytes " \
                                               f"(partial files seen before the kill: {seen})"
        if xattr(up_big, MC) is not None and xattr(up_big, FILLED) != boot_id():
            # a metacopy: its data is the lower file's, whatever the fill got to; past the lower file's end
            # it holds what the upper file does (a background copy-up: the append went there before the kill)
            assert st.st_size == SIZE or bgfill == "on", "a metacopy of big with another size"
            assert xattr(up_big, "trusted.overlay.redirect") == b"/big"
        else:
            assert digest(up_big) == (orig if st.st_size == SIZE else with_byte), "upper 'big' has wrong content"
    with open(os.path.join(m.upper, "before")) as f:
        assert f.read() == "written before the crash"

    # a new mount on the same upper and workdir works and shows consistent data
    m2 = fsenv.mount_impl([lower], upper=m.upper, work=m.work, name="again")
    view_big = os.path.join(m2.path, "big")
    size = os.stat(view_big).st_size
    assert size in (SIZE, SIZE + 1)
    assert digest(view_big) == (orig if size == SIZE else with_byte), "view shows corrupt data after the crash"
    with open(view_big, "ab") as f:
        f.write(b"!")
    assert os.stat(view_big).st_size == size + 1
    with open(os.path.join(m2.path, "small")) as f:
        assert f.read() == "small"
    with open(os.path.join(m2.path, "before")) as f:
        assert f.read() == "written before the crash"
    leftovers = sorted(set(os.listdir(m2.path)) - {"big", "small", "before"})
    assert not leftovers, f"crash debris visible in the view: {leftovers}"
    m2.stop()
    debris = partial_copies(m.upper, m.work)
    assert not debris, f"the partial copy was not cleaned up by the next mount: {debris}"
    with open(os.path.join(lower, "big"), "rb") as f:
        f.seek(SIZE - 4)
        assert len(f.read()) == 4, "the lower file changed size"
    v = fsenv.mount("kernel", [lower], upper=m.upper, name="verify", opts=fsutil.KERNEL_VERIFY_OPTS)
    assert os.stat(os.path.join(v.path, "big")).st_size == size + 1
    assert sorted(os.listdir(v.path)) == ["before", "big", "small"]
    if seen is None:  # everything above held, but the kill came after the copy
        pytest.skip(f"the copy-up finished (writer rc {writer.returncode}) before a partial copy was seen "
                    "(a reflink-capable filesystem?): the kill did not interrupt it")
