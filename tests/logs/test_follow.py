"""The tail -F follower on real files: appends, partial lines, rotation by rename and copy-truncate, files that
appear or vanish, restarts from checkpoints."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lorafleet.logs.follow import OVER_LONG, Checkpoint, LogFollower
from lorafleet.logs.reader import MAX_LINE_BYTES


def lines_of(follower: LogFollower) -> list[bytes]:
    return [line for batch in follower.poll() for line in batch.lines]


def last_checkpoints(follower: LogFollower, into: dict[str, Checkpoint]) -> list[bytes]:
    out = []
    for batch in follower.poll():
        out += batch.lines
        into[batch.path] = batch.checkpoint
    return out


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def following(tmp_path: Path) -> tuple[Path, LogFollower]:
    """A log followed from its start, its first line ("1") read."""
    log = tmp_path / "a.log"
    log.write_text("")
    tail = LogFollower([str(log)], from_start=True)
    append(log, "1\n")
    assert lines_of(tail) == [b"1\n"]
    return log, tail


def read_then_stopped(tmp_path: Path, text: str) -> tuple[Path, dict[str, Checkpoint]]:
    """A log holding `text`, read to its end from its start, and the follower stopped: its checkpoints."""
    log = tmp_path / "a.log"
    log.write_text(text)
    saved: dict[str, Checkpoint] = {}
    first = LogFollower([str(log)], from_start=True)
    last_checkpoints(first, saved)
    first.close()
    return log, saved


def test_first_start_reads_from_the_end_unless_from_start(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("old 1\nold 2\n")
    assert lines_of(LogFollower([str(log)])) == []
    assert lines_of(LogFollower([str(log)], from_start=True)) == [b"old 1\n", b"old 2\n"]
    tail = LogFollower([str(log)])
    tail.poll()
    append(log, "new\n")
    assert lines_of(tail) == [b"new\n"]


def test_a_partial_line_is_held_until_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    tail = LogFollower([str(log)], from_start=True)
    append(log, "one\ntw")
    assert lines_of(tail) == [b"one\n"]
    assert lines_of(tail) == []
    append(log, "o\n")
    assert lines_of(tail) == [b"two\n"]


def test_starting_at_the_end_does_not_cut_a_line_being_written(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("done\nhalf")
    tail = LogFollower([str(log)])
    assert lines_of(tail) == []
    append(log, " line\n")
    assert lines_of(tail) == [b"half line\n"]


def test_rotation_by_rename_reads_the_old_file_to_its_end_then_the_new_one(tmp_path: Path) -> None:
    log, tail = following(tmp_path)
    append(log, "2\nlast-without-newline")
    os.rename(log, tmp_path / "a.log.1")
    assert lines_of(tail) == [b"2\n"]  # path missing: the old file is read on; its writer may not be done
    append(tmp_path / "a.log.1", " done\n")
    log.write_text("3\n")
    assert lines_of(tail) == [b"last-without-newline done\n", b"3\n"]
    assert tail.rotations == 1


def test_rotation_by_rename_with_the_new_file_already_there(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    tail = LogFollower([str(log)], from_start=True)
    append(log, "1\n")
    lines_of(tail)
    append(log, "2\n")
    os.rename(log, tmp_path / "a.log.1")
    log.write_text("3\n")
    assert lines_of(tail) == [b"2\n", b"3\n"]


def test_a_device_or_a_fifo_put_where_the_log_was_is_not_followed_and_a_file_there_again_is(tmp_path: Path) -> None:
    """/dev/zero would be read for ever and a FIFO's open blocks (SIGTERM never got a chance): neither is a log."""
    log, tail = following(tmp_path)
    append(log, "2\n")
    log.unlink()
    log.symlink_to("/dev/zero")
    assert lines_of(tail) == [b"2\n"]  # the old file drained, the device not opened
    assert lines_of(tail) == []
    log.unlink()
    os.mkfifo(log)
    assert lines_of(tail) == []  # returns: no open blocked on a writer
    log.unlink()
    log.write_text("3\n")
    assert lines_of(tail) == [b"3\n"]


