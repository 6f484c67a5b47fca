"""Match lines against an nginx `log_format`: `$var` tokens, quoted fields, bracketed times — in linear time.

The format is split into literals and variables once. A line is then walked left to right: each variable's value
runs to the first place its following literal appears (a quoted value to its closing unescaped quote, a
bracketed one to `]`). Nothing is retried, so no line, however hostile, costs more than a few passes over it —
a regular expression of lazy groups could backtrack for minutes on a line of separators.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VAR = re.compile(r"\$([A-Za-z0-9_]+)")
QUOTED, BRACKETED, PLAIN = "quoted", "bracketed", "plain"


@dataclass(frozen=True, slots=True)
class _Slot:
    name: str
    after: str  # the literal that follows the value (up to the next variable or the end)
    mode: str


class NginxFormat:
    """A compiled log_format; `parse(line)` gives {variable: value} or None when the line does not fit."""

    def __init__(self, log_format: str) -> None:
        self.variables: list[str] = []
        slots: list[_Slot] = []
        matches = list(_VAR.finditer(log_format))
        self.prefix = log_format[: matches[0].start()] if matches else log_format
        for i, match in enumerate(matches):
            name = match.group(1)
            self.variables.append(name)
            before = log_format[match.start() - 1 : match.start()] if match.start() else ""
            end = matches[i + 1].start() if i + 1 < len(matches) else len(log_format)
            after = log_format[match.end() : end]
            if before == '"' and after.startswith('"'):
                mode = QUOTED  # nginx escapes quotes inside quoted values as \x22 or \"
            elif before == "[" and after.startswith("]"):
                mode = BRACKETED
            else:
                mode = PLAIN
            slots.append(_Slot(name, after, mode))
        self.slots = tuple(slots)

    def parse(self, line: str) -> dict[str, str | None] | None:
        line = line.rstrip()
        if not line.startswith(self.prefix):
            return None
        pos = len(self.prefix)
        values: dict[str, str | None] = {}
        last = len(self.slots) - 1
        for i, slot in enumerate(self.slots):
            end = _value_end(line, pos, slot, i == last)
            if end < 0:
                return None
            values.setdefault(slot.name, _unescape(line[pos:end]))
            pos = end + len(slot.after)
            if not line.startswith(slot.after, end):
                return None
        return values if pos == len(line) else None


def _value_end(line: str, pos: int, slot: _Slot, last: bool) -> int:
    """Where the value starting at `pos` ends, or -1 when the line cannot fit."""
    if slot.mode == QUOTED:
        i, n = pos, len(line)
        while i < n:
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c == '"':
                return i
            i += 1
        return -1
    if slot.mode == BRACKETED:
        return line.find("]", pos)
    if not slot.after:
        return len(line) if last else pos  # two variables side by side: the first takes nothing
    if last:
        # The format's tail is a fixed suffix: the value is everything before it.
        return len(line) - len(slot.after) if line.endswith(slot.after) and len(line) - len(slot.after) >= pos else -1
    return line.find(slot.after, pos)


def _unescape(value: str) -> str | None:
    if value == "-" or value == "":
        return None  # nginx writes "-" for an empty variable
    if "\\x" in value:
        value = re.sub(r"\\x([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), value)
    return value
