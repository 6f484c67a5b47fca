"""Engines found on Kubernetes: list and watch `discovery.k8s.io/v1` EndpointSlices over the API, with httpx.

The protocol is small enough to speak directly (the `kubernetes` package would bring a generated client of every
API for two requests): a list returns the slices and a `resourceVersion`; a watch from it streams one JSON event
per line (ADDED, MODIFIED, DELETED, BOOKMARK — which only moves the resourceVersion on — or ERROR). A 410 GoneError,
as the watch's HTTP status or an ERROR event's code, means that version is no longer kept: list again. Every
other failure backs off (1 s, doubling to 30 s) and lists again, which is always correct.

Access is the pod's service account (token, ca.crt and namespace under /var/run/secrets/kubernetes.io/
serviceaccount, the API at KUBERNETES_SERVICE_HOST:PORT) or a kubeconfig file (a context's server, CA, token
or client certificate). TLS is verified unless a kubeconfig says `insecure-skip-tls-verify`. The token is read
from its file at every request (the kubelet rotates it) and never logged or shown.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from lorafleet.engines.base import one_line
from lorafleet.errors import InputError, OperationError
from lorafleet.inventory.discovery import slice_engines
from lorafleet.inventory.model import Engine, EngineGroup, Inventory, KubeAccess

log = logging.getLogger("lorafleet.kubernetes")

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
SLICES = "/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
WATCH_S = 290  # the server ends each watch after this; it is then resumed from the last resourceVersion
MAX_LISTED = 100_000  # slices one list may hold: a list past it is an API that does not end
MAX_PAGE_BYTES = 64 * 2**20  # one list page's body (500 slices are a few MB)
MAX_EVENT_BYTES = 4 * 2**20  # one watch event's line
LIST_DEADLINE_S = 60.0  # one list page, however slowly its bytes come
MAX_BACKOFF_S = 30.0


class KubeError(OperationError):
    """The API refused or failed a request (the message names the status, never the token)."""


class GoneError(Exception):
    """410: the resourceVersion asked for is no longer kept; list again."""


@dataclass(frozen=True)
class ApiAccess:
    """Where the API is and how to authenticate to it."""

    server: str
    namespace: str  # the default namespace: the service account's, or the kubeconfig context's
    verify: ssl.SSLContext | bool
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None

    def bearer(self) -> str | None:
        if self.token_file is not None:
            try:
                token = self.token_file.read_text().strip()
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not text"
                raise KubeError(f"cannot read the API token {self.token_file}: {reason}") from exc
            return _checked_token(token, f"the API token in {self.token_file}")
        return None if self.token is None else _checked_token(self.token, "the kubeconfig's token")


def _checked_token(token: str, what: str) -> str:
    """A bearer token as a header can carry it: printable ASCII, no whitespace inside. Anything else would fail
    in the HTTP library with the header, token and all, in its message: refused here, never echoed."""
    if token and not (token.isascii() and token.isprintable() and not any(ch.isspace() for ch in token)):
        raise KubeError(f"{what} holds whitespace, control or non-ASCII characters: not a bearer token")
    return token


def api_access(
    kube: KubeAccess, service_account: Path = SERVICE_ACCOUNT, env: Mapping[str, str] = os.environ
) -> ApiAccess:
    """The inventory's kubeconfig if it names one; else the pod's service account when in a cluster; else
    $KUBECONFIG or ~/.kube/config (an admin's `inventory show --discover`). InputError when none is usable."""
    if kube.kubeconfig:
        return from_kubeconfig(Path(kube.kubeconfig), kube.context)
    if env.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster(service_account, env)
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    for candidate in [*env.get("KUBECONFIG", "").split(os.pathsep), str(home / ".kube" / "config")]:
        if candidate and Path(candidate).is_file():
            return from_kubeconfig(Path(candidate), kube.context)
    raise InputError(
        "discovery: no Kubernetes API to ask: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no kubeconfig",
        hint="set discovery.kubeconfig in the inventory, or run inside the cluster with a service account",
    )


def in_cluster(root: Path = SERVICE_ACCOUNT, env: Mapping[str, str] = os.environ) -> ApiAccess:
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "443")
    token, ca = root / "token", root / "ca.crt"
    for needed in (token, ca):
        if not needed.is_file():
            raise InputError(
                f"discovery: {needed} is missing: the pod has no service account token",
                hint="set automountServiceAccountToken: true and serviceAccountName (deploy/kubernetes.yaml)",
            )
    namespace_file = root / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.is_file() else "default"
    address = f"[{host}]" if ":" in host else host
    context = _tls(cafile=str(ca))
    return ApiAccess(f"https://{address}:{port}", namespace, context, token_file=token)


