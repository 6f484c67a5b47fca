"""The faults a month in production brings, each with real processes: the daemon as a subprocess, emulated
engines on loopback, log files written and rotated while it runs."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.daemon.conftest import log_line, sglang, vllm, write_adapters, write_fleet


def daemon_once(inventory: Path, state: Path, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """`lorafleet daemon --shadow --once --from-start` as a process of its own, its summary as JSON."""
    command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inventory), "--state", str(state), "--shadow"]
    command += ["--once", "--from-start", "--metrics-addr", "off", "--retention", "3650d", "--json", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=str(inventory.parent))


def holds_lock(state: Path, pid: int) -> bool:
    """Whether process `pid` holds the state file's lock (its lock file names the holder)."""
    lock = state.with_name(state.name + ".lock")
    return lock.exists() and lock.read_text().startswith(f"pid {pid} ")


def journaled_requests(state: Path) -> int:
    with sqlite3.connect(state) as c:
        return c.execute("SELECT COALESCE(SUM(requests), 0) FROM rollups").fetchone()[0]


def test_a_line_with_a_lone_surrogate_is_a_bad_line_not_a_crash_loop(tmp_path: Path) -> None:
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    log = tmp_path / "access.jsonl"
    t0 = time.time() - 3600
    with open(log, "w") as fh:
        fh.write(json.dumps({"ts": t0, "tenant_id": "\ud800", "model": "a0"}) + "\n")  # valid JSON, not storable text
        for i in range(1000):
            fh.write(log_line(f"a{i % 2}", tenant="t", ts=t0 + 1 + i * 0.5))
    state = tmp_path / "state.db"
    first = daemon_once(inv, state)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert (summary["lines"], summary["bad_lines"], summary["requests"]) == (1001, 1, 1000)
    again = daemon_once(inv, state)  # a restart reads nothing twice and does not fail again
    assert again.returncode == 0 and json.loads(again.stdout)["lines"] == 0
    assert journaled_requests(state) == 1000


def test_a_batch_that_cannot_commit_drops_only_its_unstorable_rows(tmp_path: Path) -> None:
    from lorafleet.logs.follow import Checkpoint
    from lorafleet.store.db import open_store
    from lorafleet.store.journal import Outcomes, commit_or_drop, read_checkpoints

    with open_store(tmp_path / "s.db") as store:
        rollups = {
            ("2026-11-02T09:00Z", "\ud800", "a0", "h/e0"): Outcomes(1, 1),
            ("2026-11-02T09:00Z", "t", "a0", "h/e0"): Outcomes(2, 1),
        }
        checkpoint = Checkpoint("/var/log/a.jsonl", 1, 2, 300, 10, "abc")
        dropped = commit_or_drop(store, rollups, [checkpoint], {}, [], [])
        assert dropped == 1
        assert read_checkpoints(store) == [checkpoint]  # the reading moves on
        (requests,) = store.db.execute("SELECT SUM(requests) FROM rollups").fetchone()
        (error,) = store.db.execute("SELECT message FROM errors").fetchone()
    assert requests == 2 and "could not be stored" in error


def test_every_unstorable_row_of_a_batch_is_counted_once_and_the_rest_kept(tmp_path: Path) -> None:
    """Rollups, action rows and error rows alike: the count dropped is the rows that went, the note says it."""
    from lorafleet.store.db import ActionRow, open_store
    from lorafleet.store.journal import Outcomes, commit_or_drop

    def action(adapter: str) -> ActionRow:
        return ActionRow("2026-11-02T09:00:01.000Z", "daemon", adapter, "h/e0", "loaded", True, 1.0, 1, None)

    with open_store(tmp_path / "s.db") as store:
        rollups = {("2026-11-02T09:00Z", "t\udc80", "a0", "h/e0"): Outcomes(1, 1)}
        actions = [action("a1"), action("a\ud800"), action("a2"), action("\udfff")]
        errors = [("2026-11-02T09:00:02.000Z", "h/e0", "ok"), ("2026-11-02T09:00:03.000Z", "h/e0", "bad \ud800")]
        dropped = commit_or_drop(store, rollups, [], {}, actions, errors)
        kept = [a.adapter for a in store.loads()]
        messages = [m for (m,) in store.db.execute("SELECT message FROM errors ORDER BY id")]
        (rollup_rows,) = store.db.execute("SELECT COUNT(*) FROM rollups").fetchone()
    assert dropped == 4 and kept == ["a1", "a2"] and rollup_rows == 0
    assert messages[0] == "ok" and messages[1].startswith("4 journal rows could not be stored")


