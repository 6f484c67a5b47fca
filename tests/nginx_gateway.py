"""A real nginx on 127.0.0.1 running deploy/nginx-lorafleet.conf, and stand-in receivers for its hints.

The recipe is the one an admin pastes: this module only fills its placeholders (a free loopback port to listen
on, the emulated engines as upstreams, an access log and the hint port in a temporary folder) and runs
`/usr/sbin/nginx -p DIR -c DIR/nginx.conf -g 'daemon off;'` with its pid, error log and temporary paths in DIR.
Every address it writes is on loopback: `render_recipe` refuses any other.

The hint receiver stands in for `lorafleet daemon --hints-addr` until that exists, in four modes: "up" (records
each hint and answers 204 at once), "slow" (records, then answers after `slow_s`), "dead" (nothing listens on
its port) and "stopped" (a socket that listens but never accepts: what a SIGSTOPped daemon looks like from
nginx: connections complete into the backlog until it is full, then SYNs go unanswered).

Use from tests: the fixtures `hint_receivers` and `nginx_gateway` (factories; stopped after the test):

    receiver = hint_receivers("up")
    gateway = nginx_gateway([engine.url], hints_port=receiver.port)
    urllib.request.urlopen(...gateway.url + "/v1/completions"...)
    gateway.wait_for_records(1)  # the JSON access-log lines, parsed

From a shell: `python -m tests.nginx_gateway receiver --mode up` and
`python -m tests.nginx_gateway gateway --engine http://127.0.0.1:PORT --hints-port PORT`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "deploy" / "nginx-lorafleet.conf"
NGINX = os.environ.get("LORAFLEET_NGINX", "/usr/sbin/nginx")
MIRROR_LINE = re.compile(r"^[ \t]*mirror(_request_body)?[ \t]+[^;]*;[^\n]*\n", re.MULTILINE)
ENGINE_LINE = re.compile(r"^([ \t]*)server[ \t]+<ENGINE>;[^\n]*\n", re.MULTILINE)


def free_port() -> int:
    """A port nothing listens on now (bound to 0 and released: another process may take it, so callers retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loopback(address: str) -> str:
    """`host:port` from a URL or `host:port`, refusing anything outside 127.0.0.0/8: tests never leave the host."""
    parts = urlsplit(address if "//" in address else f"//{address}")
    host, port = parts.hostname or "", parts.port
    if port is None or not ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).version != 4:
        raise ValueError(f"not a 127.0.0.0/8 host:port: {address!r}")
    return f"{host}:{port}"


def nginx_missing() -> str | None:
    """Why the real nginx cannot run here, or None."""
    if not os.access(NGINX, os.X_OK):
        return f"{NGINX} not found (apt-get install nginx-light; or set LORAFLEET_NGINX)"
    version = subprocess.run([NGINX, "-V"], capture_output=True, text=True, timeout=10).stderr
    if "--without-http_mirror_module" in version:
        return f"{NGINX} is built without the mirror module"
    return None


def require_nginx() -> None:
    """Skip the test when nginx cannot run, unless LORAFLEET_REQUIRE_NGINX=1 (CI), which makes that a failure."""
    why = nginx_missing()
    if why is None:
        return
    if os.environ.get("LORAFLEET_REQUIRE_NGINX") == "1":
        pytest.fail(f"LORAFLEET_REQUIRE_NGINX=1 but {why}")
    pytest.skip(why)


def render_recipe(
    *,
    listen: str,
    engines: Sequence[str],
    hints_port: int,
    access_log: Path,
    mirror: bool = True,
    text: str | None = None,
) -> str:
    """The recipe with its placeholders filled; `mirror=False` drops the mirror (for the no-hint baseline)."""
    text = RECIPE.read_text(encoding="utf-8") if text is None else text
    if not engines:
        raise ValueError("at least one engine")
    listen = loopback(listen)
    servers = [loopback(e) for e in engines]
    if len(ENGINE_LINE.findall(text)) != 1 or len(MIRROR_LINE.findall(text)) != 2:
        raise ValueError("the recipe must hold one `server <ENGINE>;` line and the two mirror directives")
    text = ENGINE_LINE.sub(lambda m: "".join(f"{m.group(1)}server {s};\n" for s in servers), text)
    if not mirror:
        text = MIRROR_LINE.sub("", text)
    text = text.replace("<LISTEN>", listen).replace("<HINTS_PORT>", str(hints_port))
    text = text.replace("<ACCESS_LOG>", str(access_log))
    left = re.findall(r"<[A-Z_]+>", re.sub(r"#[^\n]*", "", text))
    if left:
        raise ValueError(f"placeholders left unfilled: {sorted(set(left))}")
    return text


