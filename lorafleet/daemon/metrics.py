"""The daemon's Prometheus metrics (prometheus_client, in a registry of its own).

Labels are bounded by the fleet, never by traffic: `engine` (one per inventory engine), `outcome`, `action`,
`result`, `reason`. Never tenant or adapter, so the series count does not grow with what the logs name.
Every metric is listed in docs/daemon.md; deploy/grafana-dashboard.json queries only these names.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from lorafleet.errors import InputError

log = logging.getLogger("lorafleet.daemon")

LOAD_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class DaemonMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        engine = ["engine"]

        def counter(name: str, doc: str, labels: list[str] = engine) -> Counter:
            return Counter(name, doc, labels, registry=r)

        def gauge(name: str, doc: str, labels: list[str] = engine) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        self.requests = counter(
            "lorafleet_requests", "Adapter requests by outcome (hit, late, miss, unserved)", ["engine", "outcome"]
        )
        self.actions = counter(
            "lorafleet_actions",
            "Engine calls: load, touch, unload, reconcile; result ok, failed or refused (circuit open)",
            ["engine", "action", "result"],
        )
        self.load_seconds = Histogram(
            "lorafleet_load_seconds",
            "Adapter load time as answered by the engine",
            engine,
            buckets=LOAD_BUCKETS,
            registry=r,
        )
        self.cold_ms_avoided = counter("lorafleet_cold_ms_avoided", "Load time requests did not wait (prefetch hits)")
        self.cold_ms_paid = counter("lorafleet_cold_ms_paid", "Load time requests waited (late and miss)")
        self.resident = gauge("lorafleet_resident_adapters", "Adapters lorafleet holds resident")
        self.resident_bytes = gauge("lorafleet_resident_bytes", "Bytes of adapters held resident")
        self.budget_slots = gauge("lorafleet_budget_slots", "Host-cache adapter slots (-1: no cap)")
        self.budget_bytes = gauge("lorafleet_budget_bytes", "Adapter byte budget (-1: no cap)")
        self.circuit = gauge("lorafleet_engine_circuit_state", "Circuit breaker: 0 closed, 1 half-open, 2 open")
        self.engine_restarts = counter("lorafleet_engine_restarts", "Engines found emptied (restarted) at reconcile")
        self.vanished = counter("lorafleet_vanished_adapters", "Registered adapters whose files were gone")
        self.log_lines = counter("lorafleet_log_lines", "Log lines read, by result (ok, bad)", ["result"])
        self.log_lag_seconds = Gauge("lorafleet_log_lag_seconds", "Wall clock minus the newest line's time", registry=r)
        self.log_lag_bytes = Gauge("lorafleet_log_lag_bytes", "Bytes written to the logs, not read yet", registry=r)
        self.decision_latency = Histogram(
            "lorafleet_decision_latency_seconds",
            "From reading the line that led to an engine call to sending it",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.commits = Counter("lorafleet_journal_commits", "Journal transactions committed", registry=r)
        self.server: Any = None

    def serve(self, address: str) -> str:
        """Start the /metrics endpoint at HOST:PORT (port 0: a free one); returns the address bound."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        try:
            started = start_http_server(int(port), addr=host, registry=self.registry)
        except (OSError, ValueError) as exc:  # busy, not an address of this host, not a port
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InputError(
                f"--metrics-addr {address}: cannot serve there: {reason}",
                hint="choose a free port (0: any free one), or --metrics-addr off",
            ) from exc
        server = started[0] if isinstance(started, tuple) else None
        self.server = server
        bound = server.server_address[1] if server is not None else int(port)
        return f"{host}:{bound}"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
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


__all__ = ["DaemonMetrics", "metric_names"]
