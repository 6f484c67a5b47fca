"""Load, merge and resolve an inventory: defaults → group → host → engine, ranges expanded, sizes computed.

Every problem of every file is collected and raised together as one InventoryError, so an admin fixes
a whole file in one round trip instead of one error per run.
"""

from __future__ import annotations

import difflib
import os
import re
import string
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lorafleet.errors import InputError, InventoryError, Problem
from lorafleet.inventory import sizing
from lorafleet.inventory.fields import ENV_RE, INVALID, NAME_RE, Checker, as_list, describe, join
from lorafleet.inventory.model import (
    CONNECTIONS,
    DTYPE_ALIASES,
    DTYPE_BYTES,
    PROVIDERS,
    Adapter,
    BaseModel,
    Engine,
    Host,
    Inventory,
    LoadModel,
    LogSource,
    SshSettings,
    Tenant,
)
from lorafleet.inventory.ranges import expand_hostname
from lorafleet.inventory.yamlsource import LDict, LList, load_yaml, new_ldict, new_llist, where
from lorafleet.kinds import ENGINE_KINDS, equivalent_key, kind_of, slot_keys
from lorafleet.units import MIB

TOP_KEYS = ("version", "fleet", "defaults", "base_models", "groups", "hosts", "adapters", "tenants", "gateway")
HOSTNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
SECRET_HINT = "secrets are never stored in the inventory: name an environment variable with {env} instead"
LOG_FIELDS = ("time", "tenant", "adapter", "engine", "status", "ttft_ms", "base_model")
ENGINE_TUNING = (
    "load_fixed_ms",
    "disk_gbps",
    "h2d_gbps",
    "request_timeout_s",
    "api_key_env",
    "lora_budget_mb",
    "max_lora_rank",
)
# Host-level settings, and the engine tuning that defaults, groups and hosts may set for their engines.
SETTING_KEYS = (
    "provider",
    "connection",
    "region",
    "site",
    "instance_type",
    "gpu",
    "gpus",
    "ssh",
    "nvidia_smi",
    *ENGINE_TUNING,
)
FORBIDDEN = {
    "api_key": SECRET_HINT.format(env="api_key_env"),
    "password": SECRET_HINT.format(env="password_env"),
    "token": SECRET_HINT.format(env="api_key_env"),
}


def default_inventory_path() -> str:
    return os.environ.get("LORAFLEET_INVENTORY", "lorafleet.yaml")


def load_inventory(path: str | Path) -> Inventory:
    """Read a YAML file or a folder of them; raise InventoryError listing every problem found."""
    root = Path(path)
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise InputError(f"{root}: folder holds no .yaml or .yml files")
    elif root.exists():
        files = [root]
    else:
        raise InputError(
            f"inventory {str(root)!r} not found",
            hint="pass -i FILE, set LORAFLEET_INVENTORY, or create ./lorafleet.yaml (see inventories/)",
        )
    problems: list[Problem] = []
    docs: list[LDict] = []
    for file in files:
        doc, found = load_yaml(file, str(file))
        problems.extend(found)
        if doc is None:
            continue
        if not isinstance(doc, dict):
            problems.append(
                Problem(str(file), 1, "", f"expected a mapping of sections at the top, got {describe(doc)}")
            )
            continue
        docs.append(doc)
    checker = Checker()
    checker.problems = problems
    merged = _merge(checker, docs) if docs else None
    inventory = _Resolver(checker, [str(f) for f in files]).resolve(merged) if merged is not None else None
    if checker.problems or inventory is None:
        ordered = sorted(checker.problems, key=lambda p: (p.file, p.line or 0))
        raise InventoryError(ordered or [Problem(str(root), None, "", "nothing to load")])
    return inventory


# --- merging a folder ---------------------------------------------------------------------------------
def _merge(checker: Checker, docs: list[LDict]) -> LDict:
    if len(docs) == 1:
        return docs[0]
    out = new_ldict(docs[0].file, 1)
    for doc in docs:
        for key, value in doc.items():
            file, line = where(doc, key)
            if key not in out:
                if isinstance(value, list):
                    out[key] = _copy_list(value)
                elif isinstance(value, dict) and key != "fleet":
                    out[key] = _copy_dict(value)
                else:
                    out[key] = value
                out.key_lines[key], out.key_files[key] = line or 1, file or doc.file
                continue
            have = out[key]
            if isinstance(have, list) and isinstance(value, list):
                _extend(have, value)
            elif isinstance(have, dict) and isinstance(value, dict):
                _merge_mapping(checker, have, value, key)
            elif have != value:
                ofile, oline = where(out, key)
                checker.add(doc, key, key, f"conflicts with the value at {ofile}:{oline}")
    return out


