"""Read the journal for `lorafleet stats`: totals, breakdowns, hit-ratio series and the action log.

Windows are half-open, [since, until), on UTC minutes: the requests' (rollups) and the actions' (the rows in
`loads` by their time, the counted ones in `actions_minutes`), so a window's actions are those of the minutes
its requests are counted in; `stats loads` lists actions by their exact times. A window longer than
HOURLY_AFTER_S, or one reaching back before the minute detail the daemon keeps (`minute_detail`), is widened to
whole hours and read from the hourly tables (`rollups_hourly`, `actions_hourly`, written in the same
transactions as the minute rows), so 30 days cost 720 rows per key rather than 43,200; `--by minute` always
reads minutes. Every query is one range scan of a primary key or index (docs/benchmarks.md has the plans).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from lorafleet.measures import nearest_rank
from lorafleet.store.db import ActionRow, Store, read_actions, read_counted
from lorafleet.store.journal import ROLLUP_FIELDS, Outcomes
from lorafleet.times import (
    hour_key,
    minute_epoch,
    minute_key_at_or_after,
    minute_start_text,
    parse_utc_text,
    utc_text,
)

LOAD_ANSWERS = ("loaded", "reloaded")  # the answers of a load that was done (the session's LOAD_ANSWERS)

HOURLY_AFTER_S = 6 * 3600.0
BY_COLUMNS = {
    "tenant": "tenant",
    "adapter": "adapter",
    "engine": "engine",
    "minute": "minute",
    "hour": "substr(minute, 1, 13) || ':00Z'",
}
_SUMS = ", ".join(f"COALESCE(SUM({f}), 0)" for f in ROLLUP_FIELDS)


@dataclass(frozen=True)
class Window:
    since_minute: str  # first minute included ('YYYY-MM-DDTHH:MMZ')
    until_minute: str  # first minute excluded
    since_at: str  # ISO times for actions: [since_at, until_at)
    until_at: str
    hourly: bool = False  # read the hourly tables (the bounds are whole hours)

    @property
    def since_hour(self) -> str:
        return hour_key(self.since_minute)

    @property
    def until_hour(self) -> str:
        return hour_key(self.until_minute)

    @property
    def span(self) -> tuple[float, float]:
        """The window's requests as instants, [start, end): the minutes (or whole hours) the journal counts them
        in, so what is compared with it (the engines alone, replayed) covers the same requests."""
        return minute_epoch(self.since_minute), minute_epoch(self.until_minute)

    @property
    def minute_bounds_at(self) -> list[str]:
        """The window's minutes as bounds on action times: [first minute's start, first excluded one's)."""
        return [minute_start_text(self.since_minute), minute_start_text(self.until_minute)]


@dataclass
class ActionTotals:
    prefetch_loads: int = 0  # loads ahead of demand (prefetch and plan)
    unused_prefetches: int = 0  # prefetches evicted before any request used them
    touches: int = 0
    refused_engines: list[str] = field(default_factory=list)  # engines whose calls a circuit breaker refused
    load_ms: dict[str, tuple[int, float, float]] = field(default_factory=dict)  # engine -> (loads, p50, p99)


def _where(window: Window) -> tuple[str, list[str]]:
    return " WHERE minute >= ? AND minute < ?", [window.since_minute, window.until_minute]


def _hourly(window: Window, dim: str) -> tuple[str, list[str]]:
    return " WHERE dim = ? AND hour >= ? AND hour < ?", [dim, window.since_hour, window.until_hour]


def totals(store: Store, window: Window) -> Outcomes:
    if window.hourly:
        where, args = _hourly(window, "all")
        return Outcomes(*store.db.execute(f"SELECT {_SUMS} FROM rollups_hourly{where}", args).fetchone())
    where, args = _where(window)
    return Outcomes(*store.db.execute(f"SELECT {_SUMS} FROM rollups{where}", args).fetchone())


