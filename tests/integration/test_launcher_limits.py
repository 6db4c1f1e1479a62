# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftbox-run: resource limits, timeouts, cancel and the exit status."""
import os
import signal
import subprocess
import time

from launchutil import RUN, TRY, box, private_uid, procs_of_uid, require_sandbox  # noqa: F401

require_sandbox()


def test_exit_status_and_signal_reported(box):
    r = box.run(["sh", "-c", "echo out; echo err >&2; exit 3"], mode="ro")
    assert r.rc == 3 and r.json["exit_code"] == 3 and r.json["signal"] is None, r
    assert r.stdout == b"out\n" and r.stderr == b"err\n"
    r = box.run(["sh", "-c", "kill -KILL $$"], mode="ro")
    assert r.rc == 137 and r.json["exit_code"] is None and r.json["signal"] == "SIGKILL", r
    r = box.run(["sh", "-c", "exit 137"], mode="ro")
    assert r.rc == 137 and r.json["exit_code"] == 137 and r.json["signal"] is None, r
    r = box.run(["/nonexistent-command"], mode="ro")
    assert r.rc == 127 and r.json["exit_code"] == 127, r
    for k in ["timed_out", "cancelled", "oom_killed", "wall_time_ms", "cpu_time_ms", "peak_memory_bytes"]:
        assert k in r.json


def test_json_on_stdout_after_the_output(box):
    p = subprocess.run([RUN, "--workspace", box.ws, "--mode", "ro", "--json", "--", "echo", "hello"],
                       capture_output=True, stdin=subprocess.DEVNULL)
    lines = p.stdout.decode().splitlines()
    assert p.returncode == 0 and lines[0] == "hello" and lines[1].startswith('{"exit_code":0'), p


def test_fork_bomb_stops_at_pids_limit(box):
    r = box.run([TRY, "forkbomb", "100000"], "--pids", "64", *private_uid(), mode="ro", timeout=120)
    assert b"errno=EAGAIN" in r.stdout, r
    n = int(r.stdout.split(b"forkbomb: ")[1].split()[0])
    assert 0 < n < 64, r
    assert not procs_of_uid(r.json["uid"])


def test_memory_hog_is_oom_killed_and_reported(box):
    r = box.run([TRY, "memhog", "512"], "--memory", "64M", mode="ro", timeout=120)
    assert r.json["oom_killed"] is True, r
    assert r.json["signal"] == "SIGKILL" and r.rc == 137, r
    assert b"memhog: 512" not in r.stdout
    assert r.json["peak_memory_bytes"] <= 64 * 1024 * 1024 + (1 << 20)


def test_memory_within_limit_is_fine(box):
    r = box.run([TRY, "memhog", "16"], "--memory", "64M", mode="ro")
    assert r.rc == 0 and r.json["oom_killed"] is False, r
    assert r.json["peak_memory_bytes"] >= 16 * 1024 * 1024


def test_timeout_kills_stubborn_tree(box):
    script = ("trap '' INT TERM; "
              "sh -c \"trap '' INT TERM; sleep 60\" & "
              "sh -c \"trap '' INT TERM; sleep 60\" & "
              "echo started; sleep 60")
    start = time.time()
    r = box.run(["sh", "-c", script], "--timeout", "1", "--grace", "0.3", *private_uid(), mode="ro", timeout=60)
    took = time.time() - start
    assert r.rc == 124 and r.json["timed_out"] is True, r
    assert r.json["signal"] == "SIGKILL", r
    assert took < 20, took
    assert b"started" in r.stdout
    assert not procs_of_uid(r.json["uid"]), "processes survived the timeout"


def test_timeout_sigint_is_enough_for_a_polite_command(box):
    r = box.run(["sleep", "60"], "--timeout", "0.5", "--grace", "5", mode="ro", timeout=60)
    assert r.rc == 124 and r.json["timed_out"] and r.json["signal"] == "SIGINT", r
    assert r.json["wall_time_ms"] < 4000


