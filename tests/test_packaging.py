"""The package builds — wheel and sdist — on the lowest build backend pyproject.toml allows, in a clean venv.

That setuptools comes as a wheel from LORAFLEET_WHEELS (default ~/.cache/lorafleet/wheels, filled by .ci/run):
nothing is fetched here. Skipped when it is absent, unless LORAFLEET_REQUIRE_BUILD=1 (CI sets it).
"""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

WHEELS = Path(os.environ.get("LORAFLEET_WHEELS", Path.home() / ".cache" / "lorafleet" / "wheels"))


def lowest_backend() -> tuple[str, str]:
    """(name, version) of the build backend's lower bound, as pyproject.toml states it: its first build
    requirement (the second, mypy, compiles the core where it can: setup.py)."""
    backend, *others = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert [re.split(r"[=<>]", o)[0] for o in others] == ["mypy"], others
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", backend)
    assert match, f"the build requirement {backend!r} should be NAME>=VERSION"
    return match.group(1), match.group(2)


def source_tree(into: Path) -> Path:
    """The checkout's files as git tracks them (what a clean clone holds), copied."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, target = ROOT / name, into / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return into


def test_the_wheel_and_the_sdist_build_on_the_lowest_allowed_setuptools(tmp_path: Path) -> None:
    """Without mypy in the build environment (a machine that cannot compile), the same modules are packaged as
    plain Python."""
    name, version = lowest_backend()
    wheel = next(iter(WHEELS.glob(f"{name}-{version}-*.whl")), None)
    if wheel is None:
        if os.environ.get("LORAFLEET_REQUIRE_BUILD") == "1":
            pytest.fail(f"{name} {version} is required here but not in {WHEELS} (see .ci/run)")
        pytest.skip(f"{name} {version} not in {WHEELS}")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    install = [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELS), f"{name}=={version}"]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    tree, out = source_tree(tmp_path / "src"), tmp_path / "dist"
    build = (
        "import sys; from setuptools import build_meta as b; out = sys.argv[1]; "  # the backend rewrites sys.argv
        "w = b.build_wheel(out); s = b.build_sdist(out); print('BUILT', w, s)"
    )
    done = subprocess.run(
        [python, "-c", build, str(out)], cwd=tree, capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    wheel_name, sdist_name = done.stdout.rsplit("BUILT ", 1)[1].split()
    with zipfile.ZipFile(out / wheel_name) as built:
        names = set(built.namelist())
        metadata = built.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = built.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    modules = {f"{p.relative_to(ROOT)}" for p in (ROOT / "lorafleet").rglob("*.py")}
    assert modules <= names, sorted(modules - names)[:5]  # every module of the package, none left behind
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    assert not any(n.endswith(".so") for n in names)  # no mypy to compile with: the plain modules alone
    assert "mypyc is not available; the core is installed as plain Python" in done.stderr, done.stderr[-500:]
    assert "License-Expression: Apache-2.0" in metadata and "Requires-Python: >=3.11" in metadata
    assert "lorafleet = lorafleet.cli.entry:main" in entry_points
    with tarfile.open(out / sdist_name) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "README.md", "lorafleet/cli/main.py"} <= members
