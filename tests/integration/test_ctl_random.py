# SPDX-License-Identifier: LGPL-2.1-or-later
"""Randomized differential test of the control plane: random edits through a
kernel overlay (same upper format as draftfs), then for each seed:
the OCI tar applied to a copy of lower, `git apply` of the patch on a copy
of lower, and a commit into lower must each reproduce the view; after the
commit the view is unchanged and nothing is left to diff. Each also runs
with the kernel's metacopy=on: chmods and moves of files then leave
metacopies (their data stays below)."""
import os
import random
import shutil
import subprocess

import pytest

from ctlutil import Session, files_only, oci_apply, snapshot

NAMES = ["a", "b", "c", "d.txt", "e e", "f-1"]


def rand_tree(rng, root, depth=0):
    for n in rng.sample(NAMES, rng.randint(2, 5)):
        p = os.path.join(root, n)
        r = rng.random()
        if r < 0.3 and depth < 3:
            os.mkdir(p)
            rand_tree(rng, p, depth + 1)
        elif r < 0.4:
            os.symlink(rng.choice(NAMES), p)
        else:
            with open(p, "wb") as f:
                f.write(rng.randbytes(rng.choice([0, 5, 100, 5000])) if rng.random() < 0.3
                        else ("line %d\n" % rng.randint(0, 9)).encode() * rng.randint(1, 5))
            os.chmod(p, rng.choice([0o644, 0o755, 0o600]))


def all_paths(root):
    out = []
    for dp, dirs, files in os.walk(root):
        for n in dirs + files:
            out.append(os.path.join(dp, n))
    return out


def random_edits(rng, m, n_ops, metacopy=False):
    """@metacopy: more chmods and moves (they make metacopies), and a dir is moved by copy
    + delete (the kernel would write a directory redirect, which the control plane does
    not read)."""
    ops = ["new", "append", "rewrite", "chmod", "mkdir", "rmtree", "unlink", "move", "symlink", "file2dir",
           "dir2file", "same"]
    if metacopy:
        ops += ["chmod", "move", "move"]
    for _ in range(n_ops):
        paths = all_paths(m)
        dirs = [m] + [p for p in paths if os.path.isdir(p) and not os.path.islink(p)]
        files = [p for p in paths if os.path.isfile(p) and not os.path.islink(p)]
        op = rng.choice(ops)
        try:
            if op == "new":
                with open(os.path.join(rng.choice(dirs), rng.choice(NAMES) + "n"), "w") as f:
                    f.write("new %d\n" % rng.randint(0, 99))
            elif op == "append" and files:
                with open(rng.choice(files), "a") as f:
                    f.write("more\n")
            elif op == "rewrite" and files:
                with open(rng.choice(files), "wb") as f:
                    f.write(rng.randbytes(rng.randint(0, 300)))
            elif op == "chmod" and files:
                os.chmod(rng.choice(files), rng.choice([0o600, 0o644, 0o755]))
            elif op == "mkdir":
                os.makedirs(os.path.join(rng.choice(dirs), rng.choice(NAMES) + "d", "x"), exist_ok=True)
            elif op == "rmtree" and len(dirs) > 1:
                shutil.rmtree(rng.choice(dirs[1:]))
            elif op == "unlink" and paths:
                p = rng.choice(paths)
                if not os.path.isdir(p) or os.path.islink(p):
                    os.unlink(p)
            elif op == "move" and paths:
                src = rng.choice(paths)
                dst = os.path.join(rng.choice(dirs), rng.choice(NAMES) + "m")
                if os.path.lexists(dst) or dst.startswith(src + "/"):
                    pass
                elif metacopy and os.path.isdir(src) and not os.path.islink(src):
                    shutil.copytree(src, dst, symlinks=True)
                    shutil.rmtree(src)
                else:
                    shutil.move(src, dst)
            elif op == "symlink":
                p = os.path.join(rng.choice(dirs), rng.choice(NAMES) + "l")
                if not os.path.lexists(p):
                    os.symlink(rng.choice(NAMES), p)
            elif op == "file2dir" and files:
                p = rng.choice(files)
                os.unlink(p)
                os.makedirs(os.path.join(p, "inside"))
            elif op == "dir2file" and len(dirs) > 1:
                p = rng.choice(dirs[1:])
                shutil.rmtree(p)
                with open(p, "w") as f:
                    f.write("was a dir\n")
            elif op == "same" and files:
                # copy-up without a change
                p = rng.choice(files)
                st = os.stat(p)
                os.utime(p)
                os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        except OSError:
            pass


