# SPDX-License-Identifier: LGPL-2.1-or-later
"""Fixtures for the draftfs control plane tests (diff, commit, discard, ...).

Most tests work OFFLINE: the kernel's overlayfs writes uppers in the same
on-disk format as draftfs (whiteouts, opaque dirs), so a test mounts a
kernel overlay, makes changes through it, unmounts, then runs
`draftfs diff|commit|... --lowerdir --upperdir --workdir`. Where a test needs
what draftfs adds on copy-up (trusted.draftbox.origin), it writes that xattr
itself in the core's format. The merged view is read through a read-only
kernel overlay with upper as the top lower layer. With metacopy=True the
kernel writes metacopy uppers (a chmod or rename of a lower file keeps its
data below) and reads them back; make_metacopy() writes one by hand.
"""
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time

import pytest

from conftest import build_path


def draftfs_bin():
    path = os.environ.get("DRAFTFS_BIN") or build_path("fs", "draftfs")
    if not os.path.exists(path):
        pytest.skip("fs/draftfs is not built yet (the fs core provides main.c)")
    return path


def need_root_overlay():
    if os.geteuid() != 0:
        pytest.skip("needs root (kernel overlayfs mounts, trusted.* xattrs)")


def umount(path):
    if subprocess.run(["umount", path], stderr=subprocess.DEVNULL).returncode != 0:
        subprocess.run(["umount", "-l", path], stderr=subprocess.DEVNULL)


def origin_of(path, layer=0):
    """The trusted.draftbox.origin value the core writes for lower entry @path."""
    st = os.lstat(path)
    return ("v1 layer=%d dev=%d ino=%d size=%d mtime=%d.%09d ctime=%d.%09d mode=%o" % (
        layer, st.st_dev, st.st_ino, st.st_size,
        st.st_mtime_ns // 10**9, st.st_mtime_ns % 10**9,
        st.st_ctime_ns // 10**9, st.st_ctime_ns % 10**9, st.st_mode)).encode()


class Session:
    """A temp dir with lower layers (lower0 = commit target, lower1.. bases), upper, work."""

    def __init__(self, n_lower=1):
        need_root_overlay()
        self.root = tempfile.mkdtemp(prefix="draftfs-ctl-")
        self.lowers = [os.path.join(self.root, "lower%d" % i) for i in range(n_lower)]
        self.upper = os.path.join(self.root, "upper")
        self.work = os.path.join(self.root, "work")
        self.mnt = os.path.join(self.root, "mnt")
        self.view_mnt = os.path.join(self.root, "view")
        for d in self.lowers + [self.upper, self.work, self.mnt, self.view_mnt]:
            os.makedirs(d)
        self.mounted = []

    @property
    def lower(self):
        return self.lowers[0]

    def close(self):
        for m in reversed(self.mounted):
            umount(m)
        self.mounted = []
        # a commit's background trash purge may still be deleting in there
        for _ in range(50):
            shutil.rmtree(self.root, ignore_errors=True)
            if not os.path.exists(self.root):
                break
            time.sleep(0.1)

    # --- writing an upper through the kernel ---
    def mount_rw(self, metacopy=False):
        opts = "lowerdir=%s,upperdir=%s,workdir=%s" % (":".join(self.lowers), self.upper, self.work)
        if metacopy:
            opts += METACOPY_OPTS
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, self.mnt], check=True)
        self.mounted.append(self.mnt)
        return self.mnt

    def umount_rw(self):
        umount(self.mnt)
        self.mounted.remove(self.mnt)

    def change(self, fn, metacopy=False):
        """Runs fn(mountpoint) on a kernel overlay of the layers, then unmounts."""
        m = self.mount_rw(metacopy)
        try:
            fn(m)
        finally:
            self.umount_rw()

    def set_origins(self):
        """Writes trusted.draftbox.origin on every upper entry that shadows a lower one, as draftfs would."""
        for dirpath, dirs, files in os.walk(self.upper):
            for name in dirs + files:
                up = os.path.join(dirpath, name)
                rel = os.path.relpath(up, self.upper)
                for i, low in enumerate(self.lowers):
                    lp = os.path.join(low, rel)
                    if os.path.lexists(lp):
                        os.setxattr(up, "trusted.draftbox.origin", origin_of(lp, i), follow_symlinks=False)
                        break

    # --- reading the merged view ---
    def view(self, metacopy=False):
        """Snapshot of the merged view (read-only overlay, upper on top)."""
        opts = "ro,lowerdir=%s" % ":".join([self.upper] + self.lowers)
        if metacopy:
            opts += METACOPY_OPTS
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, self.view_mnt], check=True)
        self.mounted.append(self.view_mnt)
        try:
            return snapshot(self.view_mnt)
        finally:
            umount(self.view_mnt)
            self.mounted.remove(self.view_mnt)

    def lower_view(self):
        """Snapshot of the lower view (all lower layers merged, no upper)."""
        if len(self.lowers) == 1:
            return snapshot(self.lower)
        opts = "ro,lowerdir=%s" % ":".join(self.lowers)
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, self.view_mnt], check=True)
        self.mounted.append(self.view_mnt)
        try:
            return snapshot(self.view_mnt)
        finally:
            umount(self.view_mnt)
            self.mounted.remove(self.view_mnt)

    # --- running draftfs ---
    def args(self):
        return ["--lowerdir", ":".join(self.lowers), "--upperdir", self.upper, "--workdir", self.work]

    def run(self, verb, *extra, env=None, check=True, binary=False):
        e = dict(os.environ)
        if env:
            e.update(env)
        p = subprocess.run([draftfs_bin(), verb] + self.args() + list(extra), capture_output=True, env=e,
                           timeout=120)
        if check and p.returncode != 0:
            raise AssertionError("draftfs %s failed (%d): %s" % (verb, p.returncode, p.stderr.decode(errors="replace")))
        if not binary:
            p.stdout = p.stdout.decode(errors="surrogateescape")
        p.stderr = p.stderr.decode(errors="replace")
        return p

    def diff_json(self, *paths):
        return json.loads(self.run("diff", "--format", "json", *paths).stdout)

    def changes(self, *paths):
        return {c["path"]: c for c in self.diff_json(*paths)["changes"]}


