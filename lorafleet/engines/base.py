"""What every engine client shares: one HTTP client per engine, explicit timeouts, one function mapping status
codes to errors, bounded retries with backoff that honour Retry-After, and the API key from the environment.

4xx answers are the engine's word and are not retried; refused connections and transient 5xx are retried on a
short, bounded backoff list, timeouts only for idempotent calls, and every call has an overall deadline and a
size cap on its answer. The API key is read from the variable the inventory names and is never put in a
message, a log line or a repr.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import socket
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx

from lorafleet.errors import InputError, OperationError
from lorafleet.inventory.model import Engine
from lorafleet.shown import UNSHOWN
from lorafleet.stopping import Cancelled, Stop

log = logging.getLogger("lorafleet.engines")
BACKOFF_S: tuple[float, ...] = (0.2, 0.5, 1.0)
MAX_RETRY_AFTER_S = 10.0


class EngineError(OperationError):
    """An engine did not do what was asked; `message` is one line and carries the engine's own words."""

    def __init__(self, engine: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.engine = engine
        self.status = status


class EngineUnavailableError(EngineError):
    """Could not reach the engine, it timed out, or it kept answering 5xx after the retries."""


class EngineRejectedError(EngineError):
    """The engine answered with an error about this request (4xx, or a 5xx that is not transient)."""


class AlreadyLoadedError(EngineRejectedError):
    """The adapter name is already registered on the engine: for lorafleet a state, not a failure."""


class NotRegisteredError(EngineRejectedError):
    """The engine holds no adapter of that name (it restarted, or another client unloaded it): for an unload the
    wanted state, for a touch a sign that lorafleet's book is stale — not a failure of the adapter."""


@contextmanager
def not_registered(message: re.Pattern[str], status: int | None = None) -> Iterator[None]:
    """An engine's refusal naming an adapter it does not hold (its words match `message`, with `status` where
    given), raised as NotRegisteredError; any other failure passes as it was."""
    try:
        yield
    except EngineRejectedError as exc:
        if (status is None or exc.status == status) and message.search(exc.message):
            raise NotRegisteredError(exc.engine, exc.message, exc.status) from exc
        raise


class MissingApiKeyError(InputError):
    """The inventory names an API-key variable that is not set, or a key file that cannot be read."""


MAX_KEY_FILE_BYTES = 64 * 1024


def key_file_path(engine: Engine) -> Path | None:
    """Where the engine's key file is: absolute (or ~) as written; a relative name in $CREDENTIALS_DIRECTORY
    when systemd set it (LoadCredential=), otherwise beside the inventory file that names it."""
    if engine.api_key_file is None:
        return None
    path = Path(os.path.expanduser(engine.api_key_file))
    if path.is_absolute():
        return path
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    return (Path(credentials) if credentials else Path(engine.source.file).parent) / path


def api_key(engine: Engine) -> str | None:
    """The engine's API key, from its file or its variable; errors name where it was looked for, never a value."""
    path = key_file_path(engine)
    if path is not None:
        where = f"engine {engine.key}: API key file {path}"
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_KEY_FILE_BYTES + 1)
        except OSError as exc:
            raise MissingApiKeyError(f"{where} cannot be read: {exc.strerror or exc}") from None
        if len(data) > MAX_KEY_FILE_BYTES:
            raise MissingApiKeyError(f"{where} is over {MAX_KEY_FILE_BYTES // 1024} KiB: not a key")
        try:
            key = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise MissingApiKeyError(f"{where} is not UTF-8 text") from None
        if not _one_token(key):
            raise MissingApiKeyError(f"{where} should hold the key alone, on one line")
        return key
    if engine.api_key_env is None:
        return None
    value = (os.environ.get(engine.api_key_env) or "").strip()  # a secret made from a file ends in a newline
    if not value:
        raise MissingApiKeyError(
            f"engine {engine.key}: environment variable {engine.api_key_env} (its API key) is not set",
            hint=f"export {engine.api_key_env}=... before running lorafleet",
        )
    if not _one_token(value):
        raise MissingApiKeyError(
            f"engine {engine.key}: environment variable {engine.api_key_env} holds spaces or control characters "
            "inside the key",
            hint="set it to the key alone",
        )
    return value