def test_a_missing_log_is_said_at_start_and_when_it_appears_and_once_without_one_exits_1(
    tmp_path: Path, daemon_process
) -> None:
    from tests.daemon.conftest import wait_for

    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    missing = tmp_path / "later.jsonl"
    once = daemon_once(inv, tmp_path / "s.db", "--log", str(missing))
    assert once.returncode == 1 and f"error: no log file to read: tried {missing}" in once.stderr
    daemon = daemon_process(inv, tmp_path / "live.db", "--shadow", "--log", str(missing))
    wait_for(lambda: "no such log file" in daemon.log(), what="a warning about the missing log")
    missing.write_text(log_line("a0"))
    wait_for(lambda: "the log file is there now" in daemon.log(), what=f"the log noticed\n{daemon.log()}")
    code, _ = daemon.stop()
    assert code == 0


def test_a_busy_metrics_port_is_an_input_error_naming_the_option(tmp_path: Path) -> None:
    import socket

    adapters = write_adapters(tmp_path / "adapters", 1)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inv), "--state", str(tmp_path / "s.db"),
                   "--shadow", "--once", "--metrics-addr", f"127.0.0.1:{port}"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: --metrics-addr 127.0.0.1:{port}: cannot serve there")


def test_copy_truncate_then_a_rename_before_the_next_read_loses_nothing(tmp_path: Path) -> None:
    """logrotate's copytruncate, then a rename of that file (a second rotation scheme, or an admin), while the
    daemon was stopped: the renamed file was rewritten since its checkpoint, so it is read from its start."""
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    log, state = tmp_path / "access.jsonl", tmp_path / "state.db"
    t0 = time.time() - 3600
    log.write_text("".join(log_line(f"a{i % 2}", ts=t0 + i) for i in range(100)))
    assert json.loads(daemon_once(inv, state).stdout)["lines"] == 100
    (tmp_path / "access.jsonl.1").write_bytes(log.read_bytes())  # copytruncate: the copy, then
    with open(log, "r+") as fh:  # the same file truncated and written again
        fh.truncate(0)
        fh.write("".join(log_line("a0", ts=t0 + 200 + i) for i in range(50)))
    log.rename(tmp_path / "access.jsonl.2")  # and renamed before the daemon read it again
    log.write_text("".join(log_line("a1", ts=t0 + 300 + i) for i in range(30)))
    second = daemon_once(inv, state, "-v")
    assert json.loads(second.stdout)["lines"] == 80, second.stderr
    assert "rewritten since (copy-truncate)" in second.stderr
    assert journaled_requests(state) == 180


def test_once_reads_past_a_line_of_a_megabyte_to_the_end_of_the_data(tmp_path: Path) -> None:
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    log, state = tmp_path / "access.jsonl", tmp_path / "state.db"
    t0 = time.time() - 3600
    with open(log, "w") as fh:
        fh.write("".join(log_line("a0", ts=t0 + i) for i in range(5)))
        fh.write('{"ts": %d, "model": "a1", "junk": "%s"}\n' % (t0 + 5, "x" * (1 << 20)))  # noqa: UP031
        fh.write("".join(log_line("a1", ts=t0 + 6 + i) for i in range(5)))
    summary = json.loads(daemon_once(inv, state).stdout)
    assert (summary["requests"], summary["bad_lines"]) == (10, 1)
    with open(log, "a") as fh:
        fh.write("".join(log_line("a0", ts=t0 + 20 + i) for i in range(3)))
    assert json.loads(daemon_once(inv, state).stdout)["requests"] == 3
    assert journaled_requests(state) == 13


