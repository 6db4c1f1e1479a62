# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftfs diff: the JSON change list, the git patch (checked with git apply)
and the OCI layer tar (checked with an OCI applier), on uppers written by the
kernel's overlayfs (same on-disk format as draftfs)."""
import json
import os
import shutil
import subprocess

import pytest

from ctlutil import draftfs_bin, files_only, oci_apply, session, session2, snapshot, write_files  # noqa: F401


def populate(low):
    os.makedirs(os.path.join(low, "src/sub"))
    os.makedirs(os.path.join(low, "gone/deep"))
    os.makedirs(os.path.join(low, "renamed"))
    os.makedirs(os.path.join(low, "opq/sub"))
    files = {
        "README": b"hello\n",
        "src/main.c": b"int main(void) { return 0; }\n",
        "src/sub/util.c": b"/* util */\n",
        "gone/a": b"a\n",
        "gone/deep/b": b"b\n",
        "renamed/r1": b"r1\n",
        "opq/old1": b"old1\n",
        "opq/keep": b"keep\n",
        "opq/sub/hidden": b"hidden below an opaque dir\n",
        "opq/sub/again": b"again\n",
        "bin.dat": bytes(range(256)) * 4,
        "touched": b"same\n",
        "rdwr": b"same too\n",
        "tofile": b"x",
        "script.sh": b"#!/bin/sh\necho hi\n",
    }
    write_files(low, files)
    os.makedirs(os.path.join(low, "todir_was_file_parent"))
    with open(os.path.join(low, "becomes_dir"), "w") as f:
        f.write("was a file\n")
    os.makedirs(os.path.join(low, "becomes_file"))
    with open(os.path.join(low, "becomes_file/child"), "w") as f:
        f.write("child\n")
    os.symlink("README", os.path.join(low, "link"))
    os.chmod(os.path.join(low, "script.sh"), 0o644)


