"""The hint ingress: the gateway's copy of each request as it starts, so lorafleet learns of it at its arrival.

A log line is written when a request ends; in a back-to-back workflow the next step arrives at that very moment,
so a prediction made from the line is right and useless. The gateway mirrors each request to this endpoint as it
enters (nginx: `mirror`, deploy/nginx-lorafleet.conf): the OpenAI-style JSON body (`model`, and `user`) and
headers for the tenant and the request id. The endpoint answers 204 before reading anything into the policy and
never waits on an engine or on the daemon's loop: a hint is queued (bounded; a full queue drops it, counted)
and the loop learns from it on its next pass (`Session.hint`).

A hint is the request's arrival: the session routes, serves and learns it then (the engine is loading its adapter
at that moment, and the next step can be prefetched a whole generation ahead), holding its counts. A hint and the
later log line of the same request are one request: joined by request id, or — where no id is logged — by tenant
and adapter, the oldest open hint first, within `JOIN_WINDOW_S`. The log line stays the record of truth: the
held counts are counted when it comes (in the batch of its checkpoint, so a crash neither loses nor doubles
them); a hint whose line never comes (the gateway refused the request) is never counted, and a restart that
loses the open hints serves and counts their lines as plain ones.

Headers follow the gateway's own field mapping where an nginx log maps a field to a request header
(`tenant: http_x_tenant_id` is the header `X-Tenant-Id`); otherwise `X-Tenant-Id`, `X-Lora-Adapter` (when the
body names no model) and `X-Request-Id`. A hint names an adapter as a log does: it is matched to the inventory's
adapters by name and is never a path.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar

from lorafleet.daemon.listening import close_served, serve_in_thread
from lorafleet.daemon.metrics import HINT_OUTCOMES
from lorafleet.inventory.model import Inventory
from lorafleet.logs.reader import MAX_NAME_CHARS
from lorafleet.logs.records import storable
from lorafleet.policy.events import RequestEvent

log = logging.getLogger("lorafleet.daemon")
T = TypeVar("T")

MAX_BODY_BYTES = 256 * 1024  # a chat request's body; longer ones are not read (the model is all a hint needs)
QUEUE_HINTS = 10_000  # hints waiting for the loop, at most (a few seconds of a busy gateway)
JOIN_WINDOW_S = 900.0  # how long a hint waits for its log line (a request may stream for minutes)
JOIN_SKEW_S = 1.0  # a log line may be stamped this much before its hint's receipt (clocks, rounding)
MAX_OPEN_HINTS = 200_000  # open hints kept for joining, at most (the oldest go first)
MAX_CONNECTIONS = 256  # gateway connections served at once; more are closed at once (a gateway keeps a few alive)
IDLE_S = 5.0  # a connection that sends nothing for this long is closed: idle ones must not hold descriptors
# Outcomes of hints, each a metric series: queued for the loop, dropped (queue full), bad (no model, not
# JSON, too large), unknown (names no adapter of the inventory), joined to their log line, unmatched (none came).
OUTCOMES = HINT_OUTCOMES


@dataclass(frozen=True, slots=True)
class Hint:
    at: float  # epoch seconds of its receipt: the request's start
    model: str
    tenant: str | None
    request_id: str | None


@dataclass(frozen=True, slots=True)
class HintHeaders:
    tenant: str = "X-Tenant-Id"
    adapter: str = "X-Lora-Adapter"
    request_id: str = "X-Request-Id"  # "": not read (the gateway's logs carry no id to join by)


def hint_headers(inventory: Inventory) -> HintHeaders:
    """The headers a hint's fields come in: an nginx log's mapping to `$http_*` variables where there is one."""
    found: dict[str, str] = {}
    for source in inventory.gateway_logs:
        if source.format != "nginx":
            continue
        for field in ("tenant", "adapter", "request_id"):
            variable = source.fields.get(field, "")
            if variable.startswith("http_") and field not in found:
                found[field] = "-".join(part.capitalize() for part in variable[5:].split("_"))
    if inventory.gateway_logs and not any(source.fields.get("request_id") for source in inventory.gateway_logs):
        # No log line carries an id, so none could join a hint by it: a hint's id is not read, and its line
        # joins it by tenant and adapter (an id-only hint would wait out the window and its line be learned twice).
        found["request_id"] = ""
    return HintHeaders(**found)


# The interpreter hands the GIL to a waiting thread after this long (Python's default: 5 ms). The loop's work on a
# hint holds it for a millisecond or more on a big policy, and the gateway's mirror waits for our 204: with the
# default, a hint arriving meanwhile waited up to 5 ms for its answer (p99 +3.4 ms through nginx).
SWITCH_INTERVAL_S = 0.0005


class HintIngress:
    """The endpoint and its queue; `take()` gives the loop what came since it last asked."""

    def __init__(self, headers: HintHeaders | None = None, capacity: int = QUEUE_HINTS) -> None:
        self.headers = headers or HintHeaders()
        self.queue: queue.Queue[Hint] = queue.Queue(capacity)
        self.counts = dict.fromkeys(OUTCOMES, 0)  # written by the server's threads, read by the loop (ints)
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def count(self, outcome: str, n: int = 1) -> None:
        with self._lock:
            self.counts[outcome] += n

    def offer(self, body: bytes, headers: Any, at: float) -> None:
        """One mirrored request: queued as a hint, or counted as what is wrong with it."""
        names = self.headers
        model: Any = None
        tenant: Any = headers.get(names.tenant)
        if body:
            try:
                record = json.loads(body)
            except (ValueError, RecursionError):
                record = None
            if isinstance(record, dict):
                model = record.get("model")
                if tenant is None:
                    tenant = record.get("user")
        if model is None:
            model = headers.get(names.adapter)
        if not isinstance(model, str) or not model.strip() or len(model) > MAX_NAME_CHARS:
            self.count("bad")  # no adapter name is that long: nothing of it is kept, however many come
            return
        request_id = headers.get(names.request_id) if names.request_id else None
        tenant = None if tenant is None else str(tenant)[:MAX_NAME_CHARS]
        request_id = None if request_id is None else request_id[:MAX_NAME_CHARS]
        if not storable(model, tenant, request_id):  # a lone surrogate: the journal could not keep its counts
            self.count("bad")
            return
        hint = Hint(at, model, tenant, request_id or None)
        try:
            self.queue.put_nowait(hint)
        except queue.Full:
            self.count("dropped")
            return
        self.count("queued")

    def take(self, limit: int = 100_000) -> list[Hint]:
        hints: list[Hint] = []
        get = self.queue.get_nowait
        try:
            while len(hints) < limit:
                hints.append(get())
        except queue.Empty:
            pass
        return hints

    def serve(self, address: str) -> str:
        """Listen at HOST:PORT (a bare PORT: loopback; 0: a free port); returns the address bound."""

        def make(host: str, port: int, ipv6: bool) -> ThreadingHTTPServer:
            return (_Server6 if ipv6 else _Server)((host, port), _handler(self))

        hint = "choose a free port (0: any free one) on an address of this host"
        self.server, bound = serve_in_thread(address, "--hints-addr", make, "hints", hint)
        return bound

    def close(self) -> None:
        close_served(self.server)
        self.server = None


def _handler(ingress: HintIngress) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # the gateway keeps its connections to us alive
        timeout = IDLE_S

        def log_message(self, format: str, *args: Any) -> None:  # hints are not the daemon's log
            pass

        def _any(self) -> None:
            at = time.time()
            if self.headers.get("Transfer-Encoding") is not None:  # unread, its chunks would be a next request
                ingress.count("bad")
                self._answer(411)
                self.close_connection = True
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY_BYTES:
                ingress.count("bad")
                self._answer(413)
                self.close_connection = True  # the body is not read: the connection cannot be reused
                return
            body = self.rfile.read(length) if length else b""
            self._answer(204)
            ingress.offer(body, self.headers, at)

        def _answer(self, status: int) -> None:
            self.send_response_only(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            self._any()

        def do_PUT(self) -> None:
            self._any()

        def do_GET(self) -> None:  # a mirrored GET names its adapter in a header
            self._any()

    return Handler


class _Server(ThreadingHTTPServer):
    """At most MAX_CONNECTIONS served at once: a flood of connections (idle or not) is closed on arrival rather
    than taking a thread and a descriptor each, which the daemon's engine calls and metrics need too."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Server6(_Server):
    address_family = socket.AF_INET6


