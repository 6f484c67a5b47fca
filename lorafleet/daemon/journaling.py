"""The daemon's half of the session's answers: rollups, journal rows and metrics, held until the next commit.

The session (drive/session.py) counts every outcome and action once and tells this listener of each as it
happens; the listener writes them down — a rollup per (minute, tenant, adapter, engine), an action row per
engine action, the matching metrics — so the journal `stats` reads holds exactly what the summary counts.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from lorafleet.daemon.actors import REFUSED
from lorafleet.daemon.metrics import DaemonMetrics
from lorafleet.drive.session import LOAD_ANSWERS, Answer, Counts, Performed, Recounted, Served, Waited
from lorafleet.drive.settling import MAX_HORIZON_S, recount
from lorafleet.logs.follow import Checkpoint
from lorafleet.policy.core import HIT, LATE, LOAD, TOUCH, UNLOAD, UNSERVED
from lorafleet.policy.events import RequestEvent
from lorafleet.store.db import SHADOW_SOURCE
from lorafleet.store.journal import ActionRow, Outcomes, RollupKey
from lorafleet.times import minute_key, utc_text


@dataclass  # no slots of its own: they would hide the counts' own fields from a compiled session (setup.py)
class Summary(Counts):
    """What a daemon run did: the session's counts, and the daemon's own (for `--once`, the final log line)."""

    lines: int = 0
    bad_lines: int = 0
    unknown_requests: int = 0  # lines naming an adapter the inventory does not know (never loaded)
    reconciles: int = 0
    engine_restarts: int = 0
    vanished: int = 0
    commits: int = 0
    unread_logs: int = 0  # files matching the logs' patterns that could not be opened (their lines not read)
    recounted: int = 0  # requests counted from their line that settling counted again (drive/settling.py)
    engines_alone: Counts | None = None  # lru over the same requests: what the engines do alone (None: it is lru)
    unknown_names: dict[str, int] = field(default_factory=dict)


@dataclass
class Batch:
    """Everything since the last commit. `lines` counts log lines consumed (blank ones included)."""

    rollups: dict[RollupKey, Outcomes] = field(default_factory=dict)
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    log_counts: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # minute read: lines, bad, unknown
    actions: list[ActionRow] = field(default_factory=list)
    errors: list[tuple[str, str, str]] = field(default_factory=list)
    lines: int = 0

    def outcome(self, key: RollupKey) -> Outcomes:
        found = self.rollups.get(key)
        if found is None:
            found = self.rollups[key] = Outcomes()
        return found

    def count_lines(self, minute: str, lines: int, bad: int, unknown: int = 0) -> None:
        had_lines, had_bad, had_unknown = self.log_counts.get(minute, (0, 0, 0))
        self.log_counts[minute] = (had_lines + lines, had_bad + bad, had_unknown + unknown)
        self.lines += lines

    def empty(self) -> bool:
        return not (self.rollups or self.checkpoints or self.log_counts or self.actions or self.errors)


ENGINE_CALLS = (LOAD, TOUCH, UNLOAD)  # the actions that are calls to an engine (not its LRU's, nor forgetting)
# A minute's rollups name at most this many tenants; the rest of the minute's requests are rolled up as one
# OTHER_TENANTS: a log whose tenant field is a user id (a new name per request) would otherwise write a row per
# request, hundreds of MB per million, where the journal keeps tens.
MAX_TENANTS_A_MINUTE = 1_000
OTHER_TENANTS = "(other tenants)"
# The minutes whose tenants are known: a request's wait is answered within its load, and its settling (a move to
# the row its count went to) within the longest horizon, plus the minutes its arrival and the lines around straddle
MINUTES_KEPT = int(MAX_HORIZON_S // 60) + 5

log = logging.getLogger("lorafleet.daemon")


class Journaling:
    """Folds the session's answers into the batch and the metrics. Shadow rows are dated at the policy time the
    action would have happened (so a run over a recorded log files its actions beside that log's requests);
    live rows at the wall time of the batch they belong to (`refresh`)."""

    def __init__(self, metrics: DaemonMetrics, shadow: bool, clock: Callable[[], str]) -> None:
        self.metrics = metrics
        self.shadow = shadow
        self.source = SHADOW_SOURCE if shadow else "daemon"
        self.clock = clock  # the store's: UTC ISO-8601 now
        self.sizes: Mapping[str, int] = {}
        self.batch = Batch()
        self._stamp = clock()
        self._stamp_second = -1
        # Metrics counted since they were last published: a Prometheus counter takes a lock per increment, and a
        # log line makes one to three of them, so they are summed here and published with each commit (at least
        # once a second while lines come: a scrape sees them at most that late).
        self._requests: defaultdict[tuple[str, str], int] = defaultdict(int)
        self._avoided_s: defaultdict[str, float] = defaultdict(float)
        self._paid_s: defaultdict[str, float] = defaultdict(float)
        self._recounted: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        self._unpaid_s: defaultdict[str, float] = defaultdict(float)  # recounted waits not waited
        self._unavoided_s: defaultdict[str, float] = defaultdict(float)  # recounted avoided waits not avoided
        self._actions: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        self._load_s: list[tuple[str, float]] = []
        self._tenants_of: dict[str, set[str]] = {}  # minute -> the tenants its rollups name (MAX_TENANTS_A_MINUTE)
        self._said_other = False

    def take(self) -> Batch:
        """The batch to commit; a new one begins."""
        batch, self.batch = self.batch, Batch()
        return batch

    def hold(self, batch: Batch) -> None:
        """A batch the journal refused is the batch in progress again: what is folded next adds to it, and the
        next commit writes it all (each log's checkpoint the newest), so nothing is lost or counted twice. It
        was taken by the commit that failed, on this thread: nothing was folded since."""
        assert self.batch.empty() and not self.batch.lines
        self.batch = batch

    def publish(self) -> None:
        """The metrics counted since the last call, to Prometheus."""
        metrics = self.metrics
        for (engine, outcome), n in self._requests.items():
            metrics.requests.labels(engine, outcome).inc(n)
        for engine, seconds in self._avoided_s.items():
            metrics.cold_seconds_avoided.labels(engine).inc(seconds)
        for engine, seconds in self._paid_s.items():
            metrics.cold_seconds_paid.labels(engine).inc(seconds)
        for (engine, counted, outcome), n in self._recounted.items():
            metrics.recounted.labels(engine, counted, outcome).inc(n)
        for engine, seconds in self._unpaid_s.items():
            metrics.cold_seconds_recounted.labels(engine).inc(seconds)
        for engine, seconds in self._unavoided_s.items():
            metrics.avoided_seconds_recounted.labels(engine).inc(seconds)
        for (engine, action, result), n in self._actions.items():
            metrics.actions.labels(engine, action, result).inc(n)
        for engine, seconds in self._load_s:
            metrics.load_seconds.labels(engine).observe(seconds)
        for unpublished in (
            self._requests,
            self._avoided_s,
            self._paid_s,
            self._recounted,
            self._unpaid_s,
            self._unavoided_s,
            self._actions,
            self._load_s,
        ):
            unpublished.clear()

    def refresh(self) -> None:
        """Live: rows from now on carry this wall time (one clock read per batch, not per row)."""
        if not self.shadow:
            self._stamp = self.clock()

    def error(self, source: str, message: str) -> None:
        self.batch.errors.append((self.clock(), source, message))

    def fold(self, answers: Iterable[Answer]) -> None:
        """The session's answers, in their order, into rollups, action rows and metrics."""
        for answer in answers:
            kind = type(answer)
            if kind is Served:
                self._served(answer)  # type: ignore[arg-type]
            elif kind is Waited:
                self._waited(answer)  # type: ignore[arg-type]
            elif kind is Performed:
                self._performed(answer)  # type: ignore[arg-type]
            elif kind is Recounted:
                self._recount(answer)  # type: ignore[arg-type]
            else:
                self._count_request("", UNSERVED)

    # --- each answer ----------------------------------------------------------------------------------------
    def _served(self, served: Served) -> None:
        engine, outcome = served.engine, served.outcome
        self._count_request(engine, outcome)
        o = self.batch.outcome(self._key(served))
        o.requests += 1
        o.prefetch_hits += served.used
        if outcome == HIT:
            o.hits += 1
            o.gpu_hits += served.gpu
            if served.avoided_ms:
                o.avoided_ms += served.avoided_ms
                self._avoided_s[engine] += served.avoided_ms / 1000.0
        elif outcome == LATE:
            o.late += 1
        else:
            o.misses += 1

    def _recount(self, recounted: Recounted) -> None:
        """A request counted from its line that settling found served otherwise (`Recounted`): its rollup, filed
        again under its arrival's minute (the commit adds to it), moves it from what it was counted as to what it
        was (or, served as counted, corrects only its wait, GPU hit and use of a prefetch), with the wait it did
        wait and the wait a prefetch did avoid; the metrics, counters that only grow, count a move of outcome apart
        (`lorafleet_requests_recounted_total`; a wait counted that was not waited in
        `lorafleet_cold_seconds_recounted_total`, one waited that was not counted in the paid seconds; a wait
        counted avoided that was not in `lorafleet_cold_seconds_avoided_recounted_total`, one avoided that was not
        counted in the avoided seconds)."""
        engine, was, served = recounted.engine, recounted.counted, recounted.served
        o = self.batch.outcome(self._key_of(recounted.event, engine))
        more = recount(o, was, served, "cold_ms", "avoided_ms", "prefetch_hits")
        if served.outcome != was.outcome:
            self._recounted[(engine, was.outcome, served.outcome)] += 1
        _grow(self._paid_s, self._unpaid_s, engine, more)
        _grow(self._avoided_s, self._unavoided_s, engine, served.avoided_ms - was.avoided_ms)

    def _waited(self, waited: Waited) -> None:
        o = self.batch.outcome(self._key(waited.request))
        o.cold_ms += waited.waited_ms
        o.avoided_ms += waited.avoided_ms
        engine = waited.request.engine
        self._paid_s[engine] += waited.waited_ms / 1000.0
        if waited.avoided_ms:
            self._avoided_s[engine] += waited.avoided_ms / 1000.0

    def _performed(self, p: Performed) -> None:
        call = p.call
        adapter, size = call.adapter, self.sizes.get(call.adapter)
        self.batch.actions.append(
            ActionRow(
                self._stamp_of(p.at),
                self.source,
                adapter,
                call.engine,
                p.answer,
                p.ok,
                p.ms,
                size,
                p.error,
                call.reason,
                call.unused,
            )
        )
        if call.action in ENGINE_CALLS:  # sent to the engine (live) or simulated as sent (shadow)
            result = "ok" if p.ok else ("refused" if p.answer == REFUSED else "failed")
            self._actions[(call.engine, call.action, result)] += 1
            if p.ok and call.action == LOAD and p.answer in LOAD_ANSWERS and p.ms is not None:
                self._load_s.append((call.engine, p.ms / 1000.0))

    # --- helpers --------------------------------------------------------------------------------------------
    def _key(self, served: Served) -> RollupKey:
        return self._key_of(served.event, served.engine)

    def _key_of(self, event: RequestEvent, engine: str) -> RollupKey:
        assert event.adapter is not None
        minute = minute_key(event.time)
        tenant = event.tenant or ""
        if tenant:
            named = self._tenants_of.get(minute)
            if named is None:
                named = self._tenants_of[minute] = set()
                if len(self._tenants_of) > MINUTES_KEPT:
                    del self._tenants_of[next(iter(self._tenants_of))]
            if tenant not in named:
                if len(named) < MAX_TENANTS_A_MINUTE:
                    named.add(tenant)
                else:
                    tenant = self._other(minute)
        return (minute, tenant, event.adapter, engine)

    def _other(self, minute: str) -> str:
        if not self._said_other:
            self._said_other = True
            log.warning(
                "more than %d tenants in the minute %s: the rest of its requests are journaled as %r (is the "
                "tenant field of gateway.logs a per-user id?); said once",
                MAX_TENANTS_A_MINUTE,
                minute,
                OTHER_TENANTS,
            )
        return OTHER_TENANTS

    def _count_request(self, engine: str, outcome: str) -> None:
        self._requests[(engine, outcome)] += 1

    def _stamp_of(self, at: float) -> str:
        if not self.shadow:
            return self._stamp
        second = int(at)
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp = utc_text(second)
        return self._stamp


def _grow(more: defaultdict[str, float], less: defaultdict[str, float], engine: str, change_ms: float) -> None:
    """A settled change of `change_ms` in one of the metrics' seconds, which are counters that only grow: an
    increase to `more`, a decrease to `less` (the counter a dashboard takes off it)."""
    if change_ms > 0:
        more[engine] += change_ms / 1000.0
    else:
        less[engine] -= change_ms / 1000.0


__all__ = ["Batch", "Journaling", "Summary"]
