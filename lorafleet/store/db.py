"""SQLite state: one connection per process, WAL mode, named ordered migrations, UTC ISO-8601 timestamps.

Writes go through `with store.transaction():` so several rows (a log checkpoint and the rollups derived from
it, a journal row and the residency change it caused) commit together or not at all; a write outside an
explicit transaction is its own. Transactions start with BEGIN IMMEDIATE, so two processes never both read and
then both write: the second waits (up to `busy_timeout_s`) for the first to commit. Migrations run the same way,
so two processes opening a new file at once apply each migration exactly once.

Durability: `synchronous=FULL`. In WAL mode NORMAL keeps the file consistent after a crash but can lose the
last commits on power loss; warm journals loads that the engines already performed, so a committed row must
survive. The cost is one fsync per transaction, which is why writers batch their rows into one.

The store deals in plain rows and imports nothing from the policy: the residency book turns its own state into
rows (`snapshot`) and back (`restore`).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from lorafleet.errors import InputError
from lorafleet.store.migrations import MIGRATIONS, statements

SCHEMA_VERSION = len(MIGRATIONS)


def utc_now() -> str:
    return format_utc(datetime.now(UTC))


def format_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


@dataclass(frozen=True)
class ResidencyRow:
    """One adapter lorafleet last knew resident on one engine; `lru_position` grows with each use."""

    engine: str
    adapter: str
    size_bytes: int
    pinned: bool
    lru_position: int


class Store:
    def __init__(
        self,
        connection: sqlite3.Connection,
        path: Path,
        clock: Callable[[], str] = utc_now,
    ) -> None:
        self.db = connection
        self.path = path
        self.clock = clock
        self._depth = 0

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic unit of writes; nested uses join the outermost one."""
        if self._depth:
            self._depth += 1
            try:
                yield self.db
            finally:
                self._depth -= 1
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self.db
        except BaseException:
            self._depth = 0
            self.db.execute("ROLLBACK")
            raise
        self._depth = 0
        self.db.execute("COMMIT")

    def migrate(self) -> list[str]:
        """Apply the migrations not yet applied, all under one write lock; returns their names."""
        with self.transaction() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
            done = {row[0] for row in db.execute("SELECT name FROM schema_migrations")}
            unknown = done - {name for name, _ in MIGRATIONS}
            if unknown:
                raise InputError(
                    f"state database {self.path} was written by a newer lorafleet (schema {sorted(unknown)[-1]})",
                    hint="upgrade lorafleet, or pass --state with another file",
                )
            applied = []
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                for statement in statements(sql):
                    db.execute(statement)
                db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, self.clock()))
                applied.append(name)
        return applied

    # --- loads ----------------------------------------------------------------------------------------------
    def record_load(self, record: LoadRecord) -> None:
        with self.transaction() as db:
            db.execute(
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
    def residency(self, engine: str) -> list[ResidencyRow]:
        """One engine's rows, least recently used first."""
        rows = self.db.execute(
            "SELECT engine, adapter, size_bytes, pinned, lru_position FROM residency WHERE engine = ? "
            "ORDER BY lru_position, adapter",
            (engine,),
        )
        return [ResidencyRow(r[0], r[1], r[2], bool(r[3]), r[4]) for r in rows]

    def change_residency(
        self,
        engine: str,
        used: Sequence[tuple[str, int, bool]] = (),
        dropped: Iterable[str] = (),
    ) -> None:
        """Apply one engine's changes as deltas: `dropped` rows go, each of `used` (adapter, bytes, pinned)
        becomes the most recent, in order. Rows other writers changed meanwhile are left as they are."""
        with self.transaction() as db:
            now = self.clock()
            db.executemany("DELETE FROM residency WHERE engine = ? AND adapter = ?", [(engine, a) for a in dropped])
            (top,) = db.execute(
                "SELECT COALESCE(MAX(lru_position), -1) FROM residency WHERE engine = ?", (engine,)
            ).fetchone()
            db.executemany(
                "INSERT INTO residency (engine, adapter, size_bytes, pinned, lru_position, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (engine, adapter) DO UPDATE SET "
                "size_bytes = excluded.size_bytes, pinned = excluded.pinned, "
                "lru_position = excluded.lru_position, updated_at = excluded.updated_at",
                [
                    (engine, adapter, size, int(pinned), top + 1 + i, now)
                    for i, (adapter, size, pinned) in enumerate(used)
                ],
            )

    def forget_residency(self, engine: str) -> None:
        """An engine that restarted holds nothing: drop all its rows."""
        with self.transaction() as db:
            db.execute("DELETE FROM residency WHERE engine = ?", (engine,))


def check_writable(path: Path) -> None:
    """Fail before any work when the state file (or the folder that would hold it) cannot be written."""
    target = path if path.exists() else path.parent
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"state database {path}: not writable", hint="pass --state PATH or set LORAFLEET_STATE")


def open_store(path: str | Path, clock: Callable[[], str] = utc_now) -> Store:
    """Open (creating) the state database and bring its schema up to date."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        check_writable(path)
        connection = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        connection.execute("PRAGMA busy_timeout=30000")
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA foreign_keys=ON")
        store = Store(connection, path, clock)
        store.migrate()
    except (OSError, sqlite3.Error) as exc:
        raise InputError(f"state database {path}: {exc}", hint="pass --state PATH or set LORAFLEET_STATE") from exc
    return store
