"""Access-log parsing: JSON-lines mappings, nginx log_format, junk lines, time formats, name resolution."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lorafleet.inventory import load_inventory
from lorafleet.inventory.model import LogSource
from lorafleet.logs.nginx import NginxFormat
from lorafleet.logs.reader import LineParser, read_events
from lorafleet.logs.timeparse import TimeParseError, parse_time
from lorafleet.policy.events import ADAPTER, BASE, UNKNOWN
from tests.conftest import INVENTORIES

REFERENCE = load_inventory(INVENTORIES / "reference.yaml")
JSONL, NGINX = REFERENCE.gateway_logs
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-11-29T12:00:00Z", T0),
        ("2026-11-29T12:00:00.250+00:00", T0 + 0.25),
        ("2026-11-29T13:00:00+01:00", T0),
        ("2026-11-29 12:00:00", T0),  # naive: taken as UTC
        (T0, T0),
        (int(T0 * 1000), T0),  # epoch milliseconds
        (str(T0), T0),
        ("29/Nov/2026:13:00:00 +0100", T0),  # nginx $time_local
        ("10/Oct/2000:13:55:36 -0700", 971211336.0),  # nginx's own example: seconds, minutes, a western offset
        ("06/Dec/2026:09:07:05 +0530", 1796528225.0),
        (0, 0.0),  # the epoch itself is a time
        ("1970-01-01T00:00:00Z", 0.0),
    ],
)
def test_time_formats(value: object, expected: float) -> None:
    # Exact to the microsecond: approx's default relative tolerance is half an hour at today's epoch.
    assert parse_time(value) == pytest.approx(expected, rel=0, abs=1e-6)


@pytest.mark.parametrize("value", ["yesterday", "", None, True, -5, "32/Foo/2026:00:00:00 +0000"])
def test_bad_times(value: object) -> None:
    with pytest.raises(TimeParseError):
        parse_time(value)


def test_jsonl_mapping_with_dotted_paths_and_name_forms() -> None:
    source = LogSource(
        "x.jsonl",
        "jsonl",
        {
            "time": "ts",
            "tenant": "req.tenant.id",
            "adapter": "body.model",
            "engine": "upstream",
            "status": "status",
            "ttft_ms": "timing.ttft",
        },
    )
    parser = LineParser(source, REFERENCE)
    line = {
        "ts": "2026-11-29T12:00:00Z",
        "req": {"tenant": {"id": "globex-dev"}},
        "body": {"model": "code-llama3-r64"},
        "upstream": "10.20.1.15:8000",
        "status": 200,
        "timing": {"ttft": 41.5},
    }
    event = parser.parse(json.dumps(line))
    assert event is not None
    assert (event.kind, event.adapter, event.base_model, event.tenant) == (
        ADAPTER,
        "code-llama3-r64",
        "llama3-8b",
        "globex-dev",
    )
    assert (event.engine, event.status, event.ttft_ms, event.time) == ("aws-p4d-use1-1/vllm-0", 200, 41.5, T0)
    sglang = parser.parse(json.dumps({**line, "body": {"model": "qwen2.5-7b:medical-qwen-r64"}}))
    assert sglang is not None and (sglang.kind, sglang.adapter) == (ADAPTER, "medical-qwen-r64")
    base = parser.parse(json.dumps({**line, "body": {"model": "meta-llama/Meta-Llama-3-8B-Instruct"}}))
    assert base is not None and (base.kind, base.adapter, base.base_model) == (BASE, None, "llama3-8b")
    for name in ("../../etc/passwd", "/models/adapters/code-llama3-r64", "code-llama3-r64 ", "x" * 5000):
        event = parser.parse(json.dumps({**line, "body": {"model": name}}))
        if name.strip() == "code-llama3-r64":
            continue
        assert event is not None and event.kind == UNKNOWN and event.adapter is None
    assert parser.tally.adapter_requests == 3 and parser.tally.base_requests == 1  # surrounding spaces trimmed


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"not json at all", "not JSON"),
        (b'["a", "list"]', "not a JSON object"),
        (b'{"ts": "2026-11-29T12:00:00Z"}', "missing adapter field"),
        (b'{"model": "code-llama3-r64"}', "missing time field"),
        (b'{"ts": "soon", "model": "code-llama3-r64"}', "unparseable time"),
        (b"\x00\x01\x02binary\xff", "binary data"),
        (b'{"ts": 1, "model": "\xff\xfe"}', "not UTF-8"),
        (b"{" + b'"a": 1,' * 20000 + b"}", "over-long line"),
    ],
)
def test_junk_lines_are_counted_not_fatal(line: bytes, reason: str) -> None:
    parser = LineParser(JSONL, REFERENCE)
    assert parser.parse(line) is None
    assert parser.tally.bad_reasons == {reason: 1}


@pytest.mark.parametrize(
    "upstream", ["http://[::1", "http://10.20.1.15:99999", "http://10.20.1.15:abc", "http://10.20.1.15\uff0f@x:8000"]
)
def test_a_malformed_upstream_address_names_no_engine_and_the_request_still_counts(upstream: str) -> None:
    parser = LineParser(JSONL, REFERENCE)
    event = parser.parse(json.dumps({"ts": "2026-11-29T12:00:00Z", "model": "code-llama3-r64", "upstream": upstream}))
    assert event is not None and event.adapter == "code-llama3-r64" and event.engine is None
    assert parser.tally.adapter_requests == 1 and not parser.tally.bad_reasons


def test_a_log_that_cannot_be_opened_is_an_input_error_naming_it(tmp_path: Path) -> None:
    from lorafleet.errors import InputError

    folder = tmp_path / "access.jsonl"
    folder.mkdir()  # a glob of the inventory's gateway logs matches it
    with pytest.raises(InputError, match=f"cannot read log {folder}: Is a directory"):
        read_events([folder], REFERENCE)
    with pytest.raises(InputError, match="cannot read log /dev/zero: a device, not a file"):
        read_events(["/dev/zero"], REFERENCE)  # read for ever, else


NGINX_LINES = [
    '10.0.3.7 - - [29/Nov/2026:12:00:00 +0000] "POST /v1/chat/completions HTTP/1.1" 200 5123 "globex-dev" '
    '"review-llama3-r32" 10.20.1.15:8000 0.412',
    '10.0.3.8 - alice [29/Nov/2026:12:00:01 +0000] "POST /v1/completions HTTP/2.0" 200 88 "initech" '
    '"sql-llama3-r16" 10.30.0.7:8000 0.050',
    '10.0.3.9 - - [29/Nov/2026:12:00:02 +0000] "POST /v1/chat/completions HTTP/1.1" 502 0 "-" "-" - 0.001',
    '10.0.3.9 - - [29/Nov/2026:12:00:03 +0000] "GET /health HTTP/1.1" 200 2 "st-mercy" "a \\"quoted\\" name" '
    "127.0.0.1:1 0.000",
]


def test_nginx_log_format_with_real_lines() -> None:
    parser = LineParser(NGINX, REFERENCE)
    events = [parser.parse(line) for line in NGINX_LINES]
    first, second, dash, quoted = events
    # The line is written at the request's end; $request_time gives its arrival (found without a mapping).
    assert first is not None and (first.adapter, first.tenant, first.engine, first.seen) == (
        "review-llama3-r32",
        "globex-dev",
        "aws-p4d-use1-1/vllm-0",
        T0,
    )
    assert first.time == pytest.approx(T0 - 0.412, rel=0, abs=1e-6)
    assert second is not None and (second.adapter, second.engine) == ("sql-llama3-r16", "gcp-a3-usc1-1/vllm-0")
    assert dash is None and parser.tally.bad_reasons == {"missing adapter field": 1}
    assert quoted is not None and quoted.kind == UNKNOWN
    assert parser.parse("garbage that is not an access line") is None
    assert parser.tally.bad_reasons["does not match log_format"] == 1
    assert parser.tally.timed == 3


def test_nginx_format_compiles_iso_times_and_msec() -> None:
    fmt = NginxFormat('$msec "$http_x_model" [$time_iso8601]')
    assert fmt.parse('1764417600.123 "a" [2026-11-29T12:00:00+00:00]') == {
        "msec": "1764417600.123",
        "http_x_model": "a",
        "time_iso8601": "2026-11-29T12:00:00+00:00",
    }


def test_nginx_values_are_unescaped_and_a_quoted_field_may_hold_two_variables() -> None:
    """nginx writes a quote inside a quoted value as \\x22 (and a backslash as \\x5C); a quoted field with two
    variables ("$request_method $request_uri") is two plain values, not one quoted one."""
    fmt = NginxFormat('"$request_method $request_uri" "$http_x_model" [$time_local $msec]')
    assert fmt.parse('"POST /v1/x" "say \\x22hi\\x22 \\x5Cx41" [29/Nov/2026:13:00:00 +0100 1764417600.5]') == {
        "request_method": "POST",
        "request_uri": "/v1/x",
        "http_x_model": 'say "hi" \\x41',
        "time_local": "29/Nov/2026:13:00:00",
        "msec": "+0100 1764417600.5",
    }


def test_read_events_sorts_and_merges_files(tmp_path: Path) -> None:
    a, b = tmp_path / "access.jsonl", tmp_path / "other.jsonl"
    a.write_text('{"ts": 30, "model": "sql-llama3-r16"}\n{"ts": 10, "model": "code-llama3-r64"}\nnope\n')
    b.write_text('{"ts": 20, "model": "legal-qwen-r32", "tenant_id": "hooli-legal"}\n\n')
    events, tally = read_events([a, b], REFERENCE)
    assert [e.time for e in events] == [10, 20, 30]
    assert (tally.lines, tally.adapter_requests, tally.bad_lines) == (4, 3, 1)


@settings(max_examples=300, deadline=None)
@given(
    line=st.one_of(
        st.binary(max_size=300),
        st.text(max_size=300).map(str.encode),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["ts", "model", "tenant_id", "upstream", "x"]), inner, max_size=5)
            ),
            max_leaves=8,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_any_line_is_an_event_or_a_counted_bad_line(line: bytes) -> None:
    for source in (JSONL, NGINX):
        parser = LineParser(source, REFERENCE)
        event = parser.parse(line)
        tally = parser.tally
        assert (event is None) == (tally.adapter_requests + tally.base_requests + tally.unknown_requests == 0)
        if event is not None:
            assert event.adapter is None or event.adapter in REFERENCE.adapters


def test_a_live_log_line_dated_past_tomorrow_is_a_bad_line_not_the_daemons_new_clock(tmp_path: Path) -> None:
    """One line stamped 9999-12-31 would move the daemon's clock there, and every later request would be taken
    then (no prefetch ever due again); a recorded log read by replay may carry any time."""
    import time

    from lorafleet.logs.stream import LogStream

    log = tmp_path / "access.jsonl"
    soon = datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()
    lines = [{"ts": "9999-12-31T23:59:59Z", "model": "code-llama3-r64"}, {"ts": soon, "model": "code-llama3-r64"}]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    stream = LogStream(str(log), REFERENCE, {}, from_start=True)
    stream.open()
    batches = stream.poll()
    assert [e.time for b in batches for e in b.events] == [parse_time(soon)]  # an hour ahead: clocks differ
    assert stream.parser.tally.bad_reasons == {"time more than a day ahead of this machine's clock": 1}
    replayed, tally = read_events([log], REFERENCE, JSONL)
    assert len(replayed) == 2 and tally.bad_lines == 0


def test_a_known_base_with_an_unknown_adapter_is_an_unknown_name_and_the_base_alone_is_a_base_request() -> None:
    """ "base:adapter" names the adapter; with an adapter the inventory lacks it is an unknown name (reported as
    such), not a request to the base model — only "base:" with nothing after the colon is."""
    source = LogSource("x.jsonl", "jsonl", {"time": "ts", "adapter": "model"})
    parser = LineParser(source, REFERENCE)
    unknown = parser.parse(json.dumps({"ts": T0, "model": "llama3-8b:not-in-the-inventory"}))
    base = parser.parse(json.dumps({"ts": T0, "model": "llama3-8b:"}))
    assert unknown is not None and (unknown.kind, unknown.adapter, unknown.base_model) == (UNKNOWN, None, None)
    assert base is not None and (base.kind, base.adapter, base.base_model) == (BASE, None, "llama3-8b")


def test_unknown_names_keep_counting_past_the_first_thousand_and_a_merge_keeps_the_cap() -> None:
    """The tally keeps the first thousand unknown names, so random names cannot grow it; a name already kept goes
    on counting (the summary shows the most frequent), and merging the tallies of many logs keeps the cap."""
    from lorafleet.logs.records import MAX_UNKNOWN_NAMES, LogTally

    source = LogSource("x.jsonl", "jsonl", {"time": "ts", "adapter": "model"})
    parser = LineParser(source, REFERENCE)
    for name in ["typo-adapter"] + [f"junk-{i}" for i in range(MAX_UNKNOWN_NAMES + 5)] + ["typo-adapter"] * 3:
        parser.parse(json.dumps({"ts": T0, "model": name}))
    names = parser.tally.unknown_names
    assert len(names) == MAX_UNKNOWN_NAMES and names["typo-adapter"] == 4 and "junk-999" not in names
    other = LogTally(unknown_names={f"else-{i}": 1 for i in range(MAX_UNKNOWN_NAMES)} | {"typo-adapter": 2})
    parser.tally.merge(other)
    assert len(parser.tally.unknown_names) == MAX_UNKNOWN_NAMES and parser.tally.unknown_names["typo-adapter"] == 6


def test_a_tally_counts_each_request_by_kind_and_a_merge_sums_every_count() -> None:
    from lorafleet.logs.records import LogTally
    from lorafleet.policy.events import RequestEvent

    one = LogTally()
    for kind in (ADAPTER, ADAPTER, BASE, UNKNOWN):
        one.count(RequestEvent(T0, kind, "a" if kind == ADAPTER else None), None if kind != UNKNOWN else "x")
    one.lines, one.timed, one.unplaced = 5, 2, 1
    one.bad("not JSON")
    assert (one.adapter_requests, one.base_requests, one.unknown_requests, one.unknown_names) == (2, 1, 1, {"x": 1})
    two = LogTally(lines=7, adapter_requests=3, base_requests=4, unknown_requests=5, timed=6, unplaced=2)
    two.bad("not JSON")
    two.bad("unparseable time")
    one.merge(two)
    assert (one.lines, one.adapter_requests, one.base_requests, one.unknown_requests) == (12, 5, 5, 6)
    assert (one.bad_lines, one.timed, one.unplaced) == (3, 8, 3)
    assert one.bad_reasons == {"not JSON": 2, "unparseable time": 1}


def test_a_log_without_times_is_one_request_a_second_in_file_order() -> None:
    source = LogSource("x.jsonl", "jsonl", {"adapter": "model"})
    parser = LineParser(source, REFERENCE)
    events = [parser.parse(json.dumps({"model": name})) for name in ("code-llama3-r64", "medical-qwen-r64", "x")]
    assert [e.time for e in events if e is not None] == [1.0, 2.0, 3.0]


def test_an_upstream_names_an_engine_by_its_address_with_the_schemes_default_port() -> None:
    """An engine at https://host (no port) is host:443 to a log naming its upstream; a full URL with a path names
    the engine at its host and port."""
    parser = LineParser(JSONL, REFERENCE)

    def engine(upstream: str) -> str | None:
        event = parser.parse(json.dumps({"ts": T0, "model": "code-llama3-r64", "upstream": upstream}))
        assert event is not None
        return event.engine

    assert engine("runpod-a100-1.proxy.example.net:443") == "runpod-a100-1/vllm-0"
    assert engine("runpod-a100-1.proxy.example.net:80") is None
    assert engine("http://10.20.1.15:8000/v1/completions") == "aws-p4d-use1-1/vllm-0"
    assert parser.tally.unplaced == 1  # the adapter request whose line names no engine of the inventory
    parser.parse(json.dumps({"ts": T0, "model": "llama3-8b", "upstream": "nowhere:1"}))  # a base request
    parser.parse(json.dumps({"ts": T0, "model": "code-llama3-r64"}))  # no upstream at all
    assert parser.tally.unplaced == 2


def test_a_lines_duration_dates_its_request_at_its_arrival() -> None:
    """The line is written at the request's end: with its duration the request arrived that much earlier."""
    source = LogSource("x.jsonl", "jsonl", {"time": "ts", "adapter": "model", "duration_s": "took", "request_id": "id"})
    parser = LineParser(source, REFERENCE)
    event = parser.parse(json.dumps({"ts": T0, "model": "code-llama3-r64", "took": 2.5, "id": "-"}))
    assert event is not None and (event.time, event.seen, event.request_id) == (T0 - 2.5, T0, None)
    event = parser.parse(json.dumps({"ts": T0, "model": "code-llama3-r64", "took": "-", "id": "r1"}))
    assert event is not None and (event.time, event.seen, event.request_id) == (T0, None, "r1")


