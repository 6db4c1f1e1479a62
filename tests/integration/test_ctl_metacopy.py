# SPDX-License-Identifier: LGPL-2.1-or-later
"""The control plane on metacopy uppers (kernel overlayfs's metacopy=on
format, which draftfs writes too): an upper file with
trusted.overlay.metacopy holds only metadata, its data is a lower file (its
own path, or trusted.overlay.redirect). Diff, patch, tar, commit (full,
partial, killed and recovered) and discard must all see the data, never
the sparse upper file. Uppers are written by the kernel (mount -o
metacopy=on) or by hand (make_metacopy), the workspace is read directly."""
import json
import os
import shutil
import stat
import subprocess
import tarfile

import pytest

from ctlutil import (Session, fault_steps, files_only, is_metacopy, kill_at, make_metacopy, oci_apply,  # noqa: F401
                     session, session2, snapshot, steps_of, write_files)

BIG = bytes(range(256)) * 64 + b"tail\n"  # 16 KiB + 5: no zeros a sparse file could pass for


def populate(low):
    os.makedirs(os.path.join(low, "dir"))
    files = {
        "chmod.txt": b"chmod me\n",
        "moved.bin": BIG,
        "same.txt": b"renamed within its dir\n",
        "dir/deep.txt": b"from a subdirectory\n",
        "keep.txt": b"not touched\n",
    }
    write_files(low, files, 0o644)


def edit(m):
    os.chmod(os.path.join(m, "chmod.txt"), 0o755)
    os.rename(os.path.join(m, "moved.bin"), os.path.join(m, "dir/moved.bin"))  # absolute redirect
    os.rename(os.path.join(m, "same.txt"), os.path.join(m, "same2.txt"))  # relative redirect
    os.rename(os.path.join(m, "dir/deep.txt"), os.path.join(m, "up.txt"))


def fresh(edit_fn=edit):
    s = Session()
    populate(s.lower)
    s.change(edit_fn, metacopy=True)
    return s


def up(s, p):
    return os.path.join(s.upper, p)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_kernel_wrote_metacopies(session):
    """The premise of this file: these uppers hold no data."""
    populate(session.lower)
    session.change(edit, metacopy=True)
    for p in ["chmod.txt", "dir/moved.bin", "same2.txt", "up.txt"]:
        assert is_metacopy(up(session, p)), p
    assert os.getxattr(up(session, "same2.txt"), "trusted.overlay.redirect") == b"same.txt"
    assert os.getxattr(up(session, "dir/moved.bin"), "trusted.overlay.redirect") == b"/moved.bin"
    assert read(up(session, "dir/moved.bin")) == b"\0" * len(BIG)
    assert session.view(metacopy=True)["dir/moved.bin"] == ("file", 0o644, BIG)


def test_diff_json(session):
    populate(session.lower)
    session.change(edit, metacopy=True)
    doc = session.diff_json()
    ch = {c["path"]: c for c in doc["changes"]}
    # chmod only: the data is the very lower file, nothing differs but the mode
    c = ch["chmod.txt"]
    assert c["status"] == "modified" and c["content"] is False and c["metadata"] is True
    assert c["old"]["mode"] & 0o777 == 0o644 and c["new"]["mode"] & 0o777 == 0o755
    assert c["new"]["size"] == c["old"]["size"] == 9
    # renames: the new name is an added file with the data's size, the old one deleted
    for new, old, size in [("dir/moved.bin", "moved.bin", len(BIG)), ("same2.txt", "same.txt", 23),
                           ("up.txt", "dir/deep.txt", 20)]:
        assert ch[new]["status"] == "added" and ch[new]["content"] and ch[new]["new"]["size"] == size, new
        assert ch[old]["status"] == "deleted", old
    assert "keep.txt" not in ch
    s = doc["summary"]
    assert s["metadata_only"] == 1 and s["added"] == 3 and s["deleted"] == 3
    assert s["bytes_added"] == len(BIG) + 23 + 20


