"""`lorafleet plan` through the CLI: the plan, its file, diffs, and the commands that start from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from lorafleet.inventory import load_inventory
from lorafleet.plan.planfile import read_plan
from tests.conftest import INVENTORIES

DEMO = str(INVENTORIES / "demo.yaml")
LOG = str(INVENTORIES / "demo-access.jsonl")


def test_plan_json_writes_a_file_that_reads_back(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "plan.yaml"
    result = run_cli("plan", "-i", DEMO, "--log", LOG, "--out", str(out), "--json", "--recommend-flags")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    placed = {(e["engine"], a) for e in data["engines"] for a in e["adapters"]}
    assert placed and all(e["slots_used"] <= e["slots"] for e in data["engines"])
    assert 0 < data["expected_hit_ratio"] <= 1 and data["flags"][0]["flags"]
    back = read_plan(out, load_inventory(DEMO))
    assert {(p.engine, p.adapter) for p in back.placements} == placed
    again = run_cli("plan", "-i", DEMO, "--log", LOG, "--out", str(out))
    assert again.exit_code == 2 and "refusing to overwrite" in again.stderr


def test_diff_shows_loads_and_evictions(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "old.yaml"
    assert run_cli("plan", "-i", DEMO, "--log", LOG, "--out", str(out)).exit_code == 0
    text = out.read_text()
    first = next(line for line in text.splitlines() if line.startswith("  - adapter:"))
    out.write_text(text.replace(first, "  - adapter: medical-r8", 1))
    result = run_cli("plan", "-i", DEMO, "--log", LOG, "--diff", str(out), "--json")
    changes = json.loads(result.stdout)["changes"]
    assert {"engine": "localhost/vllm-0", "adapter": "medical-r8"} in changes["evictions"]
    assert len(changes["loads"]) == 1


def test_malformed_or_foreign_plans_are_refused_with_file_and_line(run_cli, tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    assert run_cli("plan", "-i", DEMO, "--log", LOG, "--out", str(good)).exit_code == 0
    text = good.read_text()
    cases = {
        "version": (text.replace("version: 1", "version: 7"), "unknown plan version 7"),
        "engine": (text.replace("localhost/vllm-0:", "elsewhere/vllm-9:"), "'elsewhere/vllm-9' is not an engine"),
        "adapter": (text.replace("  - adapter: ", "  - adapter: ghost-", 1), "is not an adapter of this inventory"),
        "fleet": (text.replace("fleet: demo", "fleet: prod"), "written for fleet 'prod'"),
        "yaml": (text + "  : [\n", "invalid YAML"),
        "ratio": (re.sub(r"expected_hit_ratio: .*", "expected_hit_ratio: abc", text), "expected a finite number"),
        "unplaced": (re.sub(r"(?ms)^unplaced:.*", "unplaced: 5\n", text), "unplaced: expected a list of adapters"),
        "pinned": (text.replace("pinned: false", "pinned: 'false'", 1), "pinned: expected true or false"),
    }
    device = run_cli("replay", LOG, "-i", DEMO, "--plan", "/dev/zero")  # read until memory ran out
    assert device.exit_code == 2 and device.stderr.startswith("error: /dev/zero: is a device, expected a YAML file")
    for name, (body, words) in cases.items():
        bad = tmp_path / f"{name}.yaml"
        bad.write_text(body)
        result = run_cli("replay", LOG, "-i", DEMO, "--plan", str(bad))
        assert result.exit_code == 2, name
        assert words in result.stderr and f"{bad}:" in result.stderr, (name, result.stderr)


def test_a_plan_placing_an_adapter_its_engine_can_no_longer_serve_is_refused_with_file_and_line(
    run_cli, tmp_path: Path
) -> None:
    """A plan written before an engine's max_lora_rank (or base model) changed: `warm --plan` would load what
    `warm --engine` refuses."""
    plan = tmp_path / "plan.yaml"
    assert run_cli("plan", "-i", DEMO, "--log", LOG, "--out", str(plan)).exit_code == 0
    assert "adapter: code-r64" in plan.read_text().split("localhost/sglang-0:")[0]  # planned on vllm-0
    inv = tmp_path / "inv.yaml"
    inv.write_text((INVENTORIES / "demo.yaml").read_text().replace("max_lora_rank: 128", "max_lora_rank: 16", 1))
    for command in (("replay", LOG, "--plan", str(plan)), ("warm", "--plan", str(plan), "--dry-run")):
        result = run_cli(*command, "-i", str(inv))
        assert result.exit_code == 2, result.output
        assert f"{plan}:" in result.stderr and "code-r64 has rank 64, above localhost/vllm-0's max_lora_rank 16" in (
            result.stderr
        )


def test_nothing_placeable_lists_every_adapter_and_exits_1(run_cli, tmp_path: Path) -> None:
    text = (
        (INVENTORIES / "demo.yaml")
        .read_text()
        .replace("base_model: llama3-8b\n        max_loras", "base_model: other\n        max_loras")
    )
    text = text.replace(
        "base_models:\n",
        "base_models:\n  other: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n",
        1,
    )
    text = text.replace(
        "base_model: llama3-8b\n        max_loras_per_batch", "base_model: other\n        max_loras_per_batch"
    )
    inv = tmp_path / "inv.yaml"
    inv.write_text(text)
    result = run_cli("plan", "-i", str(inv), "--log", LOG, "--json")
    assert result.exit_code == 1, result.stderr
    data = json.loads(result.stdout)
    assert all(not e["adapters"] for e in data["engines"])
    assert {u["adapter"] for u in data["unplaced"]} == set(load_inventory(inv).adapters)
    assert all("no engine serves llama3-8b" in u["reason"] for u in data["unplaced"])


def test_replay_and_sizing_start_from_the_plan(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "plan.yaml"
    assert run_cli("plan", "-i", DEMO, "--log", LOG, "--out", str(out)).exit_code == 0
    result = run_cli("replay", LOG, "-i", DEMO, "--plan", str(out), "--policy", "lru,lorafleet", "--json")
    assert result.exit_code == 0, result.stderr
    sized = json.loads(run_cli("plan", "-i", DEMO, "--log", LOG, "--target-hit-ratio", "0.9", "--json").stdout)[
        "sizing"
    ]
    ratios = [p["hit_ratio"] for p in sized["points"]]
    assert ratios == sorted(ratios) and sized["recommended_slots"] in [p["slots"] for p in sized["points"]]


def test_the_inventorys_gateway_log_is_found_from_its_folder_whatever_the_working_directory(
    run_cli, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not the inventory's folder
    result = run_cli("plan", "-i", DEMO, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["expected_hit_ratio"] > 0


def test_a_log_without_adapter_requests_is_refused_with_what_its_lines_were_read_as(run_cli, tmp_path: Path) -> None:
    nginx = tmp_path / "nginx.log"
    nginx.write_text('127.0.0.1 - - [02/Nov/2026:09:00:00 +0000] "POST /v1/completions HTTP/1.1" 200 12\n')
    result = run_cli("plan", "-i", DEMO, "--log", str(nginx))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no adapter requests in") and "read as JSON lines" in result.stderr


def test_the_plans_title_says_how_much_of_the_window_the_logs_cover(run_cli) -> None:
    whole = run_cli("plan", "-i", DEMO, "--log", LOG, env={"COLUMNS": "120"})
    assert "Plan over 2,000 requests in 46m30s of the logs (window 1d)" in whole.stdout
    short = run_cli("plan", "-i", DEMO, "--log", LOG, "--window", "10m", env={"COLUMNS": "120"})
    assert "(window 10m)" in short.stdout and "0.166667" not in short.stdout
    spans = run_cli("plan", "-i", DEMO, "--log", LOG, "--window", "1h30m", "--json")
    assert spans.exit_code == 0


def test_the_flags_give_the_slots_the_sizing_recommends(run_cli) -> None:
    args = ("plan", "-i", DEMO, "--log", LOG, "--recommend-flags", "--target-hit-ratio", "0.9")
    data = json.loads(run_cli(*args, "--json").stdout)
    recommended = data["sizing"]["recommended_slots"]
    assert recommended == data["flags_slots"] == 4
    host_flags = [f["flags"].get("--max-cpu-loras", f["flags"].get("--max-loaded-loras")) for f in data["flags"]]
    assert host_flags == [recommended, recommended]
    text = run_cli(*args, env={"COLUMNS": "120"}).stdout
    assert "Launch flags for the recommended 4 slots per engine" in text and "? when not given" in text
    alone = json.loads(run_cli("plan", "-i", DEMO, "--log", LOG, "--recommend-flags", "--json").stdout)
    assert alone["flags_slots"] is None and alone["flags"][0]["flags"]["--max-cpu-loras"] == 2  # the plan as it is


def test_tenant_names_from_the_log_are_shown_as_text(run_cli, tmp_path: Path) -> None:
    """A tenant is whatever the log says: rich markup in it is neither applied nor refused (a closing tag once
    made `plan` an internal error), and a control or bidirectional character never reaches the terminal."""
    rows = [json.loads(line) for line in Path(LOG).read_text().splitlines()[:200]]
    for i, row in enumerate(rows):
        row["tenant_id"] = ("[/bold]", "\x1b[31mred\u202e", "[bold]x")[i % 3]
    log = tmp_path / "hostile.jsonl"
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = run_cli("plan", "-i", DEMO, "--log", str(log), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("expected hit ratio per tenant")]
    assert "[/bold] " in line and "[31mred " in line and "[bold]x " in line
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout


def test_the_sizing_chart_marks_the_recommended_count_and_says_when_none_reaches_the_target(run_cli) -> None:
    """One bar per slot count, 40 characters at 100%; the mark on the fewest slots that reach the target alone;
    a target no count reaches (the 4-slot replay is 99.95%: the first requests are cold) said in a line."""
    args = ("plan", "-i", DEMO, "--log", LOG, "--target-hit-ratio")
    text = run_cli(*args, "0.9", env={"COLUMNS": "120"}).stdout
    bars = [line for line in text.splitlines() if " slots " in line and "█" in line]
    assert [line.split()[0] for line in bars] == ["1", "2", "4"]
    assert [line.count("█") for line in bars] == [16, 31, 40]  # 40.5%, 78.6%, 99.95% of 40
    assert [line.endswith("← target") for line in bars] == [False, False, True]
    assert "recommended: 4 slots per engine (max_cpu_loras / max_loaded_loras = 4)" in text
    none = run_cli(*args, "1", env={"COLUMNS": "120"}).stdout
    assert "← target" not in none and "no slot count up to 4 reaches 100%" in none


def test_the_tables_show_each_adapters_copies_and_at_most_three_adapters_an_engine_unless_wide(
    run_cli, tmp_path: Path
) -> None:
    data = json.loads(run_cli("plan", "-i", DEMO, "--log", LOG, "--json").stdout)
    copies: dict[str, int] = {}
    for engine in data["engines"]:
        for adapter in engine["adapters"]:
            copies[adapter] = copies.get(adapter, 0) + 1
    text = run_cli("plan", "-i", DEMO, "--log", LOG, env={"COLUMNS": "120"}).stdout
    shown = {
        cells[0]: int(cells[3])
        for line in text.splitlines()
        if len(cells := [c.strip() for c in line.split("│")]) == 4 and cells[3].isdigit()
    }
    assert shown == {a: copies.get(a, 0) for a in shown} and len(shown) == 6 and 0 in shown.values()
    # An engine holding four: three named and "+1", all four with --wide.
    (tmp_path / "demo.yaml").write_text(Path(DEMO).read_text().replace("max_cpu_loras: 2", "max_cpu_loras: 4"))
    args = ("plan", "-i", str(tmp_path / "demo.yaml"), "--log", LOG)
    held = json.loads(run_cli(*args, "--json").stdout)["engines"][0]
    assert held["engine"] == "localhost/vllm-0" and len(held["adapters"]) == 4
    row = next(line for line in run_cli(*args, env={"COLUMNS": "200"}).stdout.splitlines() if "vllm-0" in line)
    assert row.rstrip().endswith("+1") and row.count(",") == 2
    wide = run_cli(*args, "--wide", env={"COLUMNS": "200"})
    row = next(line for line in wide.stdout.splitlines() if line.startswith("localhost/vllm-0"))
    assert row.count(",") == 3 and "+" not in row.split("│")[-1]


def test_apply_warms_the_plans_placements_and_with_json_prints_one_document(tmp_path: Path) -> None:
    """`plan --apply` warms what the plan places, as `warm` does, against the emulated engines of the tour; with
    --json the plan and what warming it did are one JSON document (they were two, back to back: no JSON reader
    took them)."""
    import os
    import shutil
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "LORAFLEET_STATE": str(tmp_path / "state.db")}
    inventory = tmp_path / "demo-live.yaml"
    shutil.copy(LOG, tmp_path / "demo-access.jsonl")
    emulator = subprocess.Popen(
        [sys.executable, "-m", "tests.engine_emulator", "--port", "0", "--write-inventory", str(inventory)],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert emulator.stdout is not None
        assert [emulator.stdout.readline() for _ in range(3)][2].startswith("wrote")
        command = [sys.executable, "-m", "lorafleet", "plan", "--apply", "-i", str(inventory)]
        done = subprocess.run([*command, "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        placed = {(a, e["engine"]) for e in data["engines"] for a in e["adapters"]}
        applied = data["applied"]["results"]
        assert placed and {(r["adapter"], r["engine"]) for r in applied} == placed
        assert all(r["ok"] and r["action"] in ("loaded", "reloaded", "already-warm") for r in applied)
        table = subprocess.run(command, env={**env, "COLUMNS": "120"}, capture_output=True, text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        assert "expected hit ratio" in table.stdout and "already-warm" in table.stdout  # the plan, then the warm
    finally:
        emulator.terminate()
        emulator.wait(timeout=10)
