# SPDX-License-Identifier: LGPL-2.1-or-later
"""Crash safety of commit: the committer _exit()s at step N (the
DRAFTFS_FAULT hook), for every N; after each kill every workspace file is
all-old or all-new, and `draftfs recover` always finishes the commit."""
import json
import os
import shutil

from ctlutil import Session, kill_at, snapshot, steps_of


def populate(low):
    os.makedirs(os.path.join(low, "d/e"))
    os.makedirs(os.path.join(low, "olddir/x"))
    os.makedirs(os.path.join(low, "ftod"))
    for i in range(6):
        with open(os.path.join(low, "d/f%d" % i), "w") as f:
            f.write("old %d\n" % i)
    with open(os.path.join(low, "olddir/x/y"), "w") as f:
        f.write("y\n")
    with open(os.path.join(low, "tofile"), "w") as f:
        f.write("was file\n")
    with open(os.path.join(low, "ftod/leaf"), "w") as f:
        f.write("leaf\n")


def edit(m):
    for i in range(0, 6, 2):
        with open(os.path.join(m, "d/f%d" % i), "w") as f:
            f.write("new %d with more bytes\n" % i)
    os.unlink(os.path.join(m, "d/f1"))
    with open(os.path.join(m, "d/e/added"), "w") as f:
        f.write("added\n")
    shutil.rmtree(os.path.join(m, "olddir"))
    os.unlink(os.path.join(m, "tofile"))
    os.makedirs(os.path.join(m, "tofile/inner"))
    with open(os.path.join(m, "tofile/inner/z"), "w") as f:
        f.write("z\n")
    shutil.rmtree(os.path.join(m, "ftod"))
    with open(os.path.join(m, "ftod"), "w") as f:
        f.write("now a file\n")
    os.symlink("d/f0", os.path.join(m, "ln"))


def fresh():
    s = Session()
    populate(s.lower)
    s.change(edit)
    return s


def check_each_file(got, old, new):
    for path, v in got.items():
        if v[0] == "dir":
            continue
        assert path in old or path in new, "unexpected %s" % path
        assert v == old.get(path) or v == new.get(path), "torn %s: %r" % (path, v)
    # files that exist in both states never vanish
    for path in set(old) & set(new):
        if old[path][0] != "dir" and new[path][0] != "dir":
            assert path in got, "lost %s" % path


def count_steps():
    return len(steps_of(fresh))


def test_kill_at_every_step_then_recover():
    steps = count_steps()
    assert steps > 10
    for n in range(1, steps + 1):
        s = fresh()
        try:
            old = snapshot(s.lower)
            want = s.view()
            kill_at(s, n)
            got = snapshot(s.lower)
            visible = {k: v for k, v in got.items() if ".#draftfs." not in k}
            check_each_file(visible, old, want)
            st = json.loads(s.run("status").stdout)
            # the journal is written before anything else and removed last
            assert st["journal"] in ("pending", "none")
            # a new commit refuses to start while a journal is pending
            if st["journal"] == "pending":
                q = s.run("commit", check=False)
                assert q.returncode != 0 and "recover" in q.stderr
            s.run("recover")
            assert snapshot(s.lower) == want, "step %d" % n
            assert s.view() == want
            assert s.changes() == {}
            assert json.loads(s.run("status").stdout)["journal"] == "none"
        finally:
            s.close()