def test_diff_metacopy_of_another_file_compares_bytes(session):
    """A hand-made metacopy at a path that exists below, with its data elsewhere: modified,
    and the content compared with the data file, not the zeros of the upper file."""
    populate(session.lower)
    with open(os.path.join(session.lower, "twin.txt"), "wb") as f:
        f.write(b"chmod me\n")  # same bytes as chmod.txt
    with open(os.path.join(session.lower, "other.txt"), "wb") as f:
        f.write(b"Chmod me\n")  # same size, other bytes
    mtime = os.stat(os.path.join(session.lower, "chmod.txt")).st_mtime_ns
    for n in ["twin.txt", "other.txt"]:
        os.utime(os.path.join(session.lower, n), ns=(mtime, mtime))
    make_metacopy(up(session, "twin.txt"), os.path.join(session.lower, "chmod.txt"), redirect="/chmod.txt")
    make_metacopy(up(session, "other.txt"), os.path.join(session.lower, "chmod.txt"), redirect="/chmod.txt")
    ch = session.changes()
    assert "twin.txt" not in ch  # same bytes, same mode and mtime: no change
    assert ch["other.txt"]["status"] == "modified" and ch["other.txt"]["content"]
    assert not ch["other.txt"]["metadata"]


def test_patch(session):
    populate(session.lower)
    session.change(edit, metacopy=True)
    patch = session.run("diff", "--format", "patch", "chmod.txt", binary=True).stdout
    assert b"old mode 100644\nnew mode 100755" in patch
    assert b"@@" not in patch and b"Binary" not in patch  # a mode change only, no hunk
    patch = session.run("diff", "--format", "patch", "same2.txt", "up.txt", binary=True).stdout
    assert b"+renamed within its dir" in patch and b"+from a subdirectory" in patch
    # the whole patch reproduces the view with git apply
    patch = session.run("diff", "--format", "patch", binary=True).stdout
    work = os.path.join(session.root, "applied")
    shutil.copytree(session.lower, work)
    pf = os.path.join(session.root, "p.diff")
    with open(pf, "wb") as f:
        f.write(patch)
    r = subprocess.run(["git", "apply", "--binary", pf], cwd=work, capture_output=True)
    assert r.returncode == 0, r.stderr
    assert files_only(snapshot(work), git_modes=True) == files_only(session.view(metacopy=True), git_modes=True)


def test_tar(session):
    populate(session.lower)
    session.change(edit, metacopy=True)
    tp = os.path.join(session.root, "layer.tar")
    with open(tp, "wb") as f:
        f.write(session.run("diff", "--format", "tar", binary=True).stdout)
    with tarfile.open(tp) as t:
        members = {m.name: m for m in t.getmembers()}
        assert t.extractfile(members["dir/moved.bin"]).read() == BIG
        assert t.extractfile(members["chmod.txt"]).read() == b"chmod me\n"
        assert members["chmod.txt"].mode == 0o755
        for m in members.values():
            assert not any(k.startswith("SCHILY.xattr.trusted.") for k in m.pax_headers), (m.name, m.pax_headers)
    assert b"trusted.overlay" not in read(tp)
    dest = os.path.join(session.root, "dest")
    shutil.copytree(session.lower, dest)
    oci_apply(tp, dest)
    assert snapshot(dest) == session.view(metacopy=True)


def test_commit_all(session):
    populate(session.lower)
    session.change(edit, metacopy=True)
    want = session.view(metacopy=True)
    session.run("commit")
    got = snapshot(session.lower)  # the workspace itself, not a mount
    assert got == want
    assert got["dir/moved.bin"] == ("file", 0o644, BIG)
    assert got["chmod.txt"] == ("file", 0o755, b"chmod me\n")
    assert "moved.bin" not in got and "same.txt" not in got and "dir/deep.txt" not in got
    assert os.listdir(session.upper) == []
    assert session.changes() == {}


