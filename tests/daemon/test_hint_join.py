"""Joining a start hint to its request's log line (daemon/hints.py), without a daemon."""

from __future__ import annotations

import dataclasses
import json
import socket
import time

from lorafleet.daemon import hints
from lorafleet.daemon.hints import JOIN_SKEW_S, HintHeaders, HintIngress, HintJoin, hint_headers
from lorafleet.inventory import load_inventory
from lorafleet.policy.events import ADAPTER, RequestEvent
from tests.conftest import INVENTORIES


def hinted(at: float, adapter: str = "a0", tenant: str | None = "t", rid: str | None = None) -> RequestEvent:
    return RequestEvent(at, ADAPTER, adapter, tenant, request_id=rid)


def logged(end: float, adapter: str = "a0", tenant: str | None = "t", rid: str | None = None) -> RequestEvent:
    return RequestEvent(end - 1.0, ADAPTER, adapter, tenant, request_id=rid, seen=end)


def test_a_line_joins_its_hint_by_request_id_once() -> None:
    join: HintJoin[object] = HintJoin()
    join.add(hinted(100.0, rid="r1"), "token")
    assert join.claim(logged(101.0, rid="r2")) is None
    assert join.claim(logged(101.0, rid="r1")) == "token"
    assert join.claim(logged(101.0, rid="r1")) is None  # once


def test_without_ids_the_oldest_open_hint_of_the_tenant_and_adapter_is_joined() -> None:
    join: HintJoin[object] = HintJoin()
    join.add(hinted(100.0), "first")
    join.add(hinted(101.0), "second")
    assert join.claim(logged(105.0, tenant="other")) is None
    assert join.claim(logged(105.0, adapter="a1")) is None
    assert (join.claim(logged(105.0)), join.claim(logged(106.0))) == ("first", "second")
    assert join.claim(logged(107.0)) is None


def test_a_line_ending_before_its_hint_came_is_not_that_hints() -> None:
    join: HintJoin[object] = HintJoin()
    join.add(hinted(100.0), "it")
    assert join.claim(logged(100.0 - 2 * JOIN_SKEW_S)) is None  # an earlier request's line
    assert join.claim(logged(100.0 - JOIN_SKEW_S / 2)) == "it"  # clocks a little apart


def test_hints_whose_lines_never_come_expire_after_the_window() -> None:
    join: HintJoin[object] = HintJoin(window_s=60.0)
    join.add(hinted(100.0, rid="r1"), 1)
    join.add(hinted(100.0), 2)
    join.add(hinted(150.0, rid="r2"), 3)
    assert join.expire(159.0) == 0 and join.open == 3
    assert join.expire(161.0) == 2 and join.open == 1
    assert join.claim(logged(162.0, rid="r1")) is None and join.claim(logged(162.0)) is None
    assert join.claim(logged(162.0, rid="r2")) == 3


def test_every_hint_closed_without_its_line_is_told_once() -> None:
    """Expired, past the limit, or skipped as too old for a line: each is told (its request runs no more)."""
    closed: list[object] = []
    join: HintJoin[object] = HintJoin(window_s=60.0, limit=3, closed=closed.append)
    join.add(hinted(100.0, rid="r1"), 1)
    join.add(hinted(100.0), 2)
    join.add(hinted(150.0), 3)
    assert join.claim(logged(165.0)) == 3 and closed == [2]  # 2 is too old to be this line's
    assert join.expire(161.0) == 1 and closed == [2, 1]
    for i in range(5):
        join.add(hinted(200.0 + i, rid=f"s{i}"), 10 + i)
    join.expire(204.0)
    assert closed == [2, 1, 10, 11]
    assert join.claim(logged(205.0, rid="s4")) == 14 and closed == [2, 1, 10, 11]  # a joined one is not closed


def test_a_closed_hint_leaves_its_engines_running_adapters(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from lorafleet.drive.session import Session
    from lorafleet.policy.baselines import LruPolicy
    from lorafleet.policy.core import PolicyCore
    from tests.policy.builders import make_inventory

    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}])
    session = Session(PolicyCore(inv, LruPolicy()))
    session.start(100.0)
    _, held = session.hint(RequestEvent(100.0, ADAPTER, "a0", "t", base_model="m"))
    running = session.core.book.engines["h/e0"].running
    assert running == {"a0": 1}
    session.unjoined(held)
    session.unjoined(held)  # once
    assert running == {}
    _, held = session.hint(RequestEvent(101.0, ADAPTER, "a0", "t", base_model="m"))
    session.request(RequestEvent(100.5, ADAPTER, "a0", "t", base_model="m", seen=102.0), held=held)
    assert running == {} and session.counts.requests == 1


