"""Small typed readers over line-aware YAML values; each records a located Problem instead of raising."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from lorafleet.errors import Problem
from lorafleet.inventory.yamlsource import LDict, LList, where

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

MAX_COUNT = 2**31 - 1  # the largest integer any field takes: a bound on slots, ranks, model sizes and counts


class Invalid:
    """Marks a value that failed its check (the problem is already recorded)."""


INVALID = Invalid()


MAX_SHOWN_CHARS = 60


def quoted(value: Any) -> str:
    """A value read from a file as an error shows it: quoted, and cut to MAX_SHOWN_CHARS characters with its
    length said — an error is one readable line, whatever the file held."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= MAX_SHOWN_CHARS:
        return repr(value)
    head = repr(text[:MAX_SHOWN_CHARS]) if isinstance(value, str) else text[:MAX_SHOWN_CHARS]
    return f"{head}… ({len(text):,} characters)"


def describe(value: Any, show_text: bool = True) -> str:
    """What a value is, for "expected X, got Y". `show_text=False` for a whole document: a file given by mistake
    (a credentials file as the inventory) is plain text, and none of it is echoed."""
    if isinstance(value, str) and not show_text:
        return f"plain text of {len(value):,} characters (not shown)"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    return quoted(value)


class Checker:
    """Collects every problem of an inventory so they can all be reported in one run."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, container: Any, key: Any, path: str, message: str) -> None:
        file, line = where(container, key)
        self.problems.append(Problem(file or "<inventory>", line, path, message))

    # --- mapping shape -------------------------------------------------------------------
    def mapping(self, value: Any, container: Any, key: Any, path: str, allow_null: bool = False) -> LDict | None:
        if value is None and allow_null:
            return None
        if not isinstance(value, dict):
            self.add(container, key, path, f"expected a mapping, got {describe(value)}")
            return None
        return value  # type: ignore[return-value]

    def keys(
        self,
        mapping: LDict,
        path: str,
        allowed: Iterable[str],
        forbidden: Mapping[str, str] | None = None,
        hints: Mapping[str, str] | None = None,
    ) -> None:
        """Report unknown keys, with a did-you-mean suggestion, and forbidden keys with the reason."""
        allowed = list(allowed)
        for key in mapping:
            if key in allowed:
                continue
            sub = join(path, key)
            if forbidden and key in forbidden:
                self.add(mapping, key, sub, forbidden[key])
                continue
            if hints and key in hints:
                self.add(mapping, key, sub, hints[key])
                continue
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            tip = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(sorted(allowed))})"
            self.add(mapping, key, sub, f"unknown key{tip}")

    def required(self, mapping: LDict, path: str, names: Iterable[str]) -> bool:
        ok = True
        for name in names:
            if name not in mapping:
                self.add(mapping, None, path, f"missing required key {name!r}")
                ok = False
        return ok

    # --- scalars -------------------------------------------------------------------------
    def string(self, m: LDict, key: str, path: str, pattern: re.Pattern[str] | None = None, what: str = "") -> Any:
        value = m[key]
        p = join(path, key)
        if not isinstance(value, str) or not value.strip():
            self.add(m, key, p, f"expected a non-empty string, got {describe(value)}")
            return INVALID
        if pattern is not None and not pattern.match(value):
            self.add(m, key, p, f"{quoted(value)} is not {what or 'valid'}")
            return INVALID
        return value

    def integer(self, m: LDict, key: str, path: str, minimum: int | None = None, maximum: int | None = None) -> Any:
        value = m[key]
        p = join(path, key)
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(m, key, p, f"expected an integer, got {describe(value)}")
            return INVALID
        if minimum is not None and value < minimum:
            rule = "positive" if minimum == 1 else f"at least {minimum}"
            self.add(m, key, p, f"must be {rule}, got {value}")
            return INVALID
        bound = MAX_COUNT if maximum is None else maximum  # a count, a size, a rank: none is past 2^31
        if value > bound:
            got = str(value) if value < 10**20 else f"a number of {len(str(value))} digits"
            self.add(m, key, p, f"must be at most {bound}, got {got}")
            return INVALID
        return value

    def number(self, m: LDict, key: str, path: str, positive: bool = True, maximum: float | None = None) -> Any:
        value = m[key]
        p = join(path, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.add(m, key, p, f"expected a finite number, got {describe(value)}")
            return INVALID
        if maximum is not None and value > maximum:
            self.add(m, key, p, f"must be at most {maximum:,.0f}, got {value:g}")
            return INVALID
        if positive and value <= 0:
            self.add(m, key, p, f"must be greater than 0, got {value}")
            return INVALID
        if not positive and value < 0:
            self.add(m, key, p, f"must not be negative, got {value}")
            return INVALID
        return float(value)

    def choice(self, m: LDict, key: str, path: str, choices: Iterable[str], what: str) -> Any:
        value = m[key]
        choices = list(choices)
        if value not in choices:
            close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
            tip = f"; did you mean {close[0]!r}?" if close else ""
            self.add(m, key, join(path, key), f"unknown {what} {quoted(value)} (known: {', '.join(choices)}){tip}")
            return INVALID
        return value

    def base_model(self, m: LDict, path: str, name: str, base_models: Collection[str]) -> bool:
        """Whether `name`, `m`'s base model, is one the inventory defines (else reported with those it does):
        engines and adapters alike name one."""
        if name in base_models:
            return True
        known = ", ".join(sorted(base_models)) or "none defined"
        message = f"{quoted(name)} is not a base model in this inventory (known: {known})"
        self.add(m, "base_model", join(path, "base_model"), message)
        return False

    def string_list(self, m: LDict, key: str, path: str) -> Any:
        value = m[key]
        p = join(path, key)
        if not isinstance(value, list):
            self.add(m, key, p, f"expected a list of strings, got {describe(value)}")
            return INVALID
        out: list[str] = []
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item.strip():
                self.add(value, i, f"{p}[{i}]", f"expected a non-empty string, got {describe(item)}")
                return INVALID
            out.append(item)
        return out

    def int_list(self, m: LDict, key: str, path: str, minimum: int = 0) -> Any:
        value = m[key]
        p = join(path, key)
        if not isinstance(value, list):
            self.add(m, key, p, f"expected a list of integers, got {describe(value)}")
            return INVALID
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int) or item < minimum:
                self.add(value, i, f"{p}[{i}]", f"expected an integer ≥ {minimum}, got {describe(item)}")
                return INVALID
        if len(set(value)) != len(value):
            self.add(m, key, p, "lists the same index twice")
            return INVALID
        return list(value)


def join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def as_list(value: Any) -> LList | list[Any]:
    return value if isinstance(value, list) else []
