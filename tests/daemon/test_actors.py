"""The engines' actors at fleet scale: an idle one waits without polling and leaves as soon as it is told to,
registry reads share a few slots over the fleet, and every engine client shares one TLS context."""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lorafleet.daemon.actors import EngineActor
from lorafleet.stopping import Stop
from tests.daemon.conftest import daemon_in_thread, vllm, wait_for, write_adapters, write_fleet


@contextmanager
def started(actor: EngineActor) -> Iterator[EngineActor]:
    """The actor's thread running for the block; after it, the daemon's stop, a wake, and the thread joined."""
    actor.start()
    try:
        yield actor
    finally:
        actor.stop.set()
        actor.wake()
        actor.thread.join(5)


def test_a_retired_idle_actor_ends_at_once_and_a_stopped_one_when_woken(tmp_path: Path) -> None:
    """An idle actor blocks on its queue (no timed polling: 3,000 discovered pods polling cost a core), so
    retiring it, or the daemon's stop, must wake it: without the wake its thread would wait for ever."""
    from lorafleet.daemon.actors import RECONCILE, EngineActor, Work
    from lorafleet.inventory import load_inventory

    def no_client(engine):
        raise RuntimeError("no key")  # every call fails at once: the actor answers, then waits again

    inv = load_inventory(write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], write_adapters(tmp_path / "a", 1)))
    stop = Stop()
    actors = []
    for _ in range(2):
        outbox: queue.Queue = queue.Queue()
        actor = EngineActor(inv.engines[0], no_client, outbox, stop, lambda key, names: [])
        actor.start()
        actor.submit(Work(RECONCILE))
        answer = outbox.get(timeout=5)
        assert (answer.ok, answer.action, answer.error) == (False, "failed", "no key")  # answered: waiting again
        actors.append(actor)
    retired, stopped = actors
    retired.retire()
    retired.thread.join(2.0)
    assert not retired.thread.is_alive()
    stop.set()
    assert stopped.thread.is_alive()  # waiting, not polling the flag
    stopped.wake()
    stopped.thread.join(2.0)
    assert not stopped.thread.is_alive()


def test_when_the_daemon_stops_every_engines_actor_has_ended(tmp_path: Path, emulators) -> None:
    from lorafleet.daemon.loop import DaemonOptions
    from lorafleet.inventory import load_inventory

    engines = [emulators(kind="vllm") for _ in range(3)]
    inv = write_fleet(
        tmp_path, [vllm(f"e{i}", e.url) for i, e in enumerate(engines)], write_adapters(tmp_path / "a", 2)
    )
    options = DaemonOptions(metrics_addr=None)
    with daemon_in_thread(load_inventory(inv), tmp_path / "state.db", options) as daemon:
        wait_for(lambda: len(daemon.actors) == 3 and daemon.metrics.beat_at is not None)
        actors = list(daemon.actors.values())
    assert all(not actor.thread.is_alive() for actor in actors)


