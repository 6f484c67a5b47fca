"""The published benchmark: a multi-tenant LoRA workflow run through nginx against a real vLLM, engines alone vs
lorafleet with start hints. It measures time to first token (TTFT) and what cold adapter loads cost.

    nice python benchmarks/published.py [--requests 800] [--tenants 8] [--adapters 10] [--json] [--keep DIR]
    nice python benchmarks/published.py --model DIR_OR_HF_ID --adapter-dir DIR --vllm-python PATH --device gpu \
        [--max-loras 4 --max-cpu-loras 8 --max-num-seqs 32]

What runs, for each mode (`--modes engines-alone,lorafleet-hints`), all on 127.0.0.1 with free ports:
- a fresh vLLM OpenAI server (`--vllm-python`: default the vLLM CPU build in ~/.cache/lorafleet/vllm-venv) with
  `--enable-lora --max-loras 2 --max-cpu-loras 4` (the adapters do not all fit), runtime LoRA updating allowed,
  and vLLM's filesystem resolver (`VLLM_PLUGINS=lora_filesystem_resolver`): a request naming an adapter the
  engine has never seen is served by the engine itself, which loads it from a folder named after it. The same
  engine, the same flags, in both modes;
- the real nginx with deploy/nginx-lorafleet.conf (tests/nginx_gateway.py) in front: without its mirror for
  `engines-alone`; with it for `lorafleet-hints`, where `lorafleet daemon --hints-addr` (policy `lorafleet`)
  takes each request's start hint, follows the access log and loads adapters through `/v1/load_lora_adapter`;
- `--tenants` client threads, each running its own workflow chain of 3-4 steps (drawn from the `--adapters`
  adapters, different per tenant and declared in the inventory's `tenants.*.workflows`) back to back, a short
  pause between rounds, until `--requests` requests are done in all; every request streamed
  (`"stream": true`, `--max-tokens` tokens, `ignore_eos`) through nginx, TTFT = the time to the first SSE chunk.

Which requests were cold is the engine's own word: a probe (a `sitecustomize` put on the engine's PYTHONPATH
that wraps, and only times, vLLM's `LRUCacheWorkerLoRAManager.add_adapter` and
`LoRAModelRunnerMixin.set_active_loras`) records every read of an adapter into the engine's CPU cache, every
activation into a GPU slot, and for each engine step the requests it runs for the first time. vLLM's request id
carries the X-Request-Id nginx sends (its $request_id) and comes back as the stream's `id`, so each client
request is matched to the step of its prefill. A request is cold when that step had to read its adapter, or when
it waited for an API load of it (the resolver's first load, a prefetch that came late). `--no-probe` runs the
engine untouched (then cold and warm are not told apart).

Reported per mode: TTFT p50/p99/mean (all requests, the later steps of chains, cold and warm requests), the
share of cold requests, cold-start TTFT per rank, engine loads and slot activations, wall time; lorafleet's own
summary (loads ahead of demand, hits); and the difference lorafleet makes. Also each adapter's size on disk and
the measured cold cost per rank: after the engines-alone run, requests sent straight to the engine cycle
through the adapters (each evicted from the CPU cache since its last use) and repeat each at once (warm):
cold cost = TTFT(cold) - TTFT(warm), the median over `--calibration-rounds`.

With no --model, a random float32 Llama (hidden 1024, 6 layers) and its adapters (ranks 8-128, all seven
projections) are built once by benchmarks/build_published_model.py into ~/.cache/lorafleet/published and
reused. --model takes a local folder or a Hugging Face id already in the local cache (HF_HUB_OFFLINE=1: nothing
is downloaded); --adapter-dir a folder of PEFT adapter folders (one per adapter, named as it; the first
--adapters in name order are used). `--device gpu` drops the CPU-only settings (VLLM_CPU_KVCACHE_SPACE,
`--dtype float32`, `--enforce-eager`). Nothing is sent outside 127.0.0.0/8.

One more mode, not run by default: `lorafleet-hints-prime`, the daemon with its vLLM re-warm (an in-place
`load_inplace` load of an adapter already registered) replaced by its 1-token prime, a patch made in the
daemon's process only. On vLLM 0.32 the API server stores an in-place load's request as the adapter's, so every
later engine step that uses that adapter reads it from disk again (counted as `in-place` reads).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.nginx_gateway import NginxGateway, free_port, nginx_missing  # noqa: E402

DEFAULT_VLLM_PYTHON = Path.home() / ".cache" / "lorafleet" / "vllm-venv" / "bin" / "python"
CACHE = Path.home() / ".cache" / "lorafleet" / "published"
BUILDER = ROOT / "benchmarks" / "build_published_model.py"
MODES = ("engines-alone", "lorafleet-hints")
# Not run by default: the daemon with VllmClient.rewarm replaced by its 1-token prime (a benchmark-only patch, in
# the daemon's process): what lorafleet does on vLLM versions without load_inplace. On vLLM 0.32 an in-place
# load's request is stored as the adapter's, so every later engine step using that adapter reads it again.
EXTRA_MODES = ("lorafleet-hints-prime",)
PRIME_LAUNCHER = (
    "import runpy, sys; from lorafleet.engines import vllm; "
    "vllm.VllmClient.rewarm = lambda self, name, path: self.prime(name); "
    "sys.argv[0] = 'lorafleet'; runpy.run_module('lorafleet', run_name='__main__')"
)
RANKS = (8, 16, 32, 64, 128)
VALID_MAX_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
PROMPT = "ping pong hello world"

# Put on the engine's PYTHONPATH as sitecustomize.py. When vLLM imports its worker LoRA manager and its model
# runner's LoRA mixin, two methods are wrapped, only to time them and write JSON lines:
# - LRUCacheWorkerLoRAManager.add_adapter: each call that read an adapter into the CPU cache (it was not there,
#   or the request asked for an in-place load) or moved it into a GPU slot: `{"kind": "add", ...}`;
# - LoRAModelRunnerMixin.set_active_loras (once per engine step): the requests the step sees for the first time
#   (their prefill: the step whose output is their first token), with their adapters, and the adapters the step
#   had to read into the CPU cache: `{"kind": "step", ...}`.
# It changes nothing the engine does.
PROBE = r"""# Written by benchmarks/published.py: times two vLLM LoRA methods (add_adapter, set_active_loras).
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time

