# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftfs commit and discard, offline on kernel-written uppers: the result,
selections, base layers, conflicts, refusals, ownership, hard links, bad
input, a symlink-swap race on the workspace, and a staged directory meeting
a workspace that changed between staging and the renames."""
import json
import os
import shutil
import stat
import subprocess
import threading

from ctlutil import (Session, commit_paused_at, fault_steps, session, session2, snapshot,  # noqa: F401
                     steps_of, write_files)
from test_ctl_diff import edit, populate


def test_commit_all_keeps_view(session):
    populate(session.lower)
    session.change(edit)
    before = session.view()
    out = json.loads(session.run("commit").stdout)
    assert "README" in out["committed"] and out["kept"] == []
    assert snapshot(session.lower) == before
    assert session.view() == before
    assert os.listdir(session.upper) == []
    assert session.changes() == {}
    # no temp files left behind in the workspace
    assert not [p for p in snapshot(session.lower) if ".#draftfs." in p]


def test_commit_selected(session):
    populate(session.lower)
    session.change(edit)
    before = session.view()
    lower_before = snapshot(session.lower)
    json.loads(session.run("commit", "src", "gone").stdout)
    after_lower = snapshot(session.lower)
    assert after_lower["src/new.c"][2] == b"new\n"
    assert "gone" not in after_lower and "gone/a" not in after_lower
    # what was not selected is untouched in the workspace and still a change
    assert after_lower["README"] == lower_before["README"]
    left = session.changes()
    assert "README" in left and "src/new.c" not in left and "gone" not in left
    assert session.view() == before
    assert not os.path.exists(os.path.join(session.upper, "src", "new.c"))
    assert not os.path.lexists(os.path.join(session.upper, "gone"))


def test_commit_inside_opaque_dir_alone(session):
    populate(session.lower)
    session.change(edit)
    before = session.view()
    session.run("commit", "opq/fresh")
    assert session.view() == before
    assert open(os.path.join(session.lower, "opq/fresh")).read() == "fresh\n"
    left = session.changes()
    assert "opq/fresh" not in left and "opq/old1" in left


def test_base_layer_rules(session2):
    s = session2
    os.makedirs(os.path.join(s.lowers[1], "d"))
    with open(os.path.join(s.lowers[1], "d/base-only"), "w") as f:
        f.write("base\n")
    with open(os.path.join(s.lowers[1], "base-del"), "w") as f:
        f.write("base\n")
    with open(os.path.join(s.lowers[1], "both"), "w") as f:
        f.write("base\n")
    with open(os.path.join(s.lowers[0], "both"), "w") as f:
        f.write("top\n")

    def ed(m):
        with open(os.path.join(m, "d/base-only"), "a") as f:
            f.write("edited\n")
        os.unlink(os.path.join(m, "base-del"))
        os.unlink(os.path.join(m, "both"))
    s.change(ed)
    before = s.view()
    out = json.loads(s.run("commit").stdout)
    # a file only in a base layer is committed into the target (with its parents)
    assert open(os.path.join(s.lowers[0], "d/base-only")).read() == "base\nedited\n"
    # the base layers are never written
    assert open(os.path.join(s.lowers[1], "d/base-only")).read() == "base\n"
    # deleting a name a base layer still has: the whiteout stays, reported as kept
    kept = {k["path"] for k in out["kept"]}
    assert kept == {"base-del", "both"}
    assert not os.path.exists(os.path.join(s.lowers[0], "both"))
    assert os.path.exists(os.path.join(s.lowers[1], "both"))
    st = os.lstat(os.path.join(s.upper, "both"))
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    assert s.view() == before


def test_opaque_dir_over_base_layer(session2):
    """An opaque dir committed while a base layer has more in it: whiteouts
    keep the base-only names hidden, at every depth, and the view does not
    change."""
    s = session2
    for low, names in ((s.lowers[0], ["d/top", "d/sub/top2"]), (s.lowers[1], ["d/base", "d/sub/base2"])):
        for n in names:
            os.makedirs(os.path.dirname(os.path.join(low, n)), exist_ok=True)
            with open(os.path.join(low, n), "w") as f:
                f.write(n + "\n")

    def ed(m):
        shutil.rmtree(os.path.join(m, "d"))
        os.makedirs(os.path.join(m, "d/sub"))
        with open(os.path.join(m, "d/sub/new"), "w") as f:
            f.write("new\n")
    s.change(ed)
    before = s.view()
    assert set(k for k in before if k.startswith("d")) == {"d", "d/sub", "d/sub/new"}
    s.run("commit")
    assert s.view() == before
    assert sorted(os.listdir(os.path.join(s.lower, "d"))) == ["sub"]
    assert sorted(os.listdir(os.path.join(s.lower, "d/sub"))) == ["new"]
    assert set(s.changes()) == {"d/base", "d/sub/base2"}  # deletions only a base layer can show


def test_conflicts(session):
    populate(session.lower)

    def ed(m):
        with open(os.path.join(m, "README"), "a") as f:
            f.write("session\n")
        with open(os.path.join(m, "script.sh"), "a") as f:
            f.write("session\n")
        os.unlink(os.path.join(m, "src/main.c"))
        shutil.rmtree(os.path.join(m, "gone"))
    session.change(ed)
    session.set_origins()
    # the host edits the workspace behind the session's back
    with open(os.path.join(session.lower, "README"), "a") as f:
        f.write("host\n")
    with open(os.path.join(session.lower, "src/main.c"), "a") as f:
        f.write("host\n")
    with open(os.path.join(session.lower, "gone/deep/b"), "a") as f:
        f.write("host\n")
    lower_before = snapshot(session.lower)
    upper_before = snapshot(session.upper)
    p = session.run("commit", check=False)
    assert p.returncode == 3, p.stderr
    assert "conflict" in p.stderr or "changed" in p.stderr
    for path in ("README", "src/main.c", "gone/deep/b"):
        assert path in p.stderr
    assert "script.sh" not in p.stderr
    # a refused commit changes nothing
    assert snapshot(session.lower) == lower_before
    assert snapshot(session.upper) == upper_before
    # committing only the clean path works
    session.run("commit", "script.sh")
    assert open(os.path.join(session.lower, "script.sh")).read().endswith("session\n")
    # force overrides
    session.run("commit", "--force")
    assert open(os.path.join(session.lower, "README")).read() == "hello\nsession\n"
    assert not os.path.exists(os.path.join(session.lower, "src/main.c"))
    assert not os.path.exists(os.path.join(session.lower, "gone"))


def test_refusals(session):
    os.makedirs(os.path.join(session.lower, "d"))

    def ed(m):
        with open(os.path.join(m, "suid"), "w") as f:
            f.write("x")
        os.chmod(os.path.join(m, "suid"), 0o4755)
        os.mkfifo(os.path.join(m, "fifo"))
        with open(os.path.join(m, "d/tx"), "w") as f:
            f.write("x")
        os.setxattr(os.path.join(m, "d/tx"), "trusted.evil", b"1")
        with open(os.path.join(m, "ok"), "w") as f:
            f.write("fine")
    session.change(ed)
    p = session.run("commit", check=False)
    assert p.returncode == 3
    for path in ("suid", "fifo", "d/tx"):
        assert path in p.stderr
    assert os.listdir(session.lower) == ["d"] and os.listdir(os.path.join(session.lower, "d")) == []
    session.run("commit", "ok")
    assert open(os.path.join(session.lower, "ok")).read() == "fine"
    session.run("commit", "--allow", "setid,special,xattrs")
    st = os.lstat(os.path.join(session.lower, "suid"))
    assert st.st_mode & 0o7777 == 0o4755
    assert stat.S_ISFIFO(os.lstat(os.path.join(session.lower, "fifo")).st_mode)
    assert os.getxattr(os.path.join(session.lower, "d/tx"), "trusted.evil") == b"1"


def test_owner_and_hardlinks(session):
    with open(os.path.join(session.lower, "linked"), "w") as f:
        f.write("old\n")
    os.link(os.path.join(session.lower, "linked"), os.path.join(session.lower, "other-link"))
    os.chown(session.lower, 1234, 2345)
    os.chown(os.path.join(session.lower, "linked"), 3456, 4567)

    def ed(m):
        with open(os.path.join(m, "linked"), "w") as f:
            f.write("new\n")
        with open(os.path.join(m, "fresh"), "w") as f:
            f.write("fresh\n")
        os.chown(os.path.join(m, "fresh"), 999, 999)
        with open(os.path.join(m, "mine"), "w") as f:
            f.write("mine\n")
        os.chown(os.path.join(m, "mine"), 777, 778)
    session.change(ed)
    session.run("commit", "linked", "fresh")
    # atomic replace: the other hard link keeps the old content
    assert open(os.path.join(session.lower, "other-link")).read() == "old\n"
    assert open(os.path.join(session.lower, "linked")).read() == "new\n"
    st = os.lstat(os.path.join(session.lower, "linked"))
    assert (st.st_uid, st.st_gid) == (3456, 4567)  # owner of the replaced file
    st = os.lstat(os.path.join(session.lower, "fresh"))
    assert (st.st_uid, st.st_gid) == (1234, 2345)  # owner of the target root
    session.run("commit", "--owner", "preserve", "mine")
    st = os.lstat(os.path.join(session.lower, "mine"))
    assert (st.st_uid, st.st_gid) == (777, 778)


def test_owner_fixed(session):
    session.change(lambda m: open(os.path.join(m, "f"), "w").write("x"))
    session.run("commit", "--owner", "4242:4343")
    st = os.lstat(os.path.join(session.lower, "f"))
    assert (st.st_uid, st.st_gid) == (4242, 4343)
    p = session.run("commit", "--owner", "root", check=False)
    assert p.returncode == 2


def test_bad_input(session):
    populate(session.lower)
    session.change(edit)
    lower_before = snapshot(session.lower)
    for bad in ("/abs", "..", "a/../../b", "never/was"):
        p = session.run("commit", bad, check=False)
        assert p.returncode == 2, (bad, p.stderr)
        assert p.stderr.strip()
        p = session.run("discard", bad, check=False)
        assert p.returncode == 2, (bad, p.stderr)
    assert snapshot(session.lower) == lower_before


def test_discard(session):
    populate(session.lower)
    session.change(edit)
    lower_before = snapshot(session.lower)
    # inside a deleted directory: refused, naming the directory to discard
    p = session.run("discard", "gone/a", check=False)
    assert p.returncode == 2 and "'gone'" in p.stderr
    session.run("discard", "README", "gone")
    ch = session.changes()
    assert "README" not in ch and "gone" not in ch and "src/new.c" in ch
    # inside a directory that replaced lower wholesale (opaque): the lower
    # entry is copied back, the rest of the directory keeps its changes
    view = session.view()
    assert "opq/old1" not in view
    session.run("discard", "opq/old1")
    view = session.view()
    assert view["opq/old1"] == lower_before["opq/old1"]
    ch = session.changes()
    assert "opq/old1" not in ch and "opq/fresh" in ch
    session.run("discard")
    assert session.changes() == {}
    assert session.view() == lower_before
    assert snapshot(session.lower) == lower_before


def test_offline_commit_refused_while_locked(session):
    import fcntl
    session.change(lambda m: open(os.path.join(m, "f"), "w").write("x"))
    state = os.path.join(session.work, "draftfs")
    os.makedirs(state, exist_ok=True)
    fd = os.open(os.path.join(state, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        p = session.run("commit", check=False)
        assert p.returncode == 1 and "mounted" in p.stderr
        assert not os.path.exists(os.path.join(session.lower, "f"))
    finally:
        os.close(fd)
    session.run("commit")
    assert os.path.exists(os.path.join(session.lower, "f"))


def test_symlink_swap_race(session):
    """A process keeps swapping a workspace dir for a symlink to a canary dir
    (standing in for /etc) while commit writes into that dir: the canary
    must stay untouched whatever wins each race."""
    canary = os.path.join(session.root, "canary")
    os.makedirs(canary)
    with open(os.path.join(canary, "passwd"), "w") as f:
        f.write("root:x:0:0\n")
    canary_before = snapshot(canary)
    sub = os.path.join(session.lower, "sub")
    os.makedirs(sub)
    n = 300

    def ed(m):
        for i in range(n):
            with open(os.path.join(m, "sub", "f%03d" % i), "w") as f:
                f.write("payload %d\n" % i)
        with open(os.path.join(m, "sub", "passwd"), "w") as f:
            f.write("pwned\n")
    session.change(ed)
    stop = threading.Event()

    def swapper():
        aside = os.path.join(session.lower, "sub.aside")
        link = os.path.join(session.lower, "sub.link")
        while not stop.is_set():
            try:
                os.symlink(canary, link)
                os.rename(sub, aside)
                os.rename(link, sub)
                os.unlink(sub)
                os.rename(aside, sub)
            except OSError:
                pass
    t = threading.Thread(target=swapper)
    t.start()
    try:
        for _ in range(3):
            session.run("commit", check=False)
    finally:
        stop.set()
        t.join()
    assert snapshot(canary) == canary_before
    # A swap that failed half-way (a racing commit recreated sub/ while the real
    # one was aside) leaves the attacker's mess: put the real dir back, with
    # whatever that commit wrote into the recreated one, before checking content.
    aside = os.path.join(session.lower, "sub.aside")
    link = os.path.join(session.lower, "sub.link")
    if os.path.lexists(link):
        os.unlink(link)
    if os.path.lexists(aside):
        if os.path.islink(sub):
            os.unlink(sub)
        elif os.path.isdir(sub):
            for name in os.listdir(sub):
                os.replace(os.path.join(sub, name), os.path.join(aside, name))
            os.rmdir(sub)
        os.rename(aside, sub)
    assert os.path.isdir(sub) and not os.path.islink(sub), \
        f"the race left: {sorted(os.listdir(session.lower))}, sub is a link: {os.path.islink(sub)}"
    # a commit that lost a race failed cleanly (no journal left); once the
    # swapping stops the commit goes through, into the real directory
    session.run("commit")
    assert snapshot(canary) == canary_before
    assert open(os.path.join(sub, "passwd")).read() == "pwned\n"
    for i in range(n):
        assert open(os.path.join(sub, "f%03d" % i)).read() == "payload %d\n" % i
    assert session.changes() == {}


def test_dry_run_and_output_file(session):
    populate(session.lower)
    session.change(edit)
    lower_before = snapshot(session.lower)
    upper_before = snapshot(session.upper)
    out = json.loads(session.run("commit", "--dry-run").stdout)
    assert out["dry_run"] is True and "README" in out["committed"]
    assert snapshot(session.lower) == lower_before and snapshot(session.upper) == upper_before
    dest = os.path.join(session.root, "out.json")
    p = session.run("diff", "--output", dest, "-v")
    assert p.stdout == "" and '"summary"' in p.stderr
    with open(dest) as f:
        assert "README" in {c["path"] for c in json.load(f)["changes"]}


def test_created_in_both_is_a_conflict(session):
    """A name the session created (origin "v1 none") that the workspace has
    since got too: conflict, force overrides."""
    session.change(lambda m: open(os.path.join(m, "both"), "w").write("session\n"))
    os.setxattr(os.path.join(session.upper, "both"), "trusted.draftbox.origin", b"v1 none")
    with open(os.path.join(session.lower, "both"), "w") as f:
        f.write("host\n")
    p = session.run("commit", check=False)
    assert p.returncode == 3 and "both" in p.stderr and "created in the workspace" in p.stderr
    assert open(os.path.join(session.lower, "both")).read() == "host\n"
    session.run("commit", "--force")
    assert open(os.path.join(session.lower, "both")).read() == "session\n"


def test_failed_staging_changes_nothing():
    """The target runs out of space half-way: the error says so, and the
    workspace and upper are exactly as before (no temp left behind)."""
    import subprocess
    s = Session()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", s.lower], check=True)
        s.mounted.append(s.lower)
        with open(os.path.join(s.lower, "keep"), "w") as f:
            f.write("old\n")

        def ed(m):
            with open(os.path.join(m, "keep"), "w") as f:
                f.write("new\n")
            for i in range(6):
                with open(os.path.join(m, "big%d" % i), "wb") as f:
                    f.write(os.urandom(512 * 1024))
        s.change(ed)
        lower_before = snapshot(s.lower)
        upper_before = snapshot(s.upper)
        p = s.run("commit", check=False)
        assert p.returncode == 1
        assert "nothing was changed" in p.stderr and "No space left" in p.stderr
        assert snapshot(s.lower) == lower_before
        assert snapshot(s.upper) == upper_before
        assert json.loads(s.run("status").stdout)["journal"] == "none"
        # a smaller selection still fits
        s.run("commit", "keep")
        assert open(os.path.join(s.lower, "keep")).read() == "new\n"
    finally:
        s.close()


def test_xattr_refusal_rolls_back_new_dirs(session):
    """A refusal found while staging (xattrs are read there) undoes the
    staging: no temp, no new directory is left in the workspace."""
    os.makedirs(os.path.join(session.lower, "existing"))

    def ed(m):
        os.makedirs(os.path.join(m, "nd/sub"))
        for i in range(3):
            with open(os.path.join(m, "nd/sub/f%d" % i), "w") as f:
                f.write("x")
        os.setxattr(os.path.join(m, "nd/sub/f1"), "security.evil", b"1")
        os.chmod(os.path.join(m, "existing"), 0o700)
        with open(os.path.join(m, "existing/a"), "w") as f:
            f.write("a")
    session.change(ed)
    lower_before = snapshot(session.lower)
    upper_before = snapshot(session.upper)
    p = session.run("commit", check=False)
    assert p.returncode == 3 and "nd/sub/f1" in p.stderr and "security" in p.stderr
    assert snapshot(session.lower) == lower_before
    assert snapshot(session.upper) == upper_before
    p = session.run("commit", "--dry-run", check=False)
    assert p.returncode == 3 and "nd/sub/f1" in p.stderr
    session.run("commit", "--allow", "xattrs")
    assert os.getxattr(os.path.join(session.lower, "nd/sub/f1"), "security.evil") == b"1"
    assert os.stat(os.path.join(session.lower, "existing")).st_mode & 0o777 == 0o700


def test_rollback_leaves_a_dir_it_did_not_make(session):
    """A commit that fails while staging removes the directories it made, but
    only those: when the workspace's owner moved the new directory away and
    made one of the same name meanwhile, that one stays (this was how a racing
    rename lost a real directory in test_symlink_swap_race)."""
    def ed(m):
        os.makedirs(os.path.join(m, "nd"))
        with open(os.path.join(m, "nd/f"), "w") as f:
            f.write("x")
        with open(os.path.join(m, "zz"), "w") as f:
            f.write("z")
        os.setxattr(os.path.join(m, "zz"), "security.evil", b"1")
    session.change(ed)
    upper_before = snapshot(session.upper)
    p = session.run("commit", check=False, env={"DRAFTFS_FAULT": "count"})
    assert p.returncode == 3, p.stderr
    steps = fault_steps(p)
    assert "stage-dir" in steps, "no 'stage-dir' fault point in a commit: " + p.stderr
    assert os.listdir(session.lower) == [], "the probe's rollback left something"
    nd = os.path.join(session.lower, "nd")
    proc = commit_paused_at(session, steps.index("stage-dir") + 1, lambda: os.path.isdir(nd), "nd/")
    # inside the pause, right after nd/ was made
    os.rename(nd, os.path.join(session.lower, "moved"))
    os.mkdir(nd)
    mine = os.stat(nd)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    st = os.stat(nd)
    assert (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino), "the rollback removed a directory it never made"
    assert sorted(os.listdir(session.lower)) == ["moved", "nd"]
    assert os.listdir(nd) == [] and os.listdir(os.path.join(session.lower, "moved")) == []
    assert snapshot(session.upper) == upper_before


def _dir_over_file():
    """A session whose upper turns the workspace file 'sub' into a directory with two files."""
    s = Session()
    with open(os.path.join(s.lower, "sub"), "w") as f:
        f.write("a file\n")

    def ed(m):
        os.unlink(os.path.join(m, "sub"))
        os.makedirs(os.path.join(m, "sub"))
        for name in ("a", "b"):
            with open(os.path.join(m, "sub", name), "w") as f:
                f.write("new %s\n" % name)
    s.change(ed)
    return s


def _commit_paused_at(s, meanwhile, make=None, point="staged", args=()):
    """Runs a commit (with @args) that pauses at the fault point @point (default: once staged and
    checked again); calls meanwhile() while it waits; returns the finished process. make() builds a
    session like @s, to count the steps on (default: _dir_over_file)."""
    steps = steps_of(make or _dir_over_file)
    assert point in steps, "no %r fault point in a commit" % point
    journal = os.path.join(s.work, "draftfs", "commit.journal")

    def ready():
        staged = [n for n in os.listdir(s.lower) if n.startswith(".#draftfs.")]
        return os.path.exists(journal) and (point != "staged" or staged)
    p = commit_paused_at(s, steps.index(point) + 1, ready, repr(point), *args)
    meanwhile()
    out, err = p.communicate(timeout=60)
    return p.returncode, out.decode(), err.decode()


def test_staged_dir_lands_whatever_took_the_name():
    """A file that becomes a directory is staged under a temp name; if the workspace name is gone or an
    empty directory by the time the commit renames, the staged directory still takes its place: nothing
    is left stranded under a temp name while the upper is pruned."""
    for replace in ("empty dir", "nothing"):
        s = _dir_over_file()
        try:
            def meanwhile():
                os.unlink(os.path.join(s.lower, "sub"))
                if replace == "empty dir":
                    os.mkdir(os.path.join(s.lower, "sub"))
            rc, out, err = _commit_paused_at(s, meanwhile)
            assert rc == 0, (replace, err)
            for name in ("a", "b"):
                with open(os.path.join(s.lower, "sub", name)) as f:
                    assert f.read() == "new %s\n" % name, replace
            assert not [n for n in os.listdir(s.lower) if n.startswith(".#draftfs.")], replace
            assert s.changes() == {}, replace
        finally:
            s.close()


def test_staged_dir_never_merges_into_a_foreign_dir():
    """If a directory with entries took the name once the commit was staged and checked: a conflict,
    nothing applied (_apply_guard_refused). With force, the commit stops there with its journal: the
    foreign directory is untouched, the change is still in the upper, and once the name is free again
    'draftfs recover' finishes the commit."""
    s = _dir_over_file()
    try:
        rc, out, err = _commit_paused_at(s, lambda: _foreign_dir(s, "sub", "foreign"))
        _apply_guard_refused(s, rc, err, "sub")
        assert sorted(os.listdir(os.path.join(s.lower, "sub"))) == ["foreign"]
    finally:
        s.close()
    s = _dir_over_file()
    try:
        rc, out, err = _commit_paused_at(s, lambda: _foreign_dir(s, "sub", "foreign"), args=["--force"])
        assert rc != 0 and "sub" in err, (rc, err)
        assert sorted(os.listdir(os.path.join(s.lower, "sub"))) == ["foreign"]
        _recover_once_freed(s, "sub", {"sub/a": "new a\n", "sub/b": "new b\n"})
    finally:
        s.close()


def _apply_guard_refused(s, rc, err, path):
    """The commit met the host's edit at @path before it had applied anything: a conflict naming it,
    undone (no journal, no temp), the session's changes still all in the upper."""
    assert rc == 3 and err.endswith(": '%s'\n  %s: changed in the workspace during the commit\n" % (path, path)), \
        (rc, err)
    assert json.loads(s.run("status").stdout)["journal"] == "none"
    assert not [n for n in os.listdir(s.lower) if n.startswith(".#draftfs.")]
    assert s.changes()


