"""The daemon as a real subprocess against emulated engines on free loopback ports, with a log the test writes."""

from __future__ import annotations

import signal
import sqlite3
import time
import urllib.request
from pathlib import Path

import pytest

from tests.daemon.conftest import log_line, sglang, vllm, wait_for, write_adapters, write_fleet
from tests.engine_emulator import Fault


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def test_a_workflow_tenants_next_adapter_is_loaded_before_its_request(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    adapters = write_adapters(tmp_path / "adapters", 6)
    inv = write_fleet(
        tmp_path, [vllm("e0", engine.url, host=4)], adapters, tenants="  t: {workflows: [[a3, a4, a5]]}\n"
    )
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "1")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    append(tmp_path / "access.jsonl", log_line("a3"))
    wait_for(lambda: "a4" in engine.state.registry, what=f"a4 prefetched\n{daemon.log()}")
    assert not any(body and body.get("model") == "a4" for _, _, body in engine.state.requests)  # no request yet
    code, took = daemon.stop()
    assert code == 0 and took < 5
    with sqlite3.connect(tmp_path / "state.db") as c:
        reasons = {r for (r,) in c.execute("SELECT reason FROM loads WHERE adapter = 'a4' AND action = 'loaded'")}
    assert reasons & {"prefetch", "plan"}


def test_sigterm_exits_0_within_5_s_with_a_hung_engine(tmp_path, emulators, daemon_process) -> None:
    hung = emulators(kind="vllm")
    hung.state.faults.append(Fault(hang_s=30.0, times=100))
    healthy = emulators(kind="sglang")
    adapters = write_adapters(tmp_path / "adapters", 3)
    inv = write_fleet(tmp_path, [vllm("hung", hung.url), sglang("ok", healthy.url)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    for i in range(3):
        append(tmp_path / "access.jsonl", log_line(f"a{i}", engine="h/hung"))
        append(tmp_path / "access.jsonl", log_line(f"a{i}", engine="h/ok"))
    # The hung engine does not hold up the healthy one.
    wait_for(lambda: len(healthy.state.registry) == 3, what=f"the healthy engine loaded\n{daemon.log()}")
    code, took = daemon.stop()
    assert code == 0, daemon.log()
    assert took < 5.0


def test_sighup_with_a_broken_inventory_keeps_the_old_one(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm")
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", engine.url)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    good = inv.read_text()
    inv.write_text(good.replace("rank: 8", "rank: eight", 1))
    daemon.signal(signal.SIGHUP)
    wait_for(lambda: "inventory reload failed" in daemon.log(), what="the reload error")
    assert "inv.yaml" in daemon.log() and "rank" in daemon.log()
    append(tmp_path / "access.jsonl", log_line("a1"))
    wait_for(lambda: "a1" in engine.state.registry, what="a load on the old inventory")
    code, _ = daemon.stop()
    assert code == 0


def test_a_restarted_engine_is_rewarmed_within_a_reconcile_interval(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="sglang", gpu_slots=2, host_slots=4)
    adapters = write_adapters(tmp_path / "adapters", 3)
    inv = write_fleet(tmp_path, [sglang("e0", engine.url)], adapters, tenants="  t: {pinned: [a0]}\n")
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "1")
    wait_for(lambda: "a0" in engine.state.registry, what=f"the pinned adapter loaded\n{daemon.log()}")
    engine.state.restart()
    wait_for(lambda: "a0" in engine.state.registry, timeout=5, what=f"a0 re-warmed\n{daemon.log()}")
    assert daemon.stop()[0] == 0
    with sqlite3.connect(tmp_path / "state.db") as c:
        assert c.execute("SELECT COUNT(*) FROM loads WHERE action = 'forgotten' AND reason = 'reconcile'").fetchone()[0]


def test_vanished_adapter_files_are_unregistered(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=1, host_slots=2)
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, gpu=1, host=2)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "1")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    append(tmp_path / "access.jsonl", log_line("a1"))
    wait_for(lambda: "a1" in engine.state.registry, what="a1 loaded")
    for f in adapters[1].iterdir():
        f.unlink()
    adapters[1].rmdir()
    wait_for(lambda: "a1" not in engine.state.registry, timeout=5, what=f"a1 unregistered\n{daemon.log()}")
    port = daemon.metrics_port()

    def counted() -> bool:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        return 'lorafleet_vanished_adapters_total{engine="h/e0",mode="live"} 1.0' in text

    wait_for(counted, timeout=5, what="the vanished adapter counted")
    assert "files are gone" in daemon.log()
    assert daemon.stop()[0] == 0