def test_every_engine_client_shares_one_verifying_tls_context(tmp_path: Path, monkeypatch) -> None:
    """The CA bundle is read once per process, not once per engine (20 ms and 0.7 MB each), and what is shared
    still verifies."""
    import ssl

    from lorafleet.engines import base, make_client
    from lorafleet.inventory import load_inventory

    built: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counting(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(base, "_TLS", [])
    monkeypatch.setattr(ssl, "create_default_context", counting)
    urls = [vllm(f"e{i}", f"https://127.0.0.1:{9 + i}") for i in range(5)]
    inv = load_inventory(write_fleet(tmp_path, urls, write_adapters(tmp_path / "a", 1)))
    clients = [make_client(engine) for engine in inv.engines]
    try:
        assert len(built) == 1
        assert built[0].verify_mode == ssl.CERT_REQUIRED and built[0].check_hostname
    finally:
        for client in clients:
            client.close()


def test_reconciles_take_the_fleets_few_slots_while_loads_never_wait_on_them(tmp_path: Path, emulators) -> None:
    """Registry reads share a few slots over the whole fleet (1,000 engines reading at once starved one another
    past their timeouts); a load is sent at once, whatever the reconciles are doing; and a reconcile already
    waiting is not queued twice."""
    import threading
    import time

    from lorafleet.daemon.actors import RECONCILE, EngineActor, Work
    from lorafleet.drive.session import Call
    from lorafleet.engines import make_client
    from lorafleet.inventory import load_inventory
    from lorafleet.policy.core import LOAD
    from tests.engine_emulator import Fault

    slow = [emulators(kind="vllm") for _ in range(3)]
    for engine in slow:  # each registry read takes 0.4 s
        engine.state.faults.append(Fault(status=0, hang_s=0.4, path="/v1/models"))
    quick = emulators(kind="vllm", require_paths=False)
    urls = [vllm(f"e{i}", e.url) for i, e in enumerate([*slow, quick])]
    inv = load_inventory(write_fleet(tmp_path, urls, write_adapters(tmp_path / "a", 1)))
    outbox: queue.Queue = queue.Queue()
    stop = Stop()
    one_at_a_time = threading.Semaphore(1)
    actors = [EngineActor(e, make_client, outbox, stop, lambda k, n: [], reconciles=one_at_a_time) for e in inv.engines]
    for actor in actors:
        actor.start()
    started = time.monotonic()
    for actor in actors[:3]:
        actor.submit(Work(RECONCILE))
        actor.submit(Work(RECONCILE))  # one is waiting already: not queued again
    actors[3].submit(Work(LOAD, Call(LOAD, "h/e3", "a0", "prefetch"), path=str(tmp_path / "a" / "a0")))
    answers = [outbox.get(timeout=10) for _ in range(4)]
    elapsed = time.monotonic() - started
    stop.set()
    for actor in actors:
        actor.wake()
    assert (answers[0].engine, answers[0].ok) == ("h/e3", True)  # the load first, not behind the reads
    assert sorted(d.engine for d in answers[1:]) == ["h/e0", "h/e1", "h/e2"] and all(d.ok for d in answers[1:])
    assert elapsed >= 1.2  # three 0.4 s reads, one after another
    assert all(d.ms >= 350.0 for d in answers[1:])  # each answer's time, in ms, as the journal records it
    assert outbox.empty() and sum(e.state.requests.count(("GET", "/v1/models", None)) for e in slow) == 3


def test_a_reconcile_refused_by_a_full_queue_does_not_stop_later_ones(tmp_path: Path) -> None:
    from lorafleet.daemon.actors import MAX_QUEUED, RECONCILE, REFUSED, EngineActor, Work
    from lorafleet.engines import make_client
    from lorafleet.inventory import load_inventory

    inv = load_inventory(write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], write_adapters(tmp_path / "a", 1)))
    outbox: queue.Queue = queue.Queue()
    actor = EngineActor(inv.engines[0], make_client, outbox, Stop(), lambda key, names: [])  # never started
    assert MAX_QUEUED == 512
    for _ in range(511):
        actor.inbox.put(Work("touch"))  # a queue the engine is not keeping up with
    actor.submit(Work("touch"))  # the 512th is taken
    assert actor.inbox.qsize() == 512 and outbox.empty()
    actor.submit(Work(RECONCILE))  # the 513th is refused at once
    refused = outbox.get_nowait()
    assert (refused.ok, refused.action) == (False, REFUSED) and actor.inbox.qsize() == 512
    while not actor.inbox.empty():
        actor.inbox.get_nowait()
    actor.submit(Work(RECONCILE))
    assert actor.inbox.qsize() == 1