def test_open_hints_are_bounded() -> None:
    join: HintJoin[object] = HintJoin(limit=3)
    for i in range(5):
        join.add(hinted(100.0 + i, rid=f"r{i}"), i)
    assert join.expire(104.0) == 2
    assert join.claim(logged(105.0, rid="r0")) is None and join.claim(logged(105.0, rid="r4")) == 4


def test_hint_headers_follow_the_nginx_logs_mapping() -> None:
    reference = load_inventory(INVENTORIES / "reference.yaml")
    headers = hint_headers(reference)  # its nginx log maps tenant to $http_x_tenant_id, adapter to $http_x_lora_adapter
    assert (headers.tenant, headers.adapter) == ("X-Tenant-Id", "X-Lora-Adapter")
    assert headers.request_id == ""  # its log_format has no $request_id: no line could join a hint by its id
    logs = tuple(
        dataclasses.replace(s, fields={**s.fields, "request_id": "request_id"}) for s in reference.gateway_logs
    )
    assert hint_headers(dataclasses.replace(reference, gateway_logs=logs)).request_id == "X-Request-Id"


def test_the_ingress_takes_the_model_from_the_body_and_the_tenant_from_a_header() -> None:
    ingress = HintIngress(HintHeaders(tenant="X-Team"), capacity=2)
    ingress.offer(b'{"model": "a0", "user": "u"}', {"X-Team": "blue", "X-Request-Id": "r1"}, 1.0)
    ingress.offer(b'{"model": "a1", "user": "u"}', {}, 2.0)  # no header: the body's user
    ingress.offer(b"", {"X-Lora-Adapter": "a2"}, 3.0)  # over capacity: dropped, counted
    ingress.offer(b"[1, 2]", {}, 4.0)  # no model anywhere
    got = ingress.take()
    assert [(h.model, h.tenant, h.request_id) for h in got] == [("a0", "blue", "r1"), ("a1", "u", None)]
    assert ingress.counts["queued"] == 2 and ingress.counts["dropped"] == 1 and ingress.counts["bad"] == 1


def test_a_hint_whose_names_the_journal_cannot_store_is_bad_not_queued() -> None:
    """JSON's \\ud800 is a lone surrogate: queued, its request's counts would be dropped at the journal's commit,
    and the log line it joins lost with them."""
    ingress = HintIngress(HintHeaders(), capacity=4)
    ingress.offer(b'{"model": "a0", "user": "\\ud800"}', {}, 1.0)
    ingress.offer(b'{"model": "a0", "user": "u"}', {}, 2.0)
    assert [h.tenant for h in ingress.take()] == ["u"]
    assert ingress.counts["queued"] == 1 and ingress.counts["bad"] == 1


def test_a_line_joins_a_hint_by_request_id_only_for_the_same_adapter() -> None:
    """The line is the record of truth: a hint under the same id for another adapter is another request (a
    gateway reusing ids), so the line is served as a plain one and the hint stays open until it expires."""
    join: HintJoin[object] = HintJoin()
    join.add(hinted(100.0, adapter="a1", rid="r1"), "a1's")
    assert join.claim(logged(101.0, adapter="a0", rid="r1")) is None
    assert join.claim(logged(101.0, adapter="a1", rid="r1")) == "a1's"


def test_an_id_used_again_is_the_newest_hint_and_older_ones_still_expire() -> None:
    join: HintJoin[object] = HintJoin(window_s=900.0)
    join.add(hinted(0.0, rid="x"), "first x")
    join.add(hinted(10.0, rid="y"), "y")
    join.add(hinted(1000.0, rid="x"), "second x")
    assert join.expire(1000.0) == 1  # y, older than the window: it was stuck behind x's first place
    assert join.claim(logged(1001.0, rid="x")) == "second x"