def test_an_engine_failing_then_recovering_opens_and_closes_its_breaker(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=8)
    adapters = write_adapters(tmp_path / "adapters", 8)
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, host=8)], adapters)
    engine.state.faults.append(Fault(status=503, times=10**6))  # the whole engine failing: reconciles too
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "1")
    port = daemon.metrics_port()
    for i in range(4):
        append(tmp_path / "access.jsonl", log_line(f"a{i}"))

    def metrics() -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

    wait_for(
        lambda: 'lorafleet_engine_circuit_state{engine="h/e0",mode="live",state="open"} 1.0' in metrics(),
        what="the breaker open",
    )
    engine.state.faults.clear()
    time.sleep(0.1)
    for i in range(4, 8):
        append(tmp_path / "access.jsonl", log_line(f"a{i}"))
        time.sleep(0.3)
    wait_for(
        lambda: 'lorafleet_engine_circuit_state{engine="h/e0",mode="live",state="closed"} 1.0' in metrics(),
        timeout=15,
        what=f"the breaker closed\n{daemon.log()}",
    )
    append(tmp_path / "access.jsonl", log_line("a7"))
    wait_for(lambda: "a7" in engine.state.registry, timeout=10, what="loads again")
    assert daemon.stop()[0] == 0
    with sqlite3.connect(tmp_path / "state.db") as c:  # each failed call journaled as an error, no ok one
        errors = c.execute("SELECT source, message FROM errors").fetchall()
    assert any("HTTP 503: injected failure" in message for _, message in errors)
    assert all(engine == "h/e0" and ("HTTP 503" in message or "circuit open" in message) for engine, message in errors)


@pytest.mark.parametrize("moved", [False, True], ids=["e0-leaves-e1-joins", "e0-moves"])
def test_sighup_with_a_valid_inventory_adds_removes_and_moves_engines(
    tmp_path, emulators, daemon_process, moved: bool
) -> None:
    """Engines that leave are retired, new ones start; one with new settings (a pod rescheduled at another
    address) has its actor replaced, not left calling the old address."""
    first = emulators(kind="vllm")
    second = emulators(kind="vllm" if moved else "sglang")
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", first.url)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    append(tmp_path / "access.jsonl", log_line("a0", engine="h/e0"))
    wait_for(lambda: "a0" in first.state.registry, what="a0 on the first engine")
    entry, key = (vllm("e0", second.url), "h/e0") if moved else (sglang("e1", second.url), "h/e1")
    write_fleet(tmp_path, [entry], adapters)
    daemon.signal(signal.SIGHUP)
    wait_for(lambda: "inventory reloaded" in daemon.log(), what="the reload")
    calls = len(first.state.requests)
    append(tmp_path / "access.jsonl", log_line("a1", engine=key))
    wait_for(lambda: "a1" in second.state.registry, what="a1 on the new engine", log=daemon.log)
    assert "a1" not in first.state.registry and len(first.state.requests) == calls
    assert daemon.stop()[0] == 0


