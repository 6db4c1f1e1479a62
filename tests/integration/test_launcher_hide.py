# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftbox-run: host dirs the sandbox must not read, although the host root
is bound read-only. The strict profile hides users' data (/home, /root,
/srv, /mnt, /media) with empty tmpfs and gives the sandbox its own
/var/tmp; --hide adds dirs and fails on bad
ones; --hide-if-free (draftboxd's, for other sessions' workspaces) skips
what is absent or would hide what the run is given. What the run is given
(the workspace) stays visible even when it lies below a hidden dir.
"""
import os
import shutil
import tempfile

import pytest

from launchutil import Box, box, require_sandbox  # noqa: F401

require_sandbox()

DEFAULT_HIDDEN = ["/home", "/root", "/srv", "/mnt", "/media"]


def canary_dir(parent, prefix, name, text):
    """A 0755 dir in @parent holding a 0644 file @name: what any user may read."""
    d = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(d, 0o755)
    with open(os.path.join(d, name), "w") as f:
        f.write(text)
    os.chmod(os.path.join(d, name), 0o644)
    return d


@pytest.fixture
def home():
    """A user's home as many systems make them (0755, files 0644), holding a canary."""
    if not os.path.isdir("/home"):
        pytest.skip("this host has no /home to hide")
    d = canary_dir("/home", "dbx-home-", "notes.txt", "canary-home\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def vartmp():
    d = canary_dir("/var/tmp", "dbx-hide-", "f", "canary-var\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def fs_types(box, paths, *opts, **kw):
    """The filesystem type each existing path has inside the sandbox."""
    script = "; ".join(f"[ -e {p} ] && echo {p} $(stat -f -c %T {p})" for p in paths) + "; true"
    r = box.run(["sh", "-c", script], *opts, **kw)
    assert r.rc == 0, r
    return dict(ln.split() for ln in r.stdout.decode().splitlines())


def test_strict_hides_users_data(box, home):
    r = box.run(["sh", "-c", f"cat {home}/notes.txt; ls -A /home; true"])
    assert r.rc == 0, r
    assert b"canary" not in r.stdout and os.path.basename(home).encode() not in r.stdout, r
    assert b"No such file" in r.stderr, r
    got = fs_types(box, DEFAULT_HIDDEN)
    want = [p for p in DEFAULT_HIDDEN if os.path.isdir(p) and os.path.realpath(p) != "/"]
    assert sorted(got) == sorted(want) and all(got[p] == "tmpfs" for p in want), got


def test_strict_var_tmp_is_private(box, vartmp):
    if os.path.islink("/var/tmp"):
        pytest.skip("/var/tmp is a symlink here; the strict profile leaves it alone")
    script = f"cat {vartmp}/f; ls -A /var/tmp; echo mine > /var/tmp/out && cat /var/tmp/out; stat -c %a /var/tmp; true"
    r = box.run(["sh", "-c", script])
    assert r.rc == 0, r
    assert b"canary" not in r.stdout and os.path.basename(vartmp).encode() not in r.stdout, r
    assert r.stdout.split() == [b"mine", b"1777"], r
    assert not os.path.exists("/var/tmp/out")
    r = box.run(["sh", "-c", f"cat {vartmp}/f; touch /var/tmp/out"], "--profile", "balanced")
    assert r.stdout == b"canary-var\n" and r.rc != 0 and not os.path.exists("/var/tmp/out"), \
        ("balanced: the host's, read-only", r)


def test_balanced_and_no_default_hide_keep_them(box, home):
    for opts in (["--profile", "balanced"], ["--no-default-hide"]):
        r = box.run(["cat", f"{home}/notes.txt"], *opts)
        assert r.rc == 0 and r.stdout == b"canary-home\n", (opts, r)


@pytest.mark.parametrize("mode", ["rw", "overlay"])
def test_workspace_below_a_hidden_dir_stays_visible(box, home, mode):
    ws = os.path.join(home, "proj")
    os.mkdir(ws)
    os.chmod(ws, 0o777)
    with open(os.path.join(ws, "src.c"), "w") as f:
        f.write("int x;\n")
    r = box.run(["sh", "-c", f"pwd; cat src.c; echo new > out.txt && echo wrote; cat {home}/notes.txt; "
                 "ls -A ..; true"], mode=mode, workspace=ws)
    assert r.rc == 0, r
    lines = r.stdout.decode().splitlines()
    assert lines[:3] == [ws, "int x;", "wrote"], r
    assert b"canary" not in r.stdout, r
    assert lines[3:] == ["proj"], "the workspace's siblings are hidden, only the path down to it is made"
    if mode == "rw":
        with open(os.path.join(ws, "out.txt")) as f:
            assert f.read() == "new\n"


def test_hide_option(box, vartmp):
    for profile in ("strict", "balanced"):
        r = box.run(["sh", "-c", f"cat {vartmp}/f; ls -A {vartmp}; stat -f -c %T {vartmp}"],
                    "--profile", profile, "--hide", vartmp)
        assert b"canary" not in r.stdout and r.stdout.decode().split() == ["tmpfs"], (profile, r)
        # written from inside? the tmpfs is root's, 0755
        r = box.run(["sh", "-c", f"touch {vartmp}/x"], "--profile", profile, "--hide", vartmp)
        assert r.rc != 0 and not os.path.exists(os.path.join(vartmp, "x")), r
    # a symlink to a dir means its target
    link = vartmp + ".link"
    os.symlink(vartmp, link)
    try:
        r = box.run(["cat", f"{vartmp}/f"], "--hide", link)
        assert r.rc != 0 and b"canary" not in r.stdout, r
    finally:
        os.unlink(link)


def test_hide_an_ancestor_of_the_workspace(box):
    # the Box's dir holds the workspace and the state dir: hide all of it, the workspace comes back on top
    with open(os.path.join(box.dir, "sibling"), "w") as f:
        f.write("canary-sibling\n")
    r = box.run(["sh", "-c", f"echo in > in.txt && cat in.txt; cat {box.dir}/sibling; true"],
                "--profile", "balanced", "--hide", box.dir)
    assert r.rc == 0 and r.stdout == b"in\n", r
    assert os.path.exists(os.path.join(box.ws, "in.txt"))


@pytest.mark.parametrize("what,msg", [
    ("missing", b"cannot hide '%s': No such file or directory"),
    ("file", b"cannot hide '%s': Not a directory"),
    ("root", b"cannot hide '/': the sandbox's own /dev, /proc, /sys, /run, /tmp or /var/tmp lies there"),
    ("var", b"cannot hide '/var': the sandbox's own /dev, /proc, /sys, /run, /tmp or /var/tmp lies there"),
    ("tmp", b"cannot hide '/tmp': the sandbox's own /dev, /proc, /sys, /run, /tmp or /var/tmp lies there"),
    ("proc", b"cannot hide '/proc/sys': the sandbox's own /dev, /proc, /sys, /run, /tmp or /var/tmp lies there"),
    ("workspace", b"cannot hide '%s': the workspace or an exposed path lies there"),
    ("below-workspace", b"cannot hide '%s': the workspace or an exposed path lies there"),
    ("relative", b"--hide needs an absolute path without '..', got 'rel'"),
    ("dotdot", b"--hide needs an absolute path without '..', got '%s'"),
])
def test_bad_hides_fail_before_anything_runs(box, what, msg):
    os.mkdir(os.path.join(box.ws, "sub"))
    path = {"missing": os.path.join(box.dir, "nope"), "file": "/etc/passwd", "root": "/", "var": "/var",
            "tmp": "/tmp", "proc": "/proc/sys",
            "workspace": box.ws, "below-workspace": os.path.join(box.ws, "sub"), "relative": "rel",
            "dotdot": box.ws + "/../ws"}[what]
    marker = os.path.join(box.ws, "ran")
    r = box.run(["touch", marker], "--hide", path)
    assert r.rc == 125, r
    assert (msg % path.encode() if b"%s" in msg else msg) in r.stderr, r
    assert not os.path.exists(marker)


def test_hide_if_free_skips_what_is_absent_or_given(box, vartmp):
    r = box.run(["sh", "-c", f"cat in.txt 2>/dev/null; echo ok > in.txt && cat in.txt; cat {vartmp}/f; true"],
                "--profile", "balanced", "--hide-if-free", os.path.join(box.dir, "nope"),
                "--hide-if-free", box.ws, "--hide-if-free", os.path.join(box.ws, "deeper"),
                "--hide-if-free", vartmp)
    assert r.rc == 0 and r.stdout == b"ok\n", r


def test_hide_if_free_never_buries_the_sandbox_own_mounts(box):
    # another session's workspace could be /var or /tmp: the run keeps its own /tmp, /var/tmp and /proc
    r = box.run(["sh", "-c", "echo t > /tmp/t && echo v > /var/tmp/v && cat /tmp/t /var/tmp/v && "
                 "stat -f -c %T /proc && ls /var/lib >/dev/null && echo ok"],
                *[a for p in ("/var", "/tmp", "/", "/proc/sys", "/run") for a in ("--hide-if-free", p)])
    assert r.rc == 0 and r.stdout.split() == [b"t", b"v", b"proc", b"ok"], r