def _one_token(key: str) -> bool:
    """A key an Authorization header can carry as it is: no whitespace or control character inside (the HTTP
    library would refuse the header with an error quoting it, and a key altered on the way is no longer
    recognised, and masked, where an engine echoes it)."""
    return bool(key) and not any(ch.isspace() or _CONTROL.match(ch) for ch in key)


@dataclass(frozen=True)
class Reply:
    """An engine's whole answer, read within the call's deadline and size cap."""

    status_code: int
    headers: httpx.Headers
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        try:
            return json.loads(self.content)
        except RecursionError as exc:  # absurdly nested: not an answer any engine gives
            raise ValueError("JSON nested too deeply") from exc


def error_message(response: Reply, redact: Callable[[str], str] = str) -> str:
    """The engine's own message from any of the error body shapes vLLM and SGLang use, or the plain text;
    `redact` runs on it whole, before it is cut to one line (a key cut in two would no longer be found)."""
    text = response.text.strip()
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return one_line(redact(str(error["message"])))
        for key in ("message", "error_message", "detail"):
            if isinstance(body.get(key), str) and body[key]:
                return one_line(redact(body[key]))
        if isinstance(error, str) and error:
            return one_line(redact(error))
    return one_line(redact(text)) or f"HTTP {response.status_code}"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def one_line(text: str, limit: int = 300) -> str:
    """A server's text (an engine's, the Kubernetes API's) as one line for logs, errors and the journal:
    whitespace runs as one space, control and bidirectional characters dropped, at most `limit` characters."""
    line = UNSHOWN.sub("", " ".join(text.split()))
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass(frozen=True)
class Activity:
    """Adapters with requests in flight (vLLM's lora_requests_info): activity, not residency."""

    running: tuple[str, ...]
    waiting: tuple[str, ...]
    max_lora: int | None


_TLS_LOCK = threading.Lock()
_TLS: list[ssl.SSLContext] = []


def verifying_context() -> ssl.SSLContext:
    """The one verifying TLS context every engine client shares (certifi's CAs, as httpx builds by default with
    the environment ignored). Building one reads the whole CA bundle: about 20 ms and 0.7 MB per client, so a
    daemon with 300 discovered pods took 4 s and 220 MB to start before they shared it. An SSLContext is safe
    to share between threads; built on first use, so commands that never call an engine never read the bundle."""
    with _TLS_LOCK:
        if not _TLS:
            _TLS.append(httpx.create_ssl_context(trust_env=False))
        return _TLS[0]


