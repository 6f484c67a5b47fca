"""The state store against real SQLite files and real processes: migrations, transactions, deltas, crashes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lorafleet.errors import InputError
from lorafleet.store.db import SCHEMA_VERSION, ActionRow, open_store
from lorafleet.store.migrations import MIGRATIONS

ROOT = Path(__file__).resolve().parents[2]


def record(adapter: str, engine: str = "h/e") -> ActionRow:
    return ActionRow("2026-01-01T00:00:00.000Z", "warm", adapter, engine, "loaded", True, 1.0, 10, None)


def run_python(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args], env=env, text=True, stdout=subprocess.PIPE
    )


def test_migrations_are_idempotent_and_recorded(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(path) as store:
        assert store.migrate() == []  # the open applied them all
        names = [r[0] for r in store.db.execute("SELECT name FROM schema_migrations ORDER BY name")]
    assert names == [name for name, _ in MIGRATIONS]
    assert len(MIGRATIONS) == SCHEMA_VERSION
    with open_store(path) as store:
        assert store.migrate() == []


def test_injected_clock_stamps_rows(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db", clock=lambda: "2030-05-05T05:05:05.000Z") as store:
        store.change_residency("h/e", [("a", 1, False)])
        (stamp,) = store.db.execute("SELECT updated_at FROM residency").fetchone()
    assert stamp == "2030-05-05T05:05:05.000Z"


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    open_store(path).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO schema_migrations VALUES ('999_future', 'x')")
    db.commit()
    db.close()
    with pytest.raises(InputError, match="newer lorafleet"):
        open_store(path)


def test_transaction_commits_together_or_not_at_all(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as store:
        with pytest.raises(RuntimeError), store.transaction():
            store.record_action(record("a"))
            store.change_residency("h/e", [("a", 10, False)])
            raise RuntimeError("crash between the rows")
        assert store.loads() == [] and store.residency("h/e") == []
        with store.transaction():
            store.record_action(record("b"))
            store.change_residency("h/e", [("b", 10, False)])
        assert [r.adapter for r in store.loads()] == ["b"]
        assert [r.adapter for r in store.residency("h/e")] == ["b"]


def test_residency_deltas_keep_lru_order(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as store:
        store.change_residency("h/e", [("a", 1, False), ("b", 2, True)])
        store.change_residency("h/e", [("a", 1, False)])  # a used again: now most recent
        store.change_residency("h/e", [("c", 3, False)], dropped=["b"])
        rows = store.residency("h/e")
    assert [(r.adapter, r.pinned) for r in rows] == [("a", False), ("c", False)]
    assert rows[0].lru_position < rows[1].lru_position


def test_read_only_state_file_is_an_input_error_for_writers_and_readable_for_readers(tmp_path: Path, read_only) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "s.db"
    with open_store(path) as store:
        store.record_action(record("a"))
    read_only(path)
    read_only(folder)
    with pytest.raises(InputError, match="state database"):
        open_store(path)
    with open_store(path, read_only=True) as store:  # what stats does: no write access needed
        assert [r.adapter for r in store.loads()] == ["a"]


def test_a_reader_of_a_journal_held_exclusively_gets_an_error_not_the_file_without_its_latest_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read as immutable (the read-only mount's way), the file would answer from its main file alone: commits
    still in the write-ahead log would be missing, and `stats` would show a wrong count, exit 0."""
    import lorafleet.store.db as db

    monkeypatch.setattr(db, "READ_WAIT_S", 0.2)
    path = tmp_path / "s.db"
    with open_store(path) as store:
        store.record_action(record("a"))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("SELECT COUNT(*) FROM schema_migrations").fetchall()
    try:
        with pytest.raises(InputError, match=r"s\.db: locked by another process \(waited 0\.2 s\)"):
            open_store(path, read_only=True)
    finally:
        holder.close()
    with open_store(path, read_only=True) as store:
        assert [r.adapter for r in store.loads()] == ["a"]


