"""A failure as the CLI reports it under --json, in one place: the shape `_fail` prints and the one the entry
point prints when Ctrl-C comes before the CLI is loaded. No click here: the entry point reads it first."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def error_document(
    lines: Sequence[str],
    hint: str | None,
    code: int,
    problems: list[dict[str, Any]] | None = None,
    message: str | None = None,
) -> str:
    """`{"error": {"message", "lines", "hint", "exit_code", "problems"}}`, problems (each `{"file", "line",
    "field", "message"}`) for a file with mistakes, else null."""
    error = {"message": message or (lines[0] if lines else ""), "lines": list(lines), "hint": hint, "exit_code": code}
    return json.dumps({"error": {**error, "problems": problems}}, indent=2)


def json_asked(argv: Sequence[str]) -> bool:
    """Whether the command line asks for --json (before any `--`)."""
    args = list(argv)
    return "--json" in (args[: args.index("--")] if "--" in args else args)
