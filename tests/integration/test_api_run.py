# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftboxd runs: the execd SSE frame format, exit codes, stderr opt-in,
envs, timeouts, cancel on disconnect, serialization, background runs, and
the sandbox editing a workspace owned by a normal user. Real draftfs, real
bwrap through draftbox-run."""
import json
import os
import socket
import threading
import time


from apiutil import api, env, parse_frames  # noqa: F401  (fixtures)

S = "/v1/isolated/session"


def test_stream_format_and_exit_codes(api):
    env, srv, c = api
    sid = c.create(env.workspace())
    status, frames = c.run(sid, "echo one\necho two\n\necho three")
    assert status == 200
    assert [f["type"] for f in frames] == ["stdout", "stdout", "stdout", "execution_complete"]
    assert [f["text"] for f in frames[:3]] == ["one", "two", "three"]
    assert all(isinstance(f["timestamp"], int) and f["timestamp"] > 1.6e12 for f in frames)
    assert frames[-1]["exit_code"] == 0

    status, frames = c.run(sid, "echo out; echo err >&2; exit 3")
    last = frames[-1]
    assert last["type"] == "error"
    assert last["text"] == "command exited with code 3"
    assert last["error"]["ename"] == "ExitError" and last["error"]["evalue"] == "3"
    assert last["exit_code"] == 3
    # stderr is merged into stdout by default (as OpenSandbox)
    assert [f["text"] for f in frames if f["type"] == "stdout"] == ["out", "err"]

    status, frames = c.run(sid, "echo out; echo err >&2", separate_stderr=True)
    assert {(f["type"], f.get("text")) for f in frames[:-1]} == {("stdout", "out"), ("stderr", "err")}

    r = c.request("POST", f"{S}/{sid}/run", {"code": ""})
    assert r.status == 400 and r.json()["code"] == "INVALID_REQUEST_BODY"
    r = c.request("POST", f"{S}/{sid}/run", {"code": "true", "timeout_seconds": "5"})
    assert r.status == 400
    r = c.request("POST", f"{S}/{sid}/run", {"code": "true", "envs": {"1BAD": "x"}})
    assert r.status == 400
    r = c.request("POST", f"{S}/{sid}/run", raw=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 400


def test_code_on_stdin_and_envs(api):
    env, srv, c = api
    sid = c.create(env.workspace())
    tricky = "x='a\"b'\"'\"'c'; echo \"$x\"; cat <<'EOF'\n$(not expanded) `nor this`\nEOF\necho \"$GREETING\" | tr a-z A-Z"
    out, last = c.run_ok(sid, tricky, envs={"GREETING": "hi there; rm -rf /"})
    assert out.splitlines() == ["a\"b'c", "$(not expanded) `nor this`", "HI THERE; RM -RF /"]
    assert last["type"] == "execution_complete"
    # invalid UTF-8 and long lines survive as valid JSON
    out, _ = c.run_ok(sid, "printf 'a\\377b\\n'; head -c 200000 /dev/zero | tr '\\0' x; echo")
    lines = out.splitlines()
    assert lines[0] == "a\ufffdb"
    assert sum(len(l) for l in lines[1:]) == 200000


def test_commands_reading_stdin_do_not_eat_the_script(api):
    """The code reaches bash on its stdin, but its commands read /dev/null: a `cat`, `read` or `python -` used
    to swallow the rest of the script, which then ended early with exit 0."""
    env, srv, c = api
    sid = c.create(env.workspace())
    out, last = c.run_ok(sid, "echo step1\nhead -1\ncat\nread -r x; echo \"read=$? x=$x\"\necho step2\n"
                         "python3 -c 'import sys; print(repr(sys.stdin.read()))'\nexit 7\necho never")
    assert out.splitlines() == ["step1", "read=1 x=", "step2", "''"], out
    assert last["exit_code"] == 7, last
    out, _ = c.run_ok(sid, "cat <<EOF\nlast line $((1 + 1))\nEOF")  # a here-doc closed by the end of the code
    assert out == "last line 2", out


def test_envs_stay_off_host_command_lines(api):
    """A run's envs often carry tokens: they must not show up in any host process's
    command line (every host user can read those with ps), only in the sandbox."""
    env, srv, c = api
    sid = c.create(env.workspace())
    secret = "tok-%d-%s" % (os.getpid(), "q" * 8)
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("r", c.run_ok(
        sid, "echo up > started; sleep 2; echo \"got=$MY_TOKEN\"; env | grep -c '^DRAFTBOX_SETENV_' || true",
        envs={"MY_TOKEN": secret, "OTHER": "a=b"})))
    t.start()
    seen, scanned = [], 0
    deadline = time.monotonic() + 30
    while t.is_alive() and time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if b"draftbox-run" in cmd:
                scanned += 1
            if secret.encode() in cmd:
                seen.append(cmd[:200])
        time.sleep(0.05)
    t.join()
    out, last = res["r"]
    assert scanned > 0, "the launcher was never seen running"
    assert not seen, seen
    assert out.splitlines() == [f"got={secret}", "0"], out


def test_sandbox_edits_workspace_as_owner(api):
    env, srv, c = api
    ws = env.workspace()
    sid = c.create(ws)
    out, last = c.run_ok(sid, "echo more >> a.txt && cat a.txt && mkdir -p new && echo n > new/f && stat -c '%U' a.txt")
    assert last["type"] == "execution_complete", out
    view = os.path.join(srv.state, "sessions", sid, "view")
    with open(os.path.join(view, "a.txt")) as f:
        assert f.read() == "hello\nmore\n"
    upper = os.path.join(srv.state, "sessions", sid, "upper")
    st = os.stat(os.path.join(upper, "a.txt"))
    assert (st.st_uid, st.st_gid) == (1000, 1000), "files written by the sandbox belong to the workspace owner on disk"
    assert os.stat(os.path.join(upper, "new", "f")).st_uid == 1000
    with open(os.path.join(ws, "a.txt")) as f:
        assert f.read() == "hello\n", "the workspace is untouched before a commit"


def test_other_sessions_workspaces_are_hidden(api):
    # balanced: the host's /tmp (where these workspaces are) is bound, so only the hiding keeps them apart
    env, srv, c = api
    wa = env.workspace("wa", files={"a.txt": "mine-a\n"})
    wb = env.workspace("wb", files={"b.txt": "canary-b\n"})
    nested = env.workspace("wa/inner", files={"i.txt": "inner\n"})
    sa = c.create(wa, profile="balanced")
    sb = c.create(wb, profile="balanced")
    c.create(nested, profile="balanced")  # inside A's workspace: A still sees it there
    out, last = c.run_ok(sa, f"cat a.txt inner/i.txt; cat {wb}/b.txt 2>/dev/null; ls -A {wb}; "
                             f"stat -f -c %T {wb}; true")
    assert last["type"] == "execution_complete", out
    assert out.split() == ["mine-a", "inner", "tmpfs"], out
    out, _ = c.run_ok(sb, f"cat b.txt; cat {wa}/a.txt {nested}/i.txt 2>/dev/null; true")
    assert out.split() == ["canary-b"], out


def test_operator_hidden_dirs(env):
    # --hide: every run sees an empty dir there, except what its session is given
    wa = env.workspace("proj/wa", files={"a.txt": "mine\n"})
    secret = env.workspace("secret", files={"s.txt": "canary-s\n"})
    srv = env.server(["--hide", secret, "--hide", os.path.dirname(wa), "--hide", os.path.join(env.base, "absent")])
    c = srv.client()
    sid = c.create(wa, profile="balanced")
    out, last = c.run_ok(sid, f"cat a.txt; cat {secret}/s.txt 2>/dev/null; ls -A {secret}; echo -; ls -A ..; true")
    assert last["type"] == "execution_complete", out
    assert out.split() == ["mine", "-", "wa"], out
    # a session on a hidden dir itself sees its workspace
    sid = c.create(secret, profile="balanced")
    out, _ = c.run_ok(sid, "cat s.txt")
    assert out.split() == ["canary-s"], out
    srv.stop()


def test_timeout(api):
    env, srv, c = api
    sid = c.create(env.workspace())
    t0 = time.time()
    status, frames = c.run(sid, "echo start; sleep 60", timeout_seconds=1)
    assert time.time() - t0 < 20
    last = frames[-1]
    assert last["type"] == "error" and last["error"]["ename"] == "TimeoutError", last
    assert frames[0]["text"] == "start"
    out, _ = c.run_ok(sid, "echo after")
    assert out == "after"


def post_run_raw(srv, sid, code):
    """Starts a foreground run on a raw socket, to read its stream at our pace or hang up on it."""
    body = json.dumps({"code": code}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST %s/%s/run HTTP/1.1\r\nHost: 127.0.0.1\r\nX-EXECD-ACCESS-TOKEN: %s\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (S.encode(), sid.encode(), srv.token.encode(), len(body), body))
    return s


def test_disconnect_cancels_run(api):
    env, srv, c = api
    ws = env.workspace()
    sid = c.create(ws)
    view = os.path.join(srv.state, "sessions", sid, "view")
    s = post_run_raw(srv, sid, "echo started; sleep 5; echo late > late.txt")
    s.settimeout(20)
    got = b""
    while b"started" not in got:
        got += s.recv(4096)
    s.close()
    t0 = time.time()
    out, _ = c.run_ok(sid, "echo next")   # the session is free again quickly
    assert out == "next"
    assert time.time() - t0 < 15
    time.sleep(6)
    assert not os.path.exists(os.path.join(view, "late.txt")), "the cancelled run went on"
    m = c.request("GET", "/metrics").body.decode()
    assert 'draftbox_runs_total{result="cancelled"} 1' in m


def test_endless_output_streams_and_disconnect_stops_it(api):
    # a command that writes without pause: its output must reach the client
    # as it comes, and the client hanging up must still stop it
    env, srv, c = api
    sid = c.create(env.workspace())
    s = post_run_raw(srv, sid, "yes")
    s.settimeout(10)
    got, t0 = 0, time.time()
    while got < 8 << 20:
        chunk = s.recv(1 << 16)
        assert chunk, "the stream ended"
        got += len(chunk)
        assert time.time() - t0 < 60, f"only {got} bytes streamed in 60 s"
    s.close()
    t0 = time.time()
    out, _ = c.run_ok(sid, "echo next")
    assert out == "next"
    assert time.time() - t0 < 20
    m = c.request("GET", "/metrics").body.decode()
    assert 'draftbox_runs_total{result="cancelled"} 1' in m


def test_runs_are_serialized(api):
    env, srv, c = api
    sid = c.create(env.workspace())
    results = []

    def one(tag):
        results.append(c.run(sid, f"echo {tag}1 >> order.log; sleep 0.5; echo {tag}2 >> order.log"))

    threads = [threading.Thread(target=one, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(st == 200 for st, _ in results)
    out, _ = c.run_ok(sid, "cat order.log")
    assert out.split() in (["a1", "a2", "b1", "b2"], ["b1", "b2", "a1", "a2"]), out


def test_background_run(api):
    env, srv, c = api
    sid = c.create(env.workspace())
    r = c.request("POST", f"{S}/{sid}/run", {"code": "for i in 1 2 3; do echo line $i; sleep 0.2; done; exit 4",
                                             "background": True})
    assert r.status == 202, r
    b = r.json()
    assert b["session_id"] == sid and len(b["run_id"]) == 36 and b["started_at"].endswith("Z")
    rid = b["run_id"]
    deadline = time.time() + 20
    while True:
        st = c.request("GET", f"{S}/{sid}/runs/{rid}").json()
        if not st["running"] or time.time() > deadline:
            break
        time.sleep(0.1)
    assert st["running"] is False and st["exit_code"] == 4 and st["finished_at"].endswith("Z"), st
    logs = c.request("GET", f"{S}/{sid}/runs/{rid}/logs")
    assert logs.status == 200
    assert logs.body == b"line 1\nline 2\nline 3\n"
    cur = int(logs.header("EXECD-ISOLATED-TAIL-CURSOR"))
    assert cur == len(logs.body)
    more = c.request("GET", f"{S}/{sid}/runs/{rid}/logs", query={"cursor": 7})
    assert more.body == logs.body[7:] and int(more.header("EXECD-ISOLATED-TAIL-CURSOR")) == cur
    tail = c.request("GET", f"{S}/{sid}/runs/{rid}/logs", query={"cursor": cur})
    assert tail.body == b"" and int(tail.header("EXECD-ISOLATED-TAIL-CURSOR")) == cur
    for bad in ("abc", "-1"):
        assert c.request("GET", f"{S}/{sid}/runs/{rid}/logs", query={"cursor": bad}).status == 400
    assert c.request("GET", f"{S}/{sid}/runs/00000000-0000-4000-8000-000000000000").status == 404


def test_forgotten_runs_leave_no_logs_behind(api):
    """A session keeps the last 32 runs; the log of one it forgets goes too, or
    sandboxed output would fill the state disk outside every quota."""
    env, srv, c = api
    sid = c.create(env.workspace())
    runs_dir = os.path.join(srv.state, "sessions", sid, "runs")
    ids = []
    for i in range(36):
        r = c.request("POST", f"{S}/{sid}/run", {"code": f"echo run {i}", "background": True})
        assert r.status == 202, r
        ids.append(r.json()["run_id"])
        deadline = time.time() + 20
        while c.request("GET", f"{S}/{sid}/runs/{ids[-1]}").json()["running"] and time.time() < deadline:
            time.sleep(0.02)
    logs = sorted(n for n in os.listdir(runs_dir) if n.endswith(".log"))
    assert len(logs) == 32, logs
    assert f"{ids[0]}.log" not in logs and f"{ids[-1]}.log" in logs
    assert c.request("GET", f"{S}/{sid}/runs/{ids[0]}").status == 404
    assert c.request("GET", f"{S}/{sid}/runs/{ids[-1]}/logs").body == b"run 35\n"


def test_delete_stops_background_run_and_run_after_delete(api):
    env, srv, c = api
    sid = c.create(env.workspace())
    r = c.request("POST", f"{S}/{sid}/run", {"code": "sleep 60", "background": True})
    assert r.status == 202
    t0 = time.time()
    c.delete(sid)
    assert time.time() - t0 < 20
    status, r = c.run(sid, "echo hi")
    assert status == 404 and r.json()["code"] == "SESSION_NOT_FOUND"


def test_quota(env):
    srv = env.server(["--quota-bytes=2M", "--quota-inodes=200"])
    c = srv.client()
    sid = c.create(env.workspace())
    status, frames = c.run(sid, "head -c 8000000 /dev/zero > big; echo rc=$?")
    text = " ".join(f.get("text", "") for f in frames)
    assert "rc=0" not in text and ("space" in text.lower() or "quota" in text.lower()), text
    status, frames = c.run(sid, "for i in $(seq 1 400); do : > f$i || break; done; ls | wc -l")
    n = int([f["text"] for f in frames if f["type"] == "stdout"][-1])
    assert n < 400, n
    c.run_ok(sid, "rm -f f* big")
    # over HTTP a full quota is 507 QUOTA_EXCEEDED
    boundary = "----quota"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
            f"Content-Type: application/json\r\n\r\n{{\"path\": \"big.bin\"}}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + b"x" * (4 << 20) + f"\r\n--{boundary}--\r\n".encode()
    r = c.request("POST", f"{S}/{sid}/files/upload", raw=body,
                  headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status == 507 and r.json()["code"] == "QUOTA_EXCEEDED", r
    assert "draftbox_quota_exceeded_total 1" in c.request("GET", "/metrics").body.decode()
    c.delete(sid)
    srv.stop()


def test_fresh_sandbox_per_run(api):
    """Documented choice: each run is a fresh sandbox; files and $HOME persist, shell state does not."""
    env, srv, c = api
    ws = env.workspace()
    sid = c.create(ws)
    c.run_ok(sid, "cd src; export KEPT=no; echo in-home > $HOME/h.txt; echo f > file.txt; sleep 30 >/dev/null 2>&1 &")
    out, _ = c.run_ok(sid, 'pwd; echo "KEPT=${KEPT:-unset}"; cat $HOME/h.txt src/file.txt; pgrep -c sleep || true')
    lines = out.splitlines()
    assert lines[0] == ws, "every run starts in the workspace"
    assert lines[1] == "KEPT=unset", "exports do not persist"
    assert lines[2:4] == ["in-home", "f"], "files in the view and in $HOME persist"
    assert lines[4] == "0", "nothing outlives its run"