_OUT = os.environ.get("LORAFLEET_PUBLISHED_PROBE")
_LOCK = threading.Lock()
_STATE = {"demand": False, "loaded": None}
_SEEN = set()


def _write(line):
    with _LOCK, open(_OUT, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def _patch_manager(module):
    cls = module.LRUCacheWorkerLoRAManager
    add, apply = cls.add_adapter, cls._apply_adapters

    def add_adapter(self, request):
        cached = request.lora_int_id in self.list_adapters()
        active = request.lora_int_id in getattr(self._adapter_manager, "_active_adapters", {})
        inplace = bool(getattr(request, "load_inplace", False))
        start = time.time()
        try:
            return add(self, request)
        finally:
            if not cached or inplace or not active:
                read = not cached or inplace
                if read and _STATE["loaded"] is not None:
                    _STATE["loaded"].append(request.lora_name)
                _write({"kind": "add", "adapter": request.lora_name, "start": start, "end": time.time(),
                        "cached": cached, "active": bool(active), "demand": _STATE["demand"], "inplace": inplace})

    def _apply_adapters(self, requests):
        _STATE["demand"] = True
        try:
            return apply(self, requests)
        finally:
            _STATE["demand"] = False

    cls.add_adapter, cls._apply_adapters = add_adapter, _apply_adapters


def _patch_runner(module):
    cls = module.LoRAModelRunnerMixin
    original = cls.set_active_loras

    def set_active_loras(self, input_batch, *args, **kwargs):
        new = {}
        try:
            count = input_batch.num_reqs
            names = {int(k): v.lora_name for k, v in input_batch.lora_id_to_lora_request.items()}
            mapping = input_batch.request_lora_mapping[:count]
            for request_id, lora_id in zip(list(input_batch.req_ids)[:count], mapping):
                if request_id not in _SEEN:
                    _SEEN.add(request_id)
                    new[request_id] = names.get(int(lora_id))
        except Exception as exc:
            new = {"?": repr(exc)}
        _STATE["loaded"] = []
        start = time.time()
        try:
            return original(self, input_batch, *args, **kwargs)
        finally:
            loaded, _STATE["loaded"] = _STATE["loaded"], None
            if new or loaded:
                _write({"kind": "step", "start": start, "end": time.time(), "new": new, "loaded": loaded})

    cls.set_active_loras = set_active_loras


_TARGETS = {"vllm.lora.worker_manager": _patch_manager, "vllm.v1.worker.lora_model_runner_mixin": _patch_runner}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, patch):
        self.inner, self.patch = inner, patch

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, _TARGETS[name])
        return spec


if _OUT:
    sys.meta_path.insert(0, _Finder())