def test_a_vllm_engines_running_adapters_are_adopted_at_reconcile(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    adapters = write_adapters(tmp_path / "adapters", 3)
    engine.state.registry["a2"] = str(adapters[2])  # loaded by someone else, and in a GPU slot
    engine.state.host["a2"] = None
    engine.state.gpu["a2"] = None
    inv = write_fleet(tmp_path, [vllm("e0", engine.url)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "1")
    port = daemon.metrics_port()
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")

    def resident() -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

    reconciled = 'lorafleet_actions_total{action="reconcile",engine="h/e0",mode="live",result="ok"} '
    wait_for(lambda: f"{reconciled}0.0" not in resident() and reconciled in resident(), what="a reconcile")
    append(tmp_path / "access.jsonl", log_line("a2", engine="h/e0"))
    wait_for(
        lambda: 'lorafleet_requests_total{engine="h/e0",mode="live",outcome="hit"} 1.0' in resident(),
        what="a hit",
        log=resident,
    )
    assert daemon.stop()[0] == 0


def test_the_live_summary_stats_and_the_engines_agree_on_touches_unloads_and_loads(
    tmp_path, emulators, daemon_process
) -> None:
    """Every call counted once, when it was done: the summary the daemon prints, `stats` over its journal and
    what the engines themselves received. Every 1-token request vLLM received is a touch or the rewarm of a load
    ahead of demand that found the adapter still registered (a `reloaded` row); a demand load of such an adapter
    sends none: the request that asked for it already brought it in."""
    import json

    from click.testing import CliRunner

    from lorafleet.cli.main import cli

    v = emulators(kind="vllm", gpu_slots=1, host_slots=2)
    s = emulators(kind="sglang", gpu_slots=2, host_slots=2)
    adapters = write_adapters(tmp_path / "adapters", 5)
    inv = write_fleet(tmp_path, [vllm("v", v.url, gpu=1, host=2), sglang("s", s.url, gpu=2, host=2)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db", "--policy", "lorafleet", "--json")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    pattern = ["a0", "a0", "a0", "a1", "a2", "a0", "a3"]  # a popular one the LRU order would drop: touches
    for i in range(35):  # 20 lines a second: the engines answer between them
        for engine in ("h/v", "h/s"):
            append(tmp_path / "access.jsonl", log_line(pattern[i % len(pattern)], engine=engine))
        time.sleep(0.1)
    time.sleep(1.0)  # let the last calls settle
    code, _ = daemon.stop()
    assert code == 0, daemon.log()
    summary = json.loads(daemon.proc.stdout.read())  # type: ignore[union-attr]

    stats = CliRunner().invoke(
        cli, ["stats", "-i", str(inv), "--state", str(tmp_path / "state.db"), "--since", "1h", "--no-replay", "--json"]
    )
    overall = json.loads(stats.stdout)["overall"]
    primes = [b for _, path, b in v.state.requests if path == "/v1/completions" and b and b.get("prompt") == "ping"]
    unloads = [p for _, p, _ in s.state.requests if p == "/unload_lora_adapter"]
    assert summary["requests"] == overall["requests"] == 70
    assert summary["touches"] > 0 and summary["unloads"] > 0
    assert summary["unloads"] == len(unloads)
    assert summary["prefetch_loads"] == overall["prefetch_loads"]
    with sqlite3.connect(tmp_path / "state.db") as c:
        (unloaded,) = c.execute("SELECT COUNT(*) FROM loads WHERE action = 'unloaded' AND ok").fetchone()
        (loads,) = c.execute("SELECT COUNT(*) FROM loads WHERE action IN ('loaded', 'reloaded') AND ok").fetchone()
        (rewarmed,) = c.execute(
            "SELECT COUNT(*) FROM loads WHERE action = 'reloaded' AND ok AND engine = 'h/v' AND reason != 'demand'"
        ).fetchone()
    assert unloaded == summary["unloads"] and loads == summary["loads"]
    assert summary["touches"] == overall["touches"]
    assert summary["touches"] + rewarmed == len(primes)


def test_a_live_once_run_reconciles_first_and_waits_for_the_calls_in_flight(tmp_path, emulators) -> None:
    """`--once` live: the engines are read before any action (the summary counts that reconcile), and the run
    ends only when the loads it sent have answered (up to settle_s), so each is journaled with its outcome."""
    from lorafleet.daemon.loop import Daemon, DaemonOptions
    from lorafleet.inventory import load_inventory
    from lorafleet.store.db import open_store
    from tests.engine_emulator import adapter_mb

    adapters = write_adapters(tmp_path / "adapters", 2)
    engine = emulators(kind="vllm", load_s_per_mb=1.5 / adapter_mb(str(adapters[0])))  # a load takes 1.5 s
    inv = write_fleet(tmp_path, [vllm("e0", engine.url)], adapters)
    append(tmp_path / "access.jsonl", log_line("a0", ts=time.time() - 10))
    options = DaemonOptions(policy="lru", once=True, from_start=True, logs=(str(tmp_path / "access.jsonl"),))
    with open_store(tmp_path / "state.db") as store:
        summary = Daemon(load_inventory(inv), store, options).run()
    assert summary.reconciles == 1 and "a0" in engine.state.registry
    assert [path for _, path, _ in engine.state.requests].count("/v1/models") == 1  # that reconcile, once
    with sqlite3.connect(tmp_path / "state.db") as c:
        loads = c.execute("SELECT adapter, action FROM loads WHERE source = 'daemon'").fetchall()
    assert ("a0", "loaded") in loads


def test_a_load_in_flight_at_sigterm_is_answered_and_journaled_before_the_exit(
    tmp_path, emulators, daemon_process
) -> None:
    """A stop waits (within its grace) for the engine threads: a load the engine is doing is answered and
    journaled, not lost with the process."""
    from tests.engine_emulator import adapter_mb

    adapters = write_adapters(tmp_path / "adapters", 2)
    engine = emulators(kind="vllm", load_s_per_mb=0.6 / adapter_mb(str(adapters[0])))  # a load takes 0.6 s
    inv = write_fleet(tmp_path, [vllm("e0", engine.url)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    append(tmp_path / "access.jsonl", log_line("a0"))
    wait_for(
        lambda: any(path.endswith("load_lora_adapter") for _, path, _ in engine.state.requests),
        what="the load sent",
        log=daemon.log,
    )
    code, took = daemon.stop()
    assert code == 0 and took < 5
    with sqlite3.connect(tmp_path / "state.db") as c:
        loads = c.execute("SELECT adapter, action, ok FROM loads WHERE source = 'daemon'").fetchall()
    assert ("a0", "loaded", 1) in loads
