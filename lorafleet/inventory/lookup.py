"""Names an admin types, looked up in the inventory: an unknown one is an input error with a did-you-mean."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from lorafleet.errors import InputError
from lorafleet.inventory.fields import quoted
from lorafleet.inventory.model import Adapter, Engine, Inventory


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`; did you mean 'x'?` for the closest known name, or ''."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def resolve_adapters(inventory: Inventory, names: Sequence[str]) -> list[Adapter]:
    """The adapters named, each once (an adapter named twice is acted on once)."""
    adapters = []
    for name in dict.fromkeys(names):
        adapter = inventory.adapters.get(name)
        if adapter is None:
            raise InputError(
                f"{quoted(name)} is not an adapter in the inventory{did_you_mean(name, list(inventory.adapters))}"
            )
        adapters.append(adapter)
    return adapters


def resolve_engines(inventory: Inventory, keys: Sequence[str]) -> list[Engine]:
    """The engines named HOST/ENGINE, each once; an unknown name is an input error with a did-you-mean."""
    engines = []
    for key in dict.fromkeys(keys):
        engine = inventory.engine(key)
        if engine is None:
            tip = did_you_mean(key, [e.key for e in inventory.engines]) or " (engines are named HOST/ENGINE)"
            raise InputError(f"{quoted(key)} is not an engine in the inventory{tip}")
        engines.append(engine)
    return engines