def _foreign_dir(s, name, entry):
    """The host replaces the workspace's file @name with a directory holding the file @entry."""
    os.unlink(os.path.join(s.lower, name))
    os.mkdir(os.path.join(s.lower, name))
    with open(os.path.join(s.lower, name, entry), "w") as f:
        f.write("not ours\n")


def _recover_once_freed(s, name, want):
    """The commit stopped at the host's directory @name with its journal; once the host removes it,
    'draftfs recover' finishes the commit: the workspace holds @want ({path: text}), no temp is left."""
    assert json.loads(s.run("status").stdout)["journal"] == "pending"
    shutil.rmtree(os.path.join(s.lower, name))
    s.run("recover")
    for path, text in want.items():
        with open(os.path.join(s.lower, path)) as f:
            assert f.read() == text, path
    assert not [n for n in os.listdir(s.lower) if n.startswith(".#draftfs.")]
    assert s.changes() == {}


def _file_modified():
    s = Session()
    with open(os.path.join(s.lower, "f"), "w") as f:
        f.write("old\n")

    def ed(m):
        with open(os.path.join(m, "f"), "w") as f:
            f.write("new\n")
    s.change(ed)
    return s


def test_staged_file_never_replaces_a_foreign_dir():
    """The session changed the file f; if a directory with entries took the name once the commit was
    staged and checked: a conflict, nothing applied. With force, the commit stops there with its
    journal instead of deleting that directory, and once the name is free again 'draftfs recover'
    finishes the commit."""
    s = _file_modified()
    try:
        rc, out, err = _commit_paused_at(s, lambda: _foreign_dir(s, "f", "important"), make=_file_modified)
        _apply_guard_refused(s, rc, err, "f")
        with open(os.path.join(s.lower, "f", "important")) as f:
            assert f.read() == "not ours\n"
    finally:
        s.close()
    s = _file_modified()
    try:
        rc, out, err = _commit_paused_at(s, lambda: _foreign_dir(s, "f", "important"), make=_file_modified,
                                         args=["--force"])
        assert rc != 0 and "'f'" in err and "Is a directory" in err, (rc, err)
        with open(os.path.join(s.lower, "f", "important")) as f:
            assert f.read() == "not ours\n"
        _recover_once_freed(s, "f", {"f": "new\n"})
    finally:
        s.close()


