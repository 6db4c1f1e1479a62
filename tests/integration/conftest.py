# SPDX-License-Identifier: LGPL-2.1-or-later
"""Shared pytest setup for the integration suites.

Binaries come from $DRAFTBOX_BUILD_DIR (set by meson through run-pytest);
a file whose tests all skip exits 77 so meson reports SKIP, and a file that
collects no test fails. Suite-specific fixtures live in their own helper
modules (fsutil.py, ...), not here.
"""
import os
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.environ.get("DRAFTBOX_BUILD_DIR") or os.path.join(HERE, "..", "..", "build")


def build_path(*parts):
    """Returns the path of a built artifact, e.g. build_path('fs', 'draftfs')."""
    return os.path.join(BUILD_DIR, *parts)


_counts = {"passed": 0, "failed": 0, "skipped": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        if report.outcome in _counts:
            _counts[report.outcome] += 1


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 5:  # no tests collected: a defect, not a skip
        session.exitstatus = 1
    elif exitstatus == 0 and _counts["passed"] == 0 and _counts["skipped"] > 0:
        session.exitstatus = 77