def test_concurrent_first_open_by_several_processes(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    code = """
        import sys
        from lorafleet.store.db import open_store
        with open_store(sys.argv[1]) as store:
            print(len(store.residency("x")))
    """
    procs = [run_python(code, str(path)) for _ in range(6)]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, outputs
    db = sqlite3.connect(path)
    names = [r[0] for r in db.execute("SELECT name FROM schema_migrations")]
    assert sorted(names) == sorted(name for name, _ in MIGRATIONS)  # each applied exactly once


def test_concurrent_writers_never_lose_each_others_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    open_store(path).close()
    code = """
        import sys
        from lorafleet.store.db import open_store
        who = sys.argv[2]
        with open_store(sys.argv[1]) as store:
            for i in range(40):
                store.change_residency("h/e", [(f"{who}-{i}", 1, False)])
    """
    procs = [run_python(code, str(path), who) for who in ("p", "q", "r")]
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    with open_store(path) as store:
        adapters = {r.adapter for r in store.residency("h/e")}
    assert adapters == {f"{who}-{i}" for who in ("p", "q", "r") for i in range(40)}


def test_restore_after_kill_9_keeps_every_committed_transaction(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    open_store(path).close()
    code = """
        import sys
        from lorafleet.store.db import ActionRow, open_store
        with open_store(sys.argv[1]) as store:
            i = 0
            while True:
                with store.transaction():
                    store.record_action(ActionRow("t", "warm", f"a{i}", "h/e", "loaded", True, 1.0, 1, None))
                    store.change_residency("h/e", [(f"a{i}", 1, False)])
                print(i, flush=True)
                i += 1
    """
    proc = run_python(code, str(path))
    assert proc.stdout is not None
    committed = -1
    deadline = time.monotonic() + 30
    while committed < 20 and time.monotonic() < deadline:
        committed = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    with open_store(path) as store:
        assert store.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        loads = {r.adapter for r in store.loads()}
        residency = {r.adapter for r in store.residency("h/e")}
    # Every transaction reported committed is there, and each is whole: a load row never without its residency.
    assert {f"a{i}" for i in range(committed + 1)} <= loads
    assert loads == residency


def test_outcomes_add_sums_every_rollup_field() -> None:
    from lorafleet.store.journal import ROLLUP_FIELDS, Outcomes

    a = Outcomes(*range(1, len(ROLLUP_FIELDS) + 1))
    a.add(Outcomes(*(10 * i for i in range(1, len(ROLLUP_FIELDS) + 1))))
    assert [getattr(a, f) for f in ROLLUP_FIELDS] == [11 * i for i in range(1, len(ROLLUP_FIELDS) + 1)]


def test_a_write_the_database_refuses_is_one_line_naming_the_file_and_no_row_is_called_not_utf8(
    tmp_path: Path,
) -> None:
    """A lock held elsewhere past the busy wait is SQLite's failure, not a row's text: the batch is not retried
    without rows nor journaled as a UTF-8 drop; the daemon's commit reports it as one line naming the file."""
    from lorafleet.errors import OperationError
    from lorafleet.store.db import Store
    from lorafleet.store.journal import commit_or_drop

    path = tmp_path / "s.db"
    open_store(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    store = Store(sqlite3.connect(path, timeout=0.05, isolation_level=None), path)
    try:
        locked = r"state database .*s\.db: database is locked"
        with pytest.raises(OperationError, match=locked) as failed, store.writing():
            commit_or_drop(store, {}, [], {"2026-11-02T09:00Z": (1, 0, 0)}, [], [])
        assert "write lock" in (failed.value.hint or "")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.close()
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT count(*) FROM errors").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM log_minutes").fetchone()[0] == 0


def test_a_commit_that_fails_leaves_no_transaction_open(tmp_path: Path) -> None:
    """A full disk fails the COMMIT itself; the transaction is rolled back, so the next write can begin."""

    class FailingCommit:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db, self.fail = db, True

        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
            if sql == "COMMIT" and self.fail:
                self.fail = False
                raise sqlite3.OperationalError("database or disk is full")
            return self.db.execute(sql, *args)

    with open_store(tmp_path / "s.db") as store:
        real = store.db
        store.db = FailingCommit(real)  # type: ignore[assignment]
        with pytest.raises(sqlite3.OperationalError), store.transaction() as db:
            db.execute("INSERT INTO errors (at, source, message) VALUES ('t', 's', 'lost')")
        assert not real.in_transaction
        with store.transaction() as db:
            db.execute("INSERT INTO errors (at, source, message) VALUES ('t', 's', 'kept')")
        store.db = real
        assert [m for (m,) in real.execute("SELECT message FROM errors")] == ["kept"]


def test_a_write_ahead_log_a_read_only_folder_cannot_read_is_refused_not_skipped(tmp_path: Path, read_only) -> None:
    """A daemon killed with its last commits still in the write-ahead log, the shared-memory file gone, the folder
    read-only: read as immutable, the file would answer without those commits (a wrong count, exit 0)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "s.db"
    with open_store(path) as store:
        store.record_action(record("a"))
    script = textwrap.dedent(f"""
        import os, sqlite3
        c = sqlite3.connect({str(path)!r}, isolation_level=None)
        c.execute("PRAGMA wal_autocheckpoint=0")
        c.execute("INSERT INTO errors (at, source, message) VALUES ('t', 'daemon', 'in the log only')")
        os._exit(0)  # as kill -9 would: no checkpoint, the log left behind
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    wal, shm = folder / "s.db-wal", folder / "s.db-shm"
    assert wal.stat().st_size > 0
    shm.unlink()
    read_only(path)
    read_only(folder)
    with pytest.raises(InputError, match=r"s\.db: its write-ahead log s\.db-wal holds commits"):
        open_store(path, read_only=True)


def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE foo (x)")
    with pytest.raises(InputError, match=r"other\.db is not a lorafleet state file \(it holds tables foo\)"):
        open_store(path)
    with sqlite3.connect(path) as c:
        assert [n for (n,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["foo"]


@pytest.mark.parametrize("damage", ["not sqlite", "truncated"])
def test_a_damaged_state_file_says_so_and_what_to_do_for_readers_and_writers(tmp_path: Path, damage: str) -> None:
    """Another --state path alone does not mend a damaged file: the hint says to move it aside (or recover it)."""
    path = tmp_path / "s.db"
    if damage == "not sqlite":
        path.write_bytes(b"not a database at all " * 300)
    else:
        with open_store(path) as store:
            for _ in range(300):
                store.record_action(ActionRow("2026-01-01T00:00:00Z", "warm", "a", "e", "loaded", True, 5.0, 1, None))
        os.truncate(path, path.stat().st_size // 2)
    for read_only in (True, False):
        with pytest.raises(InputError, match=r"s\.db: (file is not a database|database disk image is malformed)") as e:
            open_store(path, read_only=read_only)
        assert "damaged" in (e.value.hint or "") and "move it aside" in (e.value.hint or "")
    with pytest.raises(InputError) as e:
        open_store(tmp_path / "missing" / "s.db", read_only=True)
    assert "damaged" not in (e.value.hint or "")


def test_a_state_path_that_is_no_regular_file_is_refused_at_once(tmp_path: Path) -> None:
    """A FIFO would block SQLite's read for ever."""
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    for read_only in (True, False):
        with pytest.raises(InputError, match=r"fifo\.db: not a regular file"):
            open_store(fifo, read_only=read_only)
    with pytest.raises(InputError, match=r"folder\.db: a folder"):
        (tmp_path / "folder.db").mkdir()
        open_store(tmp_path / "folder.db", read_only=True)


def test_an_old_empty_file_is_no_journal_without_waiting_for_a_schema(tmp_path: Path, monkeypatch) -> None:
    """Only a file changed in the last seconds may be one a daemon is creating: an old empty one is answered at
    once (it took 10 s)."""
    import lorafleet.store.db as db

    path = tmp_path / "empty.db"
    path.touch()
    os.utime(path, (time.time() - 60, time.time() - 60))

    def no_wait(seconds: float) -> None:
        raise AssertionError("waited for a schema in an old file")

    monkeypatch.setattr(db.time, "sleep", no_wait)
    with pytest.raises(InputError, match="no journal in it"):
        open_store(path, read_only=True)


def test_a_reader_waits_for_the_schema_a_daemon_is_writing_into_a_new_file(tmp_path: Path) -> None:
    """A file just created (a daemon's first open, its schema not yet committed) is waited for a few seconds,
    not called no journal at once."""
    import threading

    path = tmp_path / "new.db"
    path.touch()  # created just now
    writer = threading.Timer(0.3, lambda: open_store(path).close())  # the schema comes 0.3 s later
    writer.start()
    try:
        with open_store(path, read_only=True) as store:
            assert store.db.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(MIGRATIONS)
    finally:
        writer.join()


class _Busy:
    """A connection whose switch to write-ahead logging is refused `refusals` times with `error`."""

    def __init__(self, refusals: int, error: str = "database is locked") -> None:
        self.refusals, self.error, self.tries = refusals, error, 0

    def execute(self, sql: str) -> None:
        assert sql == "PRAGMA journal_mode=WAL"
        self.tries += 1
        if self.tries <= self.refusals:
            raise sqlite3.OperationalError(self.error)


def test_the_switch_to_write_ahead_logging_is_tried_again_while_another_process_holds_the_file() -> None:
    """SQLite refuses the switch at once, without its busy handler, to a process that would deadlock waiting (two
    opening a new file together): tried again until it passes; any other error, or one past the wait, is raised."""
    from lorafleet.store.db import _write_ahead

    busy = _Busy(refusals=3)
    _write_ahead(busy)  # type: ignore[arg-type]
    assert busy.tries == 4
    other = _Busy(refusals=1, error="disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _write_ahead(other)  # type: ignore[arg-type]
    assert other.tries == 1
    stuck = _Busy(refusals=10**6)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _write_ahead(stuck, wait_s=0.1)  # type: ignore[arg-type]
    assert 2 <= stuck.tries <= 10


def test_an_action_row_reads_back_field_for_field(tmp_path: Path) -> None:
    """Every field of an action row comes back where it was written (`stats loads` and the daemon read them)."""
    row = ActionRow(
        "2026-01-01T00:00:01.000Z", "daemon", "a-7", "h/e3", "failed", False, 12.5, 4096, "HTTP 500", "prefetch", True
    )
    with open_store(tmp_path / "s.db") as store:
        store.record_action(row)
        assert store.loads() == [row]
        assert store.loads("h/e3") == [row] and store.loads("h/e4") == []


def test_actions_since_name_each_new_row_with_whether_its_adapter_is_pinned(tmp_path: Path) -> None:
    """What a daemon learns of `warm` and `unload`: each row after the one it saw, its engine, adapter, action,
    outcome, and whether the engine's residency row pins the adapter."""
    with open_store(tmp_path / "s.db") as store:
        store.record_action(record("old"))
        seen = store.last_action_id()
        store.change_residency("h/e", [("pinned-one", 1, True)])
        store.record_action(record("pinned-one"))
        store.record_action(
            ActionRow("2026-01-01T00:00:02.000Z", "unload", "b", "h/f", "refused", False, None, 1, None)
        )
        store.record_action(ActionRow("2026-01-01T00:00:03.000Z", "daemon", "c", "h/e", "loaded", True, 1.0, 1, None))
        store.record_action(record("x", "h/g"))
        found = store.actions_since(seen, ["warm", "unload"])
    assert [(n.engine, n.adapter, n.action, n.ok, n.pinned) for n in found] == [
        ("h/e", "pinned-one", "loaded", True, True),
        ("h/f", "b", "refused", False, False),
        ("h/g", "x", "loaded", True, False),
    ]
    assert [n.id for n in found] == [seen + 1, seen + 2, seen + 4]  # the daemon's own row is not news


def test_a_full_database_is_named_as_full_and_the_store_takes_the_next_commit(tmp_path: Path) -> None:
    """SQLite rolls a transaction back by itself when the disk fills (here: `max_page_count`, the same SQLITE_FULL);
    the store must not then roll back again, or the error would read "cannot rollback - no transaction is active"
    and the cause would be lost."""
    from lorafleet.errors import OperationError
    from lorafleet.store.journal import Outcomes, commit_progress

    with open_store(tmp_path / "s.db") as store:
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        store.db.execute(f"PRAGMA max_page_count = {pages}")  # no page more: the disk is full
        many = {(f"2026-12-06T10:{i % 60:02d}Z", f"t{i}", "a", "h/e"): Outcomes(requests=1) for i in range(2000)}
        with pytest.raises(OperationError, match=r"database or disk is full$"), store.writing():
            commit_progress(store, many)
        assert not store.db.in_transaction
        store.db.execute("PRAGMA max_page_count = 1073741823")  # space again
        commit_progress(store, {("2026-12-06T10:00Z", "t", "a", "h/e"): Outcomes(requests=1)})
        assert store.db.execute("SELECT SUM(requests) FROM rollups").fetchone() == (1,)  # none of the refused
