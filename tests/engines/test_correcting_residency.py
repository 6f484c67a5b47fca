"""Residency an admin can correct: the book follows each engine's registry, pins can be released, adapters
unloaded — each step journaled."""

from __future__ import annotations

import json
from pathlib import Path

from lorafleet.store.db import open_store
from tests.engines.test_warm import sglang_entry, vllm_entry, warm_json, write_inventory


def test_a_restart_empties_the_book_so_a_new_pin_is_not_refused(
    tmp_path: Path, run_cli, emulators, adapter_dirs, isolated_env: Path
) -> None:
    e = emulators(kind="sglang", gpu_slots=2, host_slots=4)
    inv = write_inventory(tmp_path, [sglang_entry("s", e.url, slots=2, host=4)], adapter_dirs)
    code, results = warm_json(run_cli, inv, "r8", "--pin")
    assert code == 0 and results[0]["action"] == "loaded" and e.state.pinned == {"r8"}
    e.state.restart()  # the engine holds nothing now; the book still says r8 is pinned
    code, results = warm_json(run_cli, inv, "r16", "--pin")
    assert code == 0, results
    assert results[0]["action"] == "loaded" and e.state.pinned == {"r16"}
    with open_store(isolated_env) as store:
        rows = {r.adapter: r.pinned for r in store.residency("h/s")}
    assert rows == {"r16": True}  # r8 forgotten by delta, r16 pinned


def test_unpin_releases_a_pin_on_sglang_by_reloading_unpinned(
    tmp_path: Path, run_cli, emulators, adapter_dirs, isolated_env: Path
) -> None:
    e = emulators(kind="sglang", gpu_slots=2, host_slots=4)
    inv = write_inventory(tmp_path, [sglang_entry("s", e.url, slots=2, host=4)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8", "--pin")[0] == 0
    calls = len(e.state.requests)
    code, results = warm_json(run_cli, inv, "r8", "--unpin", "--dry-run")  # says what it would do, does nothing
    assert code == 0 and results[0]["action"] == "would-unpin" and e.state.pinned == {"r8"}
    assert [path for _, path, _ in e.state.requests[calls:]] == ["/v1/models"]  # the registry read alone
    code, results = warm_json(run_cli, inv, "r8", "--unpin")
    assert code == 0 and results[0]["action"] == "unpinned"
    assert e.state.pinned == set() and "r8" in e.state.registry
    code, results = warm_json(run_cli, inv, "r16", "--pin")  # the one pin allowed is free again
    assert code == 0 and e.state.pinned == {"r16"}
    code, results = warm_json(run_cli, inv, "r64", "--unpin")
    assert code == 1 and results[0]["action"] == "skipped" and "not pinned" in results[0]["error"]
    assert run_cli("warm", "r8", "--pin", "--unpin", "-i", str(inv)).exit_code == 2


def test_unload_removes_where_registered_and_the_book_forgets(
    tmp_path: Path, run_cli, emulators, adapter_dirs, isolated_env: Path
) -> None:
    v = emulators(kind="vllm")
    s = emulators(kind="sglang")
    inv = write_inventory(tmp_path, [vllm_entry("v", v.url), sglang_entry("s", s.url)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8", "--engine", "h/v")[0] == 0
    result = run_cli("unload", "r8", "-i", str(inv), "--json")
    assert result.exit_code == 0, result.stderr
    rows = {r["engine"]: r for r in json.loads(result.stdout)["results"]}
    assert rows["h/v"]["action"] == "unloaded" and "vLLM frees the slot only by its own LRU" in rows["h/v"]["error"]
    assert rows["h/s"]["action"] == "skipped" and rows["h/s"]["ok"]  # never registered there: nothing sent
    assert "r8" not in v.state.registry
    with open_store(isolated_env) as store:
        assert store.residency("h/v") == []
        assert ("unload", "h/v", "unloaded") in [(r.source, r.engine, r.action) for r in store.loads()]
    dry = run_cli("unload", "r16", "-i", str(inv), "--dry-run")
    rows = [line for line in dry.stdout.splitlines() if "│" in line]
    assert dry.exit_code == 0 and not any("would-unload" in row for row in rows)  # r16 is registered nowhere


def test_unpin_on_vllm_releases_the_books_pin_without_calling_the_engine(
    tmp_path: Path, run_cli, emulators, adapter_dirs, isolated_env: Path
) -> None:
    """vLLM holds no pins of its own: an unpin is the book's alone (no unload, no reload); an adapter registered
    there but never pinned is skipped, not "unpinned"."""
    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8", "--pin")[0] == 0
    assert warm_json(run_cli, inv, "r16")[0] == 0
    calls = len(e.state.requests)
    code, results = warm_json(run_cli, inv, "r8", "--unpin")
    assert code == 0 and results[0]["action"] == "unpinned"
    code, results = warm_json(run_cli, inv, "r16", "--unpin")
    assert code == 1 and results[0]["action"] == "skipped" and "r16 is not pinned on h/v" in results[0]["error"]
    assert [path for _, path, _ in e.state.requests[calls:]] == ["/v1/models", "/v1/models"]  # registries only
    with open_store(isolated_env) as store:
        assert {r.adapter: r.pinned for r in store.residency("h/v")} == {"r8": False, "r16": False}


def test_unload_dry_run_and_a_failed_unload_say_so_in_their_rows(
    tmp_path: Path, run_cli, emulators, adapter_dirs
) -> None:
    from tests.engine_emulator import Fault

    e = emulators(kind="vllm")
    inv = write_inventory(tmp_path, [vllm_entry("v", e.url)], adapter_dirs)
    assert warm_json(run_cli, inv, "r8")[0] == 0
    result = run_cli("unload", "r8", "-i", str(inv), "--dry-run", "--json")
    (row,) = json.loads(result.stdout)["results"]
    assert result.exit_code == 0 and (row["action"], row["ok"]) == ("would-unload", True)
    assert "r8" in e.state.registry
    e.state.faults.append(Fault(status=400, times=1, message="nope", path="/v1/unload_lora_adapter"))
    result = run_cli("unload", "r8", "-i", str(inv), "--json")
    (row,) = json.loads(result.stdout)["results"]
    assert result.exit_code == 1 and (row["action"], row["ok"]) == ("failed", False) and "nope" in row["error"]
    assert "r8" in e.state.registry