def test_one_daemon_per_state_file_and_a_standby_takes_over_from_the_checkpoint(tmp_path: Path, daemon_process) -> None:
    import signal

    from tests.daemon.conftest import wait_for

    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    log, state = tmp_path / "access.jsonl", tmp_path / "state.db"
    active = daemon_process(inv, state, "--shadow", "--from-start")
    wait_for(lambda: "following" in active.log(), what="the first daemon to start")
    second = daemon_once(inv, state)  # a second daemon on the same state file
    assert second.returncode == 2
    assert f"another daemon is running on the state file {state}: pid {active.proc.pid} on " in second.stderr
    link = tmp_path / "link.db"
    link.symlink_to(state)  # the same journal by another name: the same lock (two daemons counted every line twice)
    third = daemon_once(inv, link)
    assert third.returncode == 2 and f"pid {active.proc.pid} on " in third.stderr
    hard = tmp_path / "other" / "hard.db"
    hard.parent.mkdir()
    os.link(state, hard)  # the same file under a name no symlink leads from: its own lock file, the same journal
    fourth = daemon_once(inv, hard)
    assert fourth.returncode == 2, fourth.stderr
    assert f"another daemon is running on the state file {hard}: a daemon that opened it by another name" in (
        fourth.stderr
    )
    standby = daemon_process(inv, state, "--shadow", "--standby")
    wait_for(lambda: "standby:" in standby.log(), what="the standby to wait")
    t0 = time.time()
    with open(log, "a") as fh:
        fh.write("".join(log_line(f"a{i % 2}", ts=t0 + i * 0.01) for i in range(300)))
    wait_for(lambda: os.path.exists(state) and journaled_requests(state) == 300, what="the first daemon's commit")
    active.signal(signal.SIGKILL)
    wait_for(lambda: "took over" in standby.log(), what=f"the standby to take over\n{standby.log()}")
    with open(log, "a") as fh:
        fh.write("".join(log_line("a0", ts=t0 + 10 + i * 0.01) for i in range(200)))
    wait_for(lambda: journaled_requests(state) == 500, what=f"the standby's commit\n{standby.log()}")
    code, _ = standby.stop()
    assert code == 0 and journaled_requests(state) == 500  # none lost, none counted twice


def test_a_state_file_whose_lock_cannot_be_made_is_an_input_error(tmp_path: Path) -> None:
    """Exit 2, which the systemd unit does not restart on, in one line: not an internal error every 5 s."""
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    state = tmp_path / "state.db"
    (tmp_path / "state.db.lock").mkdir()
    result = daemon_once(inv, state)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: cannot make the state file's lock {state}.lock: Is a directory\n")


def metrics_text(port: int) -> str:
    import urllib.request

    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_one_adapter_whose_files_are_missing_does_not_block_its_engine(
    tmp_path: Path, emulators, daemon_process
) -> None:
    from tests.daemon.conftest import wait_for

    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    adapters = write_adapters(tmp_path / "adapters", 3)
    adapters[0] = tmp_path / "adapters" / "gone"  # a0's path does not exist: its loads answer 404
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, host=4)], adapters)
    state = tmp_path / "state.db"
    daemon = daemon_process(inv, state, "--reconcile-every", "1")
    port = daemon.metrics_port()
    for i in range(30):
        append_line(tmp_path / "access.jsonl", log_line(f"a{i % 3}", engine="h/e0"))
        time.sleep(0.1)
        assert 'lorafleet_engine_circuit_state{engine="h/e0",mode="live",state="open"} 1.0' not in metrics_text(port)
    wait_for(lambda: {"a1", "a2"} <= set(engine.state.registry), what=f"the healthy adapters loaded\n{daemon.log()}")
    code, _ = daemon.stop()
    assert code == 0
    with sqlite3.connect(state) as c:
        refused = c.execute("SELECT adapter, error FROM loads WHERE action = 'refused'").fetchall()
    assert refused and all(adapter == "a0" and "backing off" in error for adapter, error in refused)


