"""Default places: the inventory (./lorafleet.yaml or LORAFLEET_INVENTORY) and the state database (the XDG state
directory or LORAFLEET_STATE), each overridable by a flag."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def default_inventory_path() -> str:
    return os.environ.get("LORAFLEET_INVENTORY", "lorafleet.yaml")


def default_state_path() -> Path:
    explicit = os.environ.get("LORAFLEET_STATE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "lorafleet" / "state.db"


def is_device(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a device (/dev/zero, a disk): read as a file, it never ends. A pipe is not one (an
    inventory from `-i <(…)`, a log through a FIFO); a path that cannot be looked at is left to the open to say."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
