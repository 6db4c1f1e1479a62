# SPDX-License-Identifier: LGPL-2.1-or-later
"""The files and directories routes of a real draftboxd, end to end:
OpenSandbox formats, ownership of what the API creates, traversal
attempts in every encoding, symlinks planted by sandboxed code, and a
sandbox swapping a directory for a symlink while the API writes below it.
"""
import json
import socket
import time
import os
import stat
import threading
import uuid

import pytest

from apiutil import api, env  # noqa: F401  (fixtures)


def multipart(meta, content, boundary=None):
    boundary = boundary or "----draftbox" + uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
            f"Content-Type: application/json\r\n\r\n{json.dumps(meta)}\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"blob\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def upload(c, sid, path, content, **meta):
    body, ctype = multipart(dict(path=path, **meta), content)
    return c.request("POST", c.files_path(sid, "files/upload"), raw=body, headers={"Content-Type": ctype})


def download(c, sid, path, headers=None):
    return c.request("GET", c.files_path(sid, "files/download"), query={"path": path}, headers=headers)


def code_of(r):
    try:
        return r.json().get("code")
    except ValueError:
        return None


@pytest.fixture
def session(api):  # noqa: F811
    env_, srv, c = api
    ws = env_.workspace(files={"hello.txt": "original\n", "src/main.c": "int main(void) { return 0; }\n"})
    sid = c.create(ws)
    out, last = c.run_ok(sid, "id -u")
    pool_uid = int(out.strip().splitlines()[0])
    yield env_, c, ws, sid, pool_uid
    c.delete(sid)


def test_roundtrip_formats_and_ownership(session):
    env_, c, ws, sid, pool_uid = session
    content = os.urandom(100000)
    r = upload(c, sid, f"{ws}/new/dir/blob.bin", content, mode=640)
    assert r.status == 200, r

    r = c.request("GET", c.files_path(sid, "files/info"), query={"path": [f"{ws}/new/dir/blob.bin", "hello.txt"]})
    assert r.status == 200, r
    info = r.json()
    blob = info[f"{ws}/new/dir/blob.bin"]
    assert blob["path"] == f"{ws}/new/dir/blob.bin" and blob["type"] == "file" and blob["size"] == len(content)
    assert blob["mode"] == 640
    assert blob["modified_at"].endswith("Z") and "T" in blob["modified_at"]
    # created through the API = owned by the session's sandbox uid, so the sandbox can edit it
    assert blob["owner"] == str(pool_uid) and blob["group"] == str(pool_uid), blob
    assert info["hello.txt"]["path"] == f"{ws}/hello.txt" and info["hello.txt"]["mode"] == 644

    r = download(c, sid, f"{ws}/new/dir/blob.bin")
    assert r.status == 200 and r.body == content
    r = download(c, sid, f"{ws}/new/dir/blob.bin", headers={"Range": "bytes=10-19"})
    assert r.status == 206 and r.body == content[10:20]

    # the sandbox sees it, owned by its uid, and can write it and the new directory
    out, last = c.run_ok(sid, f"stat -c '%u %a' {ws}/new/dir/blob.bin && echo more >> {ws}/new/dir/blob.bin "
                              f"&& touch {ws}/new/dir/other && echo ok")
    assert last["type"] == "execution_complete", (out, last)
    assert out.splitlines() == [f"{pool_uid} 640", "ok"]
    # nothing reached the real workspace
    assert not os.path.exists(os.path.join(ws, "new"))
    # replacing keeps the mode, and is a new file (no write through a hard link made by the sandbox)
    c.run_ok(sid, f"ln {ws}/new/dir/blob.bin {ws}/hardlink")
    r = upload(c, sid, f"{ws}/new/dir/blob.bin", b"replaced")
    assert r.status == 200, r
    out, _ = c.run_ok(sid, f"cat {ws}/new/dir/blob.bin; echo; stat -c %a {ws}/new/dir/blob.bin; wc -c < {ws}/hardlink")
    assert out.splitlines() == ["replaced", "640", str(len(content) + 5)]