def test_commit_renamed_only(session):
    """mv moved.bin dir/moved.bin, commit only the new name: the old one stays deleted in the session."""
    populate(session.lower)
    session.change(edit, metacopy=True)
    want = session.view(metacopy=True)
    res = json.loads(session.run("commit", "dir/moved.bin").stdout)
    assert res["committed"] == ["dir/moved.bin"] and res["materialized"] == []
    assert read(os.path.join(session.lower, "dir/moved.bin")) == BIG
    assert read(os.path.join(session.lower, "moved.bin")) == BIG  # not selected: still there
    assert not os.path.lexists(up(session, "dir/moved.bin"))
    assert session.view(metacopy=True) == want
    assert session.changes("moved.bin")["moved.bin"]["status"] == "deleted"


def test_partial_commit_of_the_old_name_keeps_the_new_one(session):
    """mv moved.bin dir/moved.bin, then commit only moved.bin (its deletion): the kept
    metacopy would lose its data, so it gets a copy first and keeps showing BIG."""
    populate(session.lower)
    session.change(edit, metacopy=True)
    want = session.view(metacopy=True)
    res = json.loads(session.run("commit", "moved.bin").stdout)
    assert res["committed"] == ["moved.bin"]
    assert res["materialized"] == ["dir/moved.bin"]
    assert not os.path.lexists(os.path.join(session.lower, "moved.bin"))
    u = up(session, "dir/moved.bin")
    assert not is_metacopy(u) and read(u) == BIG
    with pytest.raises(OSError):
        os.getxattr(u, "trusted.overlay.redirect")
    assert stat.S_IMODE(os.stat(u).st_mode) == 0o644
    assert session.view(metacopy=True) == want
    c = session.changes()["dir/moved.bin"]
    assert c["status"] == "added" and c["new"]["size"] == len(BIG)
    # the other metacopies did not depend on moved.bin: left alone
    assert is_metacopy(up(session, "same2.txt")) and is_metacopy(up(session, "chmod.txt"))
    session.run("commit")
    assert snapshot(session.lower) == want


def test_partial_commit_of_a_replaced_old_name(session):
    """mv a b; echo new > a; commit a: b must not show "new"."""
    populate(session.lower)

    def ed(m):
        os.rename(os.path.join(m, "same.txt"), os.path.join(m, "b.txt"))
        with open(os.path.join(m, "same.txt"), "wb") as f:
            f.write(b"new\n")
    session.change(ed, metacopy=True)
    assert is_metacopy(up(session, "b.txt"))
    res = json.loads(session.run("commit", "same.txt").stdout)
    assert res["materialized"] == ["b.txt"]
    assert read(os.path.join(session.lower, "same.txt")) == b"new\n"
    assert session.view(metacopy=True)["b.txt"] == ("file", 0o644, b"renamed within its dir\n")
    assert session.changes()["b.txt"]["status"] == "added"


def test_partial_commit_of_the_data_dir(session):
    """The data lies below a selected directory that the commit deletes."""
    populate(session.lower)

    def ed(m):
        os.rename(os.path.join(m, "dir/deep.txt"), os.path.join(m, "out.txt"))
        shutil.rmtree(os.path.join(m, "dir"))
    session.change(ed, metacopy=True)
    assert is_metacopy(up(session, "out.txt"))
    res = json.loads(session.run("commit", "dir").stdout)
    assert res["materialized"] == ["out.txt"]
    assert not os.path.exists(os.path.join(session.lower, "dir"))
    assert session.view(metacopy=True)["out.txt"] == ("file", 0o644, b"from a subdirectory\n")


def test_partial_commit_unrelated_leaves_metacopies(session):
    populate(session.lower)
    session.change(edit, metacopy=True)
    res = json.loads(session.run("commit", "chmod.txt").stdout)
    assert res["materialized"] == []
    assert os.stat(os.path.join(session.lower, "chmod.txt")).st_mode & 0o777 == 0o755
    assert read(os.path.join(session.lower, "chmod.txt")) == b"chmod me\n"
    for p in ["dir/moved.bin", "same2.txt", "up.txt"]:
        assert is_metacopy(up(session, p)), p


