# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftboxd: session lifecycle, auth, Host/Origin checks and bad input,
against the real server with real draftfs mounts."""
import json
import os
import socket
import subprocess
import time

from apiutil import api, build_path, env, mounts_under  # noqa: F401  (fixtures)

S = "/v1/isolated/session"


def test_create_get_list_delete(api):
    env, srv, c = api
    ws = env.workspace()
    r = c.request("POST", S, {"workspace": {"path": ws}, "idle_timeout_seconds": 600, "unknown_field": [1, 2]})
    assert r.status == 201, r
    body = r.json()
    sid = body["session_id"]
    assert len(sid) == 36 and body["created_at"].endswith("Z")
    view = os.path.join(srv.state, "sessions", sid, "view")
    assert mounts_under(view) == [view], "the view is a real mount"
    with open(os.path.join(view, "a.txt")) as f:
        assert f.read() == "hello\n"

    st = c.get(sid)
    assert st.status == 200
    st = st.json()
    assert st["status"] == "active"
    assert st["workspace"] == {"path": ws, "mode": "overlay"}
    assert st["profile"] == "strict" and st["share_net"] is False
    assert st["idle_timeout_seconds"] == 600 and 0 < st["idle_remaining_seconds"] <= 600
    assert st["uid"] == 1000 and st["gid"] == 1000
    assert st["env_passthrough"]["mode"] == "deny"

    lst = c.request("GET", "/v1/isolated/sessions").json()["sessions"]
    assert [s["session_id"] for s in lst] == [sid]
    assert set(lst[0]) >= {"session_id", "status", "created_at", "last_run_at"}
    assert lst[0]["workspace"] == {"path": ws, "mode": "overlay"}  # our addition to the summary

    c.delete(sid)
    assert mounts_under(view) == []
    assert not os.path.exists(os.path.join(srv.state, "sessions", sid))
    assert c.get(sid).status == 404
    assert c.get(sid).json()["code"] == "SESSION_NOT_FOUND"
    c.delete(sid, expect=404)
    assert c.request("GET", "/v1/isolated/sessions").json() == {"sessions": []}


def test_auth(api):
    env, srv, c = api
    assert c.request("GET", "/v1/isolated/sessions", auth=False).status == 401
    r = c.request("GET", "/v1/isolated/sessions", auth=False, headers={"X-EXECD-ACCESS-TOKEN": "wrong" * 8})
    assert r.status == 401 and r.json()["code"] == "UNAUTHORIZED"
    for h in ("X-EXECD-ACCESS-TOKEN", "OpenSandbox-Execd-Token"):
        assert c.request("GET", "/v1/isolated/sessions", auth=False, headers={h: srv.token}).status == 200
    assert c.request("GET", "/v1/isolated/sessions", auth=False,
                     headers={"Authorization": "Bearer " + srv.token}).status == 200
    assert c.request("GET", "/healthz", auth=False).status == 200
    st = os.stat(os.path.join(srv.state, "token"))
    assert st.st_mode & 0o077 == 0, "the token file is private"


def test_host_and_origin(api):
    env, srv, c = api
    assert c.request("GET", "/v1/isolated/sessions", headers={"Host": "evil.example:44772"}).status == 403
    assert c.request("GET", "/v1/isolated/sessions", headers={"Origin": "http://evil.example"}).status == 403
    assert c.request("GET", "/v1/isolated/sessions", headers={"Origin": "null"}).status == 403
    assert c.request("GET", "/v1/isolated/sessions", headers={"Host": f"localhost:{srv.port}"}).status == 200
    assert c.request("GET", "/v1/isolated/sessions",
                     headers={"Origin": f"http://127.0.0.1:{srv.port}"}).status == 200


def test_bad_create_bodies(api):
    env, srv, c = api
    ws = env.workspace()
    cases = [
        (b"{", "INVALID_REQUEST_BODY"),
        (b"[]", "INVALID_REQUEST_BODY"),
        (b"", "INVALID_REQUEST_BODY"),
        (b'{"workspace": {"path": "/x"}} trailing', "INVALID_REQUEST_BODY"),
        (b'{"workspace": {"path": "a\x00b"}}', "INVALID_REQUEST_BODY"),
        (json.dumps({}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": "/tmp"}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": 5}}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws, "mode": "yolo"}}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "profile": "none"}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "share_net": "yes"}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "share_net": True}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "uid": -1}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "uid": "0"}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "idle_timeout_seconds": 1.5}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "extra_writable": ["/etc"]}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "binds": [{"source": "/etc"}]}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws}, "env_passthrough": {"mode": "maybe"}}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws + "/../ws/missing"}}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": "relative/dir"}}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": "/"}}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": ws + "/a.txt"}}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": srv.state}}).encode(), "INVALID_REQUEST_BODY"),
        (json.dumps({"workspace": {"path": env.base}}).encode(), "INVALID_REQUEST_BODY"),
    ]
    for raw, code in cases:
        r = c.request("POST", S, raw=raw, headers={"Content-Type": "application/json"})
        assert r.status == 400, (raw, r)
        assert r.json()["code"] == code, (raw, r)
        assert r.json()["message"]
    assert c.request("GET", "/v1/isolated/sessions").json() == {"sessions": []}
    assert mounts_under(srv.state) == []


def test_root_owned_refused_in_every_mode(api):
    # the owner is mapped to the pool uid: for root that would expose root-only files
    env, srv, c = api
    ws = env.workspace("rootws", uid=0, gid=0)
    with open(os.path.join(ws, "secret"), "w") as f:
        f.write("root only\n")
    os.chmod(os.path.join(ws, "secret"), 0o600)
    for mode in ("rw", "overlay", "ro"):
        r = c.create(ws, mode=mode, expect=400)
        assert r.json()["code"] == "INVALID_REQUEST_BODY" and "root" in r.json()["message"], (mode, r)
    ws_gid0 = env.workspace("gid0ws", uid=1000, gid=0)
    r = c.create(ws_gid0, expect=400)
    assert "root" in r.json()["message"]
    assert c.request("GET", "/v1/isolated/sessions").json() == {"sessions": []}
    assert mounts_under(srv.state) == []


def raw_request(port, head, body=b"", chunked_body=None):
    """Sends a raw request (ignoring a peer that stops reading) and returns the status line and body."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(30)
    try:
        s.sendall(head)
        try:
            if chunked_body is not None:
                for i in range(0, len(chunked_body), 65536):
                    part = chunked_body[i:i + 65536]
                    s.sendall(b"%x\r\n%s\r\n" % (len(part), part))
                s.sendall(b"0\r\n\r\n")
            else:
                s.sendall(body)
        except OSError:
            pass  # the server answered early and closed
        data = b""
        while True:
            try:
                d = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not d:
                break
            data += d
        return data
    finally:
        s.close()