def _merge_mapping(checker: Checker, have: LDict, value: LDict, section: str) -> None:
    """Merge one section's keys: gateway logs concatenate, equal defaults agree, anything else defined twice
    is a conflict naming both places."""
    for sub, sub_value in value.items():
        if section == "gateway" and sub == "logs" and isinstance(have.get(sub), list) and isinstance(sub_value, list):
            _extend(have[sub], sub_value)
            continue
        if sub in have and not (section == "defaults" and have[sub] == sub_value):
            ofile, oline = where(have, sub)
            checker.add(value, sub, join(section, sub), f"conflicts with the one defined at {ofile}:{oline}")
            continue
        have[sub] = sub_value
        have.key_lines[sub], have.key_files[sub] = where(value, sub)[1] or 1, value.file


def _extend(have: LList, value: LList) -> None:
    """Append a line-aware list, keeping each item's file and line."""
    have.extend(value)
    have.item_lines.extend(value.item_lines)
    have.item_files.extend(value.item_files)


def _copy_list(value: LList) -> LList:
    out = new_llist(value.file, value.line)
    _extend(out, value)
    return out


def _copy_dict(value: LDict) -> LDict:
    out = new_ldict(value.file, value.line)
    out.update(value)
    out.key_lines.update(value.key_lines)
    out.key_files.update({k: value.key_files.get(k, value.file) for k in value})
    return out


