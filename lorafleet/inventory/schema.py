"""The inventory schema as data: per section a table of fields (name, reader, required, default).

From one table follow the allowed keys, the did-you-mean on unknown ones, the required check, the reading of
every value with its type and range, and the defaults — so a key is written down once. Fields without a reader
are nested structures (a host's `engines`, a group's `hosts`) that the section's own module reads.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

from lorafleet.inventory.fields import ENV_RE, INVALID, NAME_RE, Checker, join, quoted
from lorafleet.inventory.model import CONNECTIONS, DTYPE_ALIASES, DTYPE_BYTES, PROVIDERS
from lorafleet.inventory.yamlsource import LDict
from lorafleet.kinds import ENGINE_KINDS, slot_keys

Reader = Callable[[Checker, LDict, str, str], Any]


# --- readers ----------------------------------------------------------------------------------------------
def text(pattern: re.Pattern[str] | None = None, what: str = "") -> Reader:
    return lambda c, m, k, p: c.string(m, k, p, pattern, what)


def integer(minimum: int | None = None, maximum: int | None = None) -> Reader:
    return lambda c, m, k, p: c.integer(m, k, p, minimum=minimum, maximum=maximum)


def number(positive: bool = True, maximum: float | None = None) -> Reader:
    return lambda c, m, k, p: c.number(m, k, p, positive=positive, maximum=maximum)


def choice(options: tuple[str, ...], what: str) -> Reader:
    return lambda c, m, k, p: c.choice(m, k, p, options, what)


def strings() -> Reader:
    return lambda c, m, k, p: c.string_list(m, k, p)


def integers() -> Reader:
    return lambda c, m, k, p: c.int_list(m, k, p)


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    read: Reader | None = None  # None: a nested structure read by the section's own code
    required: bool = False
    default: Any = None  # None: no default here (the model's dataclass may hold one)


@dataclass(frozen=True)
class Section:
    fields: tuple[Field, ...]
    forbidden: Mapping[str, str] = field(default_factory=dict)
    hints: Mapping[str, str] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def plus(self, *fields: Field) -> Section:
        return Section(self.fields + fields, self.forbidden, self.hints)

    def only(self, names: tuple[str, ...]) -> Section:
        return Section(tuple(f for f in self.fields if f.name in names), self.forbidden, self.hints)

    def check_keys(self, c: Checker, m: LDict, path: str) -> None:
        """Unknown keys (with did-you-mean) and forbidden ones (with the reason)."""
        c.keys(m, path, self.names, self.forbidden or None, self.hints or None)

    def check_required(self, c: Checker, m: LDict, path: str) -> bool:
        return c.required(m, path, [f.name for f in self.fields if f.required])

    def read(self, c: Checker, m: LDict, path: str) -> dict[str, Any]:
        """Every present field that has a reader; invalid values are left out (already reported)."""
        out: dict[str, Any] = {}
        for f in self.fields:
            if f.read is not None and f.name in m:
                value = f.read(c, m, f.name, path)
                if value is not INVALID:
                    out[f.name] = value
        return out

    def read_entry(
        self, c: Checker, value: Any, container: Any, key: Any, path: str
    ) -> tuple[LDict, dict[str, Any]] | None:
        """A list entry or named mapping of this section: its mapping and fields, or None when it is not a
        mapping or lacks a required key (each reported)."""
        m = c.mapping(value, container, key, path)
        if m is None:
            return None
        self.check_keys(c, m, path)
        if not self.check_required(c, m, path):
            return None
        return m, self.read(c, m, path)

    def invalid(self, m: LDict, got: Mapping[str, Any], names: tuple[str, ...] | None = None) -> bool:
        """True when one of `names` (default: every field with a reader) is present but did not read."""
        check = names if names is not None else tuple(f.name for f in self.fields if f.read is not None)
        return any(k in m and k not in got for k in check)

    def defaults(self) -> dict[str, Any]:
        return {f.name: f.default for f in self.fields if f.default is not None}


MAX_MIB = float(2**30)  # a size in MiB past a pebibyte is a typo (and past ~1e302 would overflow in bytes)
SECRET_HINT = "secrets are never stored in the inventory: name an environment variable with {env} instead"
FORBIDDEN = {
    "api_key": SECRET_HINT.format(env="api_key_env"),
    "password": SECRET_HINT.format(env="password_env"),
    "token": SECRET_HINT.format(env="api_key_env"),
}


def env_name() -> Reader:
    """The name of an environment variable holding a secret. The value is never echoed: a mistake here is
    often the secret itself pasted in."""

    def read(c: Checker, m: LDict, key: str, path: str) -> Any:
        value = m[key]
        if not isinstance(value, str) or not value.strip():
            c.add(m, key, join(path, key), "expected the name of an environment variable")
            return INVALID
        if not ENV_RE.match(value) or looks_like_secret(value):
            c.add(
                m,
                key,
                join(path, key),
                "is not an environment variable name (like VLLM_API_KEY); the value is not shown — if it is "
                "the secret itself, remove it from the file and rotate it",
            )
            return INVALID
        return value

    return read


def looks_like_secret(value: str) -> bool:
    """Variable names are short and upper-case by habit; keys are long and mix cases and digits."""
    return len(value) >= 24 or (
        len(value) >= 16 and any(ch.islower() for ch in value) and any(ch.isdigit() for ch in value)
    )


ENV_NAME = env_name()


SECRET_QUERY_KEYS = ("key", "api_key", "apikey", "token", "access_token", "password", "secret", "auth")


def url_secret(parts: SplitResult) -> str | None:
    """Why a URL carries a credential (user:password@ or a key in the query), or None."""
    if parts.username or parts.password:
        return "credentials in the URL (user:password@) are refused"
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower().replace("-", "_") in SECRET_QUERY_KEYS:
            return f"a secret in the URL's query ({name}=…) is refused"
    return None


def proxy_url() -> Reader:
    """An http(s) proxy URL, without credentials in it (the value is not echoed when it has some)."""

    def read(c: Checker, m: LDict, key: str, path: str) -> Any:
        value = c.string(m, key, path)
        if value is INVALID:
            return INVALID
        try:
            parts = urlsplit(value)
        except ValueError as exc:  # an unclosed IPv6 bracket, say: not shown, it may hold a secret
            c.add(m, key, join(path, key), f"not a valid URL ({exc}); the URL is not shown")
            return INVALID
        secret = url_secret(parts)
        if secret:
            c.add(m, key, join(path, key), f"{secret}; the URL is not shown")
            return INVALID
        if parts.scheme not in ("http", "https") or not parts.hostname:
            c.add(m, key, join(path, key), f"{quoted(value)} is not an http:// or https:// URL with a host")
            return INVALID
        return value

    return read


TOP = Section(
    tuple(
        Field(name)
        for name in (
            "version",
            "fleet",
            "defaults",
            "base_models",
            "groups",
            "hosts",
            "discovery",
            "adapters",
            "tenants",
            "gateway",
        )
    )
)

# Engine tuning: defaults, groups and hosts may set it for their engines; an engine may set its own.
TUNING = Section(
    (
        Field("load_fixed_ms", number(positive=False)),
        Field("disk_gbps", number()),
        Field("h2d_gbps", number()),
        Field("request_timeout_s", number(), default=30.0),
        Field("call_deadline_s", number()),
        Field("max_response_mb", number(maximum=MAX_MIB)),
        Field("proxy", proxy_url()),
        Field("api_key_env", ENV_NAME),
        Field("api_key_file", text()),
        Field("lora_budget_mb", number(maximum=MAX_MIB)),
        Field("max_lora_rank", integer(minimum=1)),
    ),
    FORBIDDEN,
)

SETTINGS = Section(
    (
        Field("provider", choice(PROVIDERS, "provider")),
        Field("connection", choice(CONNECTIONS, "connection"), default="ssh"),
        Field("region", text()),
        Field("site", text()),
        Field("instance_type", text()),
        Field("gpu", text()),
        Field("gpus", integer(minimum=0, maximum=1024)),
        Field("ssh"),
        Field("nvidia_smi", text(), default="nvidia-smi"),
        *TUNING.fields,
    ),
    FORBIDDEN,
)

SSH = Section(
    (
        Field("user", text()),
        Field("key", text()),
        Field("known_hosts", text()),
        Field("config", text()),
        Field("jump", text()),
        Field("port", integer(minimum=1, maximum=65535)),
        Field("connect_timeout_s", number()),
        Field("command_timeout_s", number()),
        Field("password_env", ENV_NAME),
    ),
    FORBIDDEN,
    hints={
        "identity_file": "unknown key; did you mean 'key'?",
        "hostname": "unknown key; the host's address is set by 'address'",
    },
)

GROUP = SETTINGS.plus(Field("hosts", required=True), Field("engines"))
HOST_OVERRIDE = SETTINGS.plus(Field("address", text()), Field("engines"))
HOST = SETTINGS.plus(Field("name", text(), required=True), Field("address", text()), Field("engines"))

BASE_MODEL_INTS = ("hidden_size", "intermediate_size", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim")
BASE_MODEL = Section(
    (
        Field("name", text()),
        Field("dtype", choice((*DTYPE_BYTES, *DTYPE_ALIASES), "dtype"), default="bfloat16"),
        Field("vocab_size", integer(minimum=1)),
        *(Field(k, integer(minimum=1), required=k not in ("num_kv_heads", "head_dim")) for k in BASE_MODEL_INTS),
    )
)

ENGINE = Section(
    (
        Field("name", text(NAME_RE, "a valid engine name (letters, digits, . _ -)"), required=True),
        Field("kind", choice(ENGINE_KINDS, "engine kind"), required=True),
        Field("url", text(), required=True),
        Field("base_model", text(), required=True),
        Field("gpus", integers()),
        *TUNING.fields,
        *(Field(k, integer(minimum=1)) for k in slot_keys()),
    ),
    FORBIDDEN,
)

ADAPTER = Section(
    (
        Field("id", text(NAME_RE, "a valid adapter id (letters, digits, . _ -)"), required=True),
        Field("base_model", text(), required=True),
        Field("path", text(), required=True),
        Field("rank", integer(minimum=1)),
        Field("alpha", number()),
        Field("target_modules", strings(), default=("q_proj", "v_proj")),
        Field("tenants", strings()),
        Field("files", text()),
        Field("description", text()),
    ),
    FORBIDDEN,
)

TENANT = Section(
    (
        Field("tier", text()),
        Field("pinned", strings()),
        Field("workflows"),
        Field("weight", number()),
        Field("description", text()),
    )
)

GATEWAY = Section((Field("logs"),))
LOG_SOURCE = Section(
    (
        Field("path", text(), required=True),
        Field("format", choice(("jsonl", "nginx"), "log format"), required=True),
        Field("log_format", text()),
        Field("fields", required=True),
    )
)
LOG_FIELDS = Section(
    tuple(
        Field(k, text())
        for k in ("time", "tenant", "adapter", "engine", "status", "ttft_ms", "base_model", "duration_s", "request_id")
    )
)

# Engines found on Kubernetes: the API's access, then per group where to look and what each engine found is.
DISCOVERY = Section((Field("kubeconfig", text()), Field("context", text()), Field("groups", required=True)), FORBIDDEN)
DISCOVERY_GROUP = Section(
    (
        Field("name", text(NAME_RE, "a valid group name (letters, digits, . _ -)"), required=True),
        Field("namespace", text(re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"), "a Kubernetes namespace")),
        Field("selector", required=True),
        Field("port", required=True),
        Field("scheme", choice(("http", "https"), "scheme"), default="http"),
        Field("kind", choice(ENGINE_KINDS, "engine kind"), required=True),
        Field("base_model", text(), required=True),
        *TUNING.fields,
        *(Field(k, integer(minimum=1)) for k in slot_keys()),
    ),
    FORBIDDEN,
    hints={"url": "discovered engines take the endpoint's address: set port (and scheme) instead of url"},
)
