"""Mutation testing of the policy and the simulator: which single-point changes to the rules do the tests miss?

    python benchmarks/mutation.py [--sample 300] [--seed 1] [--workers 2] [--tests tests/policy] [--only FILE]
                                  [--paths lorafleet/store ...]

Each mutant changes one operator or constant of the policy, the session or the simulated engines
(lorafleet/policy/*.py, lorafleet/drive/*.py: `<`↔`<=`, `>`↔`>=`, `==`↔`!=`, `+`↔`-`, `*`↔`/`, `and`↔`or`,
`True`↔`False`, `not x`→`x`, an integer n→n+1, `min`↔`max`), in a copy of the tree, and runs the tests
(`-x`, 120 s cap), once they pass unmutated. A mutant is killed when the tests time out, or fail and fail again
when the failing test files are rerun alone (a failure that does not come back is reported as flaky: on a loaded
machine, a timing test's). mutmut does the same exhaustively
(`mutmut run` over these paths) but takes hours on two cores; this samples the same kinds of mutation
uniformly, seeded, and prints the kill rate and every survivor, which is where a test is missing. `--paths`
mutates other files or folders instead (the journal, the memory a restart restores, the log reader), each with
the tests that cover it (`--tests`).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = [*sorted((ROOT / "lorafleet" / "policy").glob("*.py")), *sorted((ROOT / "lorafleet" / "drive").glob("*.py"))]
SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.And: ast.Or,
    ast.Or: ast.And,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}


@dataclass(frozen=True)
class Mutant:
    path: Path
    index: int  # the index-th mutation point of the file (in ast.walk order)
    line: int
    what: str


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of nodes inside annotations and docstrings: mutating them changes nothing the tests could see."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations.append(node.returns)
            for arg in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]:
                annotations.append(arg.annotation)
        if isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for annotation in annotations:
            if annotation is not None:
                skip.update(id(n) for n in ast.walk(annotation))
    return skip


def points(tree: ast.AST) -> list[tuple[ast.AST, str, int]]:
    """(node, description, line) of every place a mutation applies."""
    skip = _annotation_nodes(tree)
    out: list[tuple[ast.AST, str, int]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in SWAPS:
                    out.append((node, f"compare:{i}:{type(op).__name__}", line))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAPS:
            out.append((node, f"binop:{type(node.op).__name__}", line))
        elif isinstance(node, ast.AugAssign) and type(node.op) in SWAPS:
            out.append((node, f"augassign:{type(node.op).__name__}", line))
        elif isinstance(node, ast.BoolOp):
            out.append((node, f"boolop:{type(node.op).__name__}", line))
        elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
            out.append((node, f"constant:{node.value}", line))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            out.append((node, f"int:{node.value}", line))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            out.append((node, "not", line))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            out.append((node, f"call:{node.func.id}", line))
    return out


def mutate(source: str, index: int) -> str:
    tree = ast.parse(source)
    node, what, _ = points(tree)[index]
    kind = what.split(":")[0]
    if kind == "compare":
        i = int(what.split(":")[1])
        assert isinstance(node, ast.Compare)
        node.ops[i] = SWAPS[type(node.ops[i])]()
    elif kind in ("binop", "augassign", "boolop"):
        node.op = SWAPS[type(node.op)]()  # type: ignore[attr-defined]
    elif kind == "constant":
        assert isinstance(node, ast.Constant)
        node.value = not node.value
    elif kind == "int":
        assert isinstance(node, ast.Constant)
        node.value = node.value + 1
    elif kind == "not":
        assert isinstance(node, ast.UnaryOp)
        replacement = node.operand
        for parent in ast.walk(tree):
            for field, value in ast.iter_fields(parent):
                if value is node:
                    setattr(parent, field, replacement)
                elif isinstance(value, list):
                    for j, item in enumerate(value):
                        if item is node:
                            value[j] = replacement
    elif kind == "call":
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        node.func.id = "max" if node.func.id == "min" else "min"
    return ast.unparse(tree)


def _python_files(paths: list[Path]) -> set[Path]:
    found: set[Path] = set()
    for given in paths:
        path = (ROOT / given).resolve()
        if not path.is_relative_to(ROOT):
            raise SystemExit(f"mutation: {given}: outside {ROOT} (mutants are made in copies of this tree)")
        if path.is_dir():
            found.update(path.glob("*.py"))
        elif path.suffix == ".py" and path.is_file():
            found.add(path)
        else:
            raise SystemExit(f"mutation: {given}: not a Python file or folder under {ROOT}")
    return found


def _pytest(workdir: Path, args: list[str], timeout_s: float = 120.0) -> tuple[int | None, str]:
    """Run pytest in a copy: (exit status, None on a timeout; its output). Its own process group: a mutant that
    hangs a test is killed with every process the test started (a daemon under test left running would follow
    its log, and take a core, for good)."""
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = run.communicate(timeout=timeout_s)
        return run.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return None, ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        run.communicate()


def _failed_files(output: str) -> list[str]:
    """The test files pytest's summary names as failed or in error (`FAILED tests/x.py::name - ...`)."""
    found = []
    for line in output.splitlines():
        head, _, rest = line.partition(" ")
        if head in ("FAILED", "ERROR") and rest.startswith("tests/"):
            name = rest.split("::")[0].split(" ")[0]
            if name not in found:
                found.append(name)
    return found


