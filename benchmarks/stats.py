"""Stats benchmark: how long `lorafleet stats` takes over a large journal, and the query plans it uses.

    python benchmarks/stats.py [--days 30] [--engines 500] [--adapters 2000] [--rows-per-minute 100]

The journal is written through the store's own API (commit_progress), one transaction per simulated hour: each
minute holds `--rows-per-minute` (tenant, adapter, engine) rollups drawn at random, plus one action per row.
Then the same computation `stats --json --no-replay` runs (collect) is timed for several windows and breakdowns.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lorafleet.store import stats as q  # noqa: E402
from lorafleet.store.db import open_store  # noqa: E402
from lorafleet.store.journal import ActionRow, Outcomes, commit_progress  # noqa: E402
from lorafleet.times import minute_key, utc_text  # noqa: E402


def build(path: Path, days: int, engines: int, adapters: int, per_minute: int, end: float) -> int:
    rng = random.Random(7)
    rows = 0
    start = end - days * 86400
    with open_store(path) as store:
        for hour in range(days * 24):
            rollups = {}
            actions = []
            for minute in range(60):
                t = start + hour * 3600 + minute * 60
                key_minute = minute_key(t)
                at = utc_text(t)
                for _ in range(per_minute):
                    engine = f"h{rng.randrange(engines // 4 or 1)}/e{rng.randrange(4)}"
                    adapter = f"a{int(rng.paretovariate(1.2)) % adapters}"
                    tenant = f"t{rng.randrange(50)}"
                    requests = rng.randint(1, 20)
                    hits = rng.randint(0, requests)
                    rollups[(key_minute, tenant, adapter, engine)] = Outcomes(
                        requests, hits, 0, requests - hits, hits // 2, hits // 3, 20.0 * (requests - hits), 10.0
                    )
                    actions.append(ActionRow(at, "daemon", adapter, engine, "loaded", True, 20.0, 1, None, "prefetch"))
            commit_progress(store, rollups=rollups, actions=actions)
            rows += len(rollups)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--engines", type=int, default=500)
    parser.add_argument("--adapters", type=int, default=2000)
    parser.add_argument("--rows-per-minute", type=int, default=100)
    parser.add_argument("--journal", type=Path, help="Keep the journal here; an existing one is timed, not rewritten.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lorafleet-stats-bench-"))
    db = args.journal or work / "journal.db"
    started = time.perf_counter()
    if db.exists():
        with open_store(db) as store:
            (last,) = store.db.execute("SELECT MAX(minute) FROM rollups").fetchone()
        end = q._epoch(last) + 60.0
        rows = 0
    else:
        end = time.time() // 60 * 60
        rows = build(db, args.days, args.engines, args.adapters, args.rows_per_minute, end)
    print(
        f"journal: {rows:,} rollup rows, {rows:,} actions, {db.stat().st_size / 1e6:,.0f} MB, "
        f"written in {time.perf_counter() - started:,.0f} s"
    )
    with open_store(db) as store:
        for label, span in (("1h", 3600.0), ("24h", 86400.0), ("7d", 7 * 86400.0), ("30d", 30 * 86400.0)):
            for by in ("tenant", "engine", "adapter"):
                window = q.window_of(end - span, end)
                t0 = time.perf_counter()
                overall = q.totals(store, window)
                q.action_totals(store, window)
                q.sliced(store, window, by, 12)  # what stats runs: sums and trend in one pass
                q.key_actions(store, window, by)
                q.hit_series(store, window, None, 12)
                print(
                    f"stats --since {label:>3} --by {by:<7}: {time.perf_counter() - t0:6.2f} s "
                    f"({overall.requests:,} requests)"
                )
        for label, span, by in (("1h", 3600.0, "engine"), ("30d", 30 * 86400.0, "engine")):
            for sql, plan in q.query_plans(store, end - span, end, by):
                print(f"plan ({label}): {sql}\n  -> {plan}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
