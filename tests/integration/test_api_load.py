# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftboxd under load: N sessions created concurrently, each running M
commands and a diff, then deleted; afterwards no fd, mount, process or
session dir is left. N x M is 50 x 20 on the plain build; under ASan the
defaults shrink (set DRAFTBOX_API_LOAD_SESSIONS / DRAFTBOX_API_LOAD_RUNS to
override)."""
import os
import time
from concurrent.futures import ThreadPoolExecutor

from apiutil import env, is_sanitized, mounts_under  # noqa: F401  (fixtures)

S = "/v1/isolated/session"


def test_load(env):
    slow = is_sanitized()
    n_sessions = int(os.environ.get("DRAFTBOX_API_LOAD_SESSIONS", 12 if slow else 50))
    n_runs = int(os.environ.get("DRAFTBOX_API_LOAD_RUNS", 5 if slow else 20))
    srv = env.server(["--max-sessions", str(max(64, n_sessions + 4))])
    c = srv.client()
    # warm up once so the baseline fd count includes lazily opened things
    sid = c.create(env.workspace("warm"))
    c.run_ok(sid, "true")
    c.delete(sid)
    fds_before = srv.fd_count()
    workspaces = [env.workspace(f"ws{i}", files={"a.txt": f"{i}\n"}) for i in range(n_sessions)]

    def one(i):
        sid = c.create(workspaces[i])
        for k in range(n_runs):
            out, last = c.run_ok(sid, f"echo {k} >> log.txt; cat a.txt")
            assert out == str(i) and last["type"] == "execution_complete", (out, last)
        d = c.request("GET", f"{S}/{sid}/diff")
        assert d.status == 200
        assert [ch["path"] for ch in d.json()["changes"]] == ["log.txt"]
        out, _ = c.run_ok(sid, "wc -l < log.txt")
        assert out.strip() == str(n_runs)
        return sid

    t0 = time.time()
    with ThreadPoolExecutor(max_workers=n_sessions) as pool:
        sids = list(pool.map(one, range(n_sessions)))
    elapsed = time.time() - t0
    print(f"{n_sessions} sessions x {n_runs} runs + diff: {elapsed:.1f}s")
    assert len(set(sids)) == n_sessions
    assert len(c.request("GET", "/v1/isolated/sessions").json()["sessions"]) == n_sessions

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda s: c.delete(s), sids))
    assert c.request("GET", "/v1/isolated/sessions").json() == {"sessions": []}
    assert mounts_under(srv.state) == [], "every view is unmounted"
    assert os.listdir(os.path.join(srv.state, "sessions")) == []
    # threads of finished connections close their sockets shortly after
    deadline = time.time() + 10
    while srv.fd_count() > fds_before and time.time() < deadline:
        time.sleep(0.2)
    assert srv.fd_count() <= fds_before, f"fd leak: {fds_before} -> {srv.fd_count()}"
    m = c.request("GET", "/metrics").body.decode()
    assert f'draftbox_runs_total{{result="ok"}} {n_sessions * (n_runs + 1) + 1}' in m
    srv.stop()
