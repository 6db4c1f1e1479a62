# SPDX-License-Identifier: LGPL-2.1-or-later
"""Fixtures for the draftfs suites: layers, mounts, tree snapshots.

The implementation under test is draftfs unless $DRAFTFS_IMPL says
otherwise: "fuse-overlayfs" (to develop the harness while draftfs is not
there yet) or "kernel" (kernel overlayfs against itself: a self-check of
the harness, which must then find no difference at all).
$DRAFTFS_TEST_OPTS, if set, is added to the options of every draftfs mount:
meson runs some suites a second time with uring=off (see meson.build).
Every mount made here is unmounted at teardown, with umount -l as the last
resort, and FUSE daemons run in the foreground (-f) as our children, so a
test can kill them and their stderr (ASan/UBSan reports) is checked: a
daemon must exit 0 with no sanitizer report once unmounted. Importing this
module moves the test process into a private mount namespace (see
_private_mount_namespace), so nothing it mounts is visible on the host.
"""
import ctypes
import errno
import hashlib
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time

import pytest

from conftest import build_path

IMPL = os.environ.get("DRAFTFS_IMPL", "draftfs")
KERNEL_OPTS = "redirect_dir=off,index=off,metacopy=off,xino=off"
KERNEL_IMPL_OPTS = KERNEL_OPTS
# Reading an upper written by someone else: follow redirects, and metacopy
# files (draftfs's copy-ups of metadata-only changes; the kernel insists on
# redirect_dir=on with metacopy=on).
KERNEL_VERIFY_OPTS = "redirect_dir=on,index=off,metacopy=on,xino=off"
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "SUMMARY: UndefinedBehaviorSanitizer")

_libc = ctypes.CDLL(None, use_errno=True)
SYS_OPENAT2 = 437
SYS_RENAMEAT2 = 316
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def openat2(dirfd, path, flags, mode=0, resolve=RESOLVE_IN_ROOT):
    """openat2(2); raises OSError. Default resolution keeps every symlink inside dirfd."""
    if not flags & os.O_CREAT and (flags & os.O_TMPFILE) != os.O_TMPFILE:
        mode = 0  # openat2 insists
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    for _ in range(100):
        fd = _libc.syscall(SYS_OPENAT2, ctypes.c_int(dirfd), os.fsencode(path),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        e = ctypes.get_errno()
        # EAGAIN: a rename or mount anywhere on the host raced with a ".." step
        if e != errno.EAGAIN or not resolve & (RESOLVE_IN_ROOT | RESOLVE_BENEATH):
            break
    raise OSError(e, os.strerror(e), path)


def renameat2(olddirfd, oldname, newdirfd, newname, flags):
    """renameat2(2); raises OSError."""
    r = _libc.syscall(SYS_RENAMEAT2, ctypes.c_int(olddirfd), os.fsencode(oldname),
                      ctypes.c_int(newdirfd), os.fsencode(newname), ctypes.c_uint(flags))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), oldname)


# ---------------------------------------------------------------- mountinfo

