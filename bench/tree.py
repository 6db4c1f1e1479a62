# SPDX-License-Identifier: LGPL-2.1-or-later
"""The benchmark's lower tree: built once per scale and cached in bench/cache/.

Layout of <cache>/tree-s<scale>/lower/ (counts at scale 1):
  src/include, src/python, src/node_modules, src/site-packages
                 ~35k files of real source copied from this machine
  vendor/        ~5k more real files, the rm_tree target
  repo/          a git repository of ~10k committed files (packed)
  proj/          a generated C project (header-heavy), built out of tree
  big.bin        1 GiB of random data
Next to lower/: wide/ (100k empty files for the memory walk), untar.tar
(~10k files), mm-list.txt (the metadata_mix files) and manifest.json.

Every file gets the same fixed mtime so git's index is never racy and two
builds of the tree look alike. Symlinks, sockets, __pycache__ and files
above 4 MiB are skipped. If the machine lacks enough source files, the rest
is generated text, and the manifest says how many.
"""
import json
import os
import random
import shutil
import subprocess
import tarfile
import time

TREE_VERSION = 5
FIXED_MTIME = 1704067200  # 2024-01-01 00:00:00 UTC
MAX_FILE = 4 << 20

# (destination under lower/, candidate source dirs, share of the 35k)
SOURCES = [
    ("src/include", ["/usr/include"], 0.25),
    ("src/python", ["/root/.pyenv/versions/3.11.7/lib/python3.11", "/usr/lib/python3.11",
                    "/usr/lib/python3"], 0.10),
    ("src/node_modules", ["/usr/lib/node_modules", "/usr/share/nodejs"], 0.06),
    ("src/site-packages", ["/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages",
                           "/usr/lib/python3/dist-packages", "/usr/share/doc", "/usr/share"], 1.0),
]
VENDOR_SOURCES = ["/usr/share/doc", "/usr/share/perl", "/usr/share/perl5", "/usr/share"]
REPO_SOURCES = ["/usr/lib/python3/dist-packages", "/usr/share/doc", "/usr/lib/python3.11",
                "/usr/share/man", "/usr/share"]


def sizes(scale):
    """Returns the size parameters of the tree at @scale (1.0 is the issue's sizes)."""
    def n(x, lo):
        return max(lo, int(x * scale))
    return {
        "src_files": n(35000, 200),
        "vendor_files": n(5000, 50),
        "repo_files": n(10000, 100),
        "big_bytes": n(1 << 30, 16 << 20) // (1 << 20) * (1 << 20),
        "proj_units": n(60, 8),
        "proj_headers": n(40, 6),
        "wide_files": n(100000, 2000),
        "untar_files": n(10000, 100),
        "mm_files": n(2000, 50),
        "small_files": n(10000, 100),
        "seq_write_bytes": n(1 << 30, 16 << 20) // (1 << 20) * (1 << 20),
        "rand_read_bytes": n(64 << 20, 4 << 20) // (1 << 20) * (1 << 20),
        "ctl_files": n(10000, 100),
    }


