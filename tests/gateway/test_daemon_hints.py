"""End to end: a client -> the recipe in a real nginx -> an emulated vLLM, the mirror feeding a real
`lorafleet daemon --hints-addr`, which follows nginx's own access log."""

from __future__ import annotations

import http.client
import json
import sqlite3
import threading
import time
from pathlib import Path

from tests.daemon.conftest import vllm, wait_for, write_adapters
from tests.engine_emulator import EngineEmulator
from tests.nginx_gateway import NginxGateway, free_port

FIELDS = (
    "{time: ts, tenant: tenant, adapter: adapter, engine: upstream, status: status, duration_s: duration_s, "
    "request_id: request_id}"
)


def fleet(
    folder: Path, *engines: EngineEmulator, adapters: int = 6, tenants: str = "  acme: {workflows: [[a3, a4, a5]]}\n"
) -> Path:
    """An inventory of the emulated engines (each with vLLM's lazy resolver over the adapters) behind nginx."""
    paths = write_adapters(folder / "adapters", adapters)
    for engine in engines:
        engine.state.resolver = {f"a{i}": str(p) for i, p in enumerate(paths)}  # vLLM's lazy resolver
    inv = folder / "inv.yaml"
    inv.write_text(
        "defaults: {load_fixed_ms: 5, disk_gbps: 3, h2d_gbps: 25}\n"
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - name: h\n    provider: onprem\n    connection: local\n    engines:\n"
        + "".join(f"      - {vllm(f'e{i}', e.url)}\n" for i, e in enumerate(engines))
        + "adapters:\n"
        + "".join(f"  - {{id: a{i}, base_model: m, path: '{p}', rank: 8}}\n" for i, p in enumerate(paths))
        + (f"tenants:\n{tenants}" if tenants else "")
        + f"gateway:\n  logs:\n    - path: nginx/access.jsonl\n      format: jsonl\n      fields: {FIELDS}\n"
    )
    return inv