KILLED, SURVIVED, FLAKY = "killed", "survived", "flaky"


def run_mutant(mutant: Mutant, workdir: Path, tests: list[str]) -> str:
    """KILLED when the tests fail (and fail again on a rerun of the failing file alone) or hang; FLAKY when the
    failure does not come back, which on a loaded machine is a timing test's, not the mutant's (two workers and
    a timing test once "killed" every mutant of a sample); else SURVIVED."""
    target = workdir / mutant.path.relative_to(ROOT)
    original = target.read_text()
    try:
        target.write_text(mutate(original, mutant.index))
        status, output = _pytest(workdir, ["-x", *tests])
        if status is None:
            return KILLED
        if status == 0:
            return SURVIVED
        files = _failed_files(output)
        if not files:  # a collection or import error: the mutant broke the module
            return KILLED
        again, _ = _pytest(workdir, ["-x", *files])
        return KILLED if again != 0 else FLAKY
    finally:
        target.write_text(original)


def _shown(mutant: Mutant) -> str:
    """A mutant as a report line: where, what, and its source line."""
    code = mutant.path.read_text().splitlines()[mutant.line - 1].strip() if mutant.line else ""
    return f"  {mutant.path.relative_to(ROOT)}:{mutant.line} {mutant.what}  | {code[:90]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tests", nargs="*", default=["tests/policy"])
    parser.add_argument("--only", help="mutate only target files whose path contains this (e.g. placement)")
    parser.add_argument("--paths", nargs="*", type=Path, help="files or folders to mutate (default: policy, drive)")
    args = parser.parse_args()
    targets = TARGETS if not args.paths else sorted(_python_files(args.paths))
    everything = []
    for path in targets:
        if args.only and args.only not in str(path):
            continue
        for i, (_, what, line) in enumerate(points(ast.parse(path.read_text()))):
            everything.append(Mutant(path, i, line, what))
    rng = random.Random(args.seed)
    sample = sorted(rng.sample(everything, min(args.sample, len(everything))), key=lambda m: (str(m.path), m.index))
    work = Path(tempfile.mkdtemp(prefix="lorafleet-mutation-"))
    copies = []
    for w in range(args.workers):
        copy = work / f"w{w}"
        # Without the compiled core (setup.py): a mutant runs as the plain source it is.
        skipped = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "*.so", "build")
        shutil.copytree(ROOT, copy, ignore=skipped)
        copies.append(copy)
    try:
        chunks = [sample[w :: args.workers] for w in range(args.workers)]

        def run_chunk(w: int) -> list[tuple[Mutant, str]]:
            return [(m, run_mutant(m, copies[w], args.tests)) for m in chunks[w]]

        status, output = _pytest(copies[0], ["-x", *args.tests], timeout_s=600.0)
        if status != 0:  # every mutant would count as killed
            raise SystemExit(f"mutation: the tests fail without any mutant:\n{output[-2000:]}")

        with ThreadPoolExecutor(args.workers) as pool:
            results = [r for chunk in pool.map(run_chunk, range(args.workers)) for r in chunk]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    killed = sum(k == KILLED for _, k in results)
    print(
        f"{len(everything)} mutation points; sampled {len(results)} (seed {args.seed}); tests: {' '.join(args.tests)}"
    )
    print(f"killed {killed} of {len(results)}: {killed / max(1, len(results)):.1%}")
    by_file: dict[str, list[bool]] = {}
    for m, k in results:
        by_file.setdefault(str(m.path.relative_to(ROOT)), []).append(k == KILLED)
    for name, ks in sorted(by_file.items()):
        print(f"  {name}: {sum(ks)}/{len(ks)}")
    flaky = [m for m, k in results if k == FLAKY]
    if flaky:
        print(f"flaky ({len(flaky)}: the tests failed once, not again on a rerun; counted as survivors):")
        for m in flaky:
            print(_shown(m))
    print("survivors:")
    for m, k in results:
        if k == SURVIVED:
            print(_shown(m))


if __name__ == "__main__":
    main()