def test_over_long_names_are_bad_and_nothing_long_is_queued() -> None:
    """A hint queue of 10,000 holds no 256 KB model names (2.4 GB before): no adapter name is that long, and a
    tenant or request id is cut as the log reader cuts them."""
    ingress = HintIngress(HintHeaders(), capacity=4)
    ingress.offer(json.dumps({"model": "m" * 300}).encode(), {}, 1.0)
    ingress.offer(json.dumps({"model": "a0", "user": "u" * 300}).encode(), {"X-Request-Id": "r" * 300}, 2.0)
    (hint,) = ingress.take()
    assert (len(hint.tenant or ""), len(hint.request_id or "")) == (256, 256)
    assert ingress.counts["bad"] == 1 and ingress.counts["queued"] == 1


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the server closed the connection within `seconds` (whatever it sent before)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except TimeoutError:
        return False


def test_the_endpoint_refuses_chunked_bodies_closes_idle_connections_and_caps_them(monkeypatch) -> None:
    """A chunked body left unread would be taken as a next request (a hint smuggled in it); an idle
    connection, or one past the cap, would hold a thread and a descriptor the daemon's engine calls need."""
    monkeypatch.setattr(hints, "IDLE_S", 0.5)
    monkeypatch.setattr(hints, "MAX_CONNECTIONS", 2)
    ingress = HintIngress(HintHeaders(), capacity=4)
    host, _, port = ingress.serve("127.0.0.1:0").rpartition(":")
    try:
        with socket.create_connection((host, int(port))) as sock:
            smuggled = b"GET /x HTTP/1.1\r\nX-Lora-Adapter: a5\r\n\r\n"
            sock.sendall(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + smuggled)
            assert sock.recv(4096).startswith(b"HTTP/1.1 411") and _closed_within(sock, 2.0)
        assert ingress.take() == [] and ingress.counts["bad"] == 1
        with socket.create_connection((host, int(port))) as idle:
            idle.sendall(b"POST / HTTP/1.1\r\n")  # and nothing more
            assert _closed_within(idle, 3.0)
        monkeypatch.setattr(hints, "IDLE_S", 30.0)
    finally:
        ingress.close()
    ingress = HintIngress(HintHeaders(), capacity=4)
    host, _, port = ingress.serve("127.0.0.1:0").rpartition(":")
    try:
        held = [socket.create_connection((host, int(port))) for _ in range(2)]
        time.sleep(0.3)  # both taken by the server's threads
        with socket.create_connection((host, int(port))) as third:
            assert _closed_within(third, 2.0)  # past the cap: closed on arrival
        assert not _closed_within(held[0], 0.5)  # the two within it are served
        for sock in held:
            sock.close()
    finally:
        ingress.close()


def test_a_hints_id_is_not_read_when_no_gateway_log_carries_one() -> None:
    """The demo's JSON log maps no request id: a hint with one (nginx's recipe always sends it) must join its line
    by tenant and adapter, not wait out the window while its line is learned a second time."""
    demo = load_inventory(INVENTORIES / "demo.yaml")
    headers = hint_headers(demo)
    assert headers.request_id == ""
    ingress = HintIngress(headers, capacity=2)
    ingress.offer(b'{"model": "a0", "user": "t"}', {"X-Request-Id": "abc123"}, 1.0)
    (hint,) = ingress.take()
    assert hint.request_id is None


def test_the_first_nginx_logs_header_mapping_wins_and_other_formats_map_none() -> None:
    """A JSON log's `http_*` field is not a header mapping; of two nginx logs mapping a field, the first is taken."""
    reference = load_inventory(INVENTORIES / "reference.yaml")
    (nginx,) = [s for s in reference.gateway_logs if s.format == "nginx"]
    jsonl = dataclasses.replace(nginx, format="jsonl", fields={**nginx.fields, "tenant": "http_x_json_team"})
    first = dataclasses.replace(nginx, fields={**nginx.fields, "tenant": "http_x_team_name"})
    second = dataclasses.replace(nginx, fields={**nginx.fields, "tenant": "http_x_other"})
    headers = hint_headers(dataclasses.replace(reference, gateway_logs=(jsonl, first, second)))
    assert headers.tenant == "X-Team-Name"


def test_an_adapter_name_at_the_length_limit_is_queued() -> None:
    from lorafleet.logs.reader import MAX_NAME_CHARS

    ingress = HintIngress(HintHeaders(), capacity=4)
    ingress.offer(json.dumps({"model": "m" * MAX_NAME_CHARS}).encode(), {}, 1.0)
    ingress.offer(json.dumps({"model": "m" * (MAX_NAME_CHARS + 1)}).encode(), {}, 2.0)
    assert [len(h.model) for h in ingress.take()] == [MAX_NAME_CHARS]
    assert ingress.counts["bad"] == 1


