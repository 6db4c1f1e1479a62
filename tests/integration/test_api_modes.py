# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftboxd: rw and ro sessions (idmapped mounts), idle collection, the
session limit and the Unix socket listener."""
import http.client
import json
import os
import socket
import time

from apiutil import env, mounts_under  # noqa: F401  (fixtures)

S = "/v1/isolated/session"


def test_rw_and_ro_modes(env):
    srv = env.server()
    c = srv.client()
    caps = c.request("GET", "/v1/isolated/capabilities").json()
    if not caps["rw_supported"]:
        srv.stop()
        import pytest
        pytest.skip("idmapped mounts do not work here")
    ws = env.workspace()
    sid = c.create(ws, mode="rw")
    out, last = c.run_ok(sid, "echo rw >> a.txt && touch made-in-rw && stat -c '%u' a.txt")
    assert last["type"] == "execution_complete", out
    with open(os.path.join(ws, "a.txt")) as f:
        assert f.read() == "hello\nrw\n", "rw writes the workspace itself"
    st = os.stat(os.path.join(ws, "made-in-rw"))
    assert (st.st_uid, st.st_gid) == (1000, 1000), "files made in rw mode belong to the owner"
    r = c.request("GET", f"{S}/{sid}/diff")
    assert r.status == 400 and r.json()["code"] == "NOT_SUPPORTED"
    c.delete(sid)
    assert os.path.exists(os.path.join(ws, "made-in-rw")), "deleting an rw session keeps the workspace"

    sid = c.create(ws, mode="ro")
    status, frames = c.run(sid, "cat a.txt; echo x >> a.txt")
    texts = [f.get("text", "") for f in frames]
    assert "rw" in texts and any("Read-only" in t for t in texts), texts
    assert frames[-1]["type"] == "error"
    r = c.request("DELETE", f"{S}/{sid}/files", query={"path": "a.txt"})
    assert 400 <= r.status < 500, r
    with open(os.path.join(ws, "a.txt")) as f:
        assert f.read() == "hello\nrw\n"
    c.delete(sid)
    assert mounts_under(srv.state) == []
    srv.stop()


def test_idle_collection_and_limit(env):
    srv = env.server(["--max-sessions=2"])
    c = srv.client()
    a = c.create(env.workspace("a"), idle_timeout_seconds=1)
    b = c.create(env.workspace("b"))
    r = c.create(env.workspace("c"), expect=503)
    assert r.json()["code"] == "SERVICE_UNAVAILABLE"
    deadline = time.time() + 15
    while c.get(a).status == 200 and time.time() < deadline:
        time.sleep(0.2)
    assert c.get(a).status == 404, "the idle session was collected"
    assert c.get(b).status == 200, "a session without idle timeout stays"
    # the metric counts a deletion once it is complete (unmounted, removed)
    while ('draftbox_sessions_deleted_total{reason="idle"} 1' not in c.request("GET", "/metrics").body.decode()
           and time.time() < deadline):
        time.sleep(0.1)
    assert 'draftbox_sessions_deleted_total{reason="idle"} 1' in c.request("GET", "/metrics").body.decode()
    assert mounts_under(os.path.join(srv.state, "sessions", a)) == []
    c.create(env.workspace("c"))  # room again
    srv.stop()


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=30)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def test_unix_socket(env):
    path = os.path.join(env.base, "api.sock")
    srv = env.server(["--unix-socket", path], start=False)
    srv.start(wait=False)
    deadline = time.time() + 20
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)
    assert (os.stat(path).st_mode & 0o777) == 0o600
    token = srv.token
    conn = UnixConnection(path)
    conn.request("GET", "/v1/isolated/sessions", headers={"X-EXECD-ACCESS-TOKEN": token, "Host": "whatever"})
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read()) == {"sessions": []}
    conn.close()
    conn = UnixConnection(path)
    conn.request("GET", "/v1/isolated/sessions", headers={"X-EXECD-ACCESS-TOKEN": token, "Origin": "http://evil.example"})
    assert conn.getresponse().status == 403
    conn.close()
    srv.stop()


def test_ro_without_idmapped_mounts(env):
    srv = env.server(["--idmap=false"])
    c = srv.client()
    ws = env.workspace()
    r = c.create(ws, mode="rw", expect=400)
    assert r.json()["code"] == "NOT_SUPPORTED"
    sid = c.create(ws, mode="ro")
    status, frames = c.run(sid, "stat -c '%u' a.txt; cat a.txt; echo x >> a.txt")
    texts = [f.get("text", "") for f in frames]
    assert "hello" in texts and any("Read-only" in t for t in texts), texts
    uid = c.get(sid).json()["sandbox_uid"]
    assert str(uid) in texts, "the read-only draftfs maps the owner to the sandbox uid"
    with open(os.path.join(ws, "a.txt")) as f:
        assert f.read() == "hello\n"
    c.delete(sid)
    assert mounts_under(srv.state) == []
    srv.stop()