def test_chunked_upload_is_held_to_max_upload(env):
    """--max-upload bounds the whole upload, also when a chunked body has no Content-Length
    to check up front (each part under the limit, together over it)."""
    srv = env.server(["--max-upload=4000"])
    c = srv.client()
    ws = env.workspace()
    sid = c.create(ws)
    boundary = "----dbxlimit"
    body = b""
    for i in range(5):
        meta = json.dumps({"path": f"{ws}/part{i}.bin"})
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
                 f"Content-Type: application/json\r\n\r\n{meta}\r\n--{boundary}\r\nContent-Disposition: form-data; "
                 f"name=\"file\"; filename=\"blob\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
        body += b"x" * 900 + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    auth = f"X-EXECD-ACCESS-TOKEN: {srv.token}\r\n".encode()
    head = (f"POST /v1/isolated/session/{sid}/files/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode()
            + auth + f"Content-Type: multipart/form-data; boundary={boundary}\r\n".encode()
            + b"Transfer-Encoding: chunked\r\n\r\n")
    data = raw_request(srv.port, head, chunked_body=body)
    assert data.startswith(b"HTTP/1.1 413"), data[:300]
    out, _ = c.run_ok(sid, "ls")
    written = [n for n in out.split() if n.startswith("part")]
    assert len(written) < 5 and all(os.path.getsize(os.path.join(srv.state, "sessions", sid, "view", n)) == 900
                                    for n in written), written
    srv.stop()


