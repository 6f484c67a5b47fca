"""A loopback Kubernetes API server for EndpointSlices: the thinnest boundary that speaks the real protocol.

It serves `GET /apis/discovery.k8s.io/v1/namespaces/NS/endpointslices` as the API server does: a list (label
selector, `limit`/`continue` pages) with `metadata.resourceVersion`; a watch (`?watch=1&resourceVersion=RV`) that
streams one JSON event per line — ADDED, MODIFIED, DELETED (also when an object stops matching the selector),
BOOKMARK when asked for, and ERROR 410 for a version it no longer keeps (`expire()`), or HTTP 410 with
`expire(http=True)`. Bearer token checked; TLS with a generated certificate when asked. 127.0.0.1 on a free
port only.
"""

from __future__ import annotations

import copy
import datetime
import ipaddress
import json
import re
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

PATH_RE = re.compile(r"^/apis/discovery\.k8s\.io/v1/namespaces/([a-z0-9-]+)/endpointslices$")
TOKEN = "fake-service-account-token-0123456789"


def endpoint_slice(
    name: str,
    pods: list[tuple[str, str] | tuple[str, str, dict[str, bool]]],
    port: int,
    labels: dict[str, str] | None = None,
    port_name: str = "http",
) -> dict[str, Any]:
    """An EndpointSlice of `pods` as (pod, IP[, conditions]); ready unless the conditions say otherwise."""
    endpoints = []
    for pod in pods:
        conditions = pod[2] if len(pod) > 2 else {"ready": True, "serving": True, "terminating": False}  # type: ignore[misc]
        endpoints.append(
            {"addresses": [pod[1]], "conditions": conditions, "targetRef": {"kind": "Pod", "name": pod[0]}}
        )
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "labels": labels or {"kubernetes.io/service-name": "vllm"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
    }


def matches(selector: str, labels: dict[str, str]) -> bool:
    """Kubernetes label selector semantics: k=v, k==v, k!=v, k in (..), k notin (..), k, !k — all must hold."""
    for part in re.findall(r"(?:[^,(]|\([^)]*\))+", selector):
        part = part.strip()
        if not part:
            continue
        if found := re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", part):
            key, op, values = found.group(1), found.group(2), {v.strip() for v in found.group(3).split(",")}
            if (op == "in") != (key in labels and labels[key] in values):
                return False
        elif "!=" in part:
            key, value = (s.strip() for s in part.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in part:
            key, value = (s.strip() for s in part.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif part.startswith("!"):
            if part[1:] in labels:
                return False
        elif part not in labels:
            return False
    return True


class FakeKube:
    def __init__(self, token: str = TOKEN, tls_dir: Path | None = None, bookmark_s: float = 0.2) -> None:
        self.token = token
        self.bookmark_s = bookmark_s
        self.changed = threading.Condition()
        self.version = 1000
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any] | None, dict[str, Any] | None]] = []  # (rv, ns, old, new)
        self.oldest = 0  # a watch from before this version is answered 410
        self.epoch = 0  # bumped by expire(): open watches end with an ERROR 410
        self.http_gone = False
        self.requests: list[str] = []  # "list NS SELECTOR" / "watch NS RV" / "denied"
        self.forbidden: set[str] = set()  # namespaces this token has no Role in: 403, as RBAC answers
        self.closing = False
        self.server = _Server(self)
        self.ca: Path | None = None
        if tls_dir is not None:
            cert, key = self_signed(tls_dir)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(cert), str(key))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.ca = cert
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.ca else 'http'}://127.0.0.1:{self.port}"

    def kubeconfig(self, path: Path, token: str | None = None, namespace: str = "inference") -> Path:
        cluster: dict[str, Any] = {"server": self.url}
        if self.ca is not None:
            cluster["certificate-authority"] = str(self.ca)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": token or self.token}}],
            "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
        }
        path.write_text(json.dumps(config))
        return path

    # --- changes ----------------------------------------------------------------------------------------------
    def put(self, item: dict[str, Any], namespace: str = "inference") -> int:
        """Create or replace a slice; returns its new resourceVersion."""
        with self.changed:
            self.version += 1
            new = copy.deepcopy(item)
            new["metadata"] = {**new["metadata"], "namespace": namespace, "resourceVersion": str(self.version)}
            key = (namespace, new["metadata"]["name"])
            self.history.append((self.version, namespace, self.objects.get(key), new))
            self.objects[key] = new
            self.changed.notify_all()
            return self.version

    def delete(self, name: str, namespace: str = "inference") -> None:
        with self.changed:
            self.version += 1
            old = self.objects.pop((namespace, name))
            self.history.append((self.version, namespace, old, None))
            self.changed.notify_all()

    def expire(self, http: bool = False) -> None:
        """Forget every version up to now, as a compaction does: open watches end with ERROR 410, and a watch
        from an older version is refused (an ERROR event, or HTTP 410 with `http`)."""
        with self.changed:
            self.oldest = self.version  # the current version stays watchable: a list then a watch recovers
            self.epoch += 1
            self.http_gone = http
            self.changed.notify_all()

    def count(self, what: str) -> int:
        return sum(1 for r in self.requests if r.startswith(what))

    def stop(self) -> None:
        with self.changed:
            self.closing = True
            self.changed.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # --- the API ------------------------------------------------------------------------------------------------
    def list(self, namespace: str, selector: str, limit: int, start: int) -> dict[str, Any]:
        with self.changed:
            items = sorted(
                (o for (ns, _), o in self.objects.items() if ns == namespace and matches(selector, _labels(o))),
                key=lambda o: o["metadata"]["name"],
            )
            page = items[start : start + limit] if limit else items[start:]
            more = bool(limit) and start + limit < len(items)
            metadata: dict[str, Any] = {"resourceVersion": str(self.version)}
            if more:
                metadata["continue"] = str(start + limit)
            return {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSliceList",
                "metadata": metadata,
                "items": page,
            }

    def events(
        self, namespace: str, selector: str, since: int, bookmarks: bool, timeout_s: float, epoch: int
    ) -> Iterator[dict[str, Any]]:
        """The watch's events after `since`, then as they happen, until `timeout_s` or an expire() after
        `epoch` (read when the watch was recorded, so a watch counted before an expiry always sees it)."""
        deadline = time.monotonic() + timeout_s
        with self.changed:
            if since < self.oldest:
                yield _gone()
                return
        sent = since
        while True:
            with self.changed:
                if self.closing:
                    return
                if self.epoch != epoch:
                    yield _gone()
                    return
                pending = [h for h in self.history if h[0] > sent and h[1] == namespace]
                if not pending:
                    self.changed.wait(min(self.bookmark_s, max(0.0, deadline - time.monotonic())))
                    pending = [h for h in self.history if h[0] > sent and h[1] == namespace]
                latest = self.version
            if not pending and time.monotonic() >= deadline:
                return
            for rv, _, old, new in pending:
                sent = rv
                was = old is not None and matches(selector, _labels(old))
                now = new is not None and matches(selector, _labels(new))
                if now:
                    yield {"type": "MODIFIED" if was else "ADDED", "object": new}
                elif was:
                    gone = copy.deepcopy(new or old)
                    assert gone is not None
                    gone["metadata"]["resourceVersion"] = str(rv)
                    yield {"type": "DELETED", "object": gone}
            if not pending and bookmarks:
                sent = max(sent, latest)
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": "EndpointSlice",
                        "apiVersion": "discovery.k8s.io/v1",
                        "metadata": {"resourceVersion": str(sent)},
                    },
                }


