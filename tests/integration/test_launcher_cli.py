# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftbox-run: bad input gets a clear error and leaves nothing behind; the probe; expose rules."""
import json
import os
import subprocess

from launchutil import RUN, box, mounts_below, require_sandbox  # noqa: F401

require_sandbox()


def run_raw(*args, **kw):
    return subprocess.run([RUN, *args], capture_output=True, stdin=subprocess.DEVNULL, timeout=60, **kw)


def test_bad_input_errors(box):
    notdir = os.path.join(box.dir, "file")
    open(notdir, "w").close()
    cases = [
        (["--frobnicate", "--workspace", box.ws, "--", "true"], b"unknown"),
        (["--workspace", "relative/dir", "--", "true"], b"absolute"),
        (["--workspace", notdir, "--mode", "rw", "--", "true"], b"not a directory"),
        (["--workspace", box.ws + "/missing", "--mode", "rw", "--", "true"], b"missing"),
        (["--workspace", box.ws, "--mode", "rw", "--bwrap", "/nonexistent/bwrap", "--", "true"], b"bwrap"),
        (["--workspace", box.ws, "--mode", "rw", "--expose", "/etc", "--", "true"], b"allowlist"),
        (["--workspace", box.ws, "--mode", "rw", "--expose", "etc:/x", "--", "true"], b"expose"),
        (["--workspace", box.ws, "--mode", "bogus", "--", "true"], b"mode"),
        (["--workspace", box.ws, "--uid", "0", "--gid", "0", "--", "true"], b"uid"),
        (["--workspace", box.ws, "--memory", "lots", "--", "true"], b"memory"),
        (["--workspace", box.ws], b"command"),
        (["--workspace", box.ws, "true"], b"--"),
        (["--workspace", box.ws, "--mode", "overlay", "--view", box.ws, "--", "true"], b"draftfs"),
    ]
    for args, word in cases:
        p = run_raw(*args)
        assert p.returncode == 125, (args, p)
        assert word in p.stderr, (args, p.stderr)
        assert p.stderr.startswith(b"draftbox-run: "), p.stderr
        assert not mounts_below(box.dir)


def test_expose_allowlist_and_rules(box):
    allowed = os.path.join(box.dir, "allowed")
    os.makedirs(os.path.join(allowed, "sub"))
    with open(os.path.join(allowed, "data"), "w") as f:
        f.write("exposed-data")
    os.chmod(allowed, 0o777)
    link = os.path.join(allowed, "escape")
    os.symlink("/etc", link)
    # allowed, read-only by default
    r = box.run(["sh", "-c", "cat /tmp/x/data; touch /tmp/x/new && echo WROTE"],
                "--allow", allowed, "--expose", f"{allowed}:/tmp/x", mode="ro")
    assert b"exposed-data" in r.stdout and b"WROTE" not in r.stdout, r
    # the last rule for a dest wins: rw
    r = box.run(["sh", "-c", "touch /tmp/x/new && echo WROTE"],
                "--allow", allowed, "--expose", f"{allowed}:/tmp/x:ro", "--expose", f"{allowed}:/tmp/x:rw", mode="ro")
    assert b"WROTE" in r.stdout, r
    assert os.path.exists(os.path.join(allowed, "new"))
    # a symlink out of the allowlist is resolved and refused
    p = run_raw("--workspace", box.ws, "--mode", "ro", "--allow", allowed, "--expose", f"{link}:/tmp/e", "--", "true")
    assert p.returncode == 125 and b"allowlist" in p.stderr, p
    # the allowlist file
    allow_file = os.path.join(box.dir, "allow.conf")
    with open(allow_file, "w") as f:
        f.write(f"# comment\n{allowed}\n")
    r = box.run(["cat", "/tmp/y/data"], "--allow-file", allow_file, "--expose", f"{allowed}/data:/tmp/y/data",
                mode="ro")
    assert r.stdout == b"exposed-data", r


def test_workspace_dest_and_cwd(box):
    with open(os.path.join(box.ws, "hello"), "w") as f:
        f.write("hi")
    r = box.run(["sh", "-c", "pwd; cat hello"], "--workspace-dest", "/tmp/w", mode="ro")
    assert r.stdout == b"/tmp/w\nhi", r
    os.mkdir(os.path.join(box.ws, "sub"))
    r = box.run(["pwd"], "--cwd", box.ws + "/sub", mode="ro")
    assert r.stdout.strip() == (box.ws + "/sub").encode(), r


def test_probe_reports_full_isolation():
    p = run_raw("--probe")
    assert p.returncode == 0, p
    j = json.loads(p.stdout)
    assert j["isolation"] == "full" and j["missing"] == []
    assert j["bwrap"]["version"].startswith("0.")
    assert j["privilege_drop"]["verified"] is True
    assert j["seccomp"]["filter_compiles"] is True
    assert j["cgroup"]["version"] in ("v1", "v2") and "pids" in j["cgroup"]["controllers"]
    for k in ["user_namespaces", "setpriv", "fuse", "kernel_overlay"]:
        assert k in j


def test_probe_refuses_without_bwrap():
    p = run_raw("--probe", "--bwrap", "/nonexistent/bwrap")
    assert p.returncode == 1, p
    j = json.loads(p.stdout)
    assert j["isolation"] == "unavailable" and "bwrap" in j["missing"]
    assert b"not available" in p.stderr


def test_bwrap_setup_error_is_reported_once(box):
    p = run_raw("--workspace", box.ws, "--mode", "ro", "--allow", "/etc", "--expose", "/etc/hostname:/usr/no/such",
                "--", "true")
    assert p.returncode == 125, p
    lines = p.stderr.decode().strip().splitlines()
    assert lines == [lines[0]] and "bwrap failed to set up the sandbox: bwrap: Can't mkdir" in lines[0], p.stderr


def test_setup_race_with_a_host_unmount_is_retried(box):
    # a bwrap that fails like a racing unmount the first time, then works
    count = os.path.join(box.dir, "count")
    fake = os.path.join(box.dir, "fake-bwrap")
    with open(fake, "w") as f:
        f.write(f"""#!/bin/sh
n=$(cat {count} 2>/dev/null || echo 0)
echo $((n+1)) > {count}
if [ "$n" -lt 2 ]; then
  echo 'bwrap: Can'"'"'t bind mount /oldroot/ on /newroot/: Unable to apply mount flags: remount "/x/view": No such file or directory' >&2
  exit 1
fi
exec /usr/bin/bwrap "$@"
""")
    os.chmod(fake, 0o755)
    r = box.run(["echo", "ran"], "--bwrap", fake, mode="ro")
    assert r.rc == 0 and r.stdout == b"ran\n", r
    assert open(count).read().strip() == "3"
    assert b"Unable to apply" not in r.stderr, r