def test_traversal_is_refused(session):
    env_, c, ws, sid, _ = session
    cases = [
        ("../../../../etc/passwd", 400, "INVALID_REQUEST_BODY"),
        (f"{ws}/../../etc/passwd", 400, "INVALID_REQUEST_BODY"),
        (f"{ws}/src/../../x", 400, "INVALID_REQUEST_BODY"),
        ("/etc/passwd", 400, "PATH_OUTSIDE_WORKSPACE"),
        (f"{ws}X/hello.txt", 400, "PATH_OUTSIDE_WORKSPACE"),
        (os.path.dirname(ws), 400, "PATH_OUTSIDE_WORKSPACE"),
        (f"{ws}/hello.txt\x00.png", 400, "INVALID_REQUEST_BODY"),
        ("%2e%2e/%2e%2e/etc/passwd", 404, "FILE_NOT_FOUND"),  # sent encoded twice: a literal name here
    ]
    for path, status, code in cases:
        r = download(c, sid, path)
        assert (r.status, code_of(r)) == (status, code), (path, r)
    # ".." decoded by the server from %2e%2e is still ".."
    r = c.request("GET", c.files_path(sid, "files/download") + "?path=%2e%2e%2F%2e%2e%2Fetc%2Fpasswd")
    assert r.status == 400 and code_of(r) == "INVALID_REQUEST_BODY", r
    r = upload(c, sid, "/etc/draftbox-should-not-exist", b"x")
    assert r.status == 400 and not os.path.exists("/etc/draftbox-should-not-exist"), r
    r = upload(c, sid, "../escape", b"x")
    assert r.status == 400 and not os.path.exists(os.path.join(os.path.dirname(ws), "escape")), r
    r = c.request("POST", c.files_path(sid, "files/mv"), [{"src": f"{ws}/hello.txt", "dest": "/tmp/stolen"}])
    assert r.status == 400 and code_of(r) == "PATH_OUTSIDE_WORKSPACE", r
    # a \u0000 in a body string would cut the path there ("hello.txt\u0000x" is "hello.txt")
    r = c.request("POST", c.files_path(sid, "files/mv"), [{"src": f"{ws}/hello.txt\x00x", "dest": f"{ws}/moved.txt"}])
    assert r.status == 400 and "NUL" in r.json()["message"], r
    assert os.path.exists(os.path.join(ws, "hello.txt")) and not os.path.exists(os.path.join(ws, "moved.txt"))
    # a move names both sides (here the dest is the bad one: below a file)
    r = c.request("POST", c.files_path(sid, "files/mv"), [{"src": f"{ws}/hello.txt", "dest": f"{ws}/hello.txt/x"}])
    assert r.status >= 400 and "hello.txt/x" in r.json()["message"], r
    # error replies are valid UTF-8 JSON whatever the bytes of the path, also when cut short
    for q in ("a/" * 149 + "a%C3%A9", "x%ff/y"):
        r = c.request("GET", c.files_path(sid, "files/info") + "?path=" + q)
        assert r.status >= 400 and json.loads(r.body.decode("utf-8"))["message"], r
    r = c.request("DELETE", c.files_path(sid, "directories"), query={"path": ws})
    assert r.status == 409 and code_of(r) == "BUSY", r
    assert os.path.exists(os.path.join(ws, "hello.txt"))