"""


@dataclass(frozen=True)
class Adapter:
    id: str
    rank: int
    source: Path
    bytes: int


@dataclass(frozen=True)
class Assets:
    model: str  # what vLLM's --model gets (and what the resolver matches base_model_name_or_path against)
    shape: dict[str, Any]  # hidden_size, intermediate_size, num_layers, num_attention_heads, num_kv_heads, dtype
    adapters: list[Adapter]
    built: bool


@dataclass
class Request:
    tenant: str
    adapter: str
    step: int
    round: int
    sent: float  # time.time() when sent
    status: int = 0
    ttft_ms: float | None = None
    total_ms: float | None = None
    chunks: int = 0
    error: str | None = None
    request_id: str | None = None  # the completion's id, "cmpl-<X-Request-Id>" (nginx's $request_id)
    cold: bool | None = None  # None: not told (no probe, or its engine step not found)
    cold_by: str | None = None  # "own step": its first step read the adapter; "api": it waited for an API load


@dataclass
class Plan:
    tenant: str
    chain: list[str]
    steps: list[tuple[str, int, int, float]] = field(default_factory=list)  # adapter, step, round, pause after


# ---------------------------------------------------------------------------------------------------- assets


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def build_assets(args: argparse.Namespace) -> Assets:
    """The cached random model and adapters (built on first use with the vLLM environment's Python)."""
    ranks = [RANKS[i % len(RANKS)] for i in range(args.adapters)]
    key = f"h{args.hidden}-i{args.intermediate}-l{args.layers}-r{'.'.join(map(str, ranks))}"
    out = CACHE / key
    manifest_path = out / "manifest.json"
    if not manifest_path.exists():
        print(f"building the model and {len(ranks)} adapters in {out} …", file=sys.stderr, flush=True)
        command = [str(args.vllm_python), str(BUILDER), str(out), "--hidden", str(args.hidden)]
        command += ["--intermediate", str(args.intermediate), "--layers", str(args.layers)]
        command += ["--ranks", ",".join(map(str, ranks))]
        subprocess.run(
            command, check=True, capture_output=True, timeout=1800, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
    manifest = json.loads(manifest_path.read_text())
    shape = {k: manifest[k] for k in ("hidden_size", "intermediate_size", "num_layers", "num_attention_heads")}
    shape |= {"num_kv_heads": manifest["num_kv_heads"], "dtype": manifest["dtype"]}
    adapters = [Adapter(a["id"], a["rank"], Path(a["path"]), a["bytes"]) for a in manifest["adapters"]]
    return Assets(manifest["model"], shape, adapters, built=True)


SHAPE_SNIPPET = """
import json, sys
from transformers import AutoConfig
c = AutoConfig.from_pretrained(sys.argv[1])
c = getattr(c, "text_config", None) or c
print(json.dumps({"hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
                  "num_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
                  "num_kv_heads": getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
                  "dtype": str(getattr(c, "torch_dtype", None) or getattr(c, "dtype", None) or "bfloat16")}))
"""


def given_assets(args: argparse.Namespace) -> Assets:
    """--model and --adapter-dir: the model's shape read by transformers (offline), the adapters' ranks from
    their adapter_config.json."""
    found = subprocess.run(
        [str(args.vllm_python), "-c", SHAPE_SNIPPET, args.model],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    shape = json.loads(found.stdout.strip().splitlines()[-1])
    shape["dtype"] = shape["dtype"].removeprefix("torch.")
    if shape["dtype"] not in ("bfloat16", "float16", "float32"):
        shape["dtype"] = "bfloat16"
    folders = sorted(p for p in Path(args.adapter_dir).iterdir() if (p / "adapter_config.json").exists())
    if len(folders) < args.adapters:
        raise SystemExit(f"{args.adapter_dir} holds {len(folders)} adapter folders, --adapters wants {args.adapters}")
    adapters = []
    for folder in folders[: args.adapters]:
        rank = int(json.loads((folder / "adapter_config.json").read_text())["r"])
        adapters.append(Adapter(folder.name, rank, folder.resolve(), folder_bytes(folder)))
    return Assets(args.model, shape, adapters, built=False)


def write_resolver_dir(folder: Path, assets: Assets) -> None:
    """One folder per adapter, named as it, for vLLM's filesystem resolver: its files linked, its
    adapter_config.json copied with base_model_name_or_path set to the engine's --model (the resolver serves
    only adapters naming that exact base). lorafleet loads the same folders."""
    for adapter in assets.adapters:
        target = folder / adapter.id
        target.mkdir(parents=True)
        for path in adapter.source.iterdir():
            if path.name == "adapter_config.json":
                config = json.loads(path.read_text())
                config["base_model_name_or_path"] = assets.model
                (target / path.name).write_text(json.dumps(config, indent=1))
            elif path.is_file():
                (target / path.name).symlink_to(path.resolve())


# ---------------------------------------------------------------------------------------------------- engine


class VllmServer:
    """vLLM's OpenAI server on 127.0.0.1 (a free port), its log and probe lines in `folder`."""

    def __init__(self, folder: Path, assets: Assets, args: argparse.Namespace) -> None:
        self.folder = folder
        self.assets = assets
        self.args = args
        self.log_path = folder / "vllm.log"
        self.probe_path = folder / "probe.jsonl"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self, port: int) -> list[str]:
        args = self.args
        command = [str(args.vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model", self.assets.model]
        command += ["--host", "127.0.0.1", "--port", str(port), "--enable-lora"]
        command += ["--max-loras", str(args.max_loras), "--max-cpu-loras", str(args.max_cpu_loras)]
        command += ["--max-lora-rank", str(args.max_lora_rank), "--max-model-len", str(args.max_model_len)]
        command += ["--max-num-seqs", str(args.max_num_seqs)]
        if args.device == "cpu":
            command += ["--dtype", args.dtype or "float32", "--enforce-eager"]
        elif args.dtype:
            command += ["--dtype", args.dtype]
        return command + list(args.vllm_arg)

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
            "VLLM_PLUGINS": "lora_filesystem_resolver",
            "VLLM_LORA_RESOLVER_CACHE_DIR": str(self.folder / "resolver"),
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        if self.args.device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.args.kv_cache_gb)
        if self.args.probe:
            probe_dir = self.folder / "probe"
            probe_dir.mkdir(exist_ok=True)
            (probe_dir / "sitecustomize.py").write_text(PROBE)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(probe_dir), os.environ.get("PYTHONPATH")) if p)
            env["LORAFLEET_PUBLISHED_PROBE"] = str(self.probe_path)
        return env

    def start(self) -> VllmServer:
        for _ in range(3):
            port = free_port()
            with self.log_path.open("wb") as log:
                self.proc = subprocess.Popen(
                    self.command(port), stdout=log, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True
                )
            deadline = time.monotonic() + self.args.startup_timeout_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                    conn.request("GET", "/health")
                    if conn.getresponse().status == 200:
                        self.port = port
                        return self
                except OSError:
                    pass
                time.sleep(1.0)
            text = self.log_path.read_text(errors="replace")
            self.stop()
            if "Address already in use" not in text:
                raise RuntimeError(f"vLLM did not start (see {self.log_path}):\n{text[-3000:]}")
        raise RuntimeError("vLLM found no free port in 3 tries")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)

    def probe(self) -> list[dict[str, Any]]:
        if not self.probe_path.exists():
            return []
        return [json.loads(line) for line in self.probe_path.read_text().splitlines() if line.strip()]


