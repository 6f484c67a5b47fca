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
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from lorafleet.errors import InputError, OperationError
from lorafleet.store.migrations import MIGRATIONS, statements
from lorafleet.times import hour_key, minute_of, minute_start_text, utc_now_text

SCHEMA_VERSION = len(MIGRATIONS)
STATE_HINT = "pass --state PATH or set LORAFLEET_STATE"
DAMAGED_HINT = (
    "the file is damaged or is not lorafleet's: move it aside (the daemon then starts a new journal and relearns; "
    "`sqlite3 FILE .recover` may save what the old one holds), or pass --state PATH"
)


@dataclass(slots=True, unsafe_hash=True)
class ActionRow:
    """One action on an engine, as the journal holds it: a load, touch, unload or eviction by warm, unload or the
    daemon (or, in shadow mode, what the daemon would have done), and what came of it. Read back from the minute
    counts (`counted_only`), one stands for `count` alike actions in the minute `at` starts. Never changed once
    made, but not frozen: the daemon makes one per action, and a frozen dataclass sets each field through
    `object.__setattr__` (RequestEvent's reason, policy/events.py)."""

    at: str  # UTC ISO-8601 (times.utc_text)
    source: str  # warm, unload, daemon, daemon-shadow
    adapter: str
    engine: str
    action: str  # loaded, reloaded, touched, unloaded, evicted (engine LRU), forgotten, refused, failed, …
    ok: bool
    ms: float | None
    size_bytes: int | None
    error: str | None
    reason: str | None = None  # plan, prefetch, demand, keep, reconcile (daemon rows)
    unused_prefetch: bool = False  # an eviction of a prefetch no request used
    count: int = 1


SHADOW_SOURCE = "daemon-shadow"  # what shadow mode simulated: nothing happened to any engine
COUNTED_ACTIONS = ("touched", "evicted")  # done, they change nothing an engine holds by a call of their own


def counted_only(a: ActionRow) -> bool:
    """The journal's one rule for rows: a row for each action an admin audits — a load or unload an engine did,
    a call that failed or was refused, a book entry a reconcile forgot — and only a count per minute (and hour)
    for the rest: touches (a 1-token request that changes nothing held), evictions by vLLM's own LRU (no call;
    the load that caused one has its row) and everything shadow mode simulated. A busy fleet makes touches and
    simulated actions by the million; a row each was most of the journal."""
    return a.source == SHADOW_SOURCE or (a.ok and a.action in COUNTED_ACTIONS)


ACTION_COLUMNS = "at, source, adapter, engine, action, ok, ms, size_bytes, error, reason, unused_prefetch"


def _columns(a: ActionRow) -> tuple[object, ...]:
    ok, unused = int(a.ok), int(a.unused_prefetch)
    return (a.at, a.source, a.adapter, a.engine, a.action, ok, a.ms, a.size_bytes, a.error, a.reason, unused)


def write_actions(db: sqlite3.Connection, rows: Sequence[ActionRow]) -> None:
    """Actions, inside the caller's transaction: a row each for those an admin audits, a count per minute for
    the rest (`counted_only`), and hourly counts per engine and adapter of all of them — the one writer of the
    three, so `stats` counts the same actions over any window whichever way each was kept."""
    db.executemany(
        f"INSERT INTO loads ({ACTION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [_columns(a) for a in rows if not counted_only(a)],
    )
    minutes: dict[tuple[str, str, str, str, str, str, int, int], int] = {}
    counts: dict[tuple[str, str, str, str, str, int], list[int]] = {}
    for a in rows:
        reason, ok, unused = a.reason or "", int(a.ok), int(a.unused_prefetch)
        if counted_only(a):
            key = (minute_of(a.at), a.source, a.engine, a.adapter, a.action, reason, ok, unused)
            minutes[key] = minutes.get(key, 0) + a.count
        hour = hour_key(a.at)
        for dim, name in (("all", ""), ("engine", a.engine), ("adapter", a.adapter)):
            cell = counts.setdefault((dim, hour, name, a.action, reason, ok), [0, 0])
            cell[0] += a.count
            cell[1] += unused * a.count
    db.executemany(
        "INSERT INTO actions_minutes (minute, source, engine, adapter, action, reason, ok, unused, count) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (minute, source, engine, adapter, action, reason, ok, unused) "
        "DO UPDATE SET count = count + excluded.count",
        [(*key, n) for key, n in minutes.items()],
    )
    db.executemany(
        "INSERT INTO actions_hourly (dim, hour, key, action, reason, ok, count, unused) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dim, hour, key, action, reason, ok) DO UPDATE SET "
        "count = count + excluded.count, unused = unused + excluded.unused",
        [(*key, n, unused) for key, (n, unused) in counts.items()],
    )


