# SPDX-License-Identifier: LGPL-2.1-or-later
"""The io_uring queue threads' scheduling policy (ring_sched=, fs/ring-sched.c).

With ring_sched=idle (the default over io_uring) the queue threads run as
SCHED_IDLE while requests flow (with the daemon's other threads), so a
caller wakes on its own CPU, and all go back to SCHED_OTHER when requests
stop. A SCHED_IDLE thread sharing a CPU
with a busy task of its own scheduling group would starve (300 creates took
67 s instead of 0.3 s in the measurement of docs/fs.md); the guard must
see it and put the threads back to SCHED_OTHER: the same creates beside a
busy loop on every CPU, in the daemon's own session, finish, and the guard
counts the backoff. ring_sched=normal never uses SCHED_IDLE; a bad value is
refused with one line.

Needs root, /dev/fuse and FUSE over io_uring (skips and says why otherwise).
"""
import os
import subprocess
import sys
import threading
import time

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401
from test_fs_transport import layers, need_uring, refused, status

pytestmark = pytest.mark.skipif(fsutil.IMPL != "draftfs", reason="ring_sched is draftfs's own")

SCHED_OTHER, SCHED_IDLE = 0, 5


def thread_policies(pid, every=False):
    """{tid: policy} of the daemon's io_uring queue threads (named draftfs-qN), or of all its threads."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                s = f.read()
        except FileNotFoundError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        if every or name.startswith("draftfs-q"):
            out[int(tid)] = int(s[s.rindex(")") + 2:].split()[38])  # field 41: policy
    return out


def mount(env, opts=None):
    fsutil.require_impl()
    need_uring()
    m = env.mount_impl([layers(env, "t")], opts=opts)
    tr = status(m.path)["transport"]
    assert tr["kind"] == "io_uring", tr
    if opts is None and tr["sched"] == "off":
        m.stop()
        pytest.skip("ring_sched=idle is not available to this daemon (see its log line)")
    assert thread_policies(m.pid), "no io_uring queue threads named draftfs-q*"
    return m


class Flow:
    """Uncached requests (getxattr) from a thread until stopped."""

    def __init__(self, path):
        self.path = os.path.join(path, "dir", "f000")
        os.setxattr(self.path, "user.k", b"v")
        self.stop = threading.Event()
        self.n = 0
        self.t = threading.Thread(target=self.run)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            assert os.getxattr(self.path, "user.k") == b"v"
            self.n += 1

    def end(self):
        self.stop.set()
        self.t.join(timeout=60)
        assert not self.t.is_alive()
        assert self.n > 0


def wait_parked(m):
    """After requests stop the guard parks within QUIET_NS (50 ms) and a tick: every thread SCHED_OTHER.

    Read from /proc only: `draftfs status` itself makes a request, which wakes the guard.
    """
    deadline = time.monotonic() + 10
    while True:
        pol = thread_policies(m.pid, every=True)
        if set(pol.values()) == {SCHED_OTHER}:
            time.sleep(0.2)  # and it stays so while nothing is asked
            pol = thread_policies(m.pid, every=True)
            if set(pol.values()) == {SCHED_OTHER}:
                return
        assert time.monotonic() < deadline, pol
        time.sleep(0.05)


def test_idle_while_requests_flow_other_when_quiet(fsenv):
    m = mount(fsenv)
    wait_parked(m)
    backoffs = status(m.path)["transport"]["sched_backoffs"]
    flow = Flow(m.path)
    seen_idle = False
    deadline = time.monotonic() + 10
    try:
        # Under a loaded test run the guard may back off (sched_backoffs grows: it was SCHED_IDLE before)
        while not seen_idle and time.monotonic() < deadline:
            seen_idle = SCHED_IDLE in thread_policies(m.pid).values()
            if not seen_idle:
                seen_idle = status(m.path)["transport"]["sched_backoffs"] > backoffs
    finally:
        flow.end()
    assert seen_idle, "the queue threads never ran SCHED_IDLE during 10 s of requests"
    wait_parked(m)
    m.stop()


def test_busy_cpus_in_the_daemons_session_do_not_starve_requests(fsenv):
    m = mount(fsenv)
    wait_parked(m)
    backoffs = status(m.path)["transport"]["sched_backoffs"]
    # Busy loops in this session, hence in the daemon's scheduling group (autogroup), one per CPU.
    spin = "import os,sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin, str(c)]) for c in sorted(os.sched_getaffinity(0))]
    try:
        time.sleep(0.3)
        d = os.path.join(m.path, "new")
        os.mkdir(d)
        t0 = time.monotonic()
        for i in range(300):
            fsutil.write_file(os.path.join(d, "f%d" % i), b"%d" % i)
        took = time.monotonic() - t0
        assert sorted(os.listdir(d)) == sorted("f%d" % i for i in range(300))
        st = status(m.path)["transport"]
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    # Unguarded SCHED_IDLE threads took 67 s here; SCHED_OTHER ones under 1 s. A liveness bound, not a speed test.
    assert took < 30, "300 creates beside busy loops took %.1f s: the queue threads starved" % took
    assert st["sched_backoffs"] > backoffs, st
    wait_parked(m)
    m.stop()


def test_ring_sched_normal_never_idle(fsenv):
    m = mount(fsenv, opts="ring_sched=normal")
    assert status(m.path)["transport"]["sched"] == "off"
    flow = Flow(m.path)
    try:
        for _ in range(50):
            assert set(thread_policies(m.pid).values()) == {SCHED_OTHER}
            time.sleep(0.01)
    finally:
        flow.end()
    m.stop()


def test_bad_ring_sched_value(fsenv):
    fsutil.require_impl()
    assert "invalid ring_sched 'fast': expected idle or normal" in refused(fsenv, "ring_sched=fast", "bad ring_sched")
