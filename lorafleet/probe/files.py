"""Do an engine's registered adapter files still exist where it reads them? Locally, or over SSH.

vLLM re-reads an evicted adapter from its path on the next request naming it, and if the files are gone the
whole engine dies (docs/engines.md). The daemon asks this on every reconcile and unregisters what is gone.
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import threading
from collections.abc import Mapping
from urllib.parse import urlsplit

from lorafleet.inventory.model import Host, Inventory
from lorafleet.probe.snapshot import ProbeError
from lorafleet.probe.ssh import SshPool, resolve_target

log = logging.getLogger("lorafleet.probe")


class FileChecker:
    """Checks paths on the hosts of one inventory; SSH connections are pooled across checks."""

    def __init__(self, inventory: Inventory, accept_new_host_keys: bool = False) -> None:
        self.hosts = {e.key: h for h in inventory.hosts for e in h.engines}
        # A local host's paths say something of an engine only when that engine runs on this machine.
        self.here = {e.key for h in inventory.hosts if h.connection == "local" for e in h.engines if runs_here(e.url)}
        self.jump_settings = {h.name: (h.address, h.ssh) for h in inventory.hosts}
        self.pool = SshPool(accept_new_host_keys)
        self.lock = threading.Lock()  # engines' actors check in parallel; one pool, one connection per host

    def missing(self, engine_key: str, paths: Mapping[str, str]) -> list[str]:
        """Names whose path does not exist on the engine's host. Only an authoritative answer reports anything:
        when the host cannot be asked, or is 'local' while the engine's URL is another machine's, nothing is
        reported missing (a check that cannot see the engine's disk is no evidence of a vanished file)."""
        host = self.hosts.get(engine_key)
        if host is None or not paths:
            return []
        if host.connection == "local":
            if engine_key not in self.here:
                return []
            return [name for name, path in paths.items() if not os.path.exists(path)]
        try:
            return self._remote(host, paths)
        except ProbeError as exc:
            log.warning("%s: cannot check adapter files on %s: %s", engine_key, host.name, exc)
            return []

    def _remote(self, host: Host, paths: Mapping[str, str]) -> list[str]:
        script = "for p in " + " ".join(shlex.quote(p) for p in paths.values()) + '; do [ -e "$p" ] || echo "$p"; done'
        with self.lock:
            connection = self.pool.connection(resolve_target(host.address, host.ssh, self.jump_settings), host.name)
            result = connection.run(script)
        if result.exit_code != 0:
            raise ProbeError("command-failed", (result.stderr.strip() or "no output").splitlines()[0][:200])
        gone = set(result.stdout.splitlines())
        return [name for name, path in paths.items() if path in gone]

    def close(self) -> None:
        self.pool.close()


def runs_here(url: str) -> bool:
    """Whether an engine URL names this machine (loopback, or this host's own name)."""
    name = (urlsplit(url).hostname or "").lower()
    if name in ("localhost", "::1") or name.startswith("127."):
        return True
    return name in {socket.gethostname().lower(), socket.getfqdn().lower()}


__all__ = ["FileChecker", "runs_here"]