def edit(m):
    with open(os.path.join(m, "README"), "a") as f:
        f.write("more\n")
    with open(os.path.join(m, "src/new.c"), "w") as f:
        f.write("new\n")
    shutil.rmtree(os.path.join(m, "gone"))
    # the kernel refuses (EXDEV) to rename a lower dir without redirect_dir; mv copies + deletes
    shutil.move(os.path.join(m, "renamed"), os.path.join(m, "renamed2"))
    # opaque: remove the dir and create it again, "keep" with the same content and mtime
    keep_st = os.stat(os.path.join(m, "opq/keep"))
    shutil.rmtree(os.path.join(m, "opq"))
    os.mkdir(os.path.join(m, "opq"))
    with open(os.path.join(m, "opq/keep"), "w") as f:
        f.write("keep\n")
    os.utime(os.path.join(m, "opq/keep"), ns=(keep_st.st_atime_ns, keep_st.st_mtime_ns))
    with open(os.path.join(m, "opq/fresh"), "w") as f:
        f.write("fresh\n")
    # a plain dir below the opaque one: lower's opq/sub/* stays hidden
    os.mkdir(os.path.join(m, "opq/sub"))
    with open(os.path.join(m, "opq/sub/again"), "w") as f:
        f.write("again, new\n")
    b = bytearray(open(os.path.join(m, "bin.dat"), "rb").read())
    b[10] = 0
    b[700] ^= 0xFF
    open(os.path.join(m, "bin.dat"), "wb").write(bytes(b))
    # copied up but equal: touch + restore mtime; open O_RDWR + close
    p = os.path.join(m, "touched")
    st = os.stat(p)
    os.utime(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    fd = os.open(os.path.join(m, "rdwr"), os.O_RDWR)
    os.close(fd)
    os.chmod(os.path.join(m, "script.sh"), 0o755)
    os.unlink(os.path.join(m, "becomes_dir"))
    os.mkdir(os.path.join(m, "becomes_dir"))
    with open(os.path.join(m, "becomes_dir/inner"), "w") as f:
        f.write("inner\n")
    shutil.rmtree(os.path.join(m, "becomes_file"))
    with open(os.path.join(m, "becomes_file"), "w") as f:
        f.write("now a file\n")
    os.unlink(os.path.join(m, "link"))
    os.symlink("src/main.c", os.path.join(m, "link"))


def test_json_change_list(session):
    populate(session.lower)
    session.change(edit)
    doc = session.diff_json()
    paths = [c["path"] for c in doc["changes"]]
    ch = {c["path"]: c for c in doc["changes"]}

    assert ch["README"]["status"] == "modified" and ch["README"]["content"]
    assert ch["README"]["old"]["size"] == 6 and ch["README"]["new"]["size"] == 11
    assert ch["src/new.c"]["status"] == "added" and ch["src/new.c"]["type"] == "file"
    assert "old" not in ch["src/new.c"]
    # deleted dir: reported once, plus its deleted children
    assert ch["gone"]["status"] == "deleted" and ch["gone"]["type"] == "dir"
    assert ch["gone/a"]["status"] == "deleted" and ch["gone/deep/b"]["status"] == "deleted"
    assert paths.count("gone") == 1 and "new" not in ch["gone"]
    # rename = delete + add
    assert ch["renamed"]["status"] == "deleted" and ch["renamed/r1"]["status"] == "deleted"
    assert ch["renamed2"]["status"] == "added" and ch["renamed2/r1"]["status"] == "added"
    # opaque dir: lower files not in upper are deleted, an equal re-created file is not a change
    assert ch["opq/old1"]["status"] == "deleted"
    assert ch["opq/fresh"]["status"] == "added"
    # below an opaque dir no lower entry shows through, even in a plain upper subdir
    assert ch["opq/sub/hidden"]["status"] == "deleted"
    assert ch["opq/sub/again"]["status"] == "modified"
    assert "opq/keep" not in ch
    # copied up, content and metadata equal: not reported
    assert "touched" not in ch and "rdwr" not in ch
    # metadata only
    assert ch["script.sh"]["metadata"] and not ch["script.sh"]["content"]
    assert ch["script.sh"]["old"]["mode"] & 0o777 == 0o644 and ch["script.sh"]["new"]["mode"] & 0o777 == 0o755
    # type changes
    assert ch["becomes_dir"]["status"] == "type_changed" and ch["becomes_dir"]["type"] == "dir"
    assert ch["becomes_dir"]["old_type"] == "file"
    assert ch["becomes_dir/inner"]["status"] == "added"
    assert ch["becomes_file"]["status"] == "type_changed" and ch["becomes_file"]["type"] == "file"
    assert ch["becomes_file/child"]["status"] == "deleted"
    # symlink target
    assert ch["link"]["type"] == "symlink" and ch["link"]["old"]["target"] == "README"
    assert ch["link"]["new"]["target"] == "src/main.c"
    # binary
    assert ch["bin.dat"]["content"] and ch["bin.dat"]["old"]["size"] == ch["bin.dat"]["new"]["size"]

    # stable order: a directory right before its subtree, sorted component-wise
    def key(p):
        return p.split("/")
    assert paths == sorted(paths, key=key)
    s = doc["summary"]
    assert s["total"] == len(paths)
    assert s["added"] == sum(1 for c in doc["changes"] if c["status"] == "added")
    assert s["deleted"] == sum(1 for c in doc["changes"] if c["status"] == "deleted")
    assert s["bytes_added"] >= 11
    # running twice gives the same bytes
    assert session.run("diff").stdout == session.run("diff").stdout


def test_filters(session):
    populate(session.lower)
    session.change(edit)
    ch = session.changes("gone", "src/new.c")
    assert set(ch) == {"gone", "gone/a", "gone/deep", "gone/deep/b", "src/new.c"}
    ch = session.changes("src")
    assert set(ch) == {"src/new.c"}
    # a path that exists but did not change: empty, not an error
    assert session.changes("src/main.c") == {}
    # /mount-root-relative spelling variants
    assert set(session.changes("./gone/", "gone//deep")) == {"gone", "gone/a", "gone/deep", "gone/deep/b"}


def test_bad_paths(session):
    populate(session.lower)
    session.change(edit)
    for bad, code in [("/etc/passwd", 2), ("../x", 2), ("src/../../x", 2), ("nope/never", 2)]:
        p = session.run("diff", bad, check=False)
        assert p.returncode == code, (bad, p.returncode, p.stderr)
        assert p.stderr.strip(), bad
    p = session.run("diff", "nope/never", check=False)
    assert "no such path" in p.stderr and "nope/never" in p.stderr
    p = session.run("diff", "../x", check=False)
    assert "'..'" in p.stderr
    p = session.run("diff", "--format", "zip", check=False)
    assert p.returncode == 2 and "unknown diff format" in p.stderr


def assert_patch_applies(session, patch):
    """git apply takes @patch on a copy of the workspace, which then holds the view's files."""
    work = os.path.join(session.root, "applied")
    shutil.copytree(session.lower, work, symlinks=True)
    pf = os.path.join(session.root, "p.diff")
    with open(pf, "wb") as f:
        f.write(patch)
    r = subprocess.run(["git", "apply", "--binary", pf], cwd=work, capture_output=True)
    assert r.returncode == 0, r.stderr
    assert files_only(snapshot(work), git_modes=True) == files_only(session.view(), git_modes=True)


def test_git_patch_applies(session):
    populate(session.lower)
    session.change(edit)
    patch = session.run("diff", "--format", "patch", binary=True).stdout
    assert b"GIT binary patch" in patch
    assert b"old mode 100644" in patch and b"new mode 100755" in patch
    assert b"deleted file mode 100644" in patch
    # the symlink kept its name and mode: a change of its target, not a new 120000 blob
    assert b"new file mode 120000" not in patch
    assert b"-README\n\\ No newline at end of file\n+src/main.c\n\\ No newline at end of file\n" in patch
    assert_patch_applies(session, patch)


def test_git_patch_in_batches(session):
    """The patch is read and printed in batches of paths (bounded memory):
    a batch per path gives the same bytes as one batch of all, in git's
    path order also where it differs from the change list's ("a-b", "a.c"
    and "a0" around the directory "a"), and git apply takes it."""
    populate(session.lower)

    def more(m):
        edit(m)
        os.makedirs(os.path.join(m, "src/a"))
        for name in ("src/a/x", "src/a-b", "src/a.c", "src/a0"):
            with open(os.path.join(m, name), "w") as f:
                f.write(name + "\n")
    session.change(more)
    whole = session.run("diff", "--format", "patch", binary=True).stdout
    batched = session.run("diff", "--format", "patch", binary=True, env={"DRAFTFS_PATCH_BATCH_BYTES": "1"}).stdout
    assert b"src/a/x" in whole and b"GIT binary patch" in whole
    assert batched == whole
    names = [line.split(b" b/")[-1] for line in whole.splitlines() if line.startswith(b"diff --git")]
    assert names == sorted(names), names
    assert_patch_applies(session, batched)


def test_git_patch_empty_and_filtered(session):
    populate(session.lower)
    assert session.run("diff", "--format", "patch").stdout == ""
    session.change(edit)
    out = session.run("diff", "--format", "patch", "src").stdout
    assert "src/new.c" in out and "README" not in out


def test_oci_tar_applies(session):
    populate(session.lower)
    session.change(edit)
    tar = session.run("diff", "--format", "tar", binary=True).stdout
    tf = os.path.join(session.root, "layer.tar")
    with open(tf, "wb") as f:
        f.write(tar)
    names = subprocess.run(["tar", "tf", tf], capture_output=True, check=True).stdout.decode().split()
    assert "opq/.wh..wh..opq" in names
    assert ".wh.gone" in names and "gone/a" not in names and ".wh.renamed" in names
    work = os.path.join(session.root, "applied")
    shutil.copytree(session.lower, work, symlinks=True)
    oci_apply(tf, work)
    got = snapshot(work)
    want = session.view()
    assert got == want


def test_base_layers_in_view(session2):
    s = session2
    # base layer has a file the target does not; the session edits and deletes base-only files
    with open(os.path.join(s.lowers[1], "base-only"), "w") as f:
        f.write("base\n")
    with open(os.path.join(s.lowers[1], "base-del"), "w") as f:
        f.write("base\n")
    with open(os.path.join(s.lowers[0], "top"), "w") as f:
        f.write("top\n")

    def ed(m):
        with open(os.path.join(m, "base-only"), "a") as f:
            f.write("more\n")
        os.unlink(os.path.join(m, "base-del"))
    s.change(ed)
    ch = s.changes()
    assert ch["base-only"]["status"] == "modified"
    assert ch["base-del"]["status"] == "deleted"
    assert set(ch) == {"base-only", "base-del"}


def test_offline_status(session):
    populate(session.lower)
    session.change(edit)
    st = json.loads(session.run("status").stdout)
    assert st["mounted"] is False and st["journal"] == "none"
    assert st["summary"]["total"] == len(session.changes())
    assert st["upper_inodes"] > 0 and st["upper_bytes"] > 0


def test_oci_tar_long_names_xattrs_ids(session):
    import tarfile
    deep = "/".join(["component%02d" % i for i in range(12)])  # > 100 bytes

    def ed(m):
        os.makedirs(os.path.join(m, deep))
        p = os.path.join(m, deep, "file-with-a-long-name.txt")
        with open(p, "w") as f:
            f.write("deep\n")
        os.setxattr(p, "user.note", b"hello\x00world")
        os.chown(p, 3000000, 3000001)  # beyond ustar's 7 octal digits
        os.symlink("x" * 150, os.path.join(m, "longlink"))
    session.change(ed)
    tf = os.path.join(session.root, "layer.tar")
    with open(tf, "wb") as f:
        f.write(session.run("diff", "--format", "tar", binary=True).stdout)
    with tarfile.open(tf) as t:
        m = {x.name.rstrip("/"): x for x in t.getmembers()}
    f = m[deep + "/file-with-a-long-name.txt"]
    assert f.size == 5 and (f.uid, f.gid) == (3000000, 3000001)
    assert f.pax_headers.get("SCHILY.xattr.user.note") is not None
    assert m["longlink"].issym() and m["longlink"].linkname == "x" * 150
    assert m["component00"].isdir()


def _libgit2_path():
    """The file the dynamic linker loads for libgit2 (ldconfig's cache), or None."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.startswith("libgit2.so."):
            return os.path.realpath(path.strip())
    return None


def test_git_patch_without_libgit2(session):
    """draftfs loads libgit2 on the first patch: with the library hidden (an empty file bound over it in a
    mount namespace of the test's own), the patch fails and names the library, and the JSON diff still works."""
    lib = _libgit2_path()
    if not lib:
        pytest.skip("libgit2 is not in ldconfig's cache")
    populate(session.lower)
    session.change(edit)
    hide = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind /dev/null "$1" && shift && exec "$@"', "sh", lib, draftfs_bin(), "diff"] + session.args()
    p = subprocess.run(hide + ["--format", "patch"], capture_output=True, timeout=60)
    assert p.returncode != 0 and p.stdout == b""
    assert b"patch output needs libgit2.so." in p.stderr, p.stderr
    p = subprocess.run(hide + ["--format", "json"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert {c["path"] for c in json.loads(p.stdout)["changes"]} == set(session.changes())


def test_oci_tar_refuses_names_that_read_as_whiteouts(session):
    """A file named .wh.X would delete X in every applier, and .wh..wh..opq would make
    its dir opaque: the tar diff refuses such names, naming the path."""
    with open(os.path.join(session.lower, "important"), "w") as f:
        f.write("keep\n")
    os.makedirs(os.path.join(session.lower, "d"))
    with open(os.path.join(session.lower, "d", "lower-file"), "w") as f:
        f.write("lower\n")

    def add_fake_whiteout(m):
        with open(os.path.join(m, ".wh.important"), "w") as f:
            f.write("a file, not a whiteout\n")
    session.change(add_fake_whiteout)
    p = session.run("diff", "--format", "tar", check=False, binary=True)
    err = p.stderr
    assert p.returncode == 3 and "'.wh.important'" in err and "OCI layer" in err, (p.returncode, err)
    assert session.changes()[".wh.important"]["status"] == "added", "the json diff shows it as it is"
    assert "important" not in session.changes()

    def opaque_with_fake_marker(m):
        os.unlink(os.path.join(m, ".wh.important"))
        shutil.rmtree(os.path.join(m, "d"))
        os.mkdir(os.path.join(m, "d"))  # an opaque dir: its whole upper subtree goes in the tar
        with open(os.path.join(m, "d", ".wh..wh..opq"), "w") as f:
            f.write("a file\n")
    session.change(opaque_with_fake_marker)
    p = session.run("diff", "--format", "tar", check=False, binary=True)
    assert p.returncode == 3 and "'d/.wh..wh..opq'" in p.stderr, (p.returncode, p.stderr)

    def rename_it(m):
        os.rename(os.path.join(m, "d", ".wh..wh..opq"), os.path.join(m, "d", "marker"))
    session.change(rename_it)
    p = session.run("diff", "--format", "tar", binary=True)
    assert p.returncode == 0 and b"d/.wh..wh..opq" in p.stdout and b"d/marker" in p.stdout