class NginxGateway:
    """nginx master (foreground) serving the recipe from `root`; `.url`, `.records()`, `.stop()`."""

    def __init__(
        self,
        root: Path,
        engines: Sequence[str],
        hints_port: int,
        *,
        mirror: bool = True,
        workers: int = 1,
        recipe_text: str | None = None,
    ) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.engines = list(engines)
        self.hints_port = hints_port
        self.mirror = mirror
        self.workers = workers
        self.recipe_text = recipe_text
        self.access_log = root / "access.jsonl"
        self.error_log = root / "error.log"
        self.conf = root / "nginx.conf"
        self.pid_file = root / "nginx.pid"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write(self, port: int) -> None:
        site = render_recipe(
            listen=f"127.0.0.1:{port}",
            engines=self.engines,
            hints_port=self.hints_port,
            access_log=self.access_log,
            mirror=self.mirror,
            text=self.recipe_text,
        )
        (self.root / "lorafleet.conf").write_text(site, encoding="utf-8")
        temp = self.root / "temp"
        temp.mkdir(exist_ok=True)
        paths = "".join(f"    {kind}_temp_path {temp / kind};\n" for kind in ("client_body", "proxy", "fastcgi"))
        paths += "".join(f"    {kind}_temp_path {temp / kind};\n" for kind in ("uwsgi", "scgi"))
        self.conf.write_text(
            "# Written by tests/nginx_gateway.py: everything in this folder, the site is the recipe.\n"
            # As root the workers would switch to nobody, who cannot enter pytest's 0700 temporary folders.
            + ("user root;\n" if os.geteuid() == 0 else "")
            + f"worker_processes {self.workers};\n"
            f"pid {self.pid_file};\n"
            f"error_log {self.error_log} warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n"
            f"{paths}"
            "    access_log off;\n"
            f"    include {self.root / 'lorafleet.conf'};\n"
            "}\n",
            encoding="utf-8",
        )

    def start(self, timeout: float = 10.0) -> NginxGateway:
        """Start on a free port (another, when a racing process took it) and return once it accepts."""
        # Never the hint port or an engine's: nginx listening where its own mirror sends would hint itself, and
        # each hint would be a completion mirrored again, without end.
        taken = {self.hints_port, *(int(loopback(e).rsplit(":", 1)[1]) for e in self.engines)}
        for _ in range(5):
            port = free_port()
            while port in taken:
                port = free_port()
            self._write(port)
            self.error_log.write_text("")
            self.pid_file.unlink(missing_ok=True)
            command = [NGINX, "-p", f"{self.root}/", "-c", str(self.conf), "-e", str(self.error_log)]
            self.proc = subprocess.Popen(
                [*command, "-g", "daemon off;"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                # Ready once nginx has written its pid (it does so only after binding every listener) and the
                # port accepts: a connection alone could reach another process's socket on a port nginx failed
                # to bind and is still retrying.
                if self._wrote_pid():
                    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        self.port = port
                        return self
                time.sleep(0.02)
            stderr = self._reap()
            if "Address already in use" not in stderr + self.errors():
                raise RuntimeError(f"nginx did not start:\n{stderr}{self.errors()}")
        raise RuntimeError("nginx found no free port in 5 tries")

    def _wrote_pid(self) -> bool:
        assert self.proc is not None
        try:
            return self.pid_file.read_text().strip() == str(self.proc.pid)
        except OSError:
            return False

    def _reap(self) -> str:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.kill()
        _, stderr = self.proc.communicate(timeout=10)
        return stderr.decode(errors="replace")

    def stop(self, timeout: float = 5.0) -> None:
        """Graceful quit (in-flight requests finish), then terminate, then kill."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for signum, wait in ((signal.SIGQUIT, timeout), (signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            proc.send_signal(signum)
            try:
                proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        if proc.stderr is not None:
            proc.stderr.close()

    def errors(self) -> str:
        try:
            return self.error_log.read_text(errors="replace")
        except OSError:
            return ""

    def records(self) -> list[dict[str, Any]]:
        """The access log's lines, parsed (each must be JSON: that is what the recipe promises)."""
        try:
            lines = self.access_log.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def wait_for_records(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """At least `count` lines (nginx writes one when a request is finalised, after its mirror completes)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.records()
            if len(found) >= count:
                return found
            time.sleep(0.01)
        raise AssertionError(f"{len(self.records())} access-log lines, wanted {count}\n{self.errors()}")

    def __enter__(self) -> NginxGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Hint:
    wall: float  # time.time() when its body had been read
    monotonic: float
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any  # the parsed JSON, or the raw text when it is not JSON


class _HintHandler(BaseHTTPRequestHandler):
    server: _HintServer
    protocol_version = "HTTP/1.1"  # nginx keeps connections to the hint upstream alive

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _hint(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        hint = Hint(
            time.time(),
            time.monotonic(),
            self.command,
            self.path,
            {k.lower(): v for k, v in self.headers.items()},
            body,
        )
        receiver = self.server.receiver
        with receiver.lock:
            receiver.hints.append(hint)
        receiver.arrived.set()
        if receiver.slow_s:
            time.sleep(receiver.slow_s)
        self.send_response(204)
        self.end_headers()

    def do_POST(self) -> None:
        self._hint()

    def do_PUT(self) -> None:
        self._hint()

    def do_GET(self) -> None:
        self._hint()


class _HintServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, receiver: HintReceiver) -> None:
        super().__init__(("127.0.0.1", 0), _HintHandler)
        self.receiver = receiver


@dataclass
class HintReceiver:
    """The stand-in for lorafleet's hint endpoint on 127.0.0.1:`port`, in one of MODES."""

    mode: str = "up"
    slow_s: float = 5.0
    backlog: int = 4  # "stopped": connections the kernel completes before it drops SYNs
    hints: list[Hint] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    MODES = ("up", "slow", "dead", "stopped")

    def __post_init__(self) -> None:
        if self.mode not in self.MODES:
            raise ValueError(f"mode must be one of {self.MODES}")
        if self.mode != "slow":
            self.slow_s = 0.0
        self._server: _HintServer | None = None
        self._socket: socket.socket | None = None
        if self.mode in ("up", "slow"):
            self._server = _HintServer(self)
            self.port = int(self._server.server_address[1])
            threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        elif self.mode == "stopped":
            self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._socket.bind(("127.0.0.1", 0))
            self._socket.listen(self.backlog)  # and never accept()
            self.port = int(self._socket.getsockname()[1])
        else:
            self.port = free_port()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def received(self) -> list[Hint]:
        with self.lock:
            return list(self.hints)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Hint]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.received()
            if len(got) >= count:
                return got
            self.arrived.wait(0.01)
            self.arrived.clear()
        raise AssertionError(f"{len(self.received())} hints arrived, wanted {count}")

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None


@pytest.fixture
def hint_receivers() -> Iterator[Callable[..., HintReceiver]]:
    """`hint_receivers(mode="up", slow_s=5.0)`: a stand-in hint endpoint, stopped after the test."""
    started: list[HintReceiver] = []

    def start(mode: str = "up", slow_s: float = 5.0) -> HintReceiver:
        receiver = HintReceiver(mode=mode, slow_s=slow_s)
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.stop()


@pytest.fixture
def nginx_gateway(tmp_path: Path) -> Iterator[Callable[..., NginxGateway]]:
    """`nginx_gateway(engine_urls, hints_port, mirror=True)`: the recipe running in real nginx, stopped after the
    test. Skips when nginx is missing (fails instead under LORAFLEET_REQUIRE_NGINX=1)."""
    require_nginx()
    started: list[NginxGateway] = []

    def start(engines: Sequence[str], hints_port: int, **options: Any) -> NginxGateway:
        gateway = NginxGateway(tmp_path / f"nginx{len(started)}", engines, hints_port, **options)
        started.append(gateway)
        return gateway.start()

    yield start
    for gateway in started:
        gateway.stop()


def main() -> None:
    """Run a stand-in hint receiver or the recipe in nginx on loopback until interrupted (for benchmarks, trials)."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    receiver_cmd = sub.add_parser("receiver", help="a stand-in for lorafleet's hint endpoint")
    receiver_cmd.add_argument("--mode", choices=HintReceiver.MODES, default="up")
    receiver_cmd.add_argument("--slow-s", type=float, default=5.0)
    gateway_cmd = sub.add_parser("gateway", help="deploy/nginx-lorafleet.conf in nginx")
    gateway_cmd.add_argument("--engine", action="append", required=True, help="an engine's URL (repeatable)")
    gateway_cmd.add_argument("--hints-port", type=int, required=True)
    gateway_cmd.add_argument("--no-mirror", action="store_true")
    gateway_cmd.add_argument("--dir", help="where its config, logs and pid go (default: a temporary folder)")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.what == "receiver":
        receiver = HintReceiver(mode=args.mode, slow_s=args.slow_s)
        print(f"hints ({args.mode}) on {receiver.addr}", flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        finally:
            receiver.stop()
            print(f"received {len(receiver.received())} hints", flush=True)
        return
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="lorafleet-nginx-"))
    gateway = NginxGateway(folder, args.engine, args.hints_port, mirror=not args.no_mirror).start()
    print(f"nginx on {gateway.url} (access log {gateway.access_log})", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        gateway.stop()


if __name__ == "__main__":
    main()
