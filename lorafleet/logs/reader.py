"""Turn log lines into RequestEvents using the inventory's field mapping; a bad line is counted, never fatal.

A name read from a log is data: it becomes an inventory adapter id only by exact match (or SGLang's
`base:adapter` form), never a path.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lorafleet.errors import InputError
from lorafleet.inventory.model import Inventory, LogSource
from lorafleet.logs.nginx import NginxFormat
from lorafleet.logs.records import LogTally, storable
from lorafleet.logs.timeparse import TimeParseError, parse_time
from lorafleet.paths import is_device
from lorafleet.policy.events import ADAPTER, BASE, UNKNOWN, RequestEvent
from lorafleet.units import plural

MAX_LINE_BYTES = 64 * 1024
MAX_NAME_CHARS = 256
DEFAULT_JSONL = LogSource(
    path="access.jsonl",
    format="jsonl",
    fields={
        "time": "ts",
        "tenant": "tenant_id",
        "adapter": "model",
        "engine": "upstream",
        "status": "status",
        "ttft_ms": "ttft_ms",
        "duration_s": "duration_s",
        "request_id": "request_id",
    },
)


class NameResolver:
    """Maps raw log values to inventory adapters, base models and engines."""

    def __init__(self, inventory: Inventory) -> None:
        self.adapters = {a.id: a.base_model for a in inventory.adapters.values()}
        self.base_models: dict[str, str] = {}
        for base in inventory.base_models.values():
            self.base_models[base.id] = base.id
            self.base_models[base.name] = base.id
        self.engines: dict[str, str] = {}
        for engine in inventory.engines:
            self.engines[engine.key] = engine.key
            parts = urlsplit(engine.url)
            if parts.hostname:
                port = parts.port or (443 if parts.scheme == "https" else 80)
                self.engines.setdefault(f"{parts.hostname}:{port}", engine.key)
                self.engines.setdefault(engine.url, engine.key)

    def model(self, raw: Any) -> tuple[str, str | None, str | None]:
        """(kind, adapter id, base model) for the value of the adapter field."""
        if raw is None:
            return UNKNOWN, None, None
        name = str(raw).strip()
        if not name or len(name) > MAX_NAME_CHARS:
            return UNKNOWN, None, None
        if name in self.adapters:
            return ADAPTER, name, self.adapters[name]
        if ":" in name:
            base, _, adapter = name.rpartition(":")
            if adapter in self.adapters:
                return ADAPTER, adapter, self.adapters[adapter]
            if base in self.base_models and not adapter:
                return BASE, None, self.base_models[base]
        if name in self.base_models:
            return BASE, None, self.base_models[name]
        return UNKNOWN, None, None

    def engine(self, raw: Any) -> str | None:
        if raw is None:
            return None
        value = str(raw).strip()
        if value in self.engines:
            return self.engines[value]
        if "://" in value:
            try:  # a malformed address (an unclosed IPv6 bracket, a port past 65535) names no engine
                parts = urlsplit(value)
                host, port = parts.hostname, parts.port
            except ValueError:
                return None
            if host and port:
                return self.engines.get(f"{host}:{port}")
        return None


def _dig(record: Any, path: str) -> Any:
    if isinstance(record, dict) and path in record:
        return record[path]
    value = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class LineParser:
    """Parses one log format's lines into events, tallying every line."""

    def __init__(
        self,
        source: LogSource,
        inventory: Inventory,
        resolver: NameResolver | None = None,
        not_after: Callable[[], float] | None = None,
    ) -> None:
        """`not_after`: the latest time a line may carry (a live log's: a day past this machine's clock), or None
        (a recorded or synthetic log, whose times may be anything)."""
        self.not_after = not_after
        self.source = source
        self.fields = source.fields
        self.resolver = resolver or NameResolver(inventory)
        self.nginx = NginxFormat(source.log_format) if source.format == "nginx" and source.log_format else None
        self.tally = LogTally()
        self._order = 0
        # Each field's key, looked up once here rather than per line; a mapping whose keys name no nested field
        # (none has a dot) reads every line with the record's own `get`.
        fields = self.fields
        self._flat = not any("." in key for key in fields.values())
        self._adapter = fields["adapter"]
        self._time, self._tenant, self._engine = fields.get("time"), fields.get("tenant"), fields.get("engine")
        self._request_id, self._duration = fields.get("request_id"), fields.get("duration_s")
        self._numeric = tuple((name, fields[name], low, high) for name, low, high in NUMERIC_FIELDS if name in fields)

    def parse(self, raw: bytes | str) -> RequestEvent | None:
        self.tally.lines += 1
        self._order += 1
        if isinstance(raw, bytes):
            if len(raw) > MAX_LINE_BYTES:
                self.tally.bad("over-long line")
                return None
            if b"\x00" in raw:
                self.tally.bad("binary data")
                return None
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                self.tally.bad("not UTF-8")
                return None
        else:
            line = raw
            if len(line) > MAX_LINE_BYTES:
                self.tally.bad("over-long line")
                return None
        line = line.strip()
        if not line:
            self.tally.lines -= 1  # blank lines are not requests
            return None
        record: Any  # untyped until checked: a line may hold any JSON value (compiled, a wrong type would raise)
        if self.nginx is not None:
            record = self.nginx.parse(line)
            if record is None:
                self.tally.bad("does not match log_format")
                return None
        else:
            try:
                record = _DECODER.decode(line)
            except _NonFiniteError:
                self.tally.bad("non-finite number (NaN or Infinity)")
                return None
            except (ValueError, RecursionError):  # ValueError: bad JSON, or an integer past Python's digit limit
                self.tally.bad("not JSON")
                return None
            if not isinstance(record, dict):
                self.tally.bad("not a JSON object")
                return None
        return self._event(record)

    def _event(self, record: dict[str, Any]) -> RequestEvent | None:
        dig: Callable[[str], Any] = record.get if self._flat else partial(_dig, record)
        raw_model = dig(self._adapter)
        if raw_model is None:
            self.tally.bad("missing adapter field")
            return None
        if self._time is not None:
            raw_time = dig(self._time)
            if raw_time is None:
                self.tally.bad("missing time field")
                return None
            try:
                when = parse_time(raw_time)
            except TimeParseError:
                self.tally.bad("unparseable time")
                return None
            if self.not_after is not None and when > self.not_after():
                # One such line would move the daemon's clock to it, and every later request would be taken then.
                self.tally.bad("time more than a day ahead of this machine's clock")
                return None
        else:
            when = float(self._order)  # no time in this log: one request per second, in order
        numbers: dict[str, float | None] = {}
        for name, key, low, high in self._numeric:
            try:
                numbers[name] = _number(dig(key), low, high)
            except ValueError:
                self.tally.bad(f"{name} not a number in [{low:g}, {high:g}]")
                return None
        status = numbers.get("status")
        tenant = None if self._tenant is None else dig(self._tenant)
        request_id = None if self._request_id is None else dig(self._request_id)
        if not storable(raw_model, tenant, request_id):
            self.tally.bad("not storable text (a lone surrogate)")
            return None
        # The line's time is the request's end; with its duration, the arrival is known. A duration that is not
        # a number (nginx's "-" for a request no upstream answered, several upstreams' "0.1, 0.2") leaves the
        # line's time as both: the request is kept, not dropped.
        seen = None
        if self._duration is not None:
            try:
                duration = _number(dig(self._duration), 0, 86_400)
            except ValueError:
                duration = None
            if duration is not None:
                seen, when = when, when - duration
        kind, adapter, base = self.resolver.model(raw_model)
        engine = None if self._engine is None else self.resolver.engine(dig(self._engine))
        event = RequestEvent(
            time=when,
            kind=kind,
            adapter=adapter,
            tenant=None if tenant is None else str(tenant)[:MAX_NAME_CHARS],
            engine=engine,
            base_model=base,
            status=None if status is None else int(status),
            ttft_ms=numbers.get("ttft_ms"),
            seen=seen,
            request_id=None if request_id in (None, "", "-") else str(request_id)[:MAX_NAME_CHARS],
        )
        self.tally.timed += seen is not None
        self.tally.unplaced += engine is None and kind == ADAPTER
        self.tally.count(event, None if isinstance(raw_model, (dict, list)) else str(raw_model))
        return event


