"""A kept live run of `hints_live.py --keep DIR`, computed again offline: what the daemon's own session did from
the log lines, against a stand-in for the engine, beside the live figure and replay's.

    python benchmarks/live_standin.py DIR/think-log [DIR/back-to-back-log ...] [--policy lorafleet]

The daemon learns of a request when its follower reads the line nginx wrote at the request's end; the engine
served it at its arrival. Replay's log visibility models that with one book that is also the engine (served at
arrival, learned later). Here the two are apart, as they are live: the session runs as the daemon runs it (no
simulated engines: it returns calls), fed each line at its end plus the follower's poll, its calls carried out
on the stand-in when made; the stand-in is a vLLM host cache of the engine's slots, least recently used out,
taking every request at its arrival (a miss is loaded by the request itself) and every prefetch (a 1-token
request: vLLM's registry already holds the adapter), touch and load as most recent. Loads are instant (the
emulator's take a few ms). Prints, per run: the engine's own count live (the emulator's header), the stand-in's,
what the session's book believed, and replay's log-only figure, as hit ratios.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.drive.policies import make_policy  # noqa: E402
from lorafleet.drive.session import LOADED, RELOADED, TOUCHED, UNLOADED, Call, Session  # noqa: E402
from lorafleet.inventory import load_inventory  # noqa: E402
from lorafleet.logs.reader import read_events  # noqa: E402
from lorafleet.policy.core import DEMAND, LOAD, TOUCH, PolicyCore  # noqa: E402
from lorafleet.replay.driver import LOG, simulate  # noqa: E402
from lorafleet.times import FOLLOW_POLL_S  # noqa: E402

ARRIVE, READ = 0, 1


def standin(folder: Path, policy: str) -> tuple[float, float]:
    """(the stand-in engine's hit ratio, the book's own) for the run kept in `folder`."""
    inventory = load_inventory(folder / "inv.yaml")
    events, _ = read_events([folder / "nginx" / "access.jsonl"], inventory)
    events = [e for e in events if e.adapter is not None and e.seen is not None]
    caps = {e.key: e.slot_cap for e in inventory.engines}
    hosts: dict[str, OrderedDict[str, None]] = {key: OrderedDict() for key in caps}

    def use(engine: str, adapter: str) -> None:
        host = hosts[engine]
        host.pop(adapter, None)
        host[adapter] = None
        while len(host) > caps[engine]:
            host.popitem(last=False)

    core = PolicyCore(inventory, make_policy(policy, events, 0, ()))
    session = Session(core)

    def carry_out(calls: list[Call], now: float) -> None:
        while calls:
            call = calls.pop(0)
            if call.action == LOAD:
                if call.reason != DEMAND:  # a prefetch of a registered adapter: a 1-token request
                    use(call.engine, call.adapter)
                calls += session.answered(now, call, RELOADED if call.reason != DEMAND else LOADED, True, 0.0)
            elif call.action == TOUCH:
                use(call.engine, call.adapter)
                calls += session.answered(now, call, TOUCHED, True, 0.0)
            else:
                hosts[call.engine].pop(call.adapter, None)
                calls += session.answered(now, call, UNLOADED, True, 0.0)

    timeline = [(e.time, ARRIVE, i) for i, e in enumerate(events)]
    timeline += [(e.seen + FOLLOW_POLL_S, READ, i) for i, e in enumerate(events) if e.seen is not None]
    timeline.sort()
    hits = served = 0
    for at, kind, index in timeline:
        event = events[index]
        if not session.started:
            carry_out(session.start(at), at)
        carry_out(session.advance(at), at)
        if kind == ARRIVE:
            engine = event.engine or core.route(event)
            if engine is None:
                continue
            served += 1
            hits += event.adapter in hosts[engine]
            use(engine, event.adapter)  # type: ignore[arg-type]
        else:
            carry_out(session.request(event), at)
    return hits / max(1, served), session.counts.hit_ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="folders kept by hints_live.py --keep (log mode)")
    parser.add_argument("--policy", default="lorafleet")
    args = parser.parse_args()
    print(f"{'run':<24} {'live':>6} {'stand-in':>9} {'book':>6} {'replay':>7}")
    for folder in args.runs:
        results = json.loads((folder / "requests.json").read_text())
        live = sum(hit for *_, hit in results) / len(results)
        engine, book = standin(folder, args.policy)
        inventory = load_inventory(folder / "inv.yaml")
        events, _ = read_events([folder / "nginx" / "access.jsonl"], inventory)
        replayed = simulate(inventory, args.policy, events, visibility=LOG).hit_ratio
        print(f"{folder.name:<24} {live:>6.1%} {engine:>9.1%} {book:>6.1%} {replayed:>7.1%}")


if __name__ == "__main__":
    main()