def _unescape(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def mounts():
    """Returns [(mountpoint, fstype, source, superopts)] from /proc/self/mountinfo."""
    res = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            mp = _unescape(left.split()[4])
            fstype, source, superopts = (right.split() + ["", "", ""])[:3]
            res.append((mp, fstype, _unescape(source), superopts))
    return res


def mounts_under(path):
    """Mount points at or below @path."""
    path = os.path.realpath(path)
    return [m for m in mounts() if m[0] == path or m[0].startswith(path + "/")]


def is_mounted(path):
    path = os.path.realpath(path)
    return any(m[0] == path for m in mounts())


def wait_mounted(path, proc=None, timeout=20.0):
    """Waits until @path is a mount point whose FUSE daemon has answered INIT; fails if @proc exits first.

    The mount shows in /proc before the daemon has read the kernel's INIT, and what the daemon sets up
    while answering it (its io_uring queue threads) is not there yet: a getxattr through the mount, which
    the kernel never answers from a cache, is held until INIT is answered.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_mounted(path):
            try:
                os.getxattr(path, "user.draftbox-test.init")
            except OSError:
                pass  # absent (the answer looked for), or a daemon that died: the caller's checks say
            return
        if proc is not None and proc.poll() is not None:
            out = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise AssertionError(f"daemon for '{path}' exited with {proc.returncode} before mounting: {out}")
        time.sleep(0.02)
    raise AssertionError(f"'{path}' not mounted after {timeout}s")


def force_unmount(path):
    """Unmounts @path however it can; returns silently if it is not mounted."""
    for cmd in (["umount", path], ["fusermount3", "-u", "-z", path], ["umount", "-l", path]):
        if not is_mounted(path):
            return
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# ---------------------------------------------------------------- implementations

def draftfs_bin():
    return build_path("fs", "draftfs")


def impl_available(impl=IMPL):
    """Returns None when @impl can run here, otherwise the reason it cannot."""
    if not os.path.exists("/dev/fuse") and impl != "kernel":
        return "/dev/fuse is missing"
    if impl == "draftfs":
        if not os.access(draftfs_bin(), os.X_OK):
            return f"draftfs is not built at '{draftfs_bin()}'"
    elif impl == "fuse-overlayfs":
        if not shutil.which("fuse-overlayfs"):
            return "fuse-overlayfs is not installed"
    elif impl != "kernel":
        return f"unknown DRAFTFS_IMPL '{impl}'"
    if os.geteuid() != 0:
        return "needs root (kernel overlayfs mounts, trusted.* xattrs)"
    return None


def require_impl(impl=IMPL):
    why = impl_available(impl)
    if why:
        pytest.skip(why)


class Mount:
    """One overlay mount; .path is the merged view."""

    def __init__(self, kind, lowers, upper, work, path, opts="", extra_env=None):
        self.kind, self.lowers, self.upper, self.work, self.path = kind, list(lowers), upper, work, path
        self.opts = opts
        self.proc = None
        self.stderr_path = None
        self.env = extra_env

    def option_string(self):
        s = f"lowerdir={':'.join(self.lowers)},upperdir={self.upper},workdir={self.work}"
        s += "," + self.opts if self.opts else ""
        extra = os.environ.get("DRAFTFS_TEST_OPTS") if self.kind == "draftfs" else None
        return s + ("," + extra if extra else "")

    def start(self):
        os.makedirs(self.path, exist_ok=True)
        if self.kind == "kernel":
            subprocess.run(["mount", "-t", "overlay", "overlay", "-o", self.option_string(), self.path],
                           check=True, capture_output=True)
            return self
        binary = draftfs_bin() if self.kind == "draftfs" else "fuse-overlayfs"
        self.stderr_path = self.path.rstrip("/") + ".stderr"
        errf = open(self.stderr_path, "wb")
        env = dict(os.environ)
        env.update(self.env or {})
        self.proc = subprocess.Popen([binary, "-f", "-o", self.option_string(), self.path],
                                     stdin=subprocess.DEVNULL, stdout=errf, stderr=errf, env=env)
        errf.close()
        try:
            wait_mounted(self.path, self.proc)
        except AssertionError:
            self.proc.wait()
            raise AssertionError(f"{binary} failed to mount '{self.path}' (rc {self.proc.returncode}): "
                                 f"{self.stderr()}")
        return self

    def stderr(self):
        if not self.stderr_path or not os.path.exists(self.stderr_path):
            return ""
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def kill(self, sig=signal.SIGKILL):
        """Kills the daemon (FUSE only) and reaps it; the mount is left dead."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def stop(self, check=True):
        """Unmounts; for FUSE waits for the daemon, which must exit 0 with a clean stderr."""
        how = "umount"
        if is_mounted(self.path):
            r = subprocess.run(["umount", self.path], capture_output=True)
            if r.returncode != 0:
                # busy or dead: detach, then make sure the daemon goes
                how = f"umount failed ({r.stderr.decode().strip()}), then lazy unmount"
                force_unmount(self.path)
        if self.proc is None:
            return
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            threads = _thread_states(self.proc.pid)
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            if check:
                raise AssertionError(f"{self.kind} daemon for '{self.path}' did not exit within 30s after "
                                     f"unmount ({how}); threads: {threads}; stderr: {self.stderr()[-2000:]}")
            return
        proc, self.proc = self.proc, None
        err = self.stderr()
        if check and self.kind == "draftfs":
            bad = [m for m in SANITIZER_MARKERS if m in err]
            assert not bad, f"draftfs stderr has sanitizer reports:\n{err[-4000:]}"
            assert rc == 0 or rc == -signal.SIGKILL, f"draftfs exited with {rc} after unmount:\n{err[-2000:]}"
        del proc


def _thread_states(pid):
    """'tid:state:wchan' of each thread of @pid, for hang reports."""
    out = []
    try:
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                out.append(f"{tid}:{st}:{f.read()}")
    except OSError:
        pass
    return " ".join(out)


class FsEnv:
    """A scratch directory with its mounts; cleanup() unmounts everything."""

    def __init__(self):
        self.base = tempfile.mkdtemp(prefix="draftfs-test-", dir="/tmp")
        self.mounts = []
        self.n = 0

    def dir(self, name):
        p = os.path.join(self.base, name)
        os.makedirs(p, exist_ok=True)
        return p

    def mount(self, kind, lowers, upper=None, work=None, opts=None, name=None, extra_env=None):
        """Mounts an overlay of @kind ("kernel", "draftfs", "fuse-overlayfs"); creates upper/work if None."""
        self.n += 1
        tag = name or f"{kind}{self.n}"
        upper = upper or self.dir(f"{tag}.upper")
        work = work or self.dir(f"{tag}.work")
        if opts is None:
            opts = KERNEL_OPTS if kind == "kernel" else ""
        m = Mount(kind, lowers, upper, work, os.path.join(self.base, f"{tag}.mnt"), opts, extra_env)
        self.mounts.append(m)
        return m.start()

    def mount_impl(self, lowers, **kw):
        if IMPL == "kernel" and "opts" not in kw:
            kw["opts"] = KERNEL_IMPL_OPTS
        return self.mount(IMPL, lowers, **kw)

    def cleanup(self):
        errors = []
        for m in reversed(self.mounts):
            try:
                m.stop()
            except AssertionError as e:
                errors.append(str(e))
            finally:
                force_unmount(m.path)
        for mp, _, _, _ in sorted(mounts_under(self.base), key=lambda m: -len(m[0])):
            force_unmount(mp)
        left = mounts_under(self.base)
        if not left:
            subprocess.run(["rm", "-rf", "--one-file-system", self.base])
        else:
            errors.append(f"mounts left behind: {left}")
        if errors:
            raise AssertionError("; ".join(errors))


def _private_mount_namespace():
    """Moves this process (and the daemons it starts) into a private mount namespace.

    Other programs on the host (bwrap sandboxes of other suites) copy every
    mount that exists when they unshare; a copy of one of our FUSE mounts
    keeps its daemon alive after our umount. In a namespace of our own, our
    mounts are never copied, and they cannot leak onto the host.
    """
    if os.geteuid() != 0 or os.environ.get("DRAFTFS_TEST_SHARED_NS"):
        return
    CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 1 << 18
    if _libc.unshare(CLONE_NEWNS) != 0:
        return
    if _libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"cannot make / private in the test's mount namespace: {os.strerror(e)}")


