"""The `discovery` section (engines found on Kubernetes), and which engines a group's EndpointSlices are.

Reading the section opens no connection: `inventory check`, `plan` and `replay` stay offline. The Kubernetes
client (engines/kubernetes.py) lists and watches the slices; what they mean as engines is decided here, once.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lorafleet.inventory import schema
from lorafleet.inventory.fields import Checker, as_list, describe, join, quoted
from lorafleet.inventory.hosts import Spot, make_engine
from lorafleet.inventory.model import BaseModel, Engine, EngineGroup, KubeAccess
from lorafleet.inventory.yamlsource import LDict, where

LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
PORT_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")
POD_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # a DNS-1123 subdomain, as Kubernetes names pods


def read_discovery(
    c: Checker, doc: LDict, defaults: dict[str, Any], base_models: dict[str, BaseModel], host_names: set[str]
) -> tuple[tuple[EngineGroup, ...], KubeAccess]:
    """The engine groups and how to reach the API; problems are recorded, never raised."""
    if "discovery" not in doc:
        return (), KubeAccess()
    m = c.mapping(doc["discovery"], doc, "discovery", "discovery")
    if m is None:
        return (), KubeAccess()
    schema.DISCOVERY.check_keys(c, m, "discovery")
    got = schema.DISCOVERY.read(c, m, "discovery")
    kubeconfig = got.get("kubeconfig")
    if kubeconfig is not None:
        try:
            path = Path(kubeconfig).expanduser()
        except RuntimeError:  # ~user of a user this machine does not have
            c.add(m, "kubeconfig", "discovery.kubeconfig", f"{quoted(kubeconfig)}: no such user's home folder here")
            path = Path(kubeconfig)
        file, _ = where(m, "kubeconfig")
        if not path.is_absolute() and file:
            path = Path(file).parent / path  # like the gateway's logs: an inventory and its files move together
        kubeconfig = str(path)
    access = KubeAccess(kubeconfig, got.get("context"))
    if not schema.DISCOVERY.check_required(c, m, "discovery"):
        return (), access
    raw = m["groups"]
    if not isinstance(raw, list):
        c.add(m, "groups", "discovery.groups", f"expected a list of engine groups, got {describe(raw)}")
        return (), access
    groups: list[EngineGroup] = []
    seen: set[str] = set()
    for i, value in enumerate(as_list(raw)):
        group = _group(c, value, Spot(raw, i, f"discovery.groups[{i}]"), defaults, base_models)
        if group is None:
            continue
        if group.name in seen or group.name in host_names:
            other = "another discovery group" if group.name in seen else "a host"
            c.add(raw[i], "name", f"discovery.groups[{i}].name", f"{quoted(group.name)} is already the name of {other}")
            continue
        seen.add(group.name)
        groups.append(group)
    return tuple(groups), access


def _group(
    c: Checker, value: Any, spot: Spot, defaults: dict[str, Any], base_models: dict[str, BaseModel]
) -> EngineGroup | None:
    section = schema.DISCOVERY_GROUP
    entry = section.read_entry(c, value, spot.container, spot.key, spot.path)
    if entry is None:
        return None
    m, got = entry
    path = spot.path
    selector = _selector(c, m, path)
    port = _port(c, m, path)
    if section.invalid(m, got) or selector is None or port is None:
        return None
    template = make_engine(c, m, path, got, defaults, base_models, got["name"], "", spot.location())
    if template is None:
        return None
    return EngineGroup(
        name=got["name"],
        namespace=got.get("namespace"),
        selector=selector,
        port=port,
        scheme=got.get("scheme", section.defaults()["scheme"]),
        template=template,
        source=spot.location(),
    )


def _selector(c: Checker, m: LDict, path: str) -> str | None:
    """A mapping of labels (all must match) or a selector string as kubectl takes it (`app=vllm,tier!=canary`)."""
    value, spot = m["selector"], join(path, "selector")
    if isinstance(value, str) and value.strip():
        return value.strip()
    if not isinstance(value, dict) or not value:
        c.add(m, "selector", spot, f"expected a mapping of labels or a selector string, got {describe(value)}")
        return None
    parts = []
    for key, label in value.items():
        text = "" if label is None else str(label) if not isinstance(label, bool) else str(label).lower()
        if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
            c.add(value, key, join(spot, key), f"{quoted(key)} is not a Kubernetes label key")
            return None
        if isinstance(label, (dict, list)) or not LABEL_VALUE_RE.match(text):
            c.add(value, key, join(spot, key), f"{quoted(text)} is not a Kubernetes label value")
            return None
        parts.append(f"{key}={text}")
    return ",".join(parts)


def _port(c: Checker, m: LDict, path: str) -> int | str | None:
    """The engines' port: a number, or the name of a port the Service (so each slice) lists."""
    value, spot = m["port"], join(path, "port")
    if isinstance(value, int) and not isinstance(value, bool):
        if 1 <= value <= 65535:
            return value
        c.add(m, "port", spot, f"must be a port number (1-65535), got {value}")
        return None
    if isinstance(value, str) and PORT_NAME_RE.match(value) and any(ch.isalpha() for ch in value):
        return value
    c.add(m, "port", spot, f"expected a port number or a port name (like http), got {describe(value)}")
    return None


def slice_engines(group: EngineGroup, slices: Iterable[Any]) -> list[Engine]:
    """The engines a group's EndpointSlices hold now: one per pod (its targetRef name) with a ready endpoint
    that is not terminating, at the endpoint's first address and the group's port. A pod in two slices (a
    dual-stack Service, or slices being rebalanced) is one engine; sorted by name so the order is stable.

    What the API sends is data, not trusted: an endpoint whose pod name is not a Kubernetes name, whose address
    is not an IP address or whose port is not 1-65535 (or any part not of the shape the API defines) is no
    engine — a broken or hostile API server cannot take the rest of the fleet down, nor name a URL."""
    found: dict[str, Engine] = {}
    for item in slices:
        if not isinstance(item, Mapping):
            continue
        port = _slice_port(group.port, _objects(item.get("ports")))
        if port is None:
            continue
        for endpoint in _objects(item.get("endpoints")):
            conditions = endpoint.get("conditions")
            conditions = conditions if isinstance(conditions, Mapping) else {}
            # Kubernetes: an unknown (absent) ready condition is to be read as ready.
            if conditions.get("ready") is False or conditions.get("terminating") is True:
                continue
            ref = endpoint.get("targetRef")
            ref = ref if isinstance(ref, Mapping) else {}
            pod, addresses = ref.get("name"), endpoint.get("addresses")
            if ref.get("kind", "Pod") != "Pod" or not isinstance(pod, str) or not POD_NAME_RE.match(pod):
                continue
            address = _address(addresses[0]) if isinstance(addresses, list) and addresses else None
            if address is not None and pod not in found:
                found[pod] = group.engine(pod, address, port)
    return [found[name] for name in sorted(found)]


def _objects(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of a list the API sent (anything else in it, or a list that is not one, is nothing)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _address(value: Any) -> str | None:
    """An endpoint's address, when it is an IP address (written the standard way); else None."""
    if not isinstance(value, str):
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def _slice_port(want: int | str, ports: list[Mapping[str, Any]]) -> int | None:
    if isinstance(want, int):
        return want
    for port in ports:
        number = port.get("port")
        if port.get("name") == want and isinstance(number, int) and not isinstance(number, bool):
            return number if 1 <= number <= 65535 else None
    return None


__all__ = ["read_discovery", "slice_engines"]
