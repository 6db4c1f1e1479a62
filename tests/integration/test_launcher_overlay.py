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


def test_overlay_writes_go_to_the_upper(box):
    with open(os.path.join(box.ws, "orig"), "w") as f:
        f.write("original")
    os.chmod(box.ws, 0o755)  # the view maps the owner (root) to the sandbox uid
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
    r = box.run(["sh", "-c", "echo x > y && cat y"], mode="overlay")
    assert r.rc == 0 and r.stdout == b"x\n", r
    assert r.json["session_dir"].startswith("/run/draftbox/tmp/session-"), r
    assert not os.path.exists(r.json["session_dir"])
    assert not os.path.exists(os.path.join(box.ws, "y"))
