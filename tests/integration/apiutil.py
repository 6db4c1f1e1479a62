# SPDX-License-Identifier: LGPL-2.1-or-later
"""Fixtures for the draftboxd suites: a real server on loopback with a
private state dir, workspaces owned by a normal user, and a small client
that speaks the OpenSandbox /v1/isolated format (urllib/http.client only).

Every server started here is stopped at teardown; every mount left under
the test's temp dir is unmounted (umount -l as the last resort) and the
dir removed, so a failing test leaves nothing behind.
"""
import http.client
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse

import pytest

from conftest import build_path

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "SUMMARY: UndefinedBehaviorSanitizer")
OWNER_UID = 1000
OWNER_GID = 1000


def skip_reason():
    """Why the api suites cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (FUSE mounts, bubblewrap as root)"
    for rel in (("api", "draftboxd"), ("fs", "draftfs"), ("launcher", "draftbox-run")):
        if not os.access(build_path(*rel), os.X_OK):
            return f"{'/'.join(rel)} is not built"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if not shutil.which("bwrap"):
        return "bubblewrap is not installed"
    return None


@functools.lru_cache(maxsize=None)
def is_sanitized():
    """True when draftboxd was built with ASan (the load test scales down)."""
    try:
        out = subprocess.run(["ldd", build_path("api", "draftboxd")], capture_output=True, text=True).stdout
    except OSError:
        return False
    return "libasan" in out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mounts_under(path):
    """Mount points at or below @path (from /proc/self/mountinfo), deepest first."""
    res = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == path or mp.startswith(path.rstrip("/") + "/"):
                res.append(mp)
    return sorted(res, key=len, reverse=True)


def make_workspace(base, name="ws", files=None, uid=OWNER_UID, gid=OWNER_GID):
    """A workspace dir owned by a normal user, files 0644, dirs 0755."""
    ws = os.path.join(base, name)
    os.makedirs(ws, exist_ok=True)
    files = files if files is not None else {"a.txt": "hello\n", "src/main.c": "int main(void) { return 0; }\n"}
    for rel, content in files.items():
        p = os.path.join(ws, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(content)
        os.chmod(p, 0o644)
    for root, dirs, fnames in os.walk(ws):
        os.chown(root, uid, gid)
        os.chmod(root, 0o755)
        for n in fnames:
            os.chown(os.path.join(root, n), uid, gid)
    return ws


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def __repr__(self):
        return f"<Response {self.status} {self.body[:300]!r}>"


class Client:
    """Speaks the OpenSandbox isolated-session API to one server."""

    def __init__(self, port, token, host="127.0.0.1", header="X-EXECD-ACCESS-TOKEN"):
        self.port = port
        self.token = token
        self.host = host
        self.header = header

    def conn(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, extra=None, auth=True):
        h = {}
        if auth and self.token:
            if self.header == "bearer":
                h["Authorization"] = "Bearer " + self.token
            else:
                h[self.header] = self.token
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, query=None, headers=None, auth=True, raw=None, timeout=120):
        url = path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        data = raw
        h = self.headers(headers, auth)
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c = self.conn(timeout)
        try:
            c.request(method, url, body=data, headers=h)
            r = c.getresponse()
            return Response(r.status, r.getheaders(), r.read())
        finally:
            c.close()

    # --- sessions
    def create(self, workspace, expect=201, **kw):
        body = {"workspace": {"path": workspace}}
        mode = kw.pop("mode", None)
        if mode:
            body["workspace"]["mode"] = mode
        body.update(kw)
        r = self.request("POST", "/v1/isolated/session", body)
        assert r.status == expect, r
        return r.json()["session_id"] if expect == 201 else r

    def delete(self, sid, expect=200):
        r = self.request("DELETE", f"/v1/isolated/session/{sid}")
        assert r.status == expect, r
        return r

    def get(self, sid):
        return self.request("GET", f"/v1/isolated/session/{sid}")

    # --- runs
    def run(self, sid, code, **kw):
        """Runs @code; returns (status, frames) with frames parsed from the SSE body."""
        body = {"code": code}
        body.update(kw)
        r = self.request("POST", f"/v1/isolated/session/{sid}/run", body,
                         headers={"Accept": "text/event-stream"})
        if r.status != 200:
            return r.status, r
        return r.status, parse_frames(r.body)

    def run_ok(self, sid, code, **kw):
        status, frames = self.run(sid, code, **kw)
        assert status == 200, frames
        out = "\n".join(f["text"] for f in frames if f["type"] == "stdout")
        return out, frames[-1]

    def files_path(self, sid, what):
        return f"/v1/isolated/session/{sid}/{what}"


def parse_frames(body):
    """Splits an execd SSE body into JSON frames: each frame is bare JSON then a blank line."""
    text = body.decode()
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-80:]!r}"
    frames = []
    for chunk in text.split("\n\n"):
        if not chunk:
            continue
        assert "\n" not in chunk, f"frame spans lines: {chunk!r}"
        assert not chunk.startswith("data:"), "frames are bare JSON, not data: lines"
        frames.append(json.loads(chunk))
    return frames


class Server:
    """One draftboxd on loopback with a private state dir under @base."""

    def __init__(self, base, extra_args=(), port=None):
        self.base = base
        self.state = os.path.join(base, "state")
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.proc = None
        self.log_path = os.path.join(base, "draftboxd.log")

    def start(self, wait=True):
        args = [build_path("api", "draftboxd"), "--state-dir", self.state, "--port", str(self.port),
                "--log-structured=false",
                "--draftfs", build_path("fs", "draftfs"),
                "--launcher", build_path("launcher", "draftbox-run")] + self.extra_args
        self.log = open(self.log_path, "ab")
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log, env=env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"draftboxd exited with {self.proc.returncode}:\n{self.read_log()[-3000:]}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    c.close()
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("draftboxd did not come up:\n" + self.read_log()[-3000:])

    @property
    def token(self):
        with open(os.path.join(self.state, "token")) as f:
            return f.read().strip()

    def client(self, **kw):
        return Client(self.port, self.token, **kw)

    def read_log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, check=True):
        if not self.proc:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        self.proc = None
        self.log.close()
        if check:
            log = self.read_log()
            bad = [m for m in SANITIZER_MARKERS if m in log]
            assert not bad, f"draftboxd log has sanitizer reports:\n{log[-4000:]}"
            if sig == signal.SIGTERM:
                assert rc == 0, f"draftboxd exited with {rc}:\n{log[-2000:]}"

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


class Env:
    """Temp dir + server + helpers for one test; cleans everything up."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="api-test-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.servers = []

    def server(self, extra_args=(), start=True, port=None):
        s = Server(self.base, extra_args, port=port)
        self.servers.append(s)
        if start:
            s.start()
        return s

    def workspace(self, name="ws", files=None, uid=OWNER_UID, gid=OWNER_GID):
        return make_workspace(self.base, name, files, uid, gid)

    def draftfs_reports(self):
        """Sanitizer reports in the sessions' draftfs.log files (draftfs runs detached; its stderr is kept there)."""
        out = []
        for root, dirs, files in os.walk(self.base):
            if "draftfs.log" in files:
                try:
                    with open(os.path.join(root, "draftfs.log"), errors="replace") as f:
                        text = f.read()
                except OSError:
                    continue
                if any(m in text for m in SANITIZER_MARKERS):
                    out.append(f"{root}/draftfs.log:\n{text[-6000:]}")
            dirs[:] = [d for d in dirs if d not in ("view", "upper", "work", "home")]
        return out

    def cleanup(self):
        for rep in self.draftfs_reports():
            print(rep)  # shown with the failing test's output
        errors = []
        for s in self.servers:
            try:
                s.stop(check=False)
            except Exception as e:  # keep cleaning
                errors.append(e)
        for mp in mounts_under(self.base):
            if subprocess.run(["umount", mp], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", mp], capture_output=True)
        subprocess.run(["rm", "-rf", "--one-file-system", self.base], capture_output=True)
        if errors:
            raise errors[0]


@pytest.fixture
def env():
    why = skip_reason()
    if why:
        pytest.skip(why)
    e = Env()
    try:
        yield e
    finally:
        e.cleanup()


@pytest.fixture
def api(env):
    """A running server and a client; the server must stop cleanly."""
    srv = env.server()
    yield env, srv, srv.client()
    srv.stop()
