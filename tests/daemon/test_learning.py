"""How fast the live daemon learns a workflow it was never told of, and that a `kill -9` or a rotated log does not
unlearn it.

A real daemon process follows the log against an emulated vLLM (2 GPU slots, 6 host slots). A tenant runs an
undeclared 4-step chain; between its rounds, six other adapters pass, so the engine alone has forgotten the
chain by the next round. Each step is a real request to the engine (its own hit/miss count is the measure), then
its log line; the next step follows after a think time.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from pathlib import Path

from lorafleet.times import parse_utc_text
from tests.daemon.conftest import DaemonProcess, vllm, wait_for, write_adapters, write_fleet
from tests.engine_emulator import EngineEmulator

CHAIN = ["a0", "a1", "a2", "a3"]
NOISE = ["a4", "a5", "a6", "a7", "a8", "a9"]
THINK_S = 0.15


def request(engine: EngineEmulator, adapter: str) -> bool:
    """One real completion to the engine; whether the engine had the adapter in memory (its own count)."""
    before = engine.state.served["hit"]
    conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=10)
    conn.request("POST", "/v1/completions", json.dumps({"model": adapter, "prompt": "go", "max_tokens": 4}))
    assert conn.getresponse().status == 200
    conn.close()
    return engine.state.served["hit"] > before


def round_of(engine: EngineEmulator, log: Path, tenant: str = "wf") -> list[bool]:
    """The chain's steps, then the noise; whether each later step (2-4) was warm on arrival."""
    warm = []
    for i, adapter in enumerate(CHAIN):
        hit = request(engine, adapter)
        if i:
            warm.append(hit)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"ts": time.time(), "tenant_id": tenant, "model": adapter}) + "\n")
        time.sleep(THINK_S)
    for adapter in NOISE:
        request(engine, adapter)
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"ts": time.time(), "tenant_id": "other", "model": adapter}) + "\n")
        time.sleep(THINK_S / 3)
    return warm


def fleet(tmp_path: Path, engine: EngineEmulator) -> Path:
    adapters = write_adapters(tmp_path / "adapters", 10)
    engine.state.resolver = {f"a{i}": str(p) for i, p in enumerate(adapters)}  # vLLM's lazy resolver
    return write_fleet(tmp_path, [vllm("e0", engine.url, gpu=2, host=6)], adapters)


def started(daemon: DaemonProcess) -> DaemonProcess:
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start", log=daemon.log)
    return daemon


def test_a_chain_seen_twice_is_prefetched_on_its_third_round(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=6)
    inv = fleet(tmp_path, engine)
    daemon = started(daemon_process(inv, tmp_path / "state.db"))
    log = tmp_path / "access.jsonl"
    rounds = [round_of(engine, log) for _ in range(5)]
    assert not any(rounds[0])  # the engine alone: the noise pushed the chain out
    assert all(all(r) for r in rounds[2:]), rounds  # seen twice, warm from the third round on
    assert daemon.stop()[0] == 0


def test_after_kill_9_the_next_round_is_as_warm_as_the_one_before(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=6)
    inv = fleet(tmp_path, engine)
    db = tmp_path / "state.db"
    log = tmp_path / "access.jsonl"
    daemon = started(daemon_process(inv, db))
    rounds = [round_of(engine, log) for _ in range(4)]
    assert all(rounds[-1]), rounds
    last_line = time.time()
    time.sleep(2.5)  # the last line read and committed, and what it taught written once due (memory every 1 s)
    daemon.proc.kill()
    daemon.proc.wait()
    again = daemon_process(inv, db)
    wait_for(lambda: again.log().count("following") == 2, what="the restart", log=again.log)
    learned_by = re.search(r"goes on from what it had learned by (\S+)", again.log())
    assert learned_by is not None
    # Lines committed without it, then an idle daemon: the memory is still written once due, so it covers them.
    assert parse_utc_text(learned_by.group(1)) > last_line
    after = round_of(engine, log)
    assert all(after), (rounds, after, again.log()[-2000:])
    assert again.stop()[0] == 0


def test_a_rotated_log_keeps_the_chain_warm_live_and_across_kill_9(tmp_path, emulators, daemon_process) -> None:
    """Rotation by rename, as logrotate does it: once while the daemon follows, once while it is down after a
    `kill -9`; each next round is as warm as the one before."""
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=6)
    inv = fleet(tmp_path, engine)
    db = tmp_path / "state.db"
    log = tmp_path / "access.jsonl"
    daemon = started(daemon_process(inv, db))
    rounds = [round_of(engine, log) for _ in range(3)]
    assert all(rounds[-1]), rounds
    log.rename(tmp_path / "access.jsonl.1")  # the next lines go to a new file of the same name
    rounds.append(round_of(engine, log))
    assert all(rounds[-1]), rounds
    time.sleep(2.5)  # the last line read and committed, and what it taught written once due
    daemon.proc.kill()
    daemon.proc.wait()
    (tmp_path / "access.jsonl.1").rename(tmp_path / "access.jsonl.2")
    log.rename(tmp_path / "access.jsonl.1")
    again = daemon_process(inv, db)
    wait_for(lambda: again.log().count("following 0 log") == 1, what="the restart", log=again.log)
    assert again.log().count("goes on from what it had learned") == 1  # the memory, not a fresh start
    after = round_of(engine, log)
    assert all(after), (rounds, after, again.log()[-2000:])
    assert again.stop()[0] == 0