def _four_kinds_of_change():
    """The session modified f, deleted g and the dir d, created n."""
    s = Session()
    os.mkdir(os.path.join(s.lower, "d"))
    write_files(s.lower, {"f": b"old f\n", "g": b"old g\n", "d/x": b"old x\n"})

    def ed(m):
        with open(os.path.join(m, "f"), "w") as f:
            f.write("new f\n")
        os.unlink(os.path.join(m, "g"))
        shutil.rmtree(os.path.join(m, "d"))
        with open(os.path.join(m, "n"), "w") as f:
            f.write("new n\n")
    s.change(ed)
    s.set_origins()
    return s


def test_host_edit_while_staging_is_a_conflict():
    """The conflict check runs again once everything is staged, before anything is applied: a host edit
    made to the workspace while the commit was copying its data (here: paused right after the journal)
    refuses the commit as a conflict, with nothing changed, the host's edit kept and the session's
    change still in the upper; force then commits over it. One kind of edit per run: written in place,
    replaced by a rename, a file created at a name the session created, a file added to a directory the
    session deleted."""
    edits = {
        "f": lambda s: write_files(s.lower, {"f": b"host f\n"}),
        "g": lambda s: (write_files(s.lower, {".g.tmp": b"host g\n"}),
                        os.rename(os.path.join(s.lower, ".g.tmp"), os.path.join(s.lower, "g"))),
        "n": lambda s: write_files(s.lower, {"n": b"host n\n"}),
        "d": lambda s: write_files(s.lower, {"d/host": b"host d\n"}),
    }
    for path, edit in edits.items():
        s = _four_kinds_of_change()
        try:
            before = s.changes()
            rc, out, err = _commit_paused_at(s, lambda: edit(s), make=_four_kinds_of_change,
                                                    point="journal")
            reason = "created" if path == "n" else "changed"
            assert rc == 3 and err.endswith(": '%s'\n  %s: %s in the workspace during the commit\n"
                                            % (path, path, reason)), (path, rc, err)
            host = os.path.join(s.lower, path if path != "d" else "d/host")
            with open(host) as f:
                assert f.read() == "host %s\n" % path, path
            assert json.loads(s.run("status").stdout)["journal"] != "pending", path
            assert not [n for n in os.listdir(s.lower) if n.startswith(".#draftfs.")], path
            assert set(before) <= set(s.changes()), path  # (d: the host's d/host shows as deleted too)
            if path != "f":
                with open(os.path.join(s.lower, "f")) as f:
                    assert f.read() == "old f\n", path
            s.run("commit", "--force")
            assert s.changes() == {}, path
            with open(os.path.join(s.lower, "f")) as f:
                assert f.read() == "new f\n", path
            assert not os.path.lexists(os.path.join(s.lower, "g")), path
            assert not os.path.lexists(os.path.join(s.lower, "d")), path
        finally:
            s.close()


