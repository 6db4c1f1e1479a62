#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""
CPU cost of commands, side by side: how docs/launcher.md measures
draftbox-run against a bare bwrap. Each run forks, moves the child into a
dedicated cgroup, execs the command and reads the cgroup's CPU counter
before and after, so every process of the tree counts (perf stat and
getrusage miss a sandbox init that is reaped by someone else) and so does
anything the command moves into sub-cgroups. Commands are interleaved
(A, B, C, A, B, C, ...) so load swings hit them alike; medians are printed.

  cpu-ratio.py [-n RUNS] [--baseline CMD] CMD [CMD...]

The first CMD is the reference (ratio 1). --baseline (e.g. a static
no-op) measures the harness's own fork + exec, which is subtracted.
Run as root. Not built or installed.
"""
import argparse
import os
import shlex
import statistics
import sys
import time

V1 = "/sys/fs/cgroup/cpuacct"
V2 = "/sys/fs/cgroup"


def make_cgroup():
    if os.path.isdir(V1) and os.path.exists(f"{V1}/cpuacct.usage"):
        path = f"{V1}/draftbox-cpu-ratio-{os.getpid()}"
        os.mkdir(path)
        return path, lambda: int(open(f"{path}/cpuacct.usage").read())
    path = f"{V2}/draftbox-cpu-ratio-{os.getpid()}"
    os.mkdir(path)

    def usage():
        for line in open(f"{path}/cpu.stat"):
            if line.startswith("usage_usec "):
                return int(line.split()[1]) * 1000
        return 0
    return path, usage


def run_once(cmd, cg, usage, devnull):
    u0, t0 = usage(), time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            with open(f"{cg}/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
            os.dup2(devnull, 1)
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, st = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(st) != 0:
        print(f"warning: {shlex.join(cmd)} exited {os.waitstatus_to_exitcode(st)}", file=sys.stderr)
    # whatever is still exiting in the cgroup belongs to this run
    for _ in range(1000):
        if not open(f"{cg}/cgroup.procs").read().strip():
            break
        time.sleep(0.001)
    return (usage() - u0) / 1e6, (time.monotonic() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("-n", type=int, default=100, help="runs of each command")
    ap.add_argument("--baseline", help="a no-op command: its cost is subtracted")
    ap.add_argument("cmds", nargs="+")
    a = ap.parse_args()
    cmds = [shlex.split(c) for c in a.cmds]
    if a.baseline:
        cmds.append(shlex.split(a.baseline))
    cg, usage = make_cgroup()
    devnull = os.open("/dev/null", os.O_RDWR)
    cpu = [[] for _ in cmds]
    wall = [[] for _ in cmds]
    try:
        for _ in range(a.n):
            for k, c in enumerate(cmds):
                c_ms, w_ms = run_once(c, cg, usage, devnull)
                cpu[k].append(c_ms)
                wall[k].append(w_ms)
    finally:
        # draftbox-run leaves its (empty) "draftbox" parent dir below ours
        for root, dirs, _ in os.walk(cg, topdown=False):
            for d in dirs:
                os.rmdir(os.path.join(root, d))
        os.rmdir(cg)
    base = statistics.median(cpu[-1]) if a.baseline else 0.0
    ref = statistics.median(cpu[0]) - base
    for k, c in enumerate(cmds):
        m = statistics.median(cpu[k])
        label = "baseline " if a.baseline and k == len(cmds) - 1 else ""
        print(f"cpu {m:7.2f} ms  net {m - base:7.2f} ms  x{(m - base) / ref:5.2f}  "
              f"wall {statistics.median(wall[k]):7.2f} ms  {label}{shlex.join(c)}")


if __name__ == "__main__":
    main()