def _walk_files(root):
    """Yields (abs, rel) of regular files under @root in a stable order."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "site-packages", "dist-packages"))
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > MAX_FILE:
                continue
            if f.endswith(".pyc"):
                continue
            yield p, os.path.relpath(p, root)


def _copy_files(dest_root, srcs, count, skip=None):
    """Copies up to @count files from the first existing dirs of @srcs into @dest_root.

    Returns (copied, set of source paths used)."""
    copied = 0
    used = set()
    for s in srcs:
        if copied >= count or not os.path.isdir(s):
            continue
        tag = s.strip("/").replace("/", "_")
        for p, rel in _walk_files(s):
            if copied >= count:
                break
            if skip is not None and p in skip:
                continue
            dst = os.path.join(dest_root, tag, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                shutil.copyfile(p, dst)
            except OSError:
                continue
            used.add(p)
            copied += 1
    return copied, used


def _fill_synthetic(dest_root, count, rng):
    """Writes @count generated text files under @dest_root/generated."""
    words = ["static", "int", "return", "struct", "void", "const", "char", "if", "else", "for",
             "while", "errno", "size_t", "buffer", "inode", "layer", "upper", "lower", "copy"]
    for i in range(count):
        d = os.path.join(dest_root, "generated", "d%03d" % (i // 200))
        os.makedirs(d, exist_ok=True)
        n = rng.randint(20, 400)
        with open(os.path.join(d, "f%05d.txt" % i), "w") as f:
            for _ in range(n):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n")


def _gen_proj(root, units, headers, rng):
    """Generates a C project: @headers headers full of inline code, @units TUs, a Makefile."""
    inc = os.path.join(root, "include", "proj")
    src = os.path.join(root, "src")
    os.makedirs(inc)
    os.makedirs(src)
    for h in range(headers):
        with open(os.path.join(inc, "h%03d.h" % h), "w") as f:
            f.write("/* generated */\n#pragma once\n#include <stddef.h>\n#include <stdint.h>\n")
            for s in range(6):
                f.write("struct h%d_s%d {\n" % (h, s))
                for m in range(rng.randint(3, 10)):
                    f.write("\tuint%d_t m%d;\n" % (rng.choice([8, 16, 32, 64]), m))
                f.write("};\n")
                f.write("static inline uint64_t h%d_s%d_sum(const struct h%d_s%d *p, size_t n)\n{\n"
                        "\tuint64_t r = 0;\n\tfor (size_t i = 0; i < n; i++)\n"
                        "\t\tr = r * 31 + p[i].m0 + (p[i].m1 ^ (r >> 7));\n\treturn r;\n}\n"
                        % (h, s, h, s))
    sysinc = ["stdio.h", "stdlib.h", "string.h", "errno.h", "fcntl.h", "unistd.h",
              "sys/stat.h", "sys/types.h", "pthread.h", "stdbool.h", "limits.h", "ctype.h"]
    for u in range(units):
        with open(os.path.join(src, "u%03d.c" % u), "w") as f:
            f.write("/* generated */\n")
            for s in rng.sample(sysinc, 7):
                f.write("#include <%s>\n" % s)
            for h in rng.sample(range(headers), min(headers, 8)):
                f.write('#include "proj/h%03d.h"\n' % h)
            for fn in range(12):
                f.write("uint64_t u%d_f%d(const char *s, int n);\n" % (u, fn))
                f.write("uint64_t u%d_f%d(const char *s, int n)\n{\n\tuint64_t a = %d;\n"
                        "\tfor (int i = 0; i < n; i++) {\n\t\tswitch (s[i] %% %d) {\n"
                        % (u, fn, rng.randint(1, 1000), rng.randint(3, 9)))
                for c in range(rng.randint(3, 8)):
                    f.write("\t\tcase %d: a = a * %d + (uint64_t)s[i]; break;\n" % (c, rng.randint(3, 99)))
                f.write("\t\tdefault: a ^= a >> %d; break;\n\t\t}\n\t}\n"
                        "\tif (a %% 7 == 0)\n\t\ta += strlen(s);\n\treturn a;\n}\n" % rng.randint(1, 30))
            if u == 0:
                f.write("int main(int argc, char **argv)\n{\n\tuint64_t r = 0;\n")
                for v in range(units):
                    f.write("\t{ extern uint64_t u%d_f0(const char *, int); r += u%d_f0(argv[0], argc); }\n"
                            % (v, v))
                f.write('\tprintf("%llu\\n", (unsigned long long)r);\n\treturn 0;\n}\n')
    with open(os.path.join(root, "Makefile"), "w") as f:
        f.write("# generated: out-of-tree build, make -f SRC/Makefile SRC=SRC\n"
                "SRC ?= .\nVPATH = $(SRC)/src\nCFLAGS ?= -O2 -g\n"
                "OBJS = $(patsubst $(SRC)/src/%.c,%.o,$(wildcard $(SRC)/src/*.c))\n"
                "app: $(OBJS)\n\t$(CC) -o $@ $^\n"
                "%.o: %.c\n\t$(CC) $(CFLAGS) -I$(SRC)/include -MMD -c -o $@ $<\n"
                "-include $(OBJS:.o=.d)\n")


def _fix_mtimes(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + dirnames:
            try:
                os.utime(os.path.join(dirpath, n), (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
            except OSError:
                pass
    os.utime(root, (FIXED_MTIME, FIXED_MTIME))


def _count(root):
    n = 0
    for _, dirnames, filenames in os.walk(root):
        n += len(dirnames) + len(filenames)
    return n


def _paths(top):
    """The manifest's paths of the tree in @top, absolute."""
    return {
        "top": top,
        "lower": os.path.join(top, "lower"),
        "wide": os.path.join(top, "wide"),
        "untar": os.path.join(top, "untar.tar"),
        "mm_list": os.path.join(top, "mm-list.txt"),
    }


