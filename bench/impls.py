# SPDX-License-Identifier: LGPL-2.1-or-later
"""The implementations under test and how to mount and unmount each.

plain        the lower tree itself, as a writable copy (the ceiling); after a
             workload that changes it, it is synced back from the lower
ovl          kernel overlayfs, default options (the reference, ratio 1.0)
fo-default   fuse-overlayfs from Debian, default options
fo-fast      fuse-overlayfs with threaded=1,noacl,static_nlink,fsync=0
draftfs      our FUSE overlay (fs/draftfs from the build dir)
Variants of draftfs, only when named in --impls (A/B runs):
draftfs-devfuse  uring=off: requests over /dev/fuse, not the io_uring queues
draftfs-nosync   fsync=0: copy-ups not synced (as fuse-overlayfs's fast options)
draftfs-normal   ring_sched=normal: the io_uring threads never SCHED_IDLE (fs/ring-sched.c)
draftfs-ptupper  passthrough=upper: lower files read through the daemon (docs/fs.md, Passthrough)
draftfs-base     the draftfs of --base-build-dir (another build: an A/B of a change)

FUSE daemons run in the foreground as our children, so their pid (for CPU
time and RSS) is known and they never outlive the suite.
"""
import json
import os
import shutil
import subprocess
import time

FO_FAST_OPTS = "threaded=1,noacl,static_nlink,fsync=0"
DRAFTFS_VARIANTS = {"draftfs-devfuse": "uring=off", "draftfs-nosync": "fsync=0",
                    "draftfs-normal": "ring_sched=normal", "draftfs-ptupper": "passthrough=upper"}


def mounted(path):
    """True if @path is a mount point in our mount namespace."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if mp == path:
                return True
    return False


def proc_cpu_seconds(pid):
    """User+system CPU seconds of process @pid (all its threads), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def proc_rss_kib(pid):
    """(VmRSS, VmHWM) of @pid in KiB, or (None, None)."""
    rss = hwm = None
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1])
    except OSError:
        pass
    return rss, hwm


def force_umount(path):
    subprocess.run(["umount", path], stderr=subprocess.DEVNULL)
    if mounted(path):
        subprocess.run(["umount", "-l", path], stderr=subprocess.DEVNULL)


class Mount:
    """A mounted instance: where to run, and the daemon (if any)."""

    def __init__(self, impl, root, proc=None, mount_seconds=None):
        self.impl = impl
        self.root = root
        self.proc = proc
        self.mount_seconds = mount_seconds

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def cpu(self):
        return proc_cpu_seconds(self.proc.pid) if self.proc else None

    def rss(self):
        return proc_rss_kib(self.proc.pid) if self.proc else (None, None)

    def umount(self):
        self.impl.umount(self)


class Impl:
    name = "?"
    label = "?"
    fuse = False

    def available(self):
        """Returns None if usable, else a reason string."""
        return None

    def mount(self, lower, scratch):
        raise NotImplementedError

    def umount(self, m):
        pass


class Plain(Impl):
    name = "plain"
    label = "plain dir"

    def __init__(self, plain_dir):
        self.plain_dir = plain_dir

    def mount(self, lower, scratch):
        return Mount(self, self.plain_dir)


class KernelOverlay(Impl):
    name = "ovl"
    label = "kernel overlayfs"

    def available(self):
        with open("/proc/filesystems") as f:
            if "overlay" not in f.read():
                subprocess.run(["modprobe", "overlay"], stderr=subprocess.DEVNULL)
        return None

    def mount(self, lower, scratch):
        mnt, upper, work = _dirs(scratch)
        t0 = time.monotonic()
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        "lowerdir=%s,upperdir=%s,workdir=%s" % (lower, upper, work), mnt],
                       check=True)
        return Mount(self, mnt, mount_seconds=time.monotonic() - t0)

    def umount(self, m):
        subprocess.run(["umount", m.root], check=True)


class FuseImpl(Impl):
    fuse = True

    def argv(self, lower, upper, work, mnt):
        raise NotImplementedError

    def mount(self, lower, scratch):
        mnt, upper, work = _dirs(scratch)
        argv = self.argv(lower, upper, work, mnt)
        t0 = time.monotonic()
        log = open(os.path.join(scratch, "daemon.log"), "wb")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                close_fds=True)
        log.close()
        deadline = t0 + 30
        while not mounted(mnt):
            if proc.poll() is not None:
                with open(os.path.join(scratch, "daemon.log"), "rb") as f:
                    err = f.read().decode(errors="replace").strip()
                raise RuntimeError("%s exited with %d before mounting: %s"
                                   % (self.name, proc.returncode, err[-400:]))
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError("%s did not mount within 30s" % self.name)
            time.sleep(0.002)
        return Mount(self, mnt, proc, time.monotonic() - t0)

    def umount(self, m):
        r = subprocess.run(["umount", m.root], stderr=subprocess.PIPE)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", m.root], stderr=subprocess.DEVNULL)
        try:
            m.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait()
            raise RuntimeError("%s daemon did not exit after umount" % self.name)
        if m.proc.returncode not in (0, None):
            raise RuntimeError("%s daemon exited with %d" % (self.name, m.proc.returncode))


class FuseOverlayfs(FuseImpl):
    def __init__(self, fast):
        self.fast = fast
        self.name = "fo-fast" if fast else "fo-default"
        self.label = "fuse-overlayfs (%s)" % (FO_FAST_OPTS if fast else "defaults")

    def available(self):
        if not shutil.which("fuse-overlayfs"):
            return "fuse-overlayfs not installed"
        if not os.path.exists("/dev/fuse"):
            return "no /dev/fuse"
        return None

    def argv(self, lower, upper, work, mnt):
        opts = "lowerdir=%s,upperdir=%s,workdir=%s" % (lower, upper, work)
        if self.fast:
            opts += "," + FO_FAST_OPTS
        return ["fuse-overlayfs", "-f", "-o", opts, mnt]


class Draftfs(FuseImpl):
    """draftfs with its default options; with @opts (a -o list), a variant named @name for A/B runs."""

    def __init__(self, build_dir, name="draftfs", opts=None, label=None):
        self.binary = os.path.join(build_dir, "fs", "draftfs")
        self.build_dir = build_dir
        self.name = name
        self.opts = opts
        self.label = label or "draftfs" + (" (%s)" % opts if opts else "")

    def available(self):
        if not os.access(self.binary, os.X_OK):
            return "not available yet (no %s)" % self.binary
        if not os.path.exists("/dev/fuse"):
            return "no /dev/fuse"
        try:
            with open(os.path.join(self.build_dir, "meson-info", "intro-buildoptions.json")) as f:
                opts = {o["name"]: o["value"] for o in json.load(f)}
        except (OSError, ValueError, KeyError):
            opts = {}
        if opts.get("b_sanitize", "none") != "none":
            return "build dir %s is a sanitizer build; use a default (debugoptimized) one" % self.build_dir
        self.buildtype = opts.get("buildtype", "?")
        return None

    def argv(self, lower, upper, work, mnt):
        opts = "lowerdir=%s,upperdir=%s,workdir=%s" % (lower, upper, work)
        if self.opts:
            opts += "," + self.opts
        return [self.binary, "-f", "-o", opts, mnt]


def _dirs(scratch):
    out = []
    for n in ("mnt", "upper", "work"):
        p = os.path.join(scratch, n)
        os.makedirs(p, exist_ok=True)
        out.append(p)
    return out
