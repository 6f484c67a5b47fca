"""Engine clients: vLLM and SGLang adapter APIs behind one interface (the only home of httpx)."""

from lorafleet.engines.base import (
    AlreadyLoadedError,
    EngineClient,
    EngineError,
    EngineRejectedError,
    EngineUnavailableError,
    MissingApiKeyError,
    NotRegisteredError,
    make_client,
)

__all__ = [
    "AlreadyLoadedError",
    "EngineClient",
    "EngineError",
    "EngineRejectedError",
    "EngineUnavailableError",
    "MissingApiKeyError",
    "NotRegisteredError",
    "make_client",
]
