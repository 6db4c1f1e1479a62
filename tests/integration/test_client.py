# SPDX-License-Identifier: LGPL-2.1-or-later
"""The `draftbox` client against a scripted HTTP server.

These pin the client's side of the protocol without draftboxd: how it finds
the server and the token, that `run` streams output live and exits with the
command's status, multipart uploads, downloads, errors and exit codes, and
colour only on a terminal without NO_COLOR. test_client_server.py runs the
client against the real server.
"""
import http.server
import json
import os
import pty
import select
import socket
import socketserver
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import build_path

DRAFTBOX = build_path("api", "draftbox")


def _need_client():
    if not os.access(DRAFTBOX, os.X_OK):
        pytest.fail(f"{DRAFTBOX} is not built")


class Recorder:
    """What the scripted server saw, and what it should answer."""

    def __init__(self):
        self.requests = []
        self.routes = {}  # (method, path without query) -> handler(req) -> (status, headers, body|iterable)
        self.lock = threading.Lock()


def _make_handler(rec):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _handle(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path, _, query = self.path.partition("?")
            req = {"method": self.command, "path": path, "query": query, "headers": dict(self.headers), "body": body}
            with rec.lock:
                rec.requests.append(req)
            fn = rec.routes.get((self.command, path))
            if fn is None:
                status, headers, out = 404, {"Content-Type": "application/json"}, \
                    json.dumps({"code": "NOT_FOUND", "message": f"no route {path}"}).encode()
            else:
                status, headers, out = fn(req)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if isinstance(out, (bytes, str)):
                data = out.encode() if isinstance(out, str) else out
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
            else:
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                for piece in out:
                    data = piece.encode() if isinstance(piece, str) else piece
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        do_GET = do_POST = do_DELETE = _handle

    return Handler


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        conn, _ = super().get_request()
        return conn, ("local", 0)


@pytest.fixture
def fake():
    """A scripted server on loopback TCP; yields (url, Recorder)."""
    _need_client()
    rec = Recorder()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(rec))
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", rec
    finally:
        srv.shutdown()
        srv.server_close()


def run_client(args, env_extra=None, input=None, timeout=30):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTBOX_") and k != "NO_COLOR"}
    env["DRAFTBOX_STATE_DIR"] = "/nonexistent-draftbox-state"
    if env_extra:
        env.update(env_extra)
    return subprocess.run([DRAFTBOX] + args, env=env, input=input, capture_output=True, timeout=timeout)


def json_reply(obj, status=200):
    return lambda req: (status, {"Content-Type": "application/json"}, json.dumps(obj))


def test_usage_and_unreachable():
    _need_client()
    r = run_client([])
    assert r.returncode == 2 and b"usage:" in r.stderr
    r = run_client(["frobnicate"])
    assert r.returncode == 2 and b"unknown command 'frobnicate'" in r.stderr
    r = run_client(["--url", "ftp://x", "session", "ls"])
    assert r.returncode == 2 and b"invalid server address" in r.stderr
    # a port nobody listens on
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = run_client(["--url", f"http://127.0.0.1:{port}", "session", "ls"])
    assert r.returncode == 3 and b"cannot reach draftboxd" in r.stderr
    r = run_client(["--help"])
    assert r.returncode == 0 and b"files put ID" in r.stdout


def test_url_and_token_sources(fake):
    url, rec = fake
    rec.routes[("GET", "/v1/isolated/sessions")] = json_reply({"sessions": []})
    with tempfile.TemporaryDirectory() as state:
        with open(os.path.join(state, "token"), "w") as f:
            f.write("from-file\n")
        # DRAFTBOX_URL + token file from DRAFTBOX_STATE_DIR
        r = run_client(["session", "ls"], {"DRAFTBOX_URL": url, "DRAFTBOX_STATE_DIR": state})
        assert r.returncode == 0, r.stderr
        assert rec.requests[-1]["headers"].get("Authorization") == "Bearer from-file"
        # $DRAFTBOX_TOKEN beats the file, --token beats both
        r = run_client(["session", "ls"], {"DRAFTBOX_URL": url, "DRAFTBOX_STATE_DIR": state, "DRAFTBOX_TOKEN": "env"})
        assert rec.requests[-1]["headers"].get("Authorization") == "Bearer env"
        r = run_client(["--url", url, "--token", "flag", "session", "ls"], {"DRAFTBOX_TOKEN": "env"})
        assert rec.requests[-1]["headers"].get("Authorization") == "Bearer flag"
    # no token anywhere: no header at all
    r = run_client(["--url", url, "session", "ls"])
    assert r.returncode == 0
    assert "Authorization" not in rec.requests[-1]["headers"]
    assert rec.requests[-1]["headers"]["Host"] == url[len("http://"):]


