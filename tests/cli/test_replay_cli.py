"""`lorafleet replay` and `lorafleet trace synth` through the CLI."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from tests.conftest import INVENTORIES

DEMO = str(INVENTORIES / "demo.yaml")
DEMO_LOG = str(INVENTORIES / "demo-access.jsonl")


def test_replay_tour_prints_the_policy_table(run_cli) -> None:
    result = run_cli("replay", DEMO_LOG, "-i", DEMO)
    assert result.exit_code == 0, result.stderr
    for words in ("Replay of 2,000 adapter requests", "lru", "lfu", "lorafleet", "belady", "oracle", "hit ratio"):
        assert words in result.stdout


def test_replay_json_shape(run_cli) -> None:
    result = run_cli("replay", DEMO_LOG, "-i", DEMO, "--json", "--policy", "lru,oracle")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert [p["policy"] for p in data["policies"]] == ["lru", "oracle"]
    keys = {
        "policy",
        "requests",
        "hits",
        "late",
        "misses",
        "hit_ratio",
        "cold_ms_total",
        "cold_ms_p99",
        "loads",
        "prefetch_loads",
        "wasted_prefetches",
        "budget_violations",
    }
    for row in data["policies"]:
        assert keys <= set(row)
        assert row["requests"] == 2000 and row["budget_violations"] == 0
        assert row["hits"] + row["late"] + row["misses"] == row["requests"]
    assert data["policies"][1]["hit_ratio"] >= data["policies"][0]["hit_ratio"]


def test_replay_counts_junk_and_unknown_names(run_cli, tmp_path: Path) -> None:
    log = tmp_path / "access.jsonl"
    log.write_text(
        '{"ts": 1, "model": "code-r64", "tenant_id": "globex"}\n'
        "garbage\n"
        '{"ts": 2, "model": "../../../etc/shadow"}\n'
        '{"ts": 3, "model": "meta-llama/Meta-Llama-3-8B-Instruct"}\n'
    )
    result = run_cli("replay", str(log), "-i", DEMO, "--json", "--policy", "lru")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["log"] == {
        "lines": 4,
        "adapter_requests": 1,
        "base_requests": 1,
        "unknown_requests": 1,
        "timed_requests": 0,
        "unplaced_requests": 1,
        "bad_lines": 1,
        "bad_reasons": {"not JSON": 1},
    }
    assert data["policies"][0]["requests"] == 1


def test_replay_errors_are_one_line(run_cli, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("nope\n")
    result = run_cli("replay", str(empty), "-i", DEMO)
    assert result.exit_code == 2 and result.stderr.startswith("error: no adapter requests in")
    result = run_cli("replay", DEMO_LOG, "-i", DEMO, "--policy", "lru,mru")
    assert result.exit_code == 2 and "Invalid value for '--policy': unknown policy 'mru'" in result.stderr
    result = run_cli("replay", DEMO_LOG, "-i", DEMO, "--policy", " , ")
    assert result.exit_code == 2 and "Invalid value for '--policy': no policy named (known: lru, " in result.stderr
    result = run_cli("replay", str(tmp_path / "missing.jsonl"), "-i", DEMO)
    assert result.exit_code == 2 and "does not exist" in result.stderr


def test_trace_synth_writes_a_log_and_an_inventory_that_replay(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "wf"
    result = run_cli("trace", "synth", "--shape", "workflows", "--requests", "300", "--seed", "3", "--out", str(out))
    assert result.exit_code == 0, result.stderr
    assert run_cli("inventory", "check", "-i", str(out / "inventory.yaml")).exit_code == 0
    lines = (out / "access.jsonl").read_text().splitlines()
    assert len(lines) == 300
    assert set(json.loads(lines[0])) == {"ts", "tenant_id", "model", "upstream", "status", "ttft_ms"}
    again = tmp_path / "again"
    run_cli("trace", "synth", "--shape", "workflows", "--requests", "300", "--seed", "3", "--out", str(again))
    assert (again / "access.jsonl").read_bytes() == (out / "access.jsonl").read_bytes()
    replayed = run_cli("replay", str(out / "access.jsonl"), "-i", str(out / "inventory.yaml"), "--json")
    assert replayed.exit_code == 0 and len(json.loads(replayed.stdout)["policies"]) == 8  # every policy by default


def test_bundled_demo_log_is_what_synth_writes(run_cli, tmp_path: Path) -> None:
    result = run_cli(
        "trace", "synth", "-i", DEMO, "--for-inventory", "--requests", "2000", "--seed", "7", "--out", str(tmp_path)
    )
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "access.jsonl").read_bytes() == Path(DEMO_LOG).read_bytes()


def test_the_replay_command_synth_prints_for_an_inventory_works(run_cli, tmp_path: Path) -> None:
    inv = str(INVENTORIES / "reference.yaml")  # custom field names and an nginx log: the synthetic log has neither
    result = run_cli("trace", "synth", "--for-inventory", "-i", inv, "--out", str(tmp_path), "--requests", "300")
    assert result.exit_code == 0, result.stderr
    command = next(line for line in result.stdout.splitlines() if line.startswith("replay it: lorafleet "))
    args = command.removeprefix("replay it: lorafleet ").split()
    replayed = run_cli(*args, "--json", "--policy", "lru")
    assert replayed.exit_code == 0, replayed.stderr
    data = json.loads(replayed.stdout)
    assert data["log"]["bad_lines"] == 0 and data["policies"][0]["requests"] > 0


def workflow_log(path: Path, durations: bool) -> None:
    """A tenant's four steps back to back (each sent as the previous one ends), as an access log writes them."""
    lines, start = [], 1_000_000.0
    for _ in range(30):
        for step in range(4):
            end = start + 1.0
            record: dict[str, object] = {"ts": end, "model": f"a{step}", "tenant_id": "t"}
            if durations:
                record["duration_s"] = 1.0
            lines.append(json.dumps(record))
            start = end
    path.write_text("\n".join(lines) + "\n")