@pytest.mark.parametrize(
    ("status", "ok"),
    [(599, True), (600, False), (100, True), (99, False), ("0" * 29 + "200", True), ("0" * 30 + "200", False)],
)
def test_a_status_is_a_number_of_at_most_32_characters_within_its_range(status: object, ok: bool) -> None:
    parser = LineParser(JSONL, REFERENCE)
    event = parser.parse(json.dumps({"ts": T0, "model": "code-llama3-r64", "status": status}))
    assert (event is not None) == ok


@pytest.mark.parametrize("req", ["tenant", ["tenant"], {"tenant": "flat"}, None])
def test_a_dotted_field_that_meets_no_object_on_its_way_is_absent(req: object) -> None:
    """`req.tenant.id` over a string, a list or a value that is not an object: no tenant, the request kept."""
    source = LogSource("x.jsonl", "jsonl", {"time": "ts", "adapter": "model", "tenant": "req.tenant.id"})
    parser = LineParser(source, REFERENCE)
    event = parser.parse(json.dumps({"ts": T0, "model": "code-llama3-r64", "req": req}))
    assert event is not None and event.adapter == "code-llama3-r64" and event.tenant is None


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_an_over_long_line_in_a_file_is_one_bad_line_and_the_lines_around_it_are_whole(
    tmp_path: Path, compressed: bool
) -> None:
    """A line past 64 KiB is read in capped pieces and skipped to its newline: one bad line, never a piece taken
    for a line of its own; a line of exactly 64 KiB with its newline is read whole."""
    import gzip

    from lorafleet.logs.reader import MAX_LINE_BYTES

    def line(ts: int, model: str, pad: int = 0) -> bytes:
        text = json.dumps({"ts": ts, "model": model, "pad": ""})[:-2] + "x" * pad + '"}\n'
        return text.encode()

    exact = line(30, "sql-llama3-r16")
    exact = line(30, "sql-llama3-r16", MAX_LINE_BYTES - len(exact))
    assert len(exact) == MAX_LINE_BYTES
    data = line(10, "code-llama3-r64") + line(20, "legal-qwen-r32", 3 * MAX_LINE_BYTES) + exact + line(40, "x")
    data += line(50, "code-llama3-r64").rstrip(b"\n")  # the last line, unterminated: still a line
    log = tmp_path / "access.jsonl"
    log.write_bytes(gzip.compress(data) if compressed else data)
    events, tally = read_events([log], REFERENCE)
    assert [(e.time, e.adapter) for e in events] == [
        (10, "code-llama3-r64"),
        (30, "sql-llama3-r16"),
        (40, None),
        (50, "code-llama3-r64"),
    ]
    assert (tally.lines, tally.bad_lines, tally.bad_reasons) == (5, 1, {"over-long line": 1})
