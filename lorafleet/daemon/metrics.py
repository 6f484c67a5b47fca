"""The daemon's Prometheus metrics (prometheus_client, in a registry of its own).

Labels are bounded by the fleet, never by traffic: `engine` (one per inventory engine), `outcome`, `action`,
`result`, `reason`, `state`, and `mode` on every series (`live`, or `shadow` for what a shadow run simulated, so
the same dashboard reads both). Never tenant or adapter, so the series count does not grow with what the logs
name. Base units (seconds, bytes), `_total` counters: `promtool check metrics` finds nothing. Every metric is
listed in docs/daemon.md; deploy/grafana-dashboard.json queries only these names.
"""

from __future__ import annotations

import logging
import platform
import socket
import time
from collections.abc import Callable
from contextlib import suppress
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, make_wsgi_app

from lorafleet import __version__
from lorafleet.daemon.listening import close_served, serve_in_thread

log = logging.getLogger("lorafleet.daemon")

HINT_OUTCOMES = ("queued", "dropped", "bad", "unknown", "joined", "unmatched", "rerouted")  # daemon/hints.py's
LOAD_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
CIRCUIT_STATES = ("closed", "half-open", "open")  # the breaker's states, one series each (1 = current)


class Moded:
    """A metric whose last label is `mode`, bound to this daemon's: call sites give the other labels only. Each
    labelled child is looked up once (prometheus_client's `labels` validates and locks on every call, and the
    daemon counts several times per log line)."""

    def __init__(self, metric: Any, mode: str) -> None:
        self.metric = metric
        self.mode = mode
        self.children: dict[tuple[str, ...], Any] = {}

    def labels(self, *values: str) -> Any:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = self.metric.labels(*values, self.mode)
        return child

    def remove(self, *values: str) -> None:
        self.children.pop(values, None)
        with suppress(KeyError):  # never set
            self.metric.remove(*values, self.mode)


