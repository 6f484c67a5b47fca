"""vLLM's runtime LoRA API (needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING).

Load answers plain text on success and 400 "has already been loaded" for a registered name. Re-warming a
registered adapter is a 1-token completion naming it, which pulls it back into the caches — never
`load_inplace`: vLLM keeps that flag on the adapter's stored request, so every later request naming it reads
it from disk again (0.32: `LRUCacheWorkerLoRAManager.add_adapter` reloads whenever `load_inplace` is set; a
real-engine run through nginx spent 69 s instead of 16.5 s reading adapters, TTFT p50 +14%). An unload frees
nothing on the GPU (vllm issues 42633, 54839): callers never count it as freed budget.
"""

from __future__ import annotations

import re

from lorafleet.engines.base import Activity, AlreadyLoadedError, EngineClient, EngineRejectedError, not_registered

_ALREADY = re.compile(r"has already been loaded", re.IGNORECASE)
# unload: "The lora adapter '<name>' cannot be found."; a request: "The model `<name>` does not exist."
_UNKNOWN = re.compile(r"cannot be found|does not exist", re.IGNORECASE)


class VllmClient(EngineClient):
    kind = "vllm"
    # vLLM answers these with 500 on some versions; asking again cannot help.
    final_errors = (
        re.compile(r"greater than max_lora_rank", re.IGNORECASE),
        re.compile(r"No adapter found", re.IGNORECASE),
        re.compile(r"must be provided", re.IGNORECASE),
    )

    def load(self, name: str, path: str, pinned: bool = False) -> None:
        # vLLM holds no pins: a pin is lorafleet's intent, kept recent by touches.
        try:
            # Safe to repeat: a load that did happen answers "already loaded" the second time.
            self.request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}, idempotent=True)
        except EngineRejectedError as exc:
            if _ALREADY.search(exc.message):
                raise AlreadyLoadedError(exc.engine, exc.message, exc.status) from exc
            raise

    def rewarm(self, name: str, path: str) -> None:
        self.prime(name)  # not load_inplace: it would stick to the adapter and re-read it on every request

    def prime(self, name: str) -> None:
        body = {"model": name, "prompt": "ping", "max_tokens": 1, "temperature": 0}
        with not_registered(_UNKNOWN, status=404):
            self.request("POST", "/v1/completions", body)

    def unload(self, name: str) -> None:
        with not_registered(_UNKNOWN, status=404):
            self.request("POST", "/v1/unload_lora_adapter", {"lora_name": name}, idempotent=True)

    def activity(self) -> Activity:
        return parse_lora_requests_info(self.request("GET", "/metrics").text)


LORA_INFO = "vllm:lora_requests_info"


def parse_lora_requests_info(text: str) -> Activity:
    """The newest `vllm:lora_requests_info` series (its value is a timestamp), read with prometheus_client's
    parser; empty when there is none or the text is not the Prometheus format. Only that family's lines are
    parsed: an engine's whole /metrics (about a thousand lines of histograms) took 15 ms of the daemon's one
    interpreter per engine and reconcile, 7.5 s every 30 s at 500 engines; the filter leaves well under 1 ms."""
    from prometheus_client.parser import text_string_to_metric_families

    ours = "".join(line + "\n" for line in text.splitlines() if LORA_INFO in line)  # samples, HELP and TYPE
    newest: tuple[float, dict[str, str]] | None = None
    try:
        for family in text_string_to_metric_families(ours):
            for sample in family.samples:
                if sample.name != LORA_INFO:
                    continue
                if newest is None or sample.value >= newest[0]:  # a tie: the later series
                    newest = (sample.value, dict(sample.labels))
    except (ValueError, TypeError, IndexError):
        return Activity((), (), None)
    if newest is None:
        return Activity((), (), None)
    labels = newest[1]

    def names(key: str) -> tuple[str, ...]:
        return tuple(n for n in labels.get(key, "").split(",") if n)

    max_lora = labels.get("max_lora")
    return Activity(
        names("running_lora_adapters"),
        names("waiting_lora_adapters"),
        int(max_lora) if max_lora and max_lora.isdigit() else None,
    )
