"""SQLite state: one connection per process, WAL mode, named ordered migrations, UTC ISO-8601 timestamps.

Every write is its own transaction, committed before the next action, so a crash loses at most the action in
progress. The daemon will add its tables (rollups, log positions) as further migrations.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lorafleet.errors import OperationError
from lorafleet.policy.residency import EngineResidency

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "001_loads",
        """
        CREATE TABLE loads (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL,            -- UTC ISO-8601
            source TEXT NOT NULL,        -- warm, daemon
            adapter TEXT NOT NULL,
            engine TEXT NOT NULL,        -- HOST/ENGINE
            action TEXT NOT NULL,        -- loaded, reloaded, already-warm, skipped, failed
            ok INTEGER NOT NULL,
            ms REAL,
            size_bytes INTEGER,
            error TEXT
        );
        CREATE INDEX loads_engine_adapter ON loads (engine, adapter, at);
        """,
    ),
    (
        "002_residency",
        """
        CREATE TABLE residency (
            engine TEXT NOT NULL,
            adapter TEXT NOT NULL,
            size_bytes INTEGER NOT NULL,
            pinned INTEGER NOT NULL DEFAULT 0,
            lru_position INTEGER NOT NULL,   -- 0 = least recently used
            updated_at TEXT NOT NULL,
            PRIMARY KEY (engine, adapter)
        );
        """,
    ),
)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class LoadRecord:
    at: str
    source: str
    adapter: str
    engine: str
    action: str
    ok: bool
    ms: float | None
    size_bytes: int | None
    error: str | None


class Store:
    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self.db = connection
        self.path = path

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def migrate(self) -> list[str]:
        """Apply the migrations not yet applied, each in its own transaction; returns their names."""
        self.db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
        done = {row[0] for row in self.db.execute("SELECT name FROM schema_migrations")}
        applied = []
        for name, sql in MIGRATIONS:
            if name in done:
                continue
            with self.db:
                self.db.executescript(
                    f"BEGIN; {sql}; INSERT INTO schema_migrations VALUES ('{name}', '{utc_now()}'); COMMIT;"
                )
            applied.append(name)
        return applied

    # --- loads ----------------------------------------------------------------------------------------------
    def record_load(self, record: LoadRecord) -> None:
        with self.db:
            self.db.execute(
                "INSERT INTO loads (at, source, adapter, engine, action, ok, ms, size_bytes, error) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.at,
                    record.source,
                    record.adapter,
                    record.engine,
                    record.action,
                    int(record.ok),
                    record.ms,
                    record.size_bytes,
                    record.error,
                ),
            )

    def loads(self, engine: str | None = None) -> list[LoadRecord]:
        sql = "SELECT at, source, adapter, engine, action, ok, ms, size_bytes, error FROM loads"
        rows = (
            self.db.execute(sql + " WHERE engine = ? ORDER BY id", (engine,))
            if engine
            else self.db.execute(sql + " ORDER BY id")
        )
        return [LoadRecord(r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6], r[7], r[8]) for r in rows]

    # --- residency ------------------------------------------------------------------------------------------
    def load_residency(self, states: Iterable[EngineResidency]) -> None:
        """Fill each engine's book from what lorafleet last knew, least recently used first."""
        for state in states:
            rows = self.db.execute(
                "SELECT adapter, size_bytes, pinned FROM residency WHERE engine = ? ORDER BY lru_position DESC",
                (state.key,),
            ).fetchall()
            budget = state.budget
            kept: list[tuple[str, int, int]] = []
            slots, used = state.used_slots, state.used_bytes
            for adapter, size, pinned in rows:  # most recently used first: if the budget shrank, they stay
                if state.holds(adapter):
                    continue
                if (budget.host_slots is not None and slots + 1 > budget.host_slots) or (
                    budget.budget_bytes is not None and used + size > budget.budget_bytes
                ):
                    continue
                kept.append((adapter, size, pinned))
                slots, used = slots + 1, used + size
            for adapter, size, pinned in reversed(kept):
                state.start_load(adapter, size)
                state.finish_load(adapter)
                if pinned:
                    state.pins.add(adapter)

    def save_residency(self, state: EngineResidency) -> None:
        """Replace one engine's rows with its book, in LRU order."""
        now = utc_now()
        with self.db:
            self.db.execute("DELETE FROM residency WHERE engine = ?", (state.key,))
            self.db.executemany(
                "INSERT INTO residency (engine, adapter, size_bytes, pinned, lru_position, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (state.key, adapter, state.sizes[adapter], int(adapter in state.pins), position, now)
                    for position, adapter in enumerate(state.resident)
                ],
            )


def open_store(path: str | Path) -> Store:
    """Open (creating) the state database and bring its schema up to date."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(path, timeout=10.0)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
        store = Store(connection, path)
        store.migrate()
    except (OSError, sqlite3.Error) as exc:
        raise OperationError(f"state database {path}: {exc}", hint="pass --state PATH or set LORAFLEET_STATE") from exc
    return store
