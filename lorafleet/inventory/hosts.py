"""Hosts, groups and engines: settings inherited defaults → group → host → engine, ranges expanded, URLs filled.

A group's engines are resolved once per member host; only the first host reports their problems, so a mistake
in a group shows once.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from lorafleet.errors import Location, Problem
from lorafleet.inventory import schema
from lorafleet.inventory.capacity import LoadModel
from lorafleet.inventory.fields import INVALID, Checker, as_list, describe, join, quoted
from lorafleet.inventory.model import PROVIDERS, BaseModel, Engine, Host, SshSettings
from lorafleet.inventory.ranges import expand_hostname
from lorafleet.inventory.yamlsource import LDict, where
from lorafleet.kinds import equivalent_key, kind_of, slot_keys
from lorafleet.units import MIB

HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
LOAD_KEYS = ("load_fixed_ms", "disk_gbps", "h2d_gbps")


@dataclass(frozen=True)
class Spot:
    """A value's place in the document: its container, its key there, and its field path."""

    container: Any
    key: Any
    path: str

    def location(self) -> Location:
        file, line = where(self.container, self.key)
        return Location(file or "<inventory>", line)


@dataclass(frozen=True)
class HostSpec:
    """One `hosts` entry or group member before its name range is expanded."""

    pattern: str
    spot: Spot
    settings: dict[str, Any]
    address: Any
    engine_lists: tuple[tuple[Any, Any, str], ...]  # (raw list, its parent mapping, its path)
    group: str | None


def read_settings(c: Checker, value: Any, spot: Spot, section: schema.Section) -> dict[str, Any]:
    """A defaults, group or host mapping's own settings (the section names its extra keys)."""
    m = c.mapping(value, spot.container, spot.key, spot.path, allow_null=True)
    if m is None:
        return {}
    section.check_keys(c, m, spot.path)
    out = schema.SETTINGS.read(c, m, spot.path)
    if "provider" in m and "provider" not in out:
        out["provider"] = INVALID  # reported already; stops a second "no provider" message
    if "ssh" in m:
        ssh_path = join(spot.path, "ssh")
        sm = c.mapping(m["ssh"], m, "ssh", ssh_path, allow_null=True)
        if sm is not None:
            schema.SSH.check_keys(c, sm, ssh_path)
            out["ssh"] = schema.SSH.read(c, sm, ssh_path)
    return out


