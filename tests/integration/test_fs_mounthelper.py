# SPDX-License-Identifier: LGPL-2.1-or-later
"""`mount -t fuse.draftfs` works through mount.fuse3.

mount.fuse3 runs `draftfs` with the plain system PATH (docs/fs.md). So as
not to install anything on the host, the test runs in a private mount
namespace where /usr/sbin is overlaid with a directory holding a `draftfs`
symlink to the built binary; there it mounts with mount(8), writes through
the view, checks upper and the mount table, and unmounts with umount(8).
"""
import os
import shutil
import subprocess
import sys

import pytest

import fsutil
from fsutil import fsenv  # noqa: F401

INSIDE = r"""
import os, subprocess, sys, time
bindir, lower, upper, work, mnt = sys.argv[1:6]
subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={bindir}:/usr/sbin", "/usr/sbin"], check=True)
r = subprocess.run(["mount", "-t", "fuse.draftfs", "draftfs", mnt, "-o",
                    f"lowerdir={lower},upperdir={upper},workdir={work}"], capture_output=True, text=True)
if r.returncode != 0:
    sys.exit(f"mount -t fuse.draftfs failed ({r.returncode}): {r.stderr.strip()}")
ok = False
with open("/proc/self/mountinfo") as f:
    for line in f:
        left, right = line.split(" - ", 1)
        if left.split()[4] == mnt:
            if right.split()[0] != "fuse.draftfs":
                sys.exit(f"mounted as {right.split()[0]}")
            ok = True
if not ok:
    sys.exit("not in mountinfo")
with open(os.path.join(mnt, "lowerfile")) as f:
    assert f.read() == "from lower", "lower not visible"
with open(os.path.join(mnt, "viewfile"), "w") as f:
    f.write("through mount(8)")
with open(os.path.join(upper, "viewfile")) as f:
    assert f.read() == "through mount(8)", "write not in upper"
r = subprocess.run(["mount", "-t", "fuse.draftfs", "draftfs", mnt, "-o",
                    f"lowerdir={lower},upperdir={upper},workdir={work},bogus=1"], capture_output=True, text=True)
if r.returncode == 0:
    sys.exit("a bad option was accepted by the helper")
subprocess.run(["umount", mnt], check=True)
def daemons():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if os.path.basename(cmd[0]) == b"draftfs" and mnt.encode() in cmd:
                out.append(pid)
    return out
for _ in range(200):
    if not daemons():
        break
    time.sleep(0.05)
else:
    sys.exit(f"draftfs daemon still running after umount: {daemons()}")
print("ok")
"""


def test_mount_helper(fsenv):
    fsutil.require_impl()
    if fsutil.IMPL != "draftfs":
        pytest.skip("mount helper is draftfs-specific")
    for p in ("mount.fuse3", "unshare"):
        if not shutil.which(p) and not os.path.exists(f"/sbin/{p}"):
            pytest.skip(f"'{p}' is not installed")
    bindir = fsenv.dir("bin")
    os.symlink(os.path.abspath(fsutil.draftfs_bin()), os.path.join(bindir, "draftfs"))
    lower, upper, work, mnt = (fsenv.dir(n) for n in ("lower", "upper", "work", "mnt"))
    with open(os.path.join(lower, "lowerfile"), "w") as f:
        f.write("from lower")
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c", INSIDE,
                        bindir, lower, upper, work, mnt], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", f"rc {r.returncode}: {r.stdout}{r.stderr}"
    assert not fsutil.is_mounted(mnt), "the namespace's mount leaked out"
