# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftboxd change record: diff (json, patch, tar), commit (with 409 on
conflicts), discard, a commit racing a delete, and hostile paths on the
files and change routes (.., %2e%2e, absolute paths outside, NUL, symlinks
planted by the sandbox)."""
import io
import json
import os
import tarfile
import threading
import time

from apiutil import api, env  # noqa: F401  (fixtures)

S = "/v1/isolated/session"


def test_diff_commit_discard(api):
    env, srv, c = api
    ws = env.workspace()
    sid = c.create(ws)
    out, last = c.run_ok(sid, "echo changed >> a.txt; echo new > b.txt; rm src/main.c")
    assert last["type"] == "execution_complete", out

    d = c.request("GET", f"{S}/{sid}/diff")
    assert d.status == 200 and d.header("Content-Type").startswith("application/json")
    changes = {ch["path"]: ch["status"] for ch in d.json()["changes"]}
    assert changes == {"a.txt": "modified", "b.txt": "added", "src/main.c": "deleted"}, changes

    p = c.request("GET", f"{S}/{sid}/diff", query={"format": "patch", "path": "a.txt"})
    assert p.status == 200
    assert b"+changed" in p.body and b"b.txt" not in p.body
    assert p.header("Draftbox-Patch-Skipped") == "0"

    t = c.request("GET", f"{S}/{sid}/diff", query={"format": "tar"})
    assert t.status == 200
    names = tarfile.open(fileobj=io.BytesIO(t.body)).getnames()
    assert "b.txt" in names and "src/.wh.main.c" in names, names

    assert c.request("GET", f"{S}/{sid}/diff", query={"format": "zip"}).status == 400

    r = c.request("POST", f"{S}/{sid}/commit", {"paths": ["b.txt", ws + "/a.txt"]})
    assert r.status == 200, r
    assert sorted(r.json()["committed"]) == ["a.txt", "b.txt"]
    with open(os.path.join(ws, "a.txt")) as f:
        assert f.read() == "hello\nchanged\n"
    st = os.stat(os.path.join(ws, "b.txt"))
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    assert os.path.exists(os.path.join(ws, "src/main.c")), "only the given paths are committed"

    r = c.request("POST", f"{S}/{sid}/discard", {"paths": ["src"]})
    assert r.status == 200, r
    out, _ = c.run_ok(sid, "cat src/main.c")
    assert "int main" in out
    d = c.request("GET", f"{S}/{sid}/diff").json()
    assert d["changes"] == []
    m = c.request("GET", "/metrics").body.decode()
    assert "draftbox_commits_total 1" in m


def test_recover_finishes_a_commit_stopped_by_a_host_edit(env, monkeypatch):
    """The daemon's first commit pauses once staged and checked (its 4th fault point, 'staged'); the
    host creates n.txt, which the session also created, meanwhile. The commit applies a.txt, meets
    the host's n.txt and stops: 409 naming it, journal kept. POST recover then refuses to go over it
    (409), and with force finishes; the host's file was never lost before that."""
    monkeypatch.setenv("DRAFTFS_FAULT", "pause:4:1500")
    srv = env.server()
    c = srv.client()
    ws = env.workspace()
    sid = c.create(ws)
    c.run_ok(sid, "echo changed >> a.txt; echo new > n.txt")
    got = {}
    t = threading.Thread(target=lambda: got.update(r=c.request("POST", f"{S}/{sid}/commit")))
    t.start()
    deadline = time.time() + 20
    while not any(n.startswith(".#draftfs.") for n in os.listdir(ws)):
        assert time.time() < deadline and t.is_alive(), "the commit never staged"
        time.sleep(0.01)
    time.sleep(0.3)
    with open(os.path.join(ws, "n.txt"), "w") as f:
        f.write("host\n")
    t.join(60)
    r = got["r"]
    assert r.status == 409 and r.json()["paths"] == ["n.txt"] and "stopped there" in r.json()["message"], r
    # draftfs's message names 'draftfs recover'; the API says which route finishes it
    assert r.json()["journal_pending"] is True and f"/v1/isolated/session/{{id}}/recover" in r.json()["hint"], r
    with open(os.path.join(ws, "a.txt")) as f:
        assert f.read() == "hello\nchanged\n", "a.txt came first: applied"
    for route in ("commit", "discard"):
        r = c.request("POST", f"{S}/{sid}/{route}")
        assert r.status == 503 and r.json()["journal_pending"] is True, ("a pending journal holds off " + route, r)
    r = c.request("POST", f"{S}/{sid}/recover")
    assert r.status == 409 and r.json()["paths"] == ["n.txt"] and r.json()["journal_pending"] is True, r
    with open(os.path.join(ws, "n.txt")) as f:
        assert f.read() == "host\n"
    assert c.request("POST", f"{S}/{sid}/recover", {"force": "yes"}).status == 400
    r = c.request("POST", f"{S}/{sid}/recover", {"force": True})
    assert r.status == 200 and r.json()["recovered"] is True, r
    with open(os.path.join(ws, "n.txt")) as f:
        assert f.read() == "new\n"
    assert c.request("GET", f"{S}/{sid}/diff").json()["changes"] == []
    r = c.request("POST", f"{S}/{sid}/recover")
    assert r.status == 200 and r.json()["recovered"] is False, r

