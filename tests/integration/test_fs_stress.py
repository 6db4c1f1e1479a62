# SPDX-License-Identifier: LGPL-2.1-or-later
"""Concurrent stress: several processes run random operations on one draftfs mount at once.

test_fs_differential.py runs one operation at a time against kernel overlayfs. Here the same
operation mix (its generator and operations) runs from several processes in parallel over the
standard lowers, so requests race in the daemon: two writers copying up one file, a directory
renamed (a subtree copy) while another process creates, writes or holds files in it, hard links
made and unlinked while their file is open, xattrs set on a file being moved. The order between the
processes is the scheduler's, so nothing is compared op by op. What must hold:

- no worker hangs (a deadlock in the daemon), and the daemon exits 0 at unmount with no sanitizer
  report (the ASan+UBSan build runs this too);
- no operation fails with an errno a local filesystem would not give for it (EIO, ESTALE, EXDEV,
  ENOTCONN...): the races must look like some order of the operations;
- kernel overlayfs mounting draftfs's upper over the same lowers shows exactly the tree draftfs
  showed at the end: whatever the interleaving, the upper is consistent.

Knobs: DRAFTFS_STRESS_SEEDS="1,2" (default two fixed ones), DRAFTFS_STRESS_PROCS (default 4),
DRAFTFS_STRESS_OPS per process (default 2000).
"""
import errno
import json
import multiprocessing
import os
import random
import threading
import time

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401
from test_fs_differential import Generator, Side, run_op

SEEDS = [int(s) for s in os.environ.get("DRAFTFS_STRESS_SEEDS", "7,19").split(",")]
PROCS = int(os.environ.get("DRAFTFS_STRESS_PROCS", "4"))
OPS = int(os.environ.get("DRAFTFS_STRESS_OPS", "2000"))
WORKER_TIMEOUT = 300

# What the operations of the mix may fail with on any local filesystem when another process got there
# first (a name gone or taken, a dir not empty, a slot whose file is gone...), or by their arguments.
EXPECTED = {"ENOENT", "EEXIST", "ENOTDIR", "EISDIR", "ENOTEMPTY", "EINVAL", "ENODATA", "EBADF", "ENXIO",
            "ELOOP", "ENAMETOOLONG", "EPERM", "EMLINK", "ERANGE", "E2BIG", "EBUSY",
            "ESPIPE", "EAGAIN"}  # the last two: a FIFO the mix made (pwrite on it; a read while another holds it)


def worker(root, seed, nops, out_path):
    rng = random.Random(seed)
    gen = Generator(rng)
    side = Side(root)
    counts = {}
    try:
        for i in range(nops):
            if i % 8 == 0:
                try:
                    gen.refresh(root)
                except OSError:
                    pass  # a dir went away while it was walked: keep the last list
            op = gen.next()
            res = run_op(side, op)
            key = op[0] + ":" + (res[1] if res[0] == "err" else "ok")
            counts[key] = counts.get(key, 0) + 1
    finally:
        side.close()
        with open(out_path, "w") as f:
            json.dump(counts, f)


def run_workers(root, seed, scratch):
    ctx = multiprocessing.get_context("fork")
    procs, outs = [], []
    for k in range(PROCS):
        out = os.path.join(scratch, f"worker-{seed}-{k}.json")
        p = ctx.Process(target=worker, args=(root, seed * 1000 + k, OPS, out))
        p.start()
        procs.append(p)
        outs.append(out)
    hung = []
    for p in procs:
        p.join(WORKER_TIMEOUT)
        if p.is_alive():
            hung.append(p.pid)
    if hung:
        for p in procs:
            if p.is_alive():
                p.kill()
        raise AssertionError(f"seed {seed}: workers {hung} still running after {WORKER_TIMEOUT}s: a hang")
    for p in procs:
        assert p.exitcode == 0, f"seed {seed}: a worker died with {p.exitcode}"
    counts = {}
    for out in outs:
        with open(out) as f:
            for k, v in json.load(f).items():
                counts[k] = counts.get(k, 0) + v
    return counts


