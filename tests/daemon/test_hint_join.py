"""Joining a start hint to its request's log line (daemon/hints.py), without a daemon."""

from __future__ import annotations

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
    assert headers.request_id == "X-Request-Id"


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