def append_line(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def test_an_engine_back_from_a_long_outage_is_warmed_again_within_a_reconcile(
    tmp_path: Path, emulators, daemon_process
) -> None:
    """An engine down for longer than its breaker's cooldown, restarted empty: its failed reconciles open the
    breaker and, going through it rather than probing, never extend it (test_breaker.py); once the engine answers,
    the plan's adapters come back a reconcile after it does. That a reconcile closes an open breaker at once, before
    its cooldown ends, is the actor's (test_actors.py: test_an_actor_sorts_each_answer_by_whose_fault_it_is)."""
    from tests.daemon.conftest import wait_for
    from tests.engine_emulator import Fault

    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, host=4)], adapters)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "version: 1\nengines:\n  h/e0:\n  - {adapter: a0, pinned: false}\n  - {adapter: a1, pinned: false}\n"
    )
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "1", "--plan", str(plan))
    wait_for(lambda: {"a0", "a1"} <= set(engine.state.registry), what=f"the plan warmed\n{daemon.log()}")
    engine.state.faults.append(Fault(status=503, times=10**6))  # down: every call answers 503
    engine.state.restart()  # and when it comes back it holds nothing
    time.sleep(8.0)  # longer than the breaker's 5 s cooldown
    engine.state.faults.clear()
    back = time.monotonic()
    wait_for(lambda: {"a0", "a1"} <= set(engine.state.registry), timeout=20, what=f"re-warmed\n{daemon.log()}")
    assert time.monotonic() - back < 4.0  # a reconcile interval and a load, not what is left of the breaker wait
    assert daemon.stop()[0] == 0


def test_start_up_reconciles_before_the_first_load(tmp_path: Path, emulators) -> None:
    """An old SGLang refuses loads at max_loaded_loras; a daemon acting before it knew the engine was full
    would have its first loads refused. It reconciles first: the engine's adapters are adopted, then unloaded
    to make room."""
    from collections import OrderedDict

    from tests.daemon.conftest import sglang

    engine = emulators(kind="sglang", gpu_slots=2, host_slots=2, legacy_cap=True)
    adapters = write_adapters(tmp_path / "adapters", 4)
    engine.state.registry.update({"a0": str(adapters[0]), "a1": str(adapters[1])})  # full before the daemon starts
    engine.state.host = OrderedDict.fromkeys(["a0", "a1"])
    inv = write_fleet(tmp_path, [sglang("s", engine.url, gpu=2, host=2)], adapters)
    t0 = time.time()
    (tmp_path / "access.jsonl").write_text(
        "".join(log_line(f"a{2 + i % 2}", engine="h/s", ts=t0 + i) for i in range(4))
    )
    command = [sys.executable, "-m", "lorafleet", "daemon", "-i", str(inv), "--state", str(tmp_path / "s.db"),
               "--once", "--from-start", "--metrics-addr", "off", "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    summary = json.loads(done.stdout)
    assert summary["failed"] == 0, done.stderr
    assert {"a2", "a3"} <= set(engine.state.registry) and len(engine.state.registry) <= 2


def test_a_running_daemon_learns_of_warm_at_once_through_the_shared_state(
    tmp_path: Path, emulators, daemon_process
) -> None:
    from tests.daemon.conftest import wait_for

    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, host=4)], adapters)
    state = tmp_path / "state.db"
    daemon = daemon_process(inv, state, "--reconcile-every", "3600")  # no reconcile would tell it
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    warm = subprocess.run([sys.executable, "-m", "lorafleet", "warm", "a0", "-i", str(inv), "--state", str(state)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert warm.returncode == 0, warm.stderr
    time.sleep(0.5)  # a few of the daemon's polls
    append_line(tmp_path / "access.jsonl", log_line("a0", engine="h/e0"))
    wait_for(lambda: journaled_requests(state) == 1, what=f"the request journaled\n{daemon.log()}")
    assert daemon.stop()[0] == 0
    with sqlite3.connect(state) as c:
        (hits,) = c.execute("SELECT SUM(hits) FROM rollups WHERE adapter = 'a0'").fetchone()
        loads = c.execute("SELECT COUNT(*) FROM loads WHERE source = 'daemon' AND adapter = 'a0'").fetchone()[0]
    assert (hits, loads) == (1, 0)  # resident as warm left it: a hit, and no second load


def test_vanished_files_are_not_a_restart_and_the_adapter_waits_until_they_are_back(
    tmp_path: Path, emulators, daemon_process
) -> None:
    import shutil

    from tests.daemon.conftest import wait_for

    engine = emulators(kind="vllm", gpu_slots=1, host_slots=2)
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, gpu=1, host=2)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "1", "--json")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    log = tmp_path / "access.jsonl"
    append_line(log, log_line("a1", engine="h/e0"))
    wait_for(lambda: "a1" in engine.state.registry, what="a1 loaded")
    keep = tmp_path / "kept"
    shutil.move(str(adapters[1]), str(keep))  # its files vanish
    wait_for(lambda: "a1" not in engine.state.registry, timeout=5, what=f"a1 unregistered\n{daemon.log()}")
    loads_before = sum(1 for _, path, body in engine.state.requests if path.endswith("load_lora_adapter") and body)
    for _ in range(5):  # requests for it: never loaded while its files are gone (a real vLLM would die of it)
        append_line(log, log_line("a1", engine="h/e0"))
        time.sleep(0.3)
    loads_after = sum(1 for _, path, body in engine.state.requests if path.endswith("load_lora_adapter") and body)
    assert loads_after == loads_before and "a1" not in engine.state.registry
    shutil.move(str(keep), str(adapters[1]))  # and come back
    wait_for(lambda: "files are back" in daemon.log(), timeout=5, what=f"the files noticed\n{daemon.log()}")
    append_line(log, log_line("a1", engine="h/e0"))
    wait_for(lambda: "a1" in engine.state.registry, timeout=5, what=f"a1 loaded again\n{daemon.log()}")
    assert "engine restarted" not in daemon.log()  # lorafleet's own unregistering is no restart
    assert daemon.stop()[0] == 0
    summary = json.loads(daemon.proc.stdout.read())  # type: ignore[union-attr]
    assert (summary["vanished"], summary["engine_restarts"]) == (1, 0)  # once, however many reconciles saw it gone


