"""Compile an nginx `log_format` string into a line parser: `$var` tokens, quoted fields, bracketed times."""

from __future__ import annotations

import re

_VAR = re.compile(r"\$([A-Za-z0-9_]+)")


class NginxFormat:
    """A compiled log_format; `parse(line)` gives {variable: value} or None when the line does not fit."""

    def __init__(self, log_format: str) -> None:
        self.variables: list[str] = []
        pattern = ["^"]
        pos = 0
        for match in _VAR.finditer(log_format):
            literal = log_format[pos : match.start()]
            pattern.append(re.escape(literal))
            name = match.group(1)
            self.variables.append(name)
            before = literal[-1:] if literal else ""
            after = log_format[match.end() : match.end() + 1]
            if before == '"' and after == '"':
                value = r'(?:[^"\\]|\\.)*'  # nginx escapes quotes inside quoted values as \x22 or \"
            elif before == "[" and after == "]":
                value = r"[^\]]*"
            elif after == "":
                value = r".*?"
            else:
                value = r"\S*?" if after == " " else r".*?"
            pattern.append(f"(?P<{name}>{value})" if self.variables.count(name) == 1 else f"(?:{value})")
            pos = match.end()
        pattern.append(re.escape(log_format[pos:]))
        pattern.append(r"\s*$")
        self.regex = re.compile("".join(pattern))

    def parse(self, line: str) -> dict[str, str | None] | None:
        match = self.regex.match(line)
        if match is None:
            return None
        return {k: _unescape(v) for k, v in match.groupdict().items()}


def _unescape(value: str) -> str | None:
    if value == "-" or value == "":
        return None  # nginx writes "-" for an empty variable
    if "\\x" in value:
        value = re.sub(r"\\x([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), value)
    return value
