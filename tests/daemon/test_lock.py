"""The state file's lock, in one process (flock locks are per open file, so two StateLocks here contend as two
daemons would): one holder by any name, who holds it said, a standby that takes over or stops waiting, and a
lock that cannot be made an input error. The daemons' own contention is in test_faults.py."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from pathlib import Path

import pytest

from lorafleet.daemon.lock import StateLock, hold_state
from lorafleet.errors import InputError
from lorafleet.stopping import Stop


def test_one_holder_per_state_file_by_any_name_and_a_refusal_says_who(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    first = StateLock(state)
    assert first.try_take()
    said = (tmp_path / "s.db.lock").read_text()
    assert said.startswith(f"pid {os.getpid()} on {socket.gethostname()} since ") and said.endswith("\n")
    second = StateLock(state)
    assert not second.try_take() and not second.by_another_name
    assert second.holder() == said.strip()  # the refused attempt wrote nothing over it
    link = tmp_path / "link.db"
    link.symlink_to(state)
    assert not StateLock(link).try_take()  # a symlink is the same journal: the same lock file
    hard = tmp_path / "other" / "hard.db"
    hard.parent.mkdir()
    os.link(state, hard)  # its own lock file, the same journal: the file's own lock refuses it
    other = StateLock(hard)
    assert not other.try_take() and other.by_another_name
    assert other.holder() == "a daemon that opened it by another name (a hard link to it)"
    with pytest.raises(
        InputError, match=re.escape(f"another daemon is running on the state file {state}: pid {os.getpid()} ")
    ):
        hold_state(state)
    first.release()
    first.release()  # twice is harmless
    assert (first.fd, first.file_fd) == (None, None)
    again = hold_state(hard)  # released: every name of it is free
    assert again is not None and again.fd is not None
    again.release()


def test_a_standby_takes_over_when_the_holder_lets_go_and_a_stop_ends_its_wait(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    holder = StateLock(state)
    assert holder.try_take()
    got: list[StateLock | None] = []
    standby = threading.Thread(target=lambda: got.append(hold_state(state, standby=True, every_s=0.01)))
    standby.start()
    time.sleep(0.2)
    assert standby.is_alive() and got == []  # waiting
    holder.release()
    standby.join(5)
    assert len(got) == 1 and got[0] is not None and got[0].fd is not None
    assert (tmp_path / "s.db.lock").read_text().startswith(f"pid {os.getpid()} ")

    stop, waited = Stop(), []
    second = threading.Thread(target=lambda: waited.append(hold_state(state, True, stop, every_s=0.01)))
    second.start()
    time.sleep(0.1)
    stop.set()
    second.join(5)
    assert waited == [None]  # stopped while the lock was still held
    got[0].release()


def test_a_state_file_in_a_folder_not_made_yet_gets_its_folder(tmp_path: Path) -> None:
    lock = StateLock(tmp_path / "new" / "deeper" / "s.db")
    assert lock.try_take() and (tmp_path / "new" / "deeper" / "s.db.lock").is_file()
    lock.release()


def test_a_lock_or_state_file_that_cannot_be_made_is_an_input_error_that_holds_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match=re.escape(f"cannot make the state file's lock {tmp_path}/file/s.db.lock:")):
        StateLock(tmp_path / "file" / "s.db").try_take()  # its folder is a file
    (tmp_path / "dir.db").mkdir()  # the state's name is a folder: its lock can be made, the file cannot
    for _ in range(2):  # the second attempt is refused the same way: the first let go of the lock it took
        with pytest.raises(InputError, match=re.escape(f"state database {tmp_path}/dir.db: Is a directory")):
            StateLock(tmp_path / "dir.db").try_take()
