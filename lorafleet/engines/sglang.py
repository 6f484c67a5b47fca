"""SGLang's dynamic LoRA API (needs --enable-lora and dp_size 1).

Load answers JSON `{"success", "error_message", "loaded_adapters"}` (200 on success, 400 on failure) and only
fills host memory: the GPU slot is taken by the first batch using the adapter, so warming it for real means a
1-token request (`model: "<base>:<adapter>"`) or pinning. At most max_loras_per_batch − 1 adapters may be pinned.
"""

from __future__ import annotations

import re
from typing import Any

from lorafleet.engines.base import AlreadyLoadedError, EngineClient, EngineRejectedError, not_registered

_ALREADY = re.compile(r"already exists", re.IGNORECASE)
# unload: "LoRA with name <n> does not exist…"; a request naming it: "… is not loaded"
_UNKNOWN = re.compile(r"does not exist|is not loaded", re.IGNORECASE)


class SglangClient(EngineClient):
    kind = "sglang"
    final_errors = (
        re.compile(r"incompatible with the current LoRA memory pool", re.IGNORECASE),
        re.compile(r"LoRA is not enabled", re.IGNORECASE),
    )

    def _post(self, path: str, body: dict[str, Any]) -> None:
        # Load and unload are safe to repeat: a repeated load answers "already exists".
        response = self.request("POST", path, body, idempotent=True)
        try:
            payload = response.json()
        except ValueError:
            return  # some builds answer plain text on success
        if isinstance(payload, dict) and payload.get("success") is False:
            said = self._said(str(payload.get("error_message") or "the engine reported failure"))
            raise EngineRejectedError(self.engine.key, f"{self.engine.key}: {said}", response.status_code)

    def load(self, name: str, path: str, pinned: bool = False) -> None:
        try:
            self._post("/load_lora_adapter", {"lora_name": name, "lora_path": path, "pinned": pinned})
        except EngineRejectedError as exc:
            if _ALREADY.search(exc.message):
                raise AlreadyLoadedError(exc.engine, exc.message, exc.status) from exc
            raise

    def rewarm(self, name: str, path: str) -> None:
        self.prime(name)  # registered adapters stay in host memory; a request takes the GPU slot

    def prime(self, name: str) -> None:
        model = f"{self.served_model()}:{name}"
        body = {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0}
        with not_registered(_UNKNOWN):
            self.request("POST", "/v1/completions", body)

    def unload(self, name: str) -> None:
        with not_registered(_UNKNOWN):
            self._post("/unload_lora_adapter", {"lora_name": name})

    def server_info(self) -> dict[str, Any]:
        info = self.get_json("/get_server_info")
        if not isinstance(info, dict):
            raise EngineRejectedError(
                self.engine.key, f"{self.engine.key}: /get_server_info answered an unexpected shape"
            )
        return info

    def launch_limits(self) -> tuple[int | None, int | None]:
        """(max_loras_per_batch, max_loaded_loras) as the engine was launched."""
        info = self.server_info()

        def number(key: str) -> int | None:
            value = info.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        return number("max_loras_per_batch"), number("max_loaded_loras")