def test_oversized_body_and_headers(api):
    env, srv, c = api
    big = b'{"workspace": {"path": "' + b"a" * (2 * 1024 * 1024) + b'"}}'
    auth = f"X-EXECD-ACCESS-TOKEN: {srv.token}\r\n".encode()
    head = (b"POST /v1/isolated/session HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + auth +
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(big))
    data = raw_request(srv.port, head, big)
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    assert b"REQUEST_TOO_LARGE" in data
    # the same without a Content-Length (chunked): cut off while streaming
    head = (b"POST /v1/isolated/session HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + auth +
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    data = raw_request(srv.port, head, chunked_body=big)
    assert data.startswith(b"HTTP/1.1 413"), data[:200]
    # a huge header is refused, and the server stays up
    data = raw_request(srv.port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nX-Big: " + b"b" * 100000 +
                       b"\r\n\r\n")
    assert data == b"" or data.split(b" ")[1] in (b"413", b"431", b"400"), data[:200]
    assert c.request("GET", "/healthz").status == 200
    assert c.request("GET", "/v1/isolated/sessions").json() == {"sessions": []}


def test_unknown_routes_and_ids(api):
    env, srv, c = api
    assert c.request("GET", "/v1/isolated/nope").status == 404
    assert c.request("PUT", S).status == 405
    for sid in ("nope", "..", "%2e%2e", "00000000-0000-0000-0000-000000000000", "A" * 36):
        r = c.request("GET", f"{S}/{sid}")
        assert r.status in (404,), (sid, r)
        r = c.request("POST", f"{S}/{sid}/run", {"code": "true"})
        assert r.status == 404 and r.json()["code"] == "SESSION_NOT_FOUND", (sid, r)


def test_slow_client_is_dropped(env):
    srv = env.server(["--connection-timeout=2"])
    c = srv.client()
    # half a request line, then silence: the connection must not pin a thread forever
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"GET /healthz HTT")
    s.settimeout(30)
    try:
        data = s.recv(100)
    except socket.timeout:
        data = None
    finally:
        s.close()
    assert data is not None, "the server kept a silent connection open past its timeout"
    assert c.request("GET", "/healthz").status == 200
    srv.stop()


def test_capabilities_and_metrics(api):
    env, srv, c = api
    caps = c.request("GET", "/v1/isolated/capabilities").json()
    for k in ("available", "isolator", "version", "setpriv_available", "userns_available", "commit_supported",
              "diff_supported"):
        assert k in caps
    assert caps["isolator"] == "bwrap"
    m = c.request("GET", "/metrics")
    assert m.status == 200
    text = m.body.decode()
    for name in ("draftbox_sessions ", "draftbox_runs_total", "draftbox_run_duration_seconds_bucket",
                 "draftbox_upper_bytes", "draftbox_commits_total", "draftbox_commit_conflicts_total",
                 "draftbox_http_errors_total"):
        assert name in text, name


