"""Request times: ISO-8601 strings, epoch seconds or milliseconds, nginx `$time_local` and `$msec`."""

from __future__ import annotations

import math
from datetime import UTC, datetime

_EPOCH_MS_THRESHOLD = 1e11  # seconds since 1970 pass this in the year 5138; milliseconds passed it in 1973
_LATEST = 253402300799.0  # 9999-12-31T23:59:59Z: anything later is garbage, not a time
_MONTHS = {
    m: i
    for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)
}


class TimeParseError(ValueError):
    pass


def parse_time(value: object) -> float:
    """Epoch seconds (float) from any supported representation."""
    if isinstance(value, bool):
        raise TimeParseError("a boolean is not a time")
    if isinstance(value, (int, float)):
        try:
            return _epoch(float(value))
        except OverflowError as exc:  # an integer too large for a float
            raise TimeParseError("time out of range") from exc
    if not isinstance(value, str) or not value.strip():
        raise TimeParseError(f"unsupported time {value!r}")
    text = value.strip()
    if len(text) > 64:
        raise TimeParseError("time too long")
    if len(text) < 10 or text[4] != "-":  # not an ISO date (2026-...): a number, or nginx's local time
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            return _epoch(number)
    if len(text) >= 26 and text[2] == "/" and text[6] == "/" and text[11] == ":":
        return _nginx_local(text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise TimeParseError(f"unsupported time {text[:40]!r}") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return _in_range(parsed.timestamp())
    except (OverflowError, ValueError) as exc:  # a valid ISO date whose offset pushes it out of range
        raise TimeParseError("time out of range") from exc


def _epoch(number: float) -> float:
    if not math.isfinite(number) or number < 0:
        raise TimeParseError(f"invalid epoch time {number}")
    return _in_range(number / 1000.0 if number >= _EPOCH_MS_THRESHOLD else number)


def _in_range(seconds: float) -> float:
    if not 0 <= seconds <= _LATEST:
        raise TimeParseError("time out of range")
    return seconds


def _nginx_local(text: str) -> float:
    """`10/Oct/2000:13:55:36 -0700` (nginx $time_local)."""
    try:
        day, month, year = int(text[0:2]), _MONTHS[text[3:6]], int(text[7:11])
        hour, minute, second = int(text[12:14]), int(text[15:17]), int(text[18:20])
        sign = 1 if text[21] == "+" else -1
        offset = sign * (int(text[22:24]) * 3600 + int(text[24:26]) * 60)
    except (KeyError, ValueError, IndexError) as exc:
        raise TimeParseError(f"unsupported time {text[:40]!r}") from exc
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp() - offset
    except ValueError as exc:  # 31/Feb, hour 25
        raise TimeParseError(f"unsupported time {text[:40]!r}") from exc