_private_mount_namespace()


def _on_sigterm(signum, frame):
    # meson's timeout sends SIGTERM: unwind so the fixtures unmount
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _on_sigterm)


@pytest.fixture
def fsenv():
    env = FsEnv()
    try:
        yield env
    finally:
        env.cleanup()


# ---------------------------------------------------------------- layers

def whiteout(path):
    os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))


def make_opaque(path):
    os.setxattr(path, "trusted.overlay.opaque", b"y")


def write_file(path, data, mode=0o644):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def xattr(path, name):
    """Xattr @name of @path, not followed, or None where it has none."""
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError as e:
        if e.errno == errno.ENODATA:
            return None
        raise


def boot_id():
    """This boot's id, as the fill marker of a deferred copy-up holds it (trusted.draftbox.filled)."""
    with open("/proc/sys/kernel/random/boot_id", "rb") as f:
        return f.read().strip()


def make_standard_lowers(base, outside_canary=None):
    """Two lower layers exercising the on-disk format; returns [top, bottom].

    bottom: nested dirs, files of several modes and sizes, symlinks (relative,
    dangling, absolute, `..` chains and, if given, links to @outside_canary),
    hard links across dirs, user xattrs. top: whiteouts, an opaque dir, a dir
    replacing a file and a file replacing a dir, shadowing files.
    """
    lo1 = os.path.join(base, "lower1")
    lo2 = os.path.join(base, "lower2")
    for d in (lo1, lo2):
        os.makedirs(d)
    p = lambda *a: os.path.join(lo1, *a)  # noqa: E731
    for d in ("a", "a/b", "a/b/c", "d", "e", "e/sub", "opq", "opq/deep", "gone", "todir", "empty"):
        os.makedirs(p(d))
    write_file(p("f1"), b"lower one\n")
    write_file(p("ro"), b"read only\n", 0o444)
    write_file(p("exe"), b"#!/bin/sh\necho hi\n", 0o755)
    write_file(p("secret"), b"secret\n", 0o600)
    write_file(p("a/af"), b"x" * 5000)
    write_file(p("a/b/bf"), bytes(range(256)) * 64)
    write_file(p("a/b/c/cf"), b"")
    write_file(p("d/df"), b"dee\n")
    write_file(p("e/ef"), b"eff\n")
    write_file(p("e/sub/sf"), b"sub\n")
    write_file(p("opq/old"), b"hidden by opaque\n")
    write_file(p("opq/deep/old2"), b"hidden too\n")
    write_file(p("gone/g"), b"whited out\n")
    write_file(p("wf"), b"whited out file\n")
    write_file(p("tofile"), b"x")  # replaced by a dir in lower2
    write_file(p("todir/x"), b"x")  # todir replaced by a file in lower2
    write_file(p("big"), os.urandom(1 << 20))
    os.link(p("f1"), p("d/hl_f1"))
    os.link(p("e/ef"), p("a/b/hl_ef"))
    os.symlink("f1", p("sl_f1"))
    os.symlink("../f1", p("a/sl_up"))
    os.symlink("b/c", p("a/sl_dir"))
    os.symlink("nowhere", p("dangling"))
    os.symlink("/etc/passwd", p("abs_etc"))
    os.symlink("../../../../../../../../etc", p("a/b/dotdot_etc"))
    os.symlink("/", p("root_link"))
    os.symlink("sl_loop2", p("sl_loop1"))
    os.symlink("sl_loop1", p("sl_loop2"))
    if outside_canary:
        os.symlink(outside_canary, p("canary_abs"))
        os.symlink(outside_canary, p("a/b/canary_dir"))
        os.symlink(os.path.join(outside_canary, "canary.txt"), p("canary_file"))
    os.setxattr(p("f1"), "user.color", b"blue")
    os.setxattr(p("a"), "user.dirattr", b"1")
    # lower2 on top
    q = lambda *a: os.path.join(lo2, *a)  # noqa: E731
    for d in ("opq", "opq/new", "tofile", "a", "e"):
        os.makedirs(q(d))
    make_opaque(q("opq"))
    write_file(q("opq/fresh"), b"above the opaque\n")
    write_file(q("tofile/inside"), b"inside\n")
    write_file(q("todir"), b"now a file\n")
    whiteout(q("gone"))
    whiteout(q("wf"))
    whiteout(q("e/sub"))
    write_file(q("a/af"), b"shadowed by lower2\n", 0o640)
    write_file(q("a/l2only"), b"lower2 only\n")
    write_file(q("l2f"), b"lower2\n")
    os.symlink("a/l2only", q("sl_l2"))
    return [lo2, lo1]


