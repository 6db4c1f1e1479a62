# SPDX-License-Identifier: LGPL-2.1-or-later
"""How requests reach draftfs: FUSE over io_uring or /dev/fuse (fs/uring.c).

With the fuse module's enable_uring on, a default mount serves requests
over one io_uring queue per possible CPU (draftfs status says so, and its
request counter grows); uring=off keeps /dev/fuse; uring=on refuses to
mount, with one clear line, when the kernel cannot. Over the rings, work
from every CPU gets correct answers: large writes and reads (a request of
max_write), long names, xattrs and directory listings, more concurrent
callers on one CPU than that CPU's queue has threads, and a file written on
one CPU read back on another. Killing the daemon leaves a dead mount that
answers ENOTCONN (ECONNABORTED or ECANCELED for a request caught in the
rings' teardown), not a hang; SIGTERM ends it cleanly.

Needs root and /dev/fuse. The io_uring checks skip (and say why) where
this kernel has no FUSE over io_uring or it is off.
"""
import errno
import json
import os
import signal
import subprocess
import threading
import time

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401
from test_fs_badinput import assert_refused, layout

pytestmark = pytest.mark.skipif(fsutil.IMPL != "draftfs", reason="the transport is draftfs's own")

PARAM = "/sys/module/fuse/parameters/enable_uring"


def uring_param():
    """True/False for the fuse module's enable_uring, None when this kernel has no FUSE io_uring."""
    try:
        with open(PARAM) as f:
            return f.read().strip() in ("Y", "1")
    except OSError:
        return None


def need_uring():
    p = uring_param()
    if p is None:
        pytest.skip("this kernel has no FUSE over io_uring (no %s)" % PARAM)
    if not p:
        pytest.skip("FUSE over io_uring is off on this machine (%s is N; ./dev sets it)" % PARAM)


