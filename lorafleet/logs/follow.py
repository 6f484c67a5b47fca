"""Follow log files like `tail -F`, with checkpoints a crash cannot get wrong.

A file is known by (device, inode) and a hash of its first bytes. Rotation by rename gives the path a new inode:
the old file is read to its end first (through the open descriptor, or found again by inode in its directory
after a restart), then the new one from its start. Rotation by copy-truncate shrinks the file below the offset
read: reading starts again at 0. A last line without its newline is held until the newline comes (or until the
file is rotated away: then it is the file's last line). A line longer than MAX_LINE_BYTES is skipped up to its
newline and reported once, as one over-long line, so no line can exhaust memory.

`poll()` returns batches of complete lines, each with the checkpoint that is true once they are consumed. The
caller commits the checkpoint in the same transaction as whatever it derived from the lines: after a crash,
reading resumes exactly after the last committed line, so nothing is lost and nothing is counted twice.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import logging
import os
import resource
import stat
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, ClassVar

from lorafleet.logs.reader import MAX_LINE_BYTES

log = logging.getLogger("lorafleet.logs.follow")
HEAD_BYTES = 256  # how much of a file's start identifies it (hashed)
OVER_LONG = b"x" * (MAX_LINE_BYTES + 1)  # stands for a skipped over-long line: the parser counts it as bad


@dataclass(frozen=True)
class Checkpoint:
    """Where reading of one path stands: the file (device, inode, head hash of `head_len` bytes) and the offset
    just after the last consumed line."""

    path: str
    device: int
    inode: int
    offset: int
    head_len: int
    head_hash: str
    skipping: bool = False  # the offset is inside an over-long line already counted: skip up to its newline


@dataclass
class Batch:
    """Complete lines of one path, the bytes the reading moved on, and the checkpoint once they are consumed."""

    path: str
    lines: list[bytes]
    checkpoint: Checkpoint
    advanced: int = 0


def _head(fh: BinaryIO, length: int) -> tuple[int, str]:
    where = fh.tell()
    fh.seek(0)
    data = fh.read(length)
    fh.seek(where)
    return len(data), hashlib.sha1(data).hexdigest()  # identifies a file; not security


@dataclass
class _Tail:
    path: str
    fh: BinaryIO
    device: int
    inode: int
    offset: int  # just after the last complete line handed out
    pending: bytearray = field(default_factory=bytearray)
    skipping: bool = False  # inside an over-long line, discarding up to its newline
    head: tuple[int, str] = (0, "")  # (length, hash) of its first bytes when last checked
    unread: int = 0  # bytes past what was read, as of the last poll's stat (the log lag)

    def replaced_in_place(self) -> bool:
        """The file's first bytes changed: it was truncated and written again (copy-truncate), even if it has
        grown past the offset read since."""
        return _head(self.fh, self.head[0]) != self.head

    def read(self, limit: int) -> tuple[list[bytes], bool]:
        """Complete lines from the current position (at most about `limit` bytes); True when at end of file."""
        fh = self.fh
        data = fh.read(limit)
        if not data:
            return [], True
        lines: list[bytes] = []
        buffer = self.pending + data
        start = 0
        consumed = self.offset
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buffer[start : end + 1])
            consumed += end + 1 - start
            start = end + 1
            if self.skipping:
                self.skipping = False  # the end of an over-long line, counted when it began
            elif len(line) > MAX_LINE_BYTES + 1:
                lines.append(OVER_LONG)
            else:
                lines.append(line)
        rest = buffer[start:]
        if self.skipping:  # still inside the over-long line: all of this is its
            consumed += len(rest)
            rest = bytearray()
        elif len(rest) > MAX_LINE_BYTES:
            consumed += len(rest)  # counted now, once; the rest is skipped up to its newline
            self.skipping = True
            lines.append(OVER_LONG)
            rest = bytearray()
        self.pending = bytearray(rest)
        self.offset = consumed
        return lines, len(data) < limit

    def flush_partial(self) -> list[bytes]:
        """The file is rotated away: a last line without newline is its last line."""
        lines = []
        if not self.skipping and self.pending.strip():  # an over-long line was counted when it began
            lines.append(bytes(self.pending))
        self.offset += len(self.pending)
        self.pending = bytearray()
        self.skipping = False
        return lines

    def rewind(self) -> None:
        """The file was rewritten in place: read it again from its start."""
        self.fh.seek(0)
        self.offset = 0
        self.head = _head(self.fh, 0)
        self.pending = bytearray()
        self.skipping = False

    def checkpoint(self) -> Checkpoint:
        self.head = head_len, head_hash = _head(self.fh, HEAD_BYTES)
        return Checkpoint(self.path, self.device, self.inode, self.offset, head_len, head_hash, self.skipping)

    def close(self) -> None:
        _Held.files.discard(self.fh)
        self.fh.close()


def _old_size(tail: _Tail) -> int:
    """The size of the file a tail has open, whatever its name is now."""
    return os.fstat(tail.fh.fileno()).st_size


class _Held:
    """The log files this process holds open, every follower's together: at most half its open-files limit, the
    rest left to the journal, the engines' connections and the directory scans (a glob that finds no descriptor
    finds no file, and says nothing). Weakly: a follower dropped without closing takes its files with it."""

    files: ClassVar[weakref.WeakSet[BinaryIO]] = weakref.WeakSet()

    @staticmethod
    def limit() -> int:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return (1 << 62) if soft == resource.RLIM_INFINITY else soft // 2


LIMIT_REACHED = "half the open-files limit is held by log files already"


def _open(path: str) -> tuple[BinaryIO, os.stat_result]:
    """A log file opened for following (closed by _Tail.close), within the share of descriptors logs may hold."""
    if len(_Held.files) >= _Held.limit():
        raise OSError(errno.EMFILE, LIMIT_REACHED)
    fh = open(path, "rb")  # noqa: SIM115 - kept open across polls, closed by _Tail.close
    try:
        st = os.fstat(fh.fileno())
    except OSError:
        fh.close()
        raise
    _Held.files.add(fh)
    return fh, st


def _say_unopened(unopened: dict[str, str], followed: int) -> None:
    if not unopened:
        log.warning("every matching log file is followed again (%d)", followed)
        return
    reasons = sorted(set(unopened.values()))
    names = sorted(unopened)
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    hint = ""
    if {os.strerror(errno.EMFILE), LIMIT_REACHED}.intersection(reasons):
        hint = (
            "; each followed file holds a descriptor: raise the open-files limit (ulimit -n, LimitNOFILE=) or "
            "narrow the pattern"
        )
    log.warning(
        "%d matching log file(s) cannot be opened (%s): %s; not followed (%d are) until they can be%s",
        len(names),
        "; ".join(reasons),
        shown,
        followed,
        hint,
    )


def _matches(fh: BinaryIO, checkpoint: Checkpoint) -> bool:
    head_len, head_hash = _head(fh, checkpoint.head_len)
    return head_len == checkpoint.head_len and head_hash == checkpoint.head_hash


class LogFollower:
    """Follows every file matching `patterns`; files may appear later or vanish."""

    def __init__(
        self,
        patterns: Iterable[str],
        checkpoints: dict[str, Checkpoint] | None = None,
        from_start: bool = False,
        max_batch_bytes: int = 256 << 10,  # small reads: large ones fragment the C heap of a long-lived process
    ) -> None:
        self.patterns = list(patterns)
        self.saved = dict(checkpoints or {})
        self.from_start = from_start
        self.max_batch_bytes = max_batch_bytes
        self.tails: dict[str, _Tail] = {}
        self.rotated: list[_Tail] = []  # old files still being read after a rotation
        self.first_scan = True
        self.rotations = 0
        self.truncations = 0
        self.unopened: dict[str, str] = {}  # matching files that could not be opened at the last look: why

    def paths(self) -> list[str]:
        found: list[str] = []
        for pattern in self.patterns:
            if glob.has_magic(pattern):
                found.extend(sorted(p for p in glob.glob(pattern) if os.path.isfile(p)))
            elif os.path.isfile(pattern):
                found.append(pattern)
        return list(dict.fromkeys(found))

    def _start(self, path: str) -> str | None:
        """Begin following `path`: from its checkpoint when it still names this file (or its rotated copy),
        from its end on a first start (unless from_start), from 0 for a file that appeared while running. Only a
        regular file: a FIFO put in its place would block the open, a device (/dev/zero) never end. Returns why
        the file could not be opened (None: followed, or gone since it was listed)."""
        if not os.path.isfile(path):
            return None
        try:
            fh, st = _open(path)
        except FileNotFoundError:
            return None  # removed between the listing and the open: no file, no news
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        saved = self.saved.pop(path, None)
        offset = 0
        skipping = False
        if saved is not None:
            same_file = (st.st_dev, st.st_ino) == (saved.device, saved.inode)
            if same_file and _matches(fh, saved):
                offset = saved.offset if st.st_size >= saved.offset else 0
                skipping = saved.skipping and offset > 0
            elif same_file:
                log.info("%s: rewritten in place while stopped (copy-truncate): reading it from its start", path)
            else:
                self._resume_rotated(path, saved)
        elif self.first_scan and not self.from_start:
            offset = st.st_size
        tail = _Tail(path, fh, st.st_dev, st.st_ino, offset, skipping=skipping)
        if offset and offset == st.st_size and not saved:
            self._skip_to_line_start(tail)
        tail.head = _head(fh, min(tail.offset, HEAD_BYTES))
        fh.seek(tail.offset)
        self.tails[path] = tail
        return None

    def _skip_to_line_start(self, tail: _Tail) -> None:
        """Starting at a file's end: a last line still being written is not skipped half-read, so the offset moves
        back to just after the last newline."""
        fh = tail.fh
        back = min(tail.offset, MAX_LINE_BYTES)
        fh.seek(tail.offset - back)
        chunk = fh.read(back)
        cut = chunk.rfind(b"\n")
        tail.offset = tail.offset - back + cut + 1 if cut >= 0 else tail.offset

    def _resume_rotated(self, path: str, saved: Checkpoint) -> None:
        """After a restart the path names a new file: read the old one on from its offset if it is still in the
        directory (renamed by rotation), found by inode and head."""
        directory = Path(path).parent
        try:
            candidates = list(directory.iterdir())
        except OSError:
            candidates = []
        for candidate in candidates:
            try:
                st = candidate.stat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) != (saved.device, saved.inode):
                continue
            try:
                fh, st = _open(str(candidate))
            except OSError as exc:
                log.warning("%s: rotated while stopped to %s, which cannot be opened (%s): its unread lines are lost",
                            path, candidate, exc.strerror or type(exc).__name__)  # fmt: skip
                return
            rewritten = not _matches(fh, saved) or st.st_size < saved.offset
            offset = 0 if rewritten else saved.offset
            fh.seek(offset)
            head = _head(fh, min(offset, HEAD_BYTES))
            skipping = saved.skipping and not rewritten
            self.rotated.append(_Tail(path, fh, st.st_dev, st.st_ino, offset, skipping=skipping, head=head))
            if rewritten:  # copy-truncate, then renamed: the old file holds new lines from its start
                log.info("%s: rotated while stopped to %s, which was rewritten since (copy-truncate): reading its "
                         "%d bytes from the start", path, candidate, st.st_size)  # fmt: skip
            else:
                log.info("%s: rotated while stopped to %s: reading it from offset %d (%d bytes) first",
                         path, candidate, offset, st.st_size - offset)  # fmt: skip
            return
        log.warning("%s: the file last read (inode %d) is gone; reading the new one from its start", path, saved.inode)

    def open(self) -> None:
        """Open the files that match and are not followed yet (a first start: at their current ends). One that
        cannot be opened is tried again at the next look, and said once (a file skipped in silence would lose its
        lines without a word: a glob over hundreds of files under a shell's limit of 1024 descriptors)."""
        unopened: dict[str, str] = {}
        for path in self.paths():
            if path not in self.tails:
                reason = self._start(path)
                if reason is not None:
                    unopened[path] = reason
        self.first_scan = False
        if unopened.keys() != self.unopened.keys():
            _say_unopened(unopened, len(self.tails))
        self.unopened = unopened

    def poll(self) -> list[Batch]:
        """Lines written since the last poll, per file; a rotated file is finished before its successor."""
        self.open()
        batches: list[Batch] = []
        budget = self.max_batch_bytes
        while self.rotated:
            tail = self.rotated[0]
            before = tail.offset
            lines, at_end = tail.read(budget)
            if at_end:
                lines += tail.flush_partial()
            if not at_end:
                batches.append(Batch(tail.path, lines, tail.checkpoint(), tail.offset - before))
                return batches
            tail.close()
            self.rotated.pop(0)
            successor = self.tails.get(tail.path)
            # Once the old file is done, the path's checkpoint is its successor's start.
            checkpoint = successor.checkpoint() if successor is not None else tail.checkpoint()
            batches.append(Batch(tail.path, lines, checkpoint, max(1, tail.offset - before)))
        for path, tail in list(self.tails.items()):
            batches.extend(self._poll_one(path, tail, budget))
        return batches

    def _poll_one(self, path: str, tail: _Tail, budget: int) -> list[Batch]:
        out: list[Batch] = []
        try:
            st = os.stat(path)
        except OSError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            st = None  # a device or a FIFO in the log's place is no log: as if missing, the old file read on
        if st is not None and (st.st_dev, st.st_ino) != (tail.device, tail.inode):
            # Renamed away: drain the old file through its descriptor, then follow the new one from its start.
            if _old_size(tail) < tail.offset or tail.replaced_in_place():
                log.info("%s: truncated and rewritten (copy-truncate) before it was renamed: reading the old file "
                         "from its start", path)  # fmt: skip
                tail.rewind()
            lines: list[bytes] = []
            while True:
                chunk, at_end = tail.read(budget)
                lines += chunk
                if at_end:
                    break
            lines += tail.flush_partial()
            tail.close()
            self.rotations += 1
            log.info("%s: rotated (new inode); the old file read to its end (%d lines)", path, len(lines))
            del self.tails[path]
            self._start(path)  # no checkpoint and not the first scan: from its start
            new = self.tails.get(path)
            checkpoint = new.checkpoint() if new is not None else None
            if checkpoint is not None:
                out.append(Batch(path, lines, checkpoint))
                rest = self._poll_one(path, self.tails[path], budget)
                out.extend(rest)
            return out
        if st is not None and (st.st_size < tail.offset or tail.replaced_in_place()):
            self.truncations += 1
            log.info(
                "%s: truncated (copy-truncate rotation) at offset %d; reading it from its start", path, tail.offset
            )
            tail.rewind()
        before = tail.offset
        lines, _ = tail.read(budget)
        if lines or tail.offset != before:  # skipping an over-long line is progress too
            out.append(Batch(path, lines, tail.checkpoint(), tail.offset - before))
        if st is not None:
            tail.unread = max(0, st.st_size - tail.offset - len(tail.pending))
        return out

    def checkpoints(self) -> list[Checkpoint]:
        """Where every followed file stands now (a first start from the end pins its starting point with these)."""
        return [tail.checkpoint() for tail in self.tails.values()]

    def lag_bytes(self) -> int:
        """Bytes written but not read yet, over every followed file, as of the last poll (no I/O of its own)."""
        return sum(tail.unread for tail in self.tails.values())

    def close(self) -> None:
        for tail in [*self.tails.values(), *self.rotated]:
            tail.close()
        self.tails.clear()
        self.rotated.clear()


__all__ = ["Batch", "Checkpoint", "LogFollower"]