def test_replay_shows_what_start_hints_would_buy(run_cli, tmp_path: Path) -> None:
    from tests.policy.builders import make_inventory

    # Three slots: the engine alone misses every step of the four-step chain, and a hinted prefetch of the next
    # step finds room beside the step running and the one whose line is not read yet.
    make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    log = tmp_path / "access.jsonl"
    workflow_log(log, durations=True)
    args = ("replay", str(log), "-i", str(tmp_path / "inv.yaml"), "--format", "jsonl", "--policy", "lru,markov")
    result = run_cli(*args, "--visibility", "both", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    rows = [(p["policy"], p["visibility"]) for p in data["policies"]]
    assert rows == [("lru", "log"), ("lru", "hints"), ("markov", "log"), ("markov", "hints")]
    ratio = {(p["policy"], p["visibility"]): p["hit_ratio"] for p in data["policies"]}
    assert ratio[("markov", "hints")] > ratio[("markov", "log")] + 0.5  # a generation of lead time
    assert data["log"]["timed_requests"] == 120
    table = run_cli(*args[:-1], "lru,lorafleet", "--visibility", "both")
    text = " ".join(table.stdout.split())
    alone = re.search(r"turn 0% into (\d+)% of requests warm with log lines only", text)
    assert "lorafleet (hints)" in text and alone is not None and int(alone.group(1)) <= 5, text  # each line too late
    warm = re.search(r"turn 0% into (\d+)% of requests warm with start hints", text)
    assert warm is not None and int(warm.group(1)) >= 80, text


def test_replay_of_a_log_with_durations_finds_timers_by_their_requests_arrivals(run_cli, tmp_path: Path) -> None:
    """Two timers (a0 every 20 s, a1 9 s after it), each request lasting 0.5-9 s, and four stray requests between
    ticks over ten other adapters, on three slots: the engine's own LRU has let each timer go before its next tick.
    Each line is written at its request's end, so the lines of a timer are 11-29 s apart — no rhythm; its arrivals
    are 20 s apart, and lorafleet brings it back before its tick. Measured as gaps between lines, lorafleet gained
    8 points over lru here; between arrivals, 29."""
    from tests.policy.builders import make_inventory

    make_inventory(tmp_path, adapters=12, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    rng, records = random.Random(1), []
    for k in range(60):
        tick = 1_000_000.0 + 20.0 * k
        for adapter, tenant, start in (("a0", "cron", tick), ("a1", "cron2", tick + 9.0)):
            records.append((start, rng.uniform(0.5, 9.0), adapter, tenant))
        for j in range(4):
            start = tick + 2.0 + 4.0 * j + rng.uniform(0.0, 1.0)
            records.append((start, rng.uniform(0.2, 1.0), f"a{rng.randint(2, 11)}", f"u{j}"))
    lines = [
        json.dumps({"ts": start + took, "model": adapter, "tenant_id": tenant, "duration_s": took})
        for start, took, adapter, tenant in sorted(records, key=lambda r: r[0] + r[1])
    ]
    log = tmp_path / "access.jsonl"
    log.write_text("\n".join(lines) + "\n")
    args = ("replay", str(log), "-i", str(tmp_path / "inv.yaml"), "--format", "jsonl", "--policy", "lru,lorafleet")
    result = run_cli(*args, "--json")
    assert result.exit_code == 0, result.stderr
    ratio = {p["policy"]: p["hit_ratio"] for p in json.loads(result.stdout)["policies"]}
    assert ratio["lorafleet"] > ratio["lru"] + 0.25, ratio


def test_replay_says_when_the_log_has_no_durations(run_cli, tmp_path: Path) -> None:
    from tests.policy.builders import make_inventory

    make_inventory(tmp_path, adapters=4)
    log = tmp_path / "access.jsonl"
    workflow_log(log, durations=False)
    result = run_cli("replay", str(log), "-i", str(tmp_path / "inv.yaml"), "--format", "jsonl", "--policy", "lru")
    assert result.exit_code == 0, result.stderr
    assert "no request durations in the log" in " ".join(result.stdout.split())


def test_replay_says_when_saturated_loaders_made_its_figures_optimistic(run_cli, tmp_path: Path) -> None:
    """Misses that find every slot held by loads in flight are charged a cold load without queueing (a lane the
    engines do not have): replay says so rather than presenting those figures as the engines'."""
    from tests.policy.builders import make_inventory

    make_inventory(tmp_path, adapters=4, engines=[{"kind": "sglang", "max_loras_per_batch": 1, "max_loaded_loras": 2}])
    log = tmp_path / "access.jsonl"
    log.write_text("".join(json.dumps({"ts": 1_000_000 + i / 1000, "model": f"a{i % 4}"}) + "\n" for i in range(8)))
    args = ("replay", str(log), "-i", str(tmp_path / "inv.yaml"), "--format", "jsonl", "--policy", "lru")
    data = json.loads(run_cli(*args, "--json").stdout)
    assert data["policies"][0]["bypassed"] > 0
    table = run_cli(*args)
    assert table.exit_code == 0, table.stderr
    assert "loaders saturated" in " ".join(table.stdout.split())
    calm = tmp_path / "calm.jsonl"
    calm.write_text("".join(json.dumps({"ts": 1_000_000 + i, "model": f"a{i % 4}"}) + "\n" for i in range(8)))
    quiet = run_cli("replay", str(calm), *args[2:], "--json")
    assert json.loads(quiet.stdout)["policies"][0]["bypassed"] == 0
    assert "loaders saturated" not in run_cli("replay", str(calm), *args[2:]).stdout
    timed = tmp_path / "timed.jsonl"  # with durations, the stand-in engines queue every miss, in either visibility
    timed.write_text(
        "".join(
            json.dumps({"ts": 1_000_001 + i / 1000, "duration_s": 1.0, "model": f"a{i % 4}"}) + "\n" for i in range(8)
        )
    )
    both = json.loads(run_cli("replay", str(timed), *args[2:], "--visibility", "both", "--json").stdout)
    assert {p["visibility"]: p["bypassed"] for p in both["policies"]} == {"log": 0, "hints": 0}
    assert "loaders saturated" not in run_cli("replay", str(timed), *args[2:], "--visibility", "both").stdout


def test_a_gzip_compressed_log_replays_as_its_text_and_a_broken_one_is_one_line(run_cli, tmp_path: Path) -> None:
    """logrotate's `compress` leaves last week's logs as `.gz`: read through gzip, whatever the name."""
    import gzip

    packed = tmp_path / "access.log.2"  # no .gz suffix: the content says what it is
    packed.write_bytes(gzip.compress(Path(DEMO_LOG).read_bytes()))
    plain = run_cli("replay", DEMO_LOG, "-i", DEMO, "--json", "--policy", "lru")
    unpacked = run_cli("replay", str(packed), "-i", DEMO, "--json", "--policy", "lru")
    assert unpacked.exit_code == 0, unpacked.stderr
    assert json.loads(unpacked.stdout)["policies"] == json.loads(plain.stdout)["policies"]
    broken = tmp_path / "broken.gz"
    broken.write_bytes(packed.read_bytes()[: len(packed.read_bytes()) // 2])
    result = run_cli("replay", str(broken), "-i", DEMO)
    assert result.exit_code == 2 and "compressed data broken off" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_sigterm_during_a_replay_is_one_line_and_exit_143(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    long = tmp_path / "long.jsonl"
    long.write_bytes(Path(DEMO_LOG).read_bytes() * 200)  # 400,000 requests: longer than the wait, compiled too
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    command = [sys.executable, "-m", "lorafleet", "replay", str(long), "-i", DEMO, "--policy", "lorafleet"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(3.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, (proc.returncode, err)
    assert [line for line in err.splitlines() if line.strip()] == ["error: interrupted"], err
    assert "Traceback" not in err and out == ""


def test_replay_says_how_many_requests_name_no_engine_of_a_fleet_of_several(run_cli, tmp_path: Path) -> None:
    """Where a line names no engine, which engine served it is replay's model (docs/replay.md, Routing), not the
    log's: replay counts them and says so, on a fleet where the choice matters."""
    from tests.policy.builders import make_inventory

    spec = {"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}
    make_inventory(tmp_path, adapters=4, engines=[spec, spec])
    log = tmp_path / "access.jsonl"
    lines = [{"ts": 1_000_000 + i, "model": f"a{i % 4}"} for i in range(6)]
    lines[1]["upstream"] = "http://127.0.0.1:20001"  # e1's address
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    args = ("replay", str(log), "-i", str(tmp_path / "inv.yaml"), "--format", "jsonl", "--policy", "lru")
    assert json.loads(run_cli(*args, "--json").stdout)["log"]["unplaced_requests"] == 5
    text = " ".join(run_cli(*args).stdout.split())
    assert "5 adapter requests of 6 name no engine of the inventory" in text
    log.write_text("".join(json.dumps({**line, "upstream": "http://127.0.0.1:20000"}) + "\n" for line in lines))
    assert json.loads(run_cli(*args, "--json").stdout)["log"]["unplaced_requests"] == 0
    assert "name no engine" not in " ".join(run_cli(*args).stdout.split())


def test_the_wide_table_says_what_the_json_says_and_a_partly_timed_log_says_how_many_lines_were(
    run_cli, tmp_path: Path
) -> None:
    """The table is the JSON in other units (wait total in seconds, p50 in ms); replayed from lines with durations,
    what lorafleet did (loads, touches) is the session's and still counted; a log where only some lines give a
    duration says how many did."""
    from tests.policy.builders import make_inventory

    make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])
    log = tmp_path / "access.jsonl"
    workflow_log(log, durations=True)
    rows = log.read_text().splitlines()
    args = ("replay", str(log), "-i", str(tmp_path / "inv.yaml"), "--format", "jsonl", "--policy", "lru")
    assert "with a duration" not in run_cli(*args).stdout  # every line timed: nothing to say
    rows[5] = json.dumps({k: v for k, v in json.loads(rows[5]).items() if k != "duration_s"})  # one line untimed
    rows.append(json.dumps({**json.loads(rows[6]), "model": "m"}))  # a base-model request, timed
    log.write_text("\n".join(rows) + "\n")
    data = json.loads(run_cli(*args, "--json").stdout)
    (lru,) = data["policies"]
    assert (data["log"]["timed_requests"], data["log"]["base_requests"]) == (120, 1)
    assert lru["loads"] > 0 and lru["misses"] > 0
    table = run_cli(*args, "--wide", env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert "120 requests with a duration (the rest: the line's time taken as both)" in text
    row = next(line for line in table.stdout.splitlines() if line.startswith("lru"))
    cells = [c.strip() for c in row.split("│")]
    header = next(line for line in table.stdout.splitlines() if "wait total s" in line)
    names = [c.strip() for c in header.split("┃")]
    shown = dict(zip(names, cells, strict=True))
    assert shown["wait total s"] == f"{lru['cold_ms_total'] / 1000:,.1f}"
    assert shown["wait p50 ms"] == f"{lru['cold_ms_p50']:,.1f}" and shown["loads"] == f"{lru['loads']:,}"
