"""The daemon's metrics against the real Prometheus tools: `promtool check metrics` on what a running daemon
serves, and a real Prometheus server scraping a live and a shadow daemon while every query of the shipped
dashboard is asked of it — each must return numbers in both modes, so no panel is ever blank.

promtool and prometheus come from Debian's `prometheus` package (.ci/run installs it). Skipped when absent,
unless LORAFLEET_REQUIRE_PROMETHEUS=1 (CI sets it).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.daemon.conftest import log_line, sglang, vllm, wait_for, write_adapters, write_fleet
from tests.sshd_server import free_port


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("LORAFLEET_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"{name} is required here but not installed (see .ci/run)")
        pytest.skip(f"{name} is not installed (Debian: apt install prometheus)")
    return found


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def loads_ok(text: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "lorafleet_actions_total"
        and sample.labels.get("action") == "load"
        and sample.labels.get("result") == "ok"
    )


def fleet(tmp_path: Path, emulators):  # type: ignore[no-untyped-def]
    v = emulators(kind="vllm", gpu_slots=1, host_slots=2)
    s = emulators(kind="sglang", gpu_slots=2, host_slots=2)
    adapters = write_adapters(tmp_path / "adapters", 5)
    tenants = "  t: {workflows: [[a0, a1, a2]]}\n"
    engines = [vllm("v", v.url, gpu=1, host=2), sglang("s", s.url, host=2)]
    return write_fleet(tmp_path, engines, adapters, tenants=tenants)


def traffic(log: Path, seconds: float) -> None:
    """Requests over both engines, more adapters than fit: loads, evictions, unloads and touches happen."""
    deadline, i = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(log_line(f"a{(i * 7) % 5}", engine="h/v" if i % 2 else "h/s"))
        i += 1
        time.sleep(0.05)


def test_promtool_finds_nothing_in_what_a_running_daemon_serves(tmp_path: Path, emulators, daemon_process) -> None:
    promtool = tool("promtool")
    inv = fleet(tmp_path, emulators)
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "1")
    port = daemon.metrics_port()
    traffic(tmp_path / "access.jsonl", 2.0)
    wait_for(lambda: loads_ok(scrape(port)) > 0, what="loads answered", log=daemon.log)
    text = scrape(port)
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert 'lorafleet_build_info{mode="live",python=' in text
    assert "_created" not in text  # a series apiece in Prometheus, read by nothing: a third of a scrape
    assert daemon.stop()[0] == 0


def test_every_dashboard_query_returns_numbers_from_a_real_prometheus_in_live_and_shadow_mode(
    tmp_path: Path, emulators, daemon_process
) -> None:
    prometheus = tool("prometheus")
    inv = fleet(tmp_path, emulators)
    live = daemon_process(inv, tmp_path / "live.db", "--reconcile-every", "1")
    shadow = daemon_process(inv, tmp_path / "shadow.db", "--shadow")
    targets = [f"127.0.0.1:{live.metrics_port()}", f"127.0.0.1:{shadow.metrics_port()}"]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs:\n  - job_name: lorafleet\n    static_configs:\n      - targets: {json.dumps(targets)}\n"
    )
    port = free_port()
    server = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "wb"),  # noqa: SIM115 - the process holds it
    )
    api = f"http://127.0.0.1:{port}/api/v1"

    def query(expr: str) -> list[dict]:
        url = f"{api}/query?" + urllib.parse.urlencode({"query": expr})
        answer = json.loads(urllib.request.urlopen(url, timeout=10).read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def ready() -> bool:
        try:
            return len(query('up{job="lorafleet"} == 1')) == 2
        except OSError:
            return False

    try:
        wait_for(ready, timeout=30, what="Prometheus up and scraping both daemons")
        traffic(tmp_path / "access.jsonl", 8.0)
        time.sleep(2.5)  # two more scrapes
        dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
        blank = []
        for mode in ("live", "shadow"):
            for panel in dashboard["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$__rate_interval", "20s").replace('"$mode"', f'"{mode}"')
                    expr = expr.replace('"$instance"', '".*"').replace('"$engine"', '".*"')
                    values = [float(r["value"][1]) for r in query(expr)]
                    if not values or any(math.isnan(v) for v in values):
                        blank.append(f"{mode}: {panel['title']}: {target['expr']} -> {values}")
        assert not blank, "\n".join(blank)
        for mode in ("live", "shadow"):  # and the activity is really there, not only zeros
            assert query(f'sum(lorafleet_actions_total{{mode="{mode}",action="load",result="ok"}}) > 0'), mode
            assert query(f'sum(lorafleet_load_seconds_count{{mode="{mode}"}}) > 0'), mode
    finally:
        server.terminate()
        server.wait(30)
    assert live.stop()[0] == 0 and shadow.stop()[0] == 0
