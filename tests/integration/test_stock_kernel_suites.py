# SPDX-License-Identifier: LGPL-2.1-or-later
"""The draftfs suites themselves, run on Debian 12's own kernel (6.1) in a VM.

test_fs_stock_kernel.py checks a handful of operations there by hand; this
module runs whole pytest files of ours inside the VM (vmutil.py with
Debian's python3 and pytest, the layers on an ext4 RAM disk), so the
differential test against that kernel's own overlayfs, the integrity and
control-plane suites see a kernel without FUSE passthrough or io_uring,
and the launcher and API suites a pure cgroup v2 host (the VM's), where
the sessions of the main job run.
Each file is one test here and passes when its run inside does (a file
whose tests all skip counts as passed, as in meson). The emulated CPU is
slow (about 20 times), so SUITES holds the files that say most per minute
($DRAFTBOX_VM_SUITES picks others), and only the plain build runs them.
Seen passing there too, by hand (2026-12-03): fs-smoke, fs-ownership,
fs-crash, fs-metacopy, fs-finalize, fs-readdir, fs-acl, fs-badinput,
fs-evict, fs-mounthelper, ctl-live, ctl-random, ctl-metacopy,
ctl-recover, launcher-sandbox, launcher-overlay, api-sessions,
api-changes. fs-programs needs make and git's helpers, which the VM does
not have.
"""
import glob
import os
import shutil

import pytest

import vmutil
from conftest import HERE, build_path

DRAFTFS = build_path("fs", "draftfs")
SUITES = os.environ.get("DRAFTBOX_VM_SUITES", "test_fs_differential.py test_fs_integrity.py "
                        "test_fs_symlinks.py test_ctl_commit.py test_launcher_limits.py "
                        "test_api_run.py").split()
# the suites' own tools; the VM's busybox lacks options they use (rm --one-file-system)
TOOLS = ["/usr/bin/" + t for t in ("mount", "umount", "setpriv", "getfattr", "setfattr", "git", "env", "rm",
                                   "cp", "mv", "ln", "mkdir", "chmod", "chown", "stat", "cat", "ls", "touch",
                                   "find", "tar", "sync", "truncate", "dd", "head", "seq", "wc", "pgrep",
                                   "sleep")] + ["/usr/sbin/mkfs.ext4"]
# the layers on ext4, as on a real machine (tmpfs has no user xattrs before 6.6)
SCRATCH = "mkfs.ext4 -q /dev/ram0 && mount /dev/ram0 /tmp && chmod 1777 /tmp"
BUILT = ["launcher/draftbox-run", "launcher/draftbox-run-full", "launcher/draftbox-exec", "api/draftboxd",
         "api/draftbox", "tests/integration/try-syscall"]
RUN_SUITE = ("cd /opt/db/tests/integration && "
             "PATH=/usr/bin:/usr/sbin:/bin:/sbin DRAFTBOX_BUILD_DIR=/opt/db/build "
             "PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs {f} "
             "> /tmp/log 2>&1; rc=$?; tail -c 6000 /tmp/log; exit $rc")


@pytest.fixture(scope="module")
def vm():
    if os.geteuid() != 0:
        pytest.skip("the suites mount draftfs as root")
    why = vmutil.missing(need_modules=("fuse", "overlay", "ext4", "brd"))
    if why:
        pytest.skip(why)
    if not os.path.exists(DRAFTFS):
        pytest.skip(f"{DRAFTFS} is not built")
    if any("libasan" in d for d in vmutil.elf_deps(DRAFTFS)):
        pytest.skip("the emulated CPU runs a sanitized build too slowly; the plain build runs these suites")
    py = vmutil.python_payload()
    if not py:
        pytest.skip("Debian's python3 and python3-pytest are not installed")
    missing = [t for t in TOOLS if not os.path.exists(t)]
    if missing:
        pytest.skip(f"not installed: {' '.join(missing)}")
    files, trees = py
    binaries = {"/opt/db/build/fs/draftfs": DRAFTFS, **{t: t for t in TOOLS}, **files}
    # the rest of the build, for suites picked through $DRAFTBOX_VM_SUITES (launcher, api)
    for rel in BUILT:
        path = build_path(*rel.split("/"))
        if os.path.exists(path):
            binaries["/opt/db/build/" + rel] = path
    if shutil.which("bwrap"):
        binaries["/usr/bin/bwrap"] = shutil.which("bwrap")
    # the host's shells: the API runs commands with bash, and busybox's sh would run its own
    # applets (ls, stat) before the tools in PATH
    binaries["/bin/bash"] = "/bin/bash"
    binaries["/bin/sh"] = os.path.realpath("/bin/sh")
    for lib in glob.glob("/usr/lib/*-linux-gnu/libgit2.so.*")[:1]:  # draftfs loads it for patches
        binaries[lib] = lib
    for f in os.listdir(HERE):
        if f.endswith(".py"):
            binaries[f"/opt/db/tests/integration/{f}"] = os.path.join(HERE, f)
    cases = [("scratch", SCRATCH)] + [(f, RUN_SUITE.format(f=f)) for f in SUITES]
    results, _ = vmutil.boot(binaries, cases, timeout=1500, memory_mib=4096, trees=trees)
    assert results["scratch"].rc == 0, results["scratch"]
    return results


@pytest.mark.parametrize("suite", SUITES)
def test_suite_on_debian_12_kernel(vm, suite):
    r = vm[suite]
    out = r.stdout.decode(errors="replace")
    assert r.rc in (0, 77), f"{suite} failed on Linux 6.1 (exit {r.rc}):\n{out}"
