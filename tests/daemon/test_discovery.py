"""The daemon on Kubernetes: its engines come from a loopback API server's EndpointSlices and follow the pods
(through the same path as SIGHUP's reload), a ConfigMap update (the `..data` link swapped) reloads it, and
/ready fails while the loop is stuck."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lorafleet.daemon.loop import DaemonOptions
from lorafleet.inventory import load_inventory
from tests.daemon.conftest import BASE, daemon_in_thread, log_line, wait_for, write_adapters
from tests.kube_server import FakeKube, endpoint_slice


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    server = FakeKube()
    yield server
    server.stop()


def fleet_text(adapters: list[Path], log: Path) -> str:
    return (
        f"base_models:\n{BASE}"
        "discovery:\n  kubeconfig: kubeconfig\n  groups:\n"
        "    - {name: pool, namespace: inference, selector: {kubernetes.io/service-name: vllm}, port: http,\n"
        "       kind: vllm, base_model: m, max_loras: 2, max_cpu_loras: 4, request_timeout_s: 2,\n"
        "       call_deadline_s: 3}\n"
        "adapters:\n"
        + "".join(f"  - {{id: a{i}, base_model: m, path: '{p}', rank: 8}}\n" for i, p in enumerate(adapters))
        + f"gateway:\n  logs:\n    - path: '{log}'\n      format: jsonl\n"
        "      fields: {time: ts, tenant: tenant_id, adapter: model, engine: upstream}\n"
    )


def configmap(folder: Path, text: str, version: int) -> Path:
    """Write the inventory as the kubelet lays out a ConfigMap volume: `inv.yaml -> ..data/inv.yaml`, and
    `..data` a link to a timestamped folder, swapped by a rename on each update."""
    folder.mkdir(exist_ok=True)
    data = folder / f"..2026_01_0{version}"
    data.mkdir()
    (data / "inv.yaml").write_text(text)
    link = folder / "..data_tmp"
    link.symlink_to(data.name)
    link.rename(folder / "..data")
    entry = folder / "inv.yaml"
    if not entry.is_symlink():
        entry.symlink_to("..data/inv.yaml")
    return entry


def get(port: int, path: str) -> int:
    try:
        return int(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def registry_reads(emulator) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for _, path, _ in emulator.state.requests if path == "/v1/models")


def test_a_daemons_engines_follow_the_pods_and_its_configmap(tmp_path: Path, kube, emulators, daemon_process) -> None:  # type: ignore[no-untyped-def]
    e0, e1 = emulators(kind="vllm", gpu_slots=2, host_slots=4), emulators(kind="vllm", gpu_slots=2, host_slots=4)
    kube.put(endpoint_slice("vllm-a", [("vllm-0", "127.0.0.1")], e0.port))
    adapters = write_adapters(tmp_path / "adapters", 3)
    log = tmp_path / "access.jsonl"
    log.touch()
    folder = tmp_path / "config"
    kube.kubeconfig(tmp_path / "kubeconfig")
    folder.mkdir()  # the kubeconfig is named relative to the inventory file, as written (the link)
    (folder / "kubeconfig").symlink_to(tmp_path / "kubeconfig")
    inv = configmap(folder, fleet_text(adapters[:2], log), 1)
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "30")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start", log=daemon.log)
    port = daemon.metrics_port()
    assert get(port, "/ready") == 200 and get(port, "/healthz") == 200

    with open(log, "a") as fh:
        fh.write(log_line("a0", engine="pool/vllm-0"))
    wait_for(lambda: "a0" in e0.state.registry, what="a0 loaded on the discovered pod", log=daemon.log)

    # A pod comes (its own slice: another target port): an engine within the event, reconciled before use.
    kube.put(endpoint_slice("vllm-b", [("vllm-1", "127.0.0.1")], e1.port))
    wait_for(lambda: "added pool/vllm-1" in daemon.log(), what="vllm-1 added", log=daemon.log)
    wait_for(lambda: registry_reads(e1) >= 1, what="vllm-1's registry read", log=daemon.log)
    with open(log, "a") as fh:
        fh.write(log_line("a1", engine="pool/vllm-1"))
    wait_for(lambda: "a1" in e1.state.registry, what="a1 loaded on the new pod", log=daemon.log)

    # 410: listed again, nothing retired or added twice.
    lists = kube.count("list")
    kube.expire()
    wait_for(lambda: kube.count("list") > lists, what="a re-list after the 410", log=daemon.log)
    time.sleep(0.3)
    assert "retired pool" not in daemon.log() and daemon.log().count("added pool/vllm-1") == 1

    # The pod relabelled out of the Service: its endpoint leaves the slice, the engine is retired.
    kube.put(endpoint_slice("vllm-a", [], e0.port))
    wait_for(lambda: "retired pool/vllm-0" in daemon.log(), what="vllm-0 retired", log=daemon.log)

    # A ConfigMap update (the ..data swap): reloaded, through the same path; discovered engines stay.
    configmap(folder, fleet_text(adapters, log), 2)  # a third adapter
    wait_for(lambda: "inventory's files changed" in daemon.log(), what="the reload", log=daemon.log)
    wait_for(lambda: "reloaded: 1 engines, 3 adapters" in daemon.log(), what="the reload's end", log=daemon.log)
    with open(log, "a") as fh:
        fh.write(log_line("a2", engine="pool/vllm-1"))
    wait_for(lambda: "a2" in e1.state.registry, what="the new adapter loaded", log=daemon.log)
    code, _ = daemon.stop()
    assert code == 0, daemon.log()
    assert "Traceback" not in daemon.log()


def test_ready_fails_while_the_loop_is_stuck_and_comes_back(tmp_path: Path) -> None:
    adapters = write_adapters(tmp_path / "adapters", 1)
    log = tmp_path / "access.jsonl"
    log.touch()
    text = (
        fleet_text(adapters, log).split("discovery:")[0] + "adapters:" + fleet_text(adapters, log).split("adapters:")[1]
    )
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    inv = load_inventory(path)
    release, stuck = threading.Event(), threading.Event()

    def reload():  # type: ignore[no-untyped-def]
        stuck.set()
        release.wait(10)
        return inv

    options = DaemonOptions(shadow=True, metrics_addr="127.0.0.1:0", ready_stale_s=0.3)
    with daemon_in_thread(inv, tmp_path / "state.db", options, reload) as daemon:
        try:
            wait_for(lambda: daemon.metrics.server is not None and daemon.metrics.beat_at is not None)
            port = daemon.metrics.server.server_address[1]
            wait_for(lambda: get(port, "/ready") == 200, what="ready")
            daemon.reload_requested.set()  # the loop runs the reload, which hangs: the loop is stuck
            wait_for(lambda: stuck.is_set())
            wait_for(lambda: get(port, "/ready") == 503, what="not ready while stuck")
            assert get(port, "/healthz") == 200 and get(port, "/metrics") == 200
            release.set()
            wait_for(lambda: get(port, "/ready") == 200, what="ready again")
        finally:
            release.set()  # never leave the loop stuck in the reload


def test_many_pods_found_at_once_are_logged_as_a_few_names_and_a_count(
    tmp_path: Path, kube, emulators, daemon_process
) -> None:  # type: ignore[no-untyped-def]
    engine = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    kube.put(endpoint_slice("vllm-a", [("vllm-0", "127.0.0.1")], engine.port))
    log = tmp_path / "access.jsonl"
    log.touch()
    kube.kubeconfig(tmp_path / "kubeconfig")
    inv = tmp_path / "inv.yaml"
    inv.write_text(fleet_text(write_adapters(tmp_path / "adapters", 1), log))
    daemon = daemon_process(inv, tmp_path / "state.db")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start", log=daemon.log)
    kube.put(endpoint_slice("vllm-b", [(f"vllm-{i}", "127.0.0.1") for i in range(1, 15)], engine.port))
    wait_for(lambda: "engines: 15 in use" in daemon.log(), what="14 pods added", log=daemon.log)
    line = next(x for x in daemon.log().splitlines() if "engines: 15 in use" in x)
    assert line.endswith("and 4 more; retired none") and line.count("pool/vllm-") == 10, line
    assert daemon.stop()[0] == 0


def test_a_daemon_started_before_any_pod_waits_for_one_and_serves_it(  # type: ignore[no-untyped-def]
    tmp_path: Path, kube, emulators, daemon_process
) -> None:
    """Deployed before the inference pods roll out, the daemon finds no engine: it starts, follows the log and
    takes the first pod when it comes (a start that asked every engine for its registry with none there would
    have ended it)."""
    e0 = emulators(kind="vllm", gpu_slots=2, host_slots=4)
    adapters = write_adapters(tmp_path / "adapters", 2)
    log = tmp_path / "access.jsonl"
    log.touch()
    kube.kubeconfig(tmp_path / "kubeconfig")
    inv = tmp_path / "inv.yaml"
    inv.write_text(fleet_text(adapters, log))
    daemon = daemon_process(inv, tmp_path / "state.db", "--reconcile-every", "30")
    wait_for(lambda: "following" in daemon.log(), what="the daemon to start with no engine", log=daemon.log)
    assert daemon.proc.poll() is None
    kube.put(endpoint_slice("vllm-a", [("vllm-0", "127.0.0.1")], e0.port))
    wait_for(lambda: "added pool/vllm-0" in daemon.log(), what="vllm-0 added", log=daemon.log)
    with open(log, "a") as fh:
        fh.write(log_line("a1", engine="pool/vllm-0"))
    wait_for(lambda: "a1" in e0.state.registry, what="a1 loaded on the first pod", log=daemon.log)
    code, _ = daemon.stop()
    assert code == 0 and "Traceback" not in daemon.log(), daemon.log()
