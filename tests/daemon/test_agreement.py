"""Replay agrees with live: the same traffic sent to an emulated engine (which counts its own hits) while the
daemon follows the log, then replayed; and no engine ever holds more than its budget."""

from __future__ import annotations

import json
import random
import sqlite3
import time
import urllib.request
from pathlib import Path

import pytest

from lorafleet.inventory import load_inventory
from lorafleet.logs.reader import read_events
from lorafleet.replay.driver import simulate
from tests.daemon.conftest import log_line, sglang, vllm, wait_for, write_adapters, write_fleet

ADAPTERS = 8
CHAINS = {"t0": [0, 1, 2], "t1": [3, 4], "t2": [5, 6, 7], "t3": [1, 5]}


def traffic(count: int, seed: int) -> list[tuple[str, str]]:
    """Tenants stepping through their workflows (a step repeated 1–2 times, 10% strays), interleaved."""
    rng = random.Random(seed)
    position = dict.fromkeys(CHAINS, 0)
    out = []
    while len(out) < count:
        tenant = rng.choice(list(CHAINS))
        chain = CHAINS[tenant]
        adapter = f"a{rng.randrange(ADAPTERS)}" if rng.random() < 0.1 else f"a{chain[position[tenant] % len(chain)]}"
        out += [(tenant, adapter)] * rng.randint(1, 2)
        position[tenant] += 1
    return out[:count]


def send(url: str, model: str) -> None:
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": 1}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=5).read()


def journaled(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT COALESCE(SUM(requests), 0) FROM rollups").fetchone()[0]


@pytest.mark.parametrize("policy", ["lru", "lorafleet"])
def test_replay_agrees_with_live_within_3_points(policy, tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=1, host_slots=3)
    adapters = write_adapters(tmp_path / "adapters", ADAPTERS)
    engine.state.resolver = {f"a{i}": str(p) for i, p in enumerate(adapters)}
    tenants = "".join(f"  {t}: {{workflows: [[{', '.join(f'a{i}' for i in c)}]]}}\n" for t, c in CHAINS.items())
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, gpu=1, host=3)], adapters, tenants=tenants)
    db = tmp_path / "state.db"
    daemon = daemon_process(inv, db, "--policy", policy)
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    log = tmp_path / "access.jsonl"
    requests = traffic(240, seed=5)
    for tenant, adapter in requests:
        send(engine.url, adapter)  # the gateway: the engine serves it (and counts hit or miss) ...
        with open(log, "a") as fh:  # ... then logs it
            fh.write(log_line(adapter, tenant, "h/e0"))
        time.sleep(0.06)
    wait_for(lambda: journaled(db) == len(requests), what="the daemon caught up")
    assert daemon.stop()[0] == 0
    served = engine.state.served
    live = served["hit"] / (served["hit"] + served["miss"])
    inventory = load_inventory(inv)
    events, _ = read_events([log], inventory)
    replayed = simulate(inventory, policy, events).hit_ratio
    print(f"agreement {policy}: live {live:.4f} replay {replayed:.4f}")
    assert abs(live - replayed) <= 0.03, (policy, live, replayed, daemon.log()[-3000:])


def test_no_engine_ever_holds_more_than_its_budget(tmp_path, emulators, daemon_process) -> None:
    # The engine has no cap of its own (SGLang without --max-loaded-loras): only lorafleet's unloads keep it
    # within the inventory's budget of 3.
    engine = emulators(kind="sglang", gpu_slots=2, host_slots=None)
    adapters = write_adapters(tmp_path / "adapters", ADAPTERS)
    tenants = "".join(f"  {t}: {{workflows: [[{', '.join(f'a{i}' for i in c)}]]}}\n" for t, c in CHAINS.items())
    inv = write_fleet(tmp_path, [sglang("e0", engine.url, gpu=2, host=3)], adapters, tenants=tenants)
    db = tmp_path / "state.db"
    daemon = daemon_process(inv, db)
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    requests = traffic(120, seed=9)
    with open(tmp_path / "access.jsonl", "a") as fh:
        for tenant, adapter in requests:
            fh.write(log_line(adapter, tenant, "h/e0"))
            fh.flush()
            time.sleep(0.01)
    wait_for(lambda: journaled(db) == len(requests), what="the daemon caught up")
    time.sleep(0.5)
    assert daemon.stop()[0] == 0
    assert engine.state.loads >= 4
    assert 0 < engine.state.peak_host <= 3