def test_commit_conflict(api):
    env, srv, c = api
    ws = env.workspace()
    sid = c.create(ws)
    c.run_ok(sid, "echo mine >> a.txt")
    with open(os.path.join(ws, "a.txt"), "a") as f:
        f.write("theirs\n")  # the workspace changed under the session
    r = c.request("POST", f"{S}/{sid}/commit", {})
    assert r.status == 409, r
    body = r.json()
    assert body["code"] == "CONFLICT" and body["paths"] == ["a.txt"], body
    assert "journal_pending" not in body and "hint" not in body, "refused before its journal: nothing to recover"
    with open(os.path.join(ws, "a.txt")) as f:
        assert f.read() == "hello\ntheirs\n", "a refused commit changes nothing"
    r = c.request("POST", f"{S}/{sid}/commit", {"force": True})
    assert r.status == 200, r
    with open(os.path.join(ws, "a.txt")) as f:
        assert f.read() == "hello\nmine\n"
    assert "draftbox_commit_conflicts_total 1" in c.request("GET", "/metrics").body.decode()
    assert c.request("POST", f"{S}/{sid}/commit", {"force": "yes"}).status == 400
    assert c.request("POST", f"{S}/{sid}/commit", {"paths": "a.txt"}).status == 400
    # an empty list is a client's mistake, never "everything"
    c.run_ok(sid, "echo unsaved > c.txt")
    for op in ("commit", "discard"):
        r = c.request("POST", f"{S}/{sid}/{op}", {"paths": []})
        assert r.status == 400 and "empty" in r.json()["message"], r
        r = c.request("POST", f"{S}/{sid}/{op}", {"paths": [""]})
        assert r.status == 400 and "empty path" in r.json()["message"], r
        # cJSON would cut "\u0000keep" to "", the root: the body is refused before parsing
        r = c.request("POST", f"{S}/{sid}/{op}", {"paths": ["\x00keep"]})
        assert r.status == 400 and "NUL" in r.json()["message"], r
    out, _ = c.run_ok(sid, "cat c.txt")
    assert out.strip() == "unsaved", "a refused discard keeps the change"
    assert not os.path.exists(os.path.join(ws, "c.txt")), "a refused commit writes nothing"
    # a file named .wh.* has no form in an OCI layer: the tar diff refuses it, naming it
    c.run_ok(sid, "echo x > .wh.a.txt")
    r = c.request("GET", f"{S}/{sid}/diff", query={"format": "tar"})
    assert r.status == 422 and r.json()["code"] == "DIFF_REFUSED" and r.json()["paths"] == [".wh.a.txt"], r
    assert c.request("GET", f"{S}/{sid}/diff", query={"format": "json"}).status == 200
    # what git cannot hold is left out of the patch, and the header says so
    c.run_ok(sid, "mkdir -p sub/.git && echo x > sub/.git/config && echo y > sub/kept")
    p = c.request("GET", f"{S}/{sid}/diff", query={"format": "patch", "path": "sub"})
    assert p.status == 200 and b"sub/kept" in p.body and b".git/config" not in p.body
    assert p.header("Draftbox-Patch-Skipped") == "2", p  # sub/.git and sub/.git/config


def test_commit_racing_delete(api):
    env, srv, c = api
    for _ in range(3):
        ws = env.workspace("race")
        sid = c.create(ws)
        c.run_ok(sid, "for i in $(seq 1 50); do echo $i > f$i; done")
        res = {}
        t1 = threading.Thread(target=lambda: res.setdefault("commit", c.request("POST", f"{S}/{sid}/commit", {})))
        t2 = threading.Thread(target=lambda: res.setdefault("delete", c.request("DELETE", f"{S}/{sid}")))
        t1.start()
        t2.start()
        t1.join()
        t2.join()
        assert res["delete"].status == 200
        assert res["commit"].status in (200, 404), res["commit"]
        if res["commit"].status == 200:
            assert len(os.listdir(ws)) == 2 + 50
        else:
            assert res["commit"].json()["code"] == "SESSION_NOT_FOUND"
        assert c.get(sid).status == 404
        os.system(f"rm -rf {ws}")


