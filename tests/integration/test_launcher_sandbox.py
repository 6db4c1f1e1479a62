# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftbox-run: what hostile code inside the sandbox must not be able to do.

Each forbidden operation is attempted for real by tests/helpers/try-syscall.c
inside a real bubblewrap sandbox started by draftbox-run.
"""
import os
import shutil
import signal
import stat
import socket
import subprocess
import time

import pytest

from launchutil import PRELOAD_PROBE, TRY, Box, box, private_uid, procs_of_uid, require_sandbox  # noqa: F401

require_sandbox()

# syscall -> errno the filter answers (EPERM unless said otherwise)
FORBIDDEN = [
    "ptrace-traceme", "mount", "umount", "unshare-user", "unshare-mount", "setns",
    "clone-newuser", "keyctl", "add_key", "request_key", "bpf", "userfaultfd",
    "io_uring_setup", "perf_event_open", "tiocsti", "tiocsti-high", "tioclinux",
    "socket-netlink", "socket-packet", "socket-vsock", "socket-inet", "socket-inet6",
    "kexec_load", "init_module", "reboot", "swapon", "acct", "open_by_handle_at",
    "fsopen", "open_tree", "move_mount", "chroot", "setuid0", "process_vm_readv",
    "personality-bsd",
]


@pytest.mark.parametrize("profile", ["strict", "balanced"])
def test_forbidden_syscalls_fail(box, profile):
    # one sandbox per call: a shell loop would let one death hide the others
    for name in FORBIDDEN:
        r = box.run([TRY, name], "--profile", profile, mode="ro")
        assert r.rc == 1, (name, r)
        assert b"errno=EPERM" in r.stdout, (name, r)


def test_allowed_syscalls_still_work(box):
    for name in ["clone-plain", "socket-unix", "personality-query", "tiocgwinsz"]:
        r = box.run([TRY, name], mode="ro")
        assert r.rc == 0, (name, r)


def test_clone3_is_enosys(box):
    r = box.run([TRY, "clone3"], mode="ro")
    assert r.rc == 1 and b"errno=ENOSYS" in r.stdout, r


def test_profiles_differ_in_personality(box):
    strict = box.run([TRY, "personality-linux32"], "--profile", "strict", mode="ro")
    balanced = box.run([TRY, "personality-linux32"], "--profile", "balanced", mode="ro")
    assert strict.rc == 1 and b"EPERM" in strict.stdout, strict
    assert balanced.rc == 0, balanced


def test_foreign_arch_syscall_kills(box):
    # Outside the sandbox an i386 syscall must reach the kernel, or the filter is never asked.
    bare = subprocess.run([TRY, "i386"], capture_output=True, timeout=30)
    if bare.returncode == -signal.SIGSEGV:
        pytest.skip("IA-32 emulation is off in this kernel (int 0x80 faults before seccomp sees it)")
    assert bare.returncode == 0 and b"i386: returned" in bare.stdout, bare
    r = box.run([TRY, "i386"], mode="ro")
    assert r.json["signal"] == "SIGSYS", r
    assert r.rc == 128 + signal.SIGSYS
    assert b"returned" not in r.stdout


def test_share_net_allows_inet(box):
    r = box.run([TRY, "socket-inet"], "--share-net", mode="ro")
    assert r.rc == 0, r
    r = box.run([TRY, "socket-netlink"], "--share-net", mode="ro")
    assert r.rc == 1, r


SYS_PROBE = ("echo NET; ls /sys/class/net; echo CG; ls /sys/fs/cgroup; echo FW; ls /sys/firmware; "
             "echo DBG; ls -A /sys/kernel/debug 2>/dev/null; ls -A /sys/kernel/tracing 2>/dev/null; "
             "echo CPU; cat /sys/devices/system/cpu/online; echo MNT; "
             "awk '$5 ~ \"^/sys\" {for (i = 7; i <= NF; i++) if ($i == \"-\") print $5, $(i + 1), $6}' "
             "/proc/self/mountinfo; echo W; touch /sys/x 2>&1 && echo wrote; true")


def sys_sections(out):
    """SYS_PROBE's output as {section: [lines]}."""
    got, cur = {}, None
    for line in out.decode().splitlines():
        if line in ("NET", "CG", "FW", "DBG", "CPU", "MNT", "W"):
            cur = got.setdefault(line, [])
        else:
            cur.append(line)
    return got


