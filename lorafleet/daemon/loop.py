"""The daemon's loop, the live driver: follow the logs, feed the session, hand its calls to the engines, commit.

One thread owns the session (the policy core, the book) and the journal; engine calls run on one actor thread
per engine (actors.py), whose answers come back through a queue. Time: each request is classified at its own
log timestamp (the session never lets its clock run backwards when files interleave); between lines the
policy's clock is the newest line's time plus the wall time elapsed since it was read, so a log that lags by L
seconds shifts scheduled prefetches by L and never fires them early. `--once` (and `--shadow`) run on log time
alone, which makes a shadow run over a recorded log the same computation as `replay`: the same session over
the same requests, with simulated engines.

Crash safety: every batch's rollups, the checkpoints just after its lines and the actions finished meanwhile
commit in one transaction; after a crash the lines after the last committed checkpoint are read again, so no
request is lost or counted twice.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from lorafleet.collector import settle, unsettle
from lorafleet.daemon.actors import RECONCILE, RECONCILES_AT_ONCE, Done, EngineActor, FileCheck, Work
from lorafleet.daemon.breaker import CLOSED
from lorafleet.daemon.hints import OUTCOMES, SWITCH_INTERVAL_S, HintIngress, HintJoin, hint_headers
from lorafleet.daemon.journaling import Batch, Journaling, Summary
from lorafleet.daemon.metrics import DaemonMetrics
from lorafleet.drive.leader import LeaderPolicy
from lorafleet.drive.policies import OFFLINE_POLICIES, make_policy
from lorafleet.drive.session import NOT_REGISTERED, Call, Counts, Held, Session
from lorafleet.engines import EngineClient, make_client
from lorafleet.engines.kubernetes import Discovery
from lorafleet.errors import InputError, OperationError
from lorafleet.inventory.gateway import log_patterns
from lorafleet.inventory.model import Engine, Inventory, with_discovered
from lorafleet.logs.reader import MAX_NAME_CHARS, NameResolver
from lorafleet.logs.records import LogTally
from lorafleet.logs.stream import EventBatch, LogStream
from lorafleet.policy.baselines import LruPolicy
from lorafleet.policy.core import TOUCH_BUDGET, PolicyCore
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.placement import PlannedResidency
from lorafleet.stopping import Stop
from lorafleet.store.db import Store
from lorafleet.store.journal import (
    PolicyMemory,
    commit_or_drop,
    newest_log_minute,
    prune,
    read_checkpoints,
    read_memory,
)
from lorafleet.store.memory import FORMAT, MemoryRefusedError, fingerprint, freeze, thaw
from lorafleet.times import FOLLOW_POLL_S, minute_epoch, minute_key, utc_text

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
    minute_retention_days: float = 2.0  # minute detail; the hourly rows keep the rest of `retention_days`
    poll_s: float = FOLLOW_POLL_S  # an idle poll is a stat per file: cheap, and it bounds the decision latency
    commit_every_s: float = 1.0
    commit_every_lines: int = 10_000  # bounds what a batch holds in memory (and what a crash makes re-read)
    settle_s: float = 30.0  # --once: the longest wait for engine calls still in flight at the end
    metrics_addr: str | None = None
    touch_budget: float = TOUCH_BUDGET  # touches per adapter request each engine serves (policy/core.py)
    watch_inventory_s: float = 1.0  # how often the inventory file is looked at (a ConfigMap update reloads it)
    ready_stale_s: float = 30.0  # /ready fails when the loop has not gone round for this long
    # What the policy learned (store/memory.py) goes with a commit at most this often — and no more often than
    # keeps freezing it within `memory_share` of the loop's time (a big fleet's memory takes longer to freeze).
    # By default with every commit that share allows: a commit without it holds lines a `kill -9` leaves unlearned.
    memory_every_s: float = 0.0
    memory_share: float = 0.05
    hints_addr: str | None = None  # where the gateway's start hints are taken (daemon/hints.py); None: off
    # A commit the state database refuses (a full disk, an I/O error, a lock held past the busy wait) stops
    # nothing but the journal: the batch is held and tried again every `journal_retry_s` while the warming goes
    # on, until more than `max_held_lines` log lines are held; then the daemon stops (the logs are read again
    # from the last commit at the next start, as after a crash).
    journal_retry_s: float = 5.0
    max_held_lines: int = 1_000_000


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
        reloads: threading.Event | None = None,
        discovery: Discovery | None = None,
        inventory_stamp: Callable[[], object] | None = None,
    ) -> None:
        if options.policy in OFFLINE_POLICIES:
            raise ValueError(f"{options.policy} needs the future: replay only")
        self.store = store
        self.options = options
        self.reload_inventory = reload
        self.client_factory = client_factory
        self.files_gone: FileCheck = files_gone or (lambda engine, paths: [])
        self.stop = stop or Stop()
        self.reload_requested = reloads or threading.Event()  # set (by SIGHUP): re-read the inventory
        self.metrics = DaemonMetrics("shadow" if options.shadow else "live", options.ready_stale_s)
        # Engines found on Kubernetes join the inventory's own: the inventory as written is `base`, the one in use
        # is it with what discovery found (one rule, `_adopt`, for a reload, a file change and a pod's coming).
        self.discovery = discovery or Discovery()
        self.discovery.configure(inventory)  # InputError at start: a broken API access is bad input
        self.base = inventory
        self._marked: tuple[Inventory, str] | None = None  # the base inventory and its fingerprint (`_mark`)
        self._discovered = self.discovery.version
        inventory = with_discovered(inventory, self.discovery.found())
        self.inventory_stamp = inventory_stamp
        self._stamp = inventory_stamp() if inventory_stamp is not None else None
        self.summary = Summary()
        self.journal = Journaling(self.metrics, options.shadow, store.clock)
        self.outbox: queue.Queue[Done] = queue.Queue()
        self.hints: HintIngress | None = None  # the gateway's start hints, when --hints-addr is on
        # Hints waiting for their log lines; one closed without its line runs no more in the book.
        self.joins: HintJoin[Held] = HintJoin(closed=self._unjoined)
        self._hints_exported = dict.fromkeys(OUTCOMES, 0)
        self.actors: dict[str, EngineActor] = {}
        self.reconciles = threading.Semaphore(RECONCILES_AT_ONCE)
        # The newest instant the logs (a line's writing, not its request's arrival) or a hint have shown: with the
        # wall time since, the policy's clock (`_now`).
        self.log_now: float | None = None
        self.log_read_at = 0.0  # monotonic time that line was read
        self._found: dict[str, bool] = {}  # per log pattern: whether a file matched it at the last look
        self._next_reconcile = time.monotonic()  # live: the first reconcile comes before any action
        self._seen_action = store.last_action_id()  # warm's and unload's rows after this one are news
        self.inventory = inventory
        placements = options.plan.placements if options.plan else ()
        core = self._remembered(inventory) or PolicyCore(
            inventory, make_policy(options.policy, plan=placements), touch_budget=options.touch_budget
        )
        self._next_memory = time.monotonic() + options.memory_every_s
        self._unremembered = False  # lines were committed since the memory last went with a commit
        self._refused_since: float | None = None  # monotonic: when the journal began refusing commits, if it is
        self._retry_at = 0.0  # no commit is tried before this (monotonic) while it refuses them
        self._refusal_said = 0.0  # when the last refusal was logged (once a minute while it lasts)
        self.session = Session(core, options.shadow, self.summary, placements, read_after_s=options.poll_s)
        # The engines alone over the same requests, simulated beside the policy, for the summary's baseline (the lru
        # policy is that baseline itself: its own counts are the figure). The lorafleet policy already simulates
        # them, as its lru expert: that copy is the figure, not an eighth session per line doing the same work.
        self.baseline: Session | None = None  # a session this loop drives beside the policy's
        self.alone: Session | None = None  # the one whose counts are the engines-alone figure
        if options.policy != LruPolicy.name:
            policy = core.policy
            self.alone = policy.expert(LruPolicy.name) if isinstance(policy, LeaderPolicy) else None
            if self.alone is None:
                lru = PolicyCore(inventory, LruPolicy(), like=core)
                self.alone = self.baseline = Session(lru, True, Counts(), answers=False)
            self.summary.engines_alone = self.alone.counts
        self.patterns = log_patterns(inventory, options.logs)
        saved = {c.path: c for c in read_checkpoints(store)}
        self.streams = [LogStream(p, inventory, saved, options.from_start) for p in self.patterns]
        self._use(inventory)
        self._sync_actors()

    def _unjoined(self, held: Held) -> None:
        self.session.unjoined(held)

    def _use(self, inventory: Inventory) -> None:
        """What follows from the inventory in use: the parsers' names, the journal's sizes, the budget gauges."""
        resolver = self.resolver = NameResolver(inventory)
        for stream in self.streams:
            stream.use(inventory, resolver)
        self.journal.sizes = self.session.core.sizes
        for key, state in self.session.core.book.engines.items():
            self.metrics.add_engine(key)
            self.metrics.set_budget(key, state.budget.host_slots, state.budget.budget_bytes)
            actor = self.actors.get(key)  # shadow: simulated engines, whose circuits never open
            self.metrics.set_circuit(key, actor.breaker.state if actor is not None else CLOSED)

    def _sync_actors(self, reconcile: bool = False) -> None:
        """One actor per inventory engine (none in shadow mode): engines that left the inventory are retired, and
        so is the actor of an engine whose settings changed (a pod back at another address); with `reconcile`,
        each new actor first reads its engine's registry, before any call the session sends it."""
        if self.options.shadow:
            return
        engines = {e.key: e for e in self.inventory.engines}
        for key in [k for k, a in self.actors.items() if not _same(engines.get(k), a.engine)]:
            self.actors.pop(key).retire()
        for key, engine in engines.items():
            if key not in self.actors:
                actor = EngineActor(
                    engine, self.client_factory, self.outbox, self.stop, self.files_gone, reconciles=self.reconciles
                )
                self.actors[key] = actor
                actor.start()
                if reconcile:
                    actor.submit(Work(RECONCILE, watch=self._watched(key)))

    # --- the loop -------------------------------------------------------------------------------------------
    def run(self) -> Summary:
        options = self.options
        if options.metrics_addr:
            bound = self.metrics.serve(options.metrics_addr)
            log.info("metrics on http://%s/metrics", bound)
        switch = sys.getswitchinterval()
        if options.hints_addr:
            self.hints = HintIngress(hint_headers(self.inventory))
            log.info("taking the gateway's start hints on http://%s", self.hints.serve(options.hints_addr))
            sys.setswitchinterval(min(switch, SWITCH_INTERVAL_S))  # the endpoint answers while the loop works
        try:
            settle()  # the inventory, the books and what the policy learned before: long-lived
            self.metrics.beat()
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self._reload()
            for stream in self.streams:
                stream.open()  # a first start reads from the files' ends as of now, not after the reconcile
            self._reconcile_first()
            self._loop(self._first_read())
        finally:
            try:
                self._finish()  # its last commit may be refused: the process's settings come back all the same
            finally:
                sys.setswitchinterval(switch)
                unsettle()  # what the commits set aside is the collector's again (a run inside a longer process)
        return self.summary

    def _reconcile_first(self) -> None:
        """Before the first action, learn what every engine holds: a load decided on an empty book could land on
        an engine that is full (an old SGLang refuses it) or already has the adapter. Bounded by the engines'
        call deadlines; an engine that does not answer by then is left to its breaker and the next reconcile."""
        if self.options.shadow or not self.actors:
            return
        deadline = time.monotonic() + max(e.call_deadline_s for e in self.inventory.engines) + 1.0
        self._reconcile()
        waiting = set(self.actors)
        while waiting and not self.stop.is_set() and time.monotonic() < deadline:
            try:
                done = self.outbox.get(timeout=0.05)
            except queue.Empty:
                continue
            if done.work.action == RECONCILE:
                waiting.discard(done.engine)
            try:
                self._answered(done)
            except Exception as exc:
                self._internal_error(f"{done.engine}'s result", exc)
        self._next_reconcile = time.monotonic() + self.options.reconcile_every_s

    def _first_read(self) -> int:
        """The first poll; then pin where reading starts (a first start begins at the files' ends): a crash
        before the next commit must not move that point to wherever the files end by then."""
        read = self._read_logs()
        batch = self.journal.batch
        for stream in self.streams:
            for checkpoint in stream.checkpoints():
                batch.checkpoints.setdefault(checkpoint.path, checkpoint)
        self._commit()
        files = sum(stream.files for stream in self.streams)
        log.info("following %d log file(s) of %s", files, ", ".join(self.patterns))
        if not files and self.options.once:
            raise OperationError(f"no log file to read: tried {', '.join(self.patterns)}")
        self._watch_files()
        return read

    def _watch_files(self) -> None:
        """Say when a followed pattern has no file (at start, and whenever that changes): a daemon following
        nothing must not look like one following a quiet log."""
        for stream in self.streams:
            found = stream.files > 0
            if self._found.get(stream.pattern) == found:
                continue
            if not found:
                log.warning("%s: no such log file; following it as soon as it appears", stream.pattern)
            elif stream.pattern in self._found:
                log.warning("%s: the log file is there now; following it", stream.pattern)
            self._found[stream.pattern] = found

    def _loop(self, read: int) -> None:
        options = self.options
        next_reconcile = self._next_reconcile
        next_commit = time.monotonic() + options.commit_every_s
        next_prune, pruned_log_hour = 0.0, None
        next_look = time.monotonic() + options.watch_inventory_s
        while not self.stop.is_set():
            self.metrics.beat()
            if not self.session.started and not read and not options.once:
                self._send(self.session.start(time.time()))  # nothing to catch up on: start on the wall clock
                self.journal.fold(self.session.take_answers())
            self._drain()
            self._take_hints()
            if not options.shadow:
                self._notice_cli_actions()
            if not options.once:
                try:
                    self._send(self.session.advance(self._now()))
                    self.journal.fold(self.session.take_answers())
                except Exception as exc:
                    self._internal_error("scheduled work", exc)
            now = time.monotonic()
            if not options.shadow and now >= next_reconcile:
                self._reconcile()
                next_reconcile = now + options.reconcile_every_s
            if now >= next_commit or self.journal.batch.lines >= options.commit_every_lines:
                self._commit()
                next_commit = now + options.commit_every_s
            log_hour = None if self.log_now is None else int(self.log_now // 3600.0)
            if now >= next_prune or log_hour != pruned_log_hour:  # every hour, of the wall clock or the log's
                try:
                    self._prune()
                except OperationError as exc:  # as a refused commit: the journal's trouble, not the warming's
                    log.error("retention not applied: %s; tried again within the hour", exc.message)
                next_prune, pruned_log_hour = now + 3600.0, log_hour
            if options.once and not read:
                return
            if not read and self.stop.wait(options.poll_s):
                return
            if self.inventory_stamp is not None and time.monotonic() >= next_look:
                next_look = time.monotonic() + options.watch_inventory_s
                self._look_at_inventory()
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                self._reload()
            if self.discovery.version != self._discovered:
                self._adopt(self.base)
            read = self._read_logs()

    def _finish(self) -> None:
        """Settle (--once: the calls in flight, the simulated loads), stop the actors — a call in flight gets up to
        a second, all together, to return — and commit the last batch with every answer that came back."""
        if self.options.once:
            if self.options.shadow:
                self.session.finish()
                self.journal.fold(self.session.take_answers())
            else:
                deadline = time.monotonic() + self.options.settle_s
                while not self.stop.is_set() and time.monotonic() < deadline and self._busy():
                    self._drain(wait_s=0.05)
        if self.alone is not None:
            self.alone.finish()
        seen = LogTally()
        for stream in self.streams:
            seen.merge(stream.tally)
        self.summary.unknown_names = seen.unknown_names
        self.summary.unread_logs = self._unread_logs()
        self.stop.set()
        self.metrics.stopped()
        self.discovery.close()
        for actor in self.actors.values():
            actor.wake()
        deadline = time.monotonic() + 1.0
        for actor in self.actors.values():
            actor.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._drain()
        try:
            self.session.settle_all()  # every count made from a line, settled with what is known
        except Exception as exc:  # the last commit goes out whatever this does
            self._internal_error("settling the counts", exc)
        self.summary.recounted = self.session.recounted
        self.journal.fold(self.session.take_answers())
        self._commit(final=True)
        self.metrics.close()
        if self.hints is not None:
            self.hints.close()
        for stream in self.streams:
            stream.close()

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
        for stream in self.streams:
            for batch in stream.poll():
                self._consume(batch)
                read += batch.consumed
                if self.journal.batch.lines >= self.options.commit_every_lines:
                    self._commit()
            lag += stream.lag_bytes()
        if self._found:
            self._watch_files()
        self.metrics.log_lag_bytes.set(lag)
        self.metrics.log_files_unread.set(self._unread_logs())
        if self.log_now is not None:
            self.metrics.log_lag_seconds.set(max(0.0, time.time() - self.log_now))
        return read

    def _unread_logs(self) -> int:
        """Files the logs' patterns match that could not be opened at the last look (logs/follow.py)."""
        return sum(len(stream.unopened) for stream in self.streams)

    def _consume(self, batch: EventBatch) -> None:
        read_at = time.monotonic()
        self.journal.refresh()
        for event in batch.events:
            if event.kind == ADAPTER:
                try:
                    self._on_event(event, read_at)
                except Exception as exc:
                    self._internal_error("a request", exc)
        # Counted in the minute of the batch's newest request (the wall clock's when it held none), beside its rollups.
        newest = max((e.time for e in batch.events), default=time.time())
        self.journal.batch.count_lines(minute_key(newest), batch.lines, batch.bad, batch.unknown)
        self.summary.lines += batch.lines
        self.summary.bad_lines += batch.bad
        self.summary.unknown_requests += batch.unknown
        self.metrics.log_lines.labels("ok").inc(batch.lines - batch.bad)
        self.metrics.log_lines.labels("bad").inc(batch.bad)
        self.journal.batch.checkpoints[batch.path] = batch.checkpoint
        if self.options.shadow and batch.events:  # live measures each call at its sending (see _answered)
            self.metrics.decision_latency.observe(time.monotonic() - read_at)

    def _take_hints(self) -> None:
        """Learn from the start hints that came since the last pass (daemon/hints.py); close those whose log
        lines did not come in time."""
        ingress = self.hints
        if ingress is None:
            return
        resolver = self.resolver
        for hint in ingress.take():
            kind, adapter, base = resolver.model(hint.model)
            if kind != ADAPTER:
                ingress.count("unknown")
                continue
            tenant = None if hint.tenant is None else hint.tenant[:MAX_NAME_CHARS]
            request_id = None if hint.request_id is None else hint.request_id[:MAX_NAME_CHARS]
            event = RequestEvent(hint.at, ADAPTER, adapter, tenant, base_model=base, request_id=request_id)
            try:
                session = self.session
                calls = [] if session.started else session.start(event.time)
                more, held = session.hint(event)
                self.journal.fold(session.take_answers())
                self._send(calls + more, time.monotonic())
                session.idle()  # sent: the policy's deferred work (the experts that do not lead) runs now
                self.joins.add(event, held)
                self.log_now = event.time if self.log_now is None else max(event.time, self.log_now)
                self.log_read_at = time.monotonic()
            except Exception as exc:
                self._internal_error("a hint", exc)
        ingress.count("unmatched", self.joins.expire(time.time()))
        exported = self._hints_exported
        for outcome, n in ingress.counts.items():
            if n > exported[outcome]:
                self.metrics.hints.labels(outcome).inc(n - exported[outcome])
                exported[outcome] = n

    def _on_event(self, event: RequestEvent, read_at: float) -> None:
        held = self.joins.claim(event) if self.hints is not None else None
        if held is not None:  # served at its hint: counted now, from its line
            self.hints.count("joined")  # type: ignore[union-attr]
        # The line was written at its end (`seen`), its request arrived `duration` earlier: the clock follows the
        # writing, or every wakeup would come a request's duration late.
        written = event.seen if event.seen is not None else event.time
        self.log_now = written if self.log_now is None else max(written, self.log_now)
        self.log_read_at = read_at
        session = self.session
        started = session.start(event.time) if not session.started else []
        calls = started + session.request(event, held=held)
        if held is not None and held.rerouted is not None:  # the gateway sent it elsewhere than the book took it
            self.hints.count("rerouted")  # type: ignore[union-attr]
        self.journal.fold(session.take_answers())
        self._send(calls, read_at)
        session.idle()  # sent: the policy's deferred work (the experts that do not lead) runs now
        if self.baseline is not None:
            self.baseline.start(event.time)
            self.baseline.request(event)

    # --- actions --------------------------------------------------------------------------------------------
    def _send(self, calls: list[Call], read_at: float | None = None) -> None:
        """Hand the session's calls to the engines' actors (shadow mode: the simulated engines did them)."""
        if not calls:
            return
        queued_at = read_at if read_at is not None else time.monotonic()
        adapters = self.inventory.adapters
        for call in calls:
            actor = self.actors.get(call.engine)
            if actor is not None:
                actor.submit(Work(call.action, call, adapters[call.adapter].path, queued_at))

    def _drain(self, wait_s: float = 0.0) -> None:
        self.journal.refresh()
        while True:
            try:
                done = self.outbox.get(timeout=wait_s) if wait_s else self.outbox.get_nowait()
            except queue.Empty:
                return
            wait_s = 0.0
            try:
                self._answered(done)
            except Exception as exc:
                self._internal_error(f"{done.engine}'s result", exc)

    def _answered(self, done: Done) -> None:
        """An actor's answer: its metrics, then the session (a call's outcome) or a reconcile."""
        actor = self.actors.get(done.engine)
        if actor is not None:
            self.metrics.set_circuit(done.engine, actor.breaker.state)
        work = done.work
        if not done.ok:
            prefix = f"{RECONCILE}: " if work.call is None else ""
            self.journal.error(done.engine, prefix + (done.error or done.action))
        if work.call is None:
            self.metrics.actions.labels(done.engine, RECONCILE, "ok" if done.ok else "failed").inc()
            self._reconciled(done)
            return
        if done.sent_at is not None:
            self.metrics.decision_latency.observe(max(0.0, done.sent_at - work.queued_at))
        calls = self.session.answered(self._now(), work.call, done.action, done.ok, done.ms, done.error)
        self.journal.fold(self.session.take_answers())
        self._send(calls)
        if done.action == NOT_REGISTERED and actor is not None:  # the engine lost what the book holds: ask it now
            actor.submit(Work(RECONCILE, watch=self._watched(done.engine)))

    def _reconciled(self, done: Done) -> None:
        if not done.ok or done.registry is None:
            return
        session = self.session
        answer = session.reconciled(self._now(), done.engine, done.registry, done.vanished, done.running, done.back)
        self.journal.fold(self.session.take_answers())
        if answer.restarted:
            log.warning(
                "%s: lost every adapter it held (engine restarted?); re-warming its planned adapters", done.engine
            )
            self.summary.engine_restarts += 1
            self.metrics.engine_restarts.labels(done.engine).inc()
        for adapter in done.vanished:
            log.warning(
                "%s: %s's files are gone; unregistered before a request could kill the engine", done.engine, adapter
            )
            self.summary.vanished += 1
            self.metrics.vanished.labels(done.engine).inc()
        for adapter in done.back:
            log.warning("%s: %s's files are back; it may be loaded there again", done.engine, adapter)
        self._send(answer.calls)

    def _notice_cli_actions(self) -> None:
        """What `warm` and `unload` did since the last look (they journal in the same state store): the book
        learns of it now, not at the next reconcile."""
        for row in self.store.actions_since(self._seen_action, sources=("warm", "unload")):
            self._seen_action = row.id
            if row.ok:
                try:
                    self.session.noticed(row.engine, row.adapter, row.action, row.pinned)
                except Exception as exc:  # a bug costs the book this notice (the next reconcile reads the engine)
                    self._internal_error(f"the {row.action} of {row.adapter} on {row.engine}", exc)

    def _internal_error(self, what: str, exc: Exception) -> None:
        """A bug must cost one request, one result or one scheduled prefetch, never the daemon: logged with its
        traceback, journaled, and the loop goes on."""
        log.error("internal error handling %s (continuing): %s: %s", what, type(exc).__name__, exc, exc_info=exc)
        self.journal.error("daemon", f"internal error: {type(exc).__name__}")

    def _reconcile(self) -> None:
        self.summary.reconciles += 1
        for key, actor in self.actors.items():
            actor.submit(Work(RECONCILE, watch=self._watched(key)))

    def _watched(self, engine: str) -> tuple[tuple[str, str], ...]:
        """The adapters whose files vanished from this engine's host, with their paths: a reconcile asks after them."""
        adapters = self.inventory.adapters
        return tuple((a, adapters[a].path) for a in self.session.lost(engine) if a in adapters)

    # --- inventory reload, journal ----------------------------------------------------------------------------
    def _look_at_inventory(self) -> None:
        """Reload when the inventory's files changed: Kubernetes updates a ConfigMap volume by swapping its
        `..data` link, which the stamp (each file's resolved path and status) sees like an edit in place."""
        assert self.inventory_stamp is not None
        try:
            stamp = self.inventory_stamp()
        except Exception as exc:  # a file gone for a moment (mid-swap): looked at again next time
            log.debug("inventory not readable now: %s", exc)
            return
        if stamp != self._stamp:
            self._stamp = stamp
            log.info("the inventory's files changed: reloading")
            self._reload()

    def _reload(self) -> None:
        if self.reload_inventory is None:
            return
        try:
            inventory = self.reload_inventory()
            self.discovery.configure(inventory)
        except InputError as exc:
            message = "inventory reload failed, keeping the one in use: " + "; ".join(exc.lines())
            log.error("%s", message)
            self.journal.error("daemon", message)
            return
        self._adopt(inventory)
        log.info("inventory reloaded: %d engines, %d adapters", len(self.inventory.engines), len(inventory.adapters))

    def _adopt(self, base: Inventory) -> None:
        """The one way the engines in use change — SIGHUP, a changed inventory file, pods found or gone on
        Kubernetes: the inventory as written plus what discovery found now replaces the one in use. Engines that
        stay with the same budget keep their book; new ones start their actor (which reconciles first), gone
        ones are retired; the demand model and the policy carry over."""
        self._discovered = self.discovery.version
        inventory = with_discovered(base, self.discovery.found())
        before = {e.key for e in self.inventory.engines}
        after = {e.key for e in inventory.engines}
        self.base = base
        self.inventory = inventory
        self.session.replace_inventory(inventory)
        if self.baseline is not None:
            self.baseline.replace_inventory(inventory, like=self.session.core)
        self._use(inventory)
        self._sync_actors(reconcile=True)
        if before != after:
            added, gone = sorted(after - before), sorted(before - after)
            log.info("engines: %d in use; added %s; retired %s", len(after), _some(added), _some(gone))

    def _mark(self) -> str:
        """The fingerprint of the inventory as written, which every memory carries: computed once per inventory
        (it sorts every adapter: 57 ms on 50,000, as long as freezing lru's memory takes on them)."""
        marked = self._marked
        if marked is None or marked[0] is not self.base:
            marked = self._marked = (self.base, fingerprint(self.base))
        return marked[1]

    def _remembered(self, inventory: Inventory) -> PolicyCore | None:
        """A core whose policy is what the last run learned (journaled with its checkpoints), when it was learned
        by this version, policy and inventory (as written: engines discovered come and go); else None."""
        memory = read_memory(self.store)
        if memory is None:
            return None
        options = self.options
        try:
            core = thaw(
                inventory,
                memory.state,
                memory.format,
                memory.fingerprint,
                options.policy,
                options.touch_budget,
                written=self.base,
            )
        except MemoryRefusedError as exc:
            log.info("what the policy learned before (%s) is not used: %s; it learns again", memory.taken_at, exc)
            return None
        log.info("the %s policy goes on from what it had learned by %s", options.policy, memory.taken_at)
        return core

    def _commit(self, final: bool = False) -> None:
        """The batch, in one transaction with its checkpoints; every `memory_every_s` or so (`memory_share`), and at
        the end, what the policy has learned goes with it, so a restart resumes both from the same line."""
        self.journal.publish()
        if not final and time.monotonic() < self._retry_at:
            return  # the journal refused the last commit: the batch is held until the next try is due
        remember = final or time.monotonic() >= self._next_memory
        started = self.session.started
        if self.journal.batch.empty() and not (final and started) and not (remember and started and self._unremembered):
            return  # nothing new; but what was learned after the last memory is written once it is due
        for engine, resident, used_bytes in self.session.holdings():
            self.metrics.resident.labels(engine).set(resident)
            self.metrics.resident_bytes.labels(engine).set(used_bytes)
        memory = None
        if remember and self.session.started:
            began = time.monotonic()
            try:
                memory = PolicyMemory(FORMAT, self._mark(), self.options.policy, freeze(self.session.core))
            except Exception as exc:  # a memory that cannot be frozen costs the next start its learning, no more
                self._internal_error("freezing what the policy learned", exc)
            took = time.monotonic() - began
            options = self.options
            self._next_memory = time.monotonic() + max(options.memory_every_s, took / options.memory_share)
        batch = self.journal.take()
        self._unremembered = memory is None and (self._unremembered or not batch.empty())
        try:
            with self.store.writing():
                dropped = commit_or_drop(
                    self.store,
                    batch.rollups,
                    batch.checkpoints.values(),
                    batch.log_counts,
                    batch.actions,
                    batch.errors,
                    memory,
                )
        except OperationError as exc:
            self._refused(batch, exc, final)
            return
        if self._refused_since is not None:
            log.warning(
                "the journal takes commits again: %d log lines held for %.0f s written",
                batch.lines,
                time.monotonic() - self._refused_since,
            )
            self._refused_since, self._retry_at = None, 0.0
            self.metrics.held_lines.set(0)
        if dropped:
            log.error("%d journal rows could not be stored (not UTF-8 text); committed the rest", dropped)
        self.summary.commits += 1
        self.metrics.commits.inc()
        settle()  # what outlives a commit is the long-lived state: collections scan only what comes after it

    def _refused(self, batch: Batch, exc: OperationError, final: bool) -> None:
        """The state database refused a commit: the batch is held for the next try and the loop goes on (what
        the engines hold matters more than its record); past `max_held_lines`, or at the end, the daemon stops."""
        self.journal.hold(batch)
        self._unremembered = self.session.started  # the memory, if it went with this commit, did not go
        held = self.journal.batch.lines
        self.metrics.refused_commits.inc()
        self.metrics.held_lines.set(held)
        options = self.options
        if final or held > options.max_held_lines:
            lines = "log line" if held == 1 else "log lines"
            raise OperationError(f"{exc.message}; {held:,} {lines} read and not journaled", hint=exc.hint) from exc
        now = time.monotonic()
        self._retry_at = now + options.journal_retry_s
        if self._refused_since is None:
            self._refused_since = now
        elif now - self._refusal_said < 60.0:
            return  # said within the minute
        log.error(
            "%s; the warming goes on: %d log lines held, the commit tried again every %g s (the daemon stops past %d)",
            exc.message,
            held,
            options.journal_retry_s,
            options.max_held_lines,
        )
        self._refusal_said = now

    def _prune(self) -> None:
        """Retention, measured back from the newest log line (or the wall clock, if earlier): a recorded log's
        history, and the shadow actions dated in it, are kept while they are being read. Before this run has read
        a line, the newest line is the newest minute the journal counted: a second run over a recorded log, with
        nothing new to read, keeps its history. The minute detail goes after `minute_retention_days` of log time,
        so only once a line has been read: a first run over an old log keeps the minutes it reads."""
        options = self.options
        wall = time.time()
        if self.log_now is not None:
            newest = min(wall, self.log_now)
        else:
            minute = newest_log_minute(self.store)
            newest = wall if minute is None else min(wall, minute_epoch(minute) + 60.0)
        cutoff = newest - options.retention_days * 86400.0
        detail = None
        if self.log_now is not None:
            detail = minute_key(max(cutoff, newest - options.minute_retention_days * 86400.0))
        with self.store.writing():
            dropped = prune(self.store, minute_key(cutoff), utc_text(cutoff), detail)
        if dropped:
            log.info(
                "retention: dropped %d journal rows (minutes older than %g days, the rest older than %g days)",
                dropped,
                min(options.minute_retention_days, options.retention_days),
                options.retention_days,
            )


def _some(names: list[str], shown: int = 10) -> str:
    """Names for one log line: the first few and how many more (3,000 pods found at once made a 45 KB line)."""
    if len(names) <= shown:
        return ", ".join(names) or "none"
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"


def _same(engine: Engine | None, running: Engine) -> bool:
    """Whether an actor still serves this engine: the same settings (where it was written down aside)."""
    return engine is not None and dataclasses.replace(engine, source=running.source) == running


__all__ = ["Daemon", "DaemonOptions"]