def breakdown(store: Store, window: Window, by: str) -> list[tuple[str, Outcomes]]:
    """Per key of `by`: the window's sums."""
    if window.hourly and by != "minute":
        where, args = _hourly(window, "all" if by == "hour" else by)
        column = "hour" if by == "hour" else "key"
        sql = f"SELECT {column} AS k, {_SUMS} FROM rollups_hourly{where} GROUP BY k"
    else:
        where, args = _where(window)
        sql = f"SELECT {BY_COLUMNS[by]} AS k, {_SUMS} FROM rollups{where} GROUP BY k"
    return [(row[0], Outcomes(*row[1:])) for row in store.db.execute(sql, args)]


_epoch = functools.lru_cache(maxsize=65536)(minute_epoch)  # series rows repeat the same minutes: parse each once


def sliced(
    store: Store, window: Window, by: str | None, buckets: int
) -> tuple[list[tuple[str, Outcomes]], dict[str, list[float | None]]]:
    """In one pass: per key (or '' for everything) the window's sums, and its hit ratio in `buckets` equal slices
    of the window (None where a slice had no requests). The slice is computed by SQLite, so a month of hourly
    rows per engine comes back as keys × buckets rows."""
    start, end = _epoch(window.since_minute), _epoch(window.until_minute)
    width = max(60.0, (end - start) / buckets)
    if window.hourly and by != "minute":
        dim = by if by in ("tenant", "adapter", "engine") else "all"
        key = "key" if dim != "all" else ("hour" if by == "hour" else "''")
        where, args = _hourly(window, dim)
        table, stamp = "rollups_hourly", "hour"
    else:
        key = BY_COLUMNS[by] if by else "''"
        where, args = _where(window)
        table, stamp = "rollups", "minute"
    # A row's slice: how many slice boundaries its minute (or hour) is at or past — string comparisons in SQLite,
    # as cheap as the sums. A boundary is rounded up to the minute, since the rows' minutes are whole.
    bounds = [minute_key_at_or_after(start + i * width) for i in range(1, buckets)]
    slot = " + ".join(f"({stamp} >= ?)" for _ in bounds) or "0"
    sql = f"SELECT {key} AS k, {slot} AS s, {_SUMS} FROM {table}{where} GROUP BY k, s"
    sums: dict[str, Outcomes] = {}
    series: dict[str, list[float | None]] = {}
    for key_value, index, *fields in store.db.execute(sql, [*bounds, *args]):
        part = Outcomes(*fields)
        found = sums.get(key_value)
        if found is None:
            sums[key_value] = part
        else:
            found.add(part)
        cells = series.setdefault(key_value, [None] * buckets)
        cells[index] = part.hit_ratio if part.requests else None
    return list(sums.items()), series


@dataclass(frozen=True)
class LogTotals:
    lines: int = 0
    bad: int = 0
    unknown: int = 0  # requests naming an adapter the inventory does not know (never loaded)


def log_totals(store: Store, window: Window) -> LogTotals:
    """The log lines the daemon read whose requests fall in the window's minutes."""
    row = store.db.execute(
        "SELECT COALESCE(SUM(lines), 0), COALESCE(SUM(bad), 0), COALESCE(SUM(unknown), 0) FROM log_minutes "
        "WHERE minute >= ? AND minute < ?",
        [window.since_minute, window.until_minute],
    ).fetchone()
    return LogTotals(*row)


@dataclass(frozen=True)
class StatsReport:
    """What `stats` shows for a window: totals, the actions, per key of `by` its sums and its trend (the trend of
    everything under ''), and per key the unused prefetches and touches (None by tenant)."""

    window: Window
    overall: Outcomes
    actions: ActionTotals
    rows: list[tuple[str, Outcomes]]
    series: dict[str, list[float | None]]
    per_key: dict[str, tuple[int, int]] | None
    log: LogTotals = LogTotals()


def report(store: Store, since: float, until: float, by: str, buckets: int) -> StatsReport:
    window = window_of(since, until, by, detail_since(store))
    rows, series = sliced(store, window, by, buckets)  # sums and trends in one pass
    series[""] = hit_series(store, window, None, buckets).get("", [None] * buckets)
    overall, actions = totals(store, window), action_totals(store, window)
    return StatsReport(
        window, overall, actions, rows, series, key_actions(store, window, by), log_totals(store, window)
    )