def test_unix_socket():
    _need_client()
    rec = Recorder()
    rec.routes[("GET", "/v1/isolated/sessions")] = json_reply(
        {"sessions": [{"session_id": "s-1", "status": "active", "created_at": "2026-01-01T00:00:00Z"}]})
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "draftboxd.sock")
        srv = _UnixHTTPServer(path, _make_handler(rec))
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        t.start()
        try:
            r = run_client(["--socket", path, "session", "ls"])
            assert r.returncode == 0, r.stderr
            assert b"s-1" in r.stdout and b"active" in r.stdout
            assert b"\x1b[" not in r.stdout  # not a terminal: no colour
            r = run_client(["--json", "session", "ls"], {"DRAFTBOX_URL": f"unix:{path}"})
            assert json.loads(r.stdout)["sessions"][0]["session_id"] == "s-1"
        finally:
            srv.shutdown()
            srv.server_close()


def test_session_create_request(fake):
    url, rec = fake
    rec.routes[("POST", "/v1/isolated/session")] = json_reply(
        {"session_id": "abc", "created_at": "2026-01-01T00:00:00Z"}, 201)
    with tempfile.TemporaryDirectory() as ws:
        r = run_client(["--url", url, "session", "create", "--workspace", ws, "--mode", "rw", "--net",
                        "--idle-timeout", "60", "--env", "LANG", "--profile", "balanced"])
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"abc\n"
        body = json.loads(rec.requests[-1]["body"])
        assert body == {"share_net": True, "idle_timeout_seconds": 60,
                        "env_passthrough": {"mode": "allow", "keys": ["LANG"]},
                        "workspace": {"path": os.path.realpath(ws), "mode": "rw"}, "profile": "balanced"}
        assert rec.requests[-1]["headers"]["Content-Type"] == "application/json"
    r = run_client(["--url", url, "session", "create", "--idle-timeout", "soon"])
    assert r.returncode == 2