def test_host_edit_while_applying_destroys_nothing():
    """Once staged and checked again, the commit applies in path order (d, f, g, n). A host edit made
    then at an entry it has not reached yet is never replaced or deleted: at d (the first) nothing
    is applied yet and the commit is undone as a conflict; at f, g or n it stops there, part of it
    applied, with its journal and a conflict naming the path; recovery then refuses to go over
    the edit, and 'recover --force' finishes."""
    edits = {
        "d": (lambda s: write_files(s.lower, {"d/host": b"host d\n"}), "d/host"),
        "f": (lambda s: write_files(s.lower, {"f": b"host f\n"}), "f"),
        "g": (lambda s: (write_files(s.lower, {".g.tmp": b"host g\n"}),
                         os.rename(os.path.join(s.lower, ".g.tmp"), os.path.join(s.lower, "g"))), "g"),
        "n": (lambda s: write_files(s.lower, {"n": b"host n\n"}), "n"),
    }
    for path, (edit, host) in edits.items():
        s = _four_kinds_of_change()
        try:
            rc, out, err = _commit_paused_at(s, lambda: edit(s), make=_four_kinds_of_change)
            with open(os.path.join(s.lower, host)) as f:
                assert f.read() == "host %s\n" % path, path
            if path == "d":
                _apply_guard_refused(s, rc, err, "d")  # its new entry moved its ctime
                with open(os.path.join(s.lower, "f")) as f:
                    assert f.read() == "old f\n"
                continue
            assert rc == 3 and "stopped there" in err and "\n  %s: changed in the workspace during the commit\n" % host \
                in err, (path, rc, err)
            assert not os.path.lexists(os.path.join(s.lower, "d")), "d came first: applied"
            assert json.loads(s.run("status").stdout)["journal"] == "pending", path
            p = s.run("recover", check=False)
            assert p.returncode == 3 and "\n  %s: changed in the workspace after the commit began" % host in p.stderr, \
                (path, p.stderr)
            with open(os.path.join(s.lower, host)) as f:
                assert f.read() == "host %s\n" % path, path
            s.run("recover", "--force")
            assert s.changes() == {}, path
            for name, text in (("f", "new f\n"), ("n", "new n\n")):
                with open(os.path.join(s.lower, name)) as f:
                    assert f.read() == text, path
            assert not os.path.lexists(os.path.join(s.lower, "g")), path
        finally:
            s.close()