def test_garbage_requests(api):
    """Random bodies, types and query strings on every route: always a 4xx {code, message}, never a crash."""
    import random
    env, srv, c = api
    sid = c.create(env.workspace())
    rnd = random.Random(1234)
    values = [None, True, 0, -1, 2 ** 63, 1.5, "", "x" * 5000, "../..", "/etc/passwd", "a\u0000b", [], {}, [1, "a"],
              {"path": 5}, {"a": {"b": {"c": []}}}]
    routes = [("POST", S, None), ("POST", f"{S}/{sid}/run", None), ("POST", f"{S}/{sid}/commit", None),
              ("POST", f"{S}/{sid}/discard", None), ("POST", f"{S}/{sid}/files/permissions", None),
              ("POST", f"{S}/{sid}/files/replace", None), ("POST", f"{S}/{sid}/files/mv", None),
              ("POST", f"{S}/{sid}/directories", None), ("GET", f"{S}/{sid}/files/info", "path"),
              ("GET", f"{S}/{sid}/files/download", "path"), ("GET", f"{S}/{sid}/files/search", "pattern"),
              ("GET", f"{S}/{sid}/directories/list", "depth"), ("GET", f"{S}/{sid}/diff", "format"),
              ("GET", f"{S}/{sid}/runs/x/logs", "cursor"), ("DELETE", f"{S}/{sid}/files", "path")]
    keys = ["code", "workspace", "paths", "force", "envs", "timeout_seconds", "background", "profile", "path",
            "mode", "old", "new", "src", "dest"]
    for i in range(300):
        method, path, qkey = rnd.choice(routes)
        kind = rnd.randrange(4)
        if kind == 0:
            raw = bytes(rnd.randrange(256) for _ in range(rnd.randrange(200)))
        elif kind == 1:
            raw = json.dumps(rnd.choice(values)).encode()
        else:
            obj = {rnd.choice(keys): rnd.choice(values) for _ in range(rnd.randrange(5))}
            if rnd.random() < 0.3:
                obj = [obj]
            raw = json.dumps(obj).encode()
        query = None
        if qkey:
            query = {qkey: rnd.choice(["", "..", "%2e%2e", "/etc", "a" * 300, "-1", "x\x00y", "*", "9" * 40, "json"])}
        r = c.request(method, path, raw=raw, query=query, headers={"Content-Type": "application/json"})
        if r.status in (200, 206) and method != "POST":
            continue  # some garbage is valid (a search pattern, an empty list)
        if r.status == 200:
            # a valid run of garbage code, or a no-op commit/discard
            continue
        assert 400 <= r.status < 500, (method, path, raw[:100], query, r)
        if r.body:
            body = json.loads(r.body)
            assert body["code"] and "message" in body
    assert c.request("GET", "/healthz").status == 200
    assert c.get(sid).status == 200


def test_port_in_use_says_why(tmp_path):
    from conftest import build_path
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        r = subprocess.run([build_path("api", "draftboxd"), "--state-dir", str(tmp_path / "state"),
                            "--port", str(port)], capture_output=True, timeout=60)
    finally:
        s.close()
    assert r.returncode == 1, r
    last = r.stderr.decode().strip().splitlines()[-1]
    assert f"port {port}" in last and "Address already in use" in last, last


def test_draftfs_that_fails_to_mount(env):
    """A draftfs that exits before it mounts (the real one, given an option it refuses): the create fails at
    once with draftfs's own message, and leaves no session behind."""
    wrapper = os.path.join(env.base, "draftfs-refuses")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nexec "%s" -o no_such_option "$@"\n' % build_path("fs", "draftfs"))
    os.chmod(wrapper, 0o755)
    srv = env.server(["--draftfs", wrapper])
    c = srv.client()
    t0 = time.monotonic()
    r = c.request("POST", S, {"workspace": {"path": env.workspace()}})
    assert r.status == 500, r
    msg = r.json()["message"]
    assert "draftfs failed to mount" in msg and "no_such_option" in msg, msg
    assert time.monotonic() - t0 < 10, "the failure must not wait for the mount timeout"
    assert c.request("GET", "/v1/isolated/sessions").json() == {"sessions": []}
    assert os.listdir(os.path.join(srv.state, "sessions")) == []
    srv.stop()