def test_planted_symlinks_are_not_followed(session):
    env_, c, ws, sid, _ = session
    outside = os.path.join(env_.base, "outside")
    os.makedirs(outside)
    with open(os.path.join(outside, "secret"), "w") as f:
        f.write("secret\n")
    passwd_mode = os.stat("/etc/passwd").st_mode
    passwd_data = open("/etc/passwd", "rb").read()
    out, last = c.run_ok(sid, f"cd {ws} && ln -s /etc etc && ln -s ../../../../../../.. up && mkdir d && "
                              f"ln -s /etc/passwd d/pw && ln -s {outside} out && echo planted")
    assert "planted" in out, (out, last)

    for p in ("etc/passwd", "up/etc/passwd", "d/pw", f"{ws}/out/secret"):
        r = download(c, sid, p)
        assert r.status == 400 and code_of(r) == "SYMLINK_NOT_FOLLOWED", (p, r)
    r = upload(c, sid, f"{ws}/etc/draftbox-evil", b"x")
    assert r.status == 400 and code_of(r) == "SYMLINK_NOT_FOLLOWED", r
    r = upload(c, sid, f"{ws}/out/secret", b"pwned")
    assert r.status == 400, r
    r = c.request("POST", c.files_path(sid, "files/permissions"), {f"{ws}/d/pw": {"mode": 777}})
    assert r.status == 400, r
    r = c.request("POST", c.files_path(sid, "files/replace"), {f"{ws}/out/secret": {"old": "secret", "new": "x"}})
    assert r.status == 400, r
    r = c.request("POST", c.files_path(sid, "directories"), {f"{ws}/etc/newdir": {"mode": 755}})
    assert r.status == 400, r
    r = c.request("GET", c.files_path(sid, "files/search"), query={"path": ws, "pattern": "*"})
    assert r.status == 200, r
    found = sorted(e["path"] for e in r.json())
    assert f"{ws}/etc" in found and f"{ws}/d/pw" in found  # the links themselves
    assert not any(p.startswith(f"{ws}/etc/") or p.startswith(f"{ws}/out/") for p in found), found
    r = c.request("GET", c.files_path(sid, "directories/list"), query={"path": ws, "depth": 5})
    types = {e["path"]: e["type"] for e in r.json()}
    assert types[f"{ws}/etc"] == "symlink" and types[f"{ws}/up"] == "symlink" and types[f"{ws}/d"] == "directory"
    r = c.request("GET", c.files_path(sid, "files/search"), query={"path": f"{ws}/etc", "pattern": "*"})
    assert r.status == 400, r
    # removing a tree holding links removes the links only
    r = c.request("DELETE", c.files_path(sid, "directories"), query={"path": [f"{ws}/d"]})
    assert r.status == 200, r
    r = c.request("DELETE", c.files_path(sid, "files"), query={"path": [f"{ws}/etc", f"{ws}/out", f"{ws}/up"]})
    assert r.status == 200, r

    assert os.stat("/etc/passwd").st_mode == passwd_mode
    assert open("/etc/passwd", "rb").read() == passwd_data
    assert not os.path.exists("/etc/draftbox-evil") and not os.path.exists("/etc/newdir")
    assert os.listdir(outside) == ["secret"] and open(os.path.join(outside, "secret")).read() == "secret\n"


def test_sandbox_swapping_a_directory_for_a_symlink(session):
    """Sandboxed code flips `a` between a directory and a symlink to an outside dir
    while the API uploads and mkdirs below `a`: nothing may land outside."""
    env_, c, ws, sid, _ = session
    outside = os.path.join(env_.base, "outside-race")
    os.makedirs(outside)
    os.chmod(outside, 0o777)
    out, last = c.run_ok(sid, f"cd {ws} && mkdir a && ln -s {outside} b && echo ready")
    assert "ready" in out, (out, last)
    script = (f"cd {ws} && end=$(($(date +%s)+4)); n=0; "
              f"while [ $(date +%s) -lt $end ]; do mv -T a t && mv -T b a && mv -T t b; n=$((n+1)); done; echo swaps=$n")
    result = {}

    def sandbox():
        result["run"] = c.run_ok(sid, script)

    t = threading.Thread(target=sandbox)
    t.start()
    ok = refused = 0
    i = 0
    while t.is_alive() and i < 2000:
        r = upload(c, sid, f"{ws}/a/f{i}", b"x")
        ok += r.status == 200
        refused += r.status != 200
        c.request("POST", c.files_path(sid, "directories"), {f"{ws}/a/d{i}/e": {"mode": 777}})
        i += 1
    t.join(60)
    out, last = result["run"]
    assert "swaps=" in out and int(out.split("swaps=")[1].split()[0]) > 10, out
    assert os.listdir(outside) == [], f"escaped into {outside}: {os.listdir(outside)[:10]} ({ok} ok, {refused} refused)"
    assert i > 10


