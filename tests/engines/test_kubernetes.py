"""Discovery against a loopback server speaking the Kubernetes list/watch protocol for EndpointSlices, through
the real client (engines/kubernetes.py): pods added, removed and relabelled show within one watch event, a 410
(as an ERROR event or as the HTTP status) recovers by listing again, bookmarks move the watch on, the selector
filters, and no engine is ever lost or doubled."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lorafleet.engines.kubernetes import (
    ApiAccess,
    Discovery,
    GroupWatch,
    KubeError,
    SliceApi,
    api_access,
    discover_once,
    in_cluster,
)
from lorafleet.errors import InputError
from lorafleet.inventory import load_inventory
from lorafleet.inventory.model import Inventory, KubeAccess, with_discovered
from tests.kube_server import TOKEN, FakeKube, endpoint_slice

INVENTORY = """
base_models:
  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}
discovery:
  kubeconfig: kubeconfig
  groups:
    - {name: pool, namespace: inference, selector: {kubernetes.io/service-name: vllm}, port: http, kind: vllm,
       base_model: m, max_loras: 2, max_cpu_loras: 4}
    - {name: canary, namespace: inference, selector: "kubernetes.io/service-name=vllm-canary", port: 9000,
       kind: sglang, base_model: m}
adapters:
  - {id: a0, base_model: m, path: /adapters/a0, rank: 8}
"""


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    server = FakeKube()
    yield server
    server.stop()


def inventory(tmp_path: Path, kube: FakeKube, text: str = INVENTORY) -> Inventory:
    kube.kubeconfig(tmp_path / "kubeconfig")
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return load_inventory(path)


def engines(discovery: Discovery, inv: Inventory) -> dict[str, str]:
    """Engine key → URL, as the daemon would use them; fails on a doubled key."""
    keys = [(e.key, e.url) for e in with_discovered(inv, discovery.found()).engines]
    assert len({k for k, _ in keys}) == len(keys), keys
    return dict(keys)


def after_one_event(discovery: Discovery, change: Callable[[], object], timeout: float = 5.0) -> None:
    """Make one change and wait for discovery to take it up (its version moves)."""
    seen = discovery.version
    change()
    deadline = time.monotonic() + timeout
    while discovery.version == seen:
        assert time.monotonic() < deadline, "the change was not taken up"
        time.sleep(0.01)


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_pods_coming_going_and_relabelled_are_the_engines_after_each_event(tmp_path: Path, kube: FakeKube) -> None:
    kube.put(endpoint_slice("vllm-a", [("vllm-0", "10.0.0.1"), ("vllm-1", "10.0.0.2")], 8000))
    kube.put(endpoint_slice("other", [("web-0", "10.0.9.9")], 80, labels={"kubernetes.io/service-name": "web"}))
    inv = inventory(tmp_path, kube)
    discovery = Discovery()
    discovery.configure(inv)
    try:
        assert engines(discovery, inv) == {"pool/vllm-0": "http://10.0.0.1:8000", "pool/vllm-1": "http://10.0.0.2:8000"}
        # a pod added to the slice (a scale-up)
        pods = [("vllm-0", "10.0.0.1"), ("vllm-1", "10.0.0.2"), ("vllm-2", "10.0.0.3")]
        after_one_event(discovery, lambda: kube.put(endpoint_slice("vllm-a", pods, 8000)))
        assert set(engines(discovery, inv)) == {"pool/vllm-0", "pool/vllm-1", "pool/vllm-2"}
        # a pod not ready (starting, or failing its probe) and one terminating serve nothing
        pods = [("vllm-0", "10.0.0.1", {"ready": False}), ("vllm-1", "10.0.0.2", {"terminating": True, "ready": False})]
        after_one_event(discovery, lambda: kube.put(endpoint_slice("vllm-a", [*pods, ("vllm-2", "10.0.0.3")], 8000)))
        assert set(engines(discovery, inv)) == {"pool/vllm-2"}
        # the pod relabelled into the canary Service: retired from one group, added to the other, never both
        canary = {"kubernetes.io/service-name": "vllm-canary"}
        after_one_event(discovery, lambda: kube.put(endpoint_slice("vllm-a", [], 8000)))
        after_one_event(discovery, lambda: kube.put(endpoint_slice("c", [("vllm-2", "10.0.0.3")], 9000, canary)))
        assert engines(discovery, inv) == {"canary/vllm-2": "http://10.0.0.3:9000"}
        # a slice whose labels stop matching the selector is a DELETED for the watch
        moved = endpoint_slice("c", [("vllm-2", "10.0.0.3")], 9000, {"kubernetes.io/service-name": "retired"})
        after_one_event(discovery, lambda: kube.put(moved))
        assert engines(discovery, inv) == {}
        after_one_event(discovery, lambda: kube.put(endpoint_slice("b", [("vllm-7", "10.0.0.7")], 8000)))
        after_one_event(discovery, lambda: kube.delete("b"))
        assert engines(discovery, inv) == {}
        assert kube.count("list") == 2  # one per group: events alone kept them current
        assert "web-0" not in str(engines(discovery, inv))
    finally:
        discovery.close()


def test_a_reload_that_names_another_cluster_watches_that_one(tmp_path: Path, kube: FakeKube) -> None:
    """The kubeconfig changed (another cluster, another context): the groups' watches move to its API, and a
    group without a namespace takes the context's."""
    kube.put(endpoint_slice("a", [("vllm-0", "10.0.0.1")], 8000))
    other = FakeKube()
    try:
        other.put(endpoint_slice("a", [("vllm-9", "10.0.0.9")], 8000), namespace="east")
        inv = inventory(tmp_path, kube)
        discovery = Discovery()
        discovery.configure(inv)
        try:
            assert set(engines(discovery, inv)) == {"pool/vllm-0"}
            other.kubeconfig(tmp_path / "other-kubeconfig", namespace="east")
            text = INVENTORY.replace("kubeconfig: kubeconfig", "kubeconfig: other-kubeconfig")
            (tmp_path / "inv.yaml").write_text(text.replace("namespace: inference, ", "", 1))
            moved = load_inventory(tmp_path / "inv.yaml")
            after_one_event(discovery, lambda: discovery.configure(moved))
            assert set(engines(discovery, moved)) == {"pool/vllm-9"} and other.count("list") == 2
        finally:
            discovery.close()
        assert [e.name for e in discover_once(moved)["pool"]] == ["vllm-9"]  # the one-off list alike
    finally:
        other.stop()


