"""One daemon per state file: an exclusive lock beside it, held for the daemon's life and released by the kernel
when the process ends however it ends (kill -9 included), so a second daemon cannot double-count the same logs.

The lock file holds the holder's pid, host and start time, for the refusal message. The state file itself is
locked too (flock, which SQLite's own fcntl locks do not see), so another name for the same file — a symlink or a
hard link — is the same journal and the same lock. A standby waits for the lock and takes over when the holder
dies, continuing from the journal's checkpoints.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from pathlib import Path

from lorafleet.errors import InputError
from lorafleet.stopping import Stop
from lorafleet.times import utc_now_text

log = logging.getLogger("lorafleet.daemon")


class StateLock:
    def __init__(self, state: Path) -> None:
        real = state.resolve()  # a symlink to the state file is the same journal: the same lock
        self.state = state
        self.path = real.with_name(real.name + ".lock")
        self.fd: int | None = None
        self.file_fd: int | None = None
        self.by_another_name = False  # the last refusal: the name's lock was free, the file's was not

    def try_take(self) -> bool:
        """Take the lock if it is free; then write who holds it. A lock that cannot be made (a read-only or
        missing folder, a folder in its place) is an input error: no daemon can run on that state file."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(
                f"cannot make the state file's lock {self.path}: {exc.strerror}",
                hint="pass --state PATH in a folder this user can write, or set LORAFLEET_STATE",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self.by_another_name = False
            return False
        try:
            file_fd = os.open(self.state, os.O_RDWR | os.O_CREAT, 0o644)  # an empty file is an empty SQLite database
        except OSError as exc:
            os.close(fd)
            raise InputError(
                f"state database {self.state}: {exc.strerror}", hint="pass --state PATH or set LORAFLEET_STATE"
            ) from exc
        try:
            fcntl.flock(file_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(file_fd)
            os.close(fd)
            self.by_another_name = True
            return False
        self.file_fd = file_fd
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {utc_now_text()}\n".encode())
        os.fsync(fd)
        self.fd = fd
        return True

    def holder(self) -> str:
        if self.by_another_name:
            return "a daemon that opened it by another name (a hard link to it)"
        try:
            return self.path.read_text(encoding="utf-8", errors="replace").strip() or "an unknown process"
        except OSError:
            return "an unknown process"

    def release(self) -> None:
        """After the store is closed: closing a descriptor of the state file drops every fcntl lock this process
        holds on it, SQLite's included."""
        if self.file_fd is not None:
            os.close(self.file_fd)
            self.file_fd = None
        if self.fd is not None:
            os.close(self.fd)  # the lock goes with the descriptor
            self.fd = None


def hold_state(state: Path, standby: bool = False, stop: Stop | None = None, every_s: float = 0.5) -> StateLock | None:
    """The state file's lock, or an input error naming who holds it; `standby`: wait until it is free (None when
    a stop ends the wait)."""
    lock = StateLock(state)
    if lock.try_take():
        return lock
    holder = lock.holder()
    if not standby:
        raise InputError(
            f"another daemon is running on the state file {state}: {holder}",
            hint="one daemon per state file: stop it, use another --state, or pass --standby to take over",
        )
    log.warning("standby: %s holds %s; taking over when it stops", holder, state)
    stop = stop or Stop()
    while not lock.try_take():
        if stop.wait(every_s):
            return None
    log.warning("standby: took over %s from %s", state, holder)
    return lock


__all__ = ["StateLock", "hold_state"]