def test_an_actor_sorts_each_answer_by_whose_fault_it_is(tmp_path: Path, emulators) -> None:
    """The engine's own faults (5xx, no connection) open its breaker, and a reconcile, the probe, closes it; an
    answer about one adapter (its files missing) backs off that adapter alone, the engine being up; an unload of
    what the engine does not hold has what it wanted, a touch of it did not happen; a prefetch of what is already
    registered sends the 1-token request that brings it back to the cache, a demand load does not (the request
    that asked for it did)."""
    from lorafleet.daemon.actors import RECONCILE, REFUSED, EngineActor, Work
    from lorafleet.daemon.breaker import CircuitBreaker
    from lorafleet.drive.session import LOADED, NOT_REGISTERED, RELOADED, UNLOADED, Call
    from lorafleet.engines import make_client
    from lorafleet.inventory import load_inventory
    from lorafleet.policy.core import DEMAND, LOAD, PREFETCH, TOUCH, UNLOAD
    from tests.engine_emulator import Fault

    emulator = emulators(kind="vllm")
    folders = write_adapters(tmp_path / "a", 3)
    inv = load_inventory(write_fleet(tmp_path, [vllm("e0", emulator.url)], folders))
    engine = inv.engines[0]
    outbox: queue.Queue = queue.Queue()
    stop = Stop()
    gone: set[str] = set()  # adapters whose files the test says are gone; else a path that does not exist is

    def files_gone(key: str, names: dict[str, str]) -> list[str]:
        return sorted(n for n, p in names.items() if n in gone or not os.path.exists(p))

    actor = EngineActor(engine, make_client, outbox, stop, files_gone, CircuitBreaker(failures_to_open=2))

    def do(action: str, adapter: str | None = None, reason: str = PREFETCH, path: str | None = None):
        call = None if adapter is None else Call(action, engine.key, adapter, reason)
        if path is None and adapter is not None:
            path = str(folders[int(adapter[1:])]) if adapter[1:].isdigit() else str(tmp_path / "gone")
        actor.submit(Work(action, call, path))
        return outbox.get(timeout=10)

    def completions() -> int:
        return sum(p == "/v1/completions" for _, p, _ in emulator.state.requests)

    with started(actor):
        done = do(LOAD, "a0")
        assert (done.ok, done.action) == (True, LOADED) and 0 <= done.ms < 10_000
        done = do(LOAD, "a0", PREFETCH)
        assert (done.ok, done.action, completions()) == (True, RELOADED, 1)
        done = do(LOAD, "a0", DEMAND)
        assert (done.ok, done.action, completions()) == (True, RELOADED, 1)

        done = do(UNLOAD, "a1")  # not registered: the unload's wanted state holds
        assert (done.ok, done.action, done.error) == (True, NOT_REGISTERED, None)
        done = do(TOUCH, "a1")  # not registered: no touch happened
        assert (done.ok, done.action) == (False, NOT_REGISTERED) and done.error

        done = do(LOAD, "ax")  # its files are missing: the engine says so (404) and is up
        assert (done.ok, done.action) == (False, "failed") and actor.breaker.state == "closed"
        sent = len(emulator.state.requests)
        done = do(LOAD, "ax")
        assert (done.ok, done.action) == (False, REFUSED) and "ax backing off" in done.error
        assert len(emulator.state.requests) == sent
        assert (do(LOAD, "a1").ok, do(UNLOAD, "a1").action) == (True, UNLOADED)  # the others are served

        emulator.state.faults.append(Fault(status=500, times=10**6, message="boom", path="/v1/load_lora_adapter"))
        failed = [do(LOAD, "a2") for _ in range(2)]  # each after the client's retries
        assert [(d.ok, d.action) for d in failed] == [(False, "failed")] * 2 and all("boom" in d.error for d in failed)
        emulator.state.faults.clear()
        sent = len(emulator.state.requests)
        done = do(LOAD, "a2")  # two engine faults: its circuit is open, nothing is sent
        assert (done.ok, done.action, done.error) == (
            False,
            REFUSED,
            f"{engine.key}: circuit open after repeated failures",
        )
        assert len(emulator.state.requests) == sent
        done = do(RECONCILE)  # the probe goes through an open circuit and, answered, closes it
        assert done.ok and done.registry == frozenset({"a0"}) and actor.breaker.state == "closed"
        assert do(LOAD, "a2").action == LOADED

        done = do(RECONCILE)  # a second reconcile is answered too: the first one's mark went when it ran
        assert emulator.state.gpu.keys() == {"a1", "a2"}  # a1, unloaded, keeps its slot (vLLM's known defect)
        assert (done.registry, done.running, done.vanished, done.back) == (frozenset({"a0", "a2"}), ("a2",), (), ())
        gone.add("a2")  # a2's files vanish: unregistered at once, then neither registered nor running to the book
        watch = (("a1", str(folders[1])), ("ax", str(tmp_path / "gone")))
        actor.submit(Work(RECONCILE, watch=watch))
        done = outbox.get(timeout=10)
        assert (done.ok, done.vanished, done.registry, done.running) == (True, ("a2",), frozenset({"a0"}), ())
        assert "a2" not in emulator.state.registry
        assert done.back == ("a1",)  # of the adapters watched, those whose files are there again

        emulator.state.faults.append(Fault(status=0, hang_s=5.0, path="/v1/load_lora_adapter"))
        actor.submit(Work(LOAD, Call(LOAD, engine.key, "a1", PREFETCH), str(folders[1])))
        wait_for(lambda: actor.busy_since is not None, what="the load to be sent")
        stop.set()  # the daemon stops while the engine has not answered
        done = outbox.get(timeout=3)
        assert (done.ok, done.action, done.error) == (False, "failed", "stopped while in flight")