def ensure(cache_dir, scale, log):
    """Builds the tree for @scale under @cache_dir unless a complete one exists.

    Returns the manifest dict (paths are absolute, wherever the cache was built from)."""
    key = "tree-v%d-s%g" % (TREE_VERSION, scale)
    top = os.path.join(os.path.abspath(cache_dir), key)
    mpath = os.path.join(top, "manifest.json")
    if os.path.exists(mpath):
        with open(mpath) as f:
            man = json.load(f)
        man.update(_paths(top))  # a cache built with a relative --cache-dir stored relative ones
        return man
    if os.path.exists(top):
        shutil.rmtree(top)
    sz = sizes(scale)
    t0 = time.monotonic()
    log("building the lower tree %s (once; cached)" % top)
    tmp = top + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    lower = os.path.join(tmp, "lower")
    os.makedirs(lower)
    rng = random.Random(42)
    used = set()
    synthetic = 0
    total = 0
    remaining = sz["src_files"]
    for i, (dest, srcs, share) in enumerate(SOURCES):
        want = remaining if i == len(SOURCES) - 1 else min(remaining, int(sz["src_files"] * share))
        got, u = _copy_files(os.path.join(lower, dest), srcs, want, used)
        used |= u
        remaining -= got
        total += got
    if remaining > 0:
        _fill_synthetic(os.path.join(lower, "src"), remaining, rng)
        synthetic += remaining
    got, u = _copy_files(os.path.join(lower, "vendor"), VENDOR_SOURCES, sz["vendor_files"], used)
    if got < sz["vendor_files"]:
        _fill_synthetic(os.path.join(lower, "vendor"), sz["vendor_files"] - got, rng)
        synthetic += sz["vendor_files"] - got
    log("  copied %d source files (%d generated)" % (total + got, synthetic))

    repo = os.path.join(lower, "repo")
    got, _ = _copy_files(repo, REPO_SOURCES, sz["repo_files"])
    if got < sz["repo_files"]:
        _fill_synthetic(repo, sz["repo_files"] - got, rng)
        synthetic += sz["repo_files"] - got
    _fix_mtimes(repo)
    git = ["git", "-C", repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost",
           "-c", "init.defaultBranch=main", "-c", "gc.auto=0", "-c", "maintenance.auto=false"]
    env = dict(os.environ, GIT_AUTHOR_DATE="2024-01-01T00:00:00Z", GIT_COMMITTER_DATE="2024-01-01T00:00:00Z")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "import"], ["gc", "-q"]):
        subprocess.run(git + cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    log("  git repository with %d files" % sz["repo_files"])

    _gen_proj(os.path.join(lower, "proj"), sz["proj_units"], sz["proj_headers"], rng)

    with open(os.path.join(lower, "big.bin"), "wb") as f:
        left = sz["big_bytes"]
        while left > 0:
            n = min(left, 1 << 20)
            f.write(os.urandom(n))
            left -= n
    _fix_mtimes(lower)

    # Files for metadata_mix: spread over the python tree (real names, many dirs).
    mm = []
    for p, rel in _walk_files(os.path.join(lower, "src")):
        mm.append(os.path.relpath(p, lower))
    rng.shuffle(mm)
    mm = sorted(mm[:sz["mm_files"]])
    with open(os.path.join(tmp, "mm-list.txt"), "w") as f:
        f.write("\n".join(mm) + "\n")

    # The untar input: real files, read from outside the mount.
    n = 0
    with tarfile.open(os.path.join(tmp, "untar.tar"), "w", format=tarfile.GNU_FORMAT) as tf:
        for p, rel in _walk_files(os.path.join(lower, "src")):
            if n >= sz["untar_files"]:
                break
            tf.add(p, arcname=os.path.relpath(p, lower), recursive=False)
            n += 1

    wide = os.path.join(tmp, "wide")
    os.mkdir(wide)
    per = 1000
    for i in range(sz["wide_files"]):
        if i % per == 0:
            d = os.path.join(wide, "d%04d" % (i // per))
            os.mkdir(d)
        os.close(os.open(os.path.join(d, "f%05d" % i), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
    _fix_mtimes(wide)

    manifest = {
        "key": key,
        "scale": scale,
        "sizes": sz,
        **_paths(top),
        "entries": _count(lower),
        "wide_entries": _count(wide),
        "synthetic_files": synthetic,
        "vendor_entries": _count(os.path.join(lower, "vendor")),
        "build_seconds": None,
    }
    subprocess.run(["sync"], check=True)
    manifest["build_seconds"] = round(time.monotonic() - t0, 1)
    os.rename(tmp, top)
    with open(mpath, "w") as f:
        json.dump(manifest, f, indent=1)
    log("  tree ready: %d entries in lower, %d in wide (%.0fs)"
        % (manifest["entries"], manifest["wide_entries"], manifest["build_seconds"]))
    return manifest