@pytest.mark.parametrize("http", [False, True], ids=["error-event", "http-410"])
def test_a_410_lists_again_and_loses_or_doubles_nothing(
    tmp_path: Path, kube: FakeKube, http: bool, caplog: pytest.LogCaptureFixture
) -> None:
    kube.put(endpoint_slice("vllm-a", [("vllm-0", "10.0.0.1")], 8000))
    inv = inventory(tmp_path, kube)
    discovery = Discovery()
    discovery.configure(inv)
    try:
        wait_until(lambda: kube.count("watch") >= 2)  # both groups watching: the expiry ends their watches
        lists = kube.count("list")
        kube.expire(http=http)  # the open watches end with ERROR 410; resuming from their version is refused
        kube.put(endpoint_slice("vllm-b", [("vllm-1", "10.0.0.2"), ("vllm-0", "10.0.0.1")], 8000))  # vllm-0 twice
        wait_until(lambda: "pool/vllm-1" in engines(discovery, inv))
        # The new slice may reach a watch before the expiry ends it: the re-list may come just after.
        wait_until(lambda: kube.count("list") > lists)
        assert not [r for r in caplog.records if r.levelname == "WARNING"]  # a 410 is no failure: no back-off
        assert engines(discovery, inv) == {"pool/vllm-0": "http://10.0.0.1:8000", "pool/vllm-1": "http://10.0.0.2:8000"}
        after_one_event(discovery, lambda: kube.delete("vllm-b"))  # and the new watch goes on
        assert set(engines(discovery, inv)) == {"pool/vllm-0"}  # still in vllm-a
    finally:
        discovery.close()