def _linked_pair():
    """a and b: two names of one workspace file (and z a third, outside the commit); the session
    rewrites both."""
    s = Session()
    write_files(s.lower, {"a": b"linked\n"})
    os.link(os.path.join(s.lower, "a"), os.path.join(s.lower, "b"))
    os.link(os.path.join(s.lower, "a"), os.path.join(s.lower, "z"))
    s.change(lambda m: write_files(m, {"a": b"new a\n", "b": b"new b\n"}))
    s.set_origins()
    return s


def test_host_chmod_of_a_hard_linked_file_stops_the_commit():
    """A file with several names is judged by its mtime, as the commit's own renames move its ctime;
    a chmod or chown made once the commit is checked again still shows, in its mode and owner: the
    guard refuses at the first name and nothing is applied."""
    for how in ("chmod", "chown"):
        s = _linked_pair()
        try:
            z = os.path.join(s.lower, "z")
            rc, out, err = _commit_paused_at(s, lambda: os.chmod(z, 0o600) if how == "chmod" else os.chown(z, 1234, -1),
                                             make=_linked_pair)
            _apply_guard_refused(s, rc, err, "a")
            for name in "abz":
                with open(os.path.join(s.lower, name)) as f:
                    assert f.read() == "linked\n", (how, name)
            assert os.path.samefile(os.path.join(s.lower, "a"), z)
            st = os.stat(z)
            assert (st.st_mode & 0o777, st.st_uid) == ((0o600, 0) if how == "chmod" else (0o644, 1234)), how
        finally:
            s.close()