def test_take_hands_over_at_most_its_limit_and_keeps_the_rest_in_order() -> None:
    ingress = HintIngress(HintHeaders(), capacity=8)
    for i in range(3):
        ingress.offer(json.dumps({"model": f"a{i}"}).encode(), {}, float(i))
    assert [h.model for h in ingress.take(limit=2)] == ["a0", "a1"]
    assert [h.model for h in ingress.take(limit=2)] == ["a2"]


def test_the_join_windows_edges_belong_to_the_hint() -> None:
    """A line stamped exactly the skew before its hint, or ending exactly the window after it, is still its
    line; `expire` at exactly the window keeps the hint open."""
    join: HintJoin[object] = HintJoin(window_s=60.0)
    join.add(hinted(100.0), "skewed")
    assert join.claim(logged(100.0 - JOIN_SKEW_S)) == "skewed"
    join.add(hinted(100.0), "late")
    assert join.claim(logged(160.0)) == "late"
    join.add(hinted(100.0), "keyed")
    join.add(hinted(100.0, rid="r1"), "by id")
    assert join.expire(160.0) == 0 and join.open == 2
    assert join.expire(160.5) == 2 and join.open == 0


def test_hints_without_ids_are_bounded_too() -> None:
    join: HintJoin[object] = HintJoin(limit=3)
    for i in range(5):
        join.add(hinted(100.0 + i, adapter=f"a{i}"), i)
    assert join.expire(104.0) == 2 and join.open == 3
    assert join.claim(logged(105.0, adapter="a1")) is None and join.claim(logged(105.0, adapter="a2")) == 2


def test_expiring_an_old_hint_keeps_a_newer_one_of_the_same_tenant_and_adapter() -> None:
    """The key's queue outlives its expired head; a key whose hints were all joined is forgotten once its
    entries expire, without failing on the second of them."""
    closed: list[object] = []
    join: HintJoin[object] = HintJoin(window_s=60.0, closed=closed.append)
    join.add(hinted(100.0), "old")
    join.add(hinted(150.0), "new")
    assert join.expire(170.0) == 1 and closed == ["old"]
    assert join.claim(logged(171.0)) == "new"
    join.add(hinted(200.0, adapter="b"), "b1")
    join.add(hinted(201.0, adapter="b"), "b2")
    assert (join.claim(logged(202.0, adapter="b")), join.claim(logged(203.0, adapter="b"))) == ("b1", "b2")
    assert join.expire(400.0) == 0 and join.open == 0 and closed == ["old"]
    assert join.by_key == {}  # nothing kept for keys with nothing open


def _exchange(address: str, request: bytes) -> tuple[bytes, bool]:
    """Send one raw request; the answer's first bytes, and whether the server then closed the connection."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(request)
        sock.settimeout(2.0)
        answer = sock.recv(4096)
        return answer, _closed_within(sock, 1.0)


def test_the_endpoint_takes_a_bodyless_get_and_bodies_up_to_its_limit() -> None:
    """A mirrored GET carries no Content-Length; a body of exactly MAX_BODY_BYTES is read; one byte more is
    refused and the connection closed (its unread body would be taken as a next request)."""
    ingress = HintIngress(HintHeaders(), capacity=4)
    address = ingress.serve("127.0.0.1:0")
    try:
        answer, closed = _exchange(address, b"GET /v1 HTTP/1.1\r\nHost: x\r\nX-Lora-Adapter: a3\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 204") and not closed
        body = json.dumps({"model": "a4"}).encode()
        body += b" " * (hints.MAX_BODY_BYTES - len(body))
        head = f"POST /v1 HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        answer, closed = _exchange(address, head + body)
        assert answer.startswith(b"HTTP/1.1 204") and not closed
        head = f"POST /v1 HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body) + 1}\r\n\r\n".encode()
        answer, closed = _exchange(address, head + body[:1000])
        assert answer.startswith(b"HTTP/1.1 413") and closed
        time.sleep(0.1)
        assert [h.model for h in ingress.take()] == ["a3", "a4"]
        assert ingress.counts["bad"] == 1
    finally:
        ingress.close()