def test_bookmarks_carry_the_watch_past_other_namespaces_changes(tmp_path: Path, kube: FakeKube) -> None:
    kube.put(endpoint_slice("vllm-a", [("vllm-0", "10.0.0.1")], 8000))
    inv = inventory(tmp_path, kube)
    discovery = Discovery(api=lambda access: SliceApi(access, watch_s=1))  # the server ends each watch after 1 s
    discovery.configure(inv)
    try:
        listed_at = kube.version
        for i in range(5):
            kube.put(endpoint_slice(f"x{i}", [], 1), namespace="elsewhere")
        newest = kube.version

        def resumed_past() -> bool:
            return any(int(r.split()[2]) >= newest for r in kube.requests if r.startswith("watch inference"))

        wait_until(resumed_past, timeout=6)
        assert newest > listed_at and kube.count("list") == 2  # resumed from the bookmark, never re-listed
    finally:
        discovery.close()


def test_lists_are_read_page_by_page(tmp_path: Path, kube: FakeKube) -> None:
    for i in range(5):
        kube.put(endpoint_slice(f"s{i}", [(f"vllm-{i}", f"10.0.0.{i + 1}")], 8000))
    inv = inventory(tmp_path, kube)
    access = api_access(inv.kube)
    items, version = SliceApi(access, page=2).list("inference", "kubernetes.io/service-name=vllm")
    assert len(items) == 5 and version == str(kube.version)


def test_a_refused_token_is_an_error_that_never_shows_it(tmp_path: Path, kube: FakeKube) -> None:
    inv = inventory(tmp_path, kube)
    kube.kubeconfig(tmp_path / "kubeconfig", token="wrong-token-abcdefghijklmnop")
    inv = load_inventory(tmp_path / "inv.yaml")
    with pytest.raises(KubeError) as raised:
        discover_once(inv)
    assert "401" in raised.value.message and "wrong-token" not in raised.value.message
    assert "wrong-token" not in repr(api_access(inv.kube))


def test_a_namespace_without_the_role_is_an_error_that_says_what_to_grant(tmp_path: Path, kube: FakeKube) -> None:
    inv = inventory(tmp_path, kube)
    kube.forbidden.add("inference")
    with pytest.raises(KubeError) as raised:
        discover_once(inv)
    assert raised.value.message.startswith("the API answered 403 to listing endpointslices in 'inference': grant ")


def test_proxy_variables_are_not_followed_to_the_api(tmp_path: Path, kube: FakeKube, monkeypatch) -> None:
    """As for the engines: a proxy set for other traffic must not carry the API's token, nor stand in its way."""
    from tests.sshd_server import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, dead)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    kube.put(endpoint_slice("ok", [("vllm-0", "10.0.0.1")], 8000))
    assert [e.name for e in discover_once(inventory(tmp_path, kube))["pool"]] == ["vllm-0"]


def test_in_cluster_access_verifies_tls_with_the_service_accounts_ca(tmp_path: Path) -> None:
    kube = FakeKube(tls_dir=tmp_path / "tls")
    try:
        kube.put(endpoint_slice("vllm-a", [("vllm-0", "10.0.0.1")], 8000), namespace="serving")
        account = tmp_path / "serviceaccount"
        account.mkdir()
        (account / "token").write_text(TOKEN + "\n")
        assert kube.ca is not None
        (account / "ca.crt").write_bytes(kube.ca.read_bytes())
        (account / "namespace").write_text("serving")
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(kube.port)}
        access = in_cluster(account, env)
        assert access.namespace == "serving" and TOKEN not in repr(access)
        items, _ = SliceApi(access).list("serving", "kubernetes.io/service-name=vllm")
        assert [i["metadata"]["name"] for i in items] == ["vllm-a"]
        # a kubeconfig naming no CA for this server: the system's CAs do not know it, and nothing is sent
        config = tmp_path / "kubeconfig"
        kube.kubeconfig(config)
        config.write_text(config.read_text().replace(f', "certificate-authority": "{kube.ca}"', ""))
        (tmp_path / "inv.yaml").write_text(INVENTORY)
        sent = len(kube.requests)
        with pytest.raises(KubeError, match="CERTIFICATE_VERIFY_FAILED"):
            discover_once(load_inventory(tmp_path / "inv.yaml"))
        assert len(kube.requests) == sent
    finally:
        kube.stop()


