# SPDX-License-Identifier: LGPL-2.1-or-later
"""Turns raw benchmark results into medians, ratios, targets and tables.

Ratios are computed pair by pair: for each repetition, t(impl) / t(ovl) of
that same repetition; the table shows the median of those ratios. Targets
are informational (PASS/MISS) and never change the exit status.
"""
import math
import os
import platform
import statistics
import subprocess

import fusereq


def scratch_fs(path):
    """The filesystem type under @path; for ext4, whether it has a journal. Without one (seen on
    some VMs' root disks) ext4 skips every inode freed in the last ~30 s when it allocates one
    (recently_deleted()), so creates right after a large rm get slower for every implementation."""
    out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", path], stdout=subprocess.PIPE,
                         text=True).stdout.split()
    if not out:
        return "?"
    if out[0] != "ext4" or len(out) < 2:
        return out[0]
    dev = os.path.basename(os.path.realpath(out[1].split("[", 1)[0]))  # a bind mount's "/dev/x[/dir]"
    try:
        journaled = any(j.rsplit("-", 1)[0] == dev for j in os.listdir("/proc/fs/jbd2"))
    except OSError:
        journaled = False
    return "ext4" if journaled else "ext4 without a journal"


def machine(scratch):
    """A one-line description of this machine, with the filesystem of @scratch (the uppers' dir)."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 30
    fs = scratch_fs(scratch)
    try:
        with open("/sys/module/fuse/parameters/enable_uring") as f:
            uring = "FUSE io_uring %s" % ("on" if f.read().strip() in ("Y", "1") else "off")
    except OSError:
        uring = "no FUSE io_uring"
    return "%d x %s, %d GiB RAM, kernel %s (%s), scratch on %s" % (os.cpu_count(), cpu, mem, platform.release(),
                                                                 uring, fs)


def _med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _pair_ratios(a, b):
    """t(a) / t(b) of each repetition where both ran."""
    return [t / r for t, r in zip(a, b) if t is not None and r]


def _reps_within(rs, lim, strict=False):
    """How many of the per-repetition ratios @rs meet @lim: ", K of N repetitions under". The verdict goes by
    the median; this says whether the machine's spread decided it (a median just past a limit with most
    repetitions on the other side is noise, not a measurement)."""
    if not rs:
        return ""
    k = sum(1 for r in rs if (r < lim if strict else r <= lim))
    return "; %d of %d repetitions %s %.2fx" % (k, len(rs), "under" if strict else "at or under", lim)


def _geomean(xs):
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _floor(res, s):
    """The request floor of each FUSE implementation on each workload: the ratio to kernel overlayfs that
    its waits alone impose, (ovl s + (waits - ovl's waits) x request) / ovl s. Each synchronous request
    makes the caller wait once, and costs at least session.switch_costs()'s "request" on top of the work
    kernel overlayfs does too; the lower of the figures measured before and after the repetitions is
    used. Returns (the costs used, {phase: {impl: ratio}}); (None, {}) for older result files."""
    sw = [x for x in res.get("switch") or [] if x]
    if not sw:
        return None, {}
    best = min(sw, key=lambda x: x["request"])
    return best, _priced_waits(s, lambda i: best["request"])


def _priced_waits(s, cost_us):
    """{phase: {impl: (ovl s + (waits - ovl's waits) x cost_us(impl)) / ovl s}} for the FUSE implementations
    whose cost_us() is not None; phases without kernel overlayfs's time or waits are left out."""
    out = {}
    for p, by in s["waits"].items():
        base_t, base_w = s["median"].get(p, {}).get("ovl"), by.get("ovl")
        if not base_t or base_w is None:
            continue
        row = {}
        for i, w in by.items():
            us = cost_us(i) if i not in ("plain", "ovl") and w is not None else None
            if us is not None:
                row[i] = (base_t + max(0.0, w - base_w) * us / 1e6) / base_t
        out[p] = row
    return out


def _at_cost(res, s):
    """The same ratio at the cost a cheap request measurably has on each mount: its uncached getxattr
    (session.py's round trips) less the same call on the plain directory. Where the request floor says
    what the waits cost at the least, this says what they cost on that transport, the daemon's answer to
    a trivial request included; the rest of an implementation's time is its work per request. Returns
    {phase: {impl: ratio}}; {} without the session figures (--no-session, older result files)."""
    rt = (res.get("session") or {}).get("round_trip") or {}
    base_rt = rt.get("plain")
    if base_rt is None:
        return {}
    out = _priced_waits(s, lambda i: None if rt.get(i) is None else max(0.0, rt[i] - base_rt))
    return {p: by for p, by in out.items() if by}


AT_COST_TITLE = ("the same at the cost a cheap request has on each mount (an uncached getxattr there, less "
                 "the same call on the plain directory; session-level figures): what the waits cost on that "
                 "transport, the rest being the work of the requests")


def floor_title(sw):
    return ("request floor: the ratio to kernel overlayfs that the waits alone impose, (ovl s + (waits - "
            "ovl's waits) x %.1f us) / ovl s. %.1f us is what a request adds at least: two context switches "
            "and the daemon's system call (a pipe round trip between two processes on one CPU, %.1f us, less "
            "1.5 times a write and read of a pipe in one process, %.1f us)"
            % (sw["request"], sw["request"], sw["round_trip"], sw["pair"]))


def summarize(res):
    """Returns medians, ratios, geomeans and the target verdicts of @res."""
    impls = res["impls"]
    s = {"median": {}, "ratio": {}, "rep_ratios": {}, "cpu": {}, "geomean": {}, "worst": {}, "targets": []}
    for p, by in res["times"].items():
        s["median"][p] = {i: _med(by[i]) for i in impls}
        base = by.get("ovl")
        s["rep_ratios"][p] = {i: _pair_ratios(by[i], base) if base else [] for i in impls}
        s["ratio"][p] = {i: _med(rs) for i, rs in s["rep_ratios"][p].items()}
    for w, by in res["cpu"].items():
        s["cpu"][w] = {i: _med(by[i]) for i in impls}
    # Older result files have no waits.
    s["waits"] = {p: {i: _med(by[i]) for i in impls} for p, by in res.get("waits", {}).items()}
    s["switch"], s["floor"] = _floor(res, s)
    s["at_cost"] = _at_cost(res, s)
    # Extra rows (Workload.extra): reported, kept out of the geomean, the worst case and the fo-fast verdict.
    # A list, not a set: it goes into the JSON of the run, and json cannot write a set.
    s["extra"] = extra = sorted(p for w in res.get("workloads", []) if w.get("extra") for p in w["phases"])
    for i in impls:
        rs = {p: s["ratio"][p][i] for p in s["ratio"] if s["ratio"][p][i] is not None and p not in extra}
        s["geomean"][i] = _geomean(rs.values())
        s["worst"][i] = max(rs.items(), key=lambda kv: kv[1]) if rs else None

    T = s["targets"]

    def target(name, value, ok, fmt="%.2fx"):
        if value is None or ok is None:
            T.append({"target": name, "value": None, "verdict": "n/a"})
        else:
            T.append({"target": name, "value": fmt % value if isinstance(value, float) else str(value),
                      "verdict": "PASS" if ok else "MISS"})

    d = "draftfs"
    have = d in impls and any(s["ratio"][p].get(d) is not None for p in s["ratio"])
    # Phases where draftfs failed every repetition while the reference ran: these count as misses.
    failed = [p for p in s["median"] if d in impls and d not in res["unavailable"]
              and s["median"][p].get(d) is None and s["median"][p].get("ovl") is not None]
    s["failed"] = failed
    if failed:
        target("draftfs completes every workload", "failed: " + ",".join(failed), False)
    if have:
        # Pair by pair within a repetition, as every other ratio here: the disk drifts between repetitions.
        vs_fo_reps = {}
        for p, by in res["times"].items():
            rs = _pair_ratios(by[d], by["fo-fast"]) if d in by and "fo-fast" in by else []
            if rs:
                vs_fo_reps[p] = rs
        s["vs_fo_fast"] = vs_fo = {p: _med(rs) for p, rs in vs_fo_reps.items()}
        slower = ["%s (%.2fx%s)" % (p, r, _reps_within(vs_fo_reps[p], 1.0, strict=True))
                  for p, r in vs_fo.items() if r >= 1.0 and p not in extra]
        compared = [p for p in vs_fo if p not in extra]
        if compared:
            target("faster than fuse-overlayfs fast options on every workload",
                   "slower on: " + ", ".join(slower + failed) if slower or failed
                   else "all %d faster" % len(compared), not slower and not failed)
        else:
            target("faster than fuse-overlayfs fast options on every workload", None, None)
        g = s["geomean"][d]
        note = " without the failed" if failed else ""
        target("geometric mean <= 1.5x kernel", g, g is not None and g <= 1.5 and not failed,
               fmt="%.2fx" + note)
        w = s["worst"][d]
        fl = s["floor"].get(w[0], {}).get(d) if w else None
        fl = "" if fl is None else "; its request floor here %.2fx" % fl
        ac = s["at_cost"].get(w[0], {}).get(d) if w else None
        fl += "" if ac is None else ", %.2fx at this mount's request cost" % ac
        if w:
            fl += _reps_within(s["rep_ratios"][w[0]][d], 3.0)
        target("no workload above 3x kernel", w[1] if w else None, w is not None and w[1] <= 3.0 and not failed,
               fmt="worst %%.2fx (%s)%s%s" % (w[0] if w else "", fl.replace("%", "%%"), note))
        for p, lim in (("git_status_1", 2.0), ("git_status_2", 2.0), ("seq_read", 1.1), ("rand_read", 1.1)):
            r = s["ratio"].get(p, {}).get(d)
            reps = _reps_within(s["rep_ratios"].get(p, {}).get(d), lim)
            target("%s <= %.1fx kernel" % (p, lim), r, None if r is None else r <= lim,
                   fmt="%.2fx" + reps.replace("%", "%%"))
        r = s["ratio"].get("copy_up_big", {}).get(d)
        target("copy_up_big <= 0.5x kernel", r, None if r is None else r <= 0.5)
    else:
        for n in ("faster than fuse-overlayfs fast options on every workload", "geometric mean <= 1.5x kernel",
                  "no workload above 3x kernel", "git_status <= 2x kernel", "seq_read/rand_read <= 1.1x kernel",
                  "copy_up_big <= 0.5x kernel"):
            target(n, None, None)
    mem = (res.get("memory") or {}).get(d)
    if mem and mem.get("bytes_per_inode") is not None:
        target("<= 300 bytes per cached inode", float(mem["bytes_per_inode"]),
               mem["bytes_per_inode"] <= 300, fmt="%.0f B")
        target("no RSS growth across repeated walks", float(mem["growth_kib"]),
               mem["growth_kib"] <= max(256, 0.05 * mem["delta_kib"]), fmt="%+.0f KiB")
    else:
        target("<= 300 bytes per cached inode", None, None)
        target("no RSS growth across repeated walks", None, None)
    ses = res.get("session") or {}
    n = res["manifest"]["sizes"]["ctl_files"]
    for key, name, lim in (("diff", "diff of %d changes <= 2x find -ls of the upper" % n, 2.0),
                           ("commit", "commit of %d files <= 1.5x rsync -a" % n, 1.5)):
        r = (ses.get(key) or {}).get("ratio")
        target(name, r, None if r is None else r <= lim)
    return s


EXTRA_WHY = {
    "copy_up_big_fsync": "fo-fast runs with fsync=0, which ignores the fsync",
    "ls_l_1": "not one of the issue's workloads",
    "ls_l_2": "not one of the issue's workloads",
}


WAITS_TITLE = ("waits of the workload's processes (voluntary context switches, median): each synchronous FUSE "
               "request is one, and so is each wait for the disk")


def pin_note(res):
    if res.get("pin") is None:
        return None
    return ("Every workload ran bound to CPU %d (--pin): a diagnostic, not the issue's measurement." % res["pin"])


def extra_note(s):
    return "* not in the geomean, the worst case or the fo-fast comparison: " + "; ".join(
        "%s (%s)" % (p, EXTRA_WHY.get(p, "reported only")) for p in sorted(s["extra"]))


def _f(x, fmt="%.3f"):
    return "-" if x is None else fmt % x


def _rows(res, s):
    impls = res["impls"]
    rows = []
    for p in res["times"]:
        name = p + " *" if p in s.get("extra", ()) else p
        rows.append((name, [s["median"][p][i] for i in impls], [s["ratio"][p][i] for i in impls]))
    return impls, rows


def render_text(res, s):
    """The console report."""
    impls, rows = _rows(res, s)
    out = []
    man = res["manifest"]
    out.append("")
    out.append("draftbox bench, %s, %s" % (res["started"], res["machine"]))
    if res.get("page_reporting"):
        out.append(res["page_reporting"])
    out.append("scale %g, %d repetitions, lower: %d entries + big.bin %d MiB; %.0fs total; "
               "load avg at start/end %.1f/%.1f"
               % (res["scale"], res.get("reps_done", res["reps"]), man["entries"], man["sizes"]["big_bytes"] >> 20,
                  res.get("seconds", 0), res["load"][0][0], res["load"][-1][0]))
    if pin_note(res):
        out.append(pin_note(res))
    for i, why in res["unavailable"].items():
        out.append("%s: %s" % (i, why))
    w = max(14, max(len(r[0]) for r in rows) + 1) if rows else 14
    cw = max([12] + [len(i) + 2 for i in impls])  # column width: the longest implementation name fits
    hdr = "%-*s" % (w, "workload") + "".join("%*s" % (cw, i) for i in impls)
    out.append("")
    out.append("median seconds")
    out.append(hdr)
    for p, med, _ in rows:
        out.append("%-*s" % (w, p) + "".join("%*s" % (cw, _f(x)) for x in med))
    out.append("")
    out.append("ratio to kernel overlayfs (median of per-repetition ratios)")
    out.append(hdr)
    for p, _, rat in rows:
        out.append("%-*s" % (w, p) + "".join("%*s" % (cw, _f(x, "%.2fx")) for x in rat))
    out.append("%-*s" % (w, "geomean") + "".join("%*s" % (cw, _f(s["geomean"][i], "%.2fx")) for i in impls))
    if s.get("extra"):
        out.append(extra_note(s))
    out.append("")
    if s.get("vs_fo_fast"):
        out.append("draftfs / fo-fast (median of per-repetition ratios)")
        for p, r in s["vs_fo_fast"].items():
            out.append("%-*s%*s" % (w, p, cw, _f(r, "%.2fx")))
        out.append("")
    out.append("FUSE daemon CPU seconds (median, user+sys of the daemon during the workload)")
    fi = [i for i in impls if i not in ("plain", "ovl")]
    out.append("%-*s" % (w, "workload") + "".join("%*s" % (cw, i) for i in fi))
    for wl, by in s["cpu"].items():
        out.append("%-*s" % (w, wl) + "".join("%*s" % (cw, _f(by[i])) for i in fi))
    if s["waits"]:
        out.append("")
        out.append(WAITS_TITLE)
        out.append(hdr)
        for p, by in s["waits"].items():
            out.append("%-*s" % (w, p) + "".join("%*s" % (cw, _f(by[i], "%.0f")) for i in impls))
    for key, title in (("floor", floor_title), ("at_cost", lambda _: AT_COST_TITLE)):
        if s.get(key):
            out.append("")
            out.append(title(s["switch"]))
            out.append("%-*s" % (w, "workload") + "".join("%*s" % (cw, i) for i in fi))
            for p, by in s[key].items():
                out.append("%-*s" % (w, p) + "".join("%*s" % (cw, _f(by.get(i), "%.2fx")) for i in fi))
    out.extend(_requests_text(res))
    out.extend(_session_lines(res))
    out.append("")
    out.append("targets (draftfs; informational)")
    for t in s["targets"]:
        out.append("  %-4s %-60s %s" % (t["verdict"], t["target"], t["value"] or ""))
    if res["errors"]:
        out.append("")
        out.append("FAILURES")
        out.extend("  " + e for e in res["errors"])
    return "\n".join(out)


def _requests_rows(res):
    """[(phase, impl, total, 'WRITE 1725, ...', lost)] of --requests, or a string saying why there are none,
    or None when it was not asked for."""
    rq = res.get("requests")
    if rq is None or isinstance(rq, str):
        return rq
    rows = []
    for p, by in rq.get("counts", {}).items():
        for i, counts in by.items():
            rows.append((p, i, sum(counts.values()), fusereq.summary(counts, 8),
                         rq.get("lost", {}).get(p, {}).get(i, 0)))
    return rows


REQUESTS_TITLE = ("FUSE requests sent to each daemon, by opcode (--requests: one more cold run of each workload, "
                  "the kernel's fuse:fuse_request_send event; FORGETs are not traced)")


def _requests_text(res):
    rows = _requests_rows(res)
    if rows is None:
        return []
    if isinstance(rows, str):
        return ["", "FUSE requests by opcode: " + rows]
    out = ["", REQUESTS_TITLE]
    for p, i, n, kinds, lost in rows:
        out.append("  %-14s %-12s %7d  %s%s" % (p, i, n, kinds, "  (%d events lost)" % lost if lost else ""))
    return out


def _requests_markdown(res):
    rows = _requests_rows(res)
    if rows is None:
        return []
    if isinstance(rows, str):
        return ["", "FUSE requests by opcode: " + rows + "."]
    out = ["", REQUESTS_TITLE + ":", "", "| workload | impl | requests | by opcode |", "|---|---|---|---|"]
    for p, i, n, kinds, lost in rows:
        out.append("| %s | %s | %d | %s%s |" % (p, i, n, kinds, " (%d events lost)" % lost if lost else ""))
    return out


def _session_lines(res):
    out = []
    ses = res.get("session")
    if ses is not None:
        out.append("")
        out.append("session-level (median seconds)")
        mt = ses.get("mount") or {}
        for i, v in mt.items():
            out.append("  mount time %-22s %s" % (i, _f(v) if not isinstance(v, str) else v))
        rt = ses.get("round_trip")
        if rt:
            out.append("  %-33s %s" % ("request (getxattr), us", ", ".join(
                "%s %.1f" % (k, v) for k, v in rt.items() if k != "syscall")
                + "; a getppid(2) from Python %.1f" % rt.get("syscall", 0)))
        for key in ("launcher", "diff", "commit"):
            v = ses.get(key)
            if v is None:
                continue
            if "unavailable" in v:
                out.append("  %-33s %s" % (key, v["unavailable"]))
            else:
                out.append("  %-33s %s" % (key, v["text"]))
    mem = res.get("memory")
    if mem is not None:
        out.append("")
        out.append("memory: daemon RSS over a stat walk of the wide tree")
        for i, v in mem.items():
            if "unavailable" in v:
                out.append("  %-12s %s" % (i, v["unavailable"]))
            else:
                out.append("  %-12s %d entries: RSS %d -> %d KiB (peak %d KiB), %.0f B/inode, "
                           "after repeated walks %s KiB"
                           % (i, v["entries"], v["rss0_kib"], v["rss1_kib"], v["hwm_kib"],
                              v["bytes_per_inode"], " ".join("%d" % x for x in v["walks_kib"])))
    return out


def render_markdown(res, s):
    """The tables for docs/performance.md."""
    impls, rows = _rows(res, s)
    man = res["manifest"]
    out = []
    out.append("Run %s on %s. Scale %g (%d entries in the lower, big.bin %d MiB), %d repetitions, "
               "%.0f s in total; load average %.1f at the start, %.1f at the end."
               % (res["started"], res["machine"], res["scale"], man["entries"], man["sizes"]["big_bytes"] >> 20,
                  res.get("reps_done", res["reps"]), res.get("seconds", 0), res["load"][0][0], res["load"][-1][0]))
    if res.get("page_reporting"):
        out.append("The VM's %s (bench/pagereport.py)." % res["page_reporting"])
    if pin_note(res):
        out.append(pin_note(res))
    out.append("")
    for i, why in res["unavailable"].items():
        out.append("- %s: %s" % (i, why))
    out.append("")
    out.append("| workload | " + " | ".join("%s s" % i for i in impls) + " | "
               + " | ".join("%s / ovl" % i for i in impls if i != "ovl") + " |")
    out.append("|---" * (1 + len(impls) + len(impls) - 1) + "|")
    for p, med, rat in rows:
        out.append("| %s | " % p + " | ".join(_f(x) for x in med) + " | "
                   + " | ".join(_f(x, "%.2fx") for i, x in zip(impls, rat) if i != "ovl") + " |")
    out.append("| **geomean** | " + " | ".join("" for _ in impls) + " | "
               + " | ".join(_f(s["geomean"][i], "**%.2fx**") for i in impls if i != "ovl") + " |")
    out.append("")
    if s.get("extra"):
        out.append(extra_note(s))
        out.append("")
    if s.get("vs_fo_fast"):
        out.append("draftfs / fo-fast, pair by pair within a repetition (median): "
                   + ", ".join("%s %.2fx" % kv for kv in s["vs_fo_fast"].items()) + ".")
        out.append("")
    fi = [i for i in impls if i not in ("plain", "ovl")]
    out.append("FUSE daemon CPU seconds during each workload (median):")
    out.append("")
    out.append("| workload | " + " | ".join(fi) + " |")
    out.append("|---" * (1 + len(fi)) + "|")
    for wl, by in s["cpu"].items():
        out.append("| %s | " % wl + " | ".join(_f(by[i]) for i in fi) + " |")
    if s["waits"]:
        out.append("")
        out.append(WAITS_TITLE[0].upper() + WAITS_TITLE[1:] + ":")
        out.append("")
        out.append("| workload | " + " | ".join(impls) + " |")
        out.append("|---" * (1 + len(impls)) + "|")
        for p, by in s["waits"].items():
            out.append("| %s | " % p + " | ".join(_f(by[i], "%.0f") for i in impls) + " |")
    for key, title in (("floor", floor_title), ("at_cost", lambda _: AT_COST_TITLE)):
        if s.get(key):
            t = title(s["switch"])
            out.append("")
            out.append(t[0].upper() + t[1:] + ":")
            out.append("")
            out.append("| workload | " + " | ".join(fi) + " |")
            out.append("|---" * (1 + len(fi)) + "|")
            for p, by in s[key].items():
                out.append("| %s | " % p + " | ".join(_f(by.get(i), "%.2fx") for i in fi) + " |")
    out.extend(_requests_markdown(res))
    extra = _session_lines(res)
    if extra:
        out.append("")
        out.append("```")
        out.extend(x for x in extra if x)
        out.append("```")
    out.append("")
    out.append("| target (draftfs) | value | verdict |")
    out.append("|---|---|---|")
    for t in s["targets"]:
        out.append("| %s | %s | %s |" % (t["target"], t["value"] or "-", t["verdict"]))
    if res["errors"]:
        out.append("")
        out.append("Failures:")
        out.append("")
        out.extend("- " + e for e in res["errors"])
    return "\n".join(out) + "\n"
