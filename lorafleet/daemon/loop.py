"""The daemon's loop: follow the logs, feed the policy core, hand its decisions to the engines, journal it all.

One thread owns the core, the book and the journal; engine calls run on one actor thread per engine
(actors.py), whose results come back through a queue. Time: each request is classified at its own log
timestamp (clamped so the core's clock never runs backwards when files interleave); between lines the policy's
clock is the newest line's time plus the wall time elapsed since it was read, so a log that lags by L seconds
shifts scheduled prefetches by L and never fires them early. `--once` (and `--shadow`) run on log time alone,
which makes a shadow run over a recorded log the same computation as `replay`.

Crash safety: every batch's rollups, the checkpoints just after its lines and the actions finished meanwhile
commit in one transaction; after a crash the lines after the last committed checkpoint are read again, so no
request is lost or counted twice.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lorafleet.daemon.actors import LOAD, RECONCILE, TOUCH, UNLOAD, Done, EngineActor, FileCheck, Work
from lorafleet.daemon.breaker import STATE_VALUES
from lorafleet.daemon.fleet import Fleet
from lorafleet.daemon.metrics import DaemonMetrics
from lorafleet.daemon.tally import Pending, Summary, minute_of
from lorafleet.engines import EngineClient, make_client
from lorafleet.engines.executor import Stop
from lorafleet.errors import InputError
from lorafleet.inventory.model import Engine, Inventory
from lorafleet.logs.follow import Checkpoint, LogFollower
from lorafleet.policy.core import EVICT, Decision
from lorafleet.policy.core import TOUCH as TOUCH_DECISION
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.placement import PlannedResidency
from lorafleet.store.db import Store, format_utc
from lorafleet.store.journal import CheckpointRow, commit_progress, prune, read_checkpoints

log = logging.getLogger("lorafleet.daemon")


@dataclass(frozen=True)
class DaemonOptions:
    policy: str = "lorafleet"
    shadow: bool = False  # decide and journal, send nothing: simulated engines stand in
    once: bool = False  # process what the logs hold now, then exit
    from_start: bool = False  # a first start reads the logs' history (else from their end)
    plan: PlannedResidency | None = None
    logs: tuple[str, ...] = ()  # instead of the inventory's gateway.logs
    reconcile_every_s: float = 30.0
    retention_days: float = 14.0
    poll_s: float = 0.025  # an idle poll is a stat per file: cheap, and it bounds the decision latency
    commit_every_s: float = 1.0
    commit_every_lines: int = 10_000  # bounds what a batch holds in memory (and what a crash makes re-read)
    settle_s: float = 30.0  # --once: the longest wait for engine calls still in flight at the end
    metrics_addr: str | None = None


class Daemon:
    def __init__(
        self,
        inventory: Inventory,
        store: Store,
        options: DaemonOptions,
        reload: Callable[[], Inventory] | None = None,
        client_factory: Callable[[Engine], EngineClient] = make_client,
        files_gone: FileCheck | None = None,
        stop: Stop | None = None,
    ) -> None:
        self.store = store
        self.options = options
        self.reload_inventory = reload
        self.client_factory = client_factory
        self.files_gone: FileCheck = files_gone or (lambda engine, paths: [])
        self.stop = stop or Stop()
        self.reload_requested = threading.Event()
        self.metrics = DaemonMetrics()
        self.summary = Summary()
        self.pending = Pending()
        self.outbox: queue.Queue[Done] = queue.Queue()
        self.actors: dict[str, EngineActor] = {}
        self.log_now: float | None = None  # the newest log time the core has seen
        self.log_read_at = 0.0  # monotonic time that line was read
        self.started = False
        self.patterns = log_patterns(inventory, options.logs)
        self.fleet = Fleet(
            inventory,
            options.policy,
            options.shadow,
            options.plan,
            self.patterns,
            self.metrics,
            self.summary,
            self.pending,
            store.clock,
        )
        saved = {c.path: Checkpoint(**vars(c)) for c in read_checkpoints(store)}
        self.followers = [LogFollower([p], saved, options.from_start) for p in self.patterns]
        self._sync_actors()

    def _sync_actors(self) -> None:
        """One actor per inventory engine (none in shadow mode); engines that left the inventory are retired."""
        if self.options.shadow:
            return
        engines = {e.key: e for e in self.fleet.inventory.engines}
        for key in [k for k in self.actors if k not in engines]:
            self.actors.pop(key).retire()
        for key, engine in engines.items():
            if key not in self.actors:
                actor = EngineActor(engine, self.client_factory, self.outbox, self.stop, self.files_gone)
                self.actors[key] = actor
                actor.start()

    # --- the loop -------------------------------------------------------------------------------------------
    def run(self) -> Summary:
        options = self.options
        if options.metrics_addr:
            bound = self.metrics.serve(options.metrics_addr)
            log.info("metrics on http://%s/metrics", bound)
        fleet = self.fleet
        next_reconcile = time.monotonic()  # at once: learn what the engines hold before acting on guesses
        next_commit = time.monotonic() + options.commit_every_s
        next_prune = 0.0
        first = True
        try:
            while not self.stop.is_set():
                if self.reload_requested.is_set():
                    self.reload_requested.clear()
                    self._reload()
                read = self._read_logs()
                if first:
                    first = False
                    # Pin where reading starts (a first start begins at the files' ends): a crash before the
                    # next commit must not move that point to wherever the files end by then.
                    for follower in self.followers:
                        for checkpoint in follower.checkpoints():
                            self.pending.checkpoints.setdefault(checkpoint.path, CheckpointRow(**vars(checkpoint)))
                    self._commit()
                    files = sum(len(f.tails) for f in self.followers)
                    log.info("following %d log file(s) of %s", files, ", ".join(self.patterns))
                if not self.started and not read and not options.once:
                    self._start(time.time())  # nothing to catch up on: the policy starts on the wall clock
                self._drain()
                if not options.once:
                    try:
                        self._send(fleet.advance(self._now()))
                    except Exception as exc:  # a bug must cost one scheduled prefetch, never the daemon
                        self._internal_error("scheduled work", exc)
                now = time.monotonic()
                if not options.shadow and now >= next_reconcile:
                    self._reconcile()
                    next_reconcile = now + options.reconcile_every_s
                if now >= next_commit or self.pending.lines >= options.commit_every_lines:
                    self._commit()
                    next_commit = now + options.commit_every_s
                if now >= next_prune:
                    self._prune()
                    next_prune = now + 3600.0
                if options.once and not read:
                    break
                if not read:
                    self.stop.wait(options.poll_s)
        finally:
            self._finish()
        return self.summary

    def _finish(self) -> None:
        """Settle (--once: the calls in flight, the simulated loads), commit the last batch, stop the actors."""
        if self.options.once:
            if self.options.shadow:
                self._send(self.fleet.advance(float("inf")))
            else:
                deadline = time.monotonic() + self.options.settle_s
                while not self.stop.is_set() and time.monotonic() < deadline and self._busy():
                    self._drain(wait_s=0.05)
        self._drain()
        counters = self.fleet.core.counters
        self.summary.prefetch_used = counters.prefetch_used
        self.summary.wasted_prefetches = counters.wasted_prefetches
        self._commit()
        self.stop.set()
        for actor in self.actors.values():
            actor.thread.join(timeout=1.0)
        self.metrics.close()
        for follower in self.followers:
            follower.close()

    def _busy(self) -> bool:
        return any(not a.inbox.empty() or a.busy_since is not None for a in self.actors.values()) or (
            not self.outbox.empty()
        )

    def _now(self) -> float:
        """The policy's clock: log time, advanced by wall time since the newest line was read (not in --once)."""
        if self.log_now is None:
            return time.time()
        if self.options.once:
            return self.log_now
        return self.log_now + max(0.0, time.monotonic() - self.log_read_at)

    # --- logs -----------------------------------------------------------------------------------------------
    def _read_logs(self) -> int:
        read = 0
        lag = 0
        for follower, parser in zip(self.followers, self.fleet.parsers, strict=True):
            for batch in follower.poll():
                read_at = time.monotonic()
                if not self.options.shadow:
                    self.fleet.stamp = self.store.clock()
                tally = parser.tally
                lines0, bad0 = tally.lines, tally.bad_lines
                for line in batch.lines:
                    event = parser.parse(line)
                    if event is not None:
                        try:
                            self._on_event(event, read_at)
                        except Exception as exc:  # a bug must cost one request, never the daemon
                            self._internal_error("a request", exc)
                lines, bad = tally.lines - lines0, tally.bad_lines - bad0
                self.pending.count_lines(minute_of(time.time()), lines, bad)
                self.summary.lines += lines
                self.summary.bad_lines += bad
                self.metrics.log_lines.labels("ok").inc(lines - bad)
                self.metrics.log_lines.labels("bad").inc(bad)
                self.pending.checkpoints[batch.path] = CheckpointRow(**vars(batch.checkpoint))
                read += len(batch.lines)
                if self.pending.lines >= self.options.commit_every_lines:
                    self._commit()
            lag += follower.lag_bytes()
        self.metrics.log_lag_bytes.set(lag)
        if self.log_now is not None:
            self.metrics.log_lag_seconds.set(max(0.0, time.time() - self.log_now))
        return read

    def _start(self, now: float) -> None:
        """The policy starts (plan preload) at the first line's time, or the wall clock when the logs are idle,
        so its clock never runs backwards."""
        self.started = True
        self._send(self.fleet.start(now))

    def _on_event(self, event: RequestEvent, read_at: float) -> None:
        if event.kind != ADAPTER:
            return
        if not self.started:
            self._start(event.time)
        now = event.time if self.log_now is None else max(event.time, self.log_now)
        self._send(self.fleet.advance(now), read_at)
        self.log_now, self.log_read_at = now, read_at
        decisions, _ = self.fleet.request(now, event)
        self._send(decisions, read_at)

    # --- actions --------------------------------------------------------------------------------------------
    def _send(self, decisions: list[Decision], read_at: float | None = None) -> None:
        """Hand decisions to the engines' actors (or, in shadow mode, the simulated engines took them already)."""
        if self.options.shadow or not decisions:
            return
        queued_at = read_at if read_at is not None else time.monotonic()
        for d in decisions:
            actor = self.actors.get(d.engine)
            if actor is None:
                continue
            if d.action == EVICT and not actor.profile.unload_frees:
                continue  # vLLM evicts by itself; the touches already sent make its LRU pick this victim
            adapter = self.fleet.inventory.adapters[d.adapter]
            state = self.fleet.core.book.engines[d.engine]
            action = {EVICT: UNLOAD, TOUCH_DECISION: TOUCH}.get(d.action, LOAD)
            reason = self.fleet.reason_of(d)
            actor.submit(Work(action, d.adapter, adapter.path, reason, d.adapter in state.pins, queued_at))

    def _drain(self, wait_s: float = 0.0) -> None:
        if not self.options.shadow:
            self.fleet.stamp = self.store.clock()
        while True:
            try:
                done = self.outbox.get(timeout=wait_s) if wait_s else self.outbox.get_nowait()
            except queue.Empty:
                return
            wait_s = 0.0
            actor = self.actors.get(done.engine)
            if actor is not None:
                self.metrics.circuit.labels(done.engine).set(STATE_VALUES[actor.breaker.state])
            try:
                if done.work.action == RECONCILE:
                    self._send(self.fleet.reconciled(self._now(), done))
                    continue
                if done.sent_at is not None:
                    self.metrics.decision_latency.observe(max(0.0, done.sent_at - done.work.queued_at))
                self._send(self.fleet.action_done(self._now(), done))
            except Exception as exc:  # a bug must cost one result, never the daemon
                self._internal_error(f"{done.engine}'s result", exc)

    def _internal_error(self, what: str, exc: Exception) -> None:
        """Log a bug with its traceback, journal it and go on: the daemon outlives its own mistakes."""
        log.error("internal error handling %s (continuing): %s: %s", what, type(exc).__name__, exc, exc_info=exc)
        self.pending.errors.append((self.store.clock(), "daemon", f"internal error: {type(exc).__name__}"))

    def _reconcile(self) -> None:
        self.summary.reconciles += 1
        for actor in self.actors.values():
            actor.submit(Work(RECONCILE, reason="reconcile"))

    # --- inventory reload, journal ----------------------------------------------------------------------------
    def _reload(self) -> None:
        if self.reload_inventory is None:
            return
        try:
            inventory = self.reload_inventory()
        except InputError as exc:
            message = "inventory reload failed, keeping the one in use: " + "; ".join(exc.lines())
            log.error("%s", message)
            self.pending.errors.append((self.store.clock(), "daemon", message))
            return
        self.fleet.replace_inventory(inventory, self.patterns)
        self._sync_actors()
        log.info("inventory reloaded: %d engines, %d adapters", len(inventory.engines), len(inventory.adapters))

    def _commit(self) -> None:
        pending = self.pending
        if pending.empty():
            return
        self.fleet.update_gauges()
        commit_progress(
            self.store,
            pending.rollups,
            pending.checkpoints.values(),
            pending.log_counts,
            pending.actions,
            pending.errors,
        )
        self.summary.commits += 1
        self.metrics.commits.inc()
        self.fleet.pending = self.pending = Pending()

    def _prune(self) -> None:
        """Retention, measured back from the newest log line (or the wall clock, if earlier): a recorded log's
        history, and the shadow actions dated in it, are kept while they are being read."""
        keep_s = self.options.retention_days * 86400.0
        wall = time.time()
        newest = min(wall, self.log_now) if self.log_now is not None else wall
        cutoff = newest - keep_s
        dropped = prune(self.store, minute_of(cutoff), format_utc(datetime.fromtimestamp(cutoff, UTC)))
        if dropped:
            log.info("retention: dropped %d journal rows older than %g days", dropped, self.options.retention_days)


def log_patterns(inventory: Inventory, override: tuple[str, ...] = ()) -> list[str]:
    """The files (or globs) to follow: `override`, else the inventory's gateway.logs, a relative path taken
    from the inventory file's folder (the inventory and its logs move together)."""
    if override:
        return [os.path.abspath(p) for p in override]
    base = Path(inventory.sources[0]).parent if inventory.sources else Path.cwd()
    patterns = [os.path.abspath(base / p) for p in (s.path for s in inventory.gateway_logs)]
    if not patterns:
        raise InputError("no access log to follow", hint="list gateway.logs in the inventory, or pass --log PATH")
    return patterns


__all__ = ["Daemon", "DaemonOptions", "log_patterns"]