class DaemonMetrics:
    def __init__(self, mode: str = "live", ready_stale_s: float = 30.0) -> None:
        # No `_created` series: Prometheus stores each as a series of its own, nothing here reads them, and they
        # were a third of a scrape (3,000 engines: 60,000 of 180,000 lines, 16.5 MB).
        disable_created_metrics()
        r = self.registry = CollectorRegistry()
        self.mode = mode
        self.ready_stale_s = ready_stale_s
        self.beat_at: float | None = None  # monotonic time the loop last went round; None: not started, or stopped

        def moded(kind: Any, name: str, doc: str, labels: tuple[str, ...] = ("engine",), **more: Any) -> Moded:
            return Moded(kind(name, doc, [*labels, "mode"], registry=r, **more), mode)

        def single(kind: Any, name: str, doc: str, **more: Any) -> Any:
            return kind(name, doc, ["mode"], registry=r, **more).labels(mode)

        self.requests = moded(
            Counter,
            "lorafleet_requests",
            "Adapter requests by outcome (hit, late, miss, unserved)",
            ("engine", "outcome"),
        )
        self.actions = moded(
            Counter,
            "lorafleet_actions",
            "Engine calls: load, touch, unload, reconcile; result ok, failed or refused (circuit open)",
            ("engine", "action", "result"),
        )
        self.load_seconds = moded(
            Histogram, "lorafleet_load_seconds", "Adapter load time as answered by the engine", buckets=LOAD_BUCKETS
        )
        self.cold_seconds_avoided = moded(
            Counter, "lorafleet_cold_seconds_avoided", "Load time requests did not wait (prefetch hits)"
        )
        self.cold_seconds_paid = moded(Counter, "lorafleet_cold_seconds_paid", "Load time requests waited (late, miss)")
        self.recounted = moded(
            Counter,
            "lorafleet_requests_recounted",
            "Requests counted from their log line as `counted` (hit, late, miss) that the engines, replayed in "
            "arrival order once every earlier request's line was read, served as `outcome`: each moves one request "
            "of lorafleet_requests from the one outcome to the other",
            ("engine", "counted", "outcome"),
        )
        self.cold_seconds_recounted = moded(
            Counter,
            "lorafleet_cold_seconds_recounted",
            "Load time counted in lorafleet_cold_seconds_paid that recounted requests did not wait",
        )
        self.avoided_seconds_recounted = moded(
            Counter,
            "lorafleet_cold_seconds_avoided_recounted",
            "Load time counted in lorafleet_cold_seconds_avoided that recounted requests did not avoid (the "
            "prefetch they were counted on had been let go, or loaded nothing where the engine held the adapter)",
        )
        self.resident = moded(Gauge, "lorafleet_resident_adapters", "Adapters lorafleet holds resident")
        self.resident_bytes = moded(Gauge, "lorafleet_resident_bytes", "Bytes of adapters held resident")
        self.budget_slots = moded(Gauge, "lorafleet_budget_slots", "Host-cache adapter slots (absent: no cap)")
        self.budget_bytes = moded(Gauge, "lorafleet_budget_bytes", "Adapter byte budget (absent: no cap)")
        self.circuit = moded(
            Gauge,
            "lorafleet_engine_circuit_state",
            "Circuit breaker: 1 for its current state (closed, half-open, open), 0 for the others",
            ("engine", "state"),
        )
        self.engine_restarts = moded(Counter, "lorafleet_engine_restarts", "Engine restarts seen at reconcile")
        self.vanished = moded(Counter, "lorafleet_vanished_adapters", "Registered adapters whose files were gone")
        self.log_lines = moded(Counter, "lorafleet_log_lines", "Log lines read, by result (ok, bad)", ("result",))
        self.log_lag_seconds = single(Gauge, "lorafleet_log_lag_seconds", "Wall clock minus the newest line's time")
        self.log_lag_bytes = single(Gauge, "lorafleet_log_lag_bytes", "Bytes written to the logs, not read yet")
        self.log_files_unread = single(
            Gauge,
            "lorafleet_log_files_unread",
            "Files the logs' patterns match that cannot be opened (too many open files, no permission): not read",
        )
        self.decision_latency = single(
            Histogram,
            "lorafleet_decision_latency_seconds",
            "Live: from reading the line that led to an engine call to sending it; shadow: from reading a batch of "
            "lines to the policy's decisions on it (nothing is sent)",
            buckets=LATENCY_BUCKETS,
        )
        self.commits = single(Counter, "lorafleet_journal_commits", "Journal transactions committed")
        self.refused_commits = single(
            Counter,
            "lorafleet_journal_refused_commits",
            "Commits the state database refused (a full disk, an I/O error, a lock held too long); the lines are held",
        )
        self.held_lines = single(
            Gauge, "lorafleet_journal_held_lines", "Log lines read and held because the journal refused their commit"
        )
        self.hints = moded(
            Counter,
            "lorafleet_hints",
            "Start hints from the gateway (--hints-addr) by outcome: queued, dropped (queue full), bad, unknown "
            "(no adapter of the inventory), joined (to their log line), unmatched (no line came), rerouted (joined to "
            "a line naming another engine than the book had placed it on)",
            ("outcome",),
        )
        for result in ("ok", "bad"):
            self.log_lines.labels(result)
        for outcome in HINT_OUTCOMES:
            self.hints.labels(outcome)
        self.requests.labels("", "unserved")
        build = Gauge(
            "lorafleet_build_info",
            "lorafleet's version and Python's (always 1)",
            ["version", "python", "mode"],
            registry=r,
        )
        build.labels(__version__, platform.python_version(), mode).set(1)
        self.server: Any = None

    def add_engine(self, engine: str) -> None:
        """Every series of an engine, at zero until it happens: a query over a quiet engine (or a shadow run,
        which never sees a restart) finds zeros, not nothing."""
        for outcome in ("hit", "late", "miss"):
            self.requests.labels(engine, outcome)
        for counted in ("hit", "late", "miss"):
            for outcome in ("hit", "late", "miss"):
                if outcome != counted:
                    self.recounted.labels(engine, counted, outcome)
        for action in ("load", "touch", "unload", "reconcile"):
            for result in ("ok", "failed", "refused"):
                self.actions.labels(engine, action, result)
        cold = (
            self.cold_seconds_avoided,
            self.cold_seconds_paid,
            self.cold_seconds_recounted,
            self.avoided_seconds_recounted,
        )
        for metric in (self.load_seconds, *cold):
            metric.labels(engine)
        for metric in (self.engine_restarts, self.vanished, self.resident, self.resident_bytes):
            metric.labels(engine)

    def set_circuit(self, engine: str, state: str) -> None:
        for each in CIRCUIT_STATES:
            self.circuit.labels(engine, each).set(1 if each == state else 0)

    def set_budget(self, engine: str, slots: int | None, budget_bytes: int | None) -> None:
        """The budget gauges; a dimension without a cap has no series (never a magic value)."""
        for gauge, value in ((self.budget_slots, slots), (self.budget_bytes, budget_bytes)):
            if value is None:
                gauge.remove(engine)
            else:
                gauge.labels(engine).set(value)

    def beat(self) -> None:
        """The loop went round: what /ready reads."""
        self.beat_at = time.monotonic()

    def stopped(self) -> None:
        self.beat_at = None

    def ready(self) -> tuple[bool, str]:
        """Ready while the loop goes round: not before its first pass, not when it has been stuck for
        `ready_stale_s` (a hung engine occupies only its actor, so this is the loop itself), not once stopping."""
        if self.beat_at is None:
            return False, "not running"
        stale = time.monotonic() - self.beat_at
        if stale > self.ready_stale_s:
            return False, f"the loop has not advanced for {stale:.0f} s"
        return True, "ok"

    def app(self) -> Callable[[dict[str, Any], Callable[..., Any]], list[bytes]]:
        """The HTTP endpoints: /metrics (Prometheus), /ready (readiness: the loop advances), /healthz (liveness:
        the process serves)."""
        metrics = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start: Callable[..., Any]) -> list[bytes]:
            path = environ.get("PATH_INFO", "")
            if path in ("/ready", "/healthz"):
                ok, why = self.ready() if path == "/ready" else (True, "ok")
                start("200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
                return [why.encode() + b"\n"]
            return list(metrics(environ, start))

        return app

    def serve(self, address: str) -> str:
        """Start the HTTP endpoints at HOST:PORT (port 0: a free one); returns the address bound."""

        def make(host: str, port: int, ipv6: bool) -> Any:
            server_class = _ThreadingServer6 if ipv6 else _ThreadingServer
            return make_server(host, port, self.app(), server_class, handler_class=_QuietHandler)

        hint = "choose a free port (0: any free one), or --metrics-addr off"
        self.server, bound = serve_in_thread(address, "--metrics-addr", make, "metrics", hint)
        return bound

    def close(self) -> None:
        close_served(self.server)
        self.server = None


def metric_names() -> list[str]:
    """Every metric family name the daemon exports, as Prometheus sees them (counters end in _total)."""
    names = []
    for family in DaemonMetrics().registry.collect():
        if family.type == "counter":
            names.append(family.name + "_total")
        elif family.type == "histogram":
            names += [family.name + suffix for suffix in ("_bucket", "_sum", "_count")]
        else:
            names.append(family.name)
    return names


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds the daemon's exit


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not the daemon's log
        pass


__all__ = ["CIRCUIT_STATES", "HINT_OUTCOMES", "DaemonMetrics", "metric_names"]
