# SPDX-License-Identifier: LGPL-2.1-or-later
"""The `draftbox` client against a real draftboxd: the whole loop a person
goes through (create, run, files, diff, commit, discard, rm), with the
token found in the server's state dir and exit statuses checked.
"""
import io
import json
import os
import subprocess
import tarfile
import tempfile

from apiutil import api, env  # noqa: F401  (fixtures)
from conftest import build_path

DRAFTBOX = build_path("api", "draftbox")


def test_client_workflow(api):  # noqa: F811
    env_, srv, c = api
    ws = env_.workspace(files={"hello.txt": "original\n", "src/app.py": "print('v1')\n"})
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTBOX_") and k != "NO_COLOR"}
    base_env.update(DRAFTBOX_URL=f"http://127.0.0.1:{srv.port}", DRAFTBOX_STATE_DIR=srv.state)

    def dbx(*args, input=None, ok=True):
        r = subprocess.run([DRAFTBOX] + list(args), env=base_env, input=input, capture_output=True, timeout=120)
        if ok and r.returncode != 0:
            raise AssertionError(f"draftbox {' '.join(args)} exited {r.returncode}\nstdout: "
                                 f"{r.stdout[-2000:].decode(errors='replace')}\nstderr: "
                                 f"{r.stderr[-2000:].decode(errors='replace')}\nserver log:\n{srv.read_log()[-3000:]}")
        return r

    sid = dbx("session", "create", "--workspace", ws).stdout.decode().strip()
    assert sid and "\n" not in sid
    ls = dbx("session", "ls").stdout.decode()
    assert sid in ls and "active" in ls

    # run: output and exit status are the command's
    r = dbx("run", sid, "--", f"cd {ws} && sed -i s/v1/v2/ src/app.py && echo edited && exit 3", ok=False)
    assert r.returncode == 3 and r.stdout == b"edited\n", r
    r = dbx("run", sid, "--env", "GREETING=hi there", "--", "sh", "-c", 'echo "$GREETING"; echo "$0"', "arg zero")
    assert r.stdout == b"hi there\narg zero\n", r

    # files
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"uploaded\n")
        f.flush()
        dbx("files", "put", sid, f.name, f"{ws}/docs/readme.txt", "--mode", "600")
    assert dbx("files", "get", sid, f"{ws}/docs/readme.txt").stdout == b"uploaded\n"
    listing = dbx("files", "ls", sid, ws, "--depth", "2").stdout.decode()
    assert f"{ws}/docs/readme.txt" in listing and "-rw-------" in listing
    r = dbx("files", "get", sid, "/etc/shadow", ok=False)
    assert r.returncode == 1 and b"PATH_OUTSIDE_WORKSPACE" in r.stderr
    assert not os.path.exists(os.path.join(ws, "docs"))

    # diff in three formats
    summary = dbx("diff", sid).stdout.decode().splitlines()
    assert "M src/app.py" in summary and "A docs/" in summary and "A docs/readme.txt" in summary, summary
    patch = dbx("diff", sid, "src", "--patch").stdout.decode()
    assert "-print('v1')" in patch and "+print('v2')" in patch and "readme" not in patch
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "layer.tar")
        dbx("diff", sid, "--tar", "-o", out)
        with tarfile.open(out) as t:
            names = t.getnames()
        assert any(n.rstrip("/").endswith("src/app.py") for n in names), names
    r = dbx("diff", sid, "src", "--patch")
    assert b"left out" not in r.stderr, r.stderr
    dbx("run", sid, "--", "sh", "-c", "mkdir -p docs/.git && echo ref > docs/.git/HEAD")
    r = dbx("diff", sid, "docs", "--patch")
    assert b"docs/readme.txt" in r.stdout and b".git/HEAD" not in r.stdout
    assert b"2 changes git cannot hold" in r.stderr and b"--json" in r.stderr, r.stderr

    # a commit conflict names its paths; nothing is pending to recover
    dbx("run", sid, "--", "sh", "-c", "echo session > clash.txt")
    with open(os.path.join(ws, "clash.txt"), "w") as f:
        f.write("host\n")
    r = dbx("commit", sid, f"{ws}/clash.txt", ok=False)
    assert r.returncode == 1 and b"(CONFLICT, HTTP 409)" in r.stderr, r
    assert any(line.startswith(b"draftbox:   ") and line.endswith(b"clash.txt")
               for line in r.stderr.splitlines()), r.stderr
    with open(os.path.join(ws, "clash.txt")) as f:
        assert f.read() == "host\n"
    os.unlink(os.path.join(ws, "clash.txt"))
    assert dbx("recover", sid).stdout == b"nothing to recover: no commit was interrupted\n"

    # commit one path, discard the rest
    r = dbx("commit", sid, f"{ws}/src/app.py")
    assert b"src/app.py" in r.stdout
    with open(os.path.join(ws, "src", "app.py")) as f:
        assert f.read() == "print('v2')\n"
    before = json.loads(dbx("diff", sid, "--json").stdout)  # --json after the id works too
    assert before["changes"], before
    r = dbx("discard", sid)
    assert r.stdout.strip() == b"discarded (all changes)", r.stdout
    assert dbx("--json", "diff", sid).stdout.strip().startswith(b"{")
    assert dbx("diff", sid).stdout == b""
    assert not os.path.exists(os.path.join(ws, "docs"))

    dbx("session", "rm", sid)
    r = dbx("run", sid, "--", "true", ok=False)
    assert r.returncode == 1 and b"SESSION_NOT_FOUND" in r.stderr
    # a wrong token is refused
    r = subprocess.run([DRAFTBOX, "--token", "wrong", "session", "ls"], env=base_env, capture_output=True, timeout=30)
    assert r.returncode == 1 and b"401" in r.stderr
    # no token at all: the client says which token file it tried and why it failed
    no_tok = {k: v for k, v in base_env.items() if k not in ("DRAFTBOX_TOKEN", "DRAFTBOX_TOKEN_FILE")}
    no_tok["DRAFTBOX_TOKEN_FILE"] = "/nonexistent/token"
    r = subprocess.run([DRAFTBOX, "session", "ls"], env=no_tok, capture_output=True, timeout=30)
    assert r.returncode == 1 and b"401" in r.stderr, r
    assert b"cannot read the token file '/nonexistent/token': No such file or directory" in r.stderr, r.stderr
