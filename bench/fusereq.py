# SPDX-License-Identifier: LGPL-2.1-or-later
"""FUSE requests by opcode (--requests).

After the repetitions, each workload runs once more on a fresh, cold mount
of each FUSE implementation, with the kernel's fuse:fuse_request_send
event recorded in a tracefs instance of our own, filtered to that mount's
connection. What it tells is what the kernel asked each daemon, phase by
phase: the count behind the waits column, and the kinds of request an
implementation's options lead to (a writeback cache merges writes but
makes the kernel ask for security.capability before each one, ...).

Counts are of requests sent, asynchronous ones (RELEASE) included;
FORGETs are not traced by the kernel. The timing of this run is not kept
(tracing costs a little per request).
"""
import os
import re
import subprocess
import time

TRACEFS = "/sys/kernel/tracing"
EVENT = "events/fuse/fuse_request_send"
_OPCODE = re.compile(rb"opcode \d+ \(FUSE_(\w+)\)")


class Unavailable(Exception):
    pass


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _kernel_dev(st_dev):
    """The kernel's dev_t (MAJOR << 20 | MINOR) of a user-space st_dev: the event's `connection`."""
    return (os.major(st_dev) << 20) | os.minor(st_dev)


class Tracer:
    """A tracefs instance with fuse_request_send on, filtered to one connection at a time."""

    def __init__(self):
        if not os.path.isdir(os.path.join(TRACEFS, "events")):
            # The suite runs in a private mount namespace: this mount goes with it.
            r = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], stderr=subprocess.PIPE)
            if r.returncode:
                raise Unavailable("cannot mount tracefs: %s" % r.stderr.decode(errors="replace").strip())
        if not os.path.isdir(os.path.join(TRACEFS, EVENT)):
            raise Unavailable("the kernel has no fuse:fuse_request_send event (Linux 6.9+, CONFIG_TRACING)")
        self.inst = os.path.join(TRACEFS, "instances", "draftbox-bench-%d" % os.getpid())
        try:
            os.mkdir(self.inst)
        except OSError as e:
            raise Unavailable("cannot make a tracefs instance: %s" % e)
        self.ev = os.path.join(self.inst, EVENT)
        # About 40 bytes an event: room for an untar's ~130k on either CPU.
        _write(os.path.join(self.inst, "buffer_size_kb"), "16384")

    def start(self, st_dev):
        _write(os.path.join(self.ev, "enable"), "0")
        _write(os.path.join(self.inst, "trace"), "")
        _write(os.path.join(self.ev, "filter"), "connection == %d" % _kernel_dev(st_dev))
        _write(os.path.join(self.ev, "enable"), "1")

    def stop(self):
        """Returns ({opcode name: count}, events lost)."""
        _write(os.path.join(self.ev, "enable"), "0")
        counts = {}
        with open(os.path.join(self.inst, "trace"), "rb") as f:
            for line in f:
                m = _OPCODE.search(line)
                if m:
                    k = m.group(1).decode()
                    counts[k] = counts.get(k, 0) + 1
        lost = 0
        per_cpu = os.path.join(self.inst, "per_cpu")
        for cpu in os.listdir(per_cpu):
            with open(os.path.join(per_cpu, cpu, "stats")) as f:
                for line in f:
                    if line.startswith("overrun:"):
                        lost += int(line.split()[1])
        return counts, lost

    def close(self):
        try:
            _write(os.path.join(self.ev, "enable"), "0")
            os.rmdir(self.inst)
        except OSError:
            pass


def run_requests(suite, active, wls, args, log, drop_caches):
    """Returns {"counts": {phase: {impl: {opcode: n}}}, "lost": {phase: {impl: n}}} or a string saying
    why there is nothing."""
    fuse = [i for i in active if getattr(i, "fuse", False)]
    if not fuse:
        return "no FUSE implementation in this run"
    try:
        tr = Tracer()
    except Unavailable as e:
        return str(e)
    out = {"counts": {}, "lost": {}}
    try:
        for w in wls:
            for impl in fuse:
                m = suite.mount(impl)
                try:
                    drop_caches()
                    st_dev = os.stat(m.root).st_dev
                    for pname, argv in w.phases:
                        tr.start(st_dev)
                        t0 = time.monotonic()
                        r = subprocess.run(argv, cwd=m.root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           timeout=args.timeout)
                        counts, lost = tr.stop()
                        if r.returncode:
                            raise RuntimeError("requests: %s on %s: exit %d: %s"
                                               % (pname, impl.name, r.returncode,
                                                  r.stderr.decode(errors="replace").strip()[-300:]))
                        out["counts"].setdefault(pname, {})[impl.name] = counts
                        out["lost"].setdefault(pname, {})[impl.name] = lost
                        log("requests %-12s %-10s %6d in %.2fs%s: %s"
                            % (pname, impl.name, sum(counts.values()), time.monotonic() - t0,
                               " (%d lost)" % lost if lost else "", summary(counts, 6)))
                finally:
                    suite.umount(m)
    finally:
        tr.close()
    return out


def summary(counts, n=None):
    """'WRITE 1725, GETATTR 1103, ...', most first; the first @n kinds, and how many more."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = items if n is None else items[:n]
    more = len(items) - len(shown)
    return ", ".join("%s %d" % kv for kv in shown) + (", %d more kinds" % more if more else "")