def test_hand_made_metacopy_keeps_xattrs_and_owner(session):
    """A metacopy with a user xattr and another owner: commit takes them from the upper, the data from below."""
    populate(session.lower)
    src = os.path.join(session.lower, "keep.txt")
    u = up(session, "keep.txt")
    make_metacopy(u, src, mode=0o640)
    os.setxattr(u, "user.note", b"hi")
    os.chown(u, 1234, 2345)
    c = session.changes()["keep.txt"]
    assert not c["content"] and c["metadata"]
    session.run("commit", "--owner", "preserve")
    p = os.path.join(session.lower, "keep.txt")
    st = os.stat(p)
    assert read(p) == b"not touched\n" and stat.S_IMODE(st.st_mode) == 0o640
    assert (st.st_uid, st.st_gid) == (1234, 2345)
    assert os.getxattr(p, "user.note") == b"hi"
    assert not [x for x in os.listxattr(p) if x.startswith("trusted.")]


def test_data_changed_below_a_metacopy(session):
    """The host appends to the data of a chmod-only metacopy: the file keeps its own size (as
    the core shows it and copies it up), so the diff, the tar and the commit take that many bytes."""
    populate(session.lower)
    session.change(edit, metacopy=True)
    with open(os.path.join(session.lower, "chmod.txt"), "ab") as f:
        f.write(b"host\n")
    c = session.changes()["chmod.txt"]
    assert c["content"] and c["new"]["size"] == 9 and c["old"]["size"] == 14
    tp = os.path.join(session.root, "layer.tar")
    with open(tp, "wb") as f:
        f.write(session.run("diff", "--format", "tar", "chmod.txt", binary=True).stdout)
    with tarfile.open(tp) as t:
        assert t.extractfile("chmod.txt").read() == b"chmod me\n"
    session.run("commit", "chmod.txt")
    assert read(os.path.join(session.lower, "chmod.txt")) == b"chmod me\n"


def test_bad_metacopies(session):
    populate(session.lower)
    src = os.path.join(session.lower, "keep.txt")
    make_metacopy(up(session, "missing.txt"), src, redirect="/nope.txt")
    before = snapshot(session.lower)
    # The JSON change list reads no data: the file is listed (new, by its name and size)...
    p = session.run("diff")
    assert [c["path"] for c in json.loads(p.stdout)["changes"]] == ["missing.txt"]
    # ... what reads the data says what is wrong with it.
    for fmt in ("patch", "tar"):
        p = session.run("diff", "--format", fmt, "--output", os.path.join(session.root, "out." + fmt), check=False)
        assert p.returncode == 1
        assert "missing.txt" in p.stderr and "/nope.txt" in p.stderr, p.stderr
    p = session.run("commit", check=False)
    assert p.returncode == 1 and "missing.txt" in p.stderr
    assert snapshot(session.lower) == before  # nothing written
    assert not [n for n in os.listdir(session.lower) if n.startswith(".#draftfs")]
    # status still works, and discard is the way out
    assert json.loads(session.run("status").stdout)["summary"]["added"] == 1
    os.unlink(up(session, "missing.txt"))
    for bad in [b"/../keep.txt", b"a/b", b"..", b"/dir//deep.txt", b""]:
        make_metacopy(up(session, "bad.txt"), src)
        os.setxattr(up(session, "bad.txt"), "trusted.overlay.redirect", bad)
        p = session.run("diff", "--format", "patch", "--output", os.path.join(session.root, "out.patch"),
                        check=False)
        assert p.returncode == 1 and "bad.txt" in p.stderr and "malformed" in p.stderr, (bad, p.stderr)
        os.unlink(up(session, "bad.txt"))
    # a redirect to a directory or a symlink is no data
    os.symlink("keep.txt", os.path.join(session.lower, "link"))
    for target in ["/dir", "/link"]:
        make_metacopy(up(session, "odd.txt"), src, redirect=target)
        p = session.run("diff", "--format", "patch", "--output", os.path.join(session.root, "out.patch"),
                        check=False)
        assert p.returncode == 1 and "not a regular file" in p.stderr, (target, p.stderr)
        os.unlink(up(session, "odd.txt"))
    make_metacopy(up(session, "odd.txt"), src, redirect="/dir")
    session.run("discard", "odd.txt")
    assert session.changes() == {}