def test_a_restart_refilled_by_loads_before_the_reconcile_is_seen_and_its_stale_unloads_are_no_failures(
    tmp_path: Path, emulators, daemon_process
) -> None:
    """Traffic goes on while an engine restarts: the daemon loads new adapters there before its next reconcile,
    and unloads adapters the engine no longer has (answered "does not exist"): the restart is seen at once,
    once, and the unloads are done, not failed."""
    from tests.daemon.conftest import wait_for

    engine = emulators(kind="sglang", gpu_slots=2, host_slots=2)
    adapters = write_adapters(tmp_path / "adapters", 4)
    inv = write_fleet(tmp_path, [sglang("e0", engine.url, host=2)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "4", "--json")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")
    log = tmp_path / "access.jsonl"
    for adapter in ("a0", "a1"):
        append_line(log, log_line(adapter, engine="h/e0"))
    wait_for(lambda: set(engine.state.registry) == {"a0", "a1"}, what=f"a0, a1 loaded\n{daemon.log()}")
    wait_for(lambda: daemon.log().count("GET /v1/models") >= 2, timeout=8, what="a reconcile confirming them")
    engine.state.restart()
    for adapter in ("a2", "a3"):  # the book still holds a0, a1: they are unloaded to make room
        append_line(log, log_line(adapter, engine="h/e0"))
    wait_for(lambda: set(engine.state.registry) == {"a2", "a3"}, what="a2, a3 loaded", log=daemon.log)
    wait_for(lambda: "engine restarted?" in daemon.log(), timeout=3, what="the restart seen", log=daemon.log)
    time.sleep(1.0)
    assert daemon.stop()[0] == 0
    assert daemon.log().count("engine restarted?") == 1
    assert json.loads(daemon.proc.stdout.read())["engine_restarts"] == 1  # type: ignore[union-attr]
    with sqlite3.connect(tmp_path / "state.db") as c:
        unloads = c.execute("SELECT adapter, ok, error FROM loads WHERE action = 'unloaded' ORDER BY 1").fetchall()
        failed = c.execute("SELECT COUNT(*) FROM loads WHERE ok = 0").fetchone()[0]
    assert unloads == [("a0", 1, "the engine no longer had it"), ("a1", 1, "the engine no longer had it")]
    assert failed == 0


def test_an_answer_that_the_engine_lost_an_adapter_reads_its_registry_at_once_and_no_other_answer_does(
    tmp_path: Path, emulators, daemon_process
) -> None:
    """Between reconciles, an engine that answers "no such adapter" lost what the book holds: its registry is read
    at once. Answers that say nothing of the kind (a load done) read nothing."""
    from tests.daemon.conftest import wait_for

    engine = emulators(kind="sglang", gpu_slots=2, host_slots=3)
    adapters = write_adapters(tmp_path / "adapters", 4)
    inv = write_fleet(tmp_path, [sglang("e0", engine.url, host=3)], adapters)
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "3600")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start")

    def reads() -> int:
        return sum(1 for method, path, _ in list(engine.state.requests) if (method, path) == ("GET", "/v1/models"))

    started = reads()  # the first reconcile
    log = tmp_path / "access.jsonl"
    for adapter in ("a0", "a1", "a2"):
        append_line(log, log_line(adapter, engine="h/e0"))
    wait_for(lambda: set(engine.state.registry) == {"a0", "a1", "a2"}, what="a0-a2 loaded", log=daemon.log)
    time.sleep(0.5)
    assert reads() == started  # three loads answered: nothing to ask
    for held in (engine.state.registry, engine.state.host, engine.state.gpu):  # the engine lost it; the book
        held.pop("a0", None)  # still holds it
    append_line(log, log_line("a3", engine="h/e0"))  # a0, least recent, is unloaded to make room: "no such adapter"
    wait_for(lambda: reads() == started + 1, timeout=5, what="the registry read at once", log=daemon.log)
    assert daemon.stop()[0] == 0