def test_cancel_with_sigint(box):
    r_fd, w_fd = os.pipe()
    p = subprocess.Popen([RUN, "--workspace", box.ws, "--mode", "ro", "--json-fd", str(w_fd), "--grace", "0.5",
                          *private_uid(), "--", "sh", "-c", "echo up; exec sleep 60"], pass_fds=(w_fd,),
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(w_fd)
    assert p.stdout.readline() == b"up\n"
    p.send_signal(signal.SIGINT)
    p.wait(timeout=20)
    import json
    with os.fdopen(r_fd) as f:
        res = json.loads(f.read())
    assert res["cancelled"] is True and res["timed_out"] is False, res
    assert res["signal"] == "SIGINT" and p.returncode == 130, (res, p.returncode)
    assert not procs_of_uid(res["uid"])


def test_rlimits_applied(box):
    r = box.run(["sh", "-c", "ulimit -n; ulimit -c; ulimit -f"], "--nofile", "77", "--fsize", "1M", mode="ro")
    assert r.stdout.split() == [b"77", b"0", b"2048"], r  # ulimit -f is in 512-byte blocks


def test_tmp_is_private_and_sized(box):
    r = box.run(["sh", "-c", "df -k /tmp | tail -1; touch /tmp/a /dev/shm/b && echo WRITABLE"],
                "--tmp-size", "8M", mode="ro")
    fields = r.stdout.split()
    assert int(fields[1]) == 8192, r
    assert b"WRITABLE" in r.stdout, r


def test_uid_pool_exhaustion_is_a_clear_error(box):
    rt = os.path.join(box.dir, "rt")
    holder = subprocess.Popen([RUN, "--workspace", box.ws, "--mode", "ro", "--runtime-dir", rt,
                               "--uid-pool", "30990-30990", "--", "sh", "-c", "echo up; exec sleep 30"],
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert holder.stdout.readline() == b"up\n"
        start = time.time()
        p = subprocess.run([RUN, "--workspace", box.ws, "--mode", "ro", "--runtime-dir", rt,
                            "--uid-pool", "30990-30990", "--uid-wait", "0.5", "--", "true"],
                           capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
        assert p.returncode == 125 and b"exhausted" in p.stderr, p
        assert time.time() - start < 10
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=30)
    p = subprocess.run([RUN, "--workspace", box.ws, "--mode", "ro", "--runtime-dir", rt,
                        "--uid-pool", "30990-30990", "--", "id", "-u"], capture_output=True,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and p.stdout == b"30990\n", p


def _cgroup_dir(pid, controller):
    """The cgroup v1 dir of @pid for @controller, or the v2 dir (controller None)."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if (controller is None and ctrls == "") or controller in ctrls.split(","):
                with open("/proc/self/mountinfo") as m:
                    for ml in m:
                        parts = ml.split()
                        fstype = parts[parts.index("-") + 1]
                        opts = parts[-1].split(",")
                        if controller is None and fstype == "cgroup2":
                            return parts[4] + path
                        if controller and fstype == "cgroup" and controller in opts:
                            return parts[4] + path
    return None


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def test_limits_apply_to_the_sandboxed_process(box):
    opts = private_uid()
    uid = int(opts[1])
    p = subprocess.Popen([RUN, "--workspace", box.ws, "--mode", "ro", "--pids", "33", "--memory", "100M",
                          "--cpu", "0.5", *opts, "--", "sh", "-c", "echo up; exec sleep 30"],
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert p.stdout.readline() == b"up\n"
        deadline = time.time() + 10
        while time.time() < deadline:
            pids = [q for q in procs_of_uid(uid) if _comm(q) == "sleep"]
            if pids:
                break
            time.sleep(0.05)
        assert pids
        pid = pids[0]
        v2 = _cgroup_dir(pid, None)
        pids_dir = _cgroup_dir(pid, "pids")
        if pids_dir and "/draftbox/run-" in pids_dir:
            mem = _cgroup_dir(pid, "memory")
            cpu = _cgroup_dir(pid, "cpu")
            assert open(os.path.join(pids_dir, "pids.max")).read().strip() == "33"
            assert int(open(os.path.join(mem, "memory.limit_in_bytes")).read()) == 100 << 20
            assert int(open(os.path.join(cpu, "cpu.cfs_quota_us")).read()) == 50000
            assert "/draftbox/run-" in mem and "/draftbox/run-" in cpu
        else:
            assert v2 and "/draftbox/run-" in v2, (v2, pids_dir)
            assert open(os.path.join(v2, "pids.max")).read().strip() == "33"
            assert int(open(os.path.join(v2, "memory.max")).read()) == 100 << 20
            assert open(os.path.join(v2, "cpu.max")).read().split()[0] == "50000"
    finally:
        p.terminate()
        p.wait(timeout=30)
    assert not procs_of_uid(uid)