@pytest.mark.parametrize("seed", SEEDS)
def test_concurrent_random_ops(fsenv, seed):
    fsutil.require_impl()
    lowers = fsutil.make_standard_lowers(fsenv.dir("layers"))
    impl = fsenv.mount_impl(lowers, name="impl")

    counts = run_workers(impl.path, seed, fsenv.dir("out"))
    errs = {k: v for k, v in counts.items() if not k.endswith(":ok")}
    unexpected = {k: v for k, v in errs.items() if k.split(":")[1] not in EXPECTED}
    assert not unexpected, f"seed {seed}: errors no local filesystem gives for these: {unexpected}"
    ok = sum(v for k, v in counts.items() if k.endswith(":ok"))
    assert ok >= PROCS * OPS // 4, f"seed {seed}: only {ok} of {PROCS * OPS} operations succeeded: {counts}"
    for kind in ("rename", "write", "link", "mkdir", "unlink"):
        assert counts.get(kind + ":ok", 0) > 0, f"seed {seed}: no {kind} succeeded, the mix did not race: {counts}"

    isnap = fsutil.tree_snapshot(impl.path, mtime=True)
    impl.stop()
    verify = fsenv.mount("kernel", lowers, upper=impl.upper, name="verify", opts=fsutil.KERNEL_VERIFY_OPTS)
    diffs = fsutil.diff_snapshots(isnap, fsutil.tree_snapshot(verify.path, mtime=True), fsutil.IMPL,
                                  f"kernel-over-{fsutil.IMPL}-upper")
    assert not diffs, (f"seed {seed}: after {PROCS} processes of {OPS} operations, the kernel reads the "
                       f"upper differently from what {fsutil.IMPL} showed:\n" + "\n".join(diffs[:40]))


def test_creates_during_a_subtree_copy_are_kept(fsenv):
    """A thread creates files and directories in the subdirectories of a lower directory while another
    renames that directory: draftfs copies its subtree (the kernel locks only the rename's two parents,
    not the subdirectories), and every entry made meanwhile must be in the moved tree, in the view and
    in the upper the kernel reads. Before the rename held off other changes during the copy, entries made
    in the old tree after the copy had listed their directory went away with the old tree (thousands of
    a few thousand, by hand)."""
    fsutil.require_impl()
    if fsutil.IMPL == "kernel":
        pytest.skip("kernel overlayfs with its defaults refuses to rename a lower dir (EXDEV)")
    lower = fsenv.dir("lower")
    subs = [f"s{i:02d}" for i in range(20)]
    for sub in subs:
        os.makedirs(os.path.join(lower, "big", sub))
        for j in range(100):
            with open(os.path.join(lower, "big", sub, f"f{j}"), "wb") as f:
                f.write(b"x" * 100)
    impl = fsenv.mount_impl([lower], name="impl")
    m = impl.path
    for sub in subs:  # copied up now: the creates below need no copy-up, which would wait for the rename
        os.close(os.open(os.path.join(m, "big", sub, "first"), os.O_WRONLY | os.O_CREAT, 0o644))
    made, stop, errors = [], threading.Event(), []

    def creator():
        fds = [(sub, os.open(os.path.join(m, "big", sub), os.O_PATH | os.O_DIRECTORY)) for sub in subs]
        try:
            i = 0
            while not stop.is_set():
                sub, d = fds[i % len(fds)]
                name = f"new{i}"
                if i % 3 == 0:
                    os.mkdir(name, 0o755, dir_fd=d)
                else:
                    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=d))
                made.append(f"{sub}/{name}")
                i += 1
        except OSError as e:
            errors.append(e)
        finally:
            for _, d in fds:
                os.close(d)

    t = threading.Thread(target=creator)
    t.start()
    time.sleep(0.2)
    os.rename(os.path.join(m, "big"), os.path.join(m, "moved"))
    time.sleep(0.05)
    stop.set()
    t.join(60)
    assert not t.is_alive(), "the creator hangs"
    assert not errors, errors
    assert made, "nothing was created"

    def listed(root):
        return {f"{sub}/{n}" for sub in subs for n in os.listdir(os.path.join(root, "moved", sub)) if n.startswith("new")}

    lost = [n for n in made if n not in listed(m)]
    assert not lost, f"{len(lost)} of {len(made)} entries made during the rename are gone, e.g. {lost[:5]}"
    impl.stop()
    verify = fsenv.mount("kernel", [lower], upper=impl.upper, name="verify", opts=fsutil.KERNEL_VERIFY_OPTS)
    lost = [n for n in made if n not in listed(verify.path)]
    assert not lost, f"the kernel reading the upper misses {len(lost)} of {len(made)}, e.g. {lost[:5]}"


def test_expected_errnos_are_errnos():
    """The allow-list names real errnos (a typo would silently allow nothing)."""
    assert all(hasattr(errno, e) for e in EXPECTED)
