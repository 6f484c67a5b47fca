"""Where lorafleet keeps its state by default: the XDG state directory, overridable by env or flag."""

from __future__ import annotations

import os
from pathlib import Path


def default_state_path() -> Path:
    explicit = os.environ.get("LORAFLEET_STATE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "lorafleet" / "state.db"
