"""The emulator's generation time: requests last as long as configured, overlap, and touches stay cheap."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from tests.engine_emulator import EngineState, adapter_mb


def post(url: str, body: dict[str, Any], timeout: float = 10.0) -> tuple[dict[str, Any], float]:
    """POST JSON; (the answer, seconds it took)."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    return answer, time.monotonic() - started


def test_a_completion_lasts_its_fixed_generation_time(emulators) -> None:
    engine = emulators(kind="vllm", gen_fixed_s=0.2)
    answer, took = post(f"{engine.url}/v1/completions", {"model": "base-model", "prompt": "hi"})
    assert answer["choices"][0]["text"] and 0.2 <= took < 1.5


def test_the_per_token_part_follows_max_tokens_and_a_default_when_absent(emulators) -> None:
    engine = emulators(kind="vllm", gen_s_per_token=0.01, gen_default_tokens=5)
    _, long = post(f"{engine.url}/v1/chat/completions", {"model": "base-model", "messages": [], "max_tokens": 25})
    _, short = post(f"{engine.url}/v1/completions", {"model": "base-model", "prompt": "hi"})  # 5 tokens
    assert long >= 0.25 and short >= 0.05
    assert short < long - 0.1


def test_concurrent_completions_generate_side_by_side(emulators) -> None:
    engine = emulators(kind="vllm", gen_fixed_s=0.4)
    took: list[float] = []

    def one() -> None:
        took.append(post(f"{engine.url}/v1/completions", {"model": "base-model", "prompt": "hi"})[1])

    started = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    assert len(took) == 3 and min(took) >= 0.4
    assert wall < 0.4 * 2  # one after another would take 1.2 s


def test_touches_stay_cheap(emulators, adapter_dirs) -> None:
    engine = emulators(kind="vllm", gen_fixed_s=1.0, gen_s_per_token=0.001)
    engine.state.registry["r8"] = str(adapter_dirs[8])
    _, took = post(f"{engine.url}/v1/completions", {"model": "r8", "prompt": "ping", "max_tokens": 1})
    assert took < 0.5
    assert engine.state.ttft_ms == [] and engine.state.served == {"hit": 0, "miss": 0}  # not a demand request


def test_sglang_completions_generate_too(emulators) -> None:
    engine = emulators(kind="sglang", gen_fixed_s=0.2)
    _, took = post(f"{engine.url}/v1/completions", {"model": "base-model", "prompt": "hi"})
    assert took >= 0.2


def test_the_spread_is_bounded_and_reproducible_from_its_seed() -> None:
    def draws(seed: int) -> list[float]:
        state = EngineState(kind="vllm", gen_fixed_s=1.0, gen_spread=0.5, gen_seed=seed)
        return [state.generation_s({"prompt": "hi"}) for _ in range(200)]

    first = draws(7)
    assert first == draws(7) and first != draws(8)
    assert 0.5 <= min(first) < 0.6 and 1.4 < max(first) <= 1.5


def test_a_cold_adapter_loads_before_generating_and_its_wait_is_the_ttft(emulators, adapter_dirs) -> None:
    path = str(adapter_dirs[8])
    engine = emulators(kind="vllm", gen_fixed_s=0.1, load_s_per_mb=0.3 / adapter_mb(path))
    engine.state.resolver["r8"] = path  # vLLM's lazy resolver: the first request pays the load
    _, cold = post(f"{engine.url}/v1/completions", {"model": "r8", "prompt": "hi", "max_tokens": 4})
    _, warm = post(f"{engine.url}/v1/completions", {"model": "r8", "prompt": "hi", "max_tokens": 4})
    assert cold >= 0.4 and 0.1 <= warm < cold - 0.2
    (a1, ms1, hit1), (a2, ms2, hit2) = engine.state.ttft_ms
    assert (a1, hit1, a2, hit2) == ("r8", False, "r8", True)
    assert ms1 >= 300 and ms2 < 100  # the load, not the generation


def test_the_command_line_takes_generation_times(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.engine_emulator", "--port", "0", "--gen-ms", "200", "--gen-spread", "0.1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "emulated vllm engine on http://127.0.0.1:PORT"
        assert "vllm" in line, line
        _, took = post(f"{line.split()[-1]}/v1/completions", {"model": "meta-llama/Meta-Llama-3-8B-Instruct"})
        assert took >= 0.18
    finally:
        proc.terminate()
        proc.wait(10)
