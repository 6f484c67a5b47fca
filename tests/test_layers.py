"""Architecture rules: core never imports click or rich; each outside system has exactly one importer."""

from __future__ import annotations

import ast
from pathlib import Path

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