def from_kubeconfig(path: Path, context_name: str | None = None) -> ApiAccess:
    """A kubeconfig's context (its current one unless named): server, CA, token or client certificate. Exec and
    auth-provider plugins are not run."""
    where = f"kubeconfig {path}"
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InputError(f"discovery: cannot read {where}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise InputError(f"discovery: {where} is not YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(config, dict):
        raise InputError(f"discovery: {where} is not a kubeconfig (no mapping at the top)")

    def named(section: str, name: Any) -> dict[str, Any]:
        for entry in config.get(section) or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                body = entry.get(section[:-1], {})
                return body if isinstance(body, dict) else {}
        raise InputError(f"discovery: {where} has no {section[:-1]} {name!r}")

    name = context_name or config.get("current-context")
    if not name:
        raise InputError(f"discovery: {where} has no current-context; set discovery.context")
    context = named("contexts", name)
    cluster = named("clusters", context.get("cluster"))
    user = named("users", context.get("user")) if context.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise InputError(f"discovery: {where}: cluster {context.get('cluster')!r} has no http(s) server")
    if "exec" in user or "auth-provider" in user:
        raise InputError(
            f"discovery: {where}: user {context.get('user')!r} needs a credential plugin, not supported",
            hint="use a token, a tokenFile or a client certificate (a service account's, for example)",
        )
    base = path.parent

    def file(value: Any) -> str:
        return str(base / value) if not Path(str(value)).is_absolute() else str(value)

    verify: ssl.SSLContext | bool = True
    if server.startswith("https://"):
        if cluster.get("insecure-skip-tls-verify") is True:
            log.warning("discovery: %s skips TLS verification of %s (insecure-skip-tls-verify)", where, server)
            verify = False
        else:
            try:
                verify = _tls(
                    cafile=file(cluster["certificate-authority"]) if cluster.get("certificate-authority") else None,
                    cadata=_decoded(cluster.get("certificate-authority-data")),
                    cert=_pem(user, "client-certificate", file),
                    key=_pem(user, "client-key", file),
                )
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise InputError(f"discovery: {where}: cannot use its certificates: {exc}") from exc
    token_file = Path(file(user["tokenFile"])) if user.get("tokenFile") else None
    token = user.get("token") if isinstance(user.get("token"), str) else None
    namespace = context.get("namespace") or "default"
    return ApiAccess(server.rstrip("/"), str(namespace), verify, token=token, token_file=token_file)


def _decoded(data: Any) -> str | None:
    return base64.b64decode(data).decode() if isinstance(data, str) and data else None


def _pem(user: dict[str, Any], key: str, file: Callable[[Any], str]) -> str | None:
    """A client certificate or key as PEM text, from its file or its inline `-data`."""
    if user.get(f"{key}-data"):
        return _decoded(user[f"{key}-data"])
    if user.get(key):
        return Path(file(user[key])).read_text()
    return None


def _tls(
    cafile: str | None = None, cadata: str | None = None, cert: str | None = None, key: str | None = None
) -> ssl.SSLContext:
    """A verifying context: the cluster's CA (the system's when none is given) and the client certificate."""
    context = ssl.create_default_context(cafile=cafile, cadata=cadata)
    if cert and key:
        with tempfile.TemporaryDirectory() as folder:  # ssl loads a chain from files only; private to this user
            cert_path, key_path = Path(folder, "cert.pem"), Path(folder, "key.pem")
            for where, text in ((cert_path, cert), (key_path, key)):
                where.touch(mode=0o600)
                where.write_text(text)
            context.load_cert_chain(str(cert_path), str(key_path))
    return context


class SliceApi:
    """The two requests discovery makes: list EndpointSlices, and watch them from a resourceVersion."""

    def __init__(
        self,
        access: ApiAccess,
        timeout_s: float = 10.0,
        watch_s: int = WATCH_S,
        page: int = 500,
        list_deadline_s: float = LIST_DEADLINE_S,
    ) -> None:
        self.access = access
        self.list_deadline_s = list_deadline_s
        self.watch_s = watch_s
        self.page = page
        self.client = httpx.Client(
            base_url=access.server,
            verify=access.verify,
            trust_env=False,  # no proxy variables: the API is reached directly
            timeout=httpx.Timeout(timeout_s),
            headers={"Accept": "application/json", "User-Agent": "lorafleet"},
        )

    def _headers(self) -> dict[str, str]:
        token = self.access.bearer()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def namespace_of(self, group: EngineGroup) -> str:
        """Where a group's slices are: its own namespace, else the context's (or the service account's)."""
        return group.namespace or self.access.namespace

    def list(self, namespace: str, selector: str) -> tuple[list[dict[str, Any]], str]:
        """Every matching slice (page by page) and the list's resourceVersion, to watch from."""
        items: list[dict[str, Any]] = []
        params: dict[str, str] = {"labelSelector": selector, "limit": str(self.page)}
        version = ""
        tokens: set[str] = set()
        while True:
            body = self._checked(self._page(SLICES.format(namespace=namespace), params), namespace)
            metadata = body.get("metadata")
            metadata = metadata if isinstance(metadata, dict) else {}
            version = version or str(metadata.get("resourceVersion", ""))
            listed = body.get("items")
            items += [i for i in listed if isinstance(i, dict)] if isinstance(listed, list) else []
            token = metadata.get("continue")
            if not token:
                return items, version
            token = str(token)
            if token in tokens or len(items) > MAX_LISTED:
                raise KubeError("the API's list does not end (a page token repeated, or past 100,000 slices)")
            tokens.add(token)
            params["continue"] = token

    def _page(self, path: str, params: dict[str, str]) -> httpx.Response:
        """One list request, its body read within a size and a deadline: an API that never ends a body, or drips
        it, is a failure (listed again later), not a thread stuck or memory filled for good."""
        deadline = time.monotonic() + self.list_deadline_s
        with self.client.stream("GET", path, params=params, headers=self._headers()) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > MAX_PAGE_BYTES:
                    raise KubeError(f"the API's list page is over {MAX_PAGE_BYTES // 2**20} MiB")
                if time.monotonic() > deadline:
                    raise KubeError(f"the API's list page took over {self.list_deadline_s:.0f} s")
                chunks.append(chunk)
            # The body as read (decoded already): only its type travels on, not its transfer or content encoding.
            kept = {k: v for k, v in response.headers.items() if k.lower() == "content-type"}
            return httpx.Response(response.status_code, headers=kept, content=b"".join(chunks))

    def watch(self, namespace: str, selector: str, version: str) -> Iterator[dict[str, Any]]:
        """The events after `version`, as they come; ends when the server ends the watch. Raises GoneError on 410."""
        params = {
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "labelSelector": selector,
            "timeoutSeconds": str(self.watch_s),
        }
        timeout = httpx.Timeout(10.0, read=self.watch_s + 30.0)  # a bookmark or an event comes well within it
        path = SLICES.format(namespace=namespace)
        with self.client.stream("GET", path, params=params, headers=self._headers(), timeout=timeout) as response:
            if response.status_code != 200:
                response.read()
                self._checked(response, namespace)
            for line in _lines(response.iter_bytes(), MAX_EVENT_BYTES):
                if not line.strip():
                    continue
                event = json.loads(line)
                if not isinstance(event, dict):
                    raise KubeError("the watch sent something that is not an event")
                if event.get("type") == "ERROR":
                    status = event.get("object")
                    status = status if isinstance(status, dict) else {}
                    if status.get("code") == 410:
                        raise GoneError()
                    raise KubeError(
                        f"watch error {status.get('code')}: {one_line(str(status.get('message', '')), 200)}"
                    )
                yield event

    def _checked(self, response: httpx.Response, namespace: str) -> dict[str, Any]:
        if response.status_code == 410:
            raise GoneError()
        if response.status_code in (401, 403):
            raise KubeError(
                f"the API answered {response.status_code} to listing endpointslices in {namespace!r}: grant "
                "list and watch on endpointslices (deploy/kubernetes.yaml's Role)"
            )
        if response.status_code != 200:
            try:
                body = response.json()
                message = str(body.get("message", "")) if isinstance(body, dict) else ""
            except ValueError:
                message = response.text
            raise KubeError(f"the API answered {response.status_code}: {one_line(message, 200)}")
        body = response.json()
        if not isinstance(body, dict):
            raise KubeError("the API's list is not an object")
        return body

    def close(self) -> None:
        self.client.close()


def _lines(chunks: Iterator[bytes], limit: int) -> Iterator[bytes]:
    """The lines of a streamed body, each at most `limit` bytes: a line that does not end is a failure."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from lines
        if len(pending) > limit:
            raise KubeError(f"the watch sent a line over {limit // 2**20} MiB")
    if pending:
        yield pending


def _said(exc: Exception, access: ApiAccess) -> str:
    """A failure in one line, never the token (an HTTP library's message may quote the request's headers)."""
    text = exc.message if isinstance(exc, KubeError) else f"{type(exc).__name__}: {exc}"
    for secret in (access.token, _read_quietly(access.token_file)):
        if secret:
            text = text.replace(secret, "***")
    return one_line(text, 300)


def _read_quietly(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _name(item: dict[str, Any]) -> str:
    metadata = item.get("metadata")
    return str(metadata.get("name")) if isinstance(metadata, dict) else "None"


class GroupWatch:
    """One group's slices, kept current by a thread: list, watch, and list again after a 410 or a failure."""

    def __init__(
        self, group: EngineGroup, api: SliceApi, publish: Callable[[GroupWatch, tuple[Engine, ...]], None]
    ) -> None:
        self.group = group
        self.api = api
        self.namespace = api.namespace_of(group)
        self.publish = publish
        self.stop = threading.Event()
        self.listed = threading.Event()  # set after the first list, ok or not
        self.lists = 0
        self.events_seen = 0
        self.slices: dict[str, dict[str, Any]] = {}
        self.thread = threading.Thread(target=self._run, name=f"discovery-{group.name}", daemon=True)

    def _publish(self) -> None:
        self.publish(self, tuple(slice_engines(self.group, self.slices.values())))

    def _run(self) -> None:
        backoff = 1.0
        where = f"discovery {self.group.name} ({self.namespace}, {self.group.selector})"
        while not self.stop.is_set():
            seen = self.events_seen
            try:
                items, version = self.api.list(self.namespace, self.group.selector)
                self.lists += 1
                self.slices = {_name(i): i for i in items}
                self._publish()
                self.listed.set()
                while not self.stop.is_set():
                    for event in self.api.watch(self.namespace, self.group.selector, version):
                        if self.stop.is_set():
                            return
                        version = self._apply(event) or version
            except GoneError:
                if self.stop.is_set():
                    return
                log.info("%s: the resourceVersion expired (410); listing again", where)
                if self.events_seen == seen and self.stop.wait(backoff):  # 410 right after a list: do not spin
                    return
                backoff = min(backoff * 2, MAX_BACKOFF_S) if self.events_seen == seen else 1.0
            except Exception as exc:  # whatever the API sent, the watch lists again: discovery never stops
                if self.stop.is_set():  # closed under it
                    return
                if self.events_seen != seen:  # the watch was working: a fresh failure, not a failing API
                    backoff = 1.0
                log.warning("%s: %s; listing again in %.0f s", where, _said(exc, self.api.access), backoff)
                self.listed.set()
                if self.stop.wait(backoff):
                    return
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _apply(self, event: dict[str, Any]) -> str | None:
        """One event; returns the resourceVersion it carries (a bookmark carries nothing else)."""
        item = event.get("object")
        if not isinstance(item, dict):  # not an event that worked: the backoff keeps growing
            raise KubeError(f"the watch sent a {one_line(str(event.get('type')), 20)} event without an object")
        self.events_seen += 1
        metadata = item.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        version = metadata.get("resourceVersion")
        kind = event.get("type")
        name = str(metadata.get("name"))
        if kind in ("ADDED", "MODIFIED"):
            self.slices[name] = item
        elif kind == "DELETED":
            self.slices.pop(name, None)
        else:
            return str(version) if version else None
        self._publish()
        return str(version) if version else None


class Discovery:
    """The engines found on Kubernetes, per group, kept current by one GroupWatch each. `version` grows at each
    change, so a reader (the daemon's loop) knows when to take them up."""

    def __init__(
        self,
        access: Callable[[KubeAccess], ApiAccess] = api_access,
        first_list_s: float = 10.0,
        api: Callable[[ApiAccess], SliceApi] = SliceApi,
    ) -> None:
        self.access = access
        self.make_api = api
        self.first_list_s = first_list_s
        self.lock = threading.Lock()
        self.version = 0
        self._found: dict[str, tuple[Engine, ...]] = {}
        self._watches: dict[str, GroupWatch] = {}
        self._kube: KubeAccess | None = None
        self._api: SliceApi | None = None

    def configure(self, inventory: Inventory) -> None:
        """Watch the inventory's groups: new or changed ones start (waiting up to `first_list_s` for their first
        list), removed ones stop, unchanged ones go on. InputError when the API's access cannot be set up."""
        groups = {g.name: g for g in inventory.discovery}
        if groups and (self._api is None or inventory.kube != self._kube):
            api = self.make_api(self.access(inventory.kube))  # raises before anything changes
            self._stop_all()
            self._api, self._kube = api, inventory.kube
        for name in [n for n, w in self._watches.items() if groups.get(n) != w.group]:
            with self.lock:
                self._watches.pop(name).stop.set()
                if self._found.pop(name, None) is not None:
                    self.version += 1
        if not groups:
            self._stop_all()
            return
        assert self._api is not None
        started = []
        for name, group in groups.items():
            if name not in self._watches:
                watch = GroupWatch(group, self._api, self._publish)
                with self.lock:
                    self._watches[name] = watch
                watch.thread.start()
                started.append(watch)
        for watch in started:
            watch.listed.wait(self.first_list_s)

    def found(self) -> dict[str, tuple[Engine, ...]]:
        with self.lock:
            return dict(self._found)

    def _publish(self, watch: GroupWatch, engines: tuple[Engine, ...]) -> None:
        with self.lock:
            group = watch.group.name
            if self._watches.get(group) is watch and self._found.get(group) != engines:  # a stopped watch is stale
                self._found[group] = engines
                self.version += 1

    def _stop_all(self) -> None:
        with self.lock:
            for watch in self._watches.values():
                watch.stop.set()
            self._watches.clear()
            if self._found:
                self._found.clear()
                self.version += 1
        if self._api is not None:
            self._api.close()
            self._api = None

    def close(self) -> None:
        self._stop_all()


def discover_once(
    inventory: Inventory, access: Callable[[KubeAccess], ApiAccess] = api_access
) -> dict[str, tuple[Engine, ...]]:
    """One list per group, no watch: what `inventory show --discover` shows. KubeError when the API fails."""
    if not inventory.discovery:
        return {}
    api = SliceApi(access(inventory.kube))
    try:
        out = {}
        for group in inventory.discovery:
            items, _ = api.list(api.namespace_of(group), group.selector)
            out[group.name] = tuple(slice_engines(group, items))
        return out
    except GoneError as exc:
        raise KubeError("the API answered 410 GoneError to a list; try again") from exc
    except httpx.HTTPError as exc:
        raise KubeError(f"cannot reach the Kubernetes API at {api.access.server}: {_said(exc, api.access)}") from exc
    except ValueError as exc:
        raise KubeError(f"the Kubernetes API at {api.access.server} sent no JSON: {_said(exc, api.access)}") from exc
    finally:
        api.close()


__all__ = ["ApiAccess", "Discovery", "GroupWatch", "KubeError", "SliceApi", "api_access", "discover_once"]
