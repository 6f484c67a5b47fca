"""`inventory show --discover` lists discovered engines with one API list per group; every other inventory
command stays offline; a mistake in the discovery section is a located one-line error (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.engines.test_kubernetes import INVENTORY
from tests.kube_server import FakeKube, endpoint_slice


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    server = FakeKube()
    yield server
    server.stop()


def lorafleet(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "lorafleet", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_show_discovers_only_when_asked_and_check_never_connects(tmp_path: Path, kube: FakeKube) -> None:
    kube.put(endpoint_slice("vllm-a", [("vllm-0", "10.0.0.1"), ("vllm-1", "10.0.0.2", {"ready": False})], 8000))
    kube.kubeconfig(tmp_path / "kubeconfig")
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    for command in (["inventory", "check"], ["inventory", "show"], ["inventory", "show", "--json"]):
        done = lorafleet(*command, "-i", "inv.yaml", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert kube.requests == []  # offline: nothing asked
    shown = json.loads(lorafleet("inventory", "show", "--json", "-i", "inv.yaml", cwd=tmp_path).stdout)
    assert [g["name"] for g in shown["discovery"]] == ["pool", "canary"]
    done = lorafleet("inventory", "show", "--json", "--discover", "-i", "inv.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    hosts = {h["name"]: [e["url"] for e in h["engines"]] for h in json.loads(done.stdout)["hosts"]}
    assert hosts == {"pool": ["http://10.0.0.1:8000"], "canary": []}  # the pod not ready is no engine
    assert kube.count("list") == 2 and kube.count("watch") == 0
    table = lorafleet("inventory", "show", "--discover", "--wide", "-i", "inv.yaml", cwd=tmp_path).stdout
    assert "pool/vllm-0" in table and kube.token not in table


def test_an_unreachable_api_is_one_line_and_exit_1(tmp_path: Path, kube: FakeKube) -> None:
    kube.kubeconfig(tmp_path / "kubeconfig")
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    kube.stop()
    done = lorafleet("inventory", "show", "--discover", "-i", "inv.yaml", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: cannot reach the Kubernetes API"), done.stderr


def test_discovery_mistakes_name_file_line_and_field(tmp_path: Path) -> None:
    text = INVENTORY.replace("port: 9000", "port: 70000").replace(
        "selector: {kubernetes.io/service-name: vllm}", "selector: {'bad key!': vllm}"
    )
    text = text.replace("kind: sglang", "kind: sglang, url: 'http://x'")
    (tmp_path / "inv.yaml").write_text(text)
    done = lorafleet("inventory", "check", "-i", "inv.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "inv.yaml:7: discovery.groups[0].selector.bad key!: 'bad key!' is not a Kubernetes label key" in done.stderr
    assert "inv.yaml:9: discovery.groups[1].port: must be a port number (1-65535), got 70000" in done.stderr
    assert "discovery.groups[1].url: discovered engines take the endpoint's address" in done.stderr
