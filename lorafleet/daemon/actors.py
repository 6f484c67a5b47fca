"""One actor thread per engine: the daemon's hands.

Each engine gets its own thread, its own client and its own circuit breaker, and works through its own queue
one call at a time (an engine loads adapters serially anyway). Whatever an engine does — answer slowly, hang
until its call deadline, refuse connections — costs only its own thread: the log readers, the other engines and
shutdown never wait on it. Results go back to the daemon's loop through one shared queue; the loop alone
touches the policy core and the journal.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field

from lorafleet.daemon.breaker import AdapterBackoff, CircuitBreaker
from lorafleet.drive.session import LOADED, NOT_REGISTERED, RELOADED, TOUCHED, UNLOADED, Call
from lorafleet.engines import AlreadyLoadedError, EngineClient, EngineError, EngineRejectedError, NotRegisteredError
from lorafleet.inventory.model import Engine
from lorafleet.policy.core import DEMAND, LOAD, TOUCH, UNLOAD
from lorafleet.stopping import Cancelled, Stop

log = logging.getLogger("lorafleet.daemon")
RECONCILE = "reconcile"
REFUSED = "refused"  # not sent: the engine's circuit is open, this adapter is backing off, or its queue is full
MAX_QUEUED = 512  # past this an engine is not keeping up: new work is refused at once, not queued forever
RECONCILES_AT_ONCE = 32  # registry reads in flight over the whole fleet (see EngineActor.reconciles)


@dataclass(frozen=True, slots=True)
class Work:
    """One thing for an engine's actor: a session's call (LOAD, TOUCH, UNLOAD) with the adapter's path, or a
    RECONCILE (read the registry, unregister adapters whose files are gone)."""

    action: str
    call: Call | None = None
    path: str | None = None
    queued_at: float = field(default_factory=time.monotonic)
    watch: tuple[tuple[str, str], ...] = ()  # reconcile: (adapter, path) whose files were gone: back yet?

    @property
    def adapter(self) -> str | None:
        return self.call.adapter if self.call is not None else None


@dataclass(frozen=True, slots=True)
class Done:
    engine: str
    work: Work
    ok: bool
    action: str  # loaded, reloaded, touched, unloaded, reconciled, not-registered, refused (circuit open or queue
    # full), failed
    ms: float
    error: str | None = None
    sent_at: float | None = None  # monotonic time the call was sent (decision latency)
    registry: frozenset[str] | None = None  # reconcile: what the engine has registered
    vanished: tuple[str, ...] = ()  # reconcile: registered adapters whose files are gone (unregistered now)
    running: tuple[str, ...] = ()  # reconcile, vLLM: adapters in GPU slots now (its /metrics)
    back: tuple[str, ...] = ()  # reconcile: watched adapters whose files are there again


ClientFactory = Callable[[Engine], EngineClient]
FileCheck = Callable[[str, Mapping[str, str]], list[str]]  # (engine key, {name: path}) -> names whose files are gone


class EngineActor:
    def __init__(
        self,
        engine: Engine,
        client_factory: ClientFactory,
        outbox: queue.Queue[Done],
        stop: Stop,
        files_gone: FileCheck,
        breaker: CircuitBreaker | None = None,
        reconciles: threading.Semaphore | None = None,
    ) -> None:
        self.engine = engine
        self.client_factory = client_factory
        self.outbox = outbox
        self.stop = stop
        self.files_gone = files_gone
        self.breaker = breaker or CircuitBreaker()
        self.adapter_backoff = AdapterBackoff()
        self.inbox: queue.Queue[Work | None] = queue.Queue()  # None: wake up
        self.retired = threading.Event()
        self.busy_since: float | None = None
        # Shared by every actor: a reconcile comes to all engines at once, every 30 s, each a few ms of Python;
        # 1,000 threads doing it together starved one another past their engines' timeouts (most of the first
        # reconciles failed). Loads, touches and unloads never wait on it: an engine's hang stays its own.
        self.reconciles = reconciles
        self.reconcile_queued = False  # one waiting is enough: it reads the registry when it runs
        self.thread = threading.Thread(target=self._run, name=f"engine {engine.key}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def submit(self, work: Work) -> None:
        reconcile = work.action == RECONCILE
        if reconcile and self.reconcile_queued:
            return
        if self.inbox.qsize() >= MAX_QUEUED:
            self.outbox.put(
                Done(self.engine.key, work, False, REFUSED, 0.0, "queue full: the engine is not keeping up")
            )
            return
        if reconcile:  # marked only once queued: a refused one must not stop every later reconcile
            self.reconcile_queued = True
        self.inbox.put(work)

    def retire(self) -> None:
        """Stop taking work (the engine left the inventory); the thread ends after its current call."""
        self.retired.set()
        self.wake()

    def wake(self) -> None:
        """Wake the actor from its wait (the daemon stops, or the engine left): it then ends."""
        self.inbox.put(None)

    def _next(self) -> Work | None:
        """The next work, or None once the daemon stops or the engine left. A blocking wait, woken by `wake`:
        an idle engine costs nothing (3,000 discovered pods polling five times a second cost a core)."""
        while not (self.stop.is_set() or self.retired.is_set()):
            work = self.inbox.get()
            if work is not None:
                return work
        return None

    def _run(self) -> None:
        try:
            client = self.client_factory(self.engine)
        except Exception as exc:  # a missing key, a bad URL: every call of this engine fails, with this reason
            message = exc.message if isinstance(exc, EngineError) else str(exc)
            while (work := self._next()) is not None:
                self.outbox.put(Done(self.engine.key, work, False, "failed", 0.0, message))
            return
        client.bind_stop(self.stop)
        try:
            while (work := self._next()) is not None:
                if work.action == RECONCILE:
                    self.reconcile_queued = False
                    self.outbox.put(self._reconcile(client, work))
                else:
                    self.outbox.put(self._do(client, work))
        finally:
            client.close()

    def _reconcile(self, client: EngineClient, work: Work) -> Done:
        """A reconcile, once one of the fleet's reconcile slots is free (waiting wakes on a stop)."""
        gate = self.reconciles
        if gate is None:
            return self._do(client, work)
        while not gate.acquire(timeout=0.2):
            if self.stop.is_set() or self.retired.is_set():
                return Done(self.engine.key, work, False, "failed", 0.0, "stopped before it was sent")
        try:
            return self._do(client, work)
        finally:
            gate.release()

    def _do(self, client: EngineClient, work: Work) -> Done:
        """One call. Failures are sorted: the engine's own (it cannot be reached, times out, answers 5xx) count
        toward its breaker; an answer about one adapter (a 4xx: files missing, rank, bad files) backs off that
        adapter alone — the engine answered, so it is up. A reconcile goes through an open breaker: it is the
        probe, and its success closes the breaker at once (an engine back from an outage is used again)."""
        key = self.engine.key
        adapter = work.adapter
        if work.action != RECONCILE:
            refusal = self._refusal(adapter)
            if refusal is not None:
                return Done(key, work, False, REFUSED, 0.0, refusal)
        client.failed = None  # the breaker decides when to try a failing engine again, not the client
        sent = time.monotonic()
        self.busy_since = sent
        try:
            action, registry, vanished, running = self._call(client, work)
            back = self._back(work.watch) if work.action == RECONCILE else ()
        except Cancelled:
            return Done(key, work, False, "failed", _ms(sent), "stopped while in flight", sent)
        except NotRegisteredError as exc:  # the engine holds no such adapter: lorafleet's book is stale, not it
            self.breaker.success()
            ok = work.action == UNLOAD  # an unload's wanted state holds; a touch did not happen
            return Done(key, work, ok, NOT_REGISTERED, _ms(sent), None if ok else exc.message, sent)
        except EngineRejectedError as exc:  # about this request: the engine is up
            self.breaker.success()
            if adapter is not None:
                self.adapter_backoff.failure(adapter, exc.message)
            return Done(key, work, False, "failed", _ms(sent), exc.message, sent)
        except EngineError as exc:
            self.breaker.failure()
            return Done(key, work, False, "failed", _ms(sent), exc.message, sent)
        except Exception as exc:  # never let one engine's surprise end its thread
            self.breaker.failure()
            log.exception("%s: unexpected error", key)
            return Done(key, work, False, "failed", _ms(sent), f"{key}: {type(exc).__name__}: {exc}", sent)
        finally:
            self.busy_since = None
        self.breaker.success()
        if adapter is not None:
            self.adapter_backoff.success(adapter)
        return Done(key, work, True, action, _ms(sent), None, sent, registry, vanished, running, back)

    def _back(self, watch: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
        """Of the adapters whose files were gone, those whose files are there again (asked where it counts)."""
        if not watch:
            return ()
        gone = set(self.files_gone(self.engine.key, dict(watch)))
        return tuple(name for name, _ in watch if name not in gone)

    def _refusal(self, adapter: str | None) -> str | None:
        """Why a call is not sent now: the engine's breaker is open, or this adapter's last calls failed."""
        key = self.engine.key
        if not self.breaker.allow():
            return f"{key}: circuit open after repeated failures"
        waiting = self.adapter_backoff.blocked(adapter) if adapter is not None else None
        if waiting is not None:
            return f"{key}: {adapter} backing off after its calls failed ({waiting})"
        return None

    def _call(
        self, client: EngineClient, work: Work
    ) -> tuple[str, frozenset[str] | None, tuple[str, ...], tuple[str, ...]]:
        name, path = work.adapter, work.path
        if work.action == RECONCILE:
            paths = client.registered_paths()
            registry = frozenset(paths)
            known = {n: p for n, p in paths.items() if p}
            gone = tuple(sorted(self.files_gone(self.engine.key, known))) if known else ()
            for adapter in gone:
                # On vLLM the next request needing these files would kill the whole engine: unregister now.
                with suppress(NotRegisteredError):  # unregistered meanwhile
                    client.unload(adapter)
            kept = registry - set(gone)  # what is registered once the vanished are unregistered
            running = tuple(a for a in client.activity().running if a in kept)  # vLLM: in a GPU slot now
            return "reconciled", kept, gone, running
        call = work.call
        assert call is not None and name is not None
        if work.action == LOAD:
            assert path is not None
            try:
                client.load(name, path, pinned=call.pinned)
            except AlreadyLoadedError:
                if call.reason != DEMAND:
                    client.rewarm(name, path)  # registered but maybe out of the cache: a 1-token request brings it back
                # else the request that asked for it brought it in and made it most recent: nothing to send
                return RELOADED, None, (), ()
            return LOADED, None, (), ()
        if work.action == TOUCH:
            client.prime(name)
            return TOUCHED, None, (), ()
        if work.action == UNLOAD:
            client.unload(name)
            return UNLOADED, None, (), ()
        raise ValueError(f"unknown work {work.action!r}")


def _ms(since: float) -> float:
    return round((time.monotonic() - since) * 1000.0, 1)


__all__ = ["RECONCILE", "RECONCILES_AT_ONCE", "REFUSED", "Done", "EngineActor", "FileCheck", "Work"]