def test_run_streams_live_and_exits_with_status(fake):
    url, rec = fake
    go_on = threading.Event()

    def run_route(req):
        body = json.loads(req["body"])
        assert body["code"] == "echo 'a b' \"$HOME\"" or body["code"] == "echo 'a b' '\"$HOME\"'"

        def frames():
            yield json.dumps({"type": "init", "text": "run-1", "timestamp": 1}) + "\n\n"
            yield json.dumps({"type": "stdout", "text": "first line\n", "timestamp": 2}) + "\n\n"
            # wait until the client printed the first line: output must be live, not buffered
            assert go_on.wait(20), "client did not print before the stream ended"
            yield "data: " + json.dumps({"type": "stderr", "text": "an error"}) + "\n\n"
            yield json.dumps({"type": "error", "text": "command exited with code 7",
                              "error": {"ename": "ExitError", "evalue": "7", "traceback": []}}) + "\n\n"
        return 200, {"Content-Type": "text/event-stream"}, frames()

    rec.routes[("POST", "/v1/isolated/session/s%201/run")] = run_route
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTBOX_")}
    p = subprocess.Popen([DRAFTBOX, "--url", url, "run", "s 1", "--env", "A=1", "--timeout", "9", "--",
                          "echo", "a b", '"$HOME"'], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        got = b""
        deadline = time.time() + 20
        while b"first line\n" not in got and time.time() < deadline:
            ready, _, _ = select.select([p.stdout], [], [], 1)
            if ready:
                chunk = os.read(p.stdout.fileno(), 4096)
                if not chunk:
                    break
                got += chunk
        assert got == b"first line\n"
        go_on.set()
        out, err = p.communicate(timeout=20)
    finally:
        go_on.set()
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 7
    assert out == b""
    assert err == b"an error\n"
    body = json.loads(rec.requests[-1]["body"])
    assert body["envs"] == {"A": "1"} and body["timeout_seconds"] == 9
    assert body["code"] == "echo 'a b' '\"$HOME\"'"


def test_run_exit_zero_and_lost_stream(fake):
    url, rec = fake
    rec.routes[("POST", "/v1/isolated/session/ok/run")] = lambda req: (
        200, {"Content-Type": "text/event-stream"},
        iter([json.dumps({"type": "stdout", "text": "x"}) + "\n\n",
              json.dumps({"type": "execution_complete", "execution_time": 3}) + "\n\n"]))
    rec.routes[("POST", "/v1/isolated/session/lost/run")] = lambda req: (
        200, {"Content-Type": "text/event-stream"}, iter([json.dumps({"type": "stdout", "text": "x"}) + "\n\n"]))
    rec.routes[("POST", "/v1/isolated/session/timeout/run")] = lambda req: (
        200, {"Content-Type": "text/event-stream"},
        iter([json.dumps({"type": "error", "text": "command timed out (exit code 137)",
                          "error": {"ename": "TimeoutError", "evalue": "137"}}) + "\n\n"]))
    r = run_client(["--url", url, "run", "ok", "--", "true"])
    assert (r.returncode, r.stdout) == (0, b"x\n")  # a line per event, as execd sends them
    r = run_client(["--url", url, "run", "lost", "--", "true"])
    assert r.returncode == 255 and b"without an exit status" in r.stderr
    r = run_client(["--url", url, "run", "timeout", "--", "sleep 100"])
    assert r.returncode == 137 and b"timed out" in r.stderr
    r = run_client(["--url", url, "--json", "run", "ok", "--", "true"])
    lines = [json.loads(l) for l in r.stdout.decode().splitlines()]
    assert [l["type"] for l in lines] == ["stdout", "execution_complete"] and r.returncode == 0
    r = run_client(["--url", url, "run", "ok"])
    assert r.returncode == 2
    r = run_client(["--url", url, "run", "ok", "-"], input=b"set -e\nmake 'all'\n")
    assert r.returncode == 0 and json.loads(rec.requests[-1]["body"])["code"] == "set -e\nmake 'all'\n"
    r = run_client(["--url", url, "run", "ok", "-"], input=b"x" * (600 * 1024))
    assert r.returncode == 2 and b"standard input" in r.stderr


def test_run_stops_when_its_reader_goes_away(fake):
    url, rec = fake
    stop = threading.Event()

    def endless(req):
        def frames():
            while not stop.is_set():
                yield json.dumps({"type": "stdout", "text": "y"}) + "\n\n"
                time.sleep(0.001)
        return 200, {"Content-Type": "text/event-stream"}, frames()

    rec.routes[("POST", "/v1/isolated/session/s/run")] = endless
    try:
        r = subprocess.run(f"'{DRAFTBOX}' --url {url} run s -- yes | head -3; echo \"${{PIPESTATUS[0]}}\"",
                           shell=True, executable="/bin/bash", capture_output=True, timeout=30)
    finally:
        stop.set()
    assert r.stdout == b"y\ny\ny\n141\n", r


def test_timeouts(fake):
    url, rec = fake

    def slow(req):
        time.sleep(1.6)
        return 200, {"Content-Type": "application/json"}, json.dumps({"sessions": []})

    def quiet_run(req):
        def frames():
            time.sleep(1.6)  # a command silent for longer than the request timeout
            yield json.dumps({"type": "stdout", "text": "late"}) + "\n\n"
            yield json.dumps({"type": "execution_complete"}) + "\n\n"
        return 200, {"Content-Type": "text/event-stream"}, frames()

    rec.routes[("GET", "/v1/isolated/sessions")] = slow
    rec.routes[("POST", "/v1/isolated/session/s/run")] = quiet_run
    r = run_client(["--url", url, "session", "ls"], {"DRAFTBOX_TIMEOUT": "1"})
    assert r.returncode == 3 and b"timed out" in r.stderr, r
    r = run_client(["--url", url, "session", "ls"], {"DRAFTBOX_TIMEOUT": "0"})
    assert r.returncode == 0, r
    r = run_client(["--url", url, "run", "s", "--", "sleep 2; echo late"], {"DRAFTBOX_TIMEOUT": "1"})
    assert (r.returncode, r.stdout) == (0, b"late\n"), r
    r = run_client(["--url", url, "session", "ls"], {"DRAFTBOX_TIMEOUT": "soon"})
    assert r.returncode == 2


def test_server_error_is_reported(fake):
    url, rec = fake
    rec.routes[("DELETE", "/v1/isolated/session/nope")] = json_reply(
        {"code": "SESSION_NOT_FOUND", "message": "session 'nope' not found"}, 404)
    r = run_client(["--url", url, "session", "rm", "nope"])
    assert r.returncode == 1
    assert b"session 'nope' not found (SESSION_NOT_FOUND, HTTP 404)" in r.stderr
    rec.routes[("GET", "/v1/isolated/sessions")] = lambda req: (401, {"Content-Type": "text/plain"}, "")
    r = run_client(["--url", url, "session", "ls"])
    assert r.returncode == 1 and b"access token" in r.stderr


def test_diff_commit_discard_requests(fake):
    url, rec = fake
    diff = {"changes": [{"path": "a.txt", "status": "modified", "type": "file", "content": True},
                        {"path": "new", "status": "added", "type": "dir"},
                        {"path": "gone", "status": "deleted", "type": "file"}],
            "summary": {"total": 3, "added": 1, "modified": 1, "deleted": 1}}
    rec.routes[("GET", "/v1/isolated/session/s/diff")] = lambda req: (
        (200, {"Content-Type": "application/json"}, json.dumps(diff)) if "format=json" in req["query"]
        else (200, {"Content-Type": "text/x-diff"}, "diff --git a/a.txt b/a.txt\n"))
    rec.routes[("POST", "/v1/isolated/session/s/commit")] = json_reply({"committed": ["a.txt"], "kept": []})
    rec.routes[("POST", "/v1/isolated/session/s/discard")] = json_reply({"discarded": ["b"]})
    r = run_client(["--url", url, "diff", "s"])
    assert r.returncode == 0 and r.stdout == b"M a.txt\nA new/\nD gone\n"
    r = run_client(["--url", url, "diff", "s", "sub dir/x", "--patch"])
    assert r.stdout == b"diff --git a/a.txt b/a.txt\n"
    assert rec.requests[-1]["query"] == "format=patch&path=sub%20dir/x"
    r = run_client(["--url", url, "--json", "diff", "s"])
    assert json.loads(r.stdout) == diff
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "layer.tar")
        r = run_client(["--url", url, "diff", "s", "--tar", "-o", out])
        assert r.returncode == 0 and open(out, "rb").read() == b"diff --git a/a.txt b/a.txt\n"
        assert rec.requests[-1]["query"] == "format=tar"
    r = run_client(["--url", url, "commit", "s", "a.txt", "--force"])
    assert r.returncode == 0 and b"committed a.txt" in r.stdout
    assert json.loads(rec.requests[-1]["body"]) == {"force": True, "paths": ["a.txt"]}
    r = run_client(["--url", url, "commit", "s"])
    assert json.loads(rec.requests[-1]["body"]) == {}
    r = run_client(["--url", url, "discard", "s", "b"])
    assert r.returncode == 0 and json.loads(rec.requests[-1]["body"]) == {"paths": ["b"]}
    r = run_client(["--url", url, "discard", "s", "--force"])
    assert r.returncode == 2