def host_mounts_under_sys():
    with open("/proc/self/mountinfo") as f:
        return [ln.split()[4] for ln in f if ln.split()[4].startswith("/sys/")]


def test_sys_is_the_sandbox_own(box):
    # A fresh sysfs mounted in the sandbox's network namespace: no host NIC
    # (their names and MACs), none of the host's submounts (the cgroup tree
    # with other runs' names, debugfs, tracefs), firmware masked, read-only;
    # the CPU topology that nproc-style readers need is still there.
    r = box.run(["sh", "-c", SYS_PROBE], mode="ro")
    assert r.rc == 0, r
    got = sys_sections(r.stdout)
    assert got["NET"] == ["lo"], (got, os.listdir("/sys/class/net"))
    assert got["CG"] == [] and got["FW"] == [] and got["DBG"] == [], got
    with open("/sys/devices/system/cpu/online") as f:
        assert got["CPU"] == [f.read().strip()], got
    mounts = {ln.split()[0]: ln.split()[1:] for ln in got["MNT"]}
    assert mounts["/sys"][0] == "sysfs" and mounts["/sys"][1].startswith("ro"), got
    if os.path.isdir("/sys/firmware"):
        assert mounts["/sys/firmware"][0] == "tmpfs", got
    assert all(m in ("/sys", "/sys/firmware", "/sys/devices/virtual/powercap") for m in mounts), got
    assert "wrote" not in got["W"] and any("Read-only" in ln for ln in got["W"]), got
    # the test means something only if the host has what must be hidden
    assert "/sys/fs/cgroup" in host_mounts_under_sys() or os.listdir("/sys/fs/cgroup"), host_mounts_under_sys()
    if set(os.listdir("/sys/class/net")) == {"lo"}:
        pytest.skip("the host has no NIC but lo: nothing to hide under /sys/class/net (the rest was checked)")


def test_sys_with_share_net_shows_host_nics(box):
    # --share-net runs in the host's network namespace: they see its NICs
    # through netlink anyway; the submounts stay hidden.
    r = box.run(["sh", "-c", SYS_PROBE], "--share-net", mode="ro")
    assert r.rc == 0, r
    got = sys_sections(r.stdout)
    assert sorted(got["NET"]) == sorted(os.listdir("/sys/class/net")), got
    assert got["CG"] == [] and got["DBG"] == [], got


def test_identity_is_a_dropped_pool_uid(box):
    r = box.run(["sh", "-c", "id -u; id -g; id -G; grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status; "
                 "cat /proc/self/uid_map"], mode="ro")
    assert r.rc == 0, r
    lines = r.stdout.decode().split("\n")
    uid, gid, groups = int(lines[0]), int(lines[1]), lines[2].split()
    assert 10000 <= uid <= 10999 and gid == uid and groups == [str(gid)]
    assert uid == r.json["uid"]
    status = dict(l.split(":\t") for l in lines[3:] if ":\t" in l)
    for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]:
        assert int(status[k], 16) == 0, (k, status)
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"
    assert lines[-2].split() == ["0", "0", "4294967295"]  # initial user ns: uid is the host uid


