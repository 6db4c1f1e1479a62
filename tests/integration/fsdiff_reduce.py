# SPDX-License-Identifier: LGPL-2.1-or-later
"""Shrinks a failing differential sequence to a short repro (not a test).

Usage, as root, from tests/integration:
  DRAFTBOX_BUILD_DIR=../../build /usr/bin/python3 fsdiff_reduce.py SEED NOPS
Replays the ops of test_fs_differential for SEED, keeps the ones needed for
the last op to still differ (ddmin), and prints them as a Python list and
as the failure message of the reduced run.
"""
import sys

import fsutil
import test_fs_differential as td


def attempt(ops):
    """Returns the failure message if @ops (replayed on fresh mounts) still fails at its last op."""
    env = fsutil.FsEnv()
    try:
        lowers = fsutil.make_standard_lowers(env.dir("layers"))
        k = env.mount("kernel", lowers, name="kernel")
        d = env.mount_impl(lowers, name="impl")
        try:
            td.run_sequence(k.path, k.upper, d.path, 0, 0, ops=ops)
        except AssertionError as e:
            if f"op #{len(ops) - 1} " in str(e):
                return str(e)
        except Exception:  # noqa: BLE001 -- a subset can break the kernel-side emulation: not a repro
            pass
        return None
    finally:
        try:
            env.cleanup()
        except AssertionError as e:
            print("cleanup:", e, file=sys.stderr)


def main():
    seed, nops = int(sys.argv[1]), int(sys.argv[2])
    env = fsutil.FsEnv()
    try:
        lowers = fsutil.make_standard_lowers(env.dir("layers"))
        k = env.mount("kernel", lowers, name="kernel")
        d = env.mount_impl(lowers, name="impl")
        try:
            td.run_sequence(k.path, k.upper, d.path, seed, nops)
            print("no failure")
            return 1
        except AssertionError as e:
            ops = e.ops
            print(str(e).split("\n")[0])
    finally:
        env.cleanup()
    last, prefix = ops[-1], ops[:-1]
    n = 2
    while len(prefix) >= 1:
        chunk = max(1, len(prefix) // n)
        reduced = False
        for i in range(0, len(prefix), chunk):
            cand = prefix[:i] + prefix[i + chunk:]
            if attempt(cand + [last]):
                prefix, n, reduced = cand, max(n - 1, 2), True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(prefix), n * 2)
    final = prefix + [last]
    print("reduced ops:")
    for op in final:
        print("  " + repr(op))
    print(attempt(final))
    return 0


if __name__ == "__main__":
    sys.exit(main())