def test_discard(session):
    populate(session.lower)
    session.change(edit, metacopy=True)
    before = snapshot(session.lower)
    # the old name back: the renamed metacopy still reads it
    session.run("discard", "moved.bin")
    v = session.view(metacopy=True)
    assert v["moved.bin"] == ("file", 0o644, BIG) and v["dir/moved.bin"] == ("file", 0o644, BIG)
    session.run("discard", "dir/moved.bin", "chmod.txt")
    v = session.view(metacopy=True)
    assert "dir/moved.bin" not in v and v["chmod.txt"] == ("file", 0o644, b"chmod me\n")
    assert set(session.changes()) == {"same.txt", "same2.txt", "dir/deep.txt", "up.txt"}
    session.run("discard")
    assert session.changes() == {} and os.listdir(session.upper) == []
    assert snapshot(session.lower) == before


def test_dir_moved_by_the_kernel_is_refused(session):
    """A lower dir renamed by kernel overlayfs with redirect_dir=on is an
    upper dir with trusted.overlay.redirect whose content below is the old
    dir's: diff and commit refuse it (a commit would drop the files it
    brought along from the workspace), status and discard work."""
    populate(session.lower)
    session.change(lambda m: os.rename(os.path.join(m, "dir"), os.path.join(m, "moved")), metacopy=True)
    assert os.getxattr(up(session, "moved"), "trusted.overlay.redirect") == b"dir"  # relative: same parent
    before = snapshot(session.lower)
    for verb in ("diff", "commit"):
        p = session.run(verb, check=False)
        assert p.returncode == 3, (verb, p.returncode, p.stderr)
        assert "'moved' is a directory moved by kernel overlayfs with redirect_dir=on" in p.stderr, p.stderr
    assert snapshot(session.lower) == before, "nothing committed"
    assert json.loads(session.run("status").stdout)["summary"]["total"] > 0
    session.run("discard")
    assert os.listdir(session.upper) == []
    assert snapshot(session.lower) == before


def edit_more(m):
    edit(m)
    # the data of kept2.txt is replaced at its old name: a stale re-read would give "new"
    os.rename(os.path.join(m, "keep.txt"), os.path.join(m, "kept2.txt"))
    with open(os.path.join(m, "keep.txt"), "wb") as f:
        f.write(b"new\n")


@pytest.mark.parametrize("args", [[], ["moved.bin", "same.txt", "same2.txt", "chmod.txt", "keep.txt"]],
                         ids=["all", "partial"])
def test_kill_at_every_step_then_recover(args):
    """A kill at each step of a commit with metacopies, then recover: the workspace ends
    with the view's data, never the zeros of a metacopy or the data a rename replaced."""
    names = steps_of(lambda: fresh(edit_more), *args)
    assert "journal-staged" in names
    if args:
        assert "materialize" in names
    for n in range(1, len(names) + 1):
        s = fresh(edit_more)
        try:
            want = s.view(metacopy=True)
            assert want["kept2.txt"] == ("file", 0o644, b"not touched\n")
            kill_at(s, n, *args)
            s.run("recover")
            got = s.view(metacopy=True)
            assert got == want, "step %d (%s)" % (n, names[n - 1])
            if not args:
                assert snapshot(s.lower) == want, "step %d (%s)" % (n, names[n - 1])
                assert s.changes() == {}
            s.run("commit")
            assert snapshot(s.lower) == want, "step %d (%s)" % (n, names[n - 1])
        finally:
            s.close()


