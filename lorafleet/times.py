"""Time as lorafleet writes and reads it: the one home of spans, UTC text and the journal's minute keys.

Instants are epoch seconds (floats) everywhere inside — the policy core, the session, the simulated engines,
both drivers: a log line's timestamp, the wall clock and the journal all speak it, so a run needs no origin and
whatever outlives a run stays meaningful across restarts. Durations of loads and waits are milliseconds, the
unit every view reports. Text appears only at the edges, made here: UTC ISO-8601 with milliseconds for actions,
`YYYY-MM-DDTHH:MMZ` minute keys and `YYYY-MM-DDTHH:00Z` hour keys for rollups, and spans like `1h30m`.
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime

# How often an idle log follower looks for new lines: the lag between a log line's writing and the daemon
# learning of it, at most (the daemon's default poll; replay's log-only visibility adds it to every line).
FOLLOW_POLL_S = 0.025
SPAN_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_SPAN_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_MINUTE = "%Y-%m-%dT%H:%MZ"


MAX_SPAN_S = 1000 * 365.25 * 86400  # past any log or journal: and a date that far ahead has no calendar
LAST_MOMENT = 32503680000.0  # 3000-01-01T00:00:00Z: a journal's minutes are keyed by four-digit years


class SpanTooLongError(ValueError):
    """A well-formed span past MAX_SPAN_S: said as such, not as a span that could not be read."""


def parse_span(text: str) -> float:
    """Seconds in a span such as `90s`, `30m`, `1h30m`, `1.5h` or `7d` (parts largest first, each unit once).
    ValueError saying what is wrong otherwise."""
    value = text.strip().lower()
    parts = _SPAN_PART.findall(value)
    units = [unit for _, unit in parts]
    order = list(SPAN_UNITS)
    well_formed = (
        bool(parts)
        and "".join(n + u for n, u in parts) == value
        and len(set(units)) == len(units)
        and units == sorted(units, key=order.index)
    )
    seconds = sum(float(n) * SPAN_UNITS[u] for n, u in parts) if well_formed else 0.0
    if seconds <= 0:
        raise ValueError(f"{text!r} is not a span like 90s, 30m, 1h30m or 7d")
    if seconds > MAX_SPAN_S:
        raise SpanTooLongError(f"{text!r} is longer than a thousand years")
    return seconds


def format_span(seconds: float) -> str:
    """The shortest span text for whole seconds (`46m`, `1h30m`, `2d`); below a minute, seconds (`45s`)."""
    left = max(0, round(seconds))
    if left == 0:
        return "0s"
    out = []
    for unit, size in SPAN_UNITS.items():
        count, left = divmod(left, int(size))
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)


def utc_text(epoch: float) -> str:
    """An instant as the journal stores it: UTC ISO-8601 to the millisecond (`2026-11-02T09:14:03.250Z`)."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_now_text() -> str:
    return utc_text(time.time())


def parse_utc_text(text: str) -> float:
    """The epoch time of a `utc_text` string (or any ISO-8601 time; UTC unless it carries an offset)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def minute_key(epoch: float) -> str:
    """The UTC minute an instant falls in, as rollups key it ('YYYY-MM-DDTHH:MMZ'). The last minute asked for is
    kept: a log's lines come minute by minute, and formatting a time costs more than the rest of a line's count."""
    global _last_minute
    minute = epoch // 60.0
    last = _last_minute  # one tuple, read and replaced whole: safe across threads
    if last[0] == minute:
        return last[1]
    key = time.strftime(_MINUTE, time.gmtime(minute * 60.0))
    _last_minute = (minute, key)
    return key


_last_minute: tuple[float, str] = (math.nan, "")


def minute_key_at_or_after(epoch: float) -> str:
    """The first whole minute at or after an instant (the journal's rows start on whole minutes)."""
    return minute_key(-(-epoch // 60.0) * 60.0)


def minute_of(stamp: str) -> str:
    """The UTC minute key ('YYYY-MM-DDTHH:MMZ') of a `utc_text` time."""
    return stamp[:16] + "Z"


def minute_start_text(minute: str) -> str:
    """The `utc_text` time a minute key starts at: actions and minutes compare as text."""
    return minute[:16] + ":00.000Z"


def hour_key(stamp: str) -> str:
    """The UTC hour ('YYYY-MM-DDTHH:00Z') of a minute key or a `utc_text` time."""
    return stamp[:13] + ":00Z"


def minute_epoch(minute: str) -> float:
    """The epoch time a minute (or hour) key starts at."""
    return datetime.strptime(minute, _MINUTE).replace(tzinfo=UTC).timestamp()


def parse_moment(text: str, now: float) -> float:
    """An epoch time from a span (`30m`, `1h30m`, `7d`: that long before `now`), `now`, or an ISO-8601 time (UTC
    unless it carries an offset). ValueError with the reason otherwise."""
    value = text.strip()
    if value == "now":
        return now
    try:
        moment = now - parse_span(value)
    except SpanTooLongError:
        raise
    except ValueError:
        try:
            moment = parse_utc_text(value)
        except ValueError:
            raise ValueError(f"{text!r} is neither a span like 30m, 1h30m, 7d nor an ISO-8601 time") from None
    if not 0.0 <= moment < LAST_MOMENT:  # from the epoch on, in four-digit years
        raise ValueError(f"{text!r} is not between 1970 and 2999")
    return moment


__all__ = [
    "SPAN_UNITS",
    "format_span",
    "hour_key",
    "minute_epoch",
    "minute_key",
    "minute_key_at_or_after",
    "minute_of",
    "minute_start_text",
    "parse_moment",
    "parse_span",
    "parse_utc_text",
    "utc_now_text",
    "utc_text",
]
