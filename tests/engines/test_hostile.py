"""Hostile engines: each way an engine can misbehave is bounded in time, memory and retries, with one clear line."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lorafleet.engines import EngineRejectedError, EngineUnavailableError, make_client
from lorafleet.engines.base import _retry_after
from tests.conftest import interruptible
from tests.engines.conftest import make_engine
from tests.engines.hostile import HostileServer
from tests.engines.test_warm import vllm_entry, write_inventory

ROOT = Path(__file__).resolve().parents[2]


def client_for(server: HostileServer, timeout_s: float = 1.0, deadline_s: float = 2.0, cap: int = 1 << 20):  # type: ignore[no-untyped-def]
    engine = dataclasses.replace(
        make_engine("vllm", server.url, timeout_s=timeout_s), call_deadline_s=deadline_s, max_response_bytes=cap
    )
    return make_client(engine, backoff=(0.05, 0.05, 0.05))


def test_a_trickling_engine_is_cut_off_at_the_call_deadline() -> None:
    with HostileServer("trickle") as server, client_for(server, timeout_s=5, deadline_s=1.5) as c:
        began = time.monotonic()
        with pytest.raises(EngineUnavailableError, match="timed out"):
            c.registry()
        assert time.monotonic() - began < 3


@pytest.mark.parametrize("method", ["registry", "load"])
def test_an_engine_dripping_its_headers_is_cut_off_at_the_call_deadline(method: str) -> None:
    """Each byte restarts httpx's read timeout: only the call's deadline ends it (it once ran past 100 s)."""
    with HostileServer("headdrip") as server, client_for(server, timeout_s=5, deadline_s=1.5) as c:
        began = time.monotonic()
        with pytest.raises(EngineUnavailableError, match="timed out"):
            c.registry() if method == "registry" else c.load("a", "/p/a")
        assert time.monotonic() - began < 3
        with pytest.raises(EngineUnavailableError, match="not retried in this run"):
            c.registry()  # failed for the run: no second wait


def test_an_endless_body_is_refused_at_the_size_cap() -> None:
    with (
        HostileServer("endless") as server,
        client_for(server, deadline_s=10, cap=256 * 1024) as c,
        pytest.raises(EngineRejectedError, match="more than 262144 bytes"),
    ):
        c.registry()


def test_a_hung_engine_costs_one_deadline_per_run_not_one_per_call() -> None:
    with HostileServer("hang") as server, client_for(server, timeout_s=0.5, deadline_s=1.2) as c:
        began = time.monotonic()
        with pytest.raises(EngineUnavailableError):
            c.registry()
        first = time.monotonic() - began
        for _ in range(5):
            with pytest.raises(EngineUnavailableError, match="not retried in this run"):
                c.load("a", "/p/a")
        assert first < 2.5 and time.monotonic() - began < first + 0.5


def test_a_prime_is_not_sent_twice_after_a_timeout() -> None:
    with HostileServer("hang") as server, client_for(server, timeout_s=0.5, deadline_s=5) as c:
        with pytest.raises(EngineUnavailableError, match="timed out"):
            c.prime("a")
        time.sleep(0.2)
        assert len(server.requests) == 1


def test_html_error_pages_become_one_line() -> None:
    with HostileServer("html") as server, client_for(server) as c, pytest.raises(EngineUnavailableError) as info:
        c.registry()
    assert "\n" not in info.value.message and "502 Bad Gateway" in info.value.message


def test_a_connection_closed_mid_body_is_reported() -> None:
    with (
        HostileServer("close") as server,
        client_for(server) as c,
        pytest.raises(EngineUnavailableError, match=r"broke off|timed out"),
    ):
        c.registry()


def test_a_deterministic_500_is_final() -> None:
    with HostileServer("rank500") as server, client_for(server) as c:
        with pytest.raises(EngineRejectedError, match="greater than max_lora_rank"):
            c.load("a", "/p/a")
        assert len(server.requests) == 1  # not retried


def test_retry_after_as_an_http_date_is_honoured() -> None:
    with HostileServer("date") as server, client_for(server, deadline_s=10) as c:
        waits: list[float] = []
        c.sleep = lambda s: (waits.append(s), time.sleep(s))  # type: ignore[assignment]
        assert c.registry() == set()
    assert len(waits) == 1 and 0.0 <= waits[0] <= 2.0


def test_retry_after_forms() -> None:
    assert _retry_after("3") == 3.0
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: at once
    assert _retry_after("soon") is None and _retry_after(None) is None


def test_proxy_variables_are_ignored_so_the_key_never_reaches_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    with HostileServer("hang") as proxy, HostileServer("date") as engine:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.setenv("ALL_PROXY", proxy.url)
        monkeypatch.setenv("SECRET_KEY_ENV", "sk-known-secret-123")
        e = dataclasses.replace(make_engine("vllm", engine.url, api_key_env="SECRET_KEY_ENV"), call_deadline_s=10)
        with make_client(e, backoff=(0.05,)) as c:
            c.registry()
        assert proxy.connections == 0 and engine.connections >= 1


def warm_process(inventory: Path, state: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LORAFLEET_STATE": str(state), "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "lorafleet", "warm", "-i", str(inventory), "r8", "r16", "missing"],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=interruptible,
    )


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_warm_within_2s_against_a_hung_engine(
    tmp_path: Path, adapter_dirs: dict[int, Path], sig: int, code: int
) -> None:
    with HostileServer("hang") as hung:
        inv = write_inventory(tmp_path, [vllm_entry("hung", hung.url)], adapter_dirs)
        inv.write_text(inv.read_text().replace("request_timeout_s: 2", "request_timeout_s: 60"))
        proc = warm_process(inv, tmp_path / "state.db")
        deadline = time.monotonic() + 20
        while hung.connections == 0 and time.monotonic() < deadline:  # the first call is in flight
            time.sleep(0.05)
        assert hung.connections >= 1
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
        assert time.monotonic() - sent < 2.0
        seen = hung.connections
        time.sleep(0.5)
        assert hung.connections == seen  # no request starts after the signal
    assert proc.returncode == code, err
    assert "Traceback" not in out + err
    assert "interrupted" in err and "cancelled" in out  # the partial table


def test_a_sigterm_while_replicas_are_chosen_is_a_one_line_error_and_a_json_one(
    tmp_path: Path, adapter_dirs: dict[int, Path]
) -> None:
    """`--replicas` reads each engine's registry before the run starts (and reports partial results): a signal
    then was a traceback, exit 1."""
    with HostileServer("hang") as one, HostileServer("hang") as two:
        inv = write_inventory(tmp_path, [vllm_entry("a", one.url), vllm_entry("b", two.url)], adapter_dirs)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LORAFLEET_STATE": str(tmp_path / "s.db")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "lorafleet", "warm", "-i", str(inv), "r8", "--replicas", "1", "--json"],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 20
        while one.connections + two.connections == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert err == "error: interrupted\n"
    assert json.loads(out)["error"]["exit_code"] == 143


def test_replicas_read_each_registry_once_in_parallel_within_the_deadline(
    tmp_path: Path, run_cli, emulators, adapter_dirs: dict[int, Path]
) -> None:
    """Choosing the least loaded engines read every adapter x engine registry one after another, before the run
    and its deadline began: three hung engines held `--deadline 2` for 94 s."""
    good = emulators(kind="vllm")
    with HostileServer("hang") as h1, HostileServer("hang") as h2, HostileServer("hang") as h3:
        entries = [vllm_entry(f"hung{i}", h.url) for i, h in enumerate((h1, h2, h3))] + [vllm_entry("ok", good.url)]
        inv = write_inventory(tmp_path, entries, adapter_dirs)
        inv.write_text(inv.read_text().replace("request_timeout_s: 2", "request_timeout_s: 30"))
        began = time.monotonic()
        result = run_cli("warm", "-i", str(inv), "r8", "r16", "--replicas", "1", "--deadline", "2", "--json")
        took = time.monotonic() - began
        assert (h1.connections, h2.connections, h3.connections) == (1, 1, 1)  # once each, not once per adapter
    rows = json.loads(result.stdout)["results"]
    assert [(r["adapter"], r["engine"], r["action"]) for r in rows] == [
        ("r8", "h/ok", "loaded"),
        ("r16", "h/ok", "loaded"),
    ]
    assert took < 6, took


def test_engine_text_is_never_markup_or_terminal_escapes(tmp_path: Path, run_cli, emulators, adapter_dirs) -> None:
    from tests.engine_emulator import Fault

    e = emulators(kind="vllm")
    message = "bad [/adapters/x] targets [q_proj, v_proj] \x1b]0;pwned\x07\x1b[31mred"
    e.state.faults.append(Fault(status=400, times=5, message=message, path="/v1/load_lora_adapter"))
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    result = run_cli("warm", "r8", "r16", "-i", str(inv))
    assert result.exit_code == 1, result.stderr
    assert "internal error" not in result.stderr
    assert "[q_proj, v_proj]" in result.stdout and "[/adapters/x]" in result.stdout
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout


def test_a_failed_prime_after_a_good_load_is_booked_and_journaled_as_loaded(
    tmp_path: Path, run_cli, emulators, adapter_dirs, isolated_env: Path
) -> None:
    from lorafleet.store.db import open_store
    from tests.engine_emulator import Fault

    e = emulators(kind="vllm")
    e.state.faults.append(Fault(status=400, times=1, message="prime refused", path="/v1/completions"))
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    result = run_cli("warm", "r8", "r8", "--prime", "-i", str(inv), "--json")
    assert result.exit_code == 1
    with open_store(isolated_env) as store:
        (load,) = store.loads()  # r8 named twice, warmed once
        assert (load.action, load.ok) == ("loaded", False) and "prime failed" in (load.error or "")
        assert [r.adapter for r in store.residency("h/v")] == ["r8"]


def test_the_run_deadline_reports_what_is_not_done_instead_of_waiting(
    tmp_path: Path, run_cli, adapter_dirs: dict[int, Path]
) -> None:
    with HostileServer("hang") as hung:
        inv = write_inventory(tmp_path, [vllm_entry("hung", hung.url)], adapter_dirs)
        inv.write_text(inv.read_text().replace("request_timeout_s: 2", "request_timeout_s: 60"))
        began = time.monotonic()
        result = run_cli("warm", "r8", "r16", "-i", str(inv), "--deadline", "1")
        assert time.monotonic() - began < 5
        as_json = run_cli("warm", "r8", "r16", "-i", str(inv), "--deadline", "1", "--json")
    assert result.exit_code == 1
    assert "run deadline of 1s passed" in result.stderr and "cancelled" in result.stdout
    rows = [(r["adapter"], r["action"], r["ok"], r["primed"]) for r in json.loads(as_json.stdout)["results"]]
    assert as_json.exit_code == 1
    assert rows == [("r8", "interrupted", False, False), ("r16", "cancelled", False, False)]  # each once, none ok


def test_an_unusable_state_file_is_found_before_any_engine_is_contacted(
    tmp_path: Path, run_cli, emulators, adapter_dirs: dict[int, Path]
) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_cli("warm", "r8", "-i", str(inv), "--state", str(blocker / "state.db"))
    assert result.exit_code == 2 and "state database" in result.stderr
    assert e.state.requests == []
