"""Every `--json` shape in one module: what a command prints is decided here and documented in each docstring.

The shapes are stable: a key is added, never renamed or removed. docs/cli.md lists them (generated from these
docstrings by `lorafleet.cli.reference`).
"""

from __future__ import annotations

from typing import Any

from lorafleet.actions.runner import WarmResult
from lorafleet.daemon.journaling import Summary
from lorafleet.inventory.model import Engine, Host, Inventory
from lorafleet.inventory.report import summarize_providers
from lorafleet.logs.records import LogTally
from lorafleet.measures import per_request
from lorafleet.plan.report import PlanReport
from lorafleet.probe.snapshot import HostVram
from lorafleet.replay.driver import PolicyResult
from lorafleet.store.db import ActionRow
from lorafleet.store.journal import Outcomes
from lorafleet.store.stats import StatsReport


def inventory_check(inv: Inventory) -> dict[str, Any]:
    """`inventory check --json`: `{"ok", "fleet", "sources", "providers": [{"provider", "hosts", "gpus", "engines"}],
    "adapters", "warnings"}` — `adapters` is a count."""
    return {
        "ok": True,
        "fleet": inv.fleet,
        "sources": list(inv.sources),
        "providers": [
            {"provider": r.provider, "hosts": r.hosts, "gpus": r.gpus, "engines": r.engines}
            for r in summarize_providers(inv)
        ],
        "adapters": len(inv.adapters),
        "warnings": list(inv.warnings),
    }


def inventory_show(inv: Inventory) -> dict[str, Any]:
    """`inventory show --json`: `{"fleet", "sources", "hosts": [{"name", "provider", "group", "connection", "address",
    "region", "site", "instance_type", "gpu", "gpus", "engines": [{"name", "key", "kind", "url", "base_model", "gpus",
    "gpu_slots", "host_slots", "max_lora_rank", "lora_budget_bytes", "api_key_env", "api_key_file", "load_model"}]}],
    "base_models", "adapters": [{"id", "base_model", "rank", "target_modules", "path", "tenants", "size_bytes",
    "size_source"}], "tenants": [{"name", "tier", "pinned", "workflows"}], "discovery": [{"name", "namespace",
    "selector", "port", "scheme", "kind", "base_model"}], "warnings"}` — hosts after range expansion; with
    --discover, each discovery group is also a host holding the engines found."""
    return {
        "fleet": inv.fleet,
        "sources": list(inv.sources),
        "hosts": [_host(h) for h in inv.hosts],
        "base_models": [
            {
                "id": b.id,
                "name": b.name,
                "hidden_size": b.hidden_size,
                "intermediate_size": b.intermediate_size,
                "num_layers": b.num_layers,
                "num_attention_heads": b.num_attention_heads,
                "num_kv_heads": b.num_kv_heads,
                "head_dim": b.head_dim,
                "dtype": b.dtype,
            }
            for b in inv.base_models.values()
        ],
        "adapters": [
            {
                "id": a.id,
                "base_model": a.base_model,
                "rank": a.rank,
                "target_modules": list(a.target_modules),
                "path": a.path,
                "tenants": list(a.tenants),
                "size_bytes": a.size_bytes,
                "size_source": a.size_source,
            }
            for a in inv.adapters.values()
        ],
        "tenants": [
            {"name": t.name, "tier": t.tier, "pinned": list(t.pinned), "workflows": [list(w) for w in t.workflows]}
            for t in inv.tenants.values()
        ],
        "discovery": [
            {
                "name": g.name,
                "namespace": g.namespace,
                "selector": g.selector,
                "port": g.port,
                "scheme": g.scheme,
                "kind": g.template.kind,
                "base_model": g.template.base_model,
            }
            for g in inv.discovery
        ],
        "warnings": list(inv.warnings),
    }


def _host(h: Host) -> dict[str, Any]:
    return {
        "name": h.name,
        "provider": h.provider,
        "group": h.group,
        "connection": h.connection,
        "address": h.address,
        "region": h.region,
        "site": h.site,
        "instance_type": h.instance_type,
        "gpu": h.gpu_model,
        "gpus": h.gpus,
        "engines": [_engine(e) for e in h.engines],
    }


def _engine(e: Engine) -> dict[str, Any]:
    return {
        "name": e.name,
        "key": e.key,
        "kind": e.kind,
        "url": e.url,
        "base_model": e.base_model,
        "gpus": list(e.gpus),
        "gpu_slots": e.gpu_slots,
        "host_slots": e.host_slots,
        "max_lora_rank": e.max_lora_rank,
        "lora_budget_bytes": e.lora_budget_bytes,
        "api_key_env": e.api_key_env,
        "api_key_file": e.api_key_file,
        "load_model": {
            "load_fixed_ms": e.load.load_fixed_ms,
            "disk_gbps": e.load.disk_gbps,
            "h2d_gbps": e.load.h2d_gbps,
        },
    }