# Numeric fields and the range a real request can have; anything else makes the line bad, with a reason.
NUMERIC_FIELDS = (("status", 100, 599), ("ttft_ms", 0, 86_400_000))


class _NonFiniteError(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _NonFiniteError(name)


_DECODER = json.JSONDecoder(parse_constant=_no_constant)  # one decoder: json.loads with options builds one per call


def _number(value: Any, low: float, high: float) -> float | None:
    """The value as a finite number in [low, high]; None when absent (nginx "-"); ValueError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or len(str(value)) > 32:
        raise ValueError("not a number")
    try:
        number = float(value)
    except OverflowError as exc:
        raise ValueError("out of range") from exc
    if not (math.isfinite(number) and low <= number <= high):
        raise ValueError("out of range")
    return number


def source_for(path: str | os.PathLike[str], inventory: Inventory) -> LogSource:
    """The gateway log entry describing `path`: same file name first, else the first entry, else JSON lines."""
    name = Path(path).name
    for source in inventory.gateway_logs:
        if Path(source.path).name == name:
            return source
    if inventory.gateway_logs:
        return inventory.gateway_logs[0]
    return DEFAULT_JSONL


GZIP_MAGIC = b"\x1f\x8b"


def iter_lines(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """Raw lines, each capped so a line without newlines cannot exhaust memory; a log that cannot be opened (a
    folder, no permission) is an input error naming it. A gzip-compressed log (logrotate's `compress`: last
    week's logs are `access.log.2.gz`) is read through gzip, whatever its name; one broken off is an input error."""
    if is_device(path):
        raise InputError(f"cannot read log {os.fspath(path)}: a device, not a file")
    fh: Any
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed in the finally below; only the open's failure is the input's
        if fh.read(2) == GZIP_MAGIC:
            fh.close()
            fh = gzip.open(path, "rb")  # noqa: SIM115 - closed in the finally below
        else:
            fh.seek(0)
    except OSError as exc:
        raise InputError(f"cannot read log {os.fspath(path)}: {exc.strerror}") from exc
    try:
        yield from _capped_lines(fh)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(f"cannot read log {os.fspath(path)}: compressed data broken off ({exc})") from exc
    finally:
        fh.close()


def _capped_lines(fh: Any) -> Iterator[bytes]:
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            # Skip the rest of an over-long line, then report it once.
            while line and not line.endswith(b"\n"):
                line = fh.readline(MAX_LINE_BYTES + 1)
            yield b"x" * (MAX_LINE_BYTES + 1)
            continue
        yield line


def read_requests(
    paths: Sequence[str | os.PathLike[str]], inventory: Inventory, source: LogSource | None = None
) -> tuple[list[RequestEvent], LogTally]:
    """`read_events` for a command that needs adapter requests (replay, plan): none at all is an input error
    that says what the lines were read as, the way to fix a field mapping."""
    events, tally = read_events(paths, inventory, source)
    if tally.adapter_requests == 0:
        names = ", ".join(str(p) for p in paths)
        raise InputError(
            f"no adapter requests in {names} ({plural(tally.lines, 'line')}, {tally.bad_lines} bad, "
            f"{tally.unknown_requests} naming adapters the inventory does not know)",
            hint=_explain_bad_lines(tally, source or source_for(paths[0], inventory)),
        )
    return events, tally


def _explain_bad_lines(tally: LogTally, source: LogSource) -> str | None:
    """What went wrong with the lines, and what they were read as."""
    if not tally.bad_reasons:
        return None
    reasons = ", ".join(
        f"{reason} ({count:,})" for reason, count in sorted(tally.bad_reasons.items(), key=lambda kv: -kv[1])
    )
    fields = ", ".join(f"{k}: {v}" for k, v in source.fields.items())
    expected = f"nginx log_format {source.log_format!r}" if source.format == "nginx" else "JSON lines"
    return f"bad lines: {reasons}; they were read as {expected} with fields {{{fields}}} (see gateway.logs)"


def read_events(
    paths: Iterable[str | os.PathLike[str]], inventory: Inventory, source: LogSource | None = None
) -> tuple[list[RequestEvent], LogTally]:
    """All events of the given logs, ordered by time (stable for equal times)."""
    tally = LogTally()
    events: list[RequestEvent] = []
    resolver = NameResolver(inventory)
    for path in paths:
        parser = LineParser(source or source_for(path, inventory), inventory, resolver)
        for line in iter_lines(path):
            event = parser.parse(line)
            if event is not None:
                events.append(event)
        tally.merge(parser.tally)
    events.sort(key=lambda e: e.time)
    return events, tally
