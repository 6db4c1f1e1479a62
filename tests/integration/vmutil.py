# SPDX-License-Identifier: LGPL-2.1-or-later
"""Boots a throwaway VM to run our binaries on what this machine is not:
Debian 12's own kernel (6.1) and a pure cgroup v2 hierarchy.

The VM is qemu with Debian's kernel (vmlinuz and the modules the VM needs,
extracted from the linux-image package by `./dev deps` into .cache/vm/; or
$DRAFTBOX_VM_KERNEL, with modules in a `modules` dir beside it) and an
initramfs built here: static busybox, the built binaries with the
shared libraries ldd names, bubblewrap, vm-init.sh as /init and a list of
cases. qemu emulates the CPU (TCG; $DRAFTBOX_VM_ACCEL=kvm to use KVM).
The VM's serial console carries the results (vm-init.sh's markers).
"""
import base64
import glob
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile

from conftest import HERE

CHECKOUT = os.path.normpath(os.path.join(HERE, "..", ".."))
QEMU = shutil.which("qemu-system-x86_64")
BUSYBOX = "/bin/busybox"


def find_kernel():
    """The kernel image to boot, or None."""
    env = os.environ.get("DRAFTBOX_VM_KERNEL")
    if env:
        return env if os.path.isfile(env) else None
    found = sorted(glob.glob(os.path.join(CHECKOUT, ".cache", "vm", "vmlinuz-*")))
    return found[-1] if found else None


def modules():
    """The kernel modules the VM loads at boot, in that order ("NN-name.ko")."""
    return sorted(glob.glob(os.path.join(os.path.dirname(find_kernel()), "modules", "*.ko")))


def missing(need_modules=()):
    """Why no VM can be booted here (a skip reason), or None."""
    if os.uname().machine != "x86_64":
        return "the VM tests boot an x86_64 kernel"
    if not QEMU:
        return "qemu-system-x86_64 is not installed (./dev deps installs qemu-system-x86)"
    if not find_kernel():
        return "no kernel image for the VM in .cache/vm/ (./dev deps extracts Debian's linux-image)"
    have = {re.sub(r"^\d+-", "", os.path.basename(m)) for m in modules()}
    for m in need_modules:
        if f"{m}.ko" not in have:
            return f"no {m}.ko beside the VM's kernel (./dev deps extracts it)"
    if not os.access(BUSYBOX, os.X_OK) or subprocess.run(
            ["ldd", BUSYBOX], capture_output=True).returncode == 0:
        return "a static busybox is not installed (./dev deps installs busybox-static)"
    return None


