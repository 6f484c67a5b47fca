"""The offline commands open no connection and look up no name: `inventory check`, `inventory show`, `plan`,
`replay` and `stats`, over every example inventory (which name cloud, private and Kubernetes addresses), run
with every socket connect and every name lookup of this process refused and recorded."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lorafleet.inventory import load_inventory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "inventories").glob("*.yaml"))
SHARED_REFERENCE = ROOT.parent / "shared" / "docs" / "inventory-reference.yaml"
START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def refused(monkeypatch) -> list[tuple[str, Any]]:
    """Every connect and name lookup fails and is recorded (a test's own loopback servers are not used here)."""
    tried: list[tuple[str, Any]] = []

    def refuse(name: str):
        def call(*args: Any, **kwargs: Any) -> Any:
            tried.append((name, args[1:] if name.startswith("socket.") else args))
            raise OSError(f"an offline command tried {name}")

        return call

    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
    monkeypatch.setattr(socket, "create_connection", refuse("create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))
    monkeypatch.setattr(socket, "gethostbyname", refuse("gethostbyname"))
    return tried


def write_log(inventory: Path, folder: Path) -> Path:
    """Two hundred requests for the inventory's adapters, in the format its first gateway log is read in."""
    inv = load_inventory(inventory)
    adapters = sorted(inv.adapters)[:12]
    engines = sorted(e.key for e in inv.engines)
    nginx = bool(inv.gateway_logs) and inv.gateway_logs[0].format == "nginx"
    lines = []
    for i in range(200):
        adapter = adapters[(i * 7) % len(adapters) if i % 3 else i % 2]
        tenant = (inv.adapters[adapter].tenants or ("t",))[0]
        when = START + timedelta(seconds=2 * i)
        if nginx:
            stamp = when.strftime("%d/%b/%Y:%H:%M:%S +0000")
            upstream = "10.0.0.1:8000"  # data in a log line, never an address to contact
            request = '"POST /v1/completions HTTP/1.1"'
            lines.append(f'10.1.2.3 - - [{stamp}] {request} 200 512 "{tenant}" "{adapter}" {upstream} 0.210')
        else:
            engine = engines[i % len(engines)] if engines and i % 4 == 0 else None
            record = {"ts": when.isoformat().replace("+00:00", "Z"), "tenant_id": tenant, "model": adapter}
            lines.append(json.dumps({**record, "upstream": engine, "status": 200}))
    path = folder / (Path(inv.gateway_logs[0].path).name if inv.gateway_logs else "access.jsonl")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "inventory",
    [*EXAMPLES, pytest.param(SHARED_REFERENCE, marks=pytest.mark.skipif(not SHARED_REFERENCE.exists(), reason="-"))],
    ids=lambda p: p.name,
)
def test_offline_commands_never_connect_nor_look_a_name_up(
    inventory: Path, tmp_path: Path, run_cli, refused: list[tuple[str, Any]]
) -> None:
    log = write_log(inventory, tmp_path)
    state = tmp_path / "state.db"
    runs = {
        "inventory check": ["inventory", "check", "-i", str(inventory)],
        "inventory show": ["inventory", "show", "-i", str(inventory), "--json"],
        "replay": ["replay", str(log), "-i", str(inventory), "--json", "--policy", "lru,lorafleet,oracle"],
        "plan": ["plan", "-i", str(inventory), "--log", str(log), "--window", "30d", "--json", "--recommend-flags"],
        "plan --target-hit-ratio": ["plan", "-i", str(inventory), "--log", str(log), "--target-hit-ratio", "0.5"],
    }
    for name, args in runs.items():
        result = run_cli(*args, "--state", str(state)) if name.startswith("plan") else run_cli(*args)
        assert result.exit_code in (0, 1), f"{name}: {result.stderr}"  # 1: a plan that placed nothing
        assert result.stdout.strip(), name
        assert "Traceback" not in result.stderr, name
    replayed = json.loads(run_cli(*runs["replay"]).stdout)
    assert replayed["log"]["adapter_requests"] == 200 and replayed["log"]["bad_lines"] == 0
    assert [p["requests"] for p in replayed["policies"]] == [200, 200, 200]
    stats = run_cli("stats", "-i", str(inventory), "--state", str(state))
    assert stats.exit_code in (0, 2) and "Traceback" not in stats.stderr
    assert refused == []


def test_the_guard_sees_a_command_that_does_connect(tmp_path: Path, run_cli, refused: list[tuple[str, Any]]) -> None:
    """The refusal above is no test if it cannot fail: `warm` on the tour's loopback engines is caught."""
    demo = ROOT / "inventories" / "demo.yaml"
    adapter = sorted(load_inventory(demo).adapters)[0]
    result = run_cli("warm", adapter, "-i", str(demo), "--state", str(tmp_path / "s.db"), "--json")
    assert result.exit_code == 1
    assert refused and all(name in ("socket.connect", "create_connection", "getaddrinfo") for name, _ in refused)
