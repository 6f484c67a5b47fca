"""Probe many hosts at once through a bounded pool; a broken host is a row, never a crash."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from lorafleet.errors import InputError
from lorafleet.inventory.model import Host, Inventory, SshSettings
from lorafleet.probe import nvml
from lorafleet.probe.smi import SmiParseError, parse_nvidia_smi, smi_command
from lorafleet.probe.snapshot import GpuInfo, HostVram, ProbeError
from lorafleet.probe.ssh import SshPool, resolve_target

JumpSettings = dict[str, tuple[str, SshSettings]]

DEFAULT_PARALLEL = 32


@dataclass(frozen=True)
class HostFilter:
    pattern: str | None = None
    provider: str | None = None
    group: str | None = None

    def matches(self, host: Host) -> bool:
        return (
            (self.pattern is None or fnmatch.fnmatchcase(host.name, self.pattern))
            and (self.provider is None or host.provider == self.provider)
            and (self.group is None or host.group == self.group)
        )


def select_hosts(inv: Inventory, selection: HostFilter) -> list[Host]:
    hosts = [h for h in inv.hosts if selection.matches(h)]
    if not hosts:
        raise InputError("no host in the inventory matches the filters")
    return hosts


def probe_remote(host: Host, pool: SshPool, jump_settings: JumpSettings) -> list[GpuInfo]:
    target = resolve_target(host.address, host.ssh, jump_settings)
    result = pool.connection(target, host.name).run(smi_command(host.nvidia_smi))
    if result.exit_code != 0:
        reason = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[0][:200]
        raise ProbeError("command-failed", f"{host.nvidia_smi} exited {result.exit_code}: {reason}")
    try:
        return parse_nvidia_smi(result.stdout)
    except SmiParseError as exc:
        raise ProbeError("parse-error", f"{host.nvidia_smi} output: {exc}") from exc


def probe_host(host: Host, pool: SshPool, jump_settings: JumpSettings) -> HostVram:
    try:
        gpus = nvml.read_local_gpus() if host.connection == "local" else probe_remote(host, pool, jump_settings)
        return HostVram(host.name, host.provider, "ok", None, tuple(gpus))
    except ProbeError as exc:
        return HostVram(host.name, host.provider, exc.status, exc.message)
    except Exception as exc:  # a host must never take the run down with it
        return HostVram(host.name, host.provider, "unreachable", f"{type(exc).__name__}: {exc}")


def probe_fleet(
    hosts: Iterable[Host],
    inventory: Inventory,
    parallel: int = DEFAULT_PARALLEL,
    accept_new_host_keys: bool = False,
    on_done: Callable[[HostVram], None] | None = None,
) -> list[HostVram]:
    """Probe hosts concurrently (at most `parallel` at once); results come back in inventory order."""
    hosts = list(hosts)
    if parallel < 1:
        raise InputError("--parallel must be at least 1")
    jump_settings: JumpSettings = {h.name: (h.address, h.ssh) for h in inventory.hosts}
    pool = SshPool(accept_new_host_keys)
    results: dict[str, HostVram] = {}
    executor = ThreadPoolExecutor(max_workers=min(parallel, max(1, len(hosts))))
    try:
        futures = {executor.submit(probe_host, h, pool, jump_settings): h for h in hosts}
        for future in as_completed(futures):
            row = future.result()
            results[row.name] = row
            if on_done is not None:
                on_done(row)
    finally:
        # On Ctrl-C the probes still running end with their connections, closed here, rather than at their
        # command timeouts (waiting for them held the exit for up to 30 s).
        executor.shutdown(wait=False, cancel_futures=True)
        pool.close()
        executor.shutdown(wait=True)
    return [results[h.name] for h in hosts]


@dataclass(frozen=True)
class EngineVram:
    engine: str
    kind: str
    host: str
    status: str
    gpus: tuple[int, ...]
    total_bytes: int | None
    free_bytes: int | None


def by_engine(inventory: Inventory, rows: list[HostVram]) -> list[EngineVram]:
    """Which engine owns which GPUs and how much memory they have free (None when any GPU is unknown, or the
    inventory does not say which GPUs the engine has: that is not none)."""
    status = {r.name: r for r in rows}
    out = []
    for host in inventory.hosts:
        row = status.get(host.name)
        if row is None:
            continue
        gpus = {g.index: g for g in row.gpus}
        for engine in host.engines:
            owned = [gpus.get(i) for i in engine.gpus]
            present = [g for g in owned if g is not None]
            complete = row.ok and bool(owned) and len(present) == len(owned)
            total = _sum_known([g.total_bytes for g in present]) if complete else None
            free = _sum_known([g.free_bytes for g in present]) if complete else None
            out.append(EngineVram(engine.key, engine.kind, host.name, row.status, engine.gpus, total, free))
    return out


def _sum_known(values: list[int | None]) -> int | None:
    """A sum only when every part is known: a partial figure would understate what is there."""
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)
