"""What each engine kind is and lets a controller do: one small table, read by every layer.

Nothing else in lorafleet knows an engine kind by name. The inventory reads its setting names, defaults and
allowed ranks here; the residency book whether a load fills a GPU slot; placement and `warm` the pin limit; the
engine layer which client class speaks the kind's API (named, not imported, so this table stays pure). The facts
come from the engines' own source (see docs/engines.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineKind:
    name: str
    title: str  # as the engine's own docs write it
    gpu_slots_key: str  # the inventory key (and launch flag, with dashes) for the GPU tier
    host_slots_key: str  # the inventory key for the host-memory cache
    gpu_slots_default: int
    host_slots_default_is_gpu: bool  # True: the host cache defaults to the GPU slots; False: no cap
    ranks: tuple[int, ...] | None  # the max_lora_rank values the engine accepts; None: any positive rank
    max_rank_default: int | None  # the engine's own default max_lora_rank; None: it derives one from --lora-paths
    load_fills_gpu: bool  # a load copies the adapter into a GPU slot at once (else the first request does)
    engine_pins: bool  # the engine itself holds pins (a pin is sent with the load)
    unload_frees: bool  # an unload frees the adapter's memory (vLLM's only drops the name)
    loads_on_request: bool  # a request naming a registered adapter not in memory loads it (else a load call must)
    client: str  # "module:Class" of the client that speaks this kind's API

    def max_pinned(self, gpu_slots: int) -> int:
        """How many adapters may be pinned: one GPU slot always stays free for everything else.

        SGLang enforces this itself; on vLLM a pin is lorafleet's intent (kept recent), held to the same bound
        so the engine's LRU always has a slot to rotate.
        """
        return max(0, gpu_slots - 1)

    def flag(self, key: str) -> str:
        """The launch flag of an inventory setting (`max_loras` -> `--max-loras`)."""
        return "--" + key.replace("_", "-")


VLLM = EngineKind(
    name="vllm",
    title="vLLM",
    gpu_slots_key="max_loras",
    host_slots_key="max_cpu_loras",
    gpu_slots_default=1,
    host_slots_default_is_gpu=True,
    ranks=(1, 8, 16, 32, 64, 128, 256, 320, 512),
    max_rank_default=16,
    load_fills_gpu=True,
    engine_pins=False,
    unload_frees=False,
    loads_on_request=True,
    client="lorafleet.engines.vllm:VllmClient",
)

SGLANG = EngineKind(
    name="sglang",
    title="SGLang",
    gpu_slots_key="max_loras_per_batch",
    host_slots_key="max_loaded_loras",
    gpu_slots_default=8,
    host_slots_default_is_gpu=False,
    ranks=None,
    max_rank_default=None,
    load_fills_gpu=False,
    engine_pins=True,
    unload_frees=True,
    loads_on_request=False,
    client="lorafleet.engines.sglang:SglangClient",
)

KINDS: dict[str, EngineKind] = {k.name: k for k in (VLLM, SGLANG)}
ENGINE_KINDS: tuple[str, ...] = tuple(KINDS)


def kind_of(name: str) -> EngineKind:
    """The profile of a kind the inventory accepted (an unknown name is a bug: the loader refuses it)."""
    return KINDS[name]


def slot_keys() -> tuple[str, ...]:
    """Every kind's slot settings, in table order."""
    return tuple(key for k in KINDS.values() for key in (k.gpu_slots_key, k.host_slots_key))


def equivalent_key(key: str, kind: EngineKind) -> str:
    """On `kind`, the setting that plays the role `key` plays on another kind."""
    for other in KINDS.values():
        if key == other.gpu_slots_key:
            return kind.gpu_slots_key
        if key == other.host_slots_key:
            return kind.host_slots_key
    return key
