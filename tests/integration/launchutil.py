# SPDX-License-Identifier: LGPL-2.1-or-later
"""Fixtures and helpers for the draftbox-run integration suites.

Every test runs the real draftbox-run (as root) with the real bubblewrap.
`Box` owns a scratch dir with a workspace, a state dir and a session dir,
runs draftbox-run with the JSON result on a separate fd, and checks in
teardown that nothing is left mounted below its dir.
"""
import json
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from conftest import build_path

RUN = build_path("launcher", "draftbox-run")
TRY = build_path("tests", "integration", "try-syscall")
PRELOAD_PROBE = build_path("tests", "integration", "preload-probe.so")
DRAFTFS = build_path("fs", "draftfs")
TRY_DEST = "/run/dbx-test/try-syscall"


def require_sandbox():
    """Skips the calling test module unless we can run real sandboxes."""
    if os.geteuid() != 0:
        pytest.skip("draftbox-run needs root (cgroups, pool uid)", allow_module_level=True)
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed", allow_module_level=True)
    if not os.path.exists(RUN):
        pytest.skip("draftbox-run is not built", allow_module_level=True)


def private_uid():
    """Options for a uid outside the shared pool, so no concurrent session can own it."""
    import random
    uid = random.randint(20000, 29999)
    return ["--uid", str(uid), "--gid", str(uid)]


def mounts_below(path):
    with open("/proc/self/mountinfo") as f:
        return [l.split()[4] for l in f if l.split()[4].startswith(path)]


def procs_of_uid(uid):
    """Host pids whose real uid is @uid."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            out.append(int(pid))
                        break
        except OSError:
            pass
    return out


class Result:
    def __init__(self, proc, result):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.json = result

    def __repr__(self):
        return f"<rc={self.rc} json={self.json} stdout={self.stdout!r} stderr={self.stderr!r}>"


class Box:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="dbx-launch-")
        os.chmod(self.dir, 0o755)
        self.ws = os.path.join(self.dir, "ws")
        os.mkdir(self.ws)
        os.chmod(self.ws, 0o777)  # rw mode: the pool uid must be able to write
        self.state = os.path.join(self.dir, "state")
        os.mkdir(self.state, 0o700)

    def run(self, cmd, *opts, mode="rw", env=None, timeout=60, input_bytes=None,
            workspace=None, check_json=True):
        """Runs draftbox-run [opts] -- cmd; returns a Result with the parsed JSON (or None)."""
        r, w = os.pipe()
        args = [RUN, "--workspace", workspace or self.ws, "--state-dir", self.state,
                "--json-fd", str(w)]
        cmd = list(cmd)
        if cmd and cmd[0] == TRY:
            # the build dir may be under /tmp, which strict hides: expose the helper explicitly
            args += ["--allow", os.path.dirname(TRY), "--expose", f"{TRY}:{TRY_DEST}"]
            cmd[0] = TRY_DEST
        if mode:
            args += ["--mode", mode]
        args += list(opts) + ["--"] + list(cmd)
        try:
            proc = subprocess.run(args, pass_fds=(w,), capture_output=True, timeout=timeout,
                                  env=env, input=input_bytes,
                                  stdin=None if input_bytes is not None else subprocess.DEVNULL)
        finally:
            os.close(w)
        with os.fdopen(r) as f:
            text = f.read().strip()
        result = json.loads(text) if text else None
        if check_json and proc.returncode != 125:
            assert result is not None, proc.stderr
        return Result(proc, result)

    def cleanup(self):
        for m in reversed(mounts_below(self.dir)):
            subprocess.run(["umount", "-l", m], check=False)
        left = mounts_below(self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)
        assert not left, f"mounts left behind: {left}"


@pytest.fixture
def box():
    b = Box()
    yield b
    b.cleanup()
