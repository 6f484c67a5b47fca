"""Architecture rules: the layer contracts, no import cycles, core never renders, one importer per outside system."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lorafleet"
ONLY_IN = {
    "pynvml": {"probe/nvml.py"},
    "paramiko": {"probe/ssh.py"},
}
ONLY_UNDER = {"httpx": "engines/"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def modules() -> list[tuple[str, set[str]]]:
    return [(str(p.relative_to(PACKAGE)), imports(p)) for p in sorted(PACKAGE.rglob("*.py"))]


def test_core_never_imports_click_or_rich() -> None:
    offenders = [rel for rel, names in modules() if not rel.startswith("cli/") and names & {"click", "rich"}]
    assert offenders == []


def test_outside_systems_have_one_importing_module() -> None:
    for rel, names in modules():
        for lib, allowed in ONLY_IN.items():
            assert lib not in names or rel in allowed, f"{rel} imports {lib}"
        for lib, prefix in ONLY_UNDER.items():
            assert lib not in names or rel.startswith(prefix), f"{rel} imports {lib}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def internal_imports(path: Path, known: set[str]) -> set[str]:
    """Every lorafleet module this file imports, at any depth (function-level imports count too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return found & known


def test_no_import_cycles_between_modules() -> None:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    # A package's __init__ only gathers its submodules; cycles through it are not design cycles.
    graph = {m: {d for d in internal_imports(p, known) if d != m} for m, p in files.items() if p.name != "__init__.py"}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                cycles.append([*trail[trail.index(dep) :], dep] if dep in trail else [module, dep])
            elif dep in graph and not state.get(dep):
                visit(dep, [*trail, dep])
        state[module] = 2

    for module in sorted(graph):
        if not state.get(module):
            visit(module, [module])
    assert cycles == []


def test_layer_contracts_hold() -> None:
    """The import-linter contracts in pyproject.toml (layers, a pure policy, rendering only in the CLI)."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    if lint is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    result = subprocess.run([lint], cwd=PACKAGE.parent, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