def test_twenty_kills_with_both_rotations_and_a_standby_takeover_lose_and_repeat_nothing(
    tmp_path: Path, daemon_process
) -> None:
    import random
    import shutil
    import signal

    from tests.daemon.conftest import wait_for

    adapters = write_adapters(tmp_path / "adapters", 4)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    log, db = tmp_path / "access.jsonl", tmp_path / "state.db"
    rng = random.Random(20261201)
    t0 = time.time() - 3600
    written = rotated = 0

    def write(count: int) -> None:
        nonlocal written
        with open(log, "a") as fh:
            for _ in range(count):
                fh.write(log_line(f"a{rng.randrange(4)}", ts=t0 + written * 0.01))
                written += 1

    def counted() -> bool:
        try:
            return db.exists() and journaled_requests(db) == written
        except sqlite3.OperationalError:  # the daemon is still creating its tables
            return False

    for round_ in range(20):
        daemon = daemon_process(inv, db, "--shadow", "--from-start", "--metrics-addr", "off")
        if round_ == 10:  # a standby beside it takes over when it is killed
            # (once the daemon holds the lock: started together, either may take it first)
            wait_for(lambda d=daemon: holds_lock(db, d.proc.pid), what="the daemon to take the lock", log=daemon.log)
            standby = daemon_process(inv, db, "--shadow", "--from-start", "--metrics-addr", "off", "--standby")
            wait_for(lambda s=standby: "standby:" in s.log(), what="the standby to wait", log=standby.log)
            write(50)
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.proc.wait()
            wait_for(lambda s=standby: "took over" in s.log(), what="the standby to take over")  # type: ignore[misc]
            daemon = standby
        for _ in range(rng.randint(1, 4)):
            write(rng.randint(1, 60))
            # One rotation between the daemon's reads (hourly, daily), as logrotate does: rename, which may be
            # the last thing before the kill (then it is found again at the restart); or copy-truncate, which
            # loses what the daemon had not read yet for any follower, so it comes once the daemon caught up.
            if rng.random() < 0.3:
                wait_for(counted, what=f"caught up before a rotation\n{daemon.log()}")
                write(rng.randint(1, 20))  # and some lines it has not read yet
                rotated += 1
                log.rename(tmp_path / f"access.jsonl.{rotated}")
            elif rng.random() < 0.2:
                wait_for(counted, what=f"caught up before copy-truncate\n{daemon.log()}")
                shutil.copy(log, tmp_path / "copied")
                with open(log, "r+") as fh:
                    fh.truncate(0)
            time.sleep(rng.uniform(0.0, 0.3))
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
    final = daemon_once(inv, db)
    assert final.returncode == 0, final.stderr
    assert journaled_requests(db) == written  # 0 lost, 0 counted twice


