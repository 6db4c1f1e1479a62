# SPDX-License-Identifier: LGPL-2.1-or-later
"""Session-level figures of draftboxd (issue: API performance), measured side by side.

- session create latency (POST /session, median of N, each session deleted after);
- run of `true` over HTTP (POST /session/ID/run until the stream ends) against a bare
  `draftbox-run --view VIEW -- true` on the same session's view, interleaved;
- output streaming: `draftbox run ID -- seq 1 N` to /dev/null (server framing, HTTP, the CLI)
  against the bare launcher's `seq`, interleaved;
- requests/s of files/info and files/download with wrk against a local process doing
  the same operation (stat, or open+read+close of the same file through the view).

Usage: bench/api.py [--quick] [--build-dir DIR]. Needs root, wrk, a built tree.
Prints a markdown table; numbers never make it fail (exit 1 only on breakage).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, build, base):
        self.state = os.path.join(base, "state")
        self.port = free_port()
        self.log = open(os.path.join(base, "draftboxd.log"), "wb")
        self.proc = subprocess.Popen(
            [os.path.join(build, "api", "draftboxd"), "--state-dir", self.state, "--port", str(self.port),
             "--max-sessions", "256"], stdout=self.log, stderr=self.log)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                self.token = open(os.path.join(self.state, "token")).read().strip()
                if self.call("GET", "/healthz", auth=False)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("draftboxd did not start (see draftboxd.log)")

    def call(self, method, path, body=None, auth=True):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
        if auth:
            req.add_header("X-EXECD-ACCESS-TOKEN", self.token)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def wrk(url, token, seconds):
    out = subprocess.run(["wrk", "-t2", "-c8", f"-d{seconds}s", "-H", f"X-EXECD-ACCESS-TOKEN: {token}", url],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk got errors from {url}: {out}")
    for line in out.splitlines():
        if line.startswith("Requests/sec:"):
            return float(line.split()[1])
    raise RuntimeError(f"cannot read wrk output: {out}")


def local_rate(fn, seconds):
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(100):
            fn()
        n += 100
    return n / seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer samples, shorter wrk runs")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/api.py: needs root (FUSE mounts, sandboxes)")
    if not shutil.which("wrk"):
        sys.exit("bench/api.py: wrk is missing (apt-get install wrk)")
    samples, secs = (5, 2) if args.quick else (20, 5)
    base = tempfile.mkdtemp(prefix="draftbox-apibench-")
    ws = os.path.join(base, "ws")
    os.makedirs(ws)
    with open(os.path.join(ws, "f4k"), "wb") as f:
        f.write(os.urandom(4096))
    for p in (ws, os.path.join(ws, "f4k")):
        os.chown(p, 1000, 1000)
    srv = Server(args.build_dir, base)
    rows = []
    try:
        create, delete = [], []
        for _ in range(samples):
            sid = []
            create.append(timed(lambda: sid.append(json.loads(
                srv.call("POST", "/v1/isolated/session", {"workspace": {"path": ws}})[1])["session_id"])))
            st = []
            delete.append(timed(lambda: st.append(srv.call("DELETE", f"/v1/isolated/session/{sid[0]}")[0])))
            assert st == [200]
        rows.append(("session create (POST /session)", f"{statistics.median(create) * 1000:.1f} ms", "", ""))
        rows.append(("session delete (DELETE /session/ID)", f"{statistics.median(delete) * 1000:.1f} ms", "", ""))

        st, body = srv.call("POST", "/v1/isolated/session", {"workspace": {"path": ws}})
        assert st == 201, body
        sid = json.loads(body)["session_id"]
        view = os.path.join(srv.state, "sessions", sid, "view")
        bare_cmd = [os.path.join(args.build_dir, "launcher", "draftbox-run"), "--workspace", ws, "--view", view,
                    "--state-dir", srv.state, "--", "true"]
        http_t, bare_t, ratios = [], [], []
        for _ in range(samples):
            h = timed(lambda: srv.call("POST", f"/v1/isolated/session/{sid}/run", {"code": "true"}))
            b = timed(lambda: subprocess.run(bare_cmd, check=True, stdout=subprocess.DEVNULL))
            http_t.append(h)
            bare_t.append(b)
            ratios.append(h / b)
        rows.append(("run `true` over HTTP vs bare `draftbox-run --view V -- true`",
                     f"{statistics.median(http_t) * 1000:.1f} ms", f"{statistics.median(bare_t) * 1000:.1f} ms",
                     f"{statistics.median(ratios):.2f}x"))

        # output streaming: many short lines, through the server and the CLI, against the bare launcher
        lines = 200000 if args.quick else 1000000
        cli = [os.path.join(args.build_dir, "api", "draftbox"), "--url", f"http://127.0.0.1:{srv.port}",
               "--token", srv.token, "run", sid, "--", "seq", "1", str(lines)]
        bare_seq = bare_cmd[:-1] + ["seq", "1", str(lines)]
        cli_t, bare_t, ratios = [], [], []
        for _ in range(max(3, samples // 4)):
            h = timed(lambda: subprocess.run(cli, check=True, stdout=subprocess.DEVNULL))
            b = timed(lambda: subprocess.run(bare_seq, check=True, stdout=subprocess.DEVNULL))
            cli_t.append(h)
            bare_t.append(b)
            ratios.append(h / b)
        rows.append((f"`draftbox run ID -- seq 1 {lines}` > /dev/null vs bare `draftbox-run --view V -- seq ...`",
                     f"{statistics.median(cli_t) * 1000:.0f} ms ({lines / statistics.median(cli_t) / 1e3:.0f}k lines/s)",
                     f"{statistics.median(bare_t) * 1000:.0f} ms", f"{statistics.median(ratios):.2f}x"))

        url = f"http://127.0.0.1:{srv.port}/v1/isolated/session/{sid}/files"
        path = os.path.join(ws, "f4k")
        target = os.path.join(view, "f4k")

        def read_file():
            with open(target, "rb") as f:
                f.read()
        info = wrk(f"{url}/info?path={path}", srv.token, secs)
        info_local = local_rate(lambda: os.stat(target), secs)
        dl = wrk(f"{url}/download?path={path}", srv.token, secs)
        dl_local = local_rate(read_file, secs)
        rows.append(("files/info (wrk -t2 -c8) vs local os.stat of the view", f"{info:.0f} req/s",
                     f"{info_local:.0f} ops/s", f"{info / info_local:.2f}x"))
        rows.append(("files/download 4 KiB (wrk -t2 -c8) vs local open+read", f"{dl:.0f} req/s",
                     f"{dl_local:.0f} ops/s", f"{dl / dl_local:.2f}x"))
        srv.call("DELETE", f"/v1/isolated/session/{sid}")
    finally:
        srv.stop()
        shutil.rmtree(base, ignore_errors=True)

    print(f"API figures ({'quick' if args.quick else 'full'}: {samples} samples, wrk {secs}s), "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}")
    print("| figure | draftboxd | reference | ratio |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
