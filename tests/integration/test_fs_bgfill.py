# SPDX-License-Identifier: LGPL-2.1-or-later
"""Background data copy-up (fs/bgfill.c).

The first write of a big lower file returns before its data is copied: the
file is a metacopy on disk, the view takes its data as the upper file's,
and a thread copies it in chunk by chunk; a request that reaches a chunk
not copied yet copies that chunk first. These tests slow the thread down
(DRAFTFS_BGFILL_PACE_MS) so that every request below lands while the copy
runs, and check the view against a model of the file, the file on disk
after the copy, and what a kill during the copy leaves.
"""
import json
import os
import random
import shutil
import subprocess
import threading
import time

import pytest

from fsutil import KERNEL_VERIFY_OPTS, boot_id, draftfs_bin, fsenv, require_impl, write_file, xattr  # noqa: F401
from fsutil import read_file as read

MC = "trusted.overlay.metacopy"
FILLED = "trusted.draftbox.filled"
MiB = 1 << 20
SIZE = 48 * MiB  # 12 chunks of 4 MiB
PACE = {"DRAFTFS_BGFILL_PACE_MS": "150"}  # about 2 s for the whole file
OPTS = "bgfill=1M"


def data(n=SIZE, seed=7):
    rnd = random.Random(seed)
    block = rnd.randbytes(MiB + 4093)  # not chunk-aligned: a shifted chunk reads differently
    return (block * (n // len(block) + 1))[:n]


def mount_big(fsenv, pace=PACE, opts=OPTS, size=SIZE):
    require_impl("draftfs")
    lower = fsenv.dir("lower")
    write_file(os.path.join(lower, "big.bin"), data(size))
    os.utime(os.path.join(lower, "big.bin"), (1_600_000_000, 1_600_000_000))
    m = fsenv.mount("draftfs", [lower], opts=opts, extra_env=pace)
    return lower, m, os.path.join(m.path, "big.bin"), os.path.join(m.upper, "big.bin")


def filling(up):
    """True while the copy runs: on disk the file is still an unmarked metacopy."""
    return xattr(up, MC) is not None and xattr(up, FILLED) is None


def wait_plain(up, timeout=60):
    deadline = time.monotonic() + timeout
    while (xattr(up, MC) is not None or xattr(up, FILLED) is not None) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert xattr(up, MC) is None and xattr(up, FILLED) is None, "the background copy did not end in %ds" % timeout


def test_append_returns_before_the_copy(fsenv):
    lower, m, v, up = mount_big(fsenv)
    t = time.monotonic()
    with open(v, "ab") as f:
        f.write(b"+")
    took = time.monotonic() - t
    assert filling(up), "the append waited for the whole copy (%.2fs)" % took
    model = data() + b"+"
    assert os.stat(v).st_size == SIZE + 1
    # A new open reads through us (no passthrough to the half-copied file), chunks ahead of the copy included.
    assert read(v) == model
    wait_plain(up)
    assert read(up) == model
    m.stop()
    m2 = fsenv.mount("kernel", [lower], upper=m.upper, work=fsenv.dir("kwork"))
    assert read(os.path.join(m2.path, "big.bin")) == model


def test_writes_reads_and_truncates_during_the_copy_match_a_model(fsenv):
    size = 128 * MiB  # 32 chunks: most steps below land while the copy runs, each copying the chunks it reaches
    lower, m, v, up = mount_big(fsenv, size=size)
    model = bytearray(data(size))
    rnd = random.Random(1)
    during = 0
    with open(v, "r+b", buffering=0) as f:
        f.write(b"first")  # the copy-up
        model[0:5] = b"first"
        assert filling(up)
        for i in range(40):
            during += filling(up)
            op = rnd.random()
            if op < 0.55:
                off = rnd.randrange(0, len(model) + MiB)
                buf = rnd.randbytes(rnd.choice([1, 100, 4096, 70000, 5 * MiB]))
                f.seek(off)
                f.write(buf)
                if off > len(model):
                    model.extend(bytes(off - len(model)))
                model[off:off + len(buf)] = buf
            elif op < 0.9:
                off = rnd.randrange(0, len(model))
                n = rnd.choice([1, 4096, 200000, 2 * MiB])
                f.seek(off)
                assert f.read(n) == bytes(model[off:off + n]), "read %d at %d (step %d)" % (n, off, i)
            else:
                size = rnd.randrange(len(model) * 3 // 4, len(model) + 2 * MiB)
                f.truncate(size)
                if size < len(model):
                    del model[size:]
                else:
                    model.extend(bytes(size - len(model)))
    assert during >= 10, "only %d steps ran during the copy: slow it down further" % during
    assert read(v) == bytes(model)
    wait_plain(up)
    assert read(up) == bytes(model)
    m.stop()
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work, opts=OPTS)
    assert read(os.path.join(m.path, "big.bin")) == bytes(model)


def test_truncate_ends_the_copy_there(fsenv):
    """Truncated below the data's end and grown again: the copy must not bring the cut data back."""
    lower, m, v, up = mount_big(fsenv)
    with open(v, "r+b") as f:
        f.write(b"x")
        f.truncate(10 * MiB + 123)
        f.truncate(SIZE)
    model = b"x" + data()[1:10 * MiB + 123] + bytes(SIZE - 10 * MiB - 123)
    assert read(v) == model
    wait_plain(up)
    assert read(up) == model


def test_o_trunc_during_the_copy(fsenv):
    lower, m, v, up = mount_big(fsenv)
    with open(v, "ab") as f:
        f.write(b"tail")
    assert filling(up)
    with open(v, "wb") as f:
        f.write(b"new")
    time.sleep(0.5)  # several chunks of the copy, had it gone on
    assert read(v) == b"new"
    wait_plain(up)
    assert read(up) == b"new"
    assert os.stat(up).st_blocks * 512 < MiB


def test_read_only_o_trunc_during_the_copy(fsenv):
    """open(O_RDONLY | O_TRUNC) truncates as well (Linux does, with write permission)."""
    lower, m, v, up = mount_big(fsenv)
    with open(v, "ab") as f:
        f.write(b"tail")
    assert filling(up)
    os.close(os.open(v, os.O_RDONLY | os.O_TRUNC))
    time.sleep(0.5)
    assert os.stat(v).st_size == 0 and read(v) == b""
    wait_plain(up)
    assert read(up) == b""


def test_fsync_waits_for_the_copy(fsenv):
    lower, m, v, up = mount_big(fsenv)
    with open(v, "r+b") as f:
        f.seek(SIZE - 3)
        f.write(b"END")
        assert filling(up)
        os.fsync(f.fileno())
        assert xattr(up, MC) is None and xattr(up, FILLED) is None, "fsync returned before the copy and its sync"
    assert read(up) == data()[:SIZE - 3] + b"END"


def test_times_mode_and_caps_survive_the_copy(fsenv):
    lower, m, v, up = mount_big(fsenv)
    caps = bytes.fromhex("0100000200200000000000000000000000000000")  # cap_net_raw+p, v2
    subprocess.run(["setfattr", "-n", "security.capability", "-v", "0x" + caps.hex(), os.path.join(lower, "big.bin")],
                   check=True)
    with open(v, "ab") as f:
        f.write(b"!")
    assert filling(up)
    os.chmod(v, 0o750)
    os.utime(v, (1_700_000_000, 1_700_000_000))
    os.setxattr(v, "security.capability", caps)
    wait_plain(up)
    st = os.stat(v)
    assert (st.st_mode & 0o7777, int(st.st_mtime)) == (0o750, 1_700_000_000)
    assert os.getxattr(v, "security.capability") == caps
    assert os.getxattr(up, "security.capability") == caps
    assert int(os.stat(up).st_mtime) == 1_700_000_000


def test_acl_set_during_the_copy_survives_it(fsenv):
    """setfacl changes the mode (the group bits are the mask): the copy must
    not put the old mode back, which would cut the ACL's mask."""
    if not shutil.which("setfacl"):
        pytest.skip("setfacl not installed (Debian package acl)")
    lower, m, v, up = mount_big(fsenv)
    os.chmod(v, 0o640)
    with open(v, "ab") as f:
        f.write(b"!")
    assert filling(up)
    r = subprocess.run(["setfacl", "-m", "u:10001:rw", v], capture_output=True)
    if r.returncode != 0 and b"Operation not supported" in r.stderr:
        pytest.skip("the scratch filesystem has no POSIX ACLs")
    assert r.returncode == 0, r.stderr.decode()
    wait_plain(up)
    for p in (v, up):
        assert os.stat(p).st_mode & 0o7777 == 0o660, p
        out = subprocess.run(["getfacl", "-n", "-p", "--omit-header", p], capture_output=True, check=True).stdout
        assert b"user:10001:rw-" in out and b"mask::rw-" in out, out.decode()


def test_unlinked_while_open_reads_on(fsenv):
    lower, m, v, up = mount_big(fsenv)
    with open(v, "r+b") as f:
        f.write(b"Z")
        assert filling(up)
        os.unlink(v)
        f.seek(0)
        assert f.read() == b"Z" + data()[1:]
    assert not os.path.exists(v)


def test_reader_opened_before_the_copy_up(fsenv):
    """A read-only handle opened before the copy-up reads whole data during the copy: the lower file's
    (with passthrough the kernel reads it itself; without, until the copy is done), or the new."""
    lower, m, v, up = mount_big(fsenv)
    old = data()
    with open(v, "rb", buffering=0) as r:
        assert r.read(3) == old[:3]
        with open(v, "r+b") as f:
            f.write(b"NEW")
        assert filling(up)
        got = r.read(SIZE)
        assert got == old[3:], "a handle opened before the copy-up read something else than the lower data"
        r.seek(0)
        assert r.read(3) in (b"NEW", old[:3])


def test_parallel_readers_and_a_writer(fsenv):
    lower, m, v, up = mount_big(fsenv)
    with open(v, "r+b") as f:
        f.write(b"W" * 4096)
    assert filling(up)
    want = b"W" * 4096 + data()[4096:]
    errors = []

    def reader(seed):
        rnd = random.Random(seed)
        with open(v, "rb") as f:
            for _ in range(40):
                off = rnd.randrange(0, SIZE)
                f.seek(off)
                got = f.read(65536)
                if got != want[off:off + 65536]:
                    errors.append(off)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, "reads at %s differ" % errors[:5]


def killed_mid_copy(fsenv, writes):
    """Mounts the big file, writes (offset, bytes) pairs to it, and kills the daemon while the copy runs."""
    lower, m, v, up = mount_big(fsenv)
    with open(v, "r+b") as f:
        for off, buf in writes:
            f.seek(off)
            f.write(buf)
    assert filling(up)
    m.kill()
    m.stop(check=False)
    return lower, m, up


def patched(base, writes):
    out = bytearray(base)
    for off, buf in writes:
        out[off:off + len(buf)] = buf
    return bytes(out)


def test_kill_during_the_copy(fsenv):
    """On disk the file stays a kernel metacopy until the copy ends, with a map of the chunks copied so far; the
    next mount copies in the rest before it serves anything. Nothing the view wrote is lost: not past the lower
    file's end, not in a chunk the copy had done, not in one a write copied out of order. Never half copied."""
    writes = [(0, b"kept at 0"), (40 * MiB + 5, b"kept in a chunk copied out of order"), (SIZE, b"+kept")]
    lower, m, up = killed_mid_copy(fsenv, writes)
    assert xattr(up, MC) is not None and xattr(up, "trusted.draftbox.bgfill") == boot_id()
    assert xattr(up, "trusted.draftbox.bgfill.map") is not None
    assert os.path.exists(os.path.join(m.work, "draftfs", "bgfill"))
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work, opts=OPTS)
    assert xattr(up, MC) is None and xattr(up, "trusted.draftbox.bgfill") is None
    assert xattr(up, "trusted.draftbox.bgfill.map") is None
    want = patched(data(), writes)
    assert read(os.path.join(m.path, "big.bin")) == want
    assert not os.path.exists(os.path.join(m.work, "draftfs", "bgfill"))
    with open(os.path.join(m.path, "big.bin"), "ab") as f:
        f.write(b"!")
    m.stop()
    assert read(up) == want + b"!"
    assert xattr(up, MC) is None


def test_kill_then_offline_recover_for_the_kernel(fsenv):
    """`draftfs recover` with no mount copies in the missing chunks and makes the file plain, so kernel
    overlayfs reads what the view wrote (it would read the data below)."""
    writes = [(0, b"kept at 0"), (40 * MiB + 5, b"kept in a chunk copied out of order"), (SIZE, b"+kept")]
    lower, m, up = killed_mid_copy(fsenv, writes)
    r = subprocess.run([draftfs_bin(), "recover", "--lowerdir", lower, "--upperdir", m.upper, "--workdir", m.work],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert xattr(up, MC) is None and xattr(up, "trusted.draftbox.bgfill") is None
    assert not os.path.exists(os.path.join(m.work, "draftfs", "bgfill"))
    k = fsenv.mount("kernel", [lower], upper=m.upper, opts=KERNEL_VERIFY_OPTS)
    assert read(os.path.join(k.path, "big.bin")) == patched(data(), writes)


def test_kill_after_a_truncate_during_the_copy(fsenv):
    """A truncate lowers the fill end on disk too: after a kill, what the truncate cut and a regrow made zeros
    stays zeros, not the data below."""
    lower, m, v, up = mount_big(fsenv)
    with open(v, "r+b") as f:
        f.truncate(30 * MiB + 3)
        f.truncate(SIZE)
        f.seek(MiB)
        f.write(b"mine")
    assert filling(up)
    m.kill()
    m.stop(check=False)
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work, opts=OPTS)
    want = patched(data()[:30 * MiB + 3] + bytes(SIZE - 30 * MiB - 3), [(MiB, b"mine")])
    got = read(os.path.join(m.path, "big.bin"))
    assert len(got) == SIZE and got == want, "first difference at %d" % next(
        (i for i in range(min(len(got), len(want))) if got[i] != want[i]), -1)
    assert xattr(up, MC) is None


def test_kill_marker_of_another_boot(fsenv):
    """After a reboot the page cache is gone: a metacopy left by a background fill stays one (the lower data)."""
    lower, m, up = killed_mid_copy(fsenv, [(0, b"gone after a reboot")])
    os.setxattr(up, "trusted.draftbox.bgfill", b"00000000-0000-0000-0000-000000000000")
    m = fsenv.mount("draftfs", [lower], upper=m.upper, work=m.work, opts=OPTS)
    assert xattr(up, MC) is not None and xattr(up, "trusted.draftbox.bgfill") is None
    assert xattr(up, "trusted.draftbox.bgfill.map") is None
    assert read(os.path.join(m.path, "big.bin")) == data()


def test_unmount_finishes_the_copy(fsenv):
    lower, m, v, up = mount_big(fsenv)
    with open(v, "ab") as f:
        f.write(b"+")
    assert filling(up)
    m.stop()
    assert xattr(up, MC) is None and xattr(up, FILLED) is None
    assert read(up) == data() + b"+"


def test_small_files_and_bgfill_off_copy_at_once(fsenv):
    lower, m, v, up = mount_big(fsenv, opts="bgfill=0")
    with open(v, "ab") as f:
        f.write(b"+")
    assert not filling(up)
    assert read(up) == data() + b"+"


def test_commit_during_the_copy_commits_the_whole_file(fsenv):
    """The control plane reads the file's content only once it is all in upper (a commit quiesces, which waits)."""
    lower, m, v, up = mount_big(fsenv)
    with open(v, "ab") as f:
        f.write(b"+")
    assert filling(up)
    out = subprocess.run([draftfs_bin(), "diff", m.path], capture_output=True, check=True)
    assert [c["path"] for c in json.loads(out.stdout)["changes"]] == ["big.bin"]
    out = subprocess.run([draftfs_bin(), "commit", m.path], capture_output=True, check=True)
    assert json.loads(out.stdout)["committed"] == ["big.bin"]
    assert read(os.path.join(lower, "big.bin")) == data() + b"+"
    assert read(v) == data() + b"+"


def test_holes_below_stay_holes(fsenv):
    require_impl("draftfs")
    lower = fsenv.dir("lower")
    path = os.path.join(lower, "sparse.img")
    with open(path, "wb") as f:
        f.truncate(64 * MiB)
        for off in (0, 30 * MiB, 63 * MiB):
            f.seek(off)
            f.write(b"D" * 4096)
    m = fsenv.mount("draftfs", [lower], opts=OPTS, extra_env=PACE)
    v, up = os.path.join(m.path, "sparse.img"), os.path.join(m.upper, "sparse.img")
    with open(v, "r+b") as f:
        f.seek(50 * MiB)
        f.write(b"W")
    assert filling(up)
    wait_plain(up)
    want = bytearray(64 * MiB)
    for off in (0, 30 * MiB, 63 * MiB):
        want[off:off + 4096] = b"D" * 4096
    want[50 * MiB] = ord("W")
    assert read(up) == bytes(want)
    assert os.stat(up).st_blocks * 512 < 8 * MiB, "the copy filled the holes of the lower file"