# the kernel's metacopy format: needs redirects (implied) and no index
METACOPY_OPTS = ",metacopy=on,index=off"


def make_metacopy(upper_file, data_file, redirect=None, mode=None):
    """Writes @upper_file as the kernel would: a sparse file of @data_file's size, its
    owner, mode and times (mode overridden by @mode), trusted.overlay.metacopy and, when
    given, trusted.overlay.redirect (absolute "/dir/file" or one name)."""
    st = os.lstat(data_file)
    os.makedirs(os.path.dirname(upper_file), exist_ok=True)
    with open(upper_file, "wb") as f:
        f.truncate(st.st_size)
    os.chown(upper_file, st.st_uid, st.st_gid)
    os.chmod(upper_file, stat.S_IMODE(st.st_mode) if mode is None else mode)
    os.utime(upper_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.setxattr(upper_file, "trusted.overlay.metacopy", b"")
    if redirect is not None:
        os.setxattr(upper_file, "trusted.overlay.redirect", redirect.encode())


def is_metacopy(path):
    try:
        os.getxattr(path, "trusted.overlay.metacopy", follow_symlinks=False)
        return True
    except OSError:
        return False


@pytest.fixture
def session():
    s = Session()
    yield s
    s.close()


@pytest.fixture
def session2():
    s = Session(n_lower=2)
    yield s
    s.close()


# --- the committer's fault points (DRAFTFS_FAULT, fs/ctl-util.c) ---
def fault_steps(p):
    """The fault points, by name in order, that a run with DRAFTFS_FAULT=count went through."""
    return [line.split()[3] for line in p.stderr.splitlines() if line.startswith("draftfs-fault: step")]


def steps_of(make, *args, verb="commit"):
    """The fault points, by name, that 'draftfs VERB ARGS' goes through on a session made by make()."""
    s = make()
    try:
        return fault_steps(s.run(verb, *args, env={"DRAFTFS_FAULT": "count"}))
    finally:
        s.close()


def kill_at(s, n, *args, verb="commit"):
    """Runs 'draftfs VERB ARGS' on @s, killed at its n-th fault point."""
    p = s.run(verb, *args, env={"DRAFTFS_FAULT": "exit:%d" % n}, check=False)
    assert p.returncode == 99, (verb, n, p.returncode, p.stderr)


def commit_paused_at(s, n, ready, what, *args):
    """Starts 'draftfs commit ARGS' on @s pausing 1.5 s at its n-th fault point; returns the process once
    ready() holds and the pause has run 0.2 s (inside it). @what names the point for the error."""
    env = dict(os.environ, DRAFTFS_FAULT="pause:%d:1500" % n)
    p = subprocess.Popen([draftfs_bin(), "commit"] + s.args() + list(args), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    deadline = time.time() + 10
    while not ready():
        assert time.time() < deadline and p.poll() is None, "the commit never reached %s" % what
        time.sleep(0.01)
    time.sleep(0.2)
    return p


def write_files(root, files, mode=None):
    """Writes each relative path -> bytes of @files below @root (parents must exist), chmod @mode if given."""
    for k, v in files.items():
        with open(os.path.join(root, k), "wb") as f:
            f.write(v)
        if mode is not None:
            os.chmod(os.path.join(root, k), mode)


def snapshot(root, with_owner=False):
    """path -> (kind, perm bits, content or target[, uid, gid]) of everything below root."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                v = ("dir", stat.S_IMODE(st.st_mode), None)
            elif stat.S_ISLNK(st.st_mode):
                v = ("symlink", 0, os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    v = ("file", stat.S_IMODE(st.st_mode), f.read())
            else:
                v = ("other", stat.S_IMODE(st.st_mode), st.st_rdev)
            if with_owner:
                v = v + (st.st_uid, st.st_gid)
            out[rel] = v
    return out


def files_only(snap, git_modes=False):
    """Drops directories (git has none) and maps modes to what git keeps (0644/0755)."""
    out = {}
    for k, v in snap.items():
        if v[0] == "dir":
            continue
        if git_modes and v[0] == "file":
            v = (v[0], 0o755 if v[1] & 0o100 else 0o644, v[2])
        out[k] = v
    return out


def oci_apply(tar_path, dest):
    """Applies an OCI image layer to dest following the image-spec rules."""
    with tarfile.open(tar_path) as t:
        members = t.getmembers()
        # whiteouts first apply to lower content only: process in order, but a
        # whiteout never removes what this layer itself added.
        added = set()
        for m in members:
            name = m.name.rstrip("/")
            if name.startswith("./"):
                name = name[2:]
            d, base = os.path.split(name)
            target_dir = os.path.join(dest, d)
            if base == ".wh..wh..opq":
                if os.path.isdir(target_dir):
                    for e in os.listdir(target_dir):
                        if os.path.join(d, e) not in added:
                            p = os.path.join(target_dir, e)
                            if os.path.isdir(p) and not os.path.islink(p):
                                shutil.rmtree(p)
                            else:
                                os.unlink(p)
                continue
            if base.startswith(".wh."):
                victim = os.path.join(target_dir, base[4:])
                assert os.path.join(d, base[4:]) not in added, "whiteout after an entry of the same layer"
                if os.path.isdir(victim) and not os.path.islink(victim):
                    shutil.rmtree(victim)
                elif os.path.lexists(victim):
                    os.unlink(victim)
                continue
            os.makedirs(target_dir, exist_ok=True)
            p = os.path.join(dest, name)
            if os.path.lexists(p) and not (m.isdir() and os.path.isdir(p) and not os.path.islink(p)):
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)
            if m.isdir():
                os.makedirs(p, exist_ok=True)
                os.chmod(p, m.mode)
            elif m.issym():
                os.symlink(m.linkname, p)
            elif m.isfile():
                with open(p, "wb") as f:
                    f.write(t.extractfile(m).read())
                os.chmod(p, m.mode)
            else:
                raise AssertionError("unexpected member type %r" % m.name)
            added.add(name)