class EngineClient:
    """One engine's HTTP API. Subclasses speak vLLM or SGLang; callers use only these methods."""

    kind = ""
    final_errors: tuple[re.Pattern[str], ...] = ()  # 5xx messages that mean "this will never work"

    def __init__(
        self,
        engine: Engine,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] | None = None,
        backoff: Sequence[float] = BACKOFF_S,
        stop: Stop | None = None,
    ) -> None:
        self.engine = engine
        self.stop = stop
        self.sleep = sleep or (stop.sleep if stop is not None else time.sleep)
        self.backoff = tuple(backoff)
        self.failed: EngineUnavailableError | None = None
        headers = {"User-Agent": "lorafleet"}
        key = self._key = api_key(engine)
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        timeout = httpx.Timeout(engine.request_timeout_s, connect=min(5.0, engine.request_timeout_s))
        # Proxy variables are ignored (a Bearer key must not travel to a proxy nobody chose for the engines)
        # unless the inventory names a proxy for this engine.
        self.http = httpx.Client(
            base_url=engine.url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            trust_env=False,
            proxy=engine.proxy,
            verify=verifying_context(),
        )
        self._served_model: str | None = None
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()  # its connections' (`_trace`)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.engine.key})"

    def bind_stop(self, stop: Stop) -> None:
        """From now on no request starts once `stop` is set, and backoff sleeps wake at once."""
        self.stop = stop
        self.sleep = stop.sleep

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- HTTP with retries ----------------------------------------------------------------------------------
    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, idempotent: bool | None = None
    ) -> Reply:
        """Send, then retry what may be retried, all within the engine's call deadline; raise EngineError.

        Refused connections and 5xx answers are retried on the backoff list (or after Retry-After, capped); a
        timeout or a connection lost mid-answer only for idempotent calls (by default GET), since the engine may
        have acted. A 5xx carrying one of the engine's deterministic messages is final. An engine that failed
        once in this client's life fails every later call at once: a dead engine costs one deadline per run.
        """
        if self.failed is not None:
            raise EngineUnavailableError(self.engine.key, f"{self.failed.message} (not retried in this run)")
        key = self.engine.key
        retry_whole = method == "GET" if idempotent is None else idempotent
        deadline = time.monotonic() + self.engine.call_deadline_s
        attempt = 0
        while True:
            if self.stop is not None and self.stop.is_set():
                raise Cancelled()
            retry_after: float | None = None
            retryable = True
            try:
                response = self._send(method, path, body, deadline)
            except (httpx.TimeoutException, _DeadlineError):
                log.info("%s: %s %s timed out", key, method, path)
                failure: EngineError = EngineUnavailableError(key, f"{key}: {method} {path} {self._timed_out()}")
                retryable = retry_whole
            except httpx.ConnectError as exc:
                log.info("%s: %s %s: cannot connect", key, method, path)
                reason = self._said(str(exc))
                failure = EngineUnavailableError(key, f"{key}: cannot reach {self.engine.url} ({reason})")
            except httpx.TransportError as exc:
                reason = self._said(str(exc))
                failure = EngineUnavailableError(key, f"{key}: {method} {path} broke off ({reason})")
                retryable = retry_whole
            else:
                if response.status_code < 300:
                    return response
                if response.status_code < 400:  # redirects are never followed: the engine's own URL is the one
                    where = self._said(response.headers.get("Location", ""), 120) or "nowhere"
                    raise EngineRejectedError(
                        key,
                        f"{key}: HTTP {response.status_code}: {method} {path} answered a redirect to {where}, "
                        "not followed",
                        response.status_code,
                    )
                # An engine that echoes the request's Authorization header must not put the key in the journal.
                message = f"{key}: HTTP {response.status_code}: {error_message(response, self._redact)}"
                if (response.status_code < 500 and response.status_code != 429) or self.is_final(message):
                    raise EngineRejectedError(key, message, response.status_code)
                failure = EngineUnavailableError(key, message, response.status_code)
                retry_after = _retry_after(response.headers.get("Retry-After"))
            delay = self.backoff[attempt] if attempt < len(self.backoff) else None
            if delay is not None and retry_after is not None:
                delay = min(retry_after, MAX_RETRY_AFTER_S)
            if not retryable or delay is None or time.monotonic() + delay >= deadline:
                if isinstance(failure, EngineUnavailableError):
                    self.failed = failure
                raise failure
            attempt += 1
            self.sleep(delay)

    def _send(self, method: str, path: str, body: dict[str, Any] | None, deadline: float) -> Reply:
        """One attempt: every wait bounded by what is left of the deadline, the body read up to the size cap."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _DeadlineError()
        wait = min(self.engine.request_timeout_s, remaining)
        timeout = httpx.Timeout(wait, connect=min(5.0, wait))
        cap = self.engine.max_response_bytes
        started = time.monotonic()
        if log.isEnabledFor(logging.DEBUG) and body is not None:
            log.debug("%s: %s %s body %s", self.engine.key, method, path, self._redact(json.dumps(body)))
        # httpx's timeouts bound each read, not the whole: an engine dripping its status line and headers a
        # byte at a time would hold the call for ever. At the deadline a watchdog shuts this client's sockets,
        # which ends the read (the engine is then failed for the run, so no other call of it is lost).
        cut = threading.Event()
        watchdog = threading.Timer(remaining, self._cut, (cut,))
        watchdog.daemon = True
        watchdog.start()
        try:
            with self.http.stream(
                method, path, json=body, timeout=timeout, extensions={"trace": self._trace}
            ) as response:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > cap:
                        raise EngineRejectedError(
                            self.engine.key,
                            f"{self.engine.key}: {method} {path} answered more than {cap} bytes (max_response_mb)",
                            response.status_code,
                        )
                    if time.monotonic() > deadline:
                        raise _DeadlineError()
                    chunks.append(chunk)
                reply = Reply(response.status_code, response.headers, b"".join(chunks))
        except httpx.TransportError:
            if cut.is_set():
                raise _DeadlineError() from None
            raise
        finally:
            watchdog.cancel()
        ms = (time.monotonic() - started) * 1000
        log.info("%s: %s %s -> %d in %.0f ms", self.engine.key, method, path, reply.status_code, ms)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: answer %s", self.engine.key, self._said(reply.text, 500))
        return reply

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: remember each connection's socket, for the watchdog."""
        if event == "connection.connect_tcp.complete":
            sock = info["return_value"].get_extra_info("socket")
            if sock is not None:
                self._sockets.add(sock)

    def _cut(self, cut: threading.Event) -> None:
        cut.set()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _said(self, text: str, limit: int = 300) -> str:
        """An engine's (or its transport's) words for a message: the key masked first, then one line."""
        return one_line(self._redact(text), limit)

    def _redact(self, text: str) -> str:
        """Bodies for -vv and error messages: the engine's key, should an engine echo it, is masked."""
        return text.replace(self._key, "***") if self._key else text

    def _timed_out(self) -> str:
        e = self.engine
        return f"timed out after {e.request_timeout_s:g}s (whole call at most {e.call_deadline_s:g}s)"

    def is_final(self, message: str) -> bool:
        """A 5xx whose message the engine gives for a request that can never succeed (e.g. a rank error)."""
        return any(pattern.search(message) for pattern in self.final_errors)

    def get_json(self, path: str) -> Any:
        response = self.request("GET", path)
        try:
            return response.json()
        except (json.JSONDecodeError, ValueError) as exc:
            raise EngineRejectedError(self.engine.key, f"{self.engine.key}: {path} did not answer JSON") from exc

    # --- the interface --------------------------------------------------------------------------------------
    def registry(self) -> set[str]:
        """Adapter names the engine has registered (`/v1/models` cards with a parent)."""
        return set(self.registered_paths())

    def registered_paths(self) -> dict[str, str]:
        """Registered adapter names and the paths the engine reads them from (each card's `root`; '' if none)."""
        return {
            c["id"]: c["root"] if isinstance(c.get("root"), str) else ""
            for c in self._model_cards()
            if c.get("parent") not in (None, "") and isinstance(c.get("id"), str)
        }

    def served_model(self) -> str:
        """The name the engine serves its base model under (the card without a parent)."""
        if self._served_model is None:
            cards = self._model_cards()
            base = [c["id"] for c in cards if not c.get("parent") and isinstance(c.get("id"), str)]
            if not base:
                raise EngineRejectedError(self.engine.key, f"{self.engine.key}: /v1/models lists no base model")
            self._served_model = base[0]
        return self._served_model

    def _model_cards(self) -> list[dict[str, Any]]:
        body = self.get_json("/v1/models")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise EngineRejectedError(self.engine.key, f"{self.engine.key}: /v1/models answered an unexpected shape")
        return [c for c in data if isinstance(c, dict)]

    def load(self, name: str, path: str, pinned: bool = False) -> None:
        """Register and load an adapter; AlreadyLoadedError when the name is taken. `pinned` reaches engines that
        hold pins themselves (SGLang); elsewhere a pin is lorafleet's intent alone, and nothing is sent for it."""
        raise NotImplementedError

    def rewarm(self, name: str, path: str) -> None:
        """Make an adapter that is already registered hot again (it may have fallen out of the caches)."""
        raise NotImplementedError

    def prime(self, name: str) -> None:
        """A 1-token request naming the adapter, so it takes a GPU slot."""
        raise NotImplementedError

    def unload(self, name: str) -> None:
        raise NotImplementedError

    def activity(self) -> Activity:
        """Adapters with requests in flight, where the engine says so (vLLM's /metrics); none known otherwise."""
        return Activity((), (), None)


class _DeadlineError(Exception):
    """The call's overall deadline passed while an answer was still arriving."""


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds or as an HTTP date; None when absent or unreadable."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())


def make_client(engine: Engine, **kwargs: Any) -> EngineClient:
    """The client class the engine kind's profile names (imported on first use, so base never imports its
    subclasses)."""
    module_name, _, class_name = engine.profile.client.partition(":")
    cls: type[EngineClient] = getattr(importlib.import_module(module_name), class_name)
    return cls(engine, **kwargs)
