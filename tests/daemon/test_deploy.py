"""The deploy files are usable: the Kubernetes example's inventory loads, the systemd unit runs a real command,
and every Grafana query names a metric the daemon exports."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from lorafleet.daemon.metrics import metric_names
from lorafleet.inventory import load_inventory
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"


SUPPORTED_KUBERNETES = [f"1.{minor}.0" for minor in range(29, 38)]  # the releases the manifests are checked for


def manifests() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text()) if d]


def test_the_kubernetes_example_is_a_deployment_with_a_valid_inventory(tmp_path: Path) -> None:
    kinds = {d["kind"]: d for d in manifests()}
    assert {"ConfigMap", "Deployment"} <= set(kinds)
    deployment = kinds["Deployment"]["spec"]
    assert deployment["replicas"] == 1 and deployment["strategy"]["type"] == "Recreate"  # one journal writer
    pod = deployment["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][0] == "daemon"
    # /ready for all three: /healthz answers while the process serves, a loop stuck or not
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/ready", probe
    inventory = tmp_path / "lorafleet.yaml"
    inventory.write_text(kinds["ConfigMap"]["data"]["lorafleet.yaml"])
    inv = load_inventory(inventory)  # offline: the discovery section is read, nothing is asked
    assert inv.discovery and inv.gateway_logs and not inv.engines


def test_the_service_account_may_read_endpointslices_and_nothing_else() -> None:
    docs = manifests()
    kinds = {d["kind"]: d for d in docs}
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    account = kinds["ServiceAccount"]["metadata"]["name"]
    assert pod["serviceAccountName"] == account and pod.get("automountServiceAccountToken", True)
    role, binding = kinds["Role"], kinds["RoleBinding"]
    assert role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds


def test_the_manifests_define_every_volume_they_mount() -> None:
    docs = manifests()
    defined = {(d["kind"], d["metadata"]["name"]) for d in docs}
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for container in pod["containers"]:
        for mount in container["volumeMounts"]:
            assert mount["name"] in volumes, mount
    for volume in volumes.values():
        if "persistentVolumeClaim" in volume:
            assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in defined, volume
        if "configMap" in volume:
            assert ("ConfigMap", volume["configMap"]["name"]) in defined, volume


@pytest.mark.parametrize("version", SUPPORTED_KUBERNETES)
def test_the_manifests_validate_against_each_supported_kubernetes(version: str) -> None:
    """Strict schemas (an unknown field is an error) of every release the package ships that we support.
    kubernetes-validate is a test dependency; skipped when absent, unless LORAFLEET_REQUIRE_KUBERNETES_VALIDATE=1
    (CI sets it)."""
    try:
        import kubernetes_validate
        from kubernetes_validate.utils import all_versions
    except ImportError:
        if os.environ.get("LORAFLEET_REQUIRE_KUBERNETES_VALIDATE") == "1":
            pytest.fail("kubernetes-validate is required here but not installed (pip install -e '.[test]')")
        pytest.skip("kubernetes-validate is not installed")
    if version not in all_versions():
        if os.environ.get("LORAFLEET_REQUIRE_KUBERNETES_VALIDATE") == "1":
            pytest.fail(f"this kubernetes-validate has no schemas for {version}")
        pytest.skip(f"this kubernetes-validate has no schemas for {version}")
    for doc in manifests():
        kubernetes_validate.validate(doc, version, strict=True)  # raises ValidationError naming the field


def unit_lines() -> dict[str, list[str]]:
    """The unit's [Service] settings, each key with every value it is given (systemd keys may repeat)."""
    out: dict[str, list[str]] = {}
    section = None
    for line in (DEPLOY / "lorafleet-daemon.service").read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def runnable_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's lorafleet, so systemd can check the command exists."""
    here = Path(sys.executable).parent / "lorafleet"
    if not here.exists():
        pytest.skip(f"no lorafleet script beside {sys.executable} (install the package)")
    unit = tmp_path / "lorafleet-daemon.service"
    unit.write_text(
        (DEPLOY / "lorafleet-daemon.service").read_text().replace("/opt/lorafleet/bin/lorafleet", str(here))
    )
    return unit