def test_recover_and_conflict_paths(fake):
    url, rec = fake
    rec.routes[("POST", "/v1/isolated/session/s/recover")] = json_reply({"recovered": True, "paths": 3})
    r = run_client(["--url", url, "recover", "s", "--force"])
    assert r.returncode == 0 and r.stdout == b"recovered the interrupted commit of 3 paths\n", r
    assert json.loads(rec.requests[-1]["body"]) == {"force": True}
    rec.routes[("POST", "/v1/isolated/session/s/recover")] = json_reply({"recovered": False, "paths": 0})
    r = run_client(["--url", url, "recover", "s"])
    assert r.returncode == 0 and r.stdout == b"nothing to recover: no commit was interrupted\n", r
    assert json.loads(rec.requests[-1]["body"]) == {}
    r = run_client(["--url", url, "--json", "recover", "s"])
    assert json.loads(r.stdout) == {"recovered": False, "paths": 0}
    for args in (["recover"], ["recover", "s", "t"], ["recover", "s", "--paths"]):
        n = len(rec.requests)
        r = run_client(["--url", url] + args)
        assert r.returncode == 2 and len(rec.requests) == n, (args, r)

    # a conflict lists its paths, the first 20 of them
    paths = [f"dir/f{i:02}" for i in range(25)]
    conflict = {"code": "CONFLICT", "message": "recover failed: changed in the workspace", "paths": paths,
                "journal_pending": True, "hint": "POST .../recover finishes it"}
    rec.routes[("POST", "/v1/isolated/session/s/recover")] = json_reply(conflict, 409)
    rec.routes[("POST", "/v1/isolated/session/s/commit")] = json_reply(conflict, 409)
    for cmd in ("recover", "commit"):
        r = run_client(["--url", url, cmd, "s"])
        lines = r.stderr.decode().splitlines()
        assert r.returncode == 1, r
        assert lines[0] == "draftbox: recover failed: changed in the workspace (CONFLICT, HTTP 409)", lines
        assert lines[1:21] == [f"draftbox:   {p}" for p in paths[:20]], lines
        assert lines[21:] == ["draftbox:   ... and 5 more (--json lists them all)",
                              "draftbox: POST .../recover finishes it"], lines
    r = run_client(["--url", url, "--json", "recover", "s"])
    assert r.returncode == 1 and json.loads(r.stderr.decode().splitlines()[0]) == conflict, r
    assert b"draftbox:   dir/f00" not in r.stderr


