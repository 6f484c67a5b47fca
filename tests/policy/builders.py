"""Small inventories and request streams for policy and replay tests."""

from __future__ import annotations

from pathlib import Path

from lorafleet.drive.session import KEEP, LOADED, Counts, Recounted, Session
from lorafleet.inventory import Inventory, load_inventory
from lorafleet.policy.baselines import LruPolicy
from lorafleet.policy.core import PREFETCH, TOUCH, Decision, Policy, PolicyCore
from lorafleet.policy.events import ADAPTER, RequestEvent

BASE = "  m: {hidden_size: 64, intermediate_size: 128, num_layers: 2, num_attention_heads: 4}\n"
TWO_VLLM = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 4}] * 2  # h/e0 and h/e1, alike


def make_inventory(
    tmp: Path,
    adapters: int = 8,
    engines: list[dict[str, object]] | None = None,
    zero_load: bool = False,
    ranks: list[int] | None = None,
    tenants: dict[str, str] | None = None,
    name: str = "inv.yaml",
) -> Inventory:
    """One host; engines given as dicts of inventory keys (default one vLLM engine holding 3)."""
    engines = engines or [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 3}]
    lines = ["defaults:"]
    if zero_load:
        lines += ["  load_fixed_ms: 0", "  disk_gbps: 1.0e+15", "  h2d_gbps: 1.0e+15"]
    else:
        lines += ["  load_fixed_ms: 15", "  disk_gbps: 3", "  h2d_gbps: 25"]
    lines += ["base_models:", BASE.rstrip("\n"), "hosts:", "  - name: h", "    provider: onprem", "    engines:"]
    for i, spec in enumerate(engines):
        fields = {
            "name": f"e{i}",
            "url": f"http://127.0.0.1:{20000 + i}",
            "base_model": "m",
            "max_lora_rank": 64,
            **spec,
        }
        lines.append("      - {" + ", ".join(f"{k}: {v}" for k, v in fields.items()) + "}")
    lines.append("adapters:")
    for i in range(adapters):
        rank = (ranks or [8, 16, 32, 64])[i % len(ranks or [8, 16, 32, 64])]
        lines.append(f"  - {{id: a{i}, base_model: m, path: /a/a{i}, rank: {rank}}}")
    if tenants:
        lines.append("tenants:")
        lines += [f"  {t}: {spec}" for t, spec in tenants.items()]
    path = tmp / name
    path.write_text("\n".join(lines) + "\n")
    return load_inventory(path)


def stream(adapters: list[int], tenants: list[str] | None = None, gap_s: float = 1.0) -> list[RequestEvent]:
    return [
        RequestEvent(
            time=1000.0 + i * gap_s,
            kind=ADAPTER,
            adapter=f"a{a}",
            base_model="m",
            tenant=(tenants[i % len(tenants)] if tenants else "t"),
        )
        for i, a in enumerate(adapters)
    ]


def run_session(core: PolicyCore, events: list[RequestEvent], finish: bool = True) -> Counts:
    """The events through a simulated session on `core` (as replay runs it); its counts."""
    session = Session(core, simulate=True, answers=False)
    session.start(events[0].time)
    for event in events:
        session.request(event)
    if finish:
        session.finish()
    return session.counts


def full_engine(tmp: Path, touch_budget: float = 0.0) -> PolicyCore:
    """One vLLM engine of 4 slots holding a0..a3 (a0 least recently used), an lru core at this touch budget."""
    from lorafleet.policy.baselines import LruPolicy

    inv = make_inventory(tmp, adapters=6, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 4}])
    core = PolicyCore(inv, LruPolicy(), touch_budget=touch_budget)
    state = core.book.engines["h/e0"]
    for a in ("a0", "a1", "a2", "a3"):
        state.admit(a, core.sizes[a])
    return core


class Scripted(Policy):
    """Decides at set instants, each a wakeup of its own: (at, engine, adapter) a prefetch, or (at, engine, adapter,
    what) with what "prefetch", "pinned" (a pinned prefetch) or TOUCH (as the core touches before an eviction by
    the engine's own LRU)."""

    honours_pins = True

    def __init__(self, plan: list[tuple[float, str, str]] | list[tuple[float, str, str, str]]) -> None:
        self.plan = sorted((*step, "prefetch")[:4] for step in plan)

    def next_wakeup(self) -> float | None:
        return self.plan[0][0] if self.plan else None

    def tick(self, now: float) -> list[Decision]:
        decisions: list[Decision] = []
        while self.plan and self.plan[0][0] <= now:
            _, engine, adapter, what = self.plan.pop(0)
            state = self.core.book.engines[engine]
            if what == TOUCH:
                state.keep_all([adapter])
                decisions.append(Decision(TOUCH, engine, adapter, KEEP))
                continue
            order = lambda s=state: list(s.resident)  # noqa: E731
            decisions += self.core.load(now, engine, adapter, PREFETCH, order, pin=what == "pinned")
        return decisions


# --- a live session learning from log lines with durations, and its settling (drive/settling.py) ---------------
def timed_line(adapter: str, arrival: float, end: float, engine: str | None = None) -> RequestEvent:
    """A log line of tenant t written at its request's `end`, its duration known."""
    return RequestEvent(arrival, ADAPTER, adapter, tenant="t", base_model="m", seen=end, engine=engine)


def live_session(
    tmp: Path,
    engines: list[dict[str, object]] | None = None,
    policy: Policy | None = None,
    read_after_s: float = 0.0,
    settle: bool = True,
) -> Session:
    """A live session as the daemon's (its answers kept), by default on an engine with four host slots."""
    inv = make_inventory(tmp, adapters=4, engines=engines or [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 4}])
    session = Session(PolicyCore(inv, policy or LruPolicy()), read_after_s=read_after_s, settle=settle)
    session.start(999.0)
    return session


def read_live(session: Session, line: RequestEvent) -> None:
    """The daemon reads `line`: its calls are answered at once, each load as long as modelled."""
    for call in session.request(line):
        session.answered(line.seen or line.time, call, LOADED, True, session.model_ms(call.engine, call.adapter))


def recounted(session: Session) -> list[tuple[float, str, str, str]]:
    """What settling counted again since the answers were last taken: (arrival, adapter, counted, outcome)."""
    return [
        (a.event.time, a.event.adapter or "", a.counted.outcome, a.served.outcome)
        for a in session.take_answers()
        if isinstance(a, Recounted)
    ]