def _labels(item: dict[str, Any]) -> dict[str, str]:
    return dict(item.get("metadata", {}).get("labels") or {})


def _gone() -> dict[str, Any]:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}
    return {"type": "ERROR", "object": {**status, "message": "too old resource version"}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        kube = self.server.kube
        parts = urlsplit(self.path)
        found = PATH_RE.match(parts.path)
        if found is None:
            self._json(404, {"kind": "Status", "code": 404, "message": "not found"})
            return
        if self.headers.get("Authorization") != f"Bearer {kube.token}":
            kube.requests.append("denied")
            self._json(401, {"kind": "Status", "code": 401, "message": "Unauthorized"})
            return
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        namespace, selector = found.group(1), query.get("labelSelector", "")
        if namespace in kube.forbidden:
            kube.requests.append("forbidden")
            message = (
                'endpointslices.discovery.k8s.io is forbidden: User "system:serviceaccount:x:lorafleet" cannot list '
                f'resource "endpointslices" in API group "discovery.k8s.io" in the namespace "{namespace}"'
            )
            self._json(403, {"kind": "Status", "code": 403, "reason": "Forbidden", "message": message})
            return
        if query.get("watch") not in ("1", "true"):
            kube.requests.append(f"list {namespace} {selector}")
            self._json(200, kube.list(namespace, selector, int(query.get("limit", 0)), int(query.get("continue", 0))))
            return
        with kube.changed:  # recorded and its epoch read at once: no expiry can fall between the two
            since = int(query.get("resourceVersion") or kube.version)
            kube.requests.append(f"watch {namespace} {since}")
            epoch = kube.epoch
        if kube.http_gone and since < kube.oldest:
            self._json(410, {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "close")  # the body ends when the watch does
        self.end_headers()
        self.close_connection = True
        bookmarks = query.get("allowWatchBookmarks") == "true"
        try:
            for event in kube.events(
                namespace, selector, since, bookmarks, float(query.get("timeoutSeconds", 300)), epoch
            ):
                self.wfile.write(json.dumps(event).encode() + b"\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        super().__init__(("127.0.0.1", 0), _Handler)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kube")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "server.crt", folder / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
