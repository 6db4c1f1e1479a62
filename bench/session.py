# SPDX-License-Identifier: LGPL-2.1-or-later
"""Session-level figures, the memory walk and the daemon profile.

- mount time of each implementation over the big lower;
- `draftbox-run -- true` against bare bwrap;
- the cost of one request on each mount: an uncached getxattr (a FUSE round
  trip on the FUSE ones), and of a bare system call, so that runs on
  different machines can be told apart; the pipe round trip between two
  processes on one CPU (switch_costs(), measured by the driver around the
  repetitions, for the request floor of the report);
- `draftfs diff MNT` (JSON) of N changed files against `find -ls` of the
  upper, and `draftfs commit MNT` of N new small files against `rsync -a`
  of the same files;
- RSS of each FUSE daemon over a stat walk of the wide tree (100k files at
  scale 1), and across repeated walks with caches dropped in between;
- perf samples and strace syscall counts of the draftfs daemon over a few
  workloads (--profile).

Parts whose programs do not exist yet say "not available yet".
"""
import ctypes
import json
import os
import signal
import statistics
import subprocess
import time


BWRAP = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-ipc",
         "--unshare-uts", "--unshare-net", "--new-session", "--die-with-parent", "true"]


def _drop():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def _timed(argv, **kw):
    t0 = time.monotonic()
    r = subprocess.run(argv, stdout=kw.pop("stdout", subprocess.DEVNULL), stderr=subprocess.PIPE, **kw)
    return time.monotonic() - t0, r


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _draftfs(active):
    for i in active:
        if i.name == "draftfs":
            return i
    return None


def _reason(unavailable, name):
    why = unavailable.get(name, "not available yet")
    return why if why.startswith("not available") else "not available (%s)" % why