def vram(rows: list[HostVram]) -> dict[str, Any]:
    """`vram --json`: `{"hosts": [{"name", "provider", "status", "error", "gpus": [{"index", "uuid", "name",
    "total_bytes", "used_bytes", "free_bytes", "mig"}]}]}` — memory in bytes, unknown values null."""
    return {
        "hosts": [
            {
                "name": r.name,
                "provider": r.provider,
                "status": r.status,
                "error": r.error,
                "gpus": [
                    {
                        "index": g.index,
                        "uuid": g.uuid,
                        "name": g.name,
                        "total_bytes": g.total_bytes,
                        "used_bytes": g.used_bytes,
                        "free_bytes": g.free_bytes,
                        "mig": g.mig,
                    }
                    for g in r.gpus
                ],
            }
            for r in rows
        ]
    }


def replay(results: list[PolicyResult], tally: LogTally) -> dict[str, Any]:
    """`replay --json`: `{"policies": [{"policy", "visibility", "requests", "hits", "late", "misses", "hit_ratio",
    "gpu_hits", "cold_ms_total", "cold_ms_p50", "cold_ms_p95", "cold_ms_p99", "loads", "prefetch_loads",
    "prefetch_used",
    "wasted_prefetches", "budget_violations", "loader_utilization", "unserved", "headroom_captured", "touches",
    "touches_per_request", "unloads", "bypassed"}], "log": {"lines",
    "adapter_requests", "base_requests", "unknown_requests", "timed_requests", "unplaced_requests", "bad_lines",
    "bad_reasons"}}`
    (`timed_requests`: those whose line gave a duration, so their arrival is known apart from their end;
    `unplaced_requests`: adapter requests whose line names no engine of the inventory, which replay routes itself;
    `bypassed`: misses that found every slot of their engine held by loads in flight, charged one cold load
    without queueing — 0 under `log` visibility, whose stand-in engines queue every miss; where it is not 0 the
    loaders are saturated and the table says the figures are optimistic)."""
    return {
        "policies": [
            {
                "policy": r.policy,
                "visibility": r.visibility,
                "requests": r.requests,
                "hits": r.hits,
                "late": r.late,
                "misses": r.misses,
                "hit_ratio": round(r.hit_ratio, 6),
                "gpu_hits": r.gpu_hits,
                "cold_ms_total": round(r.cold_ms_total, 3),
                "cold_ms_p50": round(r.cold_ms_percentile(50), 3),
                "cold_ms_p95": round(r.cold_ms_percentile(95), 3),
                "cold_ms_p99": round(r.cold_ms_percentile(99), 3),
                "loads": r.loads,
                "prefetch_loads": r.prefetch_loads,
                "prefetch_used": r.prefetch_used,
                "wasted_prefetches": r.wasted_prefetches,
                "budget_violations": r.budget_violations,
                "loader_utilization": round(r.loader_utilization, 6),
                "unserved": r.unserved,
                "headroom_captured": _round(r.headroom),
                "touches": r.touches,
                "touches_per_request": round(per_request(r.touches, r.requests), 6),
                "unloads": r.unloads,
                "bypassed": r.bypassed,
            }
            for r in results
        ],
        "log": {
            "lines": tally.lines,
            "adapter_requests": tally.adapter_requests,
            "base_requests": tally.base_requests,
            "unknown_requests": tally.unknown_requests,
            "timed_requests": tally.timed,
            "unplaced_requests": tally.unplaced,
            "bad_lines": tally.bad_lines,
            "bad_reasons": dict(sorted(tally.bad_reasons.items())),
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def warm(results: list[WarmResult], dry_run: bool) -> dict[str, Any]:
    """`warm --json`: `{"dry_run", "results": [{"adapter", "engine", "action", "ok", "ms", "error", "primed"}]}` — one
    row per (adapter, engine) in the order they were asked for; with --dry-run the actions are would-load,
    would-re-warm, already-warm, would-unpin (with --unpin) or skipped (the pin limit, no room, not pinned)."""
    return {
        "dry_run": dry_run,
        "results": [
            {
                "adapter": r.adapter,
                "engine": r.engine,
                "action": r.action,
                "ok": r.ok,
                "ms": r.ms,
                "error": r.error,
                "primed": r.primed,
            }
            for r in results
        ],
    }


def plan(inv: Inventory, report: PlanReport) -> dict[str, Any]:
    """`plan --json`: `{"engines": [{"engine", "adapters", "slots_used", "slots", "bytes_used", "budget_bytes"}],
    "expected_hit_ratio", "unplaced": [{"adapter", "reason"}], "flags": [{"engine", "flags", "reserved_bytes",
    "free_bytes", "fits"}], "changes": {"loads", "evictions"}, "sizing": {"target", "points", "recommended_slots"},
    "flags_slots"}` — flags empty without --recommend-flags, changes null without --diff, sizing null without
    --target-hit-ratio; points are `[{"slots", "hit_ratio"}]`; `flags_slots` is the slot count the flags are for
    (the sizing's recommendation), null when they are for the engines as they are. With --apply the same object
    has `"applied"`: what warming the placements did, as `warm --json` gives it (one JSON document in all)."""
    planned, changes, sizing = report.planned, report.changes, report.sizing
    held: dict[str, list[str]] = {}
    for p in planned.placements:
        held.setdefault(p.engine, []).append(p.adapter)
    return {
        "engines": [
            {
                "engine": e.key,
                "adapters": held.get(e.key, []),
                "slots_used": len(held.get(e.key, [])),
                "slots": e.slot_cap,
                "bytes_used": sum(inv.adapters[a].size_bytes for a in held.get(e.key, [])),
                "budget_bytes": e.lora_budget_bytes,
            }
            for e in inv.engines
        ],
        "expected_hit_ratio": round(planned.expected_hit_ratio, 6),
        "unplaced": [{"adapter": a, "reason": r} for a, r in planned.unplaced],
        "flags": [
            {
                "engine": f.engine,
                "flags": f.flags,
                "reserved_bytes": f.reserved_bytes,
                "free_bytes": f.free_bytes,
                "fits": f.fits,
            }
            for f in report.flags
        ],
        "changes": None
        if changes is None
        else {
            "loads": [{"engine": p.engine, "adapter": p.adapter} for p in changes[0]],
            "evictions": [{"engine": p.engine, "adapter": p.adapter} for p in changes[1]],
        },
        "sizing": None
        if sizing is None
        else {
            "target": sizing.target,
            "points": [{"slots": n, "hit_ratio": round(r, 6)} for n, r in sizing.points],
            "recommended_slots": sizing.recommended,
        },
        "flags_slots": report.flags_slots,
    }


DAEMON_KEYS = (
    "lines",
    "bad_lines",
    "requests",
    "hits",
    "late",
    "misses",
    "unserved",
    "cold_ms_paid",
    "cold_ms_avoided",
    "loads",
    "prefetch_loads",
    "prefetch_used",
    "wasted_prefetches",
    "touches",
    "unloads",
    "evictions",
    "failed",
    "reconciles",
    "engine_restarts",
    "vanished",
    "commits",
    "unknown_requests",
    "unread_logs",
    "recounted",
)
ALONE_KEYS = ("requests", "hits", "late", "misses", "cold_ms_paid", "loads")


def daemon(summary: Summary, policy: str, shadow: bool, state: str) -> dict[str, Any]:
    """`daemon --json` (printed when it stops): `{"policy", "shadow", "state", "hit_ratio", "lines", "bad_lines",
    "requests", "hits", "late", "misses", "unserved", "cold_ms_paid", "cold_ms_avoided", "loads", "prefetch_loads",
    "prefetch_used", "wasted_prefetches", "touches", "touches_per_request", "unloads", "evictions", "failed",
    "reconciles", "engine_restarts", "vanished", "commits", "unknown_requests", "unread_logs", "recounted",
    "unknown_names", "engines_alone": {"hit_ratio", "requests", "hits", "late", "misses", "cold_ms_paid", "loads"}}` —
    counts over this run; `unread_logs` counts files matching the logs' patterns that could not be opened at the end
    (their lines were not read: too many open files, no permission); `recounted` the requests counted from their
    log line that settling counted again as another outcome (the engines, replayed in arrival order, served them
    otherwise: the other counts, waits included, are already the settled ones);
    `touches_per_request` is touches per adapter request (the touch budget's unit); `state` is the journal's path;
    `unknown_names` maps the names read that the inventory does not know to how often (the ten most frequent);
    `engines_alone` is lru simulated over the same requests: what the engines do by themselves."""
    out: dict[str, Any] = {"policy": policy, "shadow": shadow, "state": state, "hit_ratio": round(summary.hit_ratio, 4)}
    for key in DAEMON_KEYS:
        value = getattr(summary, key)
        out[key] = round(value, 1) if isinstance(value, float) else value
        if key == "touches":
            out["touches_per_request"] = round(per_request(summary.touches, summary.requests), 6)
    top = sorted(summary.unknown_names.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    out["unknown_names"] = dict(top)
    alone = summary.engines_alone or summary
    out["engines_alone"] = {"hit_ratio": round(alone.hit_ratio, 4)} | {
        key: round(getattr(alone, key), 1) if key == "cold_ms_paid" else getattr(alone, key) for key in ALONE_KEYS
    }
    return out


def _outcome_fields(o: Outcomes) -> dict[str, Any]:
    return {
        "requests": o.requests,
        "hits": o.hits,
        "late": o.late,
        "misses": o.misses,
        "hit_ratio": round(o.hit_ratio, 6),
        "cold_ms_paid": round(o.cold_ms, 1),
        "cold_ms_avoided": round(o.avoided_ms, 1),
        "prefetch_used": o.prefetch_hits,
    }


def stats(report: StatsReport, top: int, lru_hit_ratio: float | None, tiers: dict[str, str | None]) -> dict[str, Any]:
    """`stats --json`: `{"window": {"since", "until"}, "overall": {"requests", "hits", "late", "misses", "hit_ratio",
    "cold_ms_paid", "cold_ms_avoided", "prefetch_used", "prefetch_wasted", "touches", "touches_per_request",
    "gpu_hits", "prefetch_loads", "lru_hit_ratio", "circuit_opened", "load_ms"}, "by": [{"key", "requests", "hits",
    "late", "misses", "hit_ratio", "cold_ms_paid", "cold_ms_avoided", "prefetch_used", "prefetch_wasted", "touches",
    "touches_per_request", "tier"}], "log": {"lines", "bad", "unknown"}}` — `log` counts the lines read whose
    requests fall in the window (`unknown`: naming adapters the inventory does not know, never loaded); `by` holds
    the `--top` keys needing attention most (lowest hit ratio, then most cold ms); `touches_per_request` is per
    adapter request, the touch budget's unit (per engine, what the budget caps); `prefetch_wasted`, `touches` and
    `touches_per_request` are null by tenant (actions are per engine and adapter); `load_ms` maps an engine to
    `{"loads", "p50", "p99"}` of its measured loads; `lru_hit_ratio` is replay's `lru` over the same window of the
    gateway logs (null when they cannot be read); times are UTC ISO-8601."""
    window, overall, actions, rows, per_key = report.window, report.overall, report.actions, report.rows, report.per_key
    overall_out = _outcome_fields(overall)
    overall_out.update(
        {
            "prefetch_wasted": actions.unused_prefetches,
            "touches": actions.touches,
            "touches_per_request": round(per_request(actions.touches, overall.requests), 6),
            "gpu_hits": overall.gpu_hits,
            "prefetch_loads": actions.prefetch_loads,
            "lru_hit_ratio": None if lru_hit_ratio is None else round(lru_hit_ratio, 6),
            "circuit_opened": actions.refused_engines,
            "load_ms": {e: {"loads": n, "p50": p50, "p99": p99} for e, (n, p50, p99) in actions.load_ms.items()},
        }
    )
    ranked = sorted(rows, key=lambda r: (r[1].hit_ratio if r[1].requests else 1.0, -r[1].cold_ms, r[0]))
    by = []
    for key, o in ranked[:top]:
        row = {"key": key, **_outcome_fields(o)}
        wasted, touches = per_key.get(key, (0, 0)) if per_key is not None else (None, None)
        ratio = None if touches is None else round(per_request(touches, o.requests), 6)
        row.update(
            {"prefetch_wasted": wasted, "touches": touches, "touches_per_request": ratio, "tier": tiers.get(key)}
        )
        by.append(row)
    log = {"lines": report.log.lines, "bad": report.log.bad, "unknown": report.log.unknown}
    return {
        "window": {"since": window.since_at, "until": window.until_at},
        "overall": overall_out,
        "by": by,
        "log": log,
    }


def stats_loads(lines: list[ActionRow]) -> dict[str, Any]:
    """`stats loads --json`: `{"actions": [{"at", "source", "engine", "adapter", "action", "ok", "ms", "reason",
    "error", "unused_prefetch", "count"}]}` — oldest first; `source` is warm, unload, daemon or daemon-shadow; `count`
    above 1: that many alike actions counted in the minute starting at `at` (touches, evictions by the engine's
    LRU, shadow's simulated actions are counted, not listed)."""
    return {
        "actions": [
            {
                "at": a.at,
                "source": a.source,
                "engine": a.engine,
                "adapter": a.adapter,
                "action": a.action,
                "ok": a.ok,
                "ms": a.ms,
                "reason": a.reason,
                "error": a.error,
                "unused_prefetch": a.unused_prefetch,
                "count": a.count,
            }
            for a in lines
        ]
    }


SHAPES = (inventory_check, inventory_show, vram, warm, replay, plan, daemon, stats, stats_loads)
