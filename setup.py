"""The build: the policy core, the session kernel and the daemon's per-line path compiled by mypyc from the same
source, where it can be.

The modules listed are compiled to C extensions (mypyc, a build requirement) when the build machine has a C
compiler and Python's headers; where it has none, or `LORAFLEET_PURE=1` is set, the same modules are installed as
plain Python. Both run the same source: compiled is only faster (docs/benchmarks.md), never another copy.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

CORE = [
    f"lorafleet/{name}.py"
    for name in (
        "inventory/capacity",
        "policy/baselines",
        "policy/core",
        "policy/demand",
        "policy/events",
        "policy/experts",
        "policy/oracle",
        "policy/placement",
        "policy/predictive",
        "policy/residency",
        "policy/value",
        "drive/late",
        "drive/leader",
        "drive/policies",
        "drive/session",
        "drive/settling",
        "drive/simulated",
        "drive/standin",
        "drive/stays",
        "replay/driver",
        # the daemon's per-line path besides the session: parsing a line, folding what the session answered
        "logs/reader",
        "logs/records",
        "logs/timeparse",
        "daemon/journaling",
    )
]


def extensions() -> list[object]:
    """The core as C extensions, each optional (no compiler: the plain modules stay); none where mypyc is
    missing or the pure build is asked for."""
    if os.environ.get("LORAFLEET_PURE") == "1":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("lorafleet: mypyc is not available; the core is installed as plain Python", file=sys.stderr)
        return []
    # The build environment holds setuptools and mypy only: the libraries the other modules use go unchecked here
    # (CI type-checks the whole package with them).
    built = mypycify(["--ignore-missing-imports", *CORE], opt_level="3")
    for extension in built:
        extension.optional = True  # a build machine without a C compiler installs the same modules uncompiled
    return built


setup(ext_modules=extensions())