def elf_deps(path):
    """The shared objects @path loads (the dynamic loader included), as ldd resolves them."""
    p = subprocess.run(["ldd", path], capture_output=True, text=True)
    if p.returncode != 0:  # "not a dynamic executable"
        return []
    deps = []
    for line in p.stdout.splitlines():
        m = re.search(r"=> (/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            deps.append(m.group(1))
        elif "not found" in line:
            raise RuntimeError(f"ldd {path}: {line.strip()}")
    return deps


class Cpio:
    """A newc archive, as the kernel unpacks an initramfs."""

    def __init__(self):
        self.buf = io.BytesIO()
        self.ino = 1
        self.names = set()

    def _entry(self, name, mode, data=b"", mtime=0):
        name = name.lstrip("/")
        if name in self.names:
            return
        self.names.add(name)
        nb = name.encode() + b"\0"
        hdr = "070701" + "".join(f"{v:08x}" for v in (
            self.ino, mode, 0, 0, 1, int(mtime), len(data), 0, 0, 0, 0, len(nb), 0))
        self.ino += 1
        self.buf.write(hdr.encode() + nb)
        self.buf.write(b"\0" * (-(110 + len(nb)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def dirs(self, path):
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self._entry("/".join(parts[:i]), stat.S_IFDIR | 0o755)

    def file(self, dest, data, mode=0o755, mtime=0):
        self.dirs(dest)
        self._entry(dest, stat.S_IFREG | mode, data, mtime)

    def copy(self, src, dest=None):
        """Copies @src (symlinks followed) to @dest, with every library it loads at its own path."""
        dest = dest or src
        st = os.stat(src)
        with open(src, "rb") as f:
            self.file(dest, f.read(), stat.S_IMODE(st.st_mode), st.st_mtime)
        if dest.endswith(".so") or ".so." in dest or st.st_mode & 0o111:
            for dep in elf_deps(src):
                if dep.lstrip("/") not in self.names:
                    self.copy(dep)

    def tree(self, src, skip=()):
        """Copies the files below @src to the same paths (mtimes kept: Python's .pyc files check them)."""
        for root, dirs, files in os.walk(src):
            dirs[:] = sorted(d for d in dirs if d not in skip)
            for f in sorted(files):
                self.copy(os.path.join(root, f))

    def finish(self):
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


PY_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
           "config-3.11-x86_64-linux-gnu", "site-packages"}
PYTEST_PKGS = ("_pytest", "pytest", "pluggy", "iniconfig", "packaging", "attr", "attrs", "py.py")


def python_payload():
    """({path: path}, [dirs]) of Debian's python3 and pytest for the VM, or None without them."""
    exe = os.path.realpath("/usr/bin/python3")
    lib = "/usr/lib/" + os.path.basename(exe)
    dist = "/usr/lib/python3/dist-packages"
    if not os.path.isdir(lib) or not os.path.isdir(os.path.join(dist, "_pytest")):
        return None
    files, trees = {exe: exe, "/usr/bin/python3": exe}, [lib]
    for p in PYTEST_PKGS:
        path = os.path.join(dist, p)
        if os.path.isdir(path):
            trees.append(path)
        elif os.path.exists(path):
            files[path] = path
    return files, trees


def build_initramfs(binaries, cases, trees=()):
    """@binaries: {path in the VM: path here}; @cases: [(name, shell command)]; @trees: dirs copied whole."""
    c = Cpio()
    c.copy(BUSYBOX, "/bin/busybox")
    # glibc loads it at run time for pthread_cancel (libfuse's loop), so ldd does not list it
    for lib in glob.glob("/lib/*-linux-gnu/libgcc_s.so.1")[:1]:
        c.copy(lib)
    with open(os.path.join(HERE, "vm-init.sh"), "rb") as f:
        c.file("/init", f.read())
    for dest, src in binaries.items():
        c.copy(src, dest)
    for t in trees:
        c.tree(t, PY_SKIP)
    for m in modules():
        c.copy(m, f"/modules/{os.path.basename(m)}")
    c.file("/cases", "".join(f"{n}\t{cmd}\n" for n, cmd in cases).encode(), 0o644)
    c.file("/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
    c.file("/etc/hostname", b"draftbox-vm\n", 0o644)
    c.file("/etc/group", b"root:x:0:\n", 0o644)
    for d in ("proc", "sys", "dev", "tmp", "run", "root"):
        c._entry(d, stat.S_IFDIR | 0o755)
    return c.finish()


class CaseResult:
    def __init__(self, name):
        self.name = name
        self.rc = None
        self.json = None
        self.seconds = None
        self.stdout = b""
        self.stderr = b""

    def __repr__(self):
        return (f"<{self.name} rc={self.rc} json={self.json} stdout={self.stdout!r} "
                f"stderr={self.stderr!r}>")


def parse_console(text):
    """Returns ({name: CaseResult}, {key: value} of the header lines) from the console."""
    results, info, cur = {}, {}, None
    for line in text.splitlines():
        line = line.rstrip("\r")
        m = re.search(r"DBXVM-(\w+) ?(.*)$", line)  # the first line follows the BIOS's escapes
        if not m:
            continue
        key, val = m.group(1), m.group(2)
        if key == "BEGIN":
            cur = results[val] = CaseResult(val)
        elif key == "END":
            cur = None
        elif cur is None:
            info[key] = val
        elif key == "RC":
            cur.rc = int(val)
        elif key == "SECONDS":
            a, b = val.split()
            cur.seconds = float(b) - float(a)
        elif key == "JSON":
            cur.json = json.loads(val) if val.strip() else None
        elif key == "STDOUT":
            cur.stdout = base64.b64decode(val)
        elif key == "STDERR":
            cur.stderr = base64.b64decode(val)
    return results, info


def boot(binaries, cases, timeout=600, memory_mib=1536, trees=()):
    """Boots the VM with @cases and checks it ran them all; returns (results, info)."""
    initrd = build_initramfs(binaries, cases, trees)
    with tempfile.TemporaryDirectory(prefix="dbx-vm-") as tmp:
        path = os.path.join(tmp, "initrd.cpio")
        with open(path, "wb") as f:
            f.write(initrd)
        # TCG unless asked: a /dev/kvm that opens may still not run a guest (nested, as on
        # this project's CI machines, where a KVM guest hangs in its BIOS)
        accel = ["-accel", os.environ.get("DRAFTBOX_VM_ACCEL", "tcg")]
        cmd = [QEMU, *accel, "-m", str(memory_mib), "-smp", "2", "-nographic", "-no-reboot",
               "-nodefaults", "-serial", "stdio", "-kernel", find_kernel(), "-initrd", path,
               "-append", "console=ttyS0 panic=-1 oops=panic quiet loglevel=3 rdinit=/init"]
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    text = p.stdout.decode(errors="replace")
    results, info = parse_console(text)
    assert "DONE" in info, f"the VM did not finish its cases:\n{text[-4000:]}"
    info["accel"] = accel[1]
    return results, info
