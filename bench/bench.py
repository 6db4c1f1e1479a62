# SPDX-License-Identifier: LGPL-2.1-or-later
"""draftbox benchmark suite: the same workloads over plain dir, kernel
overlayfs, fuse-overlayfs (default and fast options) and draftfs.

Run as root through bench/run (or ./dev bench). Every workload starts cold:
a fresh mount over the cached lower tree (fresh upper), sync, drop caches.
Implementations are interleaved within each repetition and their order
rotates between repetitions. Ratios to kernel overlayfs are computed pair
by pair within a repetition; the tables show medians. Numbers never make
the suite fail; a workload that fails or returns wrong results does
(exit 1), and so does a broken set-up.
"""
import argparse
import datetime
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fusereq  # noqa: E402
import impls  # noqa: E402
import pagereport  # noqa: E402
import report  # noqa: E402
import session  # noqa: E402
import tree  # noqa: E402
import workloads  # noqa: E402

REPO = os.path.dirname(HERE)


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def rm_rf(path):
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=True)


# The implementations the targets compare pair by pair: run next to each other in every repetition.
PAIRED = ("ovl", "fo-fast", "draftfs")


def run_order(active, k):
    """The order of @active for the k-th (repetition + workload) step. The machine has slow stretches
    of tens of seconds, and two samples close in time are slow together: a pair ratio is only as good as its
    two samples are near. So kernel overlayfs, fo-fast and draftfs run as one block, and the block goes first
    on even steps and last on odd ones; the others (plain, fo-default, variants) rotate around it. Within the
    block a rotation on even steps and its reverse on odd ones: over any run of steps each of a pair runs
    first as often as the other, give or take one (the first sample after a switch of workload tends to be
    slower, so a pair always in one order would carry that into its ratio), and no implementation is always
    first after the cache drop."""
    block = [i for i in active if i.name in PAIRED]
    rest = [i for i in active if i.name not in PAIRED]
    if block:
        b = (k // 2) % len(block)
        block = block[b:] + block[:b]
        if k % 2:
            block.reverse()
    if rest:
        r = (k // 2) % len(rest)
        rest = rest[r:] + rest[:r]
    return block + rest if k % 2 == 0 else rest + block


class Suite:
    def __init__(self, args, man):
        self.args = args
        self.man = man
        self.lower = man["lower"]
        self.base = tempfile.mkdtemp(prefix="draftbench.", dir=args.tmpdir)
        self.plain_dir = os.path.join(man["top"], "plain")
        self.failures = []
        self.live = []       # mounts to clean up on the way out
        self.n = 0

    # The plain copy is the lower itself, made writable: sync it back after a change.
    def sync_plain(self):
        big = os.path.join(self.plain_dir, "big.bin")
        want = self.man["sizes"]["big_bytes"]
        try:
            if os.stat(big).st_size > want:
                os.truncate(big, want)
                os.utime(big, (tree.FIXED_MTIME, tree.FIXED_MTIME))
        except FileNotFoundError:
            pass
        subprocess.run(["rsync", "-a", "--delete", self.lower + "/", self.plain_dir + "/"], check=True)

    def scratch(self):
        self.n += 1
        p = os.path.join(self.base, "r%04d" % self.n)
        os.mkdir(p)
        return p

    def mount(self, impl, lower=None):
        s = self.scratch()
        m = impl.mount(lower or self.lower, s)
        m.scratch = s
        self.live.append(m)
        return m

    def umount(self, m, discard=True):
        try:
            m.umount()
        finally:
            if m in self.live:
                self.live.remove(m)
            if discard:
                rm_rf(m.scratch)

    def cleanup(self):
        for m in list(self.live):
            try:
                if m.proc and m.proc.poll() is None:
                    impls.force_umount(m.root)
                    m.proc.kill()
                    m.proc.wait()
                elif m.impl.name == "ovl":
                    impls.force_umount(m.root)
            except Exception:
                pass
        # Never rm -rf across a mount that is still there.
        for dirpath, dirnames, _ in os.walk(self.base):
            for d in dirnames:
                if impls.mounted(os.path.join(dirpath, d)):
                    impls.force_umount(os.path.join(dirpath, d))
        rm_rf(self.base)

    def prime(self, impl, wl):
        """Reads @wl's prime files from the directory @impl serves them from (the plain copy or the
        lower), outside any mount. drop_caches empties this kernel's page cache but not the host's
        cache of the VM's disk: without this, whichever implementation reads the big file first
        after another workload pays the host's disk (2 s against 0.4 s here) and the others do not.
        Read just before the drop, the file is as warm on the host for every implementation."""
        top = self.plain_dir if impl.name == "plain" else self.lower
        for rel in wl.prime:
            with open(os.path.join(top, rel), "rb", buffering=0) as f:
                while f.read(1 << 20):
                    pass

    def run_workload(self, impl, wl):
        """Mounts @impl cold, runs @wl's phases. Returns ({phase: s}, {phase: waits}, cpu_s) or raises.
        A phase's waits are the voluntary context switches of its processes: each synchronous FUSE
        request, and each wait for the disk, is one."""
        m = self.mount(impl)
        ok = False
        try:
            self.prime(impl, wl)
            drop_caches()
            cpu0 = m.cpu()
            times = {}
            waits = {}
            outs = {}
            pin = self.args.pin
            for pname, argv in wl.phases:
                # The workload's own processes only: nothing else is reaped while it runs.
                ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.monotonic()
                r = subprocess.run(argv, cwd=m.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   timeout=self.args.timeout,
                                   preexec_fn=None if pin is None else lambda: os.sched_setaffinity(0, {pin}))
                times[pname] = time.monotonic() - t0
                waits[pname] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_nvcsw - ru0.ru_nvcsw
                if r.returncode != 0:
                    raise RuntimeError("%s: exit %d: %s" % (pname, r.returncode,
                                                           r.stderr.decode(errors="replace").strip()[-300:]))
                outs[pname] = r.stdout.decode(errors="replace")
            cpu1 = m.cpu()
            if wl.check:
                wl.check(m.root, outs)
            ok = True
            cpu = (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None
            return times, waits, cpu
        finally:
            try:
                self.umount(m)
            finally:
                if impl.name == "plain" and (wl.mutates or not ok):
                    self.sync_plain()


def main():
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny tree, 2 repetitions (CI; a few minutes)")
    ap.add_argument("--scale", type=float, help="tree size factor (1 = the full sizes)")
    ap.add_argument("--reps", type=int, help="repetitions (default 3, quick 2)")
    ap.add_argument("--workloads", help="comma-separated subset of workloads")
    ap.add_argument("--impls", help="comma-separated subset of plain,ovl,fo-default,fo-fast,draftfs; "
                    "the variants draftfs-devfuse (uring=off), draftfs-nosync (fsync=0), draftfs-normal "
                    "(ring_sched=normal) and draftfs-ptupper (passthrough=upper) only when named")
    ap.add_argument("--build-dir", default=os.environ.get("DRAFTBOX_BUILD_DIR") or os.path.join(REPO, "build"),
                    help="where fs/draftfs and launcher/draftbox-run are (a default, non-ASan build)")
    ap.add_argument("--base-build-dir", metavar="DIR",
                    help="also run draftfs-base, the draftfs of another build (an A/B of a change)")
    ap.add_argument("--cache-dir", default=os.path.join(HERE, "cache"))
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--tmpdir", default="/var/tmp", help="where scratch uppers go (same fs as the cache is best)")
    ap.add_argument("--no-session", action="store_true", help="skip the session-level figures")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory walk")
    ap.add_argument("--profile", action="store_true", help="also perf-record the draftfs daemon (see docs)")
    ap.add_argument("--profile-impl", default="draftfs", help="which FUSE daemon --profile records")
    ap.add_argument("--requests", action="store_true",
                    help="also count the FUSE requests of each workload by opcode (one more run per FUSE "
                    "implementation, with the kernel's fuse:fuse_request_send event)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="make -j for the build")
    ap.add_argument("--max-minutes", type=float,
                    help="start no new repetition once the projected end would pass this budget")
    ap.add_argument("--timeout", type=int, default=900, help="per-phase timeout in seconds")
    ap.add_argument("--keep-page-reporting", action="store_true",
                    help="leave the VM's free page reporting as it is (by default it is held back for the run "
                    "where the kernel allows it: bench/pagereport.py)")
    ap.add_argument("--pin", type=int, metavar="CPU",
                    help="run every workload bound to this CPU (a diagnostic: on a VM whose idle vCPUs halt, it "
                    "shows what a FUSE round trip costs without the wake-up of the other vCPU; not the "
                    "issue's measurement, and reported apart: latest-sN-pinCPU.md)")
    args = ap.parse_args()

    if os.geteuid() != 0:
        print("bench/run: needs root (mounts, drop_caches)", file=sys.stderr)
        return 2
    if args.pin is not None and args.pin not in os.sched_getaffinity(0):
        print("bench/run: --pin %d: not a CPU this process may run on (%s)"
              % (args.pin, ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))), file=sys.stderr)
        return 2
    scale = args.scale if args.scale is not None else (0.1 if args.quick else 1.0)
    reps = args.reps if args.reps is not None else (2 if args.quick else 3)
    args.build_dir = os.path.abspath(args.build_dir)
    for tool in ("fio", "rsync", "git", "make", "cc", "tar", "find", "grep"):
        if not shutil.which(tool):
            print("bench/run: %s is missing (./dev deps installs it)" % tool, file=sys.stderr)
            return 2
    subprocess.run(["modprobe", "fuse"], stderr=subprocess.DEVNULL)
    subprocess.run(["modprobe", "overlay"], stderr=subprocess.DEVNULL)

    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.monotonic()
    load0 = os.getloadavg()
    os.makedirs(args.cache_dir, exist_ok=True)
    man = tree.ensure(args.cache_dir, scale, log)
    wls = workloads.all_workloads(man, args.jobs)
    if args.workloads:
        want = args.workloads.split(",")
        unknown = set(want) - {w.name for w in wls}
        if unknown:
            print("bench/run: unknown workload(s) %s" % ",".join(sorted(unknown)), file=sys.stderr)
            return 2
        wls = [w for w in wls if w.name in want]

    suite = Suite(args, man)
    all_impls = [impls.Plain(suite.plain_dir), impls.KernelOverlay(), impls.FuseOverlayfs(False),
                 impls.FuseOverlayfs(True), impls.Draftfs(args.build_dir)]
    if args.base_build_dir:
        all_impls.append(impls.Draftfs(os.path.abspath(args.base_build_dir), "draftfs-base",
                                       label="draftfs (%s)" % args.base_build_dir))
    if args.impls:
        want = args.impls.split(",")
        for name, opts in impls.DRAFTFS_VARIANTS.items():
            if name in want:
                all_impls.append(impls.Draftfs(args.build_dir, name, opts))
        all_impls = [i for i in all_impls if i.name in want or i.name in ("ovl", "draftfs-base")]
    active = []
    unavailable = {}
    for i in all_impls:
        why = i.available()
        if why:
            unavailable[i.name] = why
            log("%s: %s" % (i.name, why))
        else:
            active.append(i)

    def on_signal(sig, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)

    res = {
        "started": started.isoformat(timespec="seconds"),
        "machine": report.machine(args.tmpdir),
        "scale": scale, "reps": reps, "manifest": man,
        "impls": [i.name for i in all_impls], "labels": {i.name: i.label for i in all_impls},
        "unavailable": unavailable,
        "workloads": [{"name": w.name, "phases": w.phase_names, "desc": w.desc, "extra": w.extra} for w in wls],
        "times": {}, "waits": {}, "cpu": {}, "errors": [], "load": [list(load0)], "pin": args.pin,
    }
    phases = [p for w in wls for p in w.phase_names]
    for p in phases:
        res["times"][p] = {i.name: [None] * reps for i in all_impls}
        res["waits"][p] = {i.name: [None] * reps for i in all_impls}
    for w in wls:
        res["cpu"][w.name] = {i.name: [None] * reps for i in all_impls}

    hold = pagereport.Hold()
    if args.keep_page_reporting:
        hold.state = "free page reporting left as it is (--keep-page-reporting)"
    else:
        hold.hold(log)
    res["page_reporting"] = hold.state
    rc = 0
    try:
        if any(i.name == "plain" for i in active):
            log("syncing the plain copy")
            suite.sync_plain()
        # Probe each FUSE implementation once: a daemon that cannot mount is reported, not timed.
        for i in list(active):
            if i.fuse:
                try:
                    m = suite.mount(i)
                    res.setdefault("mount_probe", {})[i.name] = m.mount_seconds
                    suite.umount(m)
                except Exception as e:
                    unavailable[i.name] = "mount failed: %s" % e
                    res["errors"].append("%s: mount failed: %s" % (i.name, e))
                    active.remove(i)
                    log("%s: mount failed: %s" % (i.name, e))
                    if i.name == "draftfs":
                        rc = 1
        nrt = 2000 if args.quick else 20000
        res["switch"] = [session.switch_costs(nrt)]
        log("%d workloads x %d implementations (%s) x %d repetitions, scale %g"
            % (len(wls), len(active), ",".join(i.name for i in active), reps, scale))
        k = 0
        t_reps = time.monotonic()
        for rep in range(reps):
            if rep and args.max_minutes:
                per = (time.monotonic() - t_reps) / rep
                # what follows the repetitions: session figures and the memory walk (~3 min at scale 1)
                tail = (0 if args.no_session else 120 * scale) + (0 if args.no_memory else 60 * scale)
                if time.monotonic() - t_start + per + tail > args.max_minutes * 60:
                    log("stopping after %d repetitions: another one would pass --max-minutes %g"
                        % (rep, args.max_minutes))
                    res["reps_done"] = rep
                    break
            for wi, w in enumerate(wls):
                order = run_order(active, rep + wi)
                for impl in order:
                    k += 1
                    try:
                        times, waits, cpu = suite.run_workload(impl, w)
                    except KeyboardInterrupt:
                        raise
                    except Exception as e:
                        msg = "rep %d %s on %s: %s" % (rep + 1, w.name, impl.name, e)
                        log("FAILED " + msg)
                        res["errors"].append(msg)
                        rc = 1
                        continue
                    for p, t in times.items():
                        res["times"][p][impl.name][rep] = t
                        res["waits"][p][impl.name][rep] = waits[p]
                    res["cpu"][w.name][impl.name][rep] = cpu
                    log("rep %d/%d %-12s %-10s %s" % (rep + 1, reps, w.name, impl.name,
                        " ".join("%.3fs" % t for t in times.values())))
            res["load"].append(list(os.getloadavg()))
        res["switch"].append(session.switch_costs(nrt))

        for key, enabled, fn in (("session", not args.no_session,
                                  lambda: session.run_session(suite, active, unavailable, args, log)),
                                 ("memory", not args.no_memory,
                                  lambda: session.run_memory(suite, active, unavailable, args, log)),
                                 ("profile", args.profile,
                                  lambda: session.run_profile(suite, active, wls, args, log)),
                                 ("requests", args.requests,
                                  lambda: fusereq.run_requests(suite, active, wls, args, log, drop_caches))):
            if not enabled:
                continue
            try:
                res[key] = fn()
            except KeyboardInterrupt:
                raise
            except Exception as e:
                msg = "%s: %s: %s" % (key, type(e).__name__, e)
                log("FAILED " + msg)
                res["errors"].append(msg)
                rc = 1
        if suite.failures:
            res["errors"].extend(suite.failures)
            rc = 1
    except KeyboardInterrupt:
        log("interrupted")
        rc = 130
    finally:
        try:
            suite.cleanup()
        finally:
            hold.release(log)

    res["seconds"] = round(time.monotonic() - t_start, 1)
    res["load"].append(list(os.getloadavg()))
    summary = report.summarize(res)
    text = report.render_text(res, summary)
    print(text)
    os.makedirs(args.results_dir, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    kind = ("quick" if args.quick else "s%g" % scale) + ("" if args.pin is None else "-pin%d" % args.pin)
    out = os.path.join(args.results_dir, "%s-%s.json" % (stamp, kind))
    with open(out, "w") as f:
        json.dump({"results": res, "summary": summary}, f, indent=1, default=str)
    with open(os.path.join(args.results_dir, "latest-%s.md" % kind), "w") as f:
        f.write(report.render_markdown(res, summary))
    log("results in %s (markdown: latest-%s.md)" % (out, kind))
    if res["errors"]:
        log("%d failure(s):" % len(res["errors"]))
        for e in res["errors"]:
            log("  " + e)
    return rc


if __name__ == "__main__":
    sys.exit(main())
