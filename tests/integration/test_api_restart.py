# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftboxd restarts: sessions and their changes survive a clean stop and
a crash; live mounts are re-adopted, dead ones remounted from the upper;
runs left by a crashed server are killed at start."""
import http.client
import os
import signal
import threading
import time

from apiutil import env, mounts_under  # noqa: F401  (fixtures)

S = "/v1/isolated/session"


def draftfs_pids(view):
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"draftfs") and view.encode() in args:
            pids.append(int(p))
    return pids


def test_restart_keeps_sessions_and_changes(env):
    srv = env.server()
    c = srv.client()
    ws = env.workspace()
    sid = c.create(ws, idle_timeout_seconds=3600)
    sid2 = c.create(env.workspace("ws2"))
    c.run_ok(sid, "echo kept > kept.txt; echo more >> a.txt")
    c.run_ok(sid2, "echo two > two.txt")
    before = c.get(sid).json()
    srv.stop()
    view = os.path.join(srv.state, "sessions", sid, "view")
    view2 = os.path.join(srv.state, "sessions", sid2, "view")
    assert mounts_under(view) == [view], "a clean stop leaves the mounts for the next start"

    # the draftfs of session 2 dies while the server is down: it must come back from the upper
    for pid in draftfs_pids(view2):
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.3)

    srv.start()
    c = srv.client()
    ids = sorted(s["session_id"] for s in c.request("GET", "/v1/isolated/sessions").json()["sessions"])
    assert ids == sorted([sid, sid2])
    after = c.get(sid).json()
    for k in ("created_at", "workspace", "profile", "uid", "gid", "idle_timeout_seconds"):
        assert after[k] == before[k], k
    out, _ = c.run_ok(sid, "cat kept.txt a.txt")
    assert out.split() == ["kept", "hello", "more"]
    out, _ = c.run_ok(sid2, "cat two.txt")
    assert out == "two"
    assert "remounted" in srv.read_log() and "re-adopted" in srv.read_log()
    d = c.request("GET", f"{S}/{sid}/diff").json()
    assert {ch["path"] for ch in d["changes"]} == {"kept.txt", "a.txt"}
    c.delete(sid)
    c.delete(sid2)
    assert mounts_under(srv.state) == []
    srv.stop()


def test_dead_draftfs_is_revived_while_serving(env):
    """A session's draftfs killed under a running server: the next request remounts it from the upper."""
    srv = env.server()
    c = srv.client()
    sid = c.create(env.workspace())
    c.run_ok(sid, "echo kept > kept.txt; echo more >> a.txt")
    view = os.path.join(srv.state, "sessions", sid, "view")
    pids = draftfs_pids(view)
    assert pids, "the session's draftfs is not running"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 5
    while draftfs_pids(view) and time.time() < deadline:
        time.sleep(0.05)
    # a file operation first, then a run: both see every change made before the kill
    r = c.request("GET", c.files_path(sid, "files/info"), query={"path": "kept.txt"})
    assert r.status == 200, r
    out, _ = c.run_ok(sid, "cat kept.txt a.txt")
    assert out.split() == ["kept", "hello", "more"]
    new_pids = draftfs_pids(view)
    assert new_pids and not set(new_pids) & set(pids)
    assert "remounted from its upper" in srv.read_log()
    d = c.request("GET", f"{S}/{sid}/diff").json()
    assert {ch["path"] for ch in d["changes"]} == {"kept.txt", "a.txt"}
    c.delete(sid)
    assert mounts_under(srv.state) == []
    srv.stop()


def test_crash_kills_orphan_runs(env):
    srv = env.server()
    c = srv.client()
    sid = c.create(env.workspace())
    view = os.path.join(srv.state, "sessions", sid, "view")
    def run_until_killed():
        try:
            c.run(sid, "echo go; sleep 6; echo late > late.txt")
        except (OSError, http.client.HTTPException):
            pass  # the server is killed under it

    t = threading.Thread(target=run_until_killed, daemon=True)
    t.start()
    deadline = time.time() + 20
    while not os.path.exists(os.path.join(srv.state, "sessions", sid, "run.pid")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    srv.stop(sig=signal.SIGKILL, check=False)
    srv.start()
    c = srv.client()
    assert "left by a previous server" in srv.read_log()
    time.sleep(7)
    assert not os.path.exists(os.path.join(view, "late.txt")), "the orphan run was not stopped"
    out, _ = c.run_ok(sid, "echo alive")
    assert out == "alive"
    c.delete(sid)
    srv.stop()


def test_stop_during_a_run(env):
    srv = env.server()
    c = srv.client()
    sid = c.create(env.workspace())
    def run_until_stopped():
        try:
            c.run(sid, "echo go; sleep 60")
        except (OSError, http.client.HTTPException, AssertionError):
            pass  # the stream is cut by the stop

    t = threading.Thread(target=run_until_stopped, daemon=True)
    t.start()
    deadline = time.time() + 20
    while not os.path.exists(os.path.join(srv.state, "sessions", sid, "run.pid")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    t0 = time.time()
    srv.stop()   # SIGTERM: the run is cancelled, the server exits 0 without sanitizer reports
    assert time.time() - t0 < 20
    t.join(20)
    srv.start()
    c = srv.client()
    out, _ = c.run_ok(sid, "echo again")
    assert out == "again"
    c.delete(sid)
    srv.stop()


def test_interrupted_delete_is_finished_at_start(env):
    srv = env.server()
    c = srv.client()
    sid = c.create(env.workspace())
    c.run_ok(sid, "echo x > x.txt")
    srv.stop()
    sessions = os.path.join(srv.state, "sessions")
    view = os.path.join(sessions, sid, "view")
    # what a crash between the rename and the removal leaves: a renamed dir, still mounted
    doomed = os.path.join(sessions, ".deleting-" + sid)
    os.rename(os.path.join(sessions, sid), doomed)
    assert mounts_under(doomed), "the view moved with its dir"
    srv.start()
    c = srv.client()
    assert not os.path.exists(doomed)
    assert mounts_under(sessions) == []
    assert c.request("GET", "/v1/isolated/sessions").json() == {"sessions": []}
    assert not os.path.exists(view)
    srv.stop()


def test_one_server_per_state_dir(env):
    srv = env.server()
    other = env.server(start=False, port=None)
    other.start(wait=False)
    assert other.proc.wait(30) != 0
    other.proc = None
    other.log.close()
    assert "another draftboxd is using state dir" in other.read_log()
    assert srv.client().request("GET", "/healthz").status == 200
    srv.stop()