def test_copy_truncate_starts_again_at_zero_even_when_rewritten_past_the_offset(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    tail = LogFollower([str(log)], from_start=True)
    append(log, "aaaa\n")
    assert lines_of(tail) == [b"aaaa\n"]
    shutil.copy(log, tmp_path / "a.log.1")
    with open(log, "r+") as fh:
        fh.truncate(0)
    append(log, "b\n")
    assert lines_of(tail) == [b"b\n"]
    assert tail.truncations == 1
    with open(log, "r+") as fh:
        fh.truncate(0)
    append(log, "cccccccccccc\n")  # longer than what was read: only the changed head shows the truncation
    assert lines_of(tail) == [b"cccccccccccc\n"]


def test_files_that_appear_later_are_read_from_their_start_and_vanished_ones_are_dropped(tmp_path: Path) -> None:
    pattern = str(tmp_path / "*.log")
    tail = LogFollower([pattern])
    assert lines_of(tail) == []
    (tmp_path / "b.log").write_text("b1\n")
    assert lines_of(tail) == [b"b1\n"]
    (tmp_path / "b.log").unlink()
    assert lines_of(tail) == []
    (tmp_path / "c.log").write_text("c1\n")
    assert lines_of(tail) == [b"c1\n"]


def test_an_over_long_line_is_skipped_to_its_newline_and_reported_once(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("")
    tail = LogFollower([str(log)], from_start=True, max_batch_bytes=4096)
    append(log, "x" * (MAX_LINE_BYTES + 10))
    seen = []
    for _ in range(30):  # in small reads: counted once, as soon as it is longer than a line may be
        seen += lines_of(tail)
    assert seen == [OVER_LONG]
    append(log, "tail of it\nok\n")
    for _ in range(40):
        seen += lines_of(tail)
    assert seen == [OVER_LONG, b"ok\n"]


def test_a_restart_inside_an_over_long_line_skips_the_rest_of_it_without_counting_it_again(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("first\n" + "x" * (3 * MAX_LINE_BYTES))
    saved: dict[str, Checkpoint] = {}
    first = LogFollower([str(log)], from_start=True, max_batch_bytes=MAX_LINE_BYTES)
    seen = [line for batch in first.poll() + first.poll() for line in batch.lines]
    last_checkpoints(first, saved)
    first.close()
    (checkpoint,) = saved.values()
    assert seen == [b"first\n", OVER_LONG] and checkpoint.skipping and checkpoint.offset > MAX_LINE_BYTES
    append(log, "x" * 1000 + "\nafter\n")
    again = LogFollower([str(log)], saved, max_batch_bytes=MAX_LINE_BYTES)
    assert [line for _ in range(10) for batch in again.poll() for line in batch.lines] == [b"after\n"]


def test_restart_resumes_at_the_checkpoint(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("1\n2\n")
    saved: dict[str, Checkpoint] = {}
    first = LogFollower([str(log)], from_start=True)
    assert last_checkpoints(first, saved) == [b"1\n", b"2\n"]
    first.close()
    append(log, "3\n")
    second = LogFollower([str(log)], saved)
    assert lines_of(second) == [b"3\n"]


def test_rotated_while_stopped_reads_the_rest_of_the_old_file_first(tmp_path: Path) -> None:
    log, saved = read_then_stopped(tmp_path, "1\n")
    append(log, "2\n")
    os.rename(log, tmp_path / "a.log.1")
    log.write_text("3\n")
    second = LogFollower([str(log)], saved)
    assert lines_of(second) + lines_of(second) == [b"2\n", b"3\n"]


def test_a_file_replaced_while_stopped_and_the_old_one_deleted_is_read_from_its_start(tmp_path: Path) -> None:
    log, saved = read_then_stopped(tmp_path, "1\n")
    log.unlink()
    log.write_text("new 1\n")
    assert lines_of(LogFollower([str(log)], saved)) == [b"new 1\n"]


def test_truncated_while_stopped_is_read_from_its_start(tmp_path: Path) -> None:
    log, saved = read_then_stopped(tmp_path, "first line\n")
    with open(log, "r+") as fh:
        fh.truncate(0)
    append(log, "other\n")
    assert lines_of(LogFollower([str(log)], saved)) == [b"other\n"]


def test_a_restart_with_nothing_new_reads_nothing_again(tmp_path: Path) -> None:
    """The file ends exactly at the checkpoint: not one line read twice (`>=`, not `>`: at `>` the whole file
    came again, every request counted twice)."""
    log = tmp_path / "a.log"
    log.write_text("1\n2\n")
    saved: dict[str, Checkpoint] = {}
    first = LogFollower([str(log)], from_start=True)
    assert last_checkpoints(first, saved) == [b"1\n", b"2\n"]
    first.close()
    second = LogFollower([str(log)], saved)
    assert lines_of(second) == []
    append(log, "3\n")
    assert lines_of(second) == [b"3\n"]


def test_rotated_while_stopped_and_rewritten_past_the_offset_is_read_from_its_start(tmp_path: Path) -> None:
    """Copy-truncated, written again past the old offset, then renamed away while lorafleet was stopped: the
    old file's head no longer matches, so it is read from its start (its size alone would have said resume)."""
    log, saved = read_then_stopped(tmp_path, "1\n")
    with open(log, "r+") as fh:
        fh.truncate(0)
    append(log, "rewritten 1\nrewritten 2\n")
    os.rename(log, tmp_path / "a.log.1")
    log.write_text("new\n")
    second = LogFollower([str(log)], saved)
    assert lines_of(second) + lines_of(second) == [b"rewritten 1\n", b"rewritten 2\n", b"new\n"]


def test_a_blank_line_at_the_start_of_a_read_does_not_stop_the_reading(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("\n1\n")
    tail = LogFollower([str(log)], from_start=True)
    assert lines_of(tail) == [b"\n", b"1\n"]  # the blank one is the parser's to skip
    append(log, "\n2\n")
    assert lines_of(tail) == [b"\n", b"2\n"]


def test_a_last_line_without_newline_is_read_when_its_file_is_rotated_away(tmp_path: Path) -> None:
    log, tail = following(tmp_path)
    append(log, "last")
    assert lines_of(tail) == []
    os.rename(log, tmp_path / "a.log.1")
    log.write_text("next\n")
    assert lines_of(tail) + lines_of(tail) == [b"last", b"next\n"]


def test_shorter_than_its_checkpoint_with_the_same_head_is_read_from_its_very_start(tmp_path: Path) -> None:
    """Truncated and written again while stopped, its first bytes the same as before (a gateway's fixed first
    line): shorter than the offset, so read from byte 0, its first line whole."""
    head = "x" * 300 + "\n"
    log, saved = read_then_stopped(tmp_path, head + "1\n2\n")
    log.write_text(head + "3\n")
    assert lines_of(LogFollower([str(log)], saved)) == [head.encode(), b"3\n"]
