"""Default places: the inventory (./lorafleet.yaml or LORAFLEET_INVENTORY) and the state database (the XDG state
directory or LORAFLEET_STATE), each overridable by a flag."""

from __future__ import annotations

import os
from pathlib import Path


def default_inventory_path() -> str:
    return os.environ.get("LORAFLEET_INVENTORY", "lorafleet.yaml")


def default_state_path() -> Path:
    explicit = os.environ.get("LORAFLEET_STATE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "lorafleet" / "state.db"