def stream(
    port: int, model: str, tenant: str | None, max_tokens: int, timeout_s: float, request_id: str | None = None
) -> Request:
    """One streamed completion; TTFT is the time to the first SSE `data:` chunk. `request_id` goes as
    X-Request-Id (nginx replaces it with its own $request_id; either way the chunks' id carries it)."""
    record = Request(tenant or "", model, -1, -1, time.time())
    body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "stream": True, "temperature": 0}
    body["ignore_eos"] = True
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "X-Lora-Adapter": model}
    if tenant:
        headers["X-Tenant-Id"] = tenant
        body["user"] = tenant
    if request_id:
        headers["X-Request-Id"] = request_id
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    started = time.perf_counter()
    record.sent = time.time()
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), headers)
        response = conn.getresponse()
        record.status = response.status
        if response.status != 200:
            record.error = response.read()[:300].decode(errors="replace")
            return record
        while True:
            line = response.fp.readline()
            if not line:
                break
            if not line.startswith(b"data:"):
                continue
            if line.strip() == b"data: [DONE]":
                break
            if record.ttft_ms is None:
                record.ttft_ms = (time.perf_counter() - started) * 1000
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    record.request_id = json.loads(line[5:])["id"]
            record.chunks += 1
        record.total_ms = (time.perf_counter() - started) * 1000
    except OSError as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return record


# ---------------------------------------------------------------------------------------------------- workload


def make_plans(ids: Sequence[str], tenants: int, requests: int, pause_s: float, seed: int) -> list[Plan]:
    """Each tenant's chain (3 or 4 distinct adapters; no two tenants alike; every adapter in some chain when
    there are steps enough) and its steps, `requests` in all."""
    rng = random.Random(seed)
    lengths = [min(len(ids), 3 + i % 2) for i in range(tenants)]
    cover = sum(lengths) >= len(ids)
    for _ in range(10_000):
        chains = [rng.sample(list(ids), n) for n in lengths]
        distinct = len({tuple(c) for c in chains}) == len(chains)
        if distinct and (not cover or {a for c in chains for a in c} == set(ids)):
            break
    else:
        raise SystemExit("no set of distinct chains found: give more --adapters or fewer --tenants")
    plans = []
    for i, chain in enumerate(chains):
        quota = requests // tenants + (1 if i < requests % tenants else 0)
        plan = Plan(f"t{i}", chain)
        for n in range(quota):
            step, round_ = n % len(chain), n // len(chain)
            last = step == len(chain) - 1
            plan.steps.append((chain[step], step, round_, rng.uniform(0.0, 2 * pause_s) if last else 0.0))
        plans.append(plan)
    return plans


def run_tenant(port: int, plan: Plan, args: argparse.Namespace, out: list[Request]) -> None:
    for adapter, step, round_, pause in plan.steps:
        record = stream(port, adapter, plan.tenant, args.max_tokens, args.request_timeout_s)
        record.step, record.round = step, round_
        out.append(record)
        if pause:
            time.sleep(pause)


def run_workload(port: int, plans: list[Plan], args: argparse.Namespace) -> tuple[list[Request], float]:
    results: list[Request] = []
    threads = [threading.Thread(target=run_tenant, args=(port, plan, args, results)) for plan in plans]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, time.monotonic() - started


# ---------------------------------------------------------------------------------------------------- lorafleet


def write_inventory(folder: Path, url: str, assets: Assets, plans: list[Plan], args: argparse.Namespace) -> Path:
    shape = assets.shape
    adapters = "".join(
        f"  - {{id: {a.id}, base_model: m, path: '{folder / 'resolver' / a.id}', "
        f"files: '{folder / 'resolver' / a.id}'}}\n"
        for a in assets.adapters
    )
    tenants = "".join(f"  {p.tenant}: {{workflows: [[{', '.join(p.chain)}]]}}\n" for p in plans)
    text = (
        "base_models:\n"
        f"  m: {{hidden_size: {shape['hidden_size']}, intermediate_size: {shape['intermediate_size']}, "
        f"num_layers: {shape['num_layers']}, num_attention_heads: {shape['num_attention_heads']}, "
        f"num_kv_heads: {shape['num_kv_heads']}, dtype: {shape['dtype']}}}\n"
        "hosts:\n  - name: local\n    provider: onprem\n    connection: local\n    engines:\n"
        f"      - {{name: vllm, kind: vllm, url: '{url}', base_model: m, max_loras: {args.max_loras}, "
        f"max_cpu_loras: {args.max_cpu_loras}, max_lora_rank: {args.max_lora_rank}, "
        f"request_timeout_s: {args.request_timeout_s}}}\n"
        f"adapters:\n{adapters}"
        f"tenants:\n{tenants}"
        "gateway:\n  logs:\n    - path: nginx/access.jsonl\n      format: jsonl\n"
        "      fields: {time: ts, tenant: tenant, adapter: adapter, engine: upstream, status: status, "
        "duration_s: duration_s, request_id: request_id}\n"
    )
    path = folder / "inventory.yaml"
    path.write_text(text)
    return path


