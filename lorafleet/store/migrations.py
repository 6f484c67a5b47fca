"""The schema as named, ordered migrations: a name once released is never edited, only followed."""

from __future__ import annotations

import sqlite3

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
            lru_position INTEGER NOT NULL,   -- grows with each use: the smallest is least recently used
            updated_at TEXT NOT NULL,
            PRIMARY KEY (engine, adapter)
        );
        """,
    ),
)


def statements(sql: str) -> list[str]:
    """Split a migration into statements (executescript would commit the open transaction first)."""
    out: list[str] = []
    current = ""
    for line in sql.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    if current.strip():
        out.append(current.strip())
    return out
