"""The daemon's HTTP endpoints (metrics, start hints): one rule for reading HOST:PORT and serving it in a thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lorafleet.errors import InputError


def serve_in_thread(
    address: str, option: str, make: Callable[[str, int, bool], Any], name: str, hint: str
) -> tuple[Any, str]:
    """Bind `make(host, port, ipv6)` at HOST:PORT (no host: loopback; port 0: a free one) and serve it on a daemon
    thread; (the server, the address bound). A busy port, an address not of this host or a bad port is bad input
    naming `option`."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        server = make(host, int(port), ":" in host)
    except (OSError, ValueError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(f"{option} {address}: cannot serve there: {reason}", hint=hint) from exc
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    shown = f"[{host}]" if ":" in host else host  # an IPv6 address in a URL or HOST:PORT is bracketed
    return server, f"{shown}:{server.server_address[1]}"


def close_served(server: Any) -> None:
    """Stop a server `serve_in_thread` started and close its socket (None: nothing is served)."""
    if server is not None:
        server.shutdown()
        server.server_close()


__all__ = ["close_served", "serve_in_thread"]
