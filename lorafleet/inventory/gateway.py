"""The gateway's access logs: where each one is, its format, and where each request field lives in it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lorafleet.errors import InputError
from lorafleet.inventory import schema
from lorafleet.inventory.fields import Checker, describe, join
from lorafleet.inventory.model import Inventory, LogSource
from lorafleet.inventory.yamlsource import LDict

NGINX_TIME_VARIABLES = ("time_iso8601", "time_local", "msec")  # each the time the line is written: the end
# A request's duration, by which its arrival is found from its end: the whole request's, else the upstream's.
NGINX_DURATION_VARIABLES = ("request_time", "upstream_response_time")
NGINX_ID_VARIABLES = ("request_id",)


def read_gateway(c: Checker, doc: LDict) -> list[LogSource]:
    if "gateway" not in doc:
        return []
    gm = c.mapping(doc["gateway"], doc, "gateway", "gateway", allow_null=True)
    if gm is None:
        return []
    schema.GATEWAY.check_keys(c, gm, "gateway")
    logs = gm.get("logs")
    if logs is None:
        return []
    if not isinstance(logs, list):
        c.add(gm, "logs", "gateway.logs", f"expected a list of log sources, got {describe(logs)}")
        return []
    out = []
    for i, value in enumerate(logs):
        source = _log_source(c, value, logs, f"gateway.logs[{i}]", i)
        if source is not None:
            out.append(source)
    return out


def _log_source(c: Checker, value: object, logs: list[object], path: str, i: int) -> LogSource | None:
    entry = schema.LOG_SOURCE.read_entry(c, value, logs, i, path)
    if entry is None:
        return None
    m, got = entry
    fpath = join(path, "fields")
    fm = c.mapping(m["fields"], m, "fields", fpath)
    if fm is None or "format" not in got or "path" not in got:
        return None
    schema.LOG_FIELDS.check_keys(c, fm, fpath)
    fields = schema.LOG_FIELDS.read(c, fm, fpath)
    if "adapter" not in fm:
        c.add(fm, None, fpath, "missing required key 'adapter' (the field naming the adapter)")
        return None
    if got["format"] == "nginx":
        if "log_format" not in m:
            c.add(m, None, path, "nginx logs need 'log_format' (paste the log_format string from nginx.conf)")
            return None
        if "log_format" not in got:
            return None
        variables = set(re.findall(r"\$([A-Za-z0-9_]+)", got["log_format"]))
        if not variables:
            c.add(m, "log_format", join(path, "log_format"), "has no $variables")
            return None
        fields = {k: v.lstrip("$") for k, v in fields.items()}
        for k, v in fields.items():
            if v not in variables:
                have = ", ".join("$" + x for x in sorted(variables))
                c.add(fm, k, join(fpath, k), f"${v} is not in log_format (it has: {have})")
        for field, names in (
            ("time", NGINX_TIME_VARIABLES),
            ("duration_s", NGINX_DURATION_VARIABLES),
            ("request_id", NGINX_ID_VARIABLES),
        ):
            found = next((v for v in names if v in variables), None)
            if field not in fields and found is not None:
                fields[field] = found
    elif "log_format" in m:
        c.add(m, "log_format", join(path, "log_format"), "only nginx logs take a log_format")
    return LogSource(path=got["path"], format=got["format"], fields=fields, log_format=got.get("log_format"))


def log_patterns(inventory: Inventory, override: tuple[str, ...] = ()) -> list[str]:
    """The files (or globs) to follow: `override`, else the inventory's gateway.logs, a relative path taken
    from the inventory file's folder (the inventory and its logs move together)."""
    if override:
        return [os.path.abspath(p) for p in override]
    base = Path(inventory.sources[0]).parent if inventory.sources else Path.cwd()
    patterns = [os.path.abspath(base / p) for p in (s.path for s in inventory.gateway_logs)]
    if not patterns:
        raise InputError("no access log to follow", hint="list gateway.logs in the inventory, or pass --log PATH")
    return patterns