def start_daemon(inventory: Path, state: Path, hints_port: int, prime: bool = False) -> subprocess.Popen[bytes]:
    """`lorafleet daemon` with start hints on `hints_port`; `prime`: its vLLM re-warm patched to the prime."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, *(("-c", PRIME_LAUNCHER) if prime else ("-m", "lorafleet"))]
    command += ["daemon", "-i", str(inventory), "--state", str(state), "-v"]
    command += ["--metrics-addr", "off", "--hints-addr", f"127.0.0.1:{hints_port}", "--json"]
    log = state.with_suffix(".log")
    with log.open("wb") as err, state.with_suffix(".json").open("wb") as out:
        proc = subprocess.Popen(command, stderr=err, stdout=out, env=env, cwd=str(inventory.parent))
    deadline = time.monotonic() + 60
    while b"following" not in log.read_bytes() or b"start hints" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the daemon did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    return proc


def stop_daemon(proc: subprocess.Popen[bytes], state: Path) -> dict[str, Any] | None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    try:
        summary: dict[str, Any] = json.loads(state.with_suffix(".json").read_text())
        return summary
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------- analysis


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def ttft_summary(records: Sequence[Request]) -> dict[str, Any]:
    values = [r.ttft_ms for r in records if r.ttft_ms is not None]
    return {
        "n": len(values),
        "p50_ms": rounded(quantile(values, 0.5)),
        "p99_ms": rounded(quantile(values, 0.99)),
        "mean_ms": rounded(statistics.fmean(values)) if values else None,
    }


def reads_of(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The probe's lines that read an adapter into the CPU cache (it was not there, or an in-place load)."""
    return [e for e in events if e.get("kind") == "add" and (not e["cached"] or e["inplace"])]


def engine_id(internal: str) -> str:
    """vLLM's internal request id "cmpl-<id>-<n>-<8 hex>" as the completion's id "cmpl-<id>"."""
    parts = internal.rsplit("-", 2)
    return parts[0] if len(parts) == 3 else internal


def mark_cold(records: Sequence[Request], events: Sequence[dict[str, Any]]) -> None:
    """The engine's word on each request: cold when the engine step that first ran it (its prefill) had to read
    its adapter into the CPU cache, or when it waited for an API load of its adapter (the resolver's first load,
    a prefetch that came late); warm otherwise; None when its step is not in the probe's lines."""
    first_step: dict[str, dict[str, Any]] = {}
    for line in events:
        if line.get("kind") == "step":
            for internal in line["new"]:
                first_step.setdefault(engine_id(internal), line)
    api = [e for e in reads_of(events) if not e["demand"]]
    for r in records:
        step = first_step.get(r.request_id or "")
        if step is None or r.ttft_ms is None:
            continue
        if r.adapter in step["loaded"]:
            r.cold, r.cold_by = True, "own step"
        elif any(e["adapter"] == r.adapter and e["end"] > r.sent and e["start"] < step["start"] for e in api):
            r.cold, r.cold_by = True, "api"
        else:
            r.cold = False


def mean_ms(events: Sequence[dict[str, Any]]) -> float | None:
    return rounded(statistics.fmean([(e["end"] - e["start"]) * 1000 for e in events])) if events else None


def analyse(
    records: list[Request], events: list[dict[str, Any]], assets: Assets, wall_s: float, probe: bool
) -> dict[str, Any]:
    if probe:
        mark_cold(records, events)
    ok = [r for r in records if r.ttft_ms is not None and r.status == 200]
    rank = {a.id: a.rank for a in assets.adapters}
    cold = [r for r in ok if r.cold]
    warm = [r for r in ok if r.cold is False]
    later = [r for r in ok if r.step > 0]
    per_rank = {}
    for value in sorted(set(rank.values())):
        of_rank = [r for r in ok if rank[r.adapter] == value]
        cold_of_rank = [r for r in of_rank if r.cold]
        per_rank[str(value)] = {
            "requests": len(of_rank),
            "cold": len(cold_of_rank),
            "ttft_p50_ms": ttft_summary(of_rank)["p50_ms"],
            "cold_ttft_p50_ms": ttft_summary(cold_of_rank)["p50_ms"],
            "cold_ttft_mean_ms": ttft_summary(cold_of_rank)["mean_ms"],
            "warm_ttft_p50_ms": ttft_summary([r for r in of_rank if r.cold is False])["p50_ms"],
        }
    reads = reads_of(events)
    demand_misses = [e for e in reads if e["demand"] and not e["cached"]]
    demand_inplace = [e for e in reads if e["demand"] and e["cached"]]  # a stored load_inplace request, re-read
    api = [e for e in reads if not e["demand"]]
    slots = [e for e in events if e.get("kind") == "add" and e["cached"] and not e["inplace"] and not e["active"]]
    told = [r for r in ok if r.cold is not None]
    result: dict[str, Any] = {
        "requests": len(records),
        "failed": len(records) - len(ok),
        "errors": sorted({r.error or f"HTTP {r.status}" for r in records if r not in ok})[:5],
        "wall_s": round(wall_s, 1),
        "requests_per_s": round(len(ok) / wall_s, 2) if wall_s else None,
        "ttft": ttft_summary(ok),
        "ttft_later_steps": ttft_summary(later),
        "total_ms_p50": rounded(quantile([r.total_ms for r in ok if r.total_ms is not None], 0.5)),
        "per_rank": per_rank,
    }
    if not probe:
        return result
    result |= {
        "told_apart": len(told),
        "ttft_cold": ttft_summary(cold),
        "ttft_warm": ttft_summary(warm),
        "cold_requests": len(cold),
        "cold_by_own_step": sum(1 for r in cold if r.cold_by == "own step"),
        "cold_by_api_load": sum(1 for r in cold if r.cold_by == "api"),
        "cold_share": round(len(cold) / len(told), 4) if told else None,
        "cold_share_later_steps": (
            round(sum(1 for r in later if r.cold) / max(1, sum(1 for r in later if r.cold is not None)), 4)
        ),
        "engine_reads": len(reads),
        "engine_reads_ms_total": round(sum((e["end"] - e["start"]) * 1000 for e in reads), 1),
        "engine_reads_missed": len(demand_misses),
        "engine_reads_inplace_flag": len(demand_inplace),
        "engine_reads_api": len(api),
        "engine_read_ms_by_rank": {
            str(value): mean_ms([e for e in reads if rank.get(e["adapter"]) == value])
            for value in sorted(set(rank.values()))
        },
        "slot_activations": len(slots),
        "slot_activation_ms_mean": mean_ms(slots),
    }
    return result