def test_two_live_sessions_get_distinct_uids_and_cannot_signal(box):
    a = subprocess.Popen([box_run_path(), "--workspace", box.ws, "--mode", "ro", "--state-dir", box.state,
                          *private_uid(), "--", "sh", "-c", "id -u; exec sleep 30"], stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    try:
        uid_a = int(a.stdout.readline())
        deadline = time.time() + 10
        while time.time() < deadline:
            pids_a = [p for p in procs_of_uid(uid_a) if comm(p) == "sleep"]
            if pids_a:
                break
            time.sleep(0.05)
        assert pids_a
        for pid in pids_a:
            r = box.run([TRY, "kill", str(pid)], mode="ro")
            assert r.json["uid"] != uid_a
            assert r.rc == 1 and (b"ESRCH" in r.stdout or b"EPERM" in r.stdout), r
            r = box.run([TRY, "ptrace", str(pid)], mode="ro")
            assert r.rc == 1, r
        # the host view: a process with session B's uid may not signal session A's
        uid_b = uid_a + 1 if uid_a < 10999 else uid_a - 1
        out = subprocess.run(["setpriv", f"--reuid={uid_b}", f"--regid={uid_b}", "--clear-groups",
                              TRY, "kill", str(pids_a[-1])], capture_output=True)
        assert out.returncode == 1 and b"EPERM" in out.stdout, out
        assert a.poll() is None
    finally:
        a.send_signal(signal.SIGTERM)
        a.wait(timeout=30)
    assert not procs_of_uid(uid_a)


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def box_run_path():
    from launchutil import RUN
    return RUN


def test_cannot_read_shadow_or_write_outside(box):
    extra = os.path.join(box.dir, "extra")
    os.mkdir(extra)
    os.chmod(extra, 0o777)
    script = ("cat /etc/shadow && echo SHADOW; "
              "for p in /etc/x /usr/x /root/x %s/x; do touch $p 2>/dev/null && echo WROTE $p; done; "
              "touch /var/tmp/x; "
              "touch %s/ok && touch %s/ok2 && echo INSIDE" % (box.dir, box.ws, extra))
    r = box.run(["sh", "-c", script], "--allow", box.dir, "--extra-writable", extra)
    assert b"SHADOW" not in r.stdout and b"WROTE" not in r.stdout, r
    assert b"INSIDE" in r.stdout, r
    assert os.path.exists(os.path.join(box.ws, "ok")) and os.path.exists(os.path.join(extra, "ok2"))
    # strict's /var/tmp is a private tmpfs (test_launcher_hide.py): writable, and nothing reaches the host
    for p in ["/etc/x", "/usr/x", "/var/tmp/x", "/root/x", os.path.join(box.dir, "x")]:
        assert not os.path.exists(p)


def test_ro_mode_cannot_write_workspace(box):
    r = box.run(["sh", "-c", "touch x"], mode="ro")
    assert r.rc != 0
    assert not os.path.exists(os.path.join(box.ws, "x"))


def test_state_dir_and_other_sessions_are_hidden(box):
    other = os.path.join(box.state, "sessions", "other", "upper")
    os.makedirs(other)
    with open(os.path.join(other, "secret"), "w") as f:
        f.write("canary-upper")
    # also a session dir outside the state dir, as another draftbox-run would make
    sess = os.path.join(box.dir, "sess")
    os.makedirs(os.path.join(sess, "upper"))
    with open(os.path.join(sess, "upper", "s2"), "w") as f:
        f.write("canary-sess")
    os.chmod(sess, 0o700)
    r = box.run(["sh", "-c", f"ls -la {box.state}; cat {other}/secret; cat {sess}/upper/s2; true"],
                "--profile", "balanced")
    assert b"canary" not in r.stdout, r
    assert b"sessions" not in r.stdout, r


def test_environment_is_filtered(box):
    env = dict(os.environ)
    env.update({"DRAFTBOX_CANARY_API_KEY": "canary-1", "AWS_SECRET_ACCESS_KEY": "canary-2",
                "my_token": "canary-3", "GITHUB_TOKEN": "canary-4", "DB_PASSWORD": "canary-5",
                "LD_LIBRARY_PATH": "/canary", "aliyun_key": "canary-6", "KUBE_X": "canary-7",
                "STRIPE_SECRET_KEY": "canary-8", "GH_PAT": "canary-9", "SSH_AUTH_SOCK": "/tmp/canary-10",
                "DATABASE_URL": "postgres://app:canary-11@db/app",
                "CACHE_ADDR": "redis://:canary-12@cache:6379/0",
                "HARMLESS": "visible", "PROXY_ADDR": "http://proxy:3128"})
    r = box.run(["sh", "-c", "env; tr '\\0' '\\n' < /proc/1/environ; echo; cat /proc/self/environ"],
                env=env, mode="ro")
    assert r.rc == 0, r
    assert b"canary" not in r.stdout, r
    assert b"HARMLESS=visible" in r.stdout and b"PROXY_ADDR=http://proxy:3128" in r.stdout
    r = box.run(["sh", "-c", "env"], "--env-allow", "HARMLESS,PATH", "--setenv", "X_SET=1",
                "--env-deny", "NOTHING", env=env, mode="ro")
    names = sorted(l.split("=")[0] for l in r.stdout.decode().splitlines() if "=" in l)
    assert "HARMLESS" in names and "X_SET" in names and "HOME" in names
    assert "DRAFTBOX_CANARY_API_KEY" not in names and "USER" not in names, names
    r = box.run(["sh", "-c", "env"], "--env-deny", "HARMLESS", env=env, mode="ro")
    assert b"HARMLESS" not in r.stdout

    # /proc/1/environ is bwrap's environment: read it from the host, where we can
    marker = f"marker-{os.getpid()}"
    p = subprocess.Popen([box_run_path(), "--workspace", box.ws, "--mode", "ro", "--", "sh", "-c",
                          "echo up; exec sleep 30", marker], env=env, stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    try:
        assert p.stdout.readline() == b"up\n"
        seen = 0
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                if b"bwrap" not in cmd.split(b"\0")[0] or marker.encode() not in cmd:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            seen += 1
            # bwrap gets the sandbox's environment as options, and none of its own
            assert environ == b"", environ
        assert seen >= 1
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_loader_variables_reach_only_the_sandboxed_command(box):
    """--setenv LD_PRELOAD (the API's envs take this road) must not be honoured by
    bwrap, which runs as root on the host, only by the command in the sandbox."""
    lib = os.path.join(box.ws, "probe.so")
    shutil.copy(PRELOAD_PROBE, lib)
    os.chmod(lib, 0o755)
    log = os.path.join(box.ws, "preload.log")
    uid = private_uid()
    r = box.run(["/usr/bin/true"], *uid, "--setenv", f"LD_PRELOAD={lib}",
                "--setenv", f"DRAFTBOX_PRELOAD_LOG={log}")
    assert r.rc == 0, r
    with open(log) as f:
        loads = [l.split(" ", 1) for l in f.read().splitlines()]
    assert loads and all(u != "0" for u, _ in loads), f"loaded as root: {loads}"
    assert any(exe == "/usr/bin/true" and u == uid[1] for u, exe in loads), "the command honours it"
    assert not any("bwrap" in exe for _, exe in loads), loads


def test_home_and_xdg_are_redirected(box):
    home = os.path.join(box.dir, "home")
    r = box.run(["sh", "-c", "for v in HOME TMPDIR XDG_CONFIG_HOME XDG_CACHE_HOME XDG_STATE_HOME XDG_DATA_HOME; "
                 "do eval d=\\$$v; touch $d/f || exit 1; echo $d; done"], "--home-dir", home, mode="ro")
    assert r.rc == 0, r
    dirs = r.stdout.decode().split()
    assert all(d.startswith(home + "/") for d in dirs), dirs
    assert os.path.exists(os.path.join(home, "home", "f"))
    assert os.stat(os.path.join(home, "home")).st_uid == r.json["uid"]
    r = box.run(["sh", "-c", "echo $HOME; touch $HOME/x"], mode="ro")
    assert r.rc == 0 and r.stdout.startswith(b"/run/"), r


def test_unix_sockets_under_run_are_unreachable(box):
    path = f"/run/dbx-launch-test-{os.getpid()}.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    try:
        r = box.run(["python3", "-c", f"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{path}'); "
                     "print('CONNECTED')"], mode="ro", env={"PATH": "/usr/bin:/bin"})
        assert b"CONNECTED" not in r.stdout and r.rc != 0, r
        r = box.run(["ls", "/run"], mode="ro")
        assert os.path.basename(path).encode() not in r.stdout
    finally:
        srv.close()
        os.unlink(path)


def test_stdin_is_dev_null_unless_given(box):
    r = box.run(["sh", "-c", "cat; echo END"], mode="ro")
    assert r.stdout == b"END\n", r
    data = os.path.join(box.dir, "in.txt")
    with open(data, "w") as f:
        f.write("from-file\n")
    r = box.run(["cat"], "--input", data, mode="ro")
    assert r.stdout == b"from-file\n", r
    r = box.run(["cat"], "--stdin-fd", "0", mode="ro", input_bytes=b"piped\n")
    assert r.stdout == b"piped\n", r


def test_helper_fds_are_out_of_reach(box):
    # the exec helper (the command's parent, same uid) holds the status pipe
    r = box.run(["sh", "-c", "ls /proc/$PPID/fd && echo LISTED; cat /proc/$PPID/environ && echo READ; true"],
                mode="ro")
    assert b"LISTED" not in r.stdout and b"READ" not in r.stdout, r
    assert r.json["exit_code"] == 0


def test_tty_ioctls_are_refused_whatever_the_high_bits(box):
    """The kernel reads an ioctl command as 32 bits: 0x100005412 is TIOCSTI. The helper
    issues them on /dev/null, so past the filter the answer would be ENOTTY, not EPERM."""
    for name in ("tiocsti-high-all", "tioclinux-high"):
        r = box.run([TRY, name], mode="ro")
        assert r.rc == 1 and b"errno=EPERM" in r.stdout, (name, r)
    # a neighbour with high bits still passes the filter (and the kernel says ENOTTY)
    r = box.run([TRY, "tiocnotty-high"], mode="ro")
    assert r.rc == 1 and b"errno=ENOTTY" in r.stdout, r


def test_no_setid_bits_on_host_files(box):
    """In rw mode the sandbox writes host files: a setuid file there would run as its
    owner for any host user. Modes with S_ISUID/S_ISGID are refused; others work."""
    script = "\n".join([
        "import os, socket",
        "os.chdir(os.environ['WS'])",
        "open('f', 'w').close()",
        "def t(what, fn):",
        "    try:",
        "        fn(); print(what, 'ok')",
        "    except OSError as e:",
        "        print(what, e.errno)",
        "t('chmod755', lambda: os.chmod('f', 0o755))",
        "t('chmod4755', lambda: os.chmod('f', 0o4755))",
        "t('chmod2755', lambda: os.chmod('f', 0o2755))",
        "t('sticky', lambda: os.chmod('f', 0o1777))",
        "t('creat4755', lambda: os.close(os.open('g', os.O_CREAT | os.O_WRONLY, 0o4755)))",
        "t('open-odd-mode', lambda: os.close(os.open('f', os.O_RDONLY, 0o7777)))",
        "t('socketpair-unix', lambda: socket.socketpair(socket.AF_UNIX))",
        "t('socketpair-inet', lambda: socket.socketpair(socket.AF_INET))",
    ])
    r = box.run(["python3", "-c", script], *private_uid(), "--setenv", f"WS={box.ws}")
    assert r.rc == 0, r
    got = dict(l.split() for l in r.stdout.decode().splitlines())
    assert got == {"chmod755": "ok", "chmod4755": "1", "chmod2755": "1", "sticky": "ok", "creat4755": "1",
                   "open-odd-mode": "ok", "socketpair-unix": "ok", "socketpair-inet": "1"}, got
    for name in os.listdir(box.ws):
        assert not os.lstat(os.path.join(box.ws, name)).st_mode & (stat.S_ISUID | stat.S_ISGID), name