def read_actions(db: sqlite3.Connection, where: str = "", args: Sequence[object] = ()) -> list[ActionRow]:
    rows = db.execute(f"SELECT {ACTION_COLUMNS} FROM loads{where}", args)
    return [ActionRow(r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6], r[7], r[8], r[9], bool(r[10])) for r in rows]


def read_counted(db: sqlite3.Connection, where: str = "", args: Sequence[object] = ()) -> list[ActionRow]:
    """The minute counts as actions: one per minute and kind, dated at the minute's start, `count` of them."""
    rows = db.execute(
        f"SELECT minute, source, adapter, engine, action, ok, reason, unused, count FROM actions_minutes{where}", args
    )
    return [
        ActionRow(
            minute_start_text(r[0]),
            r[1],
            r[2],
            r[3],
            r[4],
            bool(r[5]),
            None,
            None,
            None,
            r[6] or None,
            bool(r[7]),
            r[8],
        )
        for r in rows
    ]


@dataclass(frozen=True)
class NoticedAction:
    id: int
    engine: str
    adapter: str
    action: str
    ok: bool
    pinned: bool


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
        clock: Callable[[], str] = utc_now_text,
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
            if self.db.in_transaction:  # SQLite rolls back by itself on some failures (a full disk, an I/O error)
                self.db.execute("ROLLBACK")
            raise
        self._depth = 0
        try:
            self.db.execute("COMMIT")
        except BaseException:  # a full disk fails the COMMIT itself: the transaction must not stay open
            with suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
            raise

    @contextmanager
    def writing(self) -> Iterator[None]:
        """SQLite's failures on a write (a full disk, a lock held elsewhere past the busy wait, a damaged schema)
        as one line naming the file. Nothing read is lost: the checkpoints go in the same transaction as the counts,
        so the next start reads again from the last commit."""
        try:
            yield
        except sqlite3.Error as exc:
            reason = str(exc) or type(exc).__name__
            raise OperationError(
                f"state database {self.path}: {reason}",
                hint="the log is read again from the last commit at the next start"
                + ("; another process holds its write lock" if "locked" in reason else ""),
            ) from exc

    def migrate(self) -> list[str]:
        """Apply the migrations not yet applied, all under one write lock; returns their names."""
        with self.transaction() as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            others = sorted(t for t in tables if not t.startswith("sqlite_"))
            if others and "schema_migrations" not in tables:  # another program's database: never written into
                held = ", ".join(others[:3])
                raise InputError(
                    f"state database {self.path} is not a lorafleet state file (it holds tables {held})",
                    hint="pass --state with another file",
                )
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
    def record_action(self, row: ActionRow) -> None:
        with self.transaction() as db:
            write_actions(db, [row])

    def last_action_id(self) -> int:
        (found,) = self.db.execute("SELECT COALESCE(MAX(id), 0) FROM loads").fetchone()
        return int(found)

    def actions_since(self, after: int, sources: Sequence[str]) -> list[NoticedAction]:
        """Action rows of these sources after row `after`, oldest first, with whether the engine's residency row
        says the adapter is pinned (for a daemon to learn what `warm` and `unload` did)."""
        marks = ", ".join("?" * len(sources))
        rows = self.db.execute(
            "SELECT l.id, l.engine, l.adapter, l.action, l.ok, COALESCE(r.pinned, 0) FROM loads l "
            "LEFT JOIN residency r ON r.engine = l.engine AND r.adapter = l.adapter "
            f"WHERE l.id > ? AND l.source IN ({marks}) ORDER BY l.id",
            (after, *sources),
        )
        return [NoticedAction(r[0], r[1], r[2], r[3], bool(r[4]), bool(r[5])) for r in rows]

    def loads(self, engine: str | None = None) -> list[ActionRow]:
        """Every action row (of one engine), oldest first: the actions the journal lists (`counted_only`)."""
        if engine:
            return read_actions(self.db, " WHERE engine = ? ORDER BY id", (engine,))
        return read_actions(self.db, " ORDER BY id")

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


# How long a reader waits for a lock: a daemon in WAL mode never blocks one, so only an exclusive holder does.
READ_WAIT_S = 10.0
WRITE_WAIT_S = 30.0  # how long a writer waits for another process's lock (and for the switch to WAL)


