# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftbox-run on a pure cgroup v2 host, in a VM.

Most hosts today have only cgroup v2 (Debian 12's default); a test machine
whose controllers sit in v1 hierarchies never takes that path. So this
module boots Debian's kernel in qemu (vmutil.py) with a cgroup2 hierarchy
that owns every controller, starts the launcher from a non-root cgroup as
a service manager would, and checks there what test_launcher_limits.py
checks on the host: the pids and memory limits, the OOM report, the CPU
quota and accounting, the kill of a whole tree on timeout, and that no
cgroup or process is left behind. Last, the launcher in a container whose
cgroup namespace root holds processes (where v2 forbids enabling
controllers) must refuse with a clear error. The VM's kernel is Debian
12's own (6.1), so a run in overlay mode there also checks the whole
product on a stock Debian 12 machine: draftfs without passthrough or
io_uring under bubblewrap, the sandbox's writes in the upper only.
"""
import os
import shutil

import pytest

import vmutil
from conftest import build_path

RUN = build_path("launcher", "draftbox-run")
FULL = build_path("launcher", "draftbox-run-full")
EXEC = build_path("launcher", "draftbox-exec")
DRAFTFS = build_path("fs", "draftfs")
TRY = build_path("tests", "integration", "try-syscall")

STUBBORN = ("trap '' INT TERM; "
            "sh -c \\\"trap '' INT TERM; sleep 60\\\" & "
            "sh -c \\\"trap '' INT TERM; sleep 60\\\" & "
            "echo started; sleep 60")
PROCS_OF = "for s in /proc/[0-9]*/status; do awk '/^Uid:/{print $2}' $s; done | grep -c -x UID"

CASES = [
    ("basic", "$RUN --mode ro -- sh -c 'echo hello'"),
    ("sys_cgroup", "$RUN --mode ro --pids 64 --memory 64M -- sh -c 'cat /sys/fs/cgroup/pids.max "
                   "/sys/fs/cgroup/memory.max; ls /sys/fs/cgroup/draftbox; touch /sys/fs/cgroup/x; "
                   "cat /proc/self/cgroup; grep \" /sys/fs/cgroup \" /proc/self/mountinfo; true'"),
    ("forkbomb", "$RUN --mode ro --pids 64 --uid 20001 --gid 20001 -- $TRY forkbomb 100000"),
    ("forkbomb_left", PROCS_OF.replace("UID", "20001")),
    ("memhog", "$RUN --mode ro --memory 64M -- $TRY memhog 512"),
    ("memok", "$RUN --mode ro --memory 64M -- $TRY memhog 16"),
    ("stubborn", f"$RUN --mode ro --timeout 1 --grace 0.3 --uid 20002 --gid 20002 -- sh -c \"{STUBBORN}\""),
    ("stubborn_left", PROCS_OF.replace("UID", "20002")),
    ("cpu", "$RUN --mode ro --cpu 0.25 --timeout 3 --grace 0.2 -- sh -c 'while :; do :; done'"),
    ("subtree", "cat /sys/fs/cgroup/cgroup.subtree_control /sys/fs/cgroup/draftbox/cgroup.subtree_control"),
    ("leftover_cgroups", "find /sys/fs/cgroup/draftbox -mindepth 1 -type d"),
    ("overlay", "echo original > /ws/orig && chown -R 1000:1000 /ws && "
                "$RUN --mode overlay --draftfs /opt/db/fs/draftfs --session-dir /state/s1 -- "
                "sh -c 'cat orig; echo changed > orig; echo new > added; id -u'"),
    ("overlay_after", "cat /ws/orig /state/s1/upper/orig /state/s1/upper/added; "
                      "grep -c ' /state/s1' /proc/self/mountinfo"),
    ("container", "mkdir /sys/fs/cgroup/ctr && echo $$ > /sys/fs/cgroup/ctr/cgroup.procs && "
                  "exec /usr/bin/unshare -C -m sh -c 'umount /sys/fs/cgroup && "
                  "mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec $RUN --mode ro -- true'"),
]


@pytest.fixture(scope="module")
def vm():
    if os.geteuid() != 0:
        pytest.skip("draftbox-run needs root")
    why = vmutil.missing()
    if why:
        pytest.skip(why)
    for p in (RUN, EXEC, TRY, DRAFTFS):
        if not os.path.exists(p):
            pytest.skip(f"{p} is not built")
    bwrap, unshare = shutil.which("bwrap"), shutil.which("unshare")
    if not bwrap:
        pytest.skip("bubblewrap is not installed")
    if not unshare:
        pytest.skip("util-linux's unshare is not installed")
    binaries = {
        "/opt/db/launcher/draftbox-run": RUN,
        "/opt/db/launcher/draftbox-exec": EXEC,
        "/opt/db/tests/integration/try-syscall": TRY,
        "/opt/db/fs/draftfs": DRAFTFS,
        "/usr/bin/bwrap": bwrap,
        "/usr/bin/unshare": unshare,  # busybox's has no --cgroup
    }
    if os.path.exists(FULL):  # the small front end execs it (not in a sanitized build)
        binaries["/opt/db/launcher/draftbox-run-full"] = FULL
    return vmutil.boot(binaries, CASES)


def case(vm, name):
    results, _ = vm
    assert name in results, f"case {name} did not run"
    return results[name]


def test_vm_has_pure_cgroup_v2(vm):
    _, info = vm
    ctrls = info["CONTROLLERS"].split()
    assert "pids" in ctrls and "memory" in ctrls and "cpu" in ctrls, info


def test_runs_on_v2(vm):
    r = case(vm, "basic")
    assert r.rc == 0 and r.stdout == b"hello\n", r
    assert r.json["cgroup"] == "v2" and r.json["exit_code"] == 0, r


def test_sys_fs_cgroup_is_the_run_own(vm):
    # As in a container: the run's own cgroup, read-only, with its limits;
    # not the host's tree (the other runs under draftbox/).
    r = case(vm, "sys_cgroup")
    assert r.stdout.split(b"\n")[:2] == [b"64", b"67108864"], r
    # (the VM's ls and touch are busybox's)
    assert b"ls: /sys/fs/cgroup/draftbox: No such file or directory" in r.stderr, r
    assert b"touch: /sys/fs/cgroup/x: Read-only file system" in r.stderr, r
    # the cgroup namespace's root is that cgroup, so /proc/self/cgroup and
    # the mount's root agree as in a container (what runtimes resolve)
    lines = r.stdout.split(b"\n")
    assert lines[2] == b"0::/", r
    assert lines[3].split()[3:5] == [b"/", b"/sys/fs/cgroup"], r


def test_pids_limit(vm):
    r = case(vm, "forkbomb")
    assert b"errno=EAGAIN" in r.stdout, r
    n = int(r.stdout.split(b"forkbomb: ")[1].split()[0])
    assert 0 < n < 64, r
    assert case(vm, "forkbomb_left").stdout.strip() == b"0"


def test_memory_limit_and_oom_report(vm):
    r = case(vm, "memhog")
    assert r.json["oom_killed"] is True and r.json["signal"] == "SIGKILL" and r.rc == 137, r
    assert b"memhog: 512" not in r.stdout
    assert r.json["peak_memory_bytes"] <= 64 * 1024 * 1024 + (1 << 20), r


def test_memory_within_limit_and_peak(vm):
    r = case(vm, "memok")
    assert r.rc == 0 and r.json["oom_killed"] is False, r
    assert r.json["peak_memory_bytes"] >= 16 * 1024 * 1024, r


def test_timeout_kills_the_whole_tree(vm):
    r = case(vm, "stubborn")
    assert r.rc == 124 and r.json["timed_out"] is True and r.json["signal"] == "SIGKILL", r
    assert b"started" in r.stdout, r
    assert r.seconds < 20, r
    assert case(vm, "stubborn_left").stdout.strip() == b"0", "processes survived the timeout"


def test_cpu_quota_and_accounting(vm):
    r = case(vm, "cpu")
    assert r.rc == 124 and r.json["timed_out"] is True, r
    cpu, wall = r.json["cpu_time_ms"], r.json["wall_time_ms"]
    # a quarter of a CPU: the busy loop gets about 750 ms of its 3 s
    assert 0.05 * wall < cpu < 0.5 * wall, r


def test_controllers_enabled_on_the_way(vm):
    out = case(vm, "subtree").stdout.decode().split("\n")
    for line in out[:2]:
        assert "pids" in line.split() and "memory" in line.split(), out


def test_no_cgroup_left_behind(vm):
    r = case(vm, "leftover_cgroups")
    assert r.stdout == b"", r


def test_overlay_mode_on_debians_kernel(vm):
    _, info = vm
    assert info["KERNEL"].startswith("6.1."), info
    r = case(vm, "overlay")
    assert r.rc == 0 and r.json["cgroup"] == "v2", r
    out = r.stdout.decode().split()
    assert out[0] == "original" and out[1] == str(r.json["uid"]), r
    after = case(vm, "overlay_after")
    assert after.stdout == b"original\nchanged\nnew\n0\n", after  # the workspace untouched, nothing mounted


def test_container_root_with_processes_is_a_clear_error(vm):
    r = case(vm, "container")
    assert r.rc == 125, r
    err = r.stderr.decode()
    assert "cgroup.subtree_control" in err and "processes" in err, r