def test_an_unexpected_error_is_an_engine_failure_and_the_actor_goes_on(tmp_path: Path, emulators) -> None:
    """Never let one engine's surprise end its thread: the call fails, counted against the engine's breaker."""
    from lorafleet.daemon.actors import EngineActor, Work
    from lorafleet.drive.session import LOADED, Call
    from lorafleet.engines import make_client
    from lorafleet.inventory import load_inventory
    from lorafleet.policy.core import LOAD, PREFETCH

    emulator = emulators(kind="vllm")
    folders = write_adapters(tmp_path / "a", 2)
    engine = load_inventory(write_fleet(tmp_path, [vllm("e0", emulator.url)], folders)).engines[0]
    surprises = [RuntimeError("surprise")]

    def client_factory(engine):
        client = make_client(engine)
        real = client.load

        def load(*args, **kwargs):
            if surprises:
                raise surprises.pop()
            return real(*args, **kwargs)

        client.load = load
        return client

    outbox: queue.Queue = queue.Queue()
    stop = Stop()
    actor = EngineActor(engine, client_factory, outbox, stop, lambda key, names: [])
    with started(actor):
        for i, expected in enumerate(((False, "failed"), (True, LOADED))):
            actor.submit(Work(LOAD, Call(LOAD, engine.key, f"a{i}", PREFETCH), str(folders[i])))
            done = outbox.get(timeout=10)
            assert (done.ok, done.action) == expected
            if not done.ok:
                assert done.error == f"{engine.key}: RuntimeError: surprise" and actor.breaker.failures == 1


def test_a_reconcile_waiting_for_a_slot_ends_when_its_engine_leaves_or_the_daemon_stops(tmp_path: Path) -> None:
    """Waiting for one of the fleet's reconcile slots wakes on the engine's retirement as on the daemon's stop:
    the registry read was never sent, and says so."""
    import threading

    from lorafleet.daemon.actors import RECONCILE, EngineActor, Work
    from lorafleet.engines import make_client
    from lorafleet.inventory import load_inventory

    inv = load_inventory(write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], write_adapters(tmp_path / "a", 1)))
    for end in ("retire", "stop"):
        outbox: queue.Queue = queue.Queue()
        stop = Stop()
        no_slot = threading.Semaphore(0)  # every slot taken elsewhere
        actor = EngineActor(inv.engines[0], make_client, outbox, stop, lambda key, names: [], reconciles=no_slot)
        actor.start()
        actor.submit(Work(RECONCILE))
        time.sleep(0.3)
        assert outbox.empty()  # waiting for a slot
        if end == "retire":
            actor.retire()
        else:
            stop.set()
        done = outbox.get(timeout=5)
        assert (done.ok, done.action, done.error) == (False, "failed", "stopped before it was sent"), end
        actor.wake()
        actor.thread.join(5)
        assert not actor.thread.is_alive()