def test_kill_with_an_unchanged_metacopy_then_recover():
    """twin.txt is a metacopy of orig.txt with the same bytes and metadata as the lower twin.txt:
    no change, but a commit of orig.txt's deletion takes its data away. A kill after that
    must still recover (the journal says staging had finished)."""
    def make():
        s = Session()
        for n in ["orig.txt", "twin.txt"]:
            with open(os.path.join(s.lower, n), "wb") as f:
                f.write(b"twins\n")
            os.utime(os.path.join(s.lower, n), ns=(10**18, 10**18))
        s.change(lambda m: os.unlink(os.path.join(m, "orig.txt")), metacopy=True)
        make_metacopy(up(s, "twin.txt"), os.path.join(s.lower, "orig.txt"), redirect="/orig.txt")
        return s
    s = make()
    try:
        assert set(s.changes()) == {"orig.txt"}
    finally:
        s.close()
    names = steps_of(make, "orig.txt", "twin.txt")
    assert "journal-staged" in names
    for n in range(1, len(names) + 1):
        s = make()
        try:
            kill_at(s, n, "orig.txt", "twin.txt")
            s.run("recover")
            assert snapshot(s.lower) == {"twin.txt": ("file", 0o644, b"twins\n")}, (n, names[n - 1])
            assert s.changes() == {} and os.listdir(s.upper) == []
        finally:
            s.close()


def test_base_layer_data_and_opaque_dir(session2):
    """The data of a metacopy in a base layer below the commit target, and a metacopy inside
    an opaque directory (its tar entry is written with the dir's whole upper subtree)."""
    s = session2
    os.makedirs(os.path.join(s.lowers[1], "d"))
    with open(os.path.join(s.lowers[1], "base.txt"), "wb") as f:
        f.write(BIG)
    with open(os.path.join(s.lowers[1], "d/old.txt"), "wb") as f:
        f.write(b"old\n")
    with open(os.path.join(s.lowers[0], "top.txt"), "wb") as f:
        f.write(b"top\n")

    def ed(m):
        os.rename(os.path.join(m, "base.txt"), os.path.join(m, "moved.txt"))
        shutil.rmtree(os.path.join(m, "d"))
        os.mkdir(os.path.join(m, "d"))
        os.rename(os.path.join(m, "top.txt"), os.path.join(m, "d/top.txt"))
    s.change(ed, metacopy=True)
    assert is_metacopy(up(s, "moved.txt")) and is_metacopy(up(s, "d/top.txt"))
    ch = s.changes()
    assert ch["moved.txt"]["new"]["size"] == len(BIG) and ch["d"].get("opaque")
    want = s.view(metacopy=True)
    tp = os.path.join(s.root, "layer.tar")
    with open(tp, "wb") as f:
        f.write(s.run("diff", "--format", "tar", binary=True).stdout)
    with tarfile.open(tp) as t:
        assert t.extractfile("d/top.txt").read() == b"top\n"
        assert t.extractfile("moved.txt").read() == BIG
    res = json.loads(s.run("commit").stdout)
    assert {k["path"] for k in res["kept"]} == {"base.txt", "d/old.txt"}  # the base layer still has them
    assert read(os.path.join(s.lower, "moved.txt")) == BIG
    assert read(os.path.join(s.lower, "d/top.txt")) == b"top\n"
    assert not os.path.exists(os.path.join(s.lower, "top.txt"))
    assert s.view(metacopy=True) == want