def test_operations(session):
    env_, c, ws, sid, pool_uid = session
    p = c.files_path
    r = c.request("POST", p(sid, "files/replace"), {f"{ws}/hello.txt": {"old": "orig", "new": "ORIG"}})
    assert r.status == 200 and r.json() == {f"{ws}/hello.txt": {"replacedCount": 1}}, r
    assert download(c, sid, "hello.txt").body == b"ORIGinal\n"
    r = c.request("POST", p(sid, "files/replace"), {f"{ws}/hello.txt": {"old": "", "new": "x"}})
    assert r.status == 400, r

    r = c.request("POST", p(sid, "files/mv"), [{"src": f"{ws}/hello.txt", "dest": f"{ws}/moved/here.txt"}])
    assert r.status == 200, r
    assert download(c, sid, "hello.txt").status == 404
    assert download(c, sid, "moved/here.txt").body == b"ORIGinal\n"

    r = c.request("POST", p(sid, "files/permissions"), {f"{ws}/moved/here.txt": {"mode": 600, "owner": "0"}})
    assert r.status == 200, r
    info = c.request("GET", p(sid, "files/info"), query={"path": f"{ws}/moved/here.txt"}).json()
    assert info[f"{ws}/moved/here.txt"]["mode"] == 600

    r = c.request("POST", p(sid, "directories"), {f"{ws}/x/y/z": {"mode": 700}})
    assert r.status == 200, r
    lst = c.request("GET", p(sid, "directories/list"), query={"path": f"{ws}/x", "depth": 2}).json()
    assert [(e["path"], e["type"], e["mode"]) for e in lst] == [(f"{ws}/x/y", "directory", 700),
                                                                  (f"{ws}/x/y/z", "directory", 700)]
    lst = c.request("GET", p(sid, "directories/list"), query={"path": ws}).json()
    assert {e["path"] for e in lst} == {f"{ws}/moved", f"{ws}/src", f"{ws}/x"}

    r = c.request("GET", p(sid, "files/search"), query={"path": ws, "pattern": "*.c"})
    assert [e["path"] for e in r.json()] == [f"{ws}/src/main.c"]

    r = c.request("DELETE", p(sid, "directories"), query={"path": f"{ws}/x"})
    assert r.status == 200, r
    r = c.request("DELETE", p(sid, "files"), query={"path": f"{ws}/src"})
    assert r.status == 400 and code_of(r) == "INVALID_FILE", r
    r = c.request("DELETE", p(sid, "files"), query={"path": f"{ws}/src/main.c"})
    assert r.status == 200, r

    r = download(c, sid, f"{ws}/moved")
    assert r.status == 400 and code_of(r) == "INVALID_FILE", r
    r = download(c, sid, f"{ws}/nope")
    assert r.status == 404 and code_of(r) == "FILE_NOT_FOUND", r
    c.run_ok(sid, f"mkfifo {ws}/fifo")
    r = download(c, sid, f"{ws}/fifo")
    assert r.status == 400 and code_of(r) == "INVALID_FILE", r  # never blocks on a FIFO
    assert "not a regular file" in r.json()["message"], r

    # the diff sees exactly what the API did
    d = c.request("GET", f"/v1/isolated/session/{sid}/diff").json()
    changes = {ch["path"]: ch["status"] for ch in d["changes"]}
    assert changes.get("hello.txt") == "deleted" and changes.get("moved/here.txt") == "added", changes
    assert changes.get("src/main.c") == "deleted" and "x" not in changes, changes


def test_quota_exceeded_keeps_the_old_file(env):  # noqa: F811
    srv = env.server(extra_args=["--quota-bytes=1048576"])
    c = srv.client()
    ws = env.workspace(files={"keep.txt": "old content\n"})
    sid = c.create(ws)
    try:
        r = upload(c, sid, f"{ws}/keep.txt", os.urandom(3 * 1024 * 1024))
        assert r.status == 507 and code_of(r) == "QUOTA_EXCEEDED", r
        assert download(c, sid, f"{ws}/keep.txt").body == b"old content\n"
        names = [e["path"] for e in c.request("GET", c.files_path(sid, "directories/list"),
                                              query={"path": ws, "depth": 3}).json()]
        assert not any(".draftbox-upload." in n for n in names), names
    finally:
        c.delete(sid)
    srv.stop()


def test_delete_ends_a_download_in_flight(api):  # noqa: F811
    """A download holds its session: DELETE does not unmount under the open file (which
    kept the session's draftfs alive after its directory was gone); it ends the stream
    at its next block, then removes everything."""
    env_, srv, c = api
    ws = env_.workspace()
    sid = c.create(ws)
    size = 64 << 20
    c.run_ok(sid, f"head -c {size} /dev/zero > big.bin")
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.settimeout(60)
    s.sendall((f"GET /v1/isolated/session/{sid}/files/download?path={ws}/big.bin HTTP/1.1\r\n"
               f"Host: 127.0.0.1\r\nX-EXECD-ACCESS-TOKEN: {srv.token}\r\nConnection: close\r\n\r\n").encode())
    got = s.recv(65536)
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("r", c.request("DELETE", f"/v1/isolated/session/{sid}")))
    t.start()
    time.sleep(1)  # the delete has begun while the download waits on our full socket buffer
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        got += d
    s.close()
    t.join(60)
    assert res["r"].status == 200, res
    assert len(got) < size, "the stream was cut short once the delete began"
    assert not os.path.exists(os.path.join(srv.state, "sessions", sid))
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert sid.encode() not in f.read(), f"process {pid} of the deleted session is still running"
        except OSError:
            pass
