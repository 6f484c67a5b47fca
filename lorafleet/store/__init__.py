"""The embedded state store: SQLite in WAL mode with named, ordered migrations."""

from lorafleet.store.db import Store, open_store

__all__ = ["Store", "open_store"]