def test_the_systemd_unit_runs_the_daemon_hardened() -> None:
    service = unit_lines()
    command = shlex.split(service["ExecStart"][0])
    assert command[1:3] == ["daemon", "--log-format"]
    assert service["ExecReload"][0].endswith("-HUP $MAINPID")
    for key in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "CapabilityBoundingSet", "ReadWritePaths"):
        assert key in service
    # the gateway's logs: optional (absent on a host without nginx), readable through Debian's adm group
    logs = [p for v in service["ReadOnlyPaths"] for p in v.split() if "/log/" in p]
    assert logs and all(p.startswith("-") for p in logs)
    assert service["SupplementaryGroups"] == ["adm"]
    assert any(v.startswith("keys:/etc/lorafleet/keys") for v in service["LoadCredential"])
    # the port the gateway recipe's header fills <HINTS_PORT> with: its hints reach this daemon
    hints = command[command.index("--hints-addr") + 1]
    recipe = (DEPLOY / "nginx-lorafleet.conf").read_text()
    assert hints == "127.0.0.1:9465" and "-e 's/<HINTS_PORT>/9465/'" in recipe


def test_a_broken_inventory_exits_with_a_status_the_unit_never_restarts_on(tmp_path: Path) -> None:
    """Restart=on-failure would start a daemon with a broken inventory every 5 s for ever: its exit status is one
    the unit lists under RestartPreventExitStatus, so it stays failed until someone fixes the file."""
    service = unit_lines()
    assert service["Restart"] == ["on-failure"]
    preventing = {int(code) for v in service["RestartPreventExitStatus"] for code in v.split()}
    broken = tmp_path / "lorafleet.yaml"
    broken.write_text("hosts: [\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LORAFLEET_INVENTORY": str(broken)}
    env["LORAFLEET_STATE"] = str(tmp_path / "state.db")
    args = [*shlex.split(service["ExecStart"][0])[1:], "--once", "--metrics-addr", "off"]
    done = subprocess.run(
        [sys.executable, "-m", "lorafleet", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode in preventing and "lorafleet.yaml" in done.stderr, (done.returncode, done.stderr)


def test_systemd_verifies_the_unit_and_rates_its_exposure_at_most_2(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = runnable_unit(tmp_path)
    verified = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stderr
    rated = subprocess.run(
        [analyze, "security", "--offline=yes", str(unit)], capture_output=True, text=True, timeout=60
    )
    exposure = re.search(r"Overall exposure level for \S+: ([0-9.]+)", rated.stdout)
    assert exposure, rated.stdout[-2000:] + rated.stderr
    assert float(exposure.group(1)) <= 2.0, rated.stdout


def test_every_dashboard_query_names_an_exported_metric_and_each_panel_one_unit() -> None:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exported = set(metric_names())
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            queried |= set(re.findall(r"lorafleet_[a-z_]+", target["expr"]))
            for variable in ("$instance", "$mode"):  # every query follows the daemon and mode chosen
                assert variable in target["expr"], (panel["title"], target["expr"])
        families = {
            re.sub(r"_(bucket|total)$", "", n)
            for t in panel["targets"]
            for n in re.findall(r"lorafleet_\w+", t["expr"])
        }
        units = {("seconds" if "seconds" in n else "bytes" if "bytes" in n else "count") for n in families}
        assert len(units) == 1 or panel["fieldConfig"]["defaults"]["unit"] == "percentunit", (panel["title"], units)
    assert queried and queried <= exported, queried - exported
    for name in (
        "lorafleet_requests_total",
        "lorafleet_cold_seconds_avoided_total",
        "lorafleet_actions_total",
        "lorafleet_log_lag_seconds",
        "lorafleet_engine_circuit_state",
    ):
        assert name in queried
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance", "mode", "engine"} <= set(variables)
    # requests no engine served (engine="") are no engine to choose
    assert 'engine!=""' in variables["engine"]["query"]["query"]


def test_every_inventory_shipped_for_the_gateway_reads_the_fields_its_log_format_writes(tmp_path: Path) -> None:
    """The Kubernetes ConfigMap, the recipe's own header and docs/gateway.md map the recipe's log: a field the
    log_format does not write makes every line bad (the ConfigMap once read `tenant_id` and `model`)."""

    recipe = (DEPLOY / "nginx-lorafleet.conf").read_text()
    start = recipe.index("log_format lorafleet_json")
    log_format = recipe[start : recipe.index(";", start)]
    written = set(re.findall(r'"(\w+)":', log_format))
    configmap = next(d for d in manifests() if d["kind"] == "ConfigMap")["data"]["lorafleet.yaml"]
    inventory = tmp_path / "lorafleet.yaml"
    inventory.write_text(configmap)
    mappings = [load_inventory(inventory).gateway_logs[0].fields]
    for text in (recipe, (ROOT / "docs" / "gateway.md").read_text()):
        found = re.search(r"fields: (\{[^}]*\})", text.replace("\n#", "\n"))
        assert found, "no fields mapping"
        mappings.append(yaml.safe_load(" ".join(found.group(1).split())))
    for fields in mappings:
        assert set(fields.values()) <= written, fields
        assert {"time", "adapter", "tenant", "engine"} <= set(fields), fields
