# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftfs on Debian 12's own kernel (Linux 6.1), in a VM.

The README's fresh Debian 12 machine boots Linux 6.1: no FUSE passthrough
(6.9), no FUSE over io_uring (6.14), no page-cache drop on a direct write
(6.6). The test machine's newer kernel takes the other branch of each, so
this module boots Debian's kernel in qemu (vmutil.py), mounts draftfs
there and checks: the mount falls back to /dev/fuse and to reads through
the daemon without a word; a file read and then appended to reads back
whole (it read zeros before draftfs asked for 6.6's behaviour); copy-up,
whiteouts, an opaque dir, renames of a file and a dir, a symlink, a hard
link, a chmod and a 1.2 MB file show in the view (the layers are on the
VM's tmpfs, which has no user xattrs before 6.6)
and are on disk in the kernel's format, which that kernel's own overlayfs
then mounts to the same view; diff lists every change; a commit writes
them into the lower dir and empties the upper.
"""
import hashlib
import json
import os

import pytest

import vmutil
from conftest import build_path

DRAFTFS = build_path("fs", "draftfs")
D = "/opt/db/fs/draftfs"
OPTS = "lowerdir=/l,upperdir=/u,workdir=/w"

# One line per entry: path, type, mode, and the target or the content (its md5 past 100 bytes).
LISTING = ("(cd {root} && find . | sort | while read -r p; do "
           "if [ -L \"$p\" ]; then echo \"$p l $(readlink \"$p\")\"; "
           "elif [ -f \"$p\" ] && [ $(stat -c %s \"$p\") -gt 100 ]; then "
           "echo \"$p f $(stat -c %a \"$p\") md5:$(md5sum < \"$p\" | cut -c1-32)\"; "
           "elif [ -f \"$p\" ]; then echo \"$p f $(stat -c %a \"$p\") $(cat \"$p\")\"; "
           "else echo \"$p d $(stat -c %a \"$p\")\"; fi; done)")
WAIT_GONE = "while pidof draftfs >/dev/null; do sleep 0.1; done"

CASES = [
    ("setup", "set -e; mkdir -p /l/dir/sub /l/keep /u /w /m /o; echo a > /l/a; echo b > /l/b; "
              "echo c > /l/c; echo f > /l/dir/f; echo s > /l/dir/sub/s; echo k > /l/keep/k; "
              "mkdir /l/mv; echo m > /l/mv/m1"),
    ("mount", f"{D} -o {OPTS} /m"),
    ("lower_read", "cat /m/a /m/dir/sub/s"),
    ("ops", "set -e; echo more >> /m/a; rm /m/b; mv /m/c /m/c2; rm -r /m/dir; mkdir /m/dir; "
            "echo new > /m/dir/n; mkdir /m/fresh; echo fr > /m/fresh/x; ln -s a /m/link; "
            "chmod 600 /m/keep/k; ln /m/keep/k /m/hard; mv /m/mv /m/moved; seq 1 200000 > /m/big"),
    ("links", "stat -c %h /m/hard /m/keep/k"),
    ("view", LISTING.format(root="/m")),
    ("status", f"{D} status /m"),
    ("diff", f"{D} diff /m"),
    ("umount", f"umount /m && {WAIT_GONE}"),
    ("upper_format", "stat -c '%n %F %t:%T' /u/b /u/c && "
                     "getfattr --absolute-names --only-values -n trusted.overlay.opaque /u/dir"),
    # a chmod or a rename of a lower file leaves a metacopy, which the kernel reads with metacopy=on
    ("kernel_overlay", f"mount -t overlay overlay -o {OPTS},metacopy=on /o && {LISTING.format(root='/o')}; "
                       "rc=$?; umount /o; exit $rc"),
    ("remount", f"{D} -o {OPTS} /m"),
    ("commit", f"{D} commit /m"),
    ("view_after_commit", LISTING.format(root="/m")),
    ("umount2", f"umount /m && {WAIT_GONE}"),
    ("lower_after_commit", LISTING.format(root="/l")),
    ("upper_after_commit", "find /u -mindepth 1"),
]

BIG_MD5 = hashlib.md5("".join(f"{i}\n" for i in range(1, 200001)).encode()).hexdigest()
EXPECTED_VIEW = f"""\
. d 755
./a f 644 a
more
./big f 644 md5:{BIG_MD5}
./c2 f 644 c
./dir d 755
./dir/n f 644 new
./fresh d 755
./fresh/x f 644 fr
./hard f 600 k
./keep d 755
./keep/k f 600 k
./link l a
./moved d 755
./moved/m1 f 644 m
"""


@pytest.fixture(scope="module")
def vm():
    if os.geteuid() != 0:
        pytest.skip("mounting draftfs in the VM needs root here (qemu runs it as the VM's root)")
    why = vmutil.missing(need_modules=("fuse", "overlay"))
    if why:
        pytest.skip(why)
    if not os.path.exists(DRAFTFS):
        pytest.skip(f"{DRAFTFS} is not built")
    getfattr = "/usr/bin/getfattr"
    if not os.path.exists(getfattr):
        pytest.skip("getfattr (package attr) is not installed")
    return vmutil.boot({D: DRAFTFS, getfattr: getfattr}, CASES)


def case(vm, name, rc=0):
    results, _ = vm
    assert name in results, f"case {name} did not run"
    r = results[name]
    if rc is not None:
        assert r.rc == rc, r
    return r


def test_mount_falls_back_quietly(vm):
    _, info = vm
    assert info["KERNEL"].startswith("6.1."), info
    r = case(vm, "mount")
    assert r.stderr == b"", r  # a kernel without the features is not an error
    st = json.loads(case(vm, "status").stdout)
    assert st["transport"]["kind"] == "/dev/fuse" and st["passthrough"] is False, st


def test_lower_files_read_through_the_daemon(vm):
    assert case(vm, "lower_read").stdout == b"a\ns\n"


def test_changes_show_in_the_view(vm):
    case(vm, "ops")
    assert case(vm, "view").stdout.decode() == EXPECTED_VIEW
    assert case(vm, "links").stdout == b"2\n2\n", "a hard link of a lower file"


def test_upper_is_in_the_kernel_format(vm):
    out = case(vm, "upper_format").stdout.decode().splitlines()
    assert out[0] == "/u/b character special file 0:0", out
    assert out[1] == "/u/c character special file 0:0", out
    assert out[2] == "y", out


def test_kernel_overlayfs_mounts_the_same_view(vm):
    case(vm, "umount")
    assert case(vm, "kernel_overlay").stdout.decode() == EXPECTED_VIEW


def test_diff_lists_every_change(vm):
    changes = json.loads(case(vm, "diff").stdout)
    got = {c["path"]: c["status"] for c in changes["changes"]}
    want = {"a": "modified", "b": "deleted", "c": "deleted", "c2": "added", "dir/f": "deleted",
            "dir/n": "added", "fresh": "added", "fresh/x": "added", "link": "added", "keep/k": "modified",
            "hard": "added", "mv": "deleted", "moved": "added", "moved/m1": "added", "big": "added"}
    for path, status in want.items():
        assert got.get(path) == status, (path, got)


def test_commit_writes_the_lower_and_empties_the_upper(vm):
    case(vm, "remount")
    case(vm, "commit")
    assert case(vm, "view_after_commit").stdout.decode() == EXPECTED_VIEW
    case(vm, "umount2")
    assert case(vm, "lower_after_commit").stdout.decode() == EXPECTED_VIEW
    assert case(vm, "upper_after_commit", rc=None).stdout == b""