def complete(gateway: NginxGateway, adapter: str) -> float:
    """One request through the gateway, as a client sends it; when it ended (time.time())."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    body = json.dumps({"model": adapter, "prompt": "go", "max_tokens": 8})
    conn.request("POST", "/v1/completions", body, {"X-Tenant-Id": "acme", "X-Lora-Adapter": adapter})
    assert conn.getresponse().status == 200
    conn.close()
    return time.time()


def test_a_step_is_prefetched_while_the_one_before_it_is_still_generating(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4, gen_fixed_s=1.0)
    inv = fleet(tmp_path, engine)
    hints = free_port()
    (tmp_path / "nginx").mkdir()
    (tmp_path / "nginx" / "access.jsonl").touch()
    with NginxGateway(tmp_path / "nginx", [engine.url], hints) as gateway:
        db = tmp_path / "state.db"
        daemon = daemon_process(inv, db, "--hints-addr", f"127.0.0.1:{hints}")
        wait_for(lambda: "following" in daemon.log(), what="the daemon", log=daemon.log)
        engine.state.registry.pop("a4", None)
        engine.state.host.pop("a4", None)
        ended: list[float] = []
        client = threading.Thread(target=lambda: ended.append(complete(gateway, "a3")))
        client.start()
        wait_for(lambda: "a4" in engine.state.registry, what="a4 prefetched from a3's hint", log=daemon.log)
        prefetched = time.time()
        client.join()
        assert prefetched < ended[0] - 0.5  # during a3's generation, long before its log line
        assert complete(gateway, "a4") and engine.state.served["hit"] >= 1  # the next step: warm on arrival
        gateway.wait_for_records(2)
        wait_for(lambda: _requests(db) == 2, what="both requests counted once", log=daemon.log)
        assert daemon.stop()[0] == 0
    assert _requests(db) == 2


def _requests(db: Path) -> int:
    try:
        with sqlite3.connect(db) as c:
            return c.execute("SELECT COALESCE(SUM(requests), 0) FROM rollups").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_with_nginx_hashing_adapters_the_daemon_learns_where_a_hinted_request_ran(
    tmp_path, emulators, daemon_process
) -> None:
    """The recipe's `hash $http_x_lora_adapter consistent` line enabled, two engines: a hint names no engine, so
    the daemon's book takes a newcomer on the placement rule's engine (both empty: e0) and loads it there, while
    nginx sends the request where the name hashes. For an adapter nginx sends to e1, the line (its
    `$upstream_addr`) says so: the hint is counted `rerouted`, and the book holds the adapter on both engines,
    as the engines themselves do; its next hint the book takes on e1 at once."""
    from tests.nginx_gateway import RECIPE

    engines = [emulators(kind="vllm", gpu_slots=2, host_slots=4) for _ in range(2)]
    inv = fleet(tmp_path, *engines, adapters=16, tenants="")  # one of 16 names hashes to e1 but for a 2^-16 chance
    recipe = RECIPE.read_text(encoding="utf-8")
    assert recipe.count("#   hash $http_x_lora_adapter consistent;") == 1
    recipe = recipe.replace("#   hash $http_x_lora_adapter consistent;", "hash $http_x_lora_adapter consistent;")
    hints = free_port()
    (tmp_path / "nginx").mkdir()
    (tmp_path / "nginx" / "access.jsonl").touch()
    with NginxGateway(tmp_path / "nginx", [e.url for e in engines], hints, recipe_text=recipe) as gateway:
        for i in range(16):  # where nginx sends each name (no daemon yet: the mirror's hints go nowhere)
            complete(gateway, f"a{i}")
        upstream = {r["adapter"]: r["upstream"] for r in gateway.wait_for_records(16)}
        to_e1 = next(a for a, up in upstream.items() if up == f"127.0.0.1:{engines[1].port}")
        for engine in engines:  # the probe's loads forgotten: both engines start empty
            engine.state.registry.clear()
            engine.state.host.clear()
            engine.state.gpu.clear()
            engine.state.served.update(hit=0, miss=0)
            engine.state.gen_fixed_s = 0.5  # from now on a request runs a while: its hint comes before its line
        db = tmp_path / "state.db"
        daemon = daemon_process(inv, db, "--hints-addr", f"127.0.0.1:{hints}")  # follows the log from its end
        wait_for(lambda: "following" in daemon.log(), what="the daemon", log=daemon.log)
        metrics = daemon.metrics_port()
        complete(gateway, to_e1)
        wait_for(lambda: _hints(metrics).get("rerouted") == 1, what="the hint counted rerouted", log=daemon.log)
        assert to_e1 in engines[0].state.registry  # the load the book made where it took the hint
        assert engines[1].state.served == {"hit": 0, "miss": 1}  # e1 took the request and loaded it itself
        held = {key: float(len(e.state.host)) for key, e in zip(("h/e0", "h/e1"), engines, strict=True)}
        assert held == {"h/e0": 1.0, "h/e1": 1.0}
        wait_for(lambda: _resident(metrics) == held, what="the book to hold what the engines do", log=daemon.log)
        # Its next request: the book takes the hint where the line said nginx sent the adapter (both engines hold
        # it now; by the placement rule it would be e0, the first holder, and rerouted again).
        complete(gateway, to_e1)
        wait_for(lambda: _hints(metrics).get("joined") == 2, what="the second hint joined", log=daemon.log)
        assert _hints(metrics).get("rerouted") == 1
        assert daemon.stop()[0] == 0
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT engine, SUM(requests) FROM rollups GROUP BY engine").fetchall() == [("h/e1", 2)]


def _scrape(port: int) -> str:
    import urllib.request

    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def _hints(port: int) -> dict[str, float]:
    import re

    found = re.findall(r'lorafleet_hints_total\{mode="live",outcome="(\w+)"\} (\S+)', _scrape(port))
    return {outcome: float(value) for outcome, value in found}


def _resident(port: int) -> dict[str, float]:
    import re

    found = re.findall(r'lorafleet_resident_adapters\{engine="([^"]+)",mode="live"\} (\S+)', _scrape(port))
    return {engine: float(value) for engine, value in found}