def test_no_cluster_and_no_kubeconfig_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no Kubernetes API"):
        api_access(KubeAccess(), tmp_path / "none", {"HOME": str(tmp_path), "KUBECONFIG": ""})
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1"}
    with pytest.raises(InputError, match="service account"):
        api_access(KubeAccess(), tmp_path / "none", env)


def test_endpoints_the_api_should_never_send_are_no_engines_and_the_rest_are_served(
    tmp_path: Path, kube: FakeKube
) -> None:
    """What the API sends is data: a port outside 1-65535, an address that is no IP address (a URL, an
    object) or none, a pod name that is no Kubernetes name (a forged log line) or a part of the wrong shape is skipped —
    the daemon went down on such a slice before — and the well-formed pods of the same group are engines."""
    bad_port = endpoint_slice("p-99999", [("vllm-9", "10.0.0.9")], 99999)
    past_ports = endpoint_slice("p-65536", [("vllm-3", "10.0.0.3")], 65536)
    last_port = endpoint_slice("p-65535", [("vllm-2", "10.0.0.2")], 65535)
    first_port = endpoint_slice("p-1", [("vllm-11", "10.0.0.11")], 1)
    no_port = endpoint_slice("p-0", [("vllm-12", "10.0.0.12")], 0)
    bad_parts = endpoint_slice("parts", [("vllm-5", "10.0.0.5")], 8000)
    bad_parts["endpoints"] = [
        {"addresses": ["10.0.0.6:80/#"], "targetRef": {"kind": "Pod", "name": "vllm-6"}},
        {"addresses": [{"a": 1}], "targetRef": {"kind": "Pod", "name": "vllm-7"}},
        {"addresses": ["10.0.0.8"], "targetRef": {"kind": "Pod", "name": "p1\n2026-01-01 ERROR forged"}},
        {"addresses": ["10.0.0.4"], "conditions": [1], "targetRef": "vllm-4"},
        "not an endpoint",
        {"addresses": [], "targetRef": {"kind": "Pod", "name": "vllm-10"}},
        {"addresses": ["10.0.0.5"], "conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": "vllm-5"}},
    ]
    for bad in (bad_port, past_ports, last_port, first_port, no_port, bad_parts):
        kube.put(bad)
    kube.put(endpoint_slice("ok", [("vllm-0", "10.0.0.1"), ("vllm-1", "fd00::1")], 8000))
    inv = inventory(tmp_path, kube)
    found = discover_once(inv)
    assert [(e.name, e.url) for e in found["pool"]] == [
        ("vllm-0", "http://10.0.0.1:8000"),
        ("vllm-1", "http://[fd00::1]:8000"),
        ("vllm-11", "http://10.0.0.11:1"),
        ("vllm-2", "http://10.0.0.2:65535"),
        ("vllm-5", "http://10.0.0.5:8000"),
    ]
    discovery = Discovery()
    discovery.configure(inv)
    try:
        assert set(engines(discovery, inv)) == {
            "pool/vllm-0",
            "pool/vllm-1",
            "pool/vllm-11",
            "pool/vllm-2",
            "pool/vllm-5",
        }
    finally:
        discovery.close()


