"""The core compiled by mypyc (setup.py) is the same source as the plain modules: it counts the same, it is what an
install on a machine with a C compiler runs, and a compiled module older than its source never runs.

Skipped where the install did not compile the core, unless LORAFLEET_REQUIRE_COMPILED=1 (CI sets it).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lorafleet import PURE_ENV
from lorafleet.replay.synth import synthesize
from tests.conftest import ROOT

SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def core_modules() -> list[str]:
    """The modules setup.py compiles, as module names."""
    listed = re.findall(r'"((?:inventory|policy|drive|replay|logs|daemon)/\w+)"', (ROOT / "setup.py").read_text())
    assert len(listed) >= 10, listed
    return [f"lorafleet.{name.replace('/', '.')}" for name in listed]


def compiled(module: str) -> bool:
    return str(importlib.import_module(module).__file__).endswith(SUFFIXES)


def needs_compiled_core() -> None:
    if all(compiled(m) for m in core_modules()):
        return
    if os.environ.get("LORAFLEET_REQUIRE_COMPILED") == "1":
        pytest.fail("the core should be compiled here (a C compiler and Python's headers, mypy to build with)")
    pytest.skip("the core is not compiled in this install")


def test_where_required_every_core_module_is_compiled() -> None:
    needs_compiled_core()
    assert not os.environ.get(PURE_ENV)


def replayed(log: Path, inventory: Path, pure: bool) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV} | ({PURE_ENV: "1"} if pure else {})
    command = [sys.executable, "-m", "lorafleet", "replay", str(log), "-i", str(inventory), "--json"]
    command += ["--policy", "lru,arc,markov,lorafleet", "--visibility", "both"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""
    return json.loads(done.stdout)


def without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if "wall" not in k and "per_s" not in k}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def test_the_compiled_core_counts_exactly_what_its_source_counts(tmp_path: Path) -> None:
    needs_compiled_core()
    synth = synthesize("workflows", 600, 3, tmp_path)
    compiled_run = replayed(synth.log_path, synth.inventory_path, pure=False)
    plain_run = replayed(synth.log_path, synth.inventory_path, pure=True)
    assert without_timing(compiled_run) == without_timing(plain_run)
    assert compiled_run != {} and "lorafleet" in json.dumps(compiled_run)


def _copy_of_the_install(into: Path) -> Path:
    """The installed package (its compiled modules included) and mypyc's shared module, copied under `into`."""
    shutil.copytree(ROOT / "lorafleet", into / "lorafleet", ignore=shutil.ignore_patterns("__pycache__"))
    shared = [m for name, m in sys.modules.items() if name.endswith("__mypyc")]
    assert shared, "mypyc's shared module should be loaded with the compiled core"
    for module in shared:
        shutil.copy2(str(module.__file__), into)
    return into


def where_the_core_runs_from(path: Path) -> tuple[list[str], str]:
    """The files two core modules run from, and what `lorafleet --version` says, in a copy of the install."""
    probe = "import lorafleet.policy.core as c, lorafleet.drive.session as s; print(c.__file__); print(s.__file__)"
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV} | {"PYTHONPATH": str(path)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=path, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    version = subprocess.run(
        [sys.executable, "-m", "lorafleet", "--version"], capture_output=True, text=True, env=env, cwd=path, timeout=60
    )
    assert version.returncode == 0 and version.stderr == "", version.stderr
    return done.stdout.split(), version.stdout.strip()


def test_a_core_module_edited_since_the_build_runs_the_whole_core_from_source(tmp_path: Path) -> None:
    needs_compiled_core()
    copy = _copy_of_the_install(tmp_path / "site")
    edited = copy / "lorafleet" / "policy" / "demand.py"
    built = next((copy / "lorafleet" / "policy").glob("demand.*.so")).stat().st_mtime
    os.utime(edited, (built - 60, built - 60))  # older than its build: the compiled core runs
    files, said = where_the_core_runs_from(copy)
    assert all(f.endswith(SUFFIXES) for f in files) and said.endswith("(core: compiled)")
    os.utime(edited, (built + 60, built + 60))  # edited since: every compiled module runs from source, and says why
    files, said = where_the_core_runs_from(copy)
    assert [Path(f).name for f in files] == ["core.py", "session.py"]
    assert said.endswith(
        "(core: plain source: the compiled core is older than policy/demand.py (install again to compile it))"
    )


def test_a_memory_of_the_compiled_core_and_one_of_its_source_refuse_each_other() -> None:
    """They pickle their objects differently (mypyc's own state, or slots): each names its build, so the other
    refuses it cleanly and relearns (store/memory.py) rather than failing to read it."""
    needs_compiled_core()
    from lorafleet.store.memory import FORMAT

    probe = "from lorafleet.store.memory import FORMAT; print(FORMAT)"
    env = os.environ | {PURE_ENV: "1"}
    plain = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert FORMAT.endswith(" compiled") and plain.stdout.strip() == FORMAT.removesuffix(" compiled")
