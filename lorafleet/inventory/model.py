"""The resolved fleet: frozen values with every default, range and inheritance already applied."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from lorafleet.errors import Location
from lorafleet.inventory.capacity import LoadModel, slot_cap
from lorafleet.kinds import EngineKind, kind_of

PROVIDERS = (
    "aws",
    "gcp",
    "azure",
    "oci",
    "coreweave",
    "lambda",
    "runpod",
    "nebius",
    "crusoe",
    "vast",
    "paperspace",
    "kubernetes",
    "onprem",
)
CONNECTIONS = ("ssh", "local")
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


@dataclass(frozen=True)
class SshSettings:
    """How to reach a host over SSH; unset fields fall back to `~/.ssh/config`, then OpenSSH's defaults."""

    user: str | None = None
    port: int | None = None
    key: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    config: str = "~/.ssh/config"
    jump: str | None = None
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 30.0
    password_env: str | None = None


@dataclass(frozen=True)
class BaseModel:
    id: str
    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Engine:
    """One serving process. `gpu_slots` is the GPU tier, `host_slots` the host-memory cache (None = no cap)."""

    host: str
    name: str
    kind: str
    url: str
    base_model: str
    gpus: tuple[int, ...]
    gpu_slots: int
    host_slots: int | None
    max_lora_rank: int | None
    lora_budget_bytes: int | None
    api_key_env: str | None
    load: LoadModel
    request_timeout_s: float  # each connect and each read
    source: Location  # where it was defined
    call_deadline_s: float = 60.0  # one whole call, retries and body included
    max_response_bytes: int = 8 * 1024 * 1024  # a longer answer is refused, not read
    proxy: str | None = None  # engine traffic goes direct (proxy variables ignored) unless this is set
    api_key_file: str | None = None  # a file holding the API key (relative: in $CREDENTIALS_DIRECTORY, or by the file)

    @property
    def key(self) -> str:
        """The fleet-wide name, `HOST/ENGINE`."""
        return f"{self.host}/{self.name}"

    @property
    def profile(self) -> EngineKind:
        """What this engine's kind is and lets a controller do."""
        return kind_of(self.kind)

    @property
    def slot_cap(self) -> int:
        return slot_cap(self.gpu_slots, self.host_slots)


@dataclass(frozen=True)
class Host:
    name: str
    provider: str
    connection: str
    address: str
    gpus: int | None
    gpu_model: str | None
    region: str | None
    site: str | None
    instance_type: str | None
    group: str | None
    ssh: SshSettings
    nvidia_smi: str
    engines: tuple[Engine, ...]
    source: Location  # where it was defined


@dataclass(frozen=True)
class Adapter:
    id: str
    base_model: str
    path: str
    rank: int
    target_modules: tuple[str, ...]
    tenants: tuple[str, ...]
    files: str | None
    size_bytes: int
    size_source: str  # "measured" or "estimated"
    source: Location  # where it was defined


@dataclass(frozen=True)
class Tenant:
    name: str
    tier: str | None
    pinned: tuple[str, ...]
    workflows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class LogSource:
    """One gateway access log and where each request field lives in its records."""

    path: str
    format: str  # "jsonl" or "nginx"
    fields: dict[str, str]
    log_format: str | None = None


@dataclass(frozen=True)
class EngineGroup:
    """Engines found on Kubernetes rather than listed: the ready endpoints of the EndpointSlices that match a
    label selector in a namespace. Each becomes `template` with the pod's name and the endpoint's URL; the
    fleet-wide key is `NAME/POD`, so a pod that moves between groups is retired from one and added to the other."""

    name: str  # the engines' host part
    namespace: str | None  # None: the daemon's own (the service account's, or the kubeconfig context's)
    selector: str  # a Kubernetes label selector (`app=vllm,tier in (a,b)`)
    port: int | str  # a number, or the name of a port the slices list
    scheme: str  # http or https
    template: Engine  # every setting of the group's engines; name and url are filled per endpoint
    source: Location

    def engine(self, pod: str, address: str, port: int) -> Engine:
        """The engine one ready endpoint is (an IPv6 address is bracketed in its URL)."""
        host = f"[{address}]" if ":" in address else address
        return replace(self.template, name=pod, url=f"{self.scheme}://{host}:{port}")


@dataclass(frozen=True)
class KubeAccess:
    """How lorafleet reaches the Kubernetes API: a kubeconfig file (and context), or, when none is named, the
    pod's service account (in-cluster)."""

    kubeconfig: str | None = None
    context: str | None = None


@dataclass(frozen=True)
class Inventory:
    fleet: str | None
    sources: tuple[str, ...]
    base_models: dict[str, BaseModel]
    hosts: tuple[Host, ...]
    adapters: dict[str, Adapter]
    tenants: dict[str, Tenant]
    gateway_logs: tuple[LogSource, ...]
    warnings: tuple[str, ...] = field(default=())
    discovery: tuple[EngineGroup, ...] = ()  # engine groups found on Kubernetes (not in `hosts` until found)
    kube: KubeAccess = field(default_factory=KubeAccess)

    @property
    def engines(self) -> tuple[Engine, ...]:
        return tuple(e for h in self.hosts for e in h.engines)

    def engine(self, key: str) -> Engine | None:
        return next((e for e in self.engines if e.key == key), None)

    def host(self, name: str) -> Host | None:
        return next((h for h in self.hosts if h.name == name), None)


def with_discovered(inventory: Inventory, found: Mapping[str, Sequence[Engine]]) -> Inventory:
    """The inventory with each discovery group's engines found so far, as one host per group (provider
    kubernetes). A pod two groups both found is kept in the first group only: one pod, one engine."""
    hosts: list[Host] = []
    claimed: set[tuple[str | None, str]] = set()
    for group in inventory.discovery:
        engines = []
        for engine in found.get(group.name, ()):
            if (group.namespace, engine.name) not in claimed:
                claimed.add((group.namespace, engine.name))
                engines.append(engine)
        hosts.append(
            Host(
                name=group.name,
                provider="kubernetes",
                connection="local",
                address=group.name,
                gpus=None,
                gpu_model=None,
                region=None,
                site=None,
                instance_type=None,
                group=None,
                ssh=SshSettings(),
                nvidia_smi="nvidia-smi",
                engines=tuple(engines),
                source=group.source,
            )
        )
    return replace(inventory, hosts=inventory.hosts + tuple(hosts))