def hit_series(store: Store, window: Window, by: str | None, buckets: int) -> dict[str, list[float | None]]:
    """Hit ratio per key (or '' for everything) in `buckets` equal slices of the window."""
    return sliced(store, window, by, buckets)[1]


def action_totals(store: Store, window: Window) -> ActionTotals:
    """Counts of the window's actions; load times (p50, p99 per engine) from at most its last day of loads."""
    out = ActionTotals()
    if window.hourly:
        hours = [window.since_hour, window.until_hour]
        grouped = store.db.execute(
            "SELECT action, reason, ok, SUM(count), SUM(unused) FROM actions_hourly "
            "WHERE dim = 'all' AND hour >= ? AND hour < ? GROUP BY action, reason, ok",
            hours,
        )
        refused = store.db.execute(
            "SELECT DISTINCT key FROM actions_hourly WHERE dim = 'engine' AND hour >= ? AND hour < ? "
            "AND action = 'refused'",
            hours,
        )
    else:
        args = [*window.minute_bounds_at, window.since_minute, window.until_minute]
        grouped = store.db.execute(
            "SELECT action, reason, ok, SUM(n), SUM(u) FROM ("
            "SELECT action, COALESCE(reason, '') AS reason, ok, COUNT(*) AS n, SUM(unused_prefetch) AS u FROM loads "
            "WHERE at >= ? AND at < ? GROUP BY 1, 2, 3 UNION ALL "
            "SELECT action, reason, ok, SUM(count), SUM(unused * count) FROM actions_minutes "
            "WHERE minute >= ? AND minute < ? GROUP BY 1, 2, 3) GROUP BY 1, 2, 3",
            args,
        )
        refused = store.db.execute(
            "SELECT engine FROM loads WHERE at >= ? AND at < ? AND action = 'refused' UNION "
            "SELECT engine FROM actions_minutes WHERE minute >= ? AND minute < ? AND action = 'refused'",
            args,
        )
    for action, reason, ok, count, unused in grouped:
        if not ok:
            continue
        out.unused_prefetches += unused or 0
        if action in LOAD_ANSWERS and reason in ("prefetch", "plan"):
            out.prefetch_loads += count
        elif action == "touched":
            out.touches += count
    out.refused_engines = sorted(e for (e,) in refused)
    since_at, until_at = window.minute_bounds_at
    last_day = utc_text(parse_utc_text(until_at) - 86400.0)
    timings: dict[str, list[float]] = {}
    for engine, ms in store.db.execute(
        "SELECT engine, ms FROM loads WHERE at >= ? AND at < ? AND action = 'loaded' AND ok AND ms IS NOT NULL "
        "AND source != 'daemon-shadow'",
        [max(since_at, last_day), until_at],
    ):
        timings.setdefault(engine, []).append(ms)
    for engine, values in timings.items():
        values.sort()
        out.load_ms[engine] = (len(values), nearest_rank(values, 50), nearest_rank(values, 99))
    return out


def key_actions(store: Store, window: Window, by: str) -> dict[str, tuple[int, int]] | None:
    """Per key of `by`: (prefetches evicted unused, touches) in the window; None by tenant (actions have none)."""
    if window.hourly and by in ("adapter", "engine", "hour"):
        rows = store.db.execute(
            f"SELECT {'hour' if by == 'hour' else 'key'} AS k, SUM(CASE WHEN ok THEN unused ELSE 0 END), "
            "SUM(CASE WHEN action = 'touched' AND ok THEN count ELSE 0 END) "
            "FROM actions_hourly WHERE dim = ? AND hour >= ? AND hour < ? GROUP BY k",
            ["all" if by == "hour" else by, window.since_hour, window.until_hour],
        )
        return {k: (unused or 0, touches or 0) for k, unused, touches in rows}
    columns: tuple[str, str] | None = {
        "adapter": ("adapter", "adapter"),
        "engine": ("engine", "engine"),
        "minute": ("substr(at, 1, 16) || 'Z'", "minute"),
        "hour": ("substr(at, 1, 13) || ':00Z'", "substr(minute, 1, 13) || ':00Z'"),
    }.get(by)
    if columns is None:
        return None
    rows = store.db.execute(
        f"SELECT k, SUM(u), SUM(t) FROM (SELECT {columns[0]} AS k, SUM(unused_prefetch AND ok) AS u, "
        "SUM(action = 'touched' AND ok) AS t FROM loads WHERE at >= ? AND at < ? GROUP BY k UNION ALL "
        f"SELECT {columns[1]} AS k, SUM(CASE WHEN ok THEN unused * count ELSE 0 END), "
        "SUM(CASE WHEN action = 'touched' AND ok THEN count ELSE 0 END) FROM actions_minutes "
        "WHERE minute >= ? AND minute < ? GROUP BY k) GROUP BY k",
        [*window.minute_bounds_at, window.since_minute, window.until_minute],
    )
    return {k: (unused or 0, touches or 0) for k, unused, touches in rows}