def _mkfiles(root, n, size):
    buf = b"y" * size
    for i in range(n):
        if i % 500 == 0:
            d = os.path.join(root, "d%03d" % (i // 500))
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%05d" % i), "wb") as f:
            f.write(buf)


def run_session(suite, active, unavailable, args, log):
    """Returns the session-level results dict."""
    out = {"mount": {}}
    reps = 2 if args.quick else 5
    log("session: mount time")
    for impl in active:
        if impl.name == "plain":
            continue
        ts = []
        for _ in range(reps):
            _drop()
            m = suite.mount(impl)
            ts.append(m.mount_seconds)
            suite.umount(m)
        out["mount"][impl.name] = _med(ts)
    if "draftfs" in unavailable:
        out["mount"]["draftfs"] = _reason(unavailable, "draftfs")
    log("session: request round trip")
    out["round_trip"] = _round_trips(suite, active, 2000 if args.quick else 20000)
    try:
        out["launcher"] = _launcher(suite, args, log)
    except Exception as e:
        out["launcher"] = {"unavailable": "failed: %s" % e}
        suite.failures.append("launcher: %s" % e)
    d = _draftfs(active)
    if d is None:
        out["diff"] = {"unavailable": _reason(unavailable, "draftfs")}
        out["commit"] = {"unavailable": _reason(unavailable, "draftfs")}
    else:
        try:
            out["diff"], out["commit"] = _control(suite, d, args, log)
        except Exception as e:
            out["diff"] = out["commit"] = {"unavailable": "failed: %s: %s" % (type(e).__name__, e)}
            suite.failures.append("diff/commit: %s: %s" % (type(e).__name__, e))
    return out


def _getxattr_loop(path, n):
    """Microseconds per getxattr of a name @path does not have (never cached by the kernel)."""
    t0 = time.perf_counter()
    for _ in range(n):
        try:
            os.getxattr(path, "user.draftbox-bench-none", follow_symlinks=False)
        except OSError:
            pass
    return (time.perf_counter() - t0) / n * 1e6


def switch_costs(n):
    """What handing a request to another process and back costs on this machine, in microseconds:
    - round_trip: one byte there and back over pipes between two processes bound to one CPU (two
      context switches between address spaces, four system calls);
    - pair: a write and a read of one byte over a pipe within this process (two system calls, no switch);
    - request: round_trip - 1.5 pair, the two switches and the one system call of the answering side
      that a synchronous FUSE request adds to the caller's own system call, which kernel overlayfs
      makes too. Any FUSE daemon that sleeps between requests pays at least this per request."""
    cpu = min(os.sched_getaffinity(0))
    a = os.pipe2(os.O_CLOEXEC)
    b = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(a[1])
            os.close(b[0])
            os.sched_setaffinity(0, {cpu})
            for _ in range(n):
                if not os.read(a[0], 1):
                    break
                os.write(b[1], b"x")
        finally:
            os._exit(0)
    old = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(a[1], b"x")
            os.read(b[0], 1)
        rt = (time.perf_counter() - t0) / n * 1e6
    finally:
        os.sched_setaffinity(0, old)
        for fd in a + b:
            os.close(fd)
        os.waitpid(pid, 0)
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            os.write(w, b"x")
            os.read(r, 1)
        pair = (time.perf_counter() - t0) / n * 1e6
    finally:
        os.close(r)
        os.close(w)
    return {"round_trip": rt, "pair": pair, "request": rt - 1.5 * pair}


def _round_trips(suite, active, n):
    """µs per uncached getxattr on each implementation's mount (the bare filesystem's for plain), also with
    this process bound to one CPU for the FUSE ones ("NAME pinned"), and per getppid(2) in a loop of this
    process (what a system call costs on this machine)."""
    out = {}
    libc = ctypes.CDLL(None, use_errno=True)
    t0 = time.perf_counter()
    for _ in range(n):
        libc.getppid()
    out["syscall"] = (time.perf_counter() - t0) / n * 1e6
    cpus = os.sched_getaffinity(0)
    for impl in active:
        m = suite.mount(impl)
        try:
            path = os.path.join(m.root, "big.bin")
            out[impl.name] = _getxattr_loop(path, n)
            if impl.fuse:
                # The same with this process bound to one CPU: where an idle vCPU halts, an unbound caller
                # is woken on the other, idle vCPU after most replies, and that wake-up is most of the cost.
                os.sched_setaffinity(0, {min(cpus)})
                try:
                    out[impl.name + " pinned"] = _getxattr_loop(path, n)
                finally:
                    os.sched_setaffinity(0, cpus)
        finally:
            suite.umount(m)
    return out


def _launcher(suite, args, log):
    exe = os.path.join(args.build_dir, "launcher", "draftbox-run")
    if not os.access(exe, os.X_OK):
        return {"unavailable": "not available yet (no %s)" % exe}
    log("session: draftbox-run -- true against bare bwrap")
    ws = suite.scratch()
    runs = 5 if args.quick else 20
    variants = {"ro": [exe, "--workspace", ws, "--mode", "ro", "--", "true"],
                "overlay": [exe, "--workspace", ws, "--draftfs", os.path.join(args.build_dir, "fs", "draftfs"),
                            "--", "true"]}
    res = {"bwrap": [], "ro": [], "overlay": []}
    bad = {}
    for k in range(runs):
        t, r = _timed(BWRAP)
        if r.returncode != 0:
            return {"unavailable": "bare bwrap failed: %s" % r.stderr.decode(errors="replace").strip()[-200:]}
        res["bwrap"].append(t)
        for v, argv in variants.items():
            if v in bad:
                continue
            t, r = _timed(argv)
            if r.returncode != 0:
                bad[v] = "exit %d: %s" % (r.returncode, r.stderr.decode(errors="replace").strip()[-200:])
                continue
            res[v].append(t)
    b = _med(res["bwrap"])
    parts = ["bwrap %.3fs" % b]
    out = {"bwrap": b}
    for v in variants:
        if v in bad:
            parts.append("draftbox-run --mode %s: failed (%s)" % (v, bad[v]))
            out[v] = None
        else:
            out[v] = _med(res[v])
            parts.append("draftbox-run --mode %s -- true %.3fs (%.1fx)" % (v, out[v], out[v] / b))
    out["text"] = "; ".join(parts)
    if len(bad) == len(variants):
        out["unavailable"] = "draftbox-run -- true fails: " + "; ".join(bad.values())
    return out


def _control(suite, d, args, log):
    n = suite.man["sizes"]["ctl_files"]
    reps = 2 if args.quick else 3
    diff = {"draftfs": [], "find": [], "ratios": []}
    commit = {"draftfs": [], "rsync": [], "ratios": []}
    derr = cerr = None
    log("session: diff and commit of %d files" % n)
    for rep in range(reps):
        # diff: N changed lower files.
        base = suite.scratch()
        lower = os.path.join(base, "lower")
        _mkfiles(lower, n, 200)
        m = suite.mount(d, lower=lower)
        try:
            for dirpath, _, files in os.walk(m.root):
                for f in files:
                    with open(os.path.join(dirpath, f), "ab") as fh:
                        fh.write(b"z")
            upper = os.path.join(m.scratch, "upper")
            if derr is None:
                _drop()
                t1, r = _timed([d.binary, "diff", m.root], stdout=subprocess.PIPE)
                ok = r.returncode == 0
                if ok:
                    try:
                        doc = json.loads(r.stdout)
                        got = len(doc.get("changes", []))
                        if got < n:
                            derr = "draftfs diff listed %d changes, expected %d" % (got, n)
                    except ValueError:
                        derr = "draftfs diff output is not JSON"
                else:
                    derr = "draftfs diff: exit %d: %s" % (r.returncode,
                                                          r.stderr.decode(errors="replace").strip()[-200:])
                if derr is None:
                    _drop()
                    t2, r2 = _timed(["find", upper, "-ls"])
                    diff["draftfs"].append(t1)
                    diff["find"].append(t2)
                    diff["ratios"].append(t1 / t2)
        finally:
            suite.umount(m)
            subprocess.run(["rm", "-rf", base])
        # commit: N new small files.
        if cerr is None:
            base = suite.scratch()
            lower = os.path.join(base, "lower")
            dest = os.path.join(base, "rsync-dest")
            os.makedirs(lower)
            os.makedirs(dest)
            m = suite.mount(d, lower=lower)
            try:
                _mkfiles(os.path.join(m.root, "new"), n, 2048)
                upper = os.path.join(m.scratch, "upper")
                _drop()
                t2, r2 = _timed(["rsync", "-a", os.path.join(upper, "new") + "/", os.path.join(dest, "new") + "/"])
                _drop()
                t1, r = _timed([d.binary, "commit", m.root])
                if r.returncode != 0:
                    cerr = "draftfs commit: exit %d: %s" % (r.returncode,
                                                            r.stderr.decode(errors="replace").strip()[-200:])
                else:
                    got = sum(len(f) for _, _, f in os.walk(os.path.join(lower, "new")))
                    if got != n:
                        cerr = "draftfs commit left %d of %d files in the lower" % (got, n)
                    else:
                        commit["draftfs"].append(t1)
                        commit["rsync"].append(t2)
                        commit["ratios"].append(t1 / t2)
            finally:
                suite.umount(m)
                subprocess.run(["rm", "-rf", base])
        if derr and cerr:
            break
    out = []
    for name, res, err, other in (("diff", diff, derr, "find"), ("commit", commit, cerr, "rsync")):
        if err:
            out.append({"unavailable": "not available yet (%s)" % err})
            continue
        r = _med(res["ratios"])
        res["ratio"] = r
        res["text"] = ("draftfs %s %.3fs vs %s %.3fs: %.2fx (%d files)"
                       % (name, _med(res["draftfs"]), "find -ls of the upper" if other == "find" else "rsync -a",
                          _med(res[other]), r, n))
        out.append(res)
    return out[0], out[1]


def run_memory(suite, active, unavailable, args, log):
    """RSS of each FUSE daemon over stat walks of the wide tree."""
    out = {}
    wide = suite.man["wide"]
    for impl in active:
        if not impl.fuse or impl.name == "fo-default":
            continue
        log("memory: %s over %d entries" % (impl.name, suite.man["wide_entries"]))
        try:
            out[impl.name] = _memory_one(suite, impl, wide)
        except Exception as e:
            out[impl.name] = {"unavailable": "failed: %s" % e}
            suite.failures.append("memory on %s: %s" % (impl.name, e))
    if "draftfs" in unavailable:
        out["draftfs"] = {"unavailable": _reason(unavailable, "draftfs")}
    return out


def _memory_one(suite, impl, wide):
    """One daemon over @wide: a walk, then three more after dropping caches."""
    m = suite.mount(impl, lower=wide)
    try:
        _drop()
        rss0, _ = m.rss()
        walks = []
        for k in range(4):
            if k:
                _drop()
            r = subprocess.run(["find", ".", "-ls"], cwd=m.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if r.returncode != 0:
                raise RuntimeError("find: %s" % r.stderr.decode(errors="replace").strip()[-200:])
            n = r.stdout.count(b"\n") - 1
            if k == 0:
                rss1, _ = m.rss()
            walks.append(m.rss()[0])
        _, hwm = m.rss()
        return {
            "entries": n, "rss0_kib": rss0, "rss1_kib": rss1, "hwm_kib": hwm,
            "delta_kib": rss1 - rss0, "bytes_per_inode": (rss1 - rss0) * 1024.0 / max(1, n),
            "walks_kib": walks, "growth_kib": walks[-1] - walks[0],
        }
    finally:
        suite.umount(m)


def run_profile(suite, active, wls, args, log):
    """perf samples of a FUSE daemon (draftfs by default) over read-mostly workloads; returns the report text."""
    d = next((i for i in active if i.name == args.profile_impl), None)
    if d is None or not d.fuse:
        return "%s not available" % args.profile_impl
    if subprocess.run(["perf", "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        return "perf not installed (linux-perf)"
    res = {}
    for w in wls:
        if w.name not in ("stat_all", "read_all", "git_status", "create_small", "copy_up_big", "metadata_mix",
                          "build"):
            continue
        m = suite.mount(d)
        data = os.path.join(suite.base, "perf-%s.data" % w.name)
        try:
            _drop()
            perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-g",
                                     "-p", str(m.pid), "-o", data], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(2)  # perf needs a moment to attach to every thread
            for _, argv in w.phases:
                subprocess.run(argv, cwd=m.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            perf.send_signal(signal.SIGINT)
            try:
                perf.wait(timeout=60)
            except subprocess.TimeoutExpired:
                perf.kill()
                perf.wait()
        finally:
            suite.umount(m)
        r = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "dso,symbol",
                            "-g", "none", "--percent-limit", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        lines = [x.rstrip(" -") for x in r.stdout.splitlines() if x.strip() and not x.startswith("#")]
        r = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "dso",
                            "-g", "none", "--percent-limit", "0.5"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        dsos = [x.rstrip(" -") for x in r.stdout.splitlines() if x.strip() and not x.startswith("#")]
        res[w.name] = {"by_dso": dsos[:8], "top": lines[:25], "syscalls": _trace(suite, d, w)}
        log("profile %s:\n  %s\n  %s\n  syscalls (calls, system ms): %s"
            % (w.name, "\n  ".join(dsos[:8]), "\n  ".join(lines[:15]),
               ", ".join("%s %d %.0f" % (k, c, ms) for k, c, ms in res[w.name]["syscalls"][:10])))
    return res


def _trace(suite, d, w):
    """Runs @w once more on a fresh mount under `strace -c -f` (all daemon threads); returns
    [(syscall, calls, ms of system time)], busiest first. strace slows the daemon down: only the
    counts mean much."""
    m = suite.mount(d)
    out = os.path.join(suite.base, "trace-%s.txt" % w.name)
    try:
        _drop()
        tr = subprocess.Popen(["strace", "-c", "-f", "-p", str(m.pid), "-o", out],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        for _, argv in w.phases:
            subprocess.run(argv, cwd=m.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tr.send_signal(signal.SIGINT)
        try:
            tr.wait(timeout=20)
        except subprocess.TimeoutExpired:
            tr.kill()
            tr.wait()
    finally:
        suite.umount(m)
    tot = {}
    try:
        with open(out) as f:
            for line in f:
                # strace -c: % time, seconds, usecs/call, calls, [errors,] syscall
                p = line.split()
                if len(p) >= 5 and p[3].isdigit() and p[0][0].isdigit() and p[-1] != "total":
                    tot[p[-1]] = (int(p[3]), float(p[1]) * 1000)
    except OSError:
        return []
    return sorted(((k, c, ms) for k, (c, ms) in tot.items()), key=lambda x: -x[2])
