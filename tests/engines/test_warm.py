"""`lorafleet warm` against emulated vLLM and SGLang engines on loopback."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.engine_emulator import EngineEmulator, Fault, adapter_mb
from tests.sshd_server import free_port

BASE = "  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"


def write_inventory(tmp_path: Path, engines: list[str], adapter_dirs: dict[int, Path], extra: str = "") -> Path:
    adapters = "".join(
        f"  - {{id: r{rank}, base_model: m, path: '{path}', rank: {rank}, target_modules: [q_proj, v_proj]}}\n"
        for rank, path in adapter_dirs.items()
    )
    adapters += f"  - {{id: missing, base_model: m, path: '{tmp_path / 'nowhere'}', rank: 8}}\n"
    text = (
        f"base_models:\n{BASE}  other: {{hidden_size: 64, intermediate_size: 128, num_layers: 2, "
        "num_attention_heads: 4}\n"
        "hosts:\n  - name: h\n    provider: onprem\n    request_timeout_s: 2\n    engines:\n"
        + "".join(f"      - {e}\n" for e in engines)
        + f"adapters:\n{adapters}{extra}"
    )
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return path


def vllm_entry(name: str, emulator_url: str, slots: int = 2, host: int = 4, rank: int = 64) -> str:
    return (
        f"{{name: {name}, kind: vllm, url: '{emulator_url}', base_model: m, max_loras: {slots}, "
        f"max_cpu_loras: {host}, max_lora_rank: {rank}}}"
    )


def sglang_entry(name: str, emulator_url: str, slots: int = 2, host: int = 4) -> str:
    return (
        f"{{name: {name}, kind: sglang, url: '{emulator_url}', base_model: m, max_loras_per_batch: {slots}, "
        f"max_loaded_loras: {host}}}"
    )


def warm_json(run_cli, inventory: Path, *args: str) -> tuple[int, list[dict]]:
    result = run_cli("warm", "--json", "-i", str(inventory), *args)
    assert "Traceback" not in result.stdout + result.stderr
    if result.exit_code == 2:
        return 2, [{"stderr": result.stderr}]
    return result.exit_code, json.loads(result.stdout)["results"]


def posts(emulator: EngineEmulator) -> list[tuple[str, dict | None]]:
    return [(path, body) for method, path, body in emulator.state.requests if method == "POST"]


def pings(*emulators: EngineEmulator) -> int:
    """1-token requests the engines were sent (a prime, or a re-warm: the same endpoint on vLLM and SGLang)."""
    return sum(path == "/v1/completions" for e in emulators for _, path, _ in e.state.requests)


def test_load_then_rewarm_by_a_1_token_request(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    code, results = warm_json(run_cli, inv, "r8")
    assert code == 0
    assert [(r["adapter"], r["engine"], r["action"], r["ok"], r["error"]) for r in results] == [
        ("r8", "h/v", "loaded", True, None)
    ]
    assert results[0]["ms"] >= 0 and "r8" in e.state.registry
    code, results = warm_json(run_cli, inv, "r8")
    assert code == 0 and results[0]["action"] == "reloaded"
    assert posts(e)[-1] == ("/v1/completions", {"model": "r8", "prompt": "ping", "max_tokens": 1, "temperature": 0})
    assert not any(body and body.get("load_inplace") for _, body in posts(e))  # it would stick (vLLM 0.32)


def test_missing_path_is_a_failure_with_the_engines_message(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    code, results = warm_json(run_cli, inv, "missing")
    assert code == 1
    (r,) = results
    assert (r["action"], r["ok"]) == ("failed", False)
    assert "HTTP 404: Loading lora missing failed: No adapter found for" in r["error"]


def test_rank_above_max_is_refused_before_any_request(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url, rank=64)], adapter_dirs)
    result = run_cli("warm", "-i", str(inv), "r128", "--engine", "h/v")
    assert result.exit_code == 2
    assert "refusing to warm: r128 has rank 128, above h/v's max_lora_rank 64" in result.stderr
    assert e.state.requests == []


def test_engine_rank_check_reported_cleanly_when_inventory_disagrees(
    tmp_path, run_cli, emulators, adapter_dirs
) -> None:
    e = emulators(kind="vllm", max_lora_rank=64)
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url, rank=128)], adapter_dirs)  # inventory says 128
    code, results = warm_json(run_cli, inv, "r128")
    assert code == 1
    assert "LoRA rank 128 is greater than max_lora_rank 64" in results[0]["error"]


def test_one_engine_down_among_three(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    a, b = emulators(kind="vllm"), emulators(kind="sglang")
    dead = f"http://127.0.0.1:{free_port()}"
    inv = write_inventory(
        tmp_path, [vllm_entry("a", a.url), sglang_entry("b", b.url), vllm_entry("dead", dead)], adapter_dirs
    )
    code, results = warm_json(run_cli, inv, "r16")
    assert code == 1
    by_engine = {r["engine"]: r for r in results}
    assert by_engine["h/a"]["action"] == by_engine["h/b"]["action"] == "loaded"
    assert by_engine["h/dead"]["action"] == "failed" and "cannot reach" in by_engine["h/dead"]["error"]
    table = run_cli("warm", "-i", str(inv), "r16")
    assert table.exit_code == 1 and "h/dead" in table.stdout and "failed" in table.stdout


def test_budget_is_never_exceeded_in_the_book(tmp_path, run_cli, emulators, adapter_dirs, isolated_env) -> None:
    e = emulators(kind="vllm", gpu_slots=1, host_slots=2)
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url, slots=1, host=2)], adapter_dirs)
    for adapter in ("r8", "r16", "r64", "r8"):
        code, _ = warm_json(run_cli, inv, adapter)
        assert code == 0
        with sqlite3.connect(isolated_env) as db:
            rows = db.execute("SELECT adapter FROM residency WHERE engine = 'h/v' ORDER BY lru_position").fetchall()
        assert len(rows) <= 2
        assert len(e.state.host) <= 2
    assert [r[0] for r in rows] == ["r64", "r8"]
    with sqlite3.connect(isolated_env) as db:
        journal = db.execute("SELECT adapter, engine, action, ok FROM loads ORDER BY id").fetchall()
    assert journal == [
        ("r8", "h/v", "loaded", 1),
        ("r16", "h/v", "loaded", 1),
        ("r64", "h/v", "loaded", 1),
        ("r8", "h/v", "reloaded", 1),
    ]


def test_sglang_pin_limit_prime_and_already_warm(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="sglang", gpu_slots=2, host_slots=4)
    inv = write_inventory(tmp_path, [sglang_entry("s", e.url, slots=2, host=4)], adapter_dirs)
    code, results = warm_json(run_cli, inv, "r8", "--pin")
    assert code == 0 and results[0]["action"] == "loaded" and "r8" in e.state.pinned
    code, results = warm_json(run_cli, inv, "r16", "--pin")
    assert code == 1 and results[0]["action"] == "skipped"
    assert "pin limit reached: SGLang allows 1 pinned" in results[0]["error"]
    assert "r16" not in e.state.registry
    code, results = warm_json(run_cli, inv, "r8")
    assert code == 0 and results[0]["action"] == "already-warm"
    code, results = warm_json(run_cli, inv, "r16", "--prime")
    assert code == 0 and results[0]["action"] == "loaded"
    assert (
        "/v1/completions",
        {"model": "base-model:r16", "prompt": "ping", "max_tokens": 1, "temperature": 0},
    ) in posts(e)
    assert "r16" in e.state.gpu


def test_sglang_pin_of_a_registered_adapter_reloads_it_pinned_on_the_engine(
    tmp_path, run_cli, emulators, adapter_dirs
) -> None:
    """The docs' promise: --pin pins on SGLang in the engine too, not only in lorafleet's book."""
    e = emulators(kind="sglang", gpu_slots=2, host_slots=4)
    inv = write_inventory(tmp_path, [sglang_entry("s", e.url, slots=2, host=4)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8")[0] == 0 and "r8" not in e.state.pinned
    code, results = warm_json(run_cli, inv, "r8", "--pin")
    assert code == 0 and results[0]["action"] == "reloaded"
    assert "r8" in e.state.pinned and "r8" in e.state.registry
    code, results = warm_json(run_cli, inv, "r8", "--pin")  # pinned already: nothing to send
    assert code == 0 and results[0]["action"] == "already-warm"


def test_dry_run_sends_nothing_that_changes_an_engine(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    result = run_cli("warm", "-i", str(inv), "r8", "r16", "--dry-run")
    assert result.exit_code == 0 and "Dry run" in result.stdout and "would-load" in result.stdout
    assert posts(e) == [] and e.state.registry == {}


def test_unknown_adapter_and_wrong_base_model(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(
        tmp_path,
        [vllm_entry("v", e.url)],
        adapter_dirs,
        extra="  - {id: other-r8, base_model: other, path: /x, rank: 8}\n",
    )
    result = run_cli("warm", "-i", str(inv), "r88")
    assert result.exit_code == 2 and "'r88' is not an adapter in the inventory; did you mean 'r8'?" in result.stderr
    result = run_cli("warm", "-i", str(inv), "other-r8", "--engine", "h/v")
    assert result.exit_code == 2 and "h/v serves m, not other-r8's base model other" in result.stderr
    result = run_cli("warm", "-i", str(inv), "r8", "--engine", "h/nope")
    assert result.exit_code == 2 and "'h/nope' is not an engine" in result.stderr
    assert e.state.requests == []


def test_replicas_pick_the_least_loaded(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    busy, idle = emulators(kind="vllm"), emulators(kind="vllm")
    busy.state.registry.update({"x": "/x", "y": "/y"})
    inv = write_inventory(tmp_path, [vllm_entry("busy", busy.url), vllm_entry("idle", idle.url)], adapter_dirs)
    code, results = warm_json(run_cli, inv, "r8", "--replicas", "1")
    assert code == 0 and [r["engine"] for r in results] == ["h/idle"]


def test_replicas_keep_an_adapter_where_it_is_warm_before_the_least_loaded(
    tmp_path, run_cli, emulators, adapter_dirs
) -> None:
    """The placement rule: resident first. r8 warm on the busier engine stays there; no second copy is loaded on
    the idle one."""
    busy, idle = emulators(kind="vllm"), emulators(kind="vllm")
    busy.state.registry.update({"x": "/x", "y": "/y"})
    inv = write_inventory(tmp_path, [vllm_entry("busy", busy.url), vllm_entry("idle", idle.url)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8", "--engine", "h/busy")[0] == 0
    code, results = warm_json(run_cli, inv, "r8", "--replicas", "1")
    assert code == 0 and [r["engine"] for r in results] == ["h/busy"]
    assert "/v1/load_lora_adapter" not in [path for path, _ in posts(idle)]


def test_transient_500_is_retried(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    e.state.faults.append(Fault(status=503, times=1, retry_after=0, path="/v1/load_lora_adapter"))
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    code, results = warm_json(run_cli, inv, "r8")
    assert code == 0 and results[0]["action"] == "loaded"
    assert [p for p, _ in posts(e)].count("/v1/load_lora_adapter") == 2


def test_engine_restart_loses_the_registry_and_warm_loads_again(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8")[0] == 0
    e.state.restart()
    code, results = warm_json(run_cli, inv, "r8")
    assert code == 0 and results[0]["action"] == "loaded"


def test_api_key_from_environment(tmp_path, run_cli, emulators, adapter_dirs, monkeypatch) -> None:
    e = emulators(kind="vllm", api_key="sk-emulated")
    entry = vllm_entry("v", e.url).replace("}", ", api_key_env: EMU_VLLM_KEY}")
    inv = write_inventory(tmp_path, [entry], adapter_dirs)
    monkeypatch.delenv("EMU_VLLM_KEY", raising=False)
    result = run_cli("warm", "-i", str(inv), "r8")
    assert result.exit_code == 2 and "environment variable EMU_VLLM_KEY" in result.stderr
    assert e.state.requests == []
    monkeypatch.setenv("EMU_VLLM_KEY", "sk-emulated")
    result = run_cli("warm", "-i", str(inv), "r8", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "sk-emulated" not in result.stdout + result.stderr


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_emulator_lru_tiers_hold_their_slot_counts(kind: str, tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind=kind, gpu_slots=1, host_slots=2)
    entry = (vllm_entry if kind == "vllm" else sglang_entry)("e", e.url, slots=1, host=2)
    inv = write_inventory(tmp_path, [entry], adapter_dirs)
    for adapter in ("r8", "r16", "r64"):
        assert warm_json(run_cli, inv, adapter, "--prime")[0] == 0
    assert list(e.state.host) == ["r16", "r64"] and list(e.state.gpu) == ["r64"]


def test_sglang_warm_unloads_what_its_byte_budget_displaces(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    """SGLang keeps what it is told to load: lorafleet's lora_budget_mb holds only if the displaced adapter is
    unloaded first (it used to stay registered while the book dropped it: the engine held 4 in a budget of 2)."""
    e = emulators(kind="sglang", gpu_slots=2, host_slots=4)
    entry = sglang_entry("s", e.url, slots=2, host=4).replace("}", ", lora_budget_mb: 0.08}")  # 83,886 bytes
    inv = write_inventory(tmp_path, [entry], adapter_dirs)
    code, results = warm_json(run_cli, inv, "r8", "r16", "r64")  # 8 + 16 + 64 KiB: r8 must go
    assert code == 0 and [r["action"] for r in results] == ["loaded"] * 3
    assert set(e.state.registry) == {"r16", "r64"}
    assert ("/unload_lora_adapter", {"lora_name": "r8"}) in posts(e)
    code, results = warm_json(run_cli, inv, "r8")  # the book, restored, knows r8 is gone: loaded again
    assert code == 0 and results[0]["action"] == "loaded" and set(e.state.registry) == {"r64", "r8"}


def test_sglang_warm_that_cannot_unload_its_victim_does_not_load(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="sglang", gpu_slots=2, host_slots=4)
    entry = sglang_entry("s", e.url, slots=2, host=4).replace("}", ", lora_budget_mb: 0.08}")
    inv = write_inventory(tmp_path, [entry], adapter_dirs)
    assert warm_json(run_cli, inv, "r8", "r16")[0] == 0
    e.state.faults.append(Fault(status=400, times=1, message="nope", path="/unload_lora_adapter"))
    code, results = warm_json(run_cli, inv, "r64")
    assert code == 1 and results[0]["action"] == "failed"
    assert results[0]["error"].startswith("no room made for r64: unloading r8 failed: ")
    assert set(e.state.registry) == {"r8", "r16"}  # over budget never


def test_a_broken_client_fails_its_rows_without_hanging_the_others(tmp_path, emulators, adapter_dirs) -> None:
    from lorafleet.actions.targets import choose_targets
    from lorafleet.actions.warm import WarmOptions, warm
    from lorafleet.engines import make_client
    from lorafleet.inventory import load_inventory
    from lorafleet.inventory.lookup import resolve_adapters

    good = emulators(kind="vllm")
    inv = load_inventory(
        write_inventory(tmp_path, [vllm_entry("good", good.url), vllm_entry("bad", good.url)], adapter_dirs)
    )

    def factory(engine):  # type: ignore[no-untyped-def]
        if engine.name == "bad":
            raise RuntimeError("driver exploded")
        return make_client(engine)

    pairs = choose_targets(inv, resolve_adapters(inv, ["r8", "r16"]))
    results = {(r.adapter, r.engine): r for r in warm(inv, pairs, WarmOptions(), client_factory=factory)}
    assert results[("r8", "h/good")].action == results[("r16", "h/good")].action == "loaded"
    assert results[("r8", "h/bad")].action == results[("r16", "h/bad")].action == "failed"
    assert not any(r.ok or r.primed for key, r in results.items() if key[1] == "h/bad")
    assert pings(good) == 0  # no --prime: none sent
    assert "RuntimeError: driver exploded" in (results[("r8", "h/bad")].error or "")


def test_dry_run_says_what_it_would_do_and_prime_shows(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    code, results = warm_json(run_cli, inv, "r8", "--dry-run")
    assert code == 0 and [r["action"] for r in results] == ["would-load"] and e.state.registry == {}
    code, results = warm_json(run_cli, inv, "r8", "--prime")
    assert code == 0 and (results[0]["action"], results[0]["primed"]) == ("loaded", True)
    code, results = warm_json(run_cli, inv, "r8", "--dry-run")
    assert [r["action"] for r in results] == ["would-re-warm"]
    table = run_cli("warm", "-i", str(inv), "r16", "--prime")
    assert "loaded, primed" in table.stdout


def test_a_plain_warm_sends_no_1_token_request_and_its_row_times_the_load(
    tmp_path, run_cli, emulators, adapter_dirs
) -> None:
    """Without --prime a first load is only the load (primed false), on vLLM and SGLang alike; a failed row is
    neither ok nor primed; the row's ms is the call's wall time."""
    v = emulators(kind="vllm", load_s_per_mb=2.0)
    s = emulators(kind="sglang")
    inv = write_inventory(tmp_path, [vllm_entry("v", v.url), sglang_entry("s", s.url)], adapter_dirs)
    code, results = warm_json(run_cli, inv, "r8", "r64")
    assert code == 0 and {(r["action"], r["ok"], r["primed"]) for r in results} == {("loaded", True, False)}
    assert pings(v, s) == 0
    wanted_ms = 1000.0 * adapter_mb(str(adapter_dirs[64])) * 2.0  # the emulator's load time for it
    (r64,) = [r for r in results if (r["adapter"], r["engine"]) == ("r64", "h/v")]
    assert wanted_ms <= r64["ms"] < wanted_ms + 2000.0
    v.state.faults.append(Fault(status=400, times=1, message="nope", path="/v1/load_lora_adapter"))
    code, results = warm_json(run_cli, inv, "r16", "--engine", "h/v", "--prime")
    assert code == 1 and (results[0]["action"], results[0]["ok"], results[0]["primed"]) == ("failed", False, False)


def test_a_dry_run_on_sglang_says_already_warm_unless_primed(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    """Registered on SGLang means in host memory: nothing to do, unless --prime would take a GPU slot."""
    s = emulators(kind="sglang")
    inv = write_inventory(tmp_path, [sglang_entry("s", s.url)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8")[0] == 0
    assert [r["action"] for r in warm_json(run_cli, inv, "r8", "--dry-run")[1]] == ["already-warm"]
    assert [r["action"] for r in warm_json(run_cli, inv, "r8", "--dry-run", "--prime")[1]] == ["would-re-warm"]


def test_primed_means_a_1_token_request_was_sent_even_on_a_vllm_rewarm(
    tmp_path, run_cli, emulators, adapter_dirs
) -> None:
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    warm_json(run_cli, inv, "r8")
    before = pings(e)
    code, results = warm_json(run_cli, inv, "r8", "--prime")  # registered: the re-warm is the 1-token request
    assert code == 0 and (results[0]["action"], results[0]["primed"]) == ("reloaded", True)
    assert pings(e) == before + 1
    code, results = warm_json(run_cli, inv, "r8")  # without --prime alike: a re-warm on vLLM is that request
    assert (results[0]["primed"], pings(e)) == (True, before + 2)


def test_warm_plan_warms_the_placements_and_pins_what_the_plan_pins(tmp_path, run_cli, emulators, adapter_dirs) -> None:
    s = emulators(kind="sglang", gpu_slots=2, host_slots=4)
    inv = write_inventory(tmp_path, [sglang_entry("s", s.url, slots=2, host=4)], adapter_dirs)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "version: 1\nengines:\n  h/s:\n  - {adapter: r8, pinned: true}\n  - {adapter: r16, pinned: false}\n"
    )
    code, results = warm_json(run_cli, inv, "--plan", str(plan))
    assert code == 0, results
    assert [(r["adapter"], r["action"]) for r in results] == [("r8", "loaded"), ("r16", "loaded")]
    assert s.state.pinned == {"r8"}
    code, results = warm_json(run_cli, inv, "r16", "--plan", str(plan))
    assert [r["adapter"] for r in results] == ["r16"]
    assert run_cli("warm", "-i", str(inv)).exit_code == 2  # neither adapters nor a plan


@pytest.mark.parametrize("width", [80, 120])
def test_the_warm_and_unload_tables_fit_with_a_legend_and_wide_shows_every_column(
    tmp_path, run_cli, emulators, adapter_dirs, width: int
) -> None:
    from tests.cli.test_tables_fit import assert_fits

    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("a-long-engine-name-0", e.url)], adapter_dirs)
    env = {"COLUMNS": str(width)}
    warmed = run_cli("warm", "-i", str(inv), "r8", "missing", env=env)  # 'missing' has no files: a long answer
    assert warmed.exit_code == 1
    assert_fits(warmed.stdout, width)
    words = " ".join(warmed.stdout.split())
    assert "h/a-long-engine-name-0" in warmed.stdout and "primed: a 1-token request was sent" in words
    assert "--wide shows every column" in words
    unloaded = run_cli("unload", "-i", str(inv), "r8", env=env)
    assert unloaded.exit_code == 0 and "--wide shows every column" in " ".join(unloaded.stdout.split())
    assert_fits(unloaded.stdout, width)
    wide = run_cli("warm", "-i", str(inv), "r8", "--wide", "--dry-run", env={"COLUMNS": "200"})
    assert e.url in wide.stdout and " kind " in wide.stdout