def _open_read_only(path: Path, clock: Callable[[], str]) -> Store:
    """SQLite's read-only mode; where even its shared-memory file cannot be made (a read-only mount), the file is
    read as immutable (nothing else may write it then, which is what such a mount means)."""
    _regular(path)
    wal = _wal(path)
    last: Exception | None = None
    for flags in ("mode=ro", "mode=ro&immutable=1"):
        immutable = "immutable" in flags
        if immutable and wal.exists() and wal.stat().st_size:
            # Read as immutable, the file would answer without the commits its write-ahead log holds (a daemon
            # stopped by kill -9, its shared-memory file gone): a wrong answer, not a slow one.
            raise InputError(
                f"state database {path}: its write-ahead log {wal.name} holds commits this read-only folder does "
                f"not let SQLite read ({last})",
                hint="open it once where it can be written (lorafleet daemon or warm, as its owner)",
            )
        try:
            connection = sqlite3.connect(
                f"{path.resolve().as_uri()}?{flags}", uri=True, timeout=READ_WAIT_S, isolation_level=None
            )
            connection.execute(f"PRAGMA busy_timeout={int(READ_WAIT_S * 1000)}")
            done = _applied(connection, 0.0 if immutable or not _fresh(path) else 5.0)
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED"):
                # Held exclusively by another process (a daemon's WAL never blocks a reader this long). Read as
                # immutable, the file would answer without the journal's latest commits: a wrong answer, not
                # a slow one.
                raise InputError(
                    f"state database {path}: locked by another process (waited {READ_WAIT_S:g} s)",
                    hint="something holds it in exclusive mode (sqlite3's locking_mode=EXCLUSIVE?); try again when "
                    "it has finished",
                ) from exc
            last = exc
            continue
        known = {name for name, _ in MIGRATIONS}
        if done - known:
            raise InputError(f"state database {path} was written by a newer lorafleet", hint="upgrade lorafleet")
        if known - done:
            raise InputError(
                f"state database {path} was written by an older lorafleet",
                hint="open it once where it can be written (lorafleet daemon or warm) to bring its schema up to date",
            )
        return Store(connection, path, clock)
    raise InputError(f"state database {path}: {last}", hint=_hint_for(last))


def _applied(connection: sqlite3.Connection, wait_s: float = 5.0) -> set[str]:
    """The migrations a state file has. A file without the table may be one a daemon has just created: its
    schema comes in one transaction, so it is waited for a few seconds before the file is called no journal."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return {row[0] for row in connection.execute("SELECT name FROM schema_migrations")}
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            if time.monotonic() >= deadline:
                raise sqlite3.OperationalError("no journal in it (not a lorafleet state file)") from exc
            time.sleep(0.05)


def _wal(path: Path) -> Path:
    """The database's write-ahead log, beside it."""
    return path.with_name(path.name + "-wal")


def _regular(path: Path) -> None:
    """A state database is a regular file: SQLite would block for ever on a FIFO, and a device is no journal."""
    if path.exists() and not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file"
        raise InputError(f"state database {path}: {kind}", hint=STATE_HINT)


def _fresh(path: Path, within_s: float = 10.0) -> bool:
    """Whether the file or its write-ahead log changed in the last few seconds: only then may a daemon be
    creating its schema (which goes to the log first)."""
    for each in (path, _wal(path)):
        with suppress(OSError):
            if time.time() - each.stat().st_mtime < within_s:
                return True
    return False


def check_writable(path: Path) -> None:
    """Fail before any work when the state file (or the folder that would hold it) cannot be written."""
    target = path if path.exists() else path.parent
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"state database {path}: not writable", hint=STATE_HINT)


def _write_ahead(connection: sqlite3.Connection, wait_s: float = WRITE_WAIT_S) -> None:
    """Switch the file to write-ahead logging. Processes opening a new file at once race for the switch, and SQLite
    answers "database is locked" at once, without waiting on its busy handler, to one that would deadlock
    waiting (it holds a read lock another needs gone): so the switch is tried again until another process has made
    it (then it is no change) or `wait_s` has passed (with 12 processes on a loaded machine, 1 round in 15 had
    one of them fail)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def open_store(path: str | Path, clock: Callable[[], str] = utc_now_text, read_only: bool = False) -> Store:
    """Open (creating) the state database and bring its schema up to date; `read_only`: open an existing one
    for reading only (`stats`), which needs no write access to the file or its folder."""
    path = Path(path)
    if read_only:
        return _open_read_only(path, clock)
    _regular(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        check_writable(path)
        connection = sqlite3.connect(path, timeout=WRITE_WAIT_S, isolation_level=None)
        connection.execute(f"PRAGMA busy_timeout={int(WRITE_WAIT_S * 1000)}")
        _write_ahead(connection)
        connection.execute("PRAGMA synchronous=FULL")
        connection.execute("PRAGMA foreign_keys=ON")
        store = Store(connection, path, clock)
        store.migrate()
    except (OSError, sqlite3.Error) as exc:
        raise InputError(f"state database {path}: {exc}", hint=_hint_for(exc)) from exc
    return store


def _hint_for(exc: Exception | None) -> str:
    """What to do about a state database SQLite cannot open: a damaged file is not fixed by another path alone."""
    damaged = getattr(exc, "sqlite_errorname", "") in ("SQLITE_NOTADB", "SQLITE_CORRUPT")
    return DAMAGED_HINT if damaged else STATE_HINT
