"""Host-name ranges: `dgx-[01:16]` → dgx-01 … dgx-16, zero padding kept as written."""

from __future__ import annotations

import itertools
import re

_BRACKET = re.compile(r"\[([^\]]*)\]")
_BOUNDS = re.compile(r"^(\d+):(\d+)$")
MAX_EXPANSION = 10_000


def expand_hostname(pattern: str) -> list[str]:
    """All names a pattern stands for, in order; raises ValueError with a one-line reason."""
    if "[" not in pattern and "]" not in pattern:
        return [pattern]
    parts: list[list[str]] = []
    pos = 0
    count = 1
    for match in _BRACKET.finditer(pattern):
        parts.append([pattern[pos : match.start()]])
        bounds = _BOUNDS.match(match.group(1).strip())
        if not bounds:
            raise ValueError(f"bad range [{match.group(1)}] in {pattern!r}: expected [FIRST:LAST], e.g. [01:16]")
        first_text, last_text = bounds.groups()
        first, last = int(first_text), int(last_text)
        if first > last:
            raise ValueError(f"bad range [{match.group(1)}] in {pattern!r}: {first} is greater than {last}")
        count *= last - first + 1  # counted before any name is made: [0:99999999] must not build a list first
        if count > MAX_EXPANSION:
            raise ValueError(f"{pattern!r} expands to {count:,} names or more (at most {MAX_EXPANSION:,})")
        width = len(first_text) if first_text.startswith("0") and len(first_text) > 1 else 0
        parts.append([str(n).zfill(width) for n in range(first, last + 1)])
        pos = match.end()
    parts.append([pattern[pos:]])
    if "[" in parts[-1][0] or "]" in parts[-1][0] or any("]" in p[0] for p in parts[::2]):
        raise ValueError(f"unbalanced brackets in {pattern!r}")
    return ["".join(combo) for combo in itertools.product(*parts)]