@pytest.mark.parametrize("token", ["secret-token-0123456789\nmore", "secret-token-0123456789\x00", "sécret-token"])
def test_a_token_that_no_header_can_carry_is_refused_without_showing_it(
    tmp_path: Path, kube: FakeKube, token: str
) -> None:
    """The HTTP library quotes the header, token and all, in its error: such a token is refused first."""
    inventory(tmp_path, kube)
    kube.kubeconfig(tmp_path / "kubeconfig", token=token)
    inv = load_inventory(tmp_path / "inv.yaml")
    with pytest.raises(KubeError) as raised:
        discover_once(inv)
    assert "not a bearer token" in raised.value.message and "secret" not in raised.value.message.replace("é", "e")
    assert kube.count("list") == 0  # refused before any request


def test_a_list_page_past_its_size_is_an_error_not_memory_filled(
    tmp_path: Path, kube: FakeKube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API that never ends a body (or repeats its page token) is a failure discovery recovers from by listing
    again later, not a thread filling memory for good; a watch line that never ends alike."""
    import lorafleet.engines.kubernetes as k8s

    kube.put(endpoint_slice("a", [("vllm-0", "10.0.0.1")], 8000))
    inv = inventory(tmp_path, kube)
    monkeypatch.setattr(k8s, "MAX_PAGE_BYTES", 100)
    with pytest.raises(KubeError, match="list page is over"):
        discover_once(inv)
    assert list(k8s._lines(iter([b"a\nb", b"c\n", b"d"]), 10)) == [b"a", b"bc", b"d"]
    with pytest.raises(KubeError, match="a line over"):
        list(k8s._lines(iter([b"x" * 6, b"y" * 6]), 10))


class _Stop:
    """The watch's stop flag, recording each backoff it is asked to wait and set after `n` of them."""

    def __init__(self, n: int) -> None:
        self.n, self.waits = n, list[float]()

    def is_set(self) -> bool:
        return len(self.waits) >= self.n

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return self.is_set()


class _HostileApi(SliceApi):
    """Lists fine, then each watch sends an event of the wrong shape (then, once, a thing no code expects)."""

    def __init__(self) -> None:
        super().__init__(ApiAccess(server="http://127.0.0.1:9", namespace="inference", verify=False))
        self.lists = 0

    def list(self, namespace: str, selector: str) -> tuple[list[dict[str, object]], str]:
        self.lists += 1
        return [{"metadata": [1]}, endpoint_slice("ok", [("vllm-0", "10.0.0.1")], 8000)], "1"

    def watch(self, namespace: str, selector: str, version: str) -> Iterator[dict[str, object]]:
        if self.lists == 3:
            raise RuntimeError("something no code expects")
        yield {"type": "ADDED", "object": "boom"}


def test_a_watch_that_keeps_sending_malformed_events_is_listed_again_with_a_growing_backoff(
    tmp_path: Path, kube: FakeKube
) -> None:
    """A malformed event or any unexpected failure never ends the watch's thread (it did, with a traceback, and
    discovery froze); each is a failure like any other, and the backoff grows (it was reset by every list,
    so a failing watch re-listed every second for ever)."""
    group = inventory(tmp_path, kube).discovery[0]
    published: list[tuple[str, ...]] = []
    api = _HostileApi()
    watch = GroupWatch(group, api, lambda w, engines: published.append(tuple(e.name for e in engines)))
    watch.stop = stop = _Stop(4)
    watch._run()
    assert stop.waits == [1.0, 2.0, 4.0, 8.0]
    assert api.lists == 4 and published == [("vllm-0",)] * 4


def test_a_gzipped_list_page_is_read_once_decoded() -> None:
    """An API server (or a proxy before it) may compress its answers: the page is read within its limits as
    decoded bytes, and not decoded a second time."""
    import gzip
    import json

    import httpx

    page = {"metadata": {"resourceVersion": "7"}, "items": [endpoint_slice("a", [("vllm-0", "10.0.0.1")], 8000)]}
    body = gzip.compress(json.dumps(page).encode())

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}, content=body
        )

    api = SliceApi(ApiAccess(server="http://127.0.0.1:9", namespace="inference", verify=False))
    api.client = httpx.Client(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(answer))
    try:
        items, version = api.list("inference", "app=x")
    finally:
        api.close()
    assert version == "7" and [i["metadata"]["name"] for i in items] == ["a"]
