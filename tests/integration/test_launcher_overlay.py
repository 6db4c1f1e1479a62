# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftbox-run in overlay mode: the sandbox writes into a draftfs upper, never the workspace."""
import os
import subprocess
import time

import pytest

from launchutil import DRAFTFS, box, mounts_below, require_sandbox  # noqa: F401

require_sandbox()
if not os.path.exists(DRAFTFS) or not os.path.exists("/dev/fuse"):
    pytest.skip("draftfs is not built or /dev/fuse is missing", allow_module_level=True)


def own_by_user(ws, uid=1000, gid=1000):
    """Gives the workspace to a normal user: the view maps that owner to the sandbox uid."""
    os.chmod(ws, 0o755)
    for root, dirs, files in os.walk(ws):
        for n in [root] + [os.path.join(root, x) for x in dirs + files]:
            os.lchown(n, uid, gid)


def test_overlay_writes_go_to_the_upper(box):
    with open(os.path.join(box.ws, "orig"), "w") as f:
        f.write("original")
    own_by_user(box.ws)
    sess = os.path.join(box.state, "s1")
    r = box.run(["sh", "-c", "cat orig; echo changed > orig; echo new > added; mkdir d; ls -ln"],
                "--session-dir", sess, mode="overlay")
    assert r.rc == 0, r
    assert r.stdout.startswith(b"original"), r
    with open(os.path.join(box.ws, "orig")) as f:
        assert f.read() == "original"
    assert not os.path.exists(os.path.join(box.ws, "added"))
    assert open(os.path.join(sess, "upper", "added")).read() == "new\n"
    assert open(os.path.join(sess, "upper", "orig")).read() == "changed\n"
    assert not mounts_below(sess), "draftbox-run left its view mounted"


def test_overlay_keep_and_view(box):
    own_by_user(box.ws)
    sess = os.path.join(box.state, "s2")
    view = os.path.join(sess, "view")
    r = box.run(["sh", "-c", "echo kept > k"], "--session-dir", sess, "--keep", mode="overlay")
    assert r.rc == 0, r
    try:
        assert view in mounts_below(sess)
        assert open(os.path.join(view, "k")).read() == "kept\n"
        # run again in the existing view
        r = box.run(["cat", "k"], "--view", view, mode="overlay")
        assert r.stdout == b"kept\n", r
    finally:
        for _ in range(50):
            if subprocess.run(["umount", view]).returncode == 0:
                break
            time.sleep(0.1)
    assert not mounts_below(sess)


def test_overlay_temporary_session_is_cleaned(box):
    own_by_user(box.ws)
    r = box.run(["sh", "-c", "echo x > y && cat y"], mode="overlay")
    assert r.rc == 0 and r.stdout == b"x\n", r
    assert r.json["session_dir"].startswith("/run/draftbox/tmp/session-"), r
    assert not os.path.exists(r.json["session_dir"])
    assert not os.path.exists(os.path.join(box.ws, "y"))


def test_overlay_root_owned_workspace_is_not_mapped(box):
    # mapping uid 0 to the sandbox uid would hand root-only files to sandboxed code
    os.chmod(box.ws, 0o755)
    with open(os.path.join(box.ws, "secret"), "w") as f:
        f.write("root only")
    os.chmod(os.path.join(box.ws, "secret"), 0o600)
    r = box.run(["sh", "-c", "cat secret; echo rc=$?; touch top 2>/dev/null; echo touch=$?; ls -ln secret"],
                mode="overlay")
    assert b"root only" not in r.stdout, r
    assert b"rc=1" in r.stdout and b"touch=1" in r.stdout, r
    assert b" 0 0 " in r.stdout, r  # still root's, not the sandbox uid's
    assert not os.path.exists(os.path.join(box.ws, "top"))


def test_overlay_view_root_takes_the_workspace_owner(box):
    with open(os.path.join(box.ws, "f"), "w") as f:
        f.write("x")
    own_by_user(box.ws)
    sess = os.path.join(box.state, "s3")
    r = box.run(["sh", "-c", "touch newfile && id -u && stat -c %u ."], "--session-dir", sess, mode="overlay")
    assert r.rc == 0, r
    uid, root_owner = r.stdout.split()
    assert uid == root_owner and int(uid) >= 10000, r  # the view root shows as the sandbox uid
    st = os.stat(os.path.join(sess, "upper"))
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    assert os.stat(os.path.join(sess, "upper", "newfile")).st_uid == 1000
