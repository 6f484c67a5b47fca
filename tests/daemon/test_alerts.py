"""deploy/prometheus-rules.yaml against the real promtool: each alert fires on the series it is for, names the
engine where there is one, and stays quiet on an idle fleet (no traffic: rates of 0 over 0)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from lorafleet.daemon.metrics import metric_names
from tests.conftest import ROOT
from tests.daemon.test_prometheus import tool

RULES = ROOT / "deploy" / "prometheus-rules.yaml"
E = 'engine="h/e0"'


def rules() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}


# (what, input series as promtool writes them, minute to evaluate at, {alert: labels of each alert it expects})
CASES: list[tuple[str, dict[str, str], int, dict[str, list[dict[str, str]]]]] = [
    ("no daemon scraped", {}, 15, {"LorafleetDaemonAbsent": [{}]}),
    (
        "an idle fleet: nothing fires",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            'lorafleet_log_lag_bytes{mode="live"}': "0x40",
            'lorafleet_log_lines_total{result="ok",mode="live"}': "0x40",
            'lorafleet_log_lines_total{result="bad",mode="live"}': "0x40",
            f'lorafleet_engine_circuit_state{{{E},state="open",mode="live"}}': "0x40",
            f'lorafleet_engine_circuit_state{{{E},state="closed",mode="live"}}': "1x40",
            f'lorafleet_actions_total{{{E},action="load",result="ok",mode="live"}}': "0x40",
            f'lorafleet_actions_total{{{E},action="load",result="failed",mode="live"}}': "0x40",
            f'lorafleet_engine_restarts_total{{{E},mode="live"}}': "0x40",
            f'lorafleet_vanished_adapters_total{{{E},mode="live"}}': "0x40",
            'lorafleet_journal_refused_commits_total{mode="live"}': "0x40",
            'lorafleet_log_files_unread{mode="live"}': "0x40",
        },
        30,
        {},
    ),
    (
        "log files it cannot open, for good",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            'lorafleet_log_files_unread{mode="live"}': "0 0 481x38",
        },
        15,
        {"LorafleetLogFilesUnread": [{"mode": "live"}]},
    ),
    (
        "a file unreadable for a moment (opened at the next look)",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            'lorafleet_log_files_unread{mode="live"}': "0 0 3 0x37",
        },
        15,
        {},
    ),
    (
        "a state database that refuses commits (one every 5 s), then takes them again",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            'lorafleet_journal_refused_commits_total{mode="live"}': "0 0+12x15 180x25",
        },
        12,
        {"LorafleetJournalRefused": [{"mode": "live"}]},
    ),
    (
        "a refusal that passed: quiet again five minutes on",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            'lorafleet_journal_refused_commits_total{mode="live"}': "0 0+12x15 180x25",
        },
        30,
        {},
    ),
    (
        "one refused commit (a lock held a moment too long) does not page",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            'lorafleet_journal_refused_commits_total{mode="live"}': "0 0 1x38",
        },
        10,
        {},
    ),
    (
        "a healthy busy fleet: nothing fires",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            'lorafleet_log_lag_bytes{mode="live"}': " ".join(["5000000", "0"] * 21),  # bursts read within a minute
            'lorafleet_log_lines_total{result="ok",mode="live"}': "0+1000x40",
            'lorafleet_log_lines_total{result="bad",mode="live"}': "0+10x40",
            f'lorafleet_actions_total{{{E},action="load",result="ok",mode="live"}}': "0+100x40",
            f'lorafleet_actions_total{{{E},action="load",result="failed",mode="live"}}': "0+5x40",
        },
        30,
        {},
    ),
    (
        "stuck behind the logs",
        {'lorafleet_log_lag_bytes{mode="live"}': "2000000x20"},
        15,
        {"LorafleetFallingBehind": [{"mode": "live"}], "LorafleetDaemonAbsent": [{}]},
    ),
    (
        "a log format the inventory does not map",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            'lorafleet_log_lines_total{result="ok",mode="live"}': "0+100x40",
            'lorafleet_log_lines_total{result="bad",mode="live"}': "0+50x40",
        },
        25,
        {"LorafleetBadLogLines": [{"mode": "live"}]},
    ),
    (
        "an engine that keeps failing",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            f'lorafleet_engine_circuit_state{{{E},state="open",mode="live"}}': "0 0 1x40",
            f'lorafleet_actions_total{{{E},action="load",result="ok",mode="live"}}': "0+5x40",
            f'lorafleet_actions_total{{{E},action="load",result="failed",mode="live"}}': "0+5x40",
        },
        25,
        {
            "LorafleetEngineCircuitOpen": [{"engine": "h/e0", "state": "open", "mode": "live"}],
            "LorafleetEngineCallsFailing": [{"engine": "h/e0", "mode": "live"}],
        },
    ),
    (
        "an engine restarted and an adapter's files vanished",
        {
            'lorafleet_build_info{version="1",python="3.11",mode="live"}': "1x40",
            f'lorafleet_engine_restarts_total{{{E},mode="live"}}': "0 0 0 1x20",
            f'lorafleet_vanished_adapters_total{{{E},mode="live"}}': "0 0 0 0 2x20",
        },
        8,
        {
            "LorafleetEngineRestarted": [{"engine": "h/e0", "mode": "live"}],
            "LorafleetAdapterFilesVanished": [{"engine": "h/e0", "mode": "live"}],
        },
    ),
]


def test_each_alert_fires_on_what_it_is_for_and_never_on_an_idle_or_healthy_fleet(tmp_path: Path) -> None:
    promtool = tool("promtool")
    defined = rules()
    tests = []
    for _, series, minute, expected in CASES:
        assert set(expected) <= set(defined)
        checks = []
        for name, rule in defined.items():
            alerts = [
                {"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": rule["annotations"]}
                for labels in expected.get(name, [])
            ]
            checks.append({"eval_time": f"{minute}m", "alertname": name, "exp_alerts": alerts})
        tests.append(
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": checks,
            }
        )
    test_file = tmp_path / "rules_test.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}))
    checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert {name for _, _, _, expected in CASES for name in expected} == set(defined)  # every alert is seen firing


def test_every_rule_names_an_exported_metric() -> None:
    named = {n for rule in rules().values() for n in re.findall(r"lorafleet_\w+", rule["expr"])}
    assert named and named <= set(metric_names()), named - set(metric_names())