def status(mnt):
    r = subprocess.run([fsutil.draftfs_bin(), "status", mnt], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def possible_cpus():
    with open("/sys/devices/system/cpu/possible") as f:
        n = 0
        for part in f.read().strip().split(","):
            a, _, b = part.partition("-")
            n += (int(b) if b else int(a)) - int(a) + 1
    return n


def layers(env, tag):
    d = env.dir(tag)
    lo = os.path.join(d, "lower")
    os.makedirs(os.path.join(lo, "dir"))
    for i in range(300):
        fsutil.write_file(os.path.join(lo, "dir", "f%03d" % i), b"lower %d\n" % i)
    fsutil.write_file(os.path.join(lo, "big"), os.urandom(3 << 20))
    return lo


def on_cpu(cpu, fn, *args):
    """Runs fn(*args) in a thread pinned to @cpu; returns its result or raises its exception."""
    out = {}

    def run():
        os.sched_setaffinity(0, {cpu})
        try:
            out["r"] = fn(*args)
        except BaseException as e:  # noqa: B902 - handed to the caller
            out["e"] = e
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out.get("r")


def workout(root, cpu, k=0):
    """Requests of every shape from one CPU, each answer checked; @k counts earlier workouts on this mount."""
    d = os.path.join(root, "cpu%d" % cpu)
    os.mkdir(d)
    data = os.urandom((1 << 20) + 12345)  # more than one max_write (1 MiB) request
    with open(os.path.join(d, "data"), "wb") as f:
        f.write(data)
    with open(os.path.join(d, "data"), "rb") as f:
        assert f.read() == data
    long = "n" * 255
    fsutil.write_file(os.path.join(d, long), b"long name")
    with open(os.path.join(d, long), "rb") as f:
        assert f.read() == b"long name"
    value = os.urandom(3500)  # ext4 keeps a value within one block
    os.setxattr(os.path.join(d, "data"), "user.big", value)
    assert os.getxattr(os.path.join(d, "data"), "user.big") == value
    os.symlink("target-" + long[:100], os.path.join(d, "link"))
    assert os.readlink(os.path.join(d, "link")) == "target-" + long[:100]
    os.rename(os.path.join(d, "data"), os.path.join(d, "data2"))
    assert sorted(os.listdir(d)) == sorted(["data2", long, "link"])
    gone = {"f%03d" % (3 * j + 2) for j in range(k)}  # what the earlier workouts unlinked
    names = sorted(os.listdir(os.path.join(root, "dir")))
    assert names == sorted({"f%03d" % i for i in range(300)} - gone)
    a, b, c = ("f%03d" % (3 * k + i) for i in range(3))
    with open(os.path.join(root, "dir", a), "rb") as f:
        assert f.read() == b"lower %d\n" % (3 * k)
    with open(os.path.join(root, "dir", b), "ab") as f:  # a copy-up
        f.write(b"more\n")
    with open(os.path.join(root, "dir", b), "rb") as f:
        assert f.read() == b"lower %d\nmore\n" % (3 * k + 1)
    os.unlink(os.path.join(root, "dir", c))
    with pytest.raises(FileNotFoundError):
        os.stat(os.path.join(root, "dir", c))
    return data


def test_default_mount_serves_over_io_uring(fsenv):
    fsutil.require_impl()
    need_uring()
    m = fsenv.mount_impl([layers(fsenv, "t")])
    st = status(m.path)
    t = st["transport"]
    assert t["kind"] == "io_uring", st
    assert t["queues"] == possible_cpus(), st
    assert t["threads_per_queue"] >= 2, st
    before = t["ring_requests"]
    cpus = sorted(os.sched_getaffinity(0))
    written = {}
    for k, cpu in enumerate(cpus):
        written[cpu] = on_cpu(cpu, workout, m.path, cpu, k)
    # read back on another CPU what one CPU wrote
    for cpu in cpus:
        other = cpus[(cpus.index(cpu) + 1) % len(cpus)]
        got = on_cpu(other, lambda p: open(p, "rb").read(), os.path.join(m.path, "cpu%d" % cpu, "data2"))
        assert got == written[cpu]
    after = status(m.path)["transport"]["ring_requests"]
    assert after - before >= 20 * len(cpus), (before, after)
    m.stop()


def test_more_callers_than_queue_threads(fsenv):
    """16 threads on one CPU (its queue has fewer): requests wait in the kernel's queue, none is lost."""
    fsutil.require_impl()
    need_uring()
    m = fsenv.mount_impl([layers(fsenv, "t")])
    per_q = status(m.path)["transport"]["threads_per_queue"]
    cpu = min(os.sched_getaffinity(0))
    errors = []

    def worker(k):
        os.sched_setaffinity(0, {cpu})
        try:
            d = os.path.join(m.path, "w%d" % k)
            os.mkdir(d)
            for i in range(150):
                p = os.path.join(d, "f%d" % i)
                fsutil.write_file(p, b"%d %d" % (k, i))
                with open(p, "rb") as f:
                    assert f.read() == b"%d %d" % (k, i)
                os.stat(os.path.join(m.path, "dir", "f%03d" % (i % 300)))
            assert len(os.listdir(d)) == 150
        except BaseException as e:  # noqa: B902 - collected
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(max(16, 4 * per_q))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "callers hung on one CPU's queue"
    assert not errors, errors[:3]
    m.stop()


def test_uring_off_uses_dev_fuse(fsenv):
    fsutil.require_impl()
    m = fsenv.mount_impl([layers(fsenv, "t")], opts="uring=off")
    st = status(m.path)
    assert st["transport"] == {"kind": "/dev/fuse"}, st
    workout(m.path, min(os.sched_getaffinity(0)))
    assert status(m.path)["transport"] == {"kind": "/dev/fuse"}
    m.stop()


def refused(env, opts, what):
    """The mount with @opts added fails with one line (test_fs_badinput's checks); returns that line."""
    lo, up, wk, mnt = layout(env, "r")
    return assert_refused(env, f"lowerdir={lo},upperdir={up},workdir={wk},{opts}", mnt, what)


def test_bad_uring_value(fsenv):
    fsutil.require_impl()
    assert "invalid uring 'maybe': expected auto, on or off" in refused(fsenv, "uring=maybe", "bad uring value")


def test_uring_on_refused_when_the_kernel_cannot(fsenv):
    fsutil.require_impl()
    p = uring_param()
    if p is None:
        assert "no FUSE over io_uring" in refused(fsenv, "uring=on", "uring=on without kernel support")
        return
    # Turn the module parameter off for the length of this check (tests run one at a time).
    with open(PARAM, "w") as f:
        f.write("N")
    try:
        line = refused(fsenv, "uring=on", "uring=on with enable_uring off")
    finally:
        with open(PARAM, "w") as f:
            f.write("Y" if p else "N")
    assert "uring=on: FUSE over io_uring is off in this kernel" in line, line
    assert PARAM in line, line


def test_auto_falls_back_when_off(fsenv):
    fsutil.require_impl()
    p = uring_param()
    if p is None:
        pytest.skip("this kernel has no FUSE over io_uring (no %s)" % PARAM)
    with open(PARAM, "w") as f:
        f.write("N")
    try:
        m = fsenv.mount_impl([layers(fsenv, "t")])
    finally:
        with open(PARAM, "w") as f:
            f.write("Y" if p else "N")
    # the mount negotiated at INIT: /dev/fuse for its whole life, whatever the parameter says now
    assert status(m.path)["transport"] == {"kind": "/dev/fuse"}
    workout(m.path, min(os.sched_getaffinity(0)))
    m.stop()


def test_killed_daemon_leaves_a_dead_mount_not_a_hang(fsenv):
    fsutil.require_impl()
    need_uring()
    m = fsenv.mount_impl([layers(fsenv, "t")])
    assert status(m.path)["transport"]["kind"] == "io_uring"
    os.listdir(os.path.join(m.path, "dir"))
    m.kill(signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(OSError) as ei:  # not in the kernel's caches: it must reach the dead daemon
        os.getxattr(os.path.join(m.path, "dir", "f001"), "user.none")
    # ECONNABORTED or ECANCELED: caught while the kernel tore the dead daemon's rings down; ENOTCONN after
    assert ei.value.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED), ei.value
    assert time.monotonic() - t0 < 5
    time.sleep(0.5)
    with pytest.raises(OSError) as ei:
        os.getxattr(os.path.join(m.path, "dir", "f002"), "user.none")
    assert ei.value.errno == errno.ENOTCONN, ei.value
    m.stop(check=False)
    assert not fsutil.is_mounted(m.path)


def test_sigterm_ends_the_daemon(fsenv):
    fsutil.require_impl()
    need_uring()
    m = fsenv.mount_impl([layers(fsenv, "t")])
    workout(m.path, min(os.sched_getaffinity(0)))
    m.proc.send_signal(signal.SIGTERM)
    rc = m.proc.wait(timeout=20)
    assert rc == 0, m.stderr()
    assert not fsutil.is_mounted(m.path)
    m.proc = None
