"""One error tree for the whole package, so the CLI can map every failure to one line and an exit code.

Exit codes follow the CLI convention: 2 for input or usage errors (the admin must change something
they typed or wrote), 1 for operational failures (something out there failed).
"""

from __future__ import annotations

from dataclasses import dataclass


class LorafleetError(Exception):
    """Base of every error lorafleet raises on purpose; carries its exit code and an optional hint."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def lines(self) -> list[str]:
        """The message as lines, each printed after `error: `."""
        return [self.message]


class InputError(LorafleetError):
    """The admin's input is wrong: a flag, a file, a name."""

    exit_code = 2


class OperationError(LorafleetError):
    """The operation ran and failed on something outside lorafleet's control."""

    exit_code = 1


@dataclass(frozen=True, slots=True)
class Location:
    """Where a value was written: a file and (when known) a line."""

    file: str
    line: int | None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass(frozen=True)
class Problem:
    """One mistake in an input file, located precisely enough to fix it without searching."""

    file: str
    line: int | None
    path: str
    message: str

    @classmethod
    def at(cls, location: Location, message: str, path: str = "") -> Problem:
        return cls(location.file, location.line, path, message)

    def __str__(self) -> str:
        where = Location(self.file, self.line)
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class InventoryError(InputError):
    """An inventory with one or more problems; all of them are reported together."""

    def __init__(self, problems: list[Problem], limit: int = 50, what: str = "the inventory") -> None:
        self.problems = problems
        self.limit = limit
        count = len(problems)
        super().__init__(f"{count} problem{'s' if count != 1 else ''} in {what}")

    def lines(self) -> list[str]:
        shown = [str(p) for p in self.problems[: self.limit]]
        if len(self.problems) > self.limit:
            shown.append(f"… and {len(self.problems) - self.limit} more problems not shown")
        return shown
