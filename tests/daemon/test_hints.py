"""The hint ingress (`daemon --hints-addr`): a real daemon process takes the gateway's start hints over HTTP,
learns from each at once, and counts each request once, from its log line."""

from __future__ import annotations

import http.client
import json
import re
import sqlite3
import time
from pathlib import Path

from tests.daemon.conftest import DaemonProcess, daemon_in_thread, vllm, wait_for, write_adapters, write_fleet


def hints_port(daemon: DaemonProcess) -> int:
    wait_for(lambda: "start hints on" in daemon.log(), what="the hint endpoint", log=daemon.log)
    found = re.search(r"start hints on http://127\.0\.0\.1:(\d+)", daemon.log())
    assert found is not None
    return int(found.group(1))


def send_hint(port: int, body: bytes, headers: dict[str, str] | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request(
        "POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json", **(headers or {})}
    )
    status = conn.getresponse().status
    conn.close()
    return status


def hint_body(adapter: str, user: str = "t") -> bytes:
    return json.dumps({"model": adapter, "user": user, "messages": [{"role": "user", "content": "hi"}]}).encode()


def requests_in(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT COALESCE(SUM(requests), 0) FROM rollups").fetchone()[0]


def hint_metrics(port: int) -> dict[str, float]:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {m[0]: float(m[1]) for m in re.findall(r'lorafleet_hints_total\{mode="live",outcome="(\w+)"\} (\S+)', text)}


def fleet(tmp_path: Path, url: str) -> Path:
    adapters = write_adapters(tmp_path / "adapters", 6)
    inv = write_fleet(tmp_path, [vllm("e0", url, host=4)], adapters, tenants="  t: {workflows: [[a3, a4, a5]]}\n")
    text = inv.read_text().replace("engine: upstream}", "engine: upstream, request_id: rid, duration_s: dur}")
    inv.write_text(text)
    return inv


def line(adapter: str, rid: str | None, duration: float = 1.0, tenant: str = "t") -> str:
    record: dict[str, object] = {"ts": time.time(), "tenant_id": tenant, "model": adapter, "dur": duration}
    if rid is not None:
        record["rid"] = rid
    return json.dumps(record) + "\n"


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def test_a_hint_prefetches_the_next_step_before_any_log_line(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    inv = fleet(tmp_path, engine.url)
    daemon = daemon_process(inv, tmp_path / "state.db", "--hints-addr", "0")  # a bare port: loopback
    port = hints_port(daemon)
    assert send_hint(port, hint_body("a3"), {"X-Request-Id": "r1"}) == 204
    wait_for(lambda: "a4" in engine.state.registry, what="a4 prefetched from the hint", log=daemon.log)
    assert (tmp_path / "access.jsonl").read_text() == ""  # nothing logged yet: the hint alone did it
    code, _ = daemon.stop()
    assert code == 0


def test_a_hinted_request_is_counted_once_from_its_log_line(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    inv = fleet(tmp_path, engine.url)
    db = tmp_path / "state.db"
    daemon = daemon_process(inv, db, "--hints-addr", "127.0.0.1:0")
    port, metrics = hints_port(daemon), daemon.metrics_port()
    log = tmp_path / "access.jsonl"
    assert send_hint(port, hint_body("a0"), {"X-Request-Id": "r1"}) == 204  # joined by id
    assert send_hint(port, hint_body("a1")) == 204  # no id: joined by tenant and adapter
    wait_for(lambda: hint_metrics(metrics).get("queued") == 2, what="two hints queued", log=daemon.log)
    append(log, line("a0", "r1") + line("a1", None) + line("a2", "r9"))  # a2: a request no hint announced
    wait_for(lambda: hint_metrics(metrics).get("joined") == 2, what="both hints joined", log=daemon.log)
    code, _ = daemon.stop()
    assert code == 0
    assert requests_in(db) == 3  # each request once: from its log line, hinted or not


def test_bad_hints_are_answered_and_counted_and_load_nothing(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    inv = fleet(tmp_path, engine.url)
    daemon = daemon_process(inv, tmp_path / "state.db", "--hints-addr", "127.0.0.1:0")
    port, metrics = hints_port(daemon), daemon.metrics_port()
    assert send_hint(port, b"not json at all") == 204
    assert send_hint(port, hint_body("../../etc/passwd")) == 204  # a name, never a path
    assert send_hint(port, b"x" * (300 * 1024)) == 413  # over the body limit: not read
    wait_for(
        lambda: hint_metrics(metrics).get("bad") == 2 and hint_metrics(metrics).get("unknown") == 1,
        what="the bad hints counted",
        log=daemon.log,
    )
    assert send_hint(port, hint_body("a3")) == 204  # the endpoint still serves
    wait_for(lambda: "a4" in engine.state.registry, what="a good hint after bad ones", log=daemon.log)
    assert not any("passwd" in name for name in engine.state.registry)
    assert daemon.stop()[0] == 0


def test_a_hint_before_a_kill_9_leaves_its_log_line_counted_once(tmp_path, emulators, daemon_process) -> None:
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    inv = fleet(tmp_path, engine.url)
    db = tmp_path / "state.db"
    log = tmp_path / "access.jsonl"
    daemon = daemon_process(inv, db, "--hints-addr", "127.0.0.1:0")
    assert send_hint(hints_port(daemon), hint_body("a3"), {"X-Request-Id": "r1"}) == 204
    wait_for(lambda: "a4" in engine.state.registry, what="a4 prefetched from the hint", log=daemon.log)
    daemon.proc.kill()  # the hint was learned; its line is not written yet
    daemon.proc.wait()
    append(log, line("a3", "r1"))
    again = daemon_process(inv, db, "--hints-addr", "127.0.0.1:0")
    wait_for(lambda: requests_in(db) == 1, what="the line counted after the restart", log=again.log)
    assert again.stop()[0] == 0
    assert requests_in(db) == 1


def test_while_it_takes_hints_the_daemon_hands_the_interpreter_over_often(tmp_path: Path) -> None:
    """The endpoint answers from a thread: the loop's work must not keep it waiting Python's default 5 ms switch
    interval (benchmarks/hint_endpoint.py measures what it costs); the interval is restored at the end."""
    import sys

    from lorafleet.daemon.hints import SWITCH_INTERVAL_S
    from lorafleet.daemon.loop import DaemonOptions
    from lorafleet.inventory import load_inventory

    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9", gpu=2, host=4)], write_adapters(tmp_path / "a", 2))
    before = sys.getswitchinterval()
    options = DaemonOptions(shadow=True, hints_addr="127.0.0.1:0")
    with daemon_in_thread(load_inventory(inv), tmp_path / "state.db", options) as daemon:
        wait_for(lambda: daemon.hints is not None and daemon.metrics.beat_at is not None)
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S < before
    assert sys.getswitchinterval() == before


def test_a_hinted_request_whose_line_names_another_engine_is_counted_rerouted(
    tmp_path, emulators, daemon_process
) -> None:
    """A hint names no engine: the book takes it on the placement rule's (e0, both empty), and loads it there; the
    line says the gateway sent it to e1. Counted once, as `rerouted`, and the daemon's book holds it on e1."""
    e0 = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    e1 = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    adapters = write_adapters(tmp_path / "adapters", 4)
    inv = write_fleet(tmp_path, [vllm("e0", e0.url), vllm("e1", e1.url)], adapters)
    text = inv.read_text().replace("engine: upstream}", "engine: upstream, request_id: rid, duration_s: dur}")
    inv.write_text(text)
    db = tmp_path / "state.db"
    daemon = daemon_process(inv, db, "--hints-addr", "127.0.0.1:0")
    port, metrics = hints_port(daemon), daemon.metrics_port()
    assert send_hint(port, hint_body("a0"), {"X-Request-Id": "r1"}) == 204
    wait_for(lambda: "a0" in e0.state.registry, what="the hint's load on the placement rule's engine", log=daemon.log)
    record = {"ts": time.time(), "tenant_id": "t", "model": "a0", "dur": 0.5, "rid": "r1", "upstream": "h/e1"}
    append(tmp_path / "access.jsonl", json.dumps(record) + "\n")
    wait_for(lambda: hint_metrics(metrics).get("rerouted") == 1, what="the hint counted rerouted", log=daemon.log)
    assert hint_metrics(metrics).get("joined") == 1

    def resident() -> dict[str, float]:
        import urllib.request

        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5).read().decode()
        found = re.findall(r'lorafleet_resident_adapters\{engine="([^"]+)",mode="live"\} (\S+)', text)
        return {engine: float(value) for engine, value in found}

    wait_for(lambda: resident() == {"h/e0": 1.0, "h/e1": 1.0}, what="a0 held on both engines", log=daemon.log)
    assert daemon.stop()[0] == 0
    assert requests_in(db) == 1
    with sqlite3.connect(db) as c:  # counted where it ran: e1, which had to load it
        assert c.execute("SELECT engine, SUM(requests), SUM(misses) FROM rollups GROUP BY engine").fetchall() == [
            ("h/e1", 1, 1)
        ]


def test_the_daemons_clock_follows_the_newest_hint(tmp_path: Path) -> None:
    """Hints alone, no line yet: the policy's clock and the lag a dashboard reads follow the newest hint, not the
    first (a clock left at the first hint would hold every timed decision back)."""
    from lorafleet.daemon.loop import DaemonOptions
    from lorafleet.inventory import load_inventory

    inv = write_fleet(tmp_path, [vllm("e0", "http://127.0.0.1:9", gpu=2, host=4)], write_adapters(tmp_path / "a", 2))
    options = DaemonOptions(shadow=True, hints_addr="127.0.0.1:0")
    with daemon_in_thread(load_inventory(inv), tmp_path / "state.db", options) as daemon:
        wait_for(lambda: daemon.hints is not None and daemon.hints.server is not None)
        port = daemon.hints.server.server_address[1]
        assert send_hint(port, hint_body("a0")) == 204
        wait_for(lambda: daemon.log_now is not None, what="the first hint taken")
        first = daemon.log_now
        time.sleep(1.5)
        assert send_hint(port, hint_body("a1")) == 204
        wait_for(lambda: daemon.log_now != first, what="the second hint taken")
        assert daemon.log_now is not None and first is not None and daemon.log_now >= first + 1.4

        def lag() -> float:
            (found,) = [
                s.value
                for m in daemon.metrics.registry.collect()
                for s in m.samples
                if s.name == "lorafleet_log_lag_seconds"
            ]
            return float(found)

        wait_for(lambda: lag() < 1.0, what="the lag measured from the newest hint")