# ---------------------------------------------------------------- trees

def file_digest(path):
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    h = hashlib.sha256()
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            h.update(b)
    finally:
        os.close(fd)
    return h.hexdigest()[:16]


def user_xattrs(path):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        return ("ERR", errno.errorcode.get(e.errno, e.errno))
    out = {}
    for n in sorted(names):
        if n.startswith("user."):
            out[n] = os.getxattr(path, n, follow_symlinks=False)
    return out


def tree_snapshot(root, mtime=False, ino=False):
    """Maps each path under @root (no symlink followed) to what the kernel defines for it.

    Dirs: mode, owner, user xattrs. Files: also size, nlink, content digest.
    Symlinks: target. Devices: rdev. @mtime adds st_mtime_ns of non-dirs;
    @ino adds st_ino (for callers that track inodes, not for comparing).
    """
    snap = {}

    def walk(rel):
        full = os.path.join(root, rel) if rel else root
        st = os.lstat(full)
        ent = {"mode": oct(st.st_mode), "uid": st.st_uid, "gid": st.st_gid}
        if ino:
            ent["ino"] = st.st_ino
        if stat.S_ISREG(st.st_mode):
            ent.update(size=st.st_size, nlink=st.st_nlink, data=file_digest(full))
        elif stat.S_ISLNK(st.st_mode):
            ent["target"] = os.readlink(full)
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            ent["rdev"] = (os.major(st.st_rdev), os.minor(st.st_rdev))
        if not stat.S_ISLNK(st.st_mode):
            ent["xattrs"] = user_xattrs(full)
        if mtime and not stat.S_ISDIR(st.st_mode):
            ent["mtime"] = st.st_mtime_ns
        snap[rel or "."] = ent
        if stat.S_ISDIR(st.st_mode):
            for name in sorted(os.listdir(full)):
                walk(os.path.join(rel, name) if rel else name)

    walk("")
    return snap


def diff_snapshots(a, b, name_a="a", name_b="b", ignore=None):
    """Returns a list of human-readable differences between two snapshots.

    @ignore(path, key) -> bool skips a field (documented legitimate differences).
    """
    out = []
    for path in sorted(set(a) | set(b)):
        if path not in a:
            out.append(f"{path}: only in {name_b}: {b[path]}")
            continue
        if path not in b:
            out.append(f"{path}: only in {name_a}: {a[path]}")
            continue
        for k in sorted(set(a[path]) | set(b[path])):
            if k == "ino" or (ignore and ignore(path, k)):
                continue
            va, vb = a[path].get(k), b[path].get(k)
            if va != vb:
                out.append(f"{path} ({a[path]['mode']}): {k}: {name_a}={va!r} {name_b}={vb!r}")
    return out


def run_as(uid, gid, argv, **kw):
    """Runs @argv as @uid:@gid with no supplementary groups."""
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"] + argv, **kw)