def test_hard_links_in_the_workspace_pass_the_guard():
    """The commit's own unlinks and renames change the link count, and so the ctime, of a workspace
    file's other names: that is not a host edit. A build dir with internal hard links (as cargo
    makes) deleted, two names of one file both modified, and a name kept whose other name is in a
    deleted dir: the commit goes through and the workspace ends as the view."""
    s = Session()
    low = s.lower
    os.makedirs(os.path.join(low, "target/deps"))
    os.makedirs(os.path.join(low, "gone"))
    for i in range(8):
        write_files(low, {"target/deps/bin%d-1" % i: b"binary %d\n" % i})
        os.link(os.path.join(low, "target/deps/bin%d-1" % i), os.path.join(low, "target/bin%d" % i))
    write_files(low, {"x": b"one inode\n", "keep": b"keep\n"})
    os.link(os.path.join(low, "x"), os.path.join(low, "y"))
    os.link(os.path.join(low, "keep"), os.path.join(low, "gone/keep-link"))

    def ed(m):
        shutil.rmtree(os.path.join(m, "target"))
        shutil.rmtree(os.path.join(m, "gone"))
        write_files(m, {"x": b"new x\n", "y": b"new y\n", "keep": b"kept, new\n"})
    try:
        s.change(ed)
        s.set_origins()
        want = s.view()
        p = s.run("commit", check=False)
        assert p.returncode == 0, p.stderr
        assert snapshot(s.lower) == want and s.changes() == {}
    finally:
        s.close()