def inherit(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Child settings win; `ssh` blocks merge key by key so a host can change one field."""
    out = dict(parent)
    for key, value in child.items():
        if key == "ssh" and isinstance(out.get("ssh"), dict):
            out["ssh"] = {**out["ssh"], **value}
        else:
            out[key] = value
    return out


def read_hosts(c: Checker, doc: LDict, defaults: dict[str, Any], base_models: dict[str, BaseModel]) -> list[Host]:
    specs = [*_group_specs(c, doc, defaults), *_host_specs(c, doc, defaults)]
    hosts = [host for spec in specs for host in _expand(c, spec, base_models)]
    seen: dict[str, Location] = {}
    for host in hosts:
        if host.name in seen:
            c.problems.append(
                Problem.at(
                    host.source, f"hosts: duplicate host name {quoted(host.name)} (also defined at {seen[host.name]})"
                )
            )
        else:
            seen[host.name] = host.source
    return hosts


def _group_specs(c: Checker, doc: LDict, defaults: dict[str, Any]) -> list[HostSpec]:
    groups = c.mapping(doc.get("groups"), doc, "groups", "groups", allow_null=True) if "groups" in doc else None
    specs: list[HostSpec] = []
    for group_name, value in (groups or {}).items():
        path = f"groups.{group_name}"
        gm = c.mapping(value, groups, group_name, path)
        if gm is None:
            continue
        settings = inherit(defaults, read_settings(c, gm, Spot(groups, group_name, path), schema.GROUP))
        if not schema.GROUP.only(("hosts",)).check_required(c, gm, path):
            continue
        members = gm["hosts"]
        entries: list[tuple[str, Any, Spot]] = []
        if isinstance(members, dict):
            entries = [(str(n), o, Spot(members, n, join(join(path, "hosts"), n))) for n, o in members.items()]
        elif isinstance(members, list):
            for i, name in enumerate(members):
                if not isinstance(name, str):
                    c.add(members, i, f"{path}.hosts[{i}]", f"expected a host name, got {describe(name)}")
                    continue
                entries.append((name, None, Spot(members, i, f"{path}.hosts[{i}]")))
        else:
            c.add(
                gm, "hosts", join(path, "hosts"), f"expected a mapping or list of host names, got {describe(members)}"
            )
            continue
        for name, override, spot in entries:
            om = c.mapping(override, spot.container, spot.key, spot.path, allow_null=True)
            own: dict[str, Any] = {}
            address = None
            if om is not None:
                own = read_settings(c, om, spot, schema.HOST_OVERRIDE)
                address = c.string(om, "address", spot.path) if "address" in om else None
            extra = om.get("engines") if om is not None else None
            lists = ((gm.get("engines"), gm, f"{path}.engines"), (extra, om, f"{spot.path}.engines"))
            specs.append(HostSpec(name, spot, inherit(settings, own), address, lists, str(group_name)))
    return specs


def _host_specs(c: Checker, doc: LDict, defaults: dict[str, Any]) -> list[HostSpec]:
    section = doc.get("hosts")
    if "hosts" in doc and not isinstance(section, list):
        c.add(doc, "hosts", "hosts", f"expected a list of hosts, got {describe(section)}")
        section = []
    specs: list[HostSpec] = []
    for i, value in enumerate(as_list(section)):
        path = f"hosts[{i}]"
        hm = c.mapping(value, section, i, path)
        if hm is None:
            continue
        own = read_settings(c, hm, Spot(section, i, path), schema.HOST)
        if not schema.HOST.check_required(c, hm, path):
            continue
        name = c.string(hm, "name", path)
        if name is INVALID:
            continue
        address = c.string(hm, "address", path) if "address" in hm else None
        lists = ((hm.get("engines"), hm, f"{path}.engines"),)
        specs.append(HostSpec(name, Spot(hm, "name", join(path, "name")), inherit(defaults, own), address, lists, None))
    return specs


def _expand(c: Checker, spec: HostSpec, base_models: dict[str, BaseModel]) -> list[Host]:
    spot, settings, address = spec.spot, spec.settings, spec.address
    try:
        names = expand_hostname(spec.pattern)
    except ValueError as exc:
        c.add(spot.container, spot.key, spot.path, str(exc))
        return []
    bad = [n for n in names if not HOSTNAME_RE.match(n)]
    if bad:
        c.add(spot.container, spot.key, spot.path, f"{quoted(bad[0])} is not a valid host name")
        return []
    if "provider" not in settings:
        message = f"host has no provider (set provider: one of {', '.join(PROVIDERS)})"
        c.add(spot.container, spot.key, spot.path, message)
    if "provider" not in settings or settings["provider"] is INVALID or address is INVALID:
        _engines(c, spec, names[0], names[0], base_models)  # still read: every mistake shows in one run
        return []
    if address is not None and len(names) > 1 and "{host}" not in address:
        message = f"address {quoted(address)} would be shared by {len(names)} hosts; use {{host}}"
        c.add(spot.container, spot.key, spot.path, message)
        return []
    defaults = schema.SETTINGS.defaults()
    hosts = []
    for index, name in enumerate(names):
        addr = address.replace("{host}", name) if address else name
        engines = _engines(c if index == 0 else Checker(), spec, name, addr, base_models)
        hosts.append(
            Host(
                name=name,
                provider=settings["provider"],
                connection=settings.get("connection", defaults["connection"]),
                address=addr,
                gpus=settings.get("gpus"),
                gpu_model=settings.get("gpu"),
                region=settings.get("region"),
                site=settings.get("site"),
                instance_type=settings.get("instance_type"),
                group=spec.group,
                ssh=SshSettings(**settings.get("ssh", {})),
                nvidia_smi=settings.get("nvidia_smi", defaults["nvidia_smi"]),
                engines=tuple(engines),
                source=spot.location(),
            )
        )
    return hosts


def _engines(c: Checker, spec: HostSpec, host: str, address: str, base_models: dict[str, BaseModel]) -> list[Engine]:
    engines: list[Engine] = []
    for raw, parent, epath in spec.engine_lists:
        if raw is None:
            continue
        if not isinstance(raw, list):
            c.add(parent, "engines", epath, f"expected a list of engines, got {describe(raw)}")
            continue
        for j, value in enumerate(raw):
            engine = _engine(c, value, Spot(raw, j, f"{epath}[{j}]"), host, address, spec.settings, base_models)
            if engine is not None:
                engines.append(engine)
    seen: set[str] = set()
    for e in engines:
        if e.name in seen:
            message = f"engines: duplicate engine name {quoted(e.name)} on host {quoted(host)}"
            c.problems.append(Problem.at(e.source, message))
        seen.add(e.name)
    return engines


def _engine(
    c: Checker,
    value: Any,
    spot: Spot,
    host: str,
    address: str,
    settings: dict[str, Any],
    base_models: dict[str, BaseModel],
) -> Engine | None:
    path = spot.path
    entry = schema.ENGINE.read_entry(c, value, spot.container, spot.key, path)
    if entry is None:
        return None
    m, got = entry
    if any(k not in got for k in ("name", "kind", "url", "base_model")):
        return None
    engine = make_engine(c, m, path, got, settings, base_models, host, got["name"], spot.location())
    url = _render_url(c, m, path, got["url"], host, address)
    if engine is None or url is None:
        return None
    return replace(engine, url=url)


def make_engine(
    c: Checker,
    m: LDict,
    path: str,
    got: dict[str, Any],
    settings: dict[str, Any],
    base_models: dict[str, BaseModel],
    host: str,
    name: str,
    source: Location,
) -> Engine | None:
    """An engine from its read fields (`kind`, `base_model`, budgets, tuning) and the settings it inherits, or
    None when a rule is broken (each reported). The URL is left empty: listed engines render theirs, discovered
    ones get the endpoint's."""
    tuning = inherit(settings, {k: v for k, v in got.items() if k in schema.TUNING.names})
    ok = True
    if not c.base_model(m, path, got["base_model"], base_models):
        ok = False
    slots = _slots(c, m, path, got, settings, tuning)
    if not ok or slots is None:
        return None
    gpu_slots, host_slots, max_rank = slots
    if "api_key_env" in tuning and "api_key_file" in tuning:  # the engine's own choice overrides an inherited one
        own = [k for k in ("api_key_env", "api_key_file") if k in got]
        if len(own) != 1:
            key = own[-1] if own else "api_key_file"
            c.add(m, key, join(path, key), "api_key_env and api_key_file both apply to this engine: set one of them")
            return None
        tuning = {k: v for k, v in tuning.items() if k != ("api_key_file" if own == ["api_key_env"] else "api_key_env")}
    budget = tuning.get("lora_budget_mb")
    return Engine(
        host=host,
        name=name,
        kind=got["kind"],
        url="",
        base_model=got["base_model"],
        gpus=tuple(got.get("gpus", ())),
        gpu_slots=gpu_slots,
        host_slots=host_slots,
        max_lora_rank=max_rank,
        lora_budget_bytes=None if budget is None else int(budget * MIB),
        api_key_env=tuning.get("api_key_env"),
        api_key_file=tuning.get("api_key_file"),
        load=LoadModel(**{k: tuning[k] for k in LOAD_KEYS if k in tuning}),
        request_timeout_s=tuning.get("request_timeout_s", schema.TUNING.defaults()["request_timeout_s"]),
        source=source,
        **_call_limits(tuning),
    )


def _call_limits(tuning: dict[str, Any]) -> dict[str, Any]:
    """The optional call limits, as Engine's own defaults unless the inventory sets them."""
    out: dict[str, Any] = {}
    if "call_deadline_s" in tuning:
        out["call_deadline_s"] = tuning["call_deadline_s"]
    if "max_response_mb" in tuning:
        out["max_response_bytes"] = int(tuning["max_response_mb"] * MIB)
    if "proxy" in tuning:
        out["proxy"] = tuning["proxy"]
    return out


def _slots(
    c: Checker, m: LDict, path: str, got: dict[str, Any], settings: dict[str, Any], tuning: dict[str, Any]
) -> tuple[int, int | None, int | None] | None:
    """(GPU slots, host slots, max rank) by the kind's profile, or None when a rule of the kind is broken."""
    kind = kind_of(got["kind"])
    ok = True
    own = (kind.gpu_slots_key, kind.host_slots_key)
    for other in slot_keys():
        if other in m and other not in own:
            message = f"{other} is not a {kind.name} setting; on {kind.name} use {equivalent_key(other, kind)}"
            c.add(m, other, join(path, other), message)
            ok = False
    host_gpus = settings.get("gpus")
    if host_gpus is not None and "gpus" in got:
        for i, g in enumerate(got["gpus"]):
            if g >= host_gpus:
                message = f"GPU index {g} is beyond this host's {host_gpus} GPUs (valid: 0..{host_gpus - 1})"
                c.add(m["gpus"], i, f"{path}.gpus[{i}]", message)
                ok = False
    gpu_slots = got.get(kind.gpu_slots_key, kind.gpu_slots_default)
    host_slots = got.get(kind.host_slots_key, gpu_slots if kind.host_slots_default_is_gpu else None)
    if host_slots is not None and host_slots < gpu_slots:
        message = f"must be at least {kind.gpu_slots_key} ({gpu_slots}), as {kind.title} requires; got {host_slots}"
        c.add(m, kind.host_slots_key, join(path, kind.host_slots_key), message)
        ok = False
    max_rank = tuning.get("max_lora_rank")
    if max_rank is None:
        max_rank = kind.max_rank_default
    elif kind.ranks is not None and max_rank not in kind.ranks:
        message = f"{kind.title} accepts max_lora_rank {', '.join(map(str, kind.ranks))}; got {max_rank}"
        c.add(m, "max_lora_rank" if "max_lora_rank" in m else None, join(path, "max_lora_rank"), message)
        ok = False
    return (gpu_slots, host_slots, max_rank) if ok else None


def _render_url(c: Checker, m: LDict, path: str, template: str, host: str, address: str) -> str | None:
    spot = join(path, "url")
    try:
        names = {fname for _, fname, _, _ in string.Formatter().parse(template) if fname is not None}
    except ValueError:
        c.add(m, "url", spot, f"{quoted(template)} has unbalanced braces")
        return None
    unknown = names - {"host", "name"}
    if unknown:
        known = "{host} = the host's address, {name} = its name"
        c.add(m, "url", spot, f"unknown placeholder {{{sorted(unknown)[0]}}} (known: {known})")
        return None
    url = template.replace("{host}", address).replace("{name}", host)
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed IPv6 bracket, say: not shown, it may hold a secret
        c.add(m, "url", spot, f"not a valid URL ({exc}); the URL is not shown")
        return None
    secret = schema.url_secret(parts)
    if secret:
        c.add(m, "url", spot, f"{secret}; the URL is not shown — name the key's variable in api_key_env instead")
        return None
    try:
        parts.port  # noqa: B018 - raises on an invalid port
    except ValueError:
        c.add(m, "url", spot, f"{quoted(url)} has an invalid port")
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        c.add(m, "url", spot, f"{quoted(url)} is not an http:// or https:// URL with a host")
        return None
    return url.rstrip("/")
