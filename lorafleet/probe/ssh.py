"""A thin paramiko wrapper: the only module that imports paramiko.

Connect on first use, verify host keys against known_hosts (unknown refused unless accept-new, changed always
refused), honour ~/.ssh/config and jump hosts, explicit connect and command timeouts, and every failure sorted
into one ProbeError status with a one-line reason.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import paramiko

from lorafleet.inventory.model import SshSettings
from lorafleet.probe.snapshot import ProbeError

# paramiko logs transport errors (with tracebacks) itself; we report them as statuses instead.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)
log = logging.getLogger("lorafleet.ssh")

MAX_OUTPUT_BYTES = 4 * 1024 * 1024
_known_hosts_lock = threading.Lock()
_config_cache: dict[str, paramiko.SSHConfig | None] = {}
_config_lock = threading.Lock()


@dataclass(frozen=True)
class SshTarget:
    """A fully resolved SSH destination (inventory first, then ~/.ssh/config, then OpenSSH's defaults)."""

    alias: str
    hostname: str
    port: int
    user: str
    key_files: tuple[str, ...]
    known_hosts: str
    connect_timeout_s: float
    command_timeout_s: float
    password: str | None = field(default=None, repr=False)
    jump: SshTarget | None = None

    @property
    def label(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str


def _ssh_config(path: str) -> paramiko.SSHConfig | None:
    full = os.path.expanduser(path)
    with _config_lock:
        if full not in _config_cache:
            _config_cache[full] = paramiko.SSHConfig.from_path(full) if os.path.isfile(full) else None
        return _config_cache[full]


def _parse_jump(spec: str) -> tuple[str | None, str, int | None]:
    user, _, rest = spec.rpartition("@")
    host, port = rest, None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") and tail[1:].isdigit() else None
    elif rest.count(":") == 1:
        host, _, port_text = rest.partition(":")
        port = int(port_text) if port_text.isdigit() else None
    return user or None, host, port


def resolve_target(
    address: str,
    settings: SshSettings,
    jump_settings: dict[str, tuple[str, SshSettings]] | None = None,
    _depth: int = 0,
) -> SshTarget:
    """Merge the inventory's SSH settings with ~/.ssh/config for `address`; jump hosts resolve recursively.

    `jump_settings` maps inventory host names to (address, settings), so `jump: bastion` may name a host of the
    inventory and use its own SSH settings.
    """
    if _depth > 5:
        raise ProbeError("unreachable", f"jump chain to {address} is longer than 5 hops (a loop?)")
    config = _ssh_config(settings.config)
    looked = config.lookup(address) if config is not None else {}
    keys: tuple[str, ...] = ()
    if settings.key:
        keys = (os.path.expanduser(settings.key),)
    elif looked.get("identityfile"):
        keys = tuple(os.path.expanduser(k) for k in looked["identityfile"])
    password = None
    if settings.password_env:
        password = os.environ.get(settings.password_env)
        if password is None:
            raise ProbeError("auth-failed", f"environment variable {settings.password_env} is not set")
    jump_spec = settings.jump or looked.get("proxyjump")
    jump = None
    if jump_spec and jump_spec.lower() != "none":
        # OpenSSH's order: `-J a,b` reaches a first, b through a, the target through b. So the target's own hop
        # is the last, reached through the ones before it — or, where none are, by its own route: an inventory
        # host keeps its `jump:`, another address its ssh_config ProxyJump.
        *before, last = (hop.strip() for hop in jump_spec.split(","))
        user, host, port = _parse_jump(last)
        if jump_settings and host in jump_settings:
            jump_address, base = jump_settings[host]
        else:
            jump_address, base = host, replace(settings, jump=None)
        if before:
            base = replace(base, jump=",".join(before))
        if user:
            base = replace(base, user=user)
        if port:
            base = replace(base, port=port)
        jump = resolve_target(jump_address, base, jump_settings, _depth + 1)
    return SshTarget(
        alias=address,
        hostname=looked.get("hostname", address),
        port=int(settings.port or looked.get("port") or 22),
        user=settings.user or looked.get("user") or getpass.getuser(),
        key_files=keys,
        known_hosts=os.path.expanduser(settings.known_hosts),
        connect_timeout_s=settings.connect_timeout_s,
        command_timeout_s=settings.command_timeout_s,
        password=password,
        jump=jump,
    )


def fingerprint(key: paramiko.PKey) -> str:
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown hosts, or record them like OpenSSH's StrictHostKeyChecking=accept-new."""

    def __init__(self, accept_new: bool, known_hosts: str) -> None:
        self.accept_new = accept_new
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise ProbeError(
                "host-key-unknown",
                f"host key of {hostname} ({key.get_name()} {fingerprint(key)}) is not in {self.known_hosts}; "
                "verify it and add it, or run with --accept-new-host-keys",
            )
        with _known_hosts_lock:
            path = Path(self.known_hosts)
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            entry = f"{hostname} {key.get_name()} {key.get_base64()}\n".encode()
            with path.open("a+b") as fh:
                # A last line without its newline (an editor's save) would be glued to the new entry: then
                # neither parses, and every host of the file is refused.
                if fh.seek(0, os.SEEK_END) > 0:
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        entry = b"\n" + entry
                fh.write(entry)
        client.get_host_keys().add(hostname, key.get_name(), key)


class SshConnection:
    """One host's SSH connection, opened on first use and reused for every command."""

    def __init__(self, target: SshTarget, accept_new_host_keys: bool = False, pool: SshPool | None = None) -> None:
        self.target = target
        self.accept_new = accept_new_host_keys
        self.pool = pool
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    def _connect(self) -> paramiko.SSHClient:
        with self._lock:
            if self._client is not None:
                return self._client
            t = self.target
            client = paramiko.SSHClient()
            if os.path.isfile(t.known_hosts):
                try:
                    client.load_host_keys(t.known_hosts)
                except Exception as exc:  # paramiko raises several kinds on a garbled file
                    reason = getattr(exc, "strerror", None) or _first_line(exc)
                    raise ProbeError("host-key-unknown", f"known_hosts file {t.known_hosts}: {reason}") from exc
            for key_file in t.key_files:
                if not os.access(key_file, os.R_OK):
                    why = "not found" if not os.path.exists(key_file) else "not readable"
                    raise ProbeError("auth-failed", f"{t.label}: key file {key_file} {why}")
            client.set_missing_host_key_policy(_HostKeyPolicy(self.accept_new, t.known_hosts))
            sock = None
            if t.jump is not None:
                jump = self.pool.connection(t.jump) if self.pool else SshConnection(t.jump, self.accept_new)
                sock = jump.open_tunnel(t.hostname, t.port, t.connect_timeout_s)
            started = time.monotonic()
            via = f" via {t.jump.label}" if t.jump is not None else ""
            log.info("%s: connecting to %s@%s:%d%s", t.label, t.user, t.hostname, t.port, via)
            try:
                client.connect(
                    t.hostname,
                    port=t.port,
                    username=t.user,
                    password=t.password,
                    key_filename=list(t.key_files) or None,  # type: ignore[arg-type]  # paramiko takes a list too
                    look_for_keys=not t.key_files,
                    allow_agent=True,
                    timeout=t.connect_timeout_s,
                    banner_timeout=t.connect_timeout_s,
                    auth_timeout=t.connect_timeout_s,
                    channel_timeout=t.connect_timeout_s,
                    sock=sock,
                )
            except Exception as exc:
                client.close()
                failure = classify(exc, t)
                if failure.status == "unreachable" and time.monotonic() - started >= 0.9 * t.connect_timeout_s:
                    # A server that accepts and never speaks surfaces as "No existing session" or EOF.
                    message = f"{t.label}: no SSH answer within {t.connect_timeout_s:g}s"
                    failure = ProbeError("timeout", message)
                raise failure from exc
            log.info("%s: connected in %.0f ms", t.label, (time.monotonic() - started) * 1000)
            transport = client.get_transport()
            if transport is not None:
                transport.set_keepalive(30)
            self._client = client
            return client

    def open_tunnel(self, host: str, port: int, timeout: float) -> paramiko.Channel:
        """A direct-tcpip channel from this host to host:port, used as the socket of the next hop."""
        client = self._connect()
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise ProbeError("unreachable", f"jump host {self.target.label}: connection closed")
        try:
            return transport.open_channel("direct-tcpip", (host, port), ("127.0.0.1", 0), timeout=timeout)
        except Exception as exc:
            failure = classify(exc, self.target)
            raise ProbeError(failure.status, f"via jump host {self.target.label}: {failure.message}") from exc

    def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """Run a command; ProbeError('timeout') if it runs past the command timeout."""
        client = self._connect()
        timeout = timeout_s if timeout_s is not None else self.target.command_timeout_s
        transport = client.get_transport()
        if transport is None:
            raise ProbeError("unreachable", f"{self.target.label}: connection closed")
        try:
            channel = transport.open_session(timeout=self.target.connect_timeout_s)
            channel.exec_command(command)
        except Exception as exc:
            raise classify(exc, self.target) from exc
        deadline = time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        try:
            while True:
                drained = False
                while channel.recv_ready():
                    out += channel.recv(65536)
                    drained = True
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                    drained = True
                if len(out) + len(err) > MAX_OUTPUT_BYTES:
                    raise ProbeError("command-failed", f"{command.split()[0]}: output larger than 4 MiB")
                # The exit status can come before the last of the output (the command has exited, sshd has not yet
                # sent all it read from its pipes): the end is the channel's EOF, after its last byte, as for ssh.
                ended = (channel.eof_received or channel.closed) and channel.exit_status_ready()
                if ended and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                if time.monotonic() > deadline:
                    raise ProbeError(
                        "timeout", f"{command.split()[0]} did not finish within {timeout:g}s on {self.target.label}"
                    )
                if not drained:
                    channel.status_event.wait(0.01)
            code = channel.recv_exit_status()
        finally:
            channel.close()
        log.info("%s: %s exited %d", self.target.label, command.split()[0], code)
        return CommandResult(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


class SshPool:
    """The connections of one run: one per inventory host, and one per jump host shared by all behind it."""

    def __init__(self, accept_new_host_keys: bool = False) -> None:
        self.accept_new = accept_new_host_keys
        self._connections: dict[tuple[str | None, SshTarget], SshConnection] = {}
        self._lock = threading.Lock()

    def connection(self, target: SshTarget, host: str | None = None) -> SshConnection:
        """The connection of inventory host `host` (or, with host None, the shared one to a jump host)."""
        with self._lock:
            key = (host, target)
            if key not in self._connections:
                self._connections[key] = SshConnection(target, self.accept_new, self)
            return self._connections[key]

    def close(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for conn in connections:
            conn.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def classify(exc: BaseException, target: SshTarget) -> ProbeError:
    """Sort an exception from connecting or running into one status with a one-line reason."""
    where = target.label
    if isinstance(exc, ProbeError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return ProbeError(
            "host-key-mismatch",
            f"host key of {where} changed: got {exc.key.get_name()} {fingerprint(exc.key)}, "
            f"{target.known_hosts} has {fingerprint(exc.expected_key)}; refusing (possible man-in-the-middle)",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(target.key_files) or "agent and default keys"
        return ProbeError("auth-failed", f"{where}: authentication failed ({keys})")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return ProbeError("timeout", f"{where}: no answer within {target.connect_timeout_s:g}s")
    if isinstance(exc, socket.gaierror):
        return ProbeError("unreachable", f"{where}: cannot resolve host name ({exc.strerror})")
    if isinstance(exc, ConnectionRefusedError):
        return ProbeError("unreachable", f"{where}: connection refused")
    if isinstance(exc, paramiko.ChannelException):
        return ProbeError("unreachable", f"{where}: {exc.text}")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return ProbeError("unreachable", f"{where}: connection refused")
    if isinstance(exc, OSError):
        return ProbeError("unreachable", f"{where}: {exc.strerror or exc}")
    if isinstance(exc, paramiko.SSHException):
        text = _first_line(exc)
        status = "timeout" if "timeout" in text.lower() or "banner" in text.lower() else "unreachable"
        return ProbeError(status, f"{where}: {text}")
    return ProbeError("unreachable", f"{where}: {type(exc).__name__}: {exc}")
