"""The deploy files are usable: the Kubernetes example's inventory loads, the systemd unit runs a real command,
and every Grafana query names a metric the daemon exports."""

from __future__ import annotations

import configparser
import json
import re
import shlex
from pathlib import Path

import yaml

from lorafleet.daemon.metrics import metric_names
from lorafleet.inventory import load_inventory
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"


def test_the_kubernetes_example_is_a_deployment_with_a_valid_inventory(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert {"ConfigMap", "Deployment"} <= set(kinds)
    deployment = kinds["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"]["type"] == "Recreate"  # one journal writer
    container = deployment["template"]["spec"]["containers"][0]
    assert container["args"][0] == "daemon"
    inventory = tmp_path / "lorafleet.yaml"
    inventory.write_text(kinds["ConfigMap"]["data"]["lorafleet.yaml"])
    inv = load_inventory(inventory)
    assert len(inv.engines) == 2 and inv.gateway_logs


def test_the_systemd_unit_runs_the_daemon_hardened() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((DEPLOY / "lorafleet-daemon.service").read_text())
    service = unit["Service"]
    command = shlex.split(service["ExecStart"])
    assert command[1:3] == ["daemon", "--log-format"]
    assert service["ExecReload"].endswith("-HUP $MAINPID")
    for key in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "CapabilityBoundingSet", "ReadWritePaths"):
        assert key in service


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exported = set(metric_names())
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            queried |= set(re.findall(r"lorafleet_[a-z_]+", target["expr"]))
    assert queried and queried <= exported, queried - exported
    # and the dashboard shows what the issue asks for
    for name in (
        "lorafleet_requests_total",
        "lorafleet_cold_ms_avoided_total",
        "lorafleet_actions_total",
        "lorafleet_log_lag_seconds",
        "lorafleet_engine_circuit_state",
    ):
        assert name in queried
