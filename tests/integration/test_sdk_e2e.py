# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftboxd driven by the official OpenSandbox TypeScript SDK, unchanged.

tests/e2e-sdk/e2e.mjs uses @alibaba-group/opensandbox's IsolatedSessionsAdapter
against a real server: create a session, run commands that edit files,
read them back through the files API, diff, commit, delete. The SDK is
installed with `npm ci` from the committed package-lock.json into
tests/e2e-sdk/node_modules (gitignored, reused across runs); the test skips,
saying why, when node is missing or the npm registry cannot be reached.
"""
import os
import shutil
import subprocess

import pytest

from apiutil import api, env  # noqa: F401  (fixtures)

HERE = os.path.dirname(os.path.abspath(__file__))
E2E_DIR = os.path.normpath(os.path.join(HERE, "..", "e2e-sdk"))
SDK_PKG = os.path.join(E2E_DIR, "node_modules", "@alibaba-group", "opensandbox", "package.json")
NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "ENETUNREACH",
                  "network", "socket hang up", "getaddrinfo")


def _node_ok():
    node = shutil.which("node")
    if not node or not shutil.which("npm"):
        return "node and npm are not installed"
    out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip().lstrip("v")
    try:
        major, minor = (int(x) for x in out.split(".")[:2])
    except ValueError:
        return f"cannot parse node version {out!r}"
    if (major, minor) < (20, 18):  # undici 7, the SDK's HTTP client, needs 20.18.1
        return f"node {out} is too old for the SDK (needs >= 20.18)"
    return None


def _installed_version():
    try:
        import json
        with open(SDK_PKG) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return None


def ensure_sdk():
    """Installs the SDK with npm ci unless the locked version is already there; skips without a registry."""
    why = _node_ok()
    if why:
        pytest.skip(why)
    if _installed_version() == "0.1.11":
        return
    env = dict(os.environ)
    env.setdefault("npm_config_cache", os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                                    "draftbox-npm"))
    env["npm_config_update_notifier"] = "false"
    try:
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline", "--fetch-timeout=30000",
                            "--fetch-retries=1"], cwd=E2E_DIR, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.skip("npm ci timed out: the npm registry is not reachable")
    if r.returncode != 0:
        text = r.stdout + r.stderr
        hits = [l.strip() for l in text.splitlines() if any(m in l for m in NETWORK_ERRORS)]
        if hits:
            pytest.skip(f"npm registry not reachable (npm ci: {hits[0][:200]})")
        pytest.fail(f"npm ci failed:\n{text[-3000:]}")
    assert _installed_version() == "0.1.11", "npm ci did not install @alibaba-group/opensandbox 0.1.11"


def test_sdk_end_to_end(api):  # noqa: F811
    env_, srv, c = api
    ensure_sdk()
    ws = env_.workspace(files={"hello.txt": "original\n", "src/keep.c": "int x;\n"})
    run_env = dict(os.environ, DRAFTBOX_URL=f"http://127.0.0.1:{srv.port}", DRAFTBOX_TOKEN=srv.token,
                   DRAFTBOX_WORKSPACE=ws)
    r = subprocess.run(["node", "e2e.mjs"], cwd=E2E_DIR, env=run_env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"e2e.mjs failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}\n" \
                              f"server log:\n{srv.read_log()[-3000:]}"
    assert r.stdout.rstrip().splitlines()[-1].startswith("1.."), r.stdout
    assert "not ok" not in r.stdout
    # what the SDK committed is in the workspace, the rest is not
    with open(os.path.join(ws, "hello.txt")) as f:
        assert f.read() == "replaced\n"
    with open(os.path.join(ws, "moved.txt")) as f:
        assert f.read() == "new\n"
    assert not os.path.lexists(os.path.join(ws, "etc-link"))
    assert os.path.exists(os.path.join(ws, "src", "keep.c"))
    # the session is gone from the server
    sessions = c.request("GET", "/v1/isolated/sessions").json().get("sessions", [])
    assert all(s.get("status") != "active" for s in sessions), sessions
