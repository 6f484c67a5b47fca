"""Request durations for any trace: each request's log line written at its end, as a gateway's access log is.

    from durations import with_durations
    events = with_durations(events, seed)

A request's duration is a prefill plus a decode, from a real request's token counts: a row of the Azure LLM
inference trace 2023 (Splitwise; conversation and code, `../shared/data/traces`) drawn at random per request,
taking `PREFILL_S_PER_TOKEN` per context token and `DECODE_S_PER_TOKEN` per generated token (an 8B model on one
GPU, batched). Where the shared traces are absent, a log-normal with the conversation trace's median and spread
stands in. Learned from its line, a request is known only at its end (`RequestEvent.seen`): replay's default
(`log`) visibility then serves it at its arrival on stand-in engines and lets lorafleet learn of it at its end,
the adapter in use on its engine meanwhile — the case where what lorafleet knows lags what the engines do.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from lorafleet.policy.events import ADAPTER, RequestEvent

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "azure_llm_inference_2023"
PREFILL_S_PER_TOKEN = 0.00015
DECODE_S_PER_TOKEN = 0.025
FIRST_TOKEN_S = 0.05  # queueing and scheduling before the prefill


@cache
def _token_rows() -> tuple[tuple[int, int], ...]:
    rows: list[tuple[int, int]] = []
    for name in ("AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv"):
        path = TRACES / name
        if not path.is_file():
            continue
        with path.open() as fh:
            next(fh)
            for line in fh:
                _, context, generated = line.rstrip("\n").split(",")
                rows.append((int(context), int(generated)))
    return tuple(rows)


def duration_s(rng: random.Random) -> float:
    """One request's duration in seconds."""
    rows = _token_rows()
    if rows:
        context, generated = rows[rng.randrange(len(rows))]
    else:
        context, generated = 1000, max(1, round(math.exp(rng.gauss(math.log(150.0), 1.0))))
    return FIRST_TOKEN_S + context * PREFILL_S_PER_TOKEN + generated * DECODE_S_PER_TOKEN


def with_durations(events: Sequence[RequestEvent], seed: int) -> list[RequestEvent]:
    """The same requests, each adapter request's line written at its end (`seen`); in arrival order still."""
    rng = random.Random(f"durations-{seed}")
    return [dataclasses.replace(e, seen=round(e.time + duration_s(rng), 3)) if e.kind == ADAPTER else e for e in events]


def closed_loop(events: Sequence[RequestEvent], seed: int) -> list[RequestEvent]:
    """The same requests with durations drawn as `with_durations` draws them, each tenant made one agent that waits
    for every answer: its next request comes at the previous one's end plus the gap the trace had between their
    arrivals, so no step comes before the line of the step it follows (drawn independently, most of an agentic
    trace's next steps did). Interleaved sessions of one tenant are serialised too: a stricter trace than real,
    kept as the other side of `with_durations`. In arrival order."""
    rng = random.Random(f"durations-{seed}")
    out: list[RequestEvent] = []
    last: dict[str | None, tuple[float, float]] = {}  # tenant -> (its previous request's original arrival, new end)
    for e in events:
        if e.kind != ADAPTER:
            out.append(e)
            continue
        took = duration_s(rng)
        previous = last.get(e.tenant)
        start = e.time if previous is None else previous[1] + max(0.0, e.time - previous[0])
        last[e.tenant] = (e.time, start + took)
        out.append(dataclasses.replace(e, time=round(start, 3), seen=round(start + took, 3)))
    out.sort(key=lambda e: e.time)
    return out


DRAWN, CLOSED = "drawn", "closed-loop"  # the two ways a benchmark gives its trace durations


def timed(events: Sequence[RequestEvent], seed: int, how: str) -> list[RequestEvent]:
    """The trace with durations drawn after its arrivals (`DRAWN`), or as closed loops (`CLOSED`)."""
    return closed_loop(events, seed) if how == CLOSED else with_durations(events, seed)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that time a benchmark's traces (suite.py, judge.py); `timing` reads them."""
    parser.add_argument("--durations", action="store_true", help="each line written at its request's end")
    parser.add_argument("--hints", action="store_true", help="--durations, each request's start hinted as it comes")
    parser.add_argument(
        "--closed-loop", action="store_true", help="--durations, each tenant waiting for each answer (durations.py)"
    )


def timing(args: argparse.Namespace) -> str:
    """How those options time the trace: "" (each line at its request's arrival), `DRAWN` or `CLOSED`."""
    return CLOSED if args.closed_loop else DRAWN if args.durations or args.hints else ""


def described(args: argparse.Namespace) -> str:
    """What those options add to a benchmark's heading, after how lines are written."""
    return (", each tenant waiting for each answer" if args.closed_loop else "") + (
        ", each start hinted" if args.hints else ""
    )


__all__ = [
    "CLOSED",
    "DRAWN",
    "add_arguments",
    "closed_loop",
    "described",
    "duration_s",
    "timed",
    "timing",
    "with_durations",
]