def action_log(
    store: Store, window: Window, engine: str | None = None, adapter: str | None = None, limit: int = 100
) -> list[ActionRow]:
    """The newest `limit` actions in the window (oldest first), optionally of one engine and/or adapter: the rows
    at their times, and the counted actions (`counted_only`) one line per minute and kind, at the minute's start."""
    rows, minutes = " WHERE at >= ? AND at < ?", " WHERE minute >= ? AND minute < ?"
    row_args: list[object] = [window.since_at, window.until_at]
    minute_args: list[object] = [minute_key_at_or_after(parse_utc_text(window.since_at)), window.until_minute]
    for column, value in (("engine", engine), ("adapter", adapter)):
        if value:
            rows += f" AND {column} = ?"
            minutes += f" AND {column} = ?"
            row_args.append(value)
            minute_args.append(value)
    listed = read_actions(store.db, rows + " ORDER BY at DESC, id DESC LIMIT ?", [*row_args, limit])
    counted = read_counted(store.db, minutes + " ORDER BY minute DESC LIMIT ?", [*minute_args, limit])
    newest = sorted([*listed, *counted], key=lambda a: a.at, reverse=True)[:limit]
    return list(reversed(newest))


def detail_since(store: Store) -> str | None:
    """The first minute whose detail the journal still holds, where the daemon dropped older minutes."""
    found = store.db.execute("SELECT since FROM minute_detail WHERE id = 0").fetchone()
    return None if found is None else str(found[0])


def query_plans(store: Store, since: float, until: float, by: str) -> list[tuple[str, str]]:
    """Every query `stats` runs over this window (traced as it runs them), with SQLite's plan for it: what
    docs/benchmarks.md shows and a test holds to index searches."""
    seen: list[str] = []
    store.db.set_trace_callback(seen.append)
    try:
        report(store, since, until, by, 12)
    finally:
        store.db.set_trace_callback(None)
    out: list[tuple[str, str]] = []
    for sql in dict.fromkeys(seen):
        plan = store.db.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
        out.append((sql, "; ".join(r[-1] for r in plan)))
    return out


def window_of(since: float, until: float, by: str | None = None, detail: str | None = None) -> Window:
    """The minutes that start in [since, until), and the same span for actions. Longer than HOURLY_AFTER_S, or
    starting before `detail` (the first minute the journal holds in detail), and not `by` minute: widened to
    whole hours, read from the hourly tables."""
    starts_before_detail = detail is not None and minute_key_at_or_after(since) < detail
    hourly = (until - since > HOURLY_AFTER_S or starts_before_detail) and by != "minute"
    if hourly:
        since, until = math.floor(since / 3600.0) * 3600.0, math.ceil(until / 3600.0) * 3600.0

    first, last = minute_key_at_or_after(since), minute_key_at_or_after(until)
    return Window(first, last, utc_text(since), utc_text(until), hourly)


__all__ = [
    "BY_COLUMNS",
    "ActionTotals",
    "StatsReport",
    "Window",
    "action_log",
    "action_totals",
    "breakdown",
    "detail_since",
    "hit_series",
    "key_actions",
    "query_plans",
    "report",
    "sliced",
    "totals",
    "window_of",
]