@pytest.mark.parametrize("metacopy", [False, True], ids=["full", "metacopy"])
@pytest.mark.parametrize("seed", range(int(os.environ.get("CTL_RANDOM_SEEDS", "6"))))
def test_random_session(seed, metacopy):
    rng = random.Random(seed)
    s = Session(n_lower=1 + seed % 2)
    try:
        for low in s.lowers:
            rand_tree(rng, low)
        s.change(lambda m: random_edits(rng, m, 25, metacopy), metacopy=metacopy)
        want = s.view(metacopy)

        # OCI layer tar
        tf = os.path.join(s.root, "layer.tar")
        with open(tf, "wb") as f:
            f.write(s.run("diff", "--format", "tar", binary=True).stdout)
        merged_lower = os.path.join(s.root, "merged-lower")
        # the tar applies to the lower *view*: with base layers, flatten them first
        if len(s.lowers) == 1:
            shutil.copytree(s.lower, merged_lower, symlinks=True)
        else:
            lv = os.path.join(s.root, "lowerview")
            os.makedirs(lv)
            subprocess.run(["mount", "-t", "overlay", "overlay", "-o", "ro,lowerdir=%s" % ":".join(s.lowers), lv],
                           check=True)
            try:
                shutil.copytree(lv, merged_lower, symlinks=True)
            finally:
                subprocess.run(["umount", lv], check=True)
        applied = os.path.join(s.root, "tar-applied")
        shutil.copytree(merged_lower, applied, symlinks=True)
        oci_apply(tf, applied)
        assert snapshot(applied) == want, "tar, seed %d" % seed

        # git patch
        pf = os.path.join(s.root, "p.diff")
        with open(pf, "wb") as f:
            f.write(s.run("diff", "--format", "patch", binary=True).stdout)
        gitdir = os.path.join(s.root, "git-applied")
        shutil.copytree(merged_lower, gitdir, symlinks=True)
        r = subprocess.run(["git", "apply", "--binary", pf], cwd=gitdir, capture_output=True)
        assert r.returncode == 0, r.stderr
        assert files_only(snapshot(gitdir), git_modes=True) == files_only(want, git_modes=True), "patch %d" % seed

        # commit
        s.run("commit")
        assert s.view(metacopy) == want, "view changed by the commit, seed %d" % seed
        left = s.changes()
        if len(s.lowers) == 1:
            assert left == {}
            assert snapshot(s.lower) == want
            assert os.listdir(s.upper) == []
        else:
            # only deletions of names a base layer still has may remain
            assert all(c["status"] == "deleted" and c.get("old") for c in left.values()), left
    finally:
        s.close()


@pytest.mark.parametrize("metacopy", [False, True], ids=["full", "metacopy"])
@pytest.mark.parametrize("seed", range(100, 100 + int(os.environ.get("CTL_RANDOM_SEEDS", "6"))))
def test_random_selected_commits_and_crashes(seed, metacopy):
    """Commits of random selections keep the view; a commit killed at a random
    step is finished by recover (odd seeds); discarding a random path makes
    the view there the lower one (even seeds)."""
    rng = random.Random(seed)
    s = Session(n_lower=1 + (seed // 2) % 2)
    try:
        for low in s.lowers:
            rand_tree(rng, low)
        s.change(lambda m: random_edits(rng, m, 30, metacopy), metacopy=metacopy)
        want = s.view(metacopy)
        lower0 = s.lower_view()
        changes = sorted(s.changes())
        if not changes:
            return
        if seed % 2 == 0:
            victim = rng.choice(changes)
            p = s.run("discard", victim, check=False)
            assert p.returncode in (0, 2), p.stderr
            if p.returncode == 2:
                assert "instead" in p.stderr
                return
            view = s.view(metacopy)
            for k in set(view) | set(lower0) | set(want):
                if k == victim or k.startswith(victim + "/"):
                    assert view.get(k) == lower0.get(k), (seed, victim, k)
                elif victim.startswith(k + "/"):
                    # an ancestor deleted in the session comes back with the victim (inside an opaque dir)
                    assert view.get(k) in (want.get(k), lower0.get(k)), (seed, victim, k)
                else:
                    assert view.get(k) == want.get(k), (seed, victim, k)
            assert victim not in s.changes()
            return
        sel = rng.sample(changes, max(1, len(changes) // 3))
        p = s.run("commit", *sel, check=False)
        assert p.returncode in (0, 2), p.stderr
        assert s.view(metacopy) == want, "selected commit changed the view, seed %d" % seed
        assert s.run("commit", "--dry-run", env={"DRAFTFS_FAULT": "count"}).stderr.count("draftfs-fault") == 0
        n = rng.randint(1, 40)
        p = s.run("commit", env={"DRAFTFS_FAULT": "exit:%d" % n}, check=False)
        assert p.returncode in (0, 99), p.stderr
        s.run("recover")
        assert s.view(metacopy) == want, "seed %d step %d" % (seed, n)
        if len(s.lowers) == 1:
            assert snapshot(s.lower) == want
            assert s.changes() == {}
        else:
            assert all(c["status"] == "deleted" for c in s.changes().values())
    finally:
        s.close()
