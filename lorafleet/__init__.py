"""lorafleet: keep the right LoRA adapters resident across a GPU fleet."""

from __future__ import annotations

__version__ = "0.1.0"

PURE_ENV = "LORAFLEET_PURE"  # "1": run (and build) the core from its Python source, not compiled


def _core_from_source() -> str:
    """Where the core was compiled (setup.py: mypyc, from these same modules), run it from its source instead when
    asked (`LORAFLEET_PURE=1`) or when a compiled module is older than its source: the source was edited, or
    another commit checked out, since the build, and the compiled copy would run the old rules. Then every compiled
    module runs from source, not the stale one alone: compiled modules call each other directly. Returns which
    core runs, and why, as `lorafleet --version` says it."""
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    sources: dict[str, str] = {}
    stale: str | None = None
    for package in os.scandir(here):
        if not package.is_dir() or package.name.startswith(("_", ".")):
            continue
        for entry in os.scandir(package.path):
            if not entry.name.endswith(suffixes):
                continue
            stem = entry.name.split(".", 1)[0]
            source = os.path.join(package.path, stem + ".py")
            if not os.path.exists(source):
                continue
            sources[f"{__name__}.{package.name}.{stem}"] = source
            # Installed from a wheel, both are written in the same second; edited, the source is newer by more.
            if stale is None and os.stat(source).st_mtime > entry.stat().st_mtime + 2.0:
                stale = f"{package.name}/{stem}.py"
    if not sources:
        return PLAIN
    if stale is None and os.environ.get(PURE_ENV) != "1":
        return COMPILED

    class FromSource(importlib.abc.MetaPathFinder):
        def find_spec(
            self, fullname: str, path: object, target: object = None
        ) -> importlib.machinery.ModuleSpec | None:
            source = sources.get(fullname)
            return None if source is None else importlib.util.spec_from_file_location(fullname, source)

    sys.meta_path.insert(0, FromSource())
    if stale is None:
        return f"{PLAIN} ({PURE_ENV}=1)"
    return f"{PLAIN}: the compiled core is older than {stale} (install again to compile it)"


COMPILED, PLAIN = "compiled", "plain source"
CORE = _core_from_source()  # which core runs, and why (`lorafleet --version`)
COMPILED_CORE = CORE == COMPILED  # a memory of one is not the other's (store/memory.py)