class HintJoin(Generic[T]):
    """Open hints, each with what its arrival held (a token), waiting for their log lines (module docstring):
    by request id, and by (tenant, adapter)."""

    def __init__(
        self, window_s: float = JOIN_WINDOW_S, limit: int = MAX_OPEN_HINTS, closed: Callable[[T], None] | None = None
    ) -> None:
        self.window_s = window_s
        self.limit = limit
        self.closed = closed  # told of each hint closed without its line (its token)
        self.by_id: OrderedDict[str, tuple[float, str, T]] = OrderedDict()  # in order of receipt, with the adapter
        self.by_key: dict[tuple[str | None, str], deque[tuple[float, T]]] = {}
        self.keyed: deque[tuple[float, tuple[str | None, str]]] = deque()  # receipt order, for expiry

    def add(self, event: RequestEvent, token: T) -> None:
        adapter = event.adapter
        assert adapter is not None
        if event.request_id is not None:
            self.by_id.pop(event.request_id, None)  # an id used again: the newest hint, last in receipt order
            self.by_id[event.request_id] = (event.time, adapter, token)
        else:
            key = (event.tenant, adapter)
            self.by_key.setdefault(key, deque()).append((event.time, token))
            self.keyed.append((event.time, key))

    def claim(self, event: RequestEvent) -> T | None:
        """A log line's hint, if it had one (closed now): its token."""
        if event.request_id is not None:
            found = self.by_id.get(event.request_id)
            if found is not None and found[1] == event.adapter:  # the line is the record of truth: same request
                del self.by_id[event.request_id]
                return found[2]
        assert event.adapter is not None
        key = (event.tenant, event.adapter)
        times = self.by_key.get(key)
        end = event.seen if event.seen is not None else event.time
        while times:
            at, token = times[0]
            if at < end - self.window_s:  # too old to be this one's: closed
                times.popleft()
                self._closed(token)
                continue
            if at <= end + JOIN_SKEW_S:
                times.popleft()
                return token
            return None
        return None

    def _closed(self, token: T) -> None:
        if self.closed is not None:
            self.closed(token)

    def expire(self, now: float) -> int:
        """Close the hints whose log lines did not come within the window (or past the limit); how many."""
        gone = 0
        cutoff = now - self.window_s
        by_id = self.by_id
        while by_id and (next(iter(by_id.values()))[0] < cutoff or len(by_id) > self.limit):
            _, (_, _, token) = by_id.popitem(last=False)
            self._closed(token)
            gone += 1
        keyed = self.keyed
        while keyed and (keyed[0][0] < cutoff or len(keyed) > self.limit):
            at, key = keyed.popleft()
            times = self.by_key.get(key)
            if times and times[0][0] == at:
                self._closed(times.popleft()[1])
                gone += 1
            if times is not None and not times:
                del self.by_key[key]
        return gone

    @property
    def open(self) -> int:
        return len(self.by_id) + sum(len(t) for t in self.by_key.values())


__all__ = ["OUTCOMES", "Hint", "HintHeaders", "HintIngress", "HintJoin", "hint_headers"]
