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


def fleet(folder: Path, engine: EngineEmulator) -> Path:
    paths = write_adapters(folder / "adapters", 6)
    engine.state.resolver = {f"a{i}": str(p) for i, p in enumerate(paths)}  # vLLM's lazy resolver
    inv = folder / "inv.yaml"
    inv.write_text(
        "defaults: {load_fixed_ms: 5, disk_gbps: 3, h2d_gbps: 25}\n"
        "base_models:\n  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
        "hosts:\n  - name: h\n    provider: onprem\n    connection: local\n    engines:\n"
        f"      - {vllm('e0', engine.url)}\n"
        "adapters:\n"
        + "".join(f"  - {{id: a{i}, base_model: m, path: '{p}', rank: 8}}\n" for i, p in enumerate(paths))
        + "tenants:\n  acme: {workflows: [[a3, a4, a5]]}\n"
        f"gateway:\n  logs:\n    - path: nginx/access.jsonl\n      format: jsonl\n      fields: {FIELDS}\n"
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