def _dir_over_file_with_a_moved_file():
    """x was a file and is a directory now, holding a (a metacopy: its data is the lower a)."""
    s = Session()
    write_files(s.lower, {"x": b"old x\n", "a": BIG}, 0o644)

    def ed(m):
        os.unlink(os.path.join(m, "x"))
        os.mkdir(os.path.join(m, "x"))
        os.rename(os.path.join(m, "a"), os.path.join(m, "x/a"))
    s.change(ed, metacopy=True)
    assert is_metacopy(up(s, "x/a"))
    return s


def test_kill_with_a_moved_file_in_a_dir_over_a_file_then_recover():
    """The staged directory that replaces the file x holds the temp of x/a, the only copy of a's
    data once a's deletion is applied: a recovery must keep it, not start that directory over."""
    names = steps_of(_dir_over_file_with_a_moved_file)
    assert "journal-staged" in names and "delete" in names and "rename-dir" in names
    for n in range(1, len(names) + 1):
        s = _dir_over_file_with_a_moved_file()
        try:
            want = s.view(metacopy=True)
            assert want["x/a"] == ("file", 0o644, BIG)
            kill_at(s, n)
            s.run("recover")
            assert snapshot(s.lower) == want, "step %d (%s)" % (n, names[n - 1])
            assert s.changes() == {}
        finally:
            s.close()


def _moved_and_new_in_a_dir():
    """a moved to b (a metacopy of the lower a), and a new file in the lower dir d."""
    s = Session()
    os.mkdir(os.path.join(s.lower, "d"))
    write_files(s.lower, {"a": BIG, "d/keep": b"keep\n"}, 0o644)

    def ed(m):
        os.rename(os.path.join(m, "a"), os.path.join(m, "b"))
        with open(os.path.join(m, "d/new"), "wb") as f:
            f.write(b"new\n")
    s.change(ed, metacopy=True)
    assert is_metacopy(up(s, "b"))
    return s


def test_recovery_that_fails_while_staging_keeps_the_staged_data():
    """A commit killed after a's deletion leaves b's temp as the only copy of its data. A recovery
    that then fails while staging (d/ is immutable for a while: no temp can be made in it) must keep
    that temp: the next recovery, once d/ is writable again, gives b its data."""
    n = steps_of(_moved_and_new_in_a_dir).index("delete") + 1
    s = _moved_and_new_in_a_dir()
    try:
        want = s.view(metacopy=True)
        kill_at(s, n)
        assert not os.path.exists(os.path.join(s.lower, "a")), "killed before a's deletion"
        d = os.path.join(s.lower, "d")
        if subprocess.run(["chattr", "+i", d], capture_output=True).returncode != 0:
            pytest.skip("chattr +i does not work on this filesystem")
        try:
            p = s.run("recover", check=False)
        finally:
            subprocess.run(["chattr", "-i", d], check=True)
        assert p.returncode != 0, "recovery staged into an immutable dir"
        assert "journal" in p.stderr and "nothing was changed" not in p.stderr, p.stderr
        s.run("recover")
        assert snapshot(s.lower) == want
        assert s.changes() == {}
    finally:
        s.close()


def test_kill_twice_with_a_moved_file_then_recover():
    """A commit killed while staging leaves an unmarked journal; the recovery stages again and
    applies. If that recovery is killed after a's deletion, b's temp is the only copy of its data:
    the recovery must have marked the journal staged, so the next one keeps the temp."""
    first = steps_of(_moved_and_new_in_a_dir).index("stage") + 1
    s = _moved_and_new_in_a_dir()
    try:
        kill_at(s, first)
        rnames = fault_steps(s.run("recover", env={"DRAFTFS_FAULT": "count"}))
    finally:
        s.close()
    assert "delete" in rnames
    for m in range(1, len(rnames) + 1):
        s = _moved_and_new_in_a_dir()
        try:
            want = s.view(metacopy=True)
            kill_at(s, first)
            kill_at(s, m, verb="recover")
            s.run("recover")
            assert snapshot(s.lower) == want, "recovery killed at step %d (%s)" % (m, rnames[m - 1])
            assert s.changes() == {}
        finally:
            s.close()
