"""A real HTTP server on 127.0.0.1 that speaks vLLM's and SGLang's adapter APIs as engines.md describes them.

Status codes, message texts, plain-text success on vLLM, JSON bodies on SGLang, two LRU tiers with the
configured slot counts, a load delay proportional to adapter size, rank checks from adapter_config.json,
injectable faults (HTTP errors with Retry-After, hangs, restarts that empty the registry), and a generation time
for completions (a fixed part plus a per-token part, with a seeded spread) so that a gateway in front of it sees
requests as long as real ones. An adapter is in use while a completion naming it generates: as vLLM touches the
adapters of each step's batch, LRU never evicts it then, and its request's end leaves it the most recent. Used by
the warm tests, the daemon's and the gateway's.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Fault:
    status: int = 500
    times: int = 1
    message: str = "injected failure"
    retry_after: float | None = None
    hang_s: float = 0.0  # sleep before answering (a timeout when longer than the client's)
    path: str | None = None  # only requests to this path


@dataclass
class EngineState:
    kind: str
    served_model: str = "base-model"
    gpu_slots: int = 2
    host_slots: int | None = 4
    max_lora_rank: int = 64
    load_s_per_mb: float = 0.0
    api_key: str | None = None
    legacy_errors: bool = False  # old vLLM: flat error bodies
    legacy_cap: bool = False  # old SGLang: refuse loads at max_loaded_loras instead of evicting
    require_paths: bool = True  # False: accept any lora_path (for the README tour, which has no adapter files)
    registry: dict[str, str] = field(default_factory=dict)  # name -> path
    host: OrderedDict[str, None] = field(default_factory=OrderedDict)  # LRU first
    gpu: OrderedDict[str, None] = field(default_factory=OrderedDict)
    pinned: set[str] = field(default_factory=set)
    # Completions generating now, per adapter: vLLM activates (and so touches) the adapters of every request in
    # each step's batch, so one in use is never the least recently used and is most recent when its last request
    # ends (SGLang's pool marks them used per batch alike).
    running: dict[str, int] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str, dict[str, Any] | None]] = field(default_factory=list)
    loads: int = 0
    # vLLM's lazy resolver (VLLM_PLUGINS=lora_filesystem_resolver): a request naming an unregistered adapter
    # found here (name -> path) registers and loads it — the cold start on the request path.
    resolver: dict[str, str] = field(default_factory=dict)
    # What the engine itself saw for requests that are not lorafleet's own touches (prompt "ping"):
    served: dict[str, int] = field(default_factory=lambda: {"hit": 0, "miss": 0})
    peak_host: int = 0  # the most adapters it ever held in host memory
    # Generation time of a completion, slept after any adapter load and outside every lock (concurrent requests
    # overlap, as batched ones do): gen_fixed_s + gen_s_per_token × tokens, tokens being the request's
    # max_tokens (or max_completion_tokens), else gen_default_tokens; times a factor drawn uniformly from
    # [1 - gen_spread, 1 + gen_spread] by a Random seeded with gen_seed. lorafleet's touches (prompt "ping")
    # cost one token and no fixed part, so prefetching stays cheap. All 0: answers at once, as before.
    gen_fixed_s: float = 0.0
    gen_s_per_token: float = 0.0
    gen_spread: float = 0.0
    gen_seed: int = 0
    gen_default_tokens: int = 16
    # Per completion naming an adapter that is not a touch: (adapter, ms from the request's arrival to its first
    # token, hit). The wait is the adapter's load when it was not in host memory (the resolver's cold start
    # included): what a benchmark reads as the engine's time-to-first-token, generation excluded.
    ttft_ms: list[tuple[str, float, bool]] = field(default_factory=list)
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.gen_seed)

    def generation_s(self, body: dict[str, Any] | None) -> float:
        """How long this completion generates for (drawing the spread from the seeded Random: call it once)."""
        body = body or {}
        if body.get("prompt") == "ping":
            return max(0.0, self.gen_s_per_token)
        if not (self.gen_fixed_s or self.gen_s_per_token):
            return 0.0
        tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            tokens = self.gen_default_tokens
        spread = min(max(self.gen_spread, 0.0), 1.0)
        factor = self.rng.uniform(1.0 - spread, 1.0 + spread) if spread else 1.0
        return max(0.0, (self.gen_fixed_s + self.gen_s_per_token * tokens) * factor)

    def restart(self) -> None:
        """What an engine restart does: everything registered or cached is gone."""
        self.registry.clear()
        self.host.clear()
        self.gpu.clear()
        self.pinned.clear()


def adapter_rank(path: str) -> int | None:
    try:
        return int(json.loads((Path(path) / "adapter_config.json").read_text())["r"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def adapter_mb(path: str) -> float:
    try:
        return sum(p.stat().st_size for p in Path(path).glob("*.safetensors")) / 1e6
    except OSError:
        return 0.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without this, Nagle and delayed ACKs add 40 ms per request.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # plumbing ----------------------------------------------------------------------------------------------
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        state = self.server.state
        if state.kind == "sglang":
            self._send(status, {"success": False, "error_message": message, "loaded_adapters": dict(state.registry)})
        elif state.legacy_errors:
            self._send(status, {"object": "error", "message": message, "type": kind, "param": None, "code": status})
        else:
            self._send(status, {"error": {"message": message, "type": kind, "param": None, "code": status}})

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _handle(self, method: str) -> None:
        state = self.server.state
        body = self._body() if method == "POST" else None
        path = self.path.split("?")[0]
        with self.server.lock:
            state.requests.append((method, path, body))
            fault = next((f for f in state.faults if f.path in (None, path)), None)
            if fault is not None:
                fault.times -= 1
                if fault.times <= 0:
                    state.faults.remove(fault)
        if fault is not None:
            if fault.hang_s:
                time.sleep(fault.hang_s)
            if fault.status:
                headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else None
                self._send(
                    fault.status,
                    {"error": {"message": fault.message, "type": "Injected", "param": None, "code": fault.status}},
                    headers,
                )
                return
        if state.api_key is not None and self.headers.get("Authorization") != f"Bearer {state.api_key}":
            self._send(401, {"error": "Unauthorized"})
            return
        route = (method, path)
        handler = (VLLM_ROUTES if state.kind == "vllm" else SGLANG_ROUTES).get(route)
        if handler is None:
            self._error(404, f"no route {method} {path}", "NotFoundError")
            return
        handler(self, body or {})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    # shared semantics ----------------------------------------------------------------------------------------
    def _cache(self, name: str) -> None:
        """Load into host memory (LRU beyond host_slots) and a GPU slot (LRU beyond gpu_slots)."""
        state = self.server.state
        path = state.registry[name]
        if name not in state.host:
            delay = adapter_mb(path) * state.load_s_per_mb
            if delay:
                time.sleep(delay)
            state.loads += 1
        with self.server.lock:
            state.host.pop(name, None)
            state.host[name] = None
            while state.host_slots is not None and len(state.host) > state.host_slots:
                victim = next((a for a in state.host if a not in state.pinned and not state.running.get(a)), None)
                if victim is None:
                    break
                del state.host[victim]
                state.gpu.pop(victim, None)
                if state.kind == "sglang":
                    state.registry.pop(victim, None)  # SGLang's LRU eviction unloads it
            state.peak_host = max(state.peak_host, len(state.host))
            state.gpu.pop(name, None)
            state.gpu[name] = None
            while len(state.gpu) > state.gpu_slots:
                free = (a for a in state.gpu if a not in state.pinned and not state.running.get(a))
                victim = next(free, next(iter(state.gpu)))
                del state.gpu[victim]

    def models(self, body: dict[str, Any]) -> None:
        state = self.server.state
        cards = [{"id": state.served_model, "object": "model", "root": "/models/base", "parent": None}]
        cards += [
            {"id": n, "object": "model", "root": p, "parent": state.served_model} for n, p in state.registry.items()
        ]
        self._send(200, {"object": "list", "data": cards})

    def health(self, body: dict[str, Any]) -> None:
        self._send(200, "")

    def _complete(self, adapter: str | None, body: dict[str, Any] | None = None) -> None:
        """Load the adapter when it is not cached (the request waits, as on a real engine), then generate."""
        state = self.server.state
        arrived = time.monotonic()
        touch = (body or {}).get("prompt") == "ping"
        headers: dict[str, str] = {}
        if adapter is not None:
            with self.server.lock:
                hit = adapter in state.host
                if not touch:
                    state.served["hit" if hit else "miss"] += 1
                state.running[adapter] = state.running.get(adapter, 0) + 1
        try:
            if adapter is not None:
                self._cache(adapter)
                if not touch:
                    waited_ms = (time.monotonic() - arrived) * 1000.0
                    with self.server.lock:
                        state.ttft_ms.append((adapter, waited_ms, hit))
                    headers["X-Emulator-Cache"] = "hit" if hit else "miss"  # the engine's own verdict
            with self.server.lock:
                generate = state.generation_s(body)
            if generate:
                time.sleep(generate)  # no lock held: concurrent requests generate side by side
        finally:
            if adapter is not None:
                self._ended(adapter)
        self._send(
            200,
            {
                "object": "text_completion",
                "model": adapter or state.served_model,
                "choices": [{"index": 0, "text": " warm", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
            headers,
        )

    def _ended(self, adapter: str) -> None:
        """A completion's last step: its adapter is the most recent in both tiers (every step touched it)."""
        state = self.server.state
        with self.server.lock:
            left = state.running.get(adapter, 1) - 1
            if left > 0:
                state.running[adapter] = left
            else:
                state.running.pop(adapter, None)
            for tier in (state.host, state.gpu):
                if adapter in tier:
                    tier.move_to_end(adapter)

    # vLLM ----------------------------------------------------------------------------------------------------
    def vllm_load(self, body: dict[str, Any]) -> None:
        state = self.server.state
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            self._error(400, "Both 'lora_name' and 'lora_path' must be provided.")
            return
        if name in state.registry and not body.get("load_inplace"):
            self._error(
                400,
                f"The lora adapter '{name}' has already been loaded. If you want to load the adapter "
                "in place, set 'load_inplace' to True.",
                "InvalidUserInput",
            )
            return
        if state.require_paths and not os.path.isdir(path):
            self._error(404, f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError")
            return
        rank = adapter_rank(path)
        if rank is not None and rank > state.max_lora_rank:
            self._error(
                500,
                f"Call to add_lora method failed: Worker failed with error 'LoRA rank {rank} is greater "
                f"than max_lora_rank {state.max_lora_rank}.', please check the stack trace above for "
                "the root cause",
                "InternalServerError",
            )
            return
        state.registry[name] = path
        if body.get("load_inplace"):
            state.host.pop(name, None)  # re-read from disk
        self._cache(name)
        self._send(200, f"Success: LoRA adapter '{name}' added successfully.")

    def vllm_unload(self, body: dict[str, Any]) -> None:
        state = self.server.state
        name = body.get("lora_name")
        if name not in state.registry:
            self._error(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
            return
        del state.registry[name]  # known defect: the weights keep their slot until LRU pushes them out
        self._send(200, f"Success: LoRA adapter '{name}' removed successfully.")

    def vllm_complete(self, body: dict[str, Any]) -> None:
        state = self.server.state
        model = body.get("model")
        if model == state.served_model:
            self._complete(None, body)
        elif model in state.registry:
            self._complete(model, body)
        elif model in state.resolver:
            state.registry[str(model)] = state.resolver[str(model)]
            self._complete(model, body)
        else:
            self._error(404, f"The model `{model}` does not exist.", "NotFoundError")

    def vllm_metrics(self, body: dict[str, Any]) -> None:
        state = self.server.state
        running = ",".join(state.gpu)
        self._send(
            200,
            (
                "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
                "# TYPE vllm:lora_requests_info gauge\n"
                f'vllm:lora_requests_info{{max_lora="{state.gpu_slots}",running_lora_adapters="",'
                f'waiting_lora_adapters=""}} {time.time() - 60!r}\n'
                f'vllm:lora_requests_info{{max_lora="{state.gpu_slots}",running_lora_adapters="{running}",'
                f'waiting_lora_adapters=""}} {time.time()!r}\n'
            ),
        )

    # SGLang --------------------------------------------------------------------------------------------------
    def sglang_load(self, body: dict[str, Any]) -> None:
        state = self.server.state
        name, path, pinned = body.get("lora_name"), body.get("lora_path"), bool(body.get("pinned"))
        if name in state.registry:
            self._error(400, f"LoRA with name {name} already exists. Loaded LoRA adapters: {dict(state.registry)}")
            return
        if not path or (state.require_paths and not os.path.isdir(path)):
            self._error(400, f"Failed to load LoRA adapter {name} from {path}: no such directory")
            return
        rank = adapter_rank(path)
        if rank is not None and rank > state.max_lora_rank:
            self._error(
                400,
                f"LoRA adapter {name} with rank {rank} is incompatible with the current LoRA memory "
                f"pool configuration (max_lora_rank={state.max_lora_rank}).",
            )
            return
        if state.legacy_cap and state.host_slots is not None and len(state.registry) >= state.host_slots:
            self._error(
                400,
                f"Cannot load LoRA adapter {name} at this time. Maximum number of loaded LoRA adapters "
                f"is {state.host_slots}.",
            )
            return
        if pinned and len(state.pinned) >= state.gpu_slots - 1:
            self._error(400, f"Cannot pin LoRA adapter {name}: at most {state.gpu_slots - 1} adapters may be pinned.")
            return
        state.registry[name] = path
        if pinned:
            state.pinned.add(name)
        with self.server.lock:
            state.host.pop(name, None)
        self._cache(name)
        state.gpu.pop(name, None)  # SGLang: a load fills host memory; the first batch takes the GPU slot
        self._send(200, {"success": True, "error_message": None, "loaded_adapters": dict(state.registry)})

    def sglang_unload(self, body: dict[str, Any]) -> None:
        state = self.server.state
        name = body.get("lora_name")
        if name not in state.registry:
            self._error(400, f"LoRA with name {name} does not exist. Loaded LoRA adapters: {dict(state.registry)}")
            return
        del state.registry[name]
        state.host.pop(name, None)
        state.gpu.pop(name, None)
        state.pinned.discard(name)
        self._send(200, {"success": True, "error_message": None, "loaded_adapters": dict(state.registry)})

    def sglang_info(self, body: dict[str, Any]) -> None:
        state = self.server.state
        self._send(
            200,
            {
                "model_path": "/models/base",
                "served_model_name": state.served_model,
                "enable_lora": True,
                "max_loras_per_batch": state.gpu_slots,
                "max_loaded_loras": state.host_slots,
                "max_lora_rank": state.max_lora_rank,
                "lora_eviction_policy": "lru",
            },
        )

    def sglang_complete(self, body: dict[str, Any]) -> None:
        state = self.server.state
        model = str(body.get("model", ""))
        base, _, adapter = model.partition(":")
        if base != state.served_model:
            self._error(400, f"The model `{model}` does not exist.")
        elif adapter and adapter not in state.registry:
            self._error(400, f"LoRA adapter {adapter} is not loaded.")
        else:
            self._complete(adapter or None, body)


VLLM_ROUTES = {
    ("POST", "/v1/load_lora_adapter"): _Handler.vllm_load,
    ("POST", "/v1/unload_lora_adapter"): _Handler.vllm_unload,
    ("GET", "/v1/models"): _Handler.models,
    ("POST", "/v1/completions"): _Handler.vllm_complete,
    ("POST", "/v1/chat/completions"): _Handler.vllm_complete,
    ("GET", "/metrics"): _Handler.vllm_metrics,
    ("GET", "/health"): _Handler.health,
}
SGLANG_ROUTES = {
    ("POST", "/load_lora_adapter"): _Handler.sglang_load,
    ("POST", "/unload_lora_adapter"): _Handler.sglang_unload,
    ("GET", "/v1/models"): _Handler.models,
    ("GET", "/get_server_info"): _Handler.sglang_info,
    ("POST", "/v1/completions"): _Handler.sglang_complete,
    ("POST", "/v1/chat/completions"): _Handler.sglang_complete,
    ("GET", "/health"): _Handler.health,
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: EngineState, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.state = state
        self.lock = threading.Lock()


class EngineEmulator:
    """Start with `EngineEmulator(EngineState(kind="vllm", ...))`; `.url`, `.state`, `.stop()`."""

    def __init__(self, state: EngineState) -> None:
        self.state = state
        self.server = _Server(state)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


DEMO_INVENTORY = Path(__file__).resolve().parent.parent / "inventories" / "demo.yaml"
# The demo base model's projections (llama3-8b): (inputs, outputs) of each module an adapter may target.
LLAMA3_8B_MODULES = {
    "q_proj": (4096, 4096), "k_proj": (4096, 1024), "v_proj": (4096, 1024), "o_proj": (4096, 4096),
    "gate_proj": (4096, 14336), "up_proj": (4096, 14336), "down_proj": (14336, 4096),
}  # fmt: skip


def write_demo_adapters(inventory_text: str, folder: Path) -> str:
    """Real PEFT folders for the demo's adapters (zero weights, sparse: nothing is read but their headers), and
    the inventory pointing at them: a daemon checking that registered adapters' files exist finds them."""
    import re

    from tests.peft_files import write_peft_adapter

    def replace(match: re.Match[str]) -> str:
        line = match.group(0)
        adapter = re.search(r"id: ([\w-]+)", line)
        rank = re.search(r"rank: (\d+)", line)
        targets = re.search(r"target_modules: \[([^\]]*)\]", line)
        if not (adapter and rank and targets):
            return line
        names = [t.strip() for t in targets.group(1).split(",")]
        modules = LLAMA3_8B_MODULES if names == ["all-linear"] else {n: LLAMA3_8B_MODULES[n] for n in names}
        path = folder / adapter.group(1)
        write_peft_adapter(path, int(rank.group(1)), modules, layers=32)
        return re.sub(r"path: \S+,", f"path: {path},", line)

    return re.sub(r"^  - \{id: .*\}$", replace, inventory_text, flags=re.MULTILINE)


DEMO_PORTS = {"vllm": 18000, "sglang": 18001}


def main() -> None:
    """Serve an emulated vLLM and SGLang engine on loopback until interrupted (for trying `lorafleet warm`)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--vllm-port", type=int, default=DEMO_PORTS["vllm"])
    parser.add_argument("--sglang-port", type=int, default=DEMO_PORTS["sglang"])
    parser.add_argument("--port", type=int, choices=[0], help="0: both engines on free ports (printed)")
    parser.add_argument(
        "--write-inventory",
        metavar="PATH",
        help="write the demo inventory with the ports taken to PATH (then: lorafleet warm … -i PATH)",
    )
    parser.add_argument("--gen-ms", type=float, default=0.0, help="fixed generation time of a completion (ms)")
    parser.add_argument(
        "--gen-ms-per-token", type=float, default=0.0, help="generation time per token of max_tokens (ms)"
    )
    parser.add_argument(
        "--gen-spread", type=float, default=0.0, help="generation time drawn uniformly within ± this fraction"
    )
    parser.add_argument("--gen-seed", type=int, default=0, help="seed of the spread's draws")
    args = parser.parse_args()
    ports = {"vllm": args.vllm_port, "sglang": args.sglang_port}
    if args.port == 0:
        ports = {"vllm": 0, "sglang": 0}
    servers = []
    for kind, port in ports.items():
        state = EngineState(
            kind=kind,
            served_model="meta-llama/Meta-Llama-3-8B-Instruct",
            max_lora_rank=128,
            gpu_slots=2,
            host_slots=2,
            require_paths=args.write_inventory is not None,  # with --write-inventory the adapters' files exist
            gen_fixed_s=args.gen_ms / 1000.0,
            gen_s_per_token=args.gen_ms_per_token / 1000.0,
            gen_spread=args.gen_spread,
            gen_seed=args.gen_seed,
        )
        try:
            server = _Server(state, port)
        except OSError as exc:
            print(f"error: cannot listen on 127.0.0.1:{port} ({exc.strerror}); try --port 0", file=sys.stderr)
            raise SystemExit(2) from None
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        ports[kind] = server.server_address[1]
        print(f"emulated {kind} engine on http://127.0.0.1:{ports[kind]}", flush=True)
    if args.write_inventory:
        text = DEMO_INVENTORY.read_text(encoding="utf-8")
        for kind, port in ports.items():
            text = text.replace(f"http://127.0.0.1:{DEMO_PORTS[kind]}", f"http://127.0.0.1:{port}")
        written = Path(args.write_inventory)
        text = write_demo_adapters(text, written.with_name(written.stem + "-adapters"))
        written.write_text(text, encoding="utf-8")
        print(f"wrote {args.write_inventory} (adapters' files under {written.stem}-adapters/)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        for server in servers:
            server.shutdown()


if __name__ == "__main__":
    main()