# --- resolving ----------------------------------------------------------------------------------------
class _Resolver:
    def __init__(self, checker: Checker, files: list[str]) -> None:
        self.c = checker
        self.files = files
        self.warnings: list[str] = []

    def resolve(self, doc: LDict) -> Inventory | None:
        c = self.c
        c.keys(doc, "", TOP_KEYS)
        if "version" in doc and doc["version"] != 1:
            c.add(doc, "version", "version", f"unsupported inventory version {doc['version']!r} (supported: 1)")
        fleet = c.string(doc, "fleet", "") if "fleet" in doc else None
        defaults = self._settings(doc.get("defaults"), doc, "defaults", "defaults") if "defaults" in doc else {}
        base_models = self._base_models(doc)
        tenants_raw = doc.get("tenants")
        tenant_names = set(tenants_raw) if isinstance(tenants_raw, dict) else None
        hosts = self._hosts(doc, defaults or {}, base_models)
        adapters = self._adapters(doc, base_models, tenant_names)
        tenants = self._tenants(doc, self._declared_adapters(doc) | set(adapters))
        logs = self._gateway(doc)
        self._cross_warnings(hosts, adapters)
        if fleet is INVALID:
            fleet = None
        return Inventory(
            fleet=fleet,
            sources=tuple(self.files),
            base_models=base_models,
            hosts=tuple(hosts),
            adapters=adapters,
            tenants=tenants,
            gateway_logs=tuple(logs),
            warnings=tuple(self.warnings),
        )

    # settings shared by defaults, groups and hosts -------------------------------------------------
    def _settings(self, value: Any, parent: Any, key: Any, path: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
        c = self.c
        m = c.mapping(value, parent, key, path, allow_null=True)
        if m is None:
            return {}
        c.keys(m, path, SETTING_KEYS + extra, FORBIDDEN)
        return self._read_settings(m, path, c)

    def _read_settings(self, m: LDict, path: str, c: Checker, only: tuple[str, ...] = SETTING_KEYS) -> dict[str, Any]:
        readers = {
            "provider": lambda m, k, p: c.choice(m, k, p, PROVIDERS, "provider"),
            "connection": lambda m, k, p: c.choice(m, k, p, CONNECTIONS, "connection"),
            "region": c.string,
            "site": c.string,
            "instance_type": c.string,
            "gpu": c.string,
            "nvidia_smi": c.string,
            "gpus": lambda m, k, p: c.integer(m, k, p, minimum=0, maximum=1024),
            "load_fixed_ms": lambda m, k, p: c.number(m, k, p, positive=False),
            "disk_gbps": c.number,
            "h2d_gbps": c.number,
            "request_timeout_s": c.number,
            "lora_budget_mb": c.number,
            "max_lora_rank": lambda m, k, p: c.integer(m, k, p, minimum=1),
            "api_key_env": lambda m, k, p: c.string(m, k, p, ENV_RE, "an environment variable name"),
        }
        out = c.fields(m, path, {k: v for k, v in readers.items() if k in only})
        if "provider" in m and "provider" in only and "provider" not in out:
            out["provider"] = INVALID  # reported already; stops a second "no provider" message
        if "ssh" in m and "ssh" in only:
            ssh = self._ssh(c, m["ssh"], m, join(path, "ssh"))
            if ssh is not None:
                out["ssh"] = ssh
        return out

    def _ssh(self, c: Checker, value: Any, parent: LDict, path: str) -> dict[str, Any] | None:
        m = c.mapping(value, parent, "ssh", path, allow_null=True)
        if m is None:
            return None
        readers = {
            "user": c.string,
            "key": c.string,
            "known_hosts": c.string,
            "config": c.string,
            "jump": c.string,
            "port": lambda m, k, p: c.integer(m, k, p, minimum=1, maximum=65535),
            "connect_timeout_s": c.number,
            "command_timeout_s": c.number,
            "password_env": lambda m, k, p: c.string(m, k, p, ENV_RE, "an environment variable name"),
        }
        c.keys(
            m,
            path,
            readers,
            FORBIDDEN,
            hints={
                "identity_file": "unknown key; did you mean 'key'?",
                "hostname": "unknown key; the host's address is set by 'address'",
            },
        )
        return c.fields(m, path, readers)

    # base models -------------------------------------------------------------------------------------
    def _base_models(self, doc: LDict) -> dict[str, BaseModel]:
        c = self.c
        out: dict[str, BaseModel] = {}
        section = c.mapping(doc.get("base_models"), doc, "base_models", "base_models", allow_null=True)
        if section is None:
            return out
        ints = ("hidden_size", "intermediate_size", "num_layers", "num_attention_heads", "num_kv_heads", "head_dim")
        for model_id, value in section.items():
            path = f"base_models.{model_id}"
            m = c.mapping(value, section, model_id, path)
            if m is None:
                continue
            if not NAME_RE.match(str(model_id)):
                c.add(section, model_id, path, "base model ids use letters, digits, '.', '_' and '-' only")
            c.keys(m, path, ("name", "dtype", "vocab_size", *ints))
            ok = c.required(m, path, ("hidden_size", "intermediate_size", "num_layers", "num_attention_heads"))
            readers: dict[str, Any] = {
                k: (lambda m, k, p: c.integer(m, k, p, minimum=1)) for k in (*ints, "vocab_size")
            }
            readers["name"] = c.string
            readers["dtype"] = lambda m, k, p: c.choice(m, k, p, [*DTYPE_BYTES, *DTYPE_ALIASES], "dtype")
            got = c.fields(m, path, readers)
            if not ok or any(k in m and k not in got for k in (*ints, "dtype")):
                continue
            heads = got["num_attention_heads"]
            kv = got.get("num_kv_heads", heads)
            if heads % kv:
                c.add(
                    m,
                    "num_kv_heads",
                    join(path, "num_kv_heads"),
                    f"num_attention_heads ({heads}) must be a multiple of num_kv_heads ({kv})",
                )
                continue
            if "head_dim" not in got and got["hidden_size"] % heads:
                c.add(
                    m,
                    "hidden_size",
                    join(path, "hidden_size"),
                    f"hidden_size ({got['hidden_size']}) is not divisible by num_attention_heads ({heads}); "
                    "give head_dim",
                )
                continue
            dtype = got.get("dtype", "bfloat16")
            out[str(model_id)] = BaseModel(
                id=str(model_id),
                name=got.get("name", str(model_id)),
                hidden_size=got["hidden_size"],
                intermediate_size=got["intermediate_size"],
                num_layers=got["num_layers"],
                num_attention_heads=heads,
                num_kv_heads=kv,
                head_dim=got.get("head_dim", got["hidden_size"] // heads),
                dtype=DTYPE_ALIASES.get(dtype, dtype),
            )
        return out

    # hosts and groups --------------------------------------------------------------------------------
    def _hosts(self, doc: LDict, defaults: dict[str, Any], base_models: dict[str, BaseModel]) -> list[Host]:
        c = self.c
        hosts: list[Host] = []
        groups = c.mapping(doc.get("groups"), doc, "groups", "groups", allow_null=True) if "groups" in doc else None
        for group_name, value in (groups or {}).items():
            path = f"groups.{group_name}"
            gm = c.mapping(value, groups, group_name, path)
            if gm is None:
                continue
            group_settings = self._settings(gm, groups, group_name, path, extra=("hosts", "engines"))
            settings = _inherit(defaults, group_settings)
            members = gm.get("hosts")
            if members is None:
                c.add(gm, None, path, "missing required key 'hosts'")
                continue
            entries: list[tuple[str, Any, Any, Any, str]] = []
            if isinstance(members, dict):
                for name, override in members.items():
                    entries.append((str(name), override, members, name, join(join(path, "hosts"), name)))
            elif isinstance(members, list):
                for i, name in enumerate(members):
                    if not isinstance(name, str):
                        c.add(members, i, f"{path}.hosts[{i}]", f"expected a host name, got {describe(name)}")
                        continue
                    entries.append((name, None, members, i, f"{path}.hosts[{i}]"))
            else:
                c.add(
                    gm,
                    "hosts",
                    join(path, "hosts"),
                    f"expected a mapping or list of host names, got {describe(members)}",
                )
                continue
            group_engines = gm.get("engines")
            for name, override, container, key, hpath in entries:
                om = c.mapping(override, container, key, hpath, allow_null=True)
                host_settings: dict[str, Any] = {}
                address = None
                extra_engines = None
                if om is not None:
                    host_settings = self._settings(om, container, key, hpath, extra=("address", "engines"))
                    address = c.string(om, "address", hpath) if "address" in om else None
                    extra_engines = om.get("engines")
                hosts.extend(
                    self._expand_host(
                        name,
                        container,
                        key,
                        hpath,
                        _inherit(settings, host_settings),
                        address,
                        [(group_engines, gm, f"{path}.engines"), (extra_engines, om, f"{hpath}.engines")],
                        str(group_name),
                        base_models,
                    )
                )
        section = doc.get("hosts")
        if "hosts" in doc and not isinstance(section, list):
            c.add(doc, "hosts", "hosts", f"expected a list of hosts, got {describe(section)}")
            section = []
        for i, value in enumerate(as_list(section)):
            path = f"hosts[{i}]"
            hm = c.mapping(value, section, i, path)
            if hm is None:
                continue
            host_settings = self._settings(hm, section, i, path, extra=("name", "address", "engines"))
            if not c.required(hm, path, ("name",)):
                continue
            name = c.string(hm, "name", path)
            if name is INVALID:
                continue
            address = c.string(hm, "address", path) if "address" in hm else None
            hosts.extend(
                self._expand_host(
                    name,
                    hm,
                    "name",
                    join(path, "name"),
                    _inherit(defaults, host_settings),
                    address,
                    [(hm.get("engines"), hm, f"{path}.engines")],
                    None,
                    base_models,
                )
            )
        seen: dict[str, str] = {}
        for host in hosts:
            if host.name in seen:
                self.c.problems.append(
                    _problem_at(
                        host.source, f"hosts: duplicate host name {host.name!r} (also defined at {seen[host.name]})"
                    )
                )
            else:
                seen[host.name] = host.source
        return hosts

    def _expand_host(
        self,
        pattern: str,
        container: Any,
        key: Any,
        path: str,
        settings: dict[str, Any],
        address: Any,
        engine_lists: list[tuple[Any, Any, str]],
        group: str | None,
        base_models: dict[str, BaseModel],
    ) -> list[Host]:
        c = self.c
        try:
            names = expand_hostname(pattern)
        except ValueError as exc:
            c.add(container, key, path, str(exc))
            return []
        file, line = where(container, key)
        source = f"{file}:{line}"
        bad = [n for n in names if not HOSTNAME_RE.match(n)]
        if bad:
            c.add(container, key, path, f"{bad[0]!r} is not a valid host name")
            return []
        if "provider" not in settings:
            c.add(container, key, path, f"host has no provider (set provider: one of {', '.join(PROVIDERS)})")
            return []
        if address is INVALID or settings["provider"] is INVALID:
            return []
        if address is not None and len(names) > 1 and "{host}" not in address:
            c.add(container, key, path, f"address {address!r} would be shared by {len(names)} hosts; use {{host}}")
            return []
        connection = settings.get("connection", "ssh")
        ssh = SshSettings(**settings.get("ssh", {}))
        hosts = []
        for index, name in enumerate(names):
            addr = address.replace("{host}", name) if address else name
            engines = []
            for raw, parent, epath in engine_lists:
                if raw is None:
                    continue
                if not isinstance(raw, list):
                    if index == 0:
                        c.add(parent, "engines", epath, f"expected a list of engines, got {describe(raw)}")
                    continue
                for j, ev in enumerate(raw):
                    engine = self._engine(
                        ev, raw, j, f"{epath}[{j}]", name, addr, settings, base_models, report=index == 0
                    )
                    if engine is not None:
                        engines.append(engine)
            seen: set[str] = set()
            for e in engines:
                if e.name in seen and index == 0:
                    self.c.problems.append(
                        _problem_at(e.source, f"engines: duplicate engine name {e.name!r} on host {name!r}")
                    )
                seen.add(e.name)
            hosts.append(
                Host(
                    name=name,
                    provider=settings["provider"],
                    connection=connection,
                    address=addr,
                    gpus=settings.get("gpus"),
                    gpu_model=settings.get("gpu"),
                    region=settings.get("region"),
                    site=settings.get("site"),
                    instance_type=settings.get("instance_type"),
                    group=group,
                    ssh=ssh,
                    nvidia_smi=settings.get("nvidia_smi", "nvidia-smi"),
                    engines=tuple(engines),
                    source=source,
                )
            )
        return hosts

    def _engine(
        self,
        value: Any,
        container: Any,
        key: Any,
        path: str,
        host: str,
        address: str,
        settings: dict[str, Any],
        base_models: dict[str, BaseModel],
        report: bool,
    ) -> Engine | None:
        # Group engines are resolved once per host; only the first host reports, so a mistake shows once.
        c = self.c if report else Checker()
        m = c.mapping(value, container, key, path)
        if m is None:
            return None
        allowed = (
            "name",
            "kind",
            "url",
            "base_model",
            "gpus",
            *ENGINE_TUNING,
            *slot_keys(),
        )
        c.keys(m, path, allowed, FORBIDDEN)
        if not c.required(m, path, ("name", "kind", "url", "base_model")):
            return None
        got = c.fields(
            m,
            path,
            {
                "name": lambda m, k, p: c.string(m, k, p, NAME_RE, "a valid engine name (letters, digits, . _ -)"),
                "kind": lambda m, k, p: c.choice(m, k, p, ENGINE_KINDS, "engine kind"),
                "url": c.string,
                "base_model": c.string,
                "gpus": lambda m, k, p: c.int_list(m, k, p),
                **{k: (lambda m, k, p: c.integer(m, k, p, minimum=1)) for k in slot_keys()},
            },
        )
        tuning = _inherit(settings, self._read_settings(m, path, c, ENGINE_TUNING))
        if any(k not in got for k in ("name", "kind", "url", "base_model")):
            return None
        ok = True
        if got["base_model"] not in base_models:
            known = ", ".join(sorted(base_models)) or "none defined"
            c.add(
                m,
                "base_model",
                join(path, "base_model"),
                f"{got['base_model']!r} is not a base model in this inventory (known: {known})",
            )
            ok = False
        url = _render_url(c, m, path, got["url"], host, address)
        ok = ok and url is not None
        kind = kind_of(got["kind"])
        own = (kind.gpu_slots_key, kind.host_slots_key)
        for other in slot_keys():
            if other in m and other not in own:
                c.add(
                    m,
                    other,
                    join(path, other),
                    f"{other} is not a {kind.name} setting; on {kind.name} use {equivalent_key(other, kind)}",
                )
                ok = False
        host_gpus = settings.get("gpus")
        gpus = got.get("gpus", [])
        if host_gpus is not None and "gpus" in got:
            for i, g in enumerate(gpus):
                if g >= host_gpus:
                    c.add(
                        m["gpus"],
                        i,
                        f"{path}.gpus[{i}]",
                        f"GPU index {g} is beyond this host's {host_gpus} GPUs (valid: 0..{host_gpus - 1})",
                    )
                    ok = False
        max_rank = tuning.get("max_lora_rank")
        gpu_slots = got.get(kind.gpu_slots_key, kind.gpu_slots_default)
        host_slots = got.get(kind.host_slots_key, gpu_slots if kind.host_slots_default_is_gpu else None)
        if host_slots is not None and host_slots < gpu_slots:
            c.add(
                m,
                kind.host_slots_key,
                join(path, kind.host_slots_key),
                f"must be at least {kind.gpu_slots_key} ({gpu_slots}), as {kind.title} requires; got {host_slots}",
            )
            ok = False
        if max_rank is None:
            max_rank = kind.max_rank_default
        elif kind.ranks is not None and max_rank not in kind.ranks:
            where_key = "max_lora_rank" if "max_lora_rank" in m else None
            c.add(
                m,
                where_key,
                join(path, "max_lora_rank"),
                f"{kind.title} accepts max_lora_rank {', '.join(map(str, kind.ranks))}; got {max_rank}",
            )
            ok = False
        if not ok:
            return None
        file, line = where(container, key)
        budget = tuning.get("lora_budget_mb")
        return Engine(
            host=host,
            name=got["name"],
            kind=kind.name,
            url=url or "",
            base_model=got["base_model"],
            gpus=tuple(gpus),
            gpu_slots=gpu_slots,
            host_slots=host_slots,
            max_lora_rank=max_rank,
            lora_budget_bytes=None if budget is None else int(budget * MIB),
            api_key_env=tuning.get("api_key_env"),
            load=LoadModel(
                load_fixed_ms=tuning.get("load_fixed_ms", 15.0),
                disk_gbps=tuning.get("disk_gbps", 3.0),
                h2d_gbps=tuning.get("h2d_gbps", 25.0),
            ),
            request_timeout_s=tuning.get("request_timeout_s", 30.0),
            source=f"{file}:{line}",
        )

    # adapters ----------------------------------------------------------------------------------------
    def _adapters(self, doc: LDict, base_models: dict[str, BaseModel], tenants: set[str] | None) -> dict[str, Adapter]:
        c = self.c
        out: dict[str, Adapter] = {}
        section = doc.get("adapters")
        if "adapters" in doc and not isinstance(section, list):
            c.add(doc, "adapters", "adapters", f"expected a list of adapters, got {describe(section)}")
            return out
        for i, value in enumerate(as_list(section)):
            path = f"adapters[{i}]"
            m = c.mapping(value, section, i, path)
            if m is None:
                continue
            c.keys(
                m,
                path,
                ("id", "base_model", "path", "rank", "alpha", "target_modules", "tenants", "files", "description"),
                FORBIDDEN,
            )
            if not c.required(m, path, ("id", "base_model", "path")):
                continue
            got = c.fields(
                m,
                path,
                {
                    "id": lambda m, k, p: c.string(m, k, p, NAME_RE, "a valid adapter id (letters, digits, . _ -)"),
                    "base_model": c.string,
                    "path": c.string,
                    "files": c.string,
                    "description": c.string,
                    "rank": lambda m, k, p: c.integer(m, k, p, minimum=1),
                    "alpha": lambda m, k, p: c.number(m, k, p, positive=True),
                    "target_modules": c.string_list,
                    "tenants": c.string_list,
                },
            )
            if any(
                k in m and k not in got
                for k in ("id", "base_model", "path", "rank", "files", "target_modules", "tenants")
            ):
                continue
            adapter_id = got["id"]
            if adapter_id in out:
                c.add(
                    m,
                    "id",
                    join(path, "id"),
                    f"duplicate adapter id {adapter_id!r} (first at {out[adapter_id].source})",
                )
                continue
            base = base_models.get(got["base_model"])
            if base is None:
                known = ", ".join(sorted(base_models)) or "none defined"
                c.add(
                    m,
                    "base_model",
                    join(path, "base_model"),
                    f"{got['base_model']!r} is not a base model in this inventory (known: {known})",
                )
                continue
            for j, tenant in enumerate(got.get("tenants", [])):
                if tenants is not None and tenant not in tenants:
                    c.add(m["tenants"], j, f"{path}.tenants[{j}]", f"{tenant!r} is not a tenant in this inventory")
            sized = self._size(m, path, got, base)
            if sized is None:
                continue
            rank, modules, size, source = sized
            file, line = where(section, i)
            out[adapter_id] = Adapter(
                id=adapter_id,
                base_model=base.id,
                path=got["path"],
                rank=rank,
                target_modules=modules,
                tenants=tuple(got.get("tenants", ())),
                files=got.get("files"),
                size_bytes=size,
                size_source=source,
                source=f"{file}:{line}",
            )
        return out

    def _size(
        self, m: LDict, path: str, got: dict[str, Any], base: BaseModel
    ) -> tuple[int, tuple[str, ...], int, str] | None:
        c = self.c
        modules = tuple(got.get("target_modules", ("q_proj", "v_proj")))
        rank = got.get("rank")
        if "files" in got:
            folder = Path(os.path.expanduser(got["files"]))
            if not folder.is_absolute():
                folder = Path(m.file).parent / folder
            try:
                measured = sizing.measure_adapter(folder)
            except sizing.SizingError as exc:
                c.add(m, "files", join(path, "files"), str(exc))
                return None
            if rank is not None and measured.rank is not None and rank != measured.rank:
                c.add(
                    m,
                    "rank",
                    join(path, "rank"),
                    f"rank {rank} disagrees with r={measured.rank} in {folder}/adapter_config.json",
                )
                return None
            rank = rank or measured.rank
            if "target_modules" not in got and measured.target_modules:
                modules = measured.target_modules
            if rank is None:
                c.add(m, None, path, "missing 'rank' (and adapter_config.json gives no r)")
                return None
            return rank, modules, measured.size_bytes, "measured"
        if rank is None:
            c.add(m, None, path, "missing required key 'rank' (or give 'files' to read it from adapter_config.json)")
            return None
        try:
            size = sizing.estimate_bytes(base, rank, modules)
        except sizing.SizingError as exc:
            c.add(m, "target_modules", join(path, "target_modules"), str(exc))
            return None
        return rank, sizing.expand_modules(modules), size, "estimated"

    @staticmethod
    def _declared_adapters(doc: LDict) -> set[str]:
        """Every id written down, valid or not, so one bad adapter does not cascade into more errors."""
        return {a["id"] for a in as_list(doc.get("adapters")) if isinstance(a, dict) and isinstance(a.get("id"), str)}

    # tenants -----------------------------------------------------------------------------------------
    def _tenants(self, doc: LDict, adapters: set[str]) -> dict[str, Tenant]:
        c = self.c
        out: dict[str, Tenant] = {}
        section = (
            c.mapping(doc.get("tenants"), doc, "tenants", "tenants", allow_null=True) if "tenants" in doc else None
        )
        for name, value in (section or {}).items():
            path = f"tenants.{name}"
            m = c.mapping(value, section, name, path, allow_null=True)
            if m is None and value is not None:
                continue
            got: dict[str, Any] = {}
            workflows: list[tuple[str, ...]] = []
            if m is not None:
                c.keys(m, path, ("tier", "pinned", "workflows", "weight", "description"))
                got = c.fields(
                    m, path, {"tier": c.string, "description": c.string, "pinned": c.string_list, "weight": c.number}
                )
                for j, adapter_id in enumerate(got.get("pinned", [])):
                    if adapter_id not in adapters:
                        c.add(m["pinned"], j, f"{path}.pinned[{j}]", _unknown_adapter(adapter_id, adapters))
                if "workflows" in m:
                    workflows = self._workflows(m, path, adapters)
            out[str(name)] = Tenant(
                name=str(name), tier=got.get("tier"), pinned=tuple(got.get("pinned", ())), workflows=tuple(workflows)
            )
        return out

    def _workflows(self, m: LDict, path: str, adapters: set[str]) -> list[tuple[str, ...]]:
        c = self.c
        raw = m["workflows"]
        wpath = join(path, "workflows")
        if not isinstance(raw, list):
            c.add(m, "workflows", wpath, f"expected a list of adapter chains, got {describe(raw)}")
            return []
        out = []
        for k, chain in enumerate(raw):
            if not isinstance(chain, list) or not chain or not all(isinstance(a, str) for a in chain):
                c.add(raw, k, f"{wpath}[{k}]", f"expected a list of adapter ids, got {describe(chain)}")
                continue
            for j, adapter_id in enumerate(chain):
                if adapter_id not in adapters:
                    c.add(chain, j, f"{wpath}[{k}][{j}]", _unknown_adapter(adapter_id, adapters))
            out.append(tuple(chain))
        return out

    # gateway logs ------------------------------------------------------------------------------------
    def _gateway(self, doc: LDict) -> list[LogSource]:
        c = self.c
        if "gateway" not in doc:
            return []
        gm = c.mapping(doc["gateway"], doc, "gateway", "gateway", allow_null=True)
        if gm is None:
            return []
        c.keys(gm, "gateway", ("logs",))
        logs = gm.get("logs")
        if logs is None:
            return []
        if not isinstance(logs, list):
            c.add(gm, "logs", "gateway.logs", f"expected a list of log sources, got {describe(logs)}")
            return []
        out = []
        for i, value in enumerate(logs):
            path = f"gateway.logs[{i}]"
            m = c.mapping(value, logs, i, path)
            if m is None:
                continue
            c.keys(m, path, ("path", "format", "log_format", "fields"))
            if not c.required(m, path, ("path", "format", "fields")):
                continue
            got = c.fields(
                m,
                path,
                {
                    "path": c.string,
                    "log_format": c.string,
                    "format": lambda m, k, p: c.choice(m, k, p, ("jsonl", "nginx"), "log format"),
                },
            )
            fm = c.mapping(m["fields"], m, "fields", join(path, "fields"))
            if fm is None or "format" not in got or "path" not in got:
                continue
            c.keys(fm, join(path, "fields"), LOG_FIELDS)
            fields = c.fields(fm, join(path, "fields"), {k: c.string for k in LOG_FIELDS})
            if "adapter" not in fm:
                c.add(fm, None, join(path, "fields"), "missing required key 'adapter' (the field naming the adapter)")
                continue
            if got["format"] == "nginx":
                if "log_format" not in m:
                    c.add(m, None, path, "nginx logs need 'log_format' (paste the log_format string from nginx.conf)")
                    continue
                if "log_format" not in got:
                    continue
                variables = set(re.findall(r"\$([A-Za-z0-9_]+)", got["log_format"]))
                if not variables:
                    c.add(m, "log_format", join(path, "log_format"), "has no $variables")
                    continue
                fields = {k: v.lstrip("$") for k, v in fields.items()}
                for k, v in fields.items():
                    if v not in variables:
                        c.add(
                            fm,
                            k,
                            join(join(path, "fields"), k),
                            f"${v} is not in log_format (it has: {', '.join('$' + x for x in sorted(variables))})",
                        )
                if "time" not in fields:
                    for candidate in ("time_iso8601", "time_local", "msec"):
                        if candidate in variables:
                            fields["time"] = candidate
                            break
            elif "log_format" in m:
                c.add(m, "log_format", join(path, "log_format"), "only nginx logs take a log_format")
            out.append(
                LogSource(path=got["path"], format=got["format"], fields=fields, log_format=got.get("log_format"))
            )
        return out

    def _cross_warnings(self, hosts: list[Host], adapters: dict[str, Adapter]) -> None:
        engines = [e for h in hosts for e in h.engines]
        for adapter in adapters.values():
            serving = [e for e in engines if e.base_model == adapter.base_model]
            if not serving:
                self.warnings.append(f"adapter {adapter.id}: no engine serves base model {adapter.base_model}")
                continue
            ranked = [e for e in serving if e.max_lora_rank is None or adapter.rank <= e.max_lora_rank]
            if not ranked:
                self.warnings.append(
                    f"adapter {adapter.id}: rank {adapter.rank} exceeds max_lora_rank on every engine of "
                    f"{adapter.base_model}"
                )


def _inherit(parent: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Child settings win; `ssh` blocks merge key by key so a host can change one field."""
    out = dict(parent)
    for key, value in child.items():
        if key == "ssh" and isinstance(out.get("ssh"), dict):
            out["ssh"] = {**out["ssh"], **value}
        else:
            out[key] = value
    return out


def _render_url(c: Checker, m: LDict, path: str, template: str, host: str, address: str) -> str | None:
    try:
        names = {fname for _, fname, _, _ in string.Formatter().parse(template) if fname is not None}
    except ValueError:
        c.add(m, "url", join(path, "url"), f"{template!r} has unbalanced braces")
        return None
    unknown = names - {"host", "name"}
    if unknown:
        c.add(
            m,
            "url",
            join(path, "url"),
            f"unknown placeholder {{{sorted(unknown)[0]}}} (known: {{host}} = the host's address, {{name}} = its name)",
        )
        return None
    url = template.replace("{host}", address).replace("{name}", host)
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        c.add(m, "url", join(path, "url"), f"{url!r} has an invalid port")
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        c.add(m, "url", join(path, "url"), f"{url!r} is not an http:// or https:// URL with a host")
        return None
    del port
    return url.rstrip("/")


def _unknown_adapter(adapter_id: str, adapters: set[str]) -> str:
    close = difflib.get_close_matches(adapter_id, sorted(adapters), n=1)
    tip = f"; did you mean {close[0]!r}?" if close else ""
    return f"{adapter_id!r} is not an adapter in this inventory{tip}"


def _problem_at(source: str, message: str) -> Problem:
    file, _, line = source.rpartition(":")
    return Problem(file, int(line) if line.isdigit() else None, "", message)