def test_files_put_get_and_friends(fake):
    url, rec = fake
    uploads = []

    def upload(req):
        ctype = req["headers"]["Content-Type"]
        assert ctype.startswith("multipart/form-data; boundary=")
        boundary = ctype.split("boundary=", 1)[1].encode()
        parts = req["body"].split(b"--" + boundary)
        assert parts[0] == b"" and parts[-1] == b"--\r\n"
        got = {}
        for part in parts[1:-1]:
            head, _, data = part[2:].partition(b"\r\n\r\n")
            name = head.split(b'name="', 1)[1].split(b'"', 1)[0].decode()
            got[name] = data[:-2]  # the CRLF before the next boundary
        uploads.append(got)
        return 200, {"Content-Type": "application/json"}, "{}"

    content = os.urandom(300000) + b"\r\n--not-a-boundary\r\n"
    rec.routes[("POST", "/v1/isolated/session/s/files/upload")] = upload
    rec.routes[("GET", "/v1/isolated/session/s/files/download")] = lambda req: (
        (200, {"Content-Type": "application/octet-stream"}, content) if req["query"] == "path=/ws/a%20b.bin"
        else (404, {"Content-Type": "application/json"}, json.dumps({"code": "FILE_NOT_FOUND", "message": "no such file"})))
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src.bin")
        with open(src, "wb") as f:
            f.write(content)
        r = run_client(["--url", url, "files", "put", "s", src, "/ws/a b.bin", "--mode", "640", "--owner", "u1"])
        assert r.returncode == 0, r.stderr
        assert json.loads(uploads[-1]["metadata"]) == {"mode": 640, "owner": "u1", "path": "/ws/a b.bin"}
        assert uploads[-1]["file"] == content
        r = run_client(["--url", url, "files", "put", "s", "-", "x.txt"], input=b"from stdin")
        assert r.returncode == 0 and uploads[-1]["file"] == b"from stdin"
        r = run_client(["--url", url, "files", "put", "s", src, "x", "--mode", "999"])
        assert r.returncode == 2
        r = run_client(["--url", url, "files", "put", "s", d, "x"])
        assert r.returncode == 1 and b"not a regular file" in r.stderr

        out = os.path.join(d, "out.bin")
        r = run_client(["--url", url, "files", "get", "s", "/ws/a b.bin", "-o", out])
        assert r.returncode == 0 and open(out, "rb").read() == content
        r = run_client(["--url", url, "files", "get", "s", "/ws/a b.bin"])
        assert r.stdout == content
        r = run_client(["--url", url, "files", "get", "s", "/ws/missing", "-o", os.path.join(d, "missing")])
        assert r.returncode == 1 and b"no such file (FILE_NOT_FOUND, HTTP 404)" in r.stderr
        assert sorted(os.listdir(d)) == ["out.bin", "src.bin"]  # no partial file left behind

    listing = [{"path": "/ws/dir", "type": "directory", "size": 4096, "mode": 755, "owner": "root", "group": "root",
                "modified_at": "2026-11-29T21:15:55.5Z", "created_at": "2026-11-29T21:15:55Z"},
               {"path": "/ws/run.sh", "type": "file", "size": 12, "mode": 4750, "owner": "200001", "group": "200001",
                "modified_at": "2026-11-29T21:15:55Z", "created_at": "2026-11-29T21:15:55Z"}]
    rec.routes[("GET", "/v1/isolated/session/s/directories/list")] = json_reply(listing)
    r = run_client(["--url", url, "files", "ls", "s", "/ws", "--depth", "2"])
    assert r.returncode == 0
    assert rec.requests[-1]["query"] == "path=/ws&depth=2"
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("drwxr-xr-x root") and lines[0].endswith("2026-11-29 21:15 /ws/dir/")
    assert lines[1].startswith("-rwsr-x--- 200001")
    rec.routes[("DELETE", "/v1/isolated/session/s/files")] = json_reply(None)
    rec.routes[("DELETE", "/v1/isolated/session/s/directories")] = json_reply(None)
    rec.routes[("POST", "/v1/isolated/session/s/files/mv")] = json_reply(None)
    rec.routes[("POST", "/v1/isolated/session/s/directories")] = json_reply(None)
    assert run_client(["--url", url, "files", "rm", "s", "a", "b&c"]).returncode == 0
    assert rec.requests[-1]["path"].endswith("/files") and rec.requests[-1]["query"] == "path=a&path=b%26c"
    assert run_client(["--url", url, "files", "rm", "-r", "s", "d"]).returncode == 0
    assert rec.requests[-1]["path"].endswith("/directories")
    assert run_client(["--url", url, "files", "mv", "s", "a", "b"]).returncode == 0
    assert json.loads(rec.requests[-1]["body"]) == [{"src": "a", "dest": "b"}]
    assert run_client(["--url", url, "files", "mkdir", "s", "x/y", "--mode", "700"]).returncode == 0
    assert json.loads(rec.requests[-1]["body"]) == {"x/y": {"mode": 700}}


def _run_in_pty(args, env):
    """Runs the client with stdout and stderr on a terminal; returns (status, output)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(DRAFTBOX, [DRAFTBOX] + args, env)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out


def test_colour_only_on_a_terminal_without_no_color(fake):
    url, rec = fake
    rec.routes[("GET", "/v1/isolated/session/s/diff")] = json_reply(
        {"changes": [{"path": "a", "status": "added", "type": "file"}], "summary": {"total": 1, "added": 1}})
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTBOX_") and k != "NO_COLOR"}
    env["TERM"] = "xterm"
    status, out = _run_in_pty(["--url", url, "diff", "s"], env)
    assert status == 0 and b"\x1b[32mA\x1b[0m a" in out
    status, out = _run_in_pty(["--url", url, "diff", "s"], dict(env, NO_COLOR="1"))
    assert status == 0 and b"\x1b[" not in out and b"A a" in out
    status, out = _run_in_pty(["--url", url, "--no-color", "diff", "s"], env)
    assert b"\x1b[" not in out