def calibrate(server: VllmServer, assets: Assets, args: argparse.Namespace) -> dict[str, Any]:
    """Straight to the engine, one request at a time: each adapter in turn (evicted from the CPU cache since its
    last use: the order cycles through more adapters than max_cpu_loras), then the same adapter at once (warm).
    A pair counts when the probe confirms the first was cold and the second warm (all pairs without a probe)."""
    pairs: list[tuple[Adapter, Request, Request]] = []
    since = time.time()
    for _ in range(args.calibration_rounds):
        for adapter in assets.adapters:
            pair = [
                stream(server.port, adapter.id, None, args.max_tokens, args.request_timeout_s, uuid.uuid4().hex)
                for _ in range(2)
            ]
            pairs.append((adapter, pair[0], pair[1]))
    events = [e for e in server.probe() if e["start"] >= since]
    if args.probe:
        mark_cold([r for _, c, w in pairs for r in (c, w)], events)
    out: dict[str, Any] = {}
    for value in sorted({a.rank for a in assets.adapters}):
        chosen = [(c, w) for a, c, w in pairs if a.rank == value and c.ttft_ms and w.ttft_ms]
        confirmed = [(c, w) for c, w in chosen if (c.cold and w.cold is False) or not args.probe]
        cold_ttft = [c.ttft_ms for c, _ in confirmed if c.ttft_ms]
        warm_ttft = [w.ttft_ms for _, w in confirmed if w.ttft_ms]
        costs = [c.ttft_ms - w.ttft_ms for c, w in confirmed if c.ttft_ms and w.ttft_ms]
        ids = {a.id for a in assets.adapters if a.rank == value}
        reads = [(e["end"] - e["start"]) * 1000 for e in reads_of(events) if e["adapter"] in ids]
        out[str(value)] = {
            "pairs": len(chosen),
            "confirmed": len(confirmed),
            "cold_ttft_ms": rounded(statistics.median(cold_ttft)) if cold_ttft else None,
            "warm_ttft_ms": rounded(statistics.median(warm_ttft)) if warm_ttft else None,
            "cold_cost_ms": rounded(statistics.median(costs)) if costs else None,
            "engine_read_ms": rounded(statistics.median(reads)) if reads else None,
        }
    return out


def first_loads(events: list[dict[str, Any]], assets: Assets) -> dict[str, float | None]:
    """Each adapter's first read after the engine started (through the resolver, from disk), in ms."""
    out: dict[str, float | None] = {}
    for adapter in assets.adapters:
        mine = [e for e in reads_of(events) if e["adapter"] == adapter.id]
        out[adapter.id] = rounded((mine[0]["end"] - mine[0]["start"]) * 1000) if mine else None
    return out


# ---------------------------------------------------------------------------------------------------- modes


def run_mode(mode: str, assets: Assets, plans: list[Plan], args: argparse.Namespace, keep: Path | None) -> Any:
    with tempfile.TemporaryDirectory(prefix=f"lorafleet-published-{mode}-") as tmp:
        folder = Path(tmp)
        write_resolver_dir(folder / "resolver", assets)
        (folder / "nginx").mkdir()
        (folder / "nginx" / "access.jsonl").touch()
        server = VllmServer(folder, assets, args)
        gateway: NginxGateway | None = None
        daemon: subprocess.Popen[bytes] | None = None
        summary: dict[str, Any] | None = None
        calibration: dict[str, Any] | None = None
        started = time.monotonic()
        try:
            print(f"[{mode}] starting vLLM …", file=sys.stderr, flush=True)
            server.start()
            startup_s = time.monotonic() - started
            warmup = stream(server.port, assets.model, None, args.max_tokens, args.request_timeout_s)
            if warmup.status != 200:
                raise RuntimeError(f"the base model's warm-up request failed: {warmup.status} {warmup.error}")
            hints_port = free_port()
            lorafleet = mode.startswith("lorafleet")
            if lorafleet:
                inventory = write_inventory(folder, server.url, assets, plans, args)
                daemon = start_daemon(inventory, folder / "state.db", hints_port, prime=mode.endswith("-prime"))
            gateway = NginxGateway(folder / "nginx", [server.url], hints_port, mirror=lorafleet)
            gateway.start()
            print(f"[{mode}] {sum(len(p.steps) for p in plans)} requests …", file=sys.stderr, flush=True)
            records, wall_s = run_workload(gateway.port, plans, args)
            time.sleep(1.0)  # the last log lines and hints reach the daemon
            if daemon is not None:
                summary = stop_daemon(daemon, folder / "state.db")
                daemon = None
            workload_events = server.probe()
            if args.probe and not any(e.get("kind") == "step" for e in workload_events):
                print(f"[{mode}] the probe wrote no step lines: see {server.log_path}", file=sys.stderr, flush=True)
            if mode == "engines-alone" and args.calibration_rounds:
                print(f"[{mode}] calibrating the cold cost …", file=sys.stderr, flush=True)
                calibration = calibrate(server, assets, args)
        finally:
            if daemon is not None:
                daemon.kill()
                daemon.wait(10)
            if gateway is not None:
                gateway.stop()
            server.stop()
            if keep is not None:
                import shutil

                shutil.copytree(folder, keep / mode, dirs_exist_ok=True, symlinks=True)
        if keep is not None:
            (keep / mode / "requests.json").write_text(json.dumps([asdict(r) for r in records]))
        result = analyse(records, workload_events, assets, wall_s, args.probe)
        result["mode"] = mode
        result["engine_startup_s"] = round(startup_s, 1)
        result["first_load_ms"] = first_loads(workload_events, assets) if args.probe else None
        if summary is not None:
            keys = ["requests", "hits", "late", "misses", "loads", "prefetch_loads", "prefetch_used"]
            keys += ["wasted_prefetches", "touches", "evictions", "failed", "cold_ms_paid", "cold_ms_avoided"]
            result["lorafleet"] = {k: summary[k] for k in keys if k in summary}
            result["lorafleet"]["engines_alone_simulated"] = summary.get("engines_alone")
        return result, calibration


