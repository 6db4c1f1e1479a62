# SPDX-License-Identifier: LGPL-2.1-or-later
"""The workloads: each is one or more timed phases run with the mount as cwd.

A workload sees a freshly mounted, cold filesystem (remounted, caches
dropped). Phases of one workload share the mount (git_status: first run,
then second run). Each phase is a command; a non-zero exit is a failure
of the implementation, not a number. `check` then verifies the result (given the phases' stdout)
where a silent short cut is possible (stat_all counts entries, the build
runs its program).
"""
import os

PY = "/usr/bin/python3"

CREATE_SMALL = r"""
import os, sys
n = int(sys.argv[1]); buf = b"x" * 4096
os.mkdir("small")
for i in range(n):
    if i % 1000 == 0:
        d = "small/d%03d" % (i // 1000); os.mkdir(d)
    fd = os.open("%s/f%05d" % (d, i), os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    os.write(fd, buf); os.close(fd)
os.sync()
"""

METADATA_MIX = r"""
import os, sys
with open(sys.argv[1]) as f:
    names = [l.strip() for l in f if l.strip()]
for i, p in enumerate(names):
    os.chmod(p, 0o600 if i % 2 else 0o640)
    os.utime(p, None)
    os.rename(p, p + ".mm")
"""


class Workload:
    def __init__(self, name, phases, mutates, desc, check=None, extra=False, prime=()):
        self.name = name
        # Files (relative to the tree) read once before each sample, straight from the directory the
        # implementation serves them from, before the caches are dropped: see Suite.prime().
        self.prime = prime
        self.extra = extra        # reported, but not in the geomean, the worst case or the fo-fast verdict
        self.phases = phases      # [(phase name, argv)]
        self.mutates = mutates    # plain copy needs a resync afterwards
        self.desc = desc
        self.check = check        # f(root) -> None or raises

    @property
    def phase_names(self):
        return [p for p, _ in self.phases]


def _sh(cmd):
    # pipefail: a reader that fails half-way (EIO, EMFILE) must not hide behind `| cat`
    return ["bash", "-o", "pipefail", "-c", cmd]


def all_workloads(man, jobs):
    """Returns the workload list for the tree described by manifest @man."""
    sz = man["sizes"]
    big = sz["big_bytes"]
    mib = big >> 20

    def check_stat(root, outs):
        n = int(outs["stat_all"].strip() or 0)
        # find prints "." too
        if n - 1 != man["entries"]:
            raise RuntimeError("stat_all saw %d entries, the lower has %d" % (n - 1, man["entries"]))

    def check_build(root, outs):
        if not os.access(os.path.join(root, "build-proj", "app"), os.X_OK):
            raise RuntimeError("the build produced no program")

    def check_rm(root, outs):
        if os.path.exists(os.path.join(root, "vendor")):
            raise RuntimeError("vendor/ still there after rm -rf")

    def check_copyup(root, outs):
        if os.stat(os.path.join(root, "big.bin")).st_size != big + 1:
            raise RuntimeError("big.bin has the wrong size after the append")

    def check_git(root, outs):
        for k, v in outs.items():
            if v.strip():
                raise RuntimeError("%s: the clean repository shows changes: %r" % (k, v[:200]))

    fio = ["fio", "--name=r", "--filename=big.bin", "--readonly", "--bs=4k", "--ioengine=psync",
           "--size=%d" % big, "--output-format=terse"]
    return [
        Workload("stat_all", [("stat_all", _sh("find . -ls | wc -l"))], False,
                 "find -ls over every entry (lstat of each)", check_stat),
        Workload("read_all", [("read_all", _sh("tar cf - --exclude=./big.bin . | cat >/dev/null"))], False,
                 "tar of everything but big.bin, piped through cat so data is read"),
        Workload("grep_all", [("grep_all", _sh("grep -r --exclude=big.bin -c zzqqxxunfindable . >/dev/null; "
                                               "test $? -le 1"))], False,
                 "grep -r for a string that is nowhere (reads every file but big.bin)"),
        Workload("git_status", [("git_status_1", ["git", "-C", "repo", "status", "--porcelain"]),
                                ("git_status_2", ["git", "-C", "repo", "status", "--porcelain"])], True,
                 "git status in the ~10k-file repository, first then second run in the same mount", check_git),
        Workload("seq_read", [("seq_read", fio + ["--rw=read"])], False,
                 "fio sequential 4k reads of the whole big file", prime=("big.bin",)),
        Workload("rand_read", [("rand_read", fio + ["--rw=randread", "--io_size=%d" % sz["rand_read_bytes"],
                                                    "--randrepeat=1", "--norandommap"])], False,
                 "fio random 4k reads (%d MiB) of the big file" % (sz["rand_read_bytes"] >> 20),
                 prime=("big.bin",)),
        Workload("create_small", [("create_small", [PY, "-c", CREATE_SMALL, str(sz["small_files"])])], True,
                 "create %d files of 4 KiB, then sync" % sz["small_files"]),
        Workload("seq_write", [("seq_write", ["dd", "if=/dev/zero", "of=new.bin", "bs=1M",
                                              "count=%d" % (sz["seq_write_bytes"] >> 20),
                                              "conv=fsync", "status=none"])], True,
                 "write a new %d MiB file, then fsync" % (sz["seq_write_bytes"] >> 20)),
        Workload("copy_up_big", [("copy_up_big", _sh("printf x >> big.bin"))], True,
                 "append one byte to the %d MiB lower file" % mib, check_copyup),
        # The same made durable: what a background copy-up (draftfs bgfill=) leaves to do after the append
        # is in here. Not comparable for fuse-overlayfs with fsync=0, which ignores the fsync.
        Workload("copy_up_big_fsync", [("copy_up_big_fsync", _sh("printf x >> big.bin && sync big.bin"))], True,
                 "append one byte to the %d MiB lower file, then fsync it (sync FILE)" % mib, check_copyup,
                 extra=True),
        # What an agent's `ls -l` costs: an lstat and two xattr reads per entry (security.selinux and the
        # access ACL), the ACL from the kernel's cache on the second run where the FUSE daemon negotiated
        # POSIX ACLs. Not one of the workloads: reported only.
        Workload("ls_l", [("ls_l_1", _sh("ls -lR src >/dev/null")), ("ls_l_2", _sh("ls -lR src >/dev/null"))],
                 False, "ls -lR of src/ (%d entries), first then second run in the same mount" % sz["src_files"],
                 extra=True),
        Workload("rm_tree", [("rm_tree", ["rm", "-rf", "vendor"])], True,
                 "rm -rf of a lower dir of %d entries" % man["vendor_entries"], check_rm),
        Workload("untar", [("untar", _sh("mkdir untar && tar xf '%s' -C untar" % man["untar"]))], True,
                 "untar %d files (the tarball is read from outside the mount)" % sz["untar_files"]),
        Workload("metadata_mix", [("metadata_mix", [PY, "-c", METADATA_MIX, man["mm_list"]])], True,
                 "chmod, touch and rename of %d lower files" % sz["mm_files"]),
        Workload("build", [("build", _sh("mkdir build-proj && make -s -C build-proj -f ../proj/Makefile "
                                         "SRC=../proj -j%d && ./build-proj/app >/dev/null" % jobs))], True,
                 "out-of-tree make -j%d of the generated C project (%d units) in proj/"
                 % (jobs, sz["proj_units"]), check_build),
    ]