def test_kill_twice_during_recovery():
    steps = count_steps()
    s = fresh()
    try:
        want = s.view()
        kill_at(s, steps // 2)
        kill_at(s, 3, verb="recover")
        s.run("recover")
        assert snapshot(s.lower) == want
        assert s.changes() == {}
    finally:
        s.close()


def host_edits_after_kill(low):
    """What the host does after the kill: a file where the session created one, and a new file in a
    directory the session deleted (made again if the commit had deleted it already)."""
    with open(os.path.join(low, "d/e/added"), "w") as f:
        f.write("host\n")
    os.makedirs(os.path.join(low, "olddir/x"), exist_ok=True)
    with open(os.path.join(low, "olddir/x/host.txt"), "w") as f:
        f.write("host\n")


def test_recovery_refuses_to_overwrite_host_edits_made_after_the_kill():
    """A kill at each step, then host edits at paths of the commit: recovery without force
    changes nothing and names each of them that the upper still holds a change of (both,
    through the 'applied' step); --force then finishes the commit over those, and a host
    edit at a path the upper has let go of stays in any case."""
    names = steps_of(fresh)
    last_full = names.index("applied") + 1
    host = ["d/e/added", "olddir/x/host.txt"]
    for n in range(1, len(names) + 1):
        s = fresh()
        try:
            want = s.view()
            kill_at(s, n)
            host_edits_after_kill(s.lower)
            before = snapshot(s.lower)
            p = s.run("recover", check=False)
            named = [h for h in host if "\n  %s: changed in the workspace after the commit began" % h in p.stderr]
            if n <= last_full:
                assert named == host, (n, names[n - 1], p.returncode, p.stderr)
            if named:
                assert p.returncode == 3, (n, p.returncode, p.stderr)
                assert "recover --force" in p.stderr
                assert snapshot(s.lower) == before, "a refused recovery changes nothing (step %d)" % n
                assert json.loads(s.run("status").stdout)["journal"] == "pending"
                s.run("recover", "--force")
            else:
                assert p.returncode == 0, (n, p.stderr)
            got = snapshot(s.lower)
            for h in host:
                if h not in named:
                    assert got[h] == ("file", 0o644, b"host\n"), "lost host edit %s (step %d)" % (h, n)
            if n <= last_full:
                assert got == want, "step %d" % n
            assert s.view() == got and s.changes() == {}, "step %d" % n
            assert json.loads(s.run("status").stdout)["journal"] == "none"
        finally:
            s.close()


def populate_linked(low):
    """Three names of one inode, the way cargo and ccache leave them; the session deletes one,
    rewrites another and leaves the third."""
    os.makedirs(os.path.join(low, "h"))
    with open(os.path.join(low, "h/a"), "w") as f:
        f.write("linked\n")
    os.link(os.path.join(low, "h/a"), os.path.join(low, "h/b"))
    os.link(os.path.join(low, "h/a"), os.path.join(low, "h/keep"))
    with open(os.path.join(low, "h/plain"), "w") as f:
        f.write("plain\n")


def edit_linked(m):
    os.unlink(os.path.join(m, "h/a"))
    with open(os.path.join(m, "h/b"), "w") as f:
        f.write("rewritten\n")
    os.unlink(os.path.join(m, "h/plain"))


def fresh_linked():
    s = Session()
    populate_linked(s.lower)
    s.change(edit_linked)
    return s


def test_recovery_takes_the_commits_own_link_changes_for_no_host_edit():
    """The commit's unlink or replacement of one name of a hard-linked file moves the ctime of its
    other names: recovery after a kill at any step must not take that for a host edit (the journal
    says which inodes had several names), and must still refuse over a host write to one of them."""
    names = steps_of(fresh_linked)
    applied = names.index("applied") + 1
    for n in range(1, len(names) + 1):
        s = fresh_linked()
        try:
            want = s.view()
            kill_at(s, n)
            p = s.run("recover", check=False)
            assert p.returncode == 0, (n, names[n - 1], p.stderr)
            assert snapshot(s.lower) == want and s.changes() == {}, "step %d" % n
        finally:
            s.close()
    refused = 0
    for n, how in [(n, how) for n in range(1, applied) for how in ("write", "chmod")]:
        s = fresh_linked()
        try:
            kill_at(s, n)
            keep = os.path.join(s.lower, "h/keep")
            if not os.path.samefile(os.path.join(s.lower, "h/b"), keep):
                s.run("recover")
                continue  # h/b is the session's already: no host edit to it can be lost
            # h/b is the same inode: the recovery would replace a host edit
            if how == "write":
                with open(keep, "a") as f:
                    f.write("host\n")
            else:
                os.chmod(keep, 0o600)
            p = s.run("recover", check=False)
            assert p.returncode == 3 and "\n  h/b: changed in the workspace after the commit began" in p.stderr, (
                n, names[n - 1], how, p.returncode, p.stderr)
            refused += 1
            s.run("recover", "--force")
            with open(keep) as f:
                assert f.read() == ("linked\nhost\n" if how == "write" else "linked\n")
            assert how == "write" or os.stat(keep).st_mode & 0o777 == 0o600
        finally:
            s.close()
    assert refused >= 4, names  # before h/a goes, and between it and h/b: the case the linked set is for


def test_journal_records_the_linked_files_and_refuses_a_bad_record():
    """The journal records each multiply-linked workspace file of the commit once, as it was checked:
    "DEV:INO:MODE:UID:GID:SIZE:MTIME_SEC:MTIME_NSEC" (strings: exact past 2^53); a malformed record
    makes the journal unreadable, and recovery changes nothing."""
    names = steps_of(fresh_linked)
    s = fresh_linked()
    try:
        st = os.stat(os.path.join(s.lower, "h/a"))
        kill_at(s, names.index("journal") + 1)
        path = os.path.join(s.work, "draftfs", "commit.journal")
        with open(path) as f:
            j = json.load(f)
        good = "%d:%d:%d:%d:%d:%d:%d:%d" % (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_size,
                                            st.st_mtime_ns // 10**9, st.st_mtime_ns % 10**9)
        assert j["linked"] == [good], j
        before = snapshot(s.lower)
        head = "%d:%d" % (st.st_dev, st.st_ino)
        for bad in ([head], [good + ":1"], ["x" + good], [" " + good], [good.replace(":", ": ", 1)],
                    ["1:-2" + good[len(head):]], ["1:0" + good[len(head):]], [head + ":4294967296:0:0:0:0:0"],
                    [good.rsplit(":", 1)[0] + ":1000000000"], ["99999999999999999999" + good[len(head.split(":")[0]):]],
                    [7], good):
            j["linked"] = bad
            with open(path, "w") as f:
                json.dump(j, f)
            p = s.run("recover", check=False)
            assert p.returncode != 0 and "unreadable" in p.stderr, (bad, p.returncode, p.stderr)
            assert snapshot(s.lower) == before, bad
        # a negative mtime (before 1970) is a record like any other
        j["linked"] = [good, head.split(":")[0] + ":1:33188:0:0:0:-5:0"]
        with open(path, "w") as f:
            json.dump(j, f)
        s.run("recover")
        assert s.changes() == {}
    finally:
        s.close()