def comparison(rows: dict[str, dict[str, Any]], mode: str) -> dict[str, Any] | None:
    """`mode` against engines alone: each TTFT figure, before and after, and the cold share's change in points."""
    base, hints = rows.get("engines-alone"), rows.get(mode)
    if base is None or hints is None:
        return None
    out: dict[str, Any] = {}
    for key in ("ttft", "ttft_later_steps", "ttft_cold", "ttft_warm"):
        if not base.get(key) or not hints.get(key):
            continue
        for stat in ("p50_ms", "p99_ms", "mean_ms"):
            a, b = base[key][stat], hints[key][stat]
            if a is not None and b is not None:
                out[f"{key}.{stat}"] = {"engines_alone": a, "lorafleet": b, "change_pct": round((b - a) / a * 100, 1)}
    if base.get("cold_share") is not None and hints.get("cold_share") is not None:
        out["cold_share_points"] = round((hints["cold_share"] - base["cold_share"]) * 100, 1)
    return out


def fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}{suffix}"
    return f"{value}{suffix}"


def print_report(report: dict[str, Any]) -> None:
    setup = report["setup"]
    shape = setup["shape"]
    print(
        f"vLLM {setup['vllm_python']} ({setup['device']}); model {setup['model']} ({shape['num_layers']} layers, "
        f"hidden {shape['hidden_size']}, {shape['dtype']}); --max-loras {setup['max_loras']} --max-cpu-loras "
        f"{setup['max_cpu_loras']} --max-lora-rank {setup['max_lora_rank']} --max-num-seqs {setup['max_num_seqs']}; "
        f"{setup['tenants']} tenants, {setup['requests']} requests of {setup['max_tokens']} tokens, streamed"
    )
    print("\nadapters: size on disk; engine read = add_adapter reading it into the CPU cache (first: from disk via")
    print("the resolver, in the engines-alone run; again: after an eviction); cold cost = TTFT cold - TTFT warm,")
    print("straight to the engine, one request at a time (median of confirmed pairs):")
    calibration = report.get("calibration") or {}
    print(
        f"{'rank':>6}{'adapters':>10}{'MB':>8}{'first read ms':>15}{'read again ms':>15}{'cold TTFT':>11}"
        f"{'warm TTFT':>11}{'cold cost ms':>14}{'pairs':>7}"
    )
    first = (report["modes"].get("engines-alone") or {}).get("first_load_ms") or {}
    for value in sorted({a["rank"] for a in report["adapters"]}):
        mine = [a for a in report["adapters"] if a["rank"] == value]
        firsts = [first[a["id"]] for a in mine if first.get(a["id"]) is not None]
        cal = calibration.get(str(value), {})
        print(
            f"{value:>6}{len(mine):>10}{statistics.fmean(a['bytes'] for a in mine) / 1e6:>8.1f}"
            f"{fmt(statistics.fmean(firsts) if firsts else None):>15}{fmt(cal.get('engine_read_ms')):>15}"
            f"{fmt(cal.get('cold_ttft_ms')):>11}{fmt(cal.get('warm_ttft_ms')):>11}{fmt(cal.get('cold_cost_ms')):>14}"
            f"{fmt(cal.get('confirmed')):>7}"
        )
    print("\nTTFT through nginx (ms); cold = the engine read the request's adapter for it (probe):")
    head = f"{'mode':<17}{'p50':>8}{'p99':>8}{'mean':>8}{'later p50':>11}{'later p99':>11}{'cold %':>8}"
    print(head + f"{'cold p50':>10}{'warm p50':>10}{'reads':>7}{'in-place':>10}{'failed':>8}{'wall s':>8}")
    for mode, row in report["modes"].items():
        cold_share = None if row.get("cold_share") is None else row["cold_share"] * 100
        print(
            f"{mode:<17}{fmt(row['ttft']['p50_ms']):>8}{fmt(row['ttft']['p99_ms']):>8}{fmt(row['ttft']['mean_ms']):>8}"
            f"{fmt(row['ttft_later_steps']['p50_ms']):>11}{fmt(row['ttft_later_steps']['p99_ms']):>11}"
            f"{fmt(cold_share):>8}{fmt((row.get('ttft_cold') or {}).get('p50_ms')):>10}"
            f"{fmt((row.get('ttft_warm') or {}).get('p50_ms')):>10}{fmt(row.get('engine_reads')):>7}"
            f"{fmt(row.get('engine_reads_inplace_flag')):>10}{row['failed']:>8}{row['wall_s']:>8.1f}"
        )
    print("\ncold-start TTFT by rank: p50 ms of the cold requests (cold / all requests of that rank):")
    ranks = list(next(iter(report["modes"].values()))["per_rank"])
    print(f"{'mode':<17}" + "".join(f"{'r' + r:>18}" for r in ranks))
    for mode, row in report["modes"].items():
        cells = [f"{fmt(v['cold_ttft_p50_ms'])} ({v['cold']}/{v['requests']})" for v in row["per_rank"].values()]
        print(f"{mode:<17}" + "".join(f"{c:>18}" for c in cells))
    for mode, compared in (report.get("comparison") or {}).items():
        print(f"\n{mode} vs engines-alone:")
        for key, value in (compared or {}).items():
            if isinstance(value, dict):
                print(
                    f"  {key:<26}{value['engines_alone']:>9.1f} -> {value['lorafleet']:>9.1f}  "
                    f"({value['change_pct']:+.1f}%)"
                )
            else:
                print(f"  {key:<26}{value:+.1f}")
    for mode, row in report["modes"].items():
        if row.get("lorafleet"):
            print(f"\n{mode}: lorafleet's own summary: {json.dumps(row['lorafleet'])}")
    print(f"\ntotal run time {report['total_s']:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=800)
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--adapters", type=int, default=10)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--model", help="vLLM's --model: a local folder or a cached Hugging Face id")
    parser.add_argument("--adapter-dir", help="a folder of PEFT adapter folders (needs --model)")
    parser.add_argument(
        "--vllm-python", type=Path, default=Path(os.environ.get("LORAFLEET_VLLM_PYTHON", DEFAULT_VLLM_PYTHON))
    )
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--dtype", help="vLLM's --dtype (default: float32 on cpu, the model's on gpu)")
    parser.add_argument("--max-loras", type=int, default=2)
    parser.add_argument("--max-cpu-loras", type=int, default=4)
    parser.add_argument("--max-lora-rank", type=int, help="default: the adapters' highest rank")
    parser.add_argument("--max-num-seqs", type=int, default=4)
    parser.add_argument("--max-model-len", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=4, help="tokens generated per request")
    parser.add_argument("--kv-cache-gb", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE (cpu only)")
    parser.add_argument("--vllm-arg", action="append", default=[], help="one more argument for vLLM (repeatable)")
    parser.add_argument("--round-pause-s", type=float, default=0.25, help="mean pause between a tenant's rounds")
    parser.add_argument("--calibration-rounds", type=int, default=5, help="cold/warm pairs per adapter; 0: none")
    parser.add_argument("--request-timeout-s", type=float, default=120.0)
    parser.add_argument("--startup-timeout-s", type=float, default=600.0)
    parser.add_argument("--no-probe", dest="probe", action="store_false", help="leave vLLM uninstrumented")
    parser.add_argument("--hidden", type=int, default=1024, help="built model: hidden size")
    parser.add_argument("--intermediate", type=int, default=2816, help="built model: MLP size")
    parser.add_argument("--layers", type=int, default=6, help="built model: layers")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="keep each mode's files (logs, probe, journal, requests) here")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--show", type=Path, metavar="REPORT", help="print the table of a saved --json report")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the engine, nginx and the daemon are stopped
    if args.show is not None:
        print_report(json.loads(args.show.read_text()))
        return
    if (args.model is None) != (args.adapter_dir is None):
        parser.error("--model and --adapter-dir go together (neither: the built model and adapters)")
    if not args.vllm_python.exists():
        parser.error(f"no vLLM Python at {args.vllm_python} (--vllm-python)")
    why = nginx_missing()
    if why:
        parser.error(why)
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES + EXTRA_MODES for m in modes):
        parser.error(f"--modes takes {', '.join(MODES + EXTRA_MODES)}")
    total_started = time.monotonic()
    assets = given_assets(args) if args.model else build_assets(args)
    highest = max(a.rank for a in assets.adapters)
    if args.max_lora_rank is None:
        args.max_lora_rank = next(r for r in VALID_MAX_RANKS if r >= highest)
    plans = make_plans([a.id for a in assets.adapters], args.tenants, args.requests, args.round_pause_s, args.seed)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {}
    calibration = None
    for mode in modes:
        row, cal = run_mode(mode, assets, plans, args, args.keep)
        rows[mode] = row
        calibration = calibration or cal
    report = {
        "setup": {
            "vllm_python": str(args.vllm_python),
            "device": args.device,
            "model": assets.model,
            "built": assets.built,
            "shape": assets.shape,
            "max_loras": args.max_loras,
            "max_cpu_loras": args.max_cpu_loras,
            "max_lora_rank": args.max_lora_rank,
            "max_num_seqs": args.max_num_seqs,
            "max_tokens": args.max_tokens,
            "tenants": args.tenants,
            "requests": args.requests,
            "round_pause_s": args.round_pause_s,
            "chains": {p.tenant: p.chain for p in plans},
            "probe": args.probe,
        },
        "adapters": [{"id": a.id, "rank": a.rank, "bytes": a.bytes} for a in assets.adapters],
        "calibration": calibration,
        "modes": rows,
        "comparison": {m: comparison(rows, m) for m in rows if m != "engines-alone" and "engines-alone" in rows},
        "total_s": round(time.monotonic() - total_started, 1),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)


if __name__ == "__main__":
    main()