def test_hostile_paths(api):
    env, srv, c = api
    ws = env.workspace()
    sid = c.create(ws)
    # the sandbox plants symlinks pointing out of the workspace
    c.run_ok(sid, "ln -s /etc/passwd pw; ln -s /etc etcdir; ln -s ../../../../../etc up")
    F = f"{S}/{sid}/files"
    bad = ["../etc/passwd", "%2e%2e/etc/passwd", "/etc/passwd", "pw", "etcdir/passwd", "up/passwd",
           ws + "/../ws/a.txt", "a.txt\x00.png"]
    for p in bad:
        r = c.request("GET", F + "/download", query={"path": p})
        assert 400 <= r.status < 500, (p, r)
        assert r.body and b"root:" not in r.body, (p, r)
        assert "code" in r.json(), (p, r)
    # the raw encoded forms straight in the URL
    for q in ("path=..%2f..%2fetc%2fpasswd", "path=%2e%2e%2fetc%2fpasswd", "path=a.txt%00x", "path=%2Fetc%2Fshadow"):
        r = c.request("GET", F + "/download?" + q)
        assert 400 <= r.status < 500 and b"root:" not in r.body, (q, r)
    r = c.request("GET", F + "/info", query={"path": "pw"})
    assert r.status == 200 and r.json()["pw"]["type"] == "symlink"
    # writes through planted links are refused, and nothing outside changes
    before = open("/etc/hostname").read()
    r = c.request("POST", F + "/replace", {"etcdir/hostname": {"old": "a", "new": "b"}})
    assert 400 <= r.status < 500, r
    assert open("/etc/hostname").read() == before
    r = c.request("DELETE", f"{S}/{sid}/directories", query={"path": "etcdir"})
    assert 400 <= r.status < 500 or os.path.exists("/etc/passwd")
    assert os.path.exists("/etc/passwd")
    for p in ("../x", "/etc"):
        r = c.request("GET", f"{S}/{sid}/diff", query={"path": p})
        assert r.status == 400, (p, r)
        r = c.request("POST", f"{S}/{sid}/commit", {"paths": [p]})
        assert r.status == 400, (p, r)
    assert c.request("GET", F + "/download").status == 400
    assert c.request("GET", F + "/download").json()["code"] == "MISSING_QUERY"
    r = c.request("GET", F + "/download", query={"path": "missing.txt"})
    assert r.status == 404 and r.json()["code"] == "FILE_NOT_FOUND"


def test_files_roundtrip(api):
    env, srv, c = api
    ws = env.workspace()
    sid = c.create(ws)
    F = f"{S}/{sid}/files"
    boundary = "----draftboxtest"
    meta = json.dumps({"path": ws + "/up/new.bin", "mode": 600})
    payload = os.urandom(300000)
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
            f"Content-Type: application/json\r\n\r\n{meta}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"new.bin\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + payload + f"\r\n--{boundary}--\r\n".encode()
    r = c.request("POST", F + "/upload", raw=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    assert r.status == 200, r
    assert r.json()["bytes"] == len(payload)
    d = c.request("GET", F + "/download", query={"path": "up/new.bin"})
    assert d.status == 200 and d.body == payload
    d = c.request("GET", F + "/download", query={"path": "up/new.bin"}, headers={"Range": "bytes=10-19"})
    assert d.status == 206 and d.body == payload[10:20]
    assert d.header("Content-Range") == f"bytes 10-19/{len(payload)}"
    d = c.request("GET", F + "/download", query={"path": "up/new.bin"}, headers={"Range": "bytes=-5"})
    assert d.status == 206 and d.body == payload[-5:]
    d = c.request("GET", F + "/download", query={"path": "up/new.bin"}, headers={"Range": f"bytes={len(payload)}-"})
    assert d.status == 416
    d = c.request("GET", F + "/download", query={"path": "up/new.bin", "offset": 5, "limit": 3})
    assert d.status == 206 and d.body == payload[5:8]
    # a limit past the end of the number range reads to the end, it does not wrap around to all
    d = c.request("GET", F + "/download", query={"path": "up/new.bin", "offset": 5, "limit": 2**64 - 1})
    assert d.status == 206 and d.body == payload[5:], (d.status, len(d.body))
    assert c.request("GET", F + "/download", query={"path": "up/new.bin", "offset": -1}).status == 400
    info = c.request("GET", F + "/info", query={"path": ws + "/up/new.bin"}).json()
    assert info[ws + "/up/new.bin"]["mode"] == 600 and info[ws + "/up/new.bin"]["size"] == len(payload)
    out, _ = c.run_ok(sid, "wc -c < up/new.bin")   # the sandbox sees what the API wrote
    assert out.strip() == str(len(payload))
    assert c.request("POST", F + "/mv", query={"old_path": "up/new.bin", "new_path": "up/moved.bin"}).status == 200
    lst = c.request("GET", f"{S}/{sid}/directories/list", query={"path": "up"}).json()
    assert [e["path"] for e in lst] == [ws + "/up/moved.bin"]
    assert c.request("DELETE", F, query={"path": "up/moved.bin"}).status == 200
    assert c.request("POST", f"{S}/{sid}/directories", query={"path": "d1/d2"}).status == 200
    s = c.request("GET", F + "/search", query={"pattern": "*.c"}).json()
    assert [e["path"] for e in s] == [ws + "/src/main.c"]
    r = c.request("POST", F + "/upload", raw=b"nope", headers={"Content-Type": "text/plain"})
    assert r.status == 400