def test_a_state_file_that_refuses_the_commit_is_one_line_naming_it_and_exit_1(tmp_path: Path) -> None:
    """A damaged schema (or a full disk, a lock held elsewhere): SQLite's failure on the commit is an operation
    error naming the file, not an internal error; what was read is read again at the next start."""
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters)
    log = tmp_path / "access.jsonl"
    t0 = time.time() - 3600
    log.write_text("".join(log_line(f"a{i % 2}", tenant="t", ts=t0 + i) for i in range(50)))
    state = tmp_path / "state.db"
    assert daemon_once(inv, state).returncode == 0
    with sqlite3.connect(state) as c:
        c.execute("DROP TABLE log_minutes")
    with open(log, "a") as fh:
        fh.write(log_line("a0", tenant="t", ts=t0 + 60))
    failed = daemon_once(inv, state)
    assert failed.returncode == 1
    lines = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
    held = "1 log line read and not journaled"  # held while the run lasted; its last commit refused too
    assert lines == [f"error: state database {state}: no such table: log_minutes; {held}"], failed.stderr
    assert "internal error" not in failed.stderr and "Traceback" not in failed.stderr


def test_a_bug_handling_another_processs_warm_costs_that_notice_only(tmp_path: Path, emulators, monkeypatch) -> None:
    """The book learns of what `warm` did through the shared state; a bug there is journaled as an internal error
    and the daemon goes on serving lines (it used to leave the loop: a BudgetError from such a notice did)."""
    from lorafleet.daemon.loop import DaemonOptions
    from lorafleet.drive.session import Session
    from lorafleet.inventory import load_inventory
    from tests.daemon.conftest import daemon_in_thread, wait_for

    def broken(self, engine, adapter, answer, pinned):  # type: ignore[no-untyped-def]
        raise RuntimeError("a bug")

    monkeypatch.setattr(Session, "noticed", broken)
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    inv = write_fleet(tmp_path, [vllm("e0", engine.url, host=4)], write_adapters(tmp_path / "adapters", 2))
    state = tmp_path / "state.db"
    with daemon_in_thread(load_inventory(inv), state, DaemonOptions(metrics_addr=None)) as daemon:
        wait_for(lambda: daemon.metrics.beat_at is not None, what="the daemon to start")
        warm = subprocess.run([sys.executable, "-m", "lorafleet", "warm", "a0", "-i", str(inv), "--state", str(state)],
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
        assert warm.returncode == 0, warm.stderr
        wait_for(lambda: _errors(state) == [("internal error: RuntimeError",)], what="the notice's error journaled")
        append_line(tmp_path / "access.jsonl", log_line("a1", engine="h/e0"))
        wait_for(lambda: journaled_requests(state) == 1, what="a line served after it")


def _errors(state: Path) -> list[tuple[str]]:
    with sqlite3.connect(state) as c:
        return c.execute("SELECT message FROM errors").fetchall()


def test_a_once_run_that_reads_no_line_does_nothing_not_even_its_pins(tmp_path: Path) -> None:
    """`--once` reads what came and exits: with no line to read, the policy never starts (a live daemon starts it
    on the wall clock when its logs are idle; a run that ends at once must not preload pins or a plan)."""
    adapters = write_adapters(tmp_path / "adapters", 2)
    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9")], adapters, tenants="  t: {pinned: [a0]}\n")
    done = daemon_once(inv, tmp_path / "state.db")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["requests"], summary["loads"]) == (0, 0)
    with sqlite3.connect(tmp_path / "state.db") as c:
        assert c.execute("SELECT COUNT(*) FROM loads").fetchone()[0] == 0
    (tmp_path / "access.jsonl").write_text(log_line("a1", tenant="t", ts=time.time() - 60))
    done = daemon_once(inv, tmp_path / "state.db")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["loads"] == 2  # a line: the policy starts, the pin loaded with the request's own
