"""The daemon's metrics endpoint on its own: every engine's series at zero from the start, the mode label on
every series, a circuit gauge that is one-hot, a budget without a cap that has no series, readiness that
follows the loop, over real HTTP on a free loopback port. What a running daemon serves, checked by promtool and
a real Prometheus, is in test_prometheus.py."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lorafleet.daemon.metrics import CIRCUIT_STATES, DaemonMetrics, metric_names


@pytest.fixture
def served() -> Iterator[tuple[DaemonMetrics, str]]:
    metrics = DaemonMetrics(mode="shadow", ready_stale_s=0.3)
    address = metrics.serve("127.0.0.1:0")
    assert address.startswith("127.0.0.1:") and not address.endswith(":0")
    yield metrics, f"http://{address}"
    metrics.close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, text = get(url + "/metrics")
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def at(got: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """One sample of the shadow daemon's series `name` with these labels."""
    return got[(name, frozenset({**labels, "mode": "shadow"}.items()))]


def test_every_engine_series_is_there_at_zero_and_every_series_has_the_mode(served) -> None:
    metrics, url = served
    metrics.add_engine("e0")
    got = samples(url)
    assert all(dict(labels).get("mode") == "shadow" for _, labels in got)
    for outcome in ("hit", "late", "miss"):
        assert (
            got[("lorafleet_requests_total", frozenset({("engine", "e0"), ("outcome", outcome), ("mode", "shadow")}))]
            == 0
        )
    for action in ("load", "touch", "unload", "reconcile"):
        for result in ("ok", "failed", "refused"):
            assert at(got, "lorafleet_actions_total", engine="e0", action=action, result=result) == 0
    for name in (
        "lorafleet_load_seconds_count",
        "lorafleet_cold_seconds_avoided_total",
        "lorafleet_cold_seconds_paid_total",
        "lorafleet_engine_restarts_total",
        "lorafleet_vanished_adapters_total",
        "lorafleet_resident_adapters",
        "lorafleet_resident_bytes",
    ):
        assert at(got, name, engine="e0") == 0, name
    from lorafleet import __version__

    (build,) = [labels for name, labels in got if name == "lorafleet_build_info"]
    assert dict(build)["version"] == __version__ and got[("lorafleet_build_info", build)] == 1
    names = {name for name, _ in got}
    assert not any(name.endswith("_created") for name in names)
    assert names <= set(metric_names())  # the documented names, nothing else


def test_the_circuit_gauge_is_one_hot_and_an_uncapped_budget_has_no_series(served) -> None:
    metrics, url = served
    for state in ("open", "half-open", "closed"):
        metrics.set_circuit("e0", state)
        got = samples(url)
        shown = {
            each: got[
                ("lorafleet_engine_circuit_state", frozenset({("engine", "e0"), ("state", each), ("mode", "shadow")}))
            ]
            for each in CIRCUIT_STATES
        }
        assert shown == {each: 1.0 if each == state else 0.0 for each in CIRCUIT_STATES}
    metrics.set_budget("e0", 6, 512 * 2**20)
    got = samples(url)
    assert (at(got, "lorafleet_budget_slots", engine="e0"), at(got, "lorafleet_budget_bytes", engine="e0")) == (
        6,
        512 * 2**20,
    )
    metrics.set_budget("e0", 6, None)  # the byte cap lifted: its series goes, the slots' stays
    got = samples(url)
    assert at(got, "lorafleet_budget_slots", engine="e0") == 6
    with pytest.raises(KeyError):
        at(got, "lorafleet_budget_bytes", engine="e0")
    metrics.set_budget("e1", None, None)  # never set: nothing to remove, no error
    assert not any(dict(labels).get("engine") == "e1" for _, labels in samples(url))


def test_ready_follows_the_loop_and_healthz_the_process(served) -> None:
    metrics, url = served
    assert get(url + "/ready") == (503, "not running\n")
    assert get(url + "/healthz") == (200, "ok\n")
    metrics.beat()
    assert get(url + "/ready") == (200, "ok\n")
    time.sleep(0.5)  # past ready_stale_s: the loop is stuck
    status, why = get(url + "/ready")
    assert status == 503 and why.startswith("the loop has not advanced for ")
    metrics.beat()
    assert get(url + "/ready")[0] == 200
    metrics.stopped()
    assert get(url + "/ready") == (503, "not running\n")
    assert get(url + "/healthz") == (200, "ok\n")


def test_an_ipv6_address_is_served_and_given_back_bracketed_as_a_url_needs_it() -> None:
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("no IPv6 loopback on this machine (a container without IPv6)")
    metrics = DaemonMetrics(mode="shadow")
    try:
        address = metrics.serve("[::1]:0")
        assert address.startswith("[::1]:") and not address.endswith(":0")
        assert get(f"http://{address}/healthz")[0] == 200
    finally:
        metrics.close()
