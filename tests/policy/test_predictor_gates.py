"""The predictor's repeat rule and its gates in measured quantities (issue 21, causes 2 and 3), each pinned so that
removing or inverting the rule fails a test: a repeat is not a move, each guess is judged against what the
tenant's plain mix gives that same adapter, and a tenant's main adapter can pass the lift gate."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from lorafleet.policy.core import LOAD, PREFETCH, PolicyCore
from lorafleet.policy.demand import DemandModel
from lorafleet.policy.events import ADAPTER, RequestEvent
from lorafleet.policy.predictive import LorafleetPolicy
from tests.policy.builders import make_inventory, stream
from tests.policy.test_lorafleet_rules import ask, irregular

ONE_SLOT = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1}]


# repeats (cause 3) -----------------------------------------------------------------------------------------
def test_a_repeat_is_not_a_transition() -> None:
    demand = DemandModel()
    for start in range(0, 60, 10):  # every step makes three calls: a, a, a, then b
        for i, adapter in enumerate(["a", "a", "a", "b"]):
            demand.observe("t", adapter, float(start + i))
    assert demand.next_after("t", "a") == [("b", 1.0)]  # a -> a would have taken two thirds of a's row
    assert "a" not in demand.transitions[("t", "a")]
    assert demand.repeats["t"] == 0
    demand.observe("t", "b", 100.0)
    assert demand.repeats["t"] == 1


def test_the_gap_to_the_next_step_runs_from_its_latest_call() -> None:
    demand = DemandModel()
    for start in (0.0, 100.0, 200.0):
        demand.observe("t", "a", start)
        demand.observe("t", "a", start + 5.0)  # the step's second call
        demand.observe("t", "b", start + 7.0)
    assert demand.gap_quantile("t", "a", 0.0) == 2.0  # from the latest a, not 5 s (a -> a) nor 7 s (first a)
    assert demand.gap_quantile("t", "a", 0.99) == 2.0


def test_a_repeat_neither_confirms_nor_refutes_the_guess_which_stays_open(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ONE_SLOT, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, stream([0], tenants=["t"]))
    trust, edges = policy.trust["t"], {k: list(v) for k, v in policy.edge.items()}
    ask(core, [replace(e, time=1010.0 + i) for i, e in enumerate(stream([0, 0], tenants=["t"]))])
    assert policy.trust["t"] == trust and policy.edge == edges  # not a failure of "a1 comes next"
    assert policy.predicted["t"][0] == ["a1"] and "t" in policy.hot["a1"]  # still open, still protecting a1
    ask(core, [replace(stream([1], tenants=["t"])[0], time=1020.0)])
    assert policy.trust["t"] == pytest.approx(trust + policy.trust_rate * (1.0 - trust))  # now it came true


# the edge gate, per guess (cause 2) ------------------------------------------------------------------------
def noisy_cycle(rounds: int, seed: int = 7) -> list[int]:
    """a0 -> a1 -> a2 -> a3 -> a0, but one step in five goes to another adapter: every row holds all three
    others, so a tenant's three guesses cover all of its other traffic."""
    rng = random.Random(seed)
    sequence, current = [], 0
    for _ in range(rounds):
        nxt = (current + 1) % 4
        if rng.random() < 0.2:
            nxt = rng.choice([a for a in range(4) if a not in (current, nxt)])
        sequence.append(nxt)
        current = nxt
    return sequence


def test_each_guess_is_judged_against_the_mix_of_that_same_adapter(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ONE_SLOT)
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    decisions = ask(core, irregular(noisy_cycle(300)))
    guessed, baselines, after = policy.predicted["t"]
    assert len(guessed) == 3 and sum(baselines) == pytest.approx(1.0, abs=0.05)  # summed: no edge could show
    edges = policy.edge[("t", after)]
    assert edges[0] > 0.3  # the top guess comes true ~80% of the time against a mix that gives it ~1/3
    assert edges[0] > edges[1] and edges[2] < policy.min_edge  # the rarely right ranks earn no edge
    assert len([d for d in decisions if d.reason == PREFETCH]) > 100  # and the pattern is acted on


def test_a_guess_whose_rank_has_no_edge_is_not_acted_on(tmp_path: Path) -> None:
    engine = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5}]
    inv = make_inventory(tmp_path, adapters=4, engines=engine, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    policy.trust["t"], policy.edge[("t", "a0")] = 0.9, [0.05, 0.5, 0.5]  # the top rank below min_edge
    decisions = ask(core, stream([0], tenants=["t"]))
    assert not [d for d in decisions if d.reason == PREFETCH]
    assert policy.predicted["t"][0] == ["a1"]  # still scored next time, so it can earn its edge back
    policy.edge[("t", "a0")] = [policy.min_edge, 0.0, 0.0]  # exactly at the minimum: acted on
    decisions = ask(core, [replace(stream([0], tenants=["t"])[0], time=2000.0)])
    assert [d.adapter for d in decisions if d.reason == PREFETCH] == ["a1"]


def test_each_adapter_followed_keeps_its_own_edge(tmp_path: Path) -> None:
    """The guesses a tenant's a0 leads to have missed, those its a2 leads to have come true: one record does not
    silence the other (after an agent's planner the next tool is a guess, after a tool the planner near certain)."""
    engine = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5}]
    inv = make_inventory(tmp_path, adapters=4, engines=engine, tenants={"t": "{workflows: [[a0, a1], [a2, a3]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    policy.trust["t"] = 0.9
    policy.edge[("t", "a0")], policy.edge[("t", "a2")] = [0.05] * 3, [0.5] * 3
    decisions = ask(core, stream([0], tenants=["t"]))
    assert not [d for d in decisions if d.reason == PREFETCH]
    decisions = ask(core, [replace(stream([2], tenants=["t"])[0], time=2000.0)])
    assert [d.adapter for d in decisions if d.reason == PREFETCH] == ["a3"]
    assert policy.edge[("t", "a0")][0] < 0.05  # a2 came, not the a1 guessed after a0: scored on a0's record
    assert policy.edge[("t", "a2")] == [0.5] * 3


def test_the_baseline_is_the_mix_of_the_traffic_that_is_not_the_current_adapter(tmp_path: Path) -> None:
    inv = make_inventory(tmp_path, adapters=4, engines=ONE_SLOT, tenants={"t": "{workflows: [[a0, a1]]}"})
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, stream([0, 0, 2, 0, 0, 1, 2, 0], tenants=["t"]))
    demand = core.demand
    guessed, baselines, _ = policy.predicted["t"]
    rest = 1.0 - demand.tenant_mix("t", "a0")
    assert baselines == pytest.approx([demand.tenant_mix("t", c) / rest for c in guessed])


# the lift gate (cause 2) -----------------------------------------------------------------------------------
def tool_loop(rounds: int = 8, seed: int = 3) -> list[int]:
    """A planner (a0) between tool calls, each of five tools (a1..a5) once per round in a shuffled order."""
    rng = random.Random(seed)
    loop: list[int] = []
    for _ in range(rounds):
        tools = [1, 2, 3, 4, 5]
        rng.shuffle(tools)
        loop += [a for tool in tools for a in (0, tool)]
    return loop


def test_a_tenants_main_adapter_passes_the_lift_gate_when_it_surely_comes_next(tmp_path: Path) -> None:
    """A planner between tool calls: half the tenant's traffic, and certain after each tool. A lift of 2.5 on
    plain shares would need p >= 1.25; in odds it passes."""
    inv = make_inventory(tmp_path, adapters=6, engines=ONE_SLOT)
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, irregular(tool_loop()))
    assert core.demand.tenant_mix("t", "a0") == pytest.approx(0.5, abs=0.05)
    policy.trust["t"], policy.edge[("t", "a3")] = 1.0, [1.0, 1.0, 1.0]  # the lift gate alone decides
    predictions = policy._predict("t", "a3")  # after a tool: the planner, with certainty
    assert [c for c, _ in predictions] == ["a0"]


def test_no_lift_no_prediction_even_in_odds(tmp_path: Path) -> None:
    """After the planner, any of five tools: each as likely as the tenant's plain mix makes it."""
    inv = make_inventory(tmp_path, adapters=6, engines=ONE_SLOT)
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, irregular(tool_loop()))
    policy.trust["t"], policy.edge[("t", "a0")] = 1.0, [1.0, 1.0, 1.0]
    guesses = core.demand.next_after("t", "a0", limit=3)
    assert len(guesses) == 3 and all(p >= policy.min_probability for _, p in guesses)  # only lift can refuse
    assert policy._predict("t", "a0") == []


# evidence per guess -----------------------------------------------------------------------------------------
def test_a_guess_needs_min_evidence_moves_of_its_own_not_only_its_row(tmp_path: Path) -> None:
    """After a0 the tenant goes to a1 three times in five: enough of a lift, but from five moves a tenant drawing
    from its mix shows as much by chance. With twice the moves, a1 has followed a0 six times: acted on."""
    inv = make_inventory(tmp_path, adapters=6, engines=ONE_SLOT)
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    after = [1, 1, 2, 1, 3]  # what follows a0, round by round; a5 then leads back to a0

    def rounds(n: int, start: float) -> list[RequestEvent]:
        sequence = [a for i in range(n) for a in (0, after[i % len(after)], 5)]
        return [replace(e, time=start + 10.0 * i) for i, e in enumerate(stream(sequence, tenants=["t"]))]

    ask(core, rounds(5, 1000.0))
    (best, p), *_ = core.demand.next_after("t", "a0", limit=3)
    assert best == "a1" and p == pytest.approx(0.6, abs=0.02)
    policy.trust["t"], policy.edge[("t", "a0")] = 1.0, [1.0, 1.0, 1.0]  # only the evidence can refuse
    assert "a1" not in [c for c, _ in policy._predict("t", "a0")]
    ask(core, rounds(5, 2000.0))
    policy.trust["t"], policy.edge[("t", "a0")] = 1.0, [1.0, 1.0, 1.0]
    assert "a1" in [c for c, _ in policy._predict("t", "a0")]


def test_the_eager_predictor_acts_on_a_move_seen_once_and_the_default_needs_five(tmp_path: Path) -> None:
    """The lorafleet policy's eager expert (drive/leader.py) is the predictor with a bar of one move: a chain seen
    once is prefetched on its second occurrence, where the shipped predictor waits for its fifth."""
    inv = make_inventory(tmp_path, adapters=4, engines=ONE_SLOT)
    eager, default = LorafleetPolicy(min_evidence=1.0), LorafleetPolicy()
    eager_core, default_core = PolicyCore(inv, eager), PolicyCore(inv, default)
    assert eager_core.demand.min_evidence == 1.0 and default_core.demand.min_evidence == 5.0
    once = [replace(e, time=1000.0 + 10.0 * i) for i, e in enumerate(stream([0, 1, 2], tenants=["t"]))]
    for policy, core in ((eager, eager_core), (default, default_core)):
        ask(core, once)
        policy.trust["t"], policy.edge[("t", "a0")] = 1.0, [1.0, 1.0, 1.0]  # only the evidence can refuse
    assert [c for c, _ in eager._predict("t", "a0")] == ["a1"]
    assert default._predict("t", "a0") == []


def test_without_the_lift_bar_a_guess_no_likelier_than_the_mix_is_acted_on_by_its_measured_edge(tmp_path: Path) -> None:
    """After a0 the tenant asks for a1 or a2 at random: each guess is as likely as the tenant's mix makes it, so
    its odds have no lift and the predictor (min_lift 2.5) silences both; with no lift bar (the eager expert's,
    drive/leader.py) they are acted on while their edge, probability and evidence pass."""
    inv = make_inventory(tmp_path, adapters=4, engines=ONE_SLOT)
    rng = random.Random(5)
    sequence = [a for _ in range(30) for a in (0, rng.choice((1, 2)))]
    guesses = {}
    for min_lift in (None, 0.0):
        policy = LorafleetPolicy(min_lift=min_lift)
        ask(PolicyCore(inv, policy), irregular(sequence))
        policy.trust["t"], policy.edge[("t", "a0")] = 1.0, [1.0, 1.0, 1.0]  # only the lift can refuse
        guesses[min_lift] = sorted(c for c, _ in policy._predict("t", "a0"))
    assert guesses[None] == [] and guesses[0.0] == ["a1", "a2"]


def test_with_an_edge_of_zero_a_guess_that_beats_the_mix_by_less_than_min_edge_is_acted_on(tmp_path: Path) -> None:
    """The eager expert's bar on the edge is zero (drive/leader.py): a rank that came true a twentieth more often
    than the mix gives it is acted on there, and not by the predictor (min_edge 0.1); below zero, by neither."""
    engine = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 5}]
    inv = make_inventory(tmp_path, adapters=4, engines=engine, tenants={"t": "{workflows: [[a0, a1]]}"})
    acted = {}
    for min_edge in (None, 0.0):
        for edge in (0.05, -0.01):
            policy = LorafleetPolicy(min_edge=min_edge)
            core = PolicyCore(inv, policy)
            policy.trust["t"], policy.edge[("t", "a0")] = 0.9, [edge, 0.5, 0.5]
            decisions = ask(core, stream([0], tenants=["t"]))
            acted[(min_edge, edge)] = [d.adapter for d in decisions if d.reason == PREFETCH]
    assert acted == {(None, 0.05): [], (None, -0.01): [], (0.0, 0.05): ["a1"], (0.0, -0.01): []}


# the second-order context ---------------------------------------------------------------------------------------
def test_after_the_planner_the_prefetch_is_the_tool_the_last_tool_leads_to(tmp_path: Path) -> None:
    """A planner (a0) between tools whose order is fixed by the last tool (a1 -> a2 -> a3 -> a1): after the planner,
    each tool is a third of its successors (no lift), but after (a3, a0) it is always a1."""
    inv = make_inventory(tmp_path, adapters=4, engines=ONE_SLOT)
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    ask(core, irregular([a for i in range(39) for a in (0, 1 + i % 3)]))  # ends on a3
    policy.trust["t"], policy.edge[("t", "a3")] = 1.0, [1.0, 1.0, 1.0]
    assert [c for c, _ in policy._predict("t", "a3")] == ["a0"]
    ask(core, [replace(stream([0], tenants=["t"])[0], time=5000.0)])
    assert policy.predicted["t"][0][:1] == ["a1"]  # the top guess, made after (a3, a0)
    policy.trust["t"], policy.edge[("t", "a0")] = 1.0, [1.0, 1.0, 1.0]
    assert [c for c, _ in policy._predict("t", "a0")] == ["a1"]


# a prediction that comes too late (learned from log lines) -----------------------------------------------------
def learn_lines(core: PolicyCore, lines: list[RequestEvent], poll_s: float = 0.5) -> list[list]:  # type: ignore[type-arg]
    """Drive the core as a daemon following a log does: each line (its request's arrival and end) taken a
    follower's poll after its end, in the order of the ends; scheduled work first; loads done at once. Returns,
    per line, the decisions the policy made on learning it."""
    made: list[list] = []  # type: ignore[type-arg]

    def done(now: float, new: list) -> None:  # type: ignore[type-arg]
        for d in new:
            if d.action == LOAD:
                done(now, core.load_finished(now, d.engine, d.adapter))

    for line in sorted(lines, key=lambda e: e.seen or e.time):
        now = (line.seen or line.time) + poll_s
        while (wakeup := core.next_wakeup()) is not None and wakeup <= now:
            done(wakeup, core.tick(wakeup))
        engine = core.route(line)
        outcome, served = core.serve(now, line, engine, known=False)
        done(now, served)
        learned = core.learn(now, line, engine, outcome)
        made.append(learned)
        done(now, learned)
    return made


def chain_lines(rounds: int, think_s: float, pause_s: float = 0.0) -> list[RequestEvent]:
    """Tenant t's chain a0 -> a1 -> a2 -> a3, round after round, each step's request lasting 0.1-3 s, the next
    sent `think_s` after it ended, and up to `pause_s` (at random) between rounds: log lines with durations."""
    rng, lines, at = random.Random(3), [], 1000.0
    for _ in range(rounds):
        for step in range(4):
            took = rng.uniform(0.1, 3.0)
            lines.append(RequestEvent(at, ADAPTER, f"a{step}", tenant="t", base_model="m", seen=at + took))
            at += took + think_s
        at += rng.uniform(0.0, pause_s)
    return lines


def test_a_next_step_that_has_come_before_its_line_is_read_is_not_prefetched(tmp_path: Path) -> None:
    """From log lines, a step sent the moment the one before it ends has come by the time that one's line is read
    (a follower's poll later): a prefetch of it would find it loaded by its own request, or load a copy nobody
    uses. The predictor learns how often each tenant's next request came before the prediction made for it, and
    acts on a guess only while it is likely in time (its probability times that chance at least the bar): a chain
    sent back to back stops being prefetched, and protected, after its first rounds; one with think times longer
    than the poll keeps its prefetches."""
    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])
    runs = {}
    for think_s in (0.0, 2.0):
        policy = LorafleetPolicy()
        core = PolicyCore(inv, policy)
        # Thinking, the rounds are spaced at random: at a steady pace each step would come like clockwork, and a
        # timer's return (an adapter's gaps run between arrivals) would bring it ahead of its prediction.
        made = learn_lines(core, chain_lines(30, think_s, pause_s=20.0 if think_s else 0.0))
        last_rounds = [d for line in made[len(made) // 2 :] for d in line if d.reason == PREFETCH]
        runs[think_s] = (policy, len(last_rounds))
    back_to_back, thinking = runs[0.0], runs[2.0]
    assert thinking[0].too_late["t"] == 0.0 and thinking[1] > 10  # steps prefetched in time
    assert back_to_back[0].too_late["t"] > 0.9
    assert back_to_back[1] == 0 and not back_to_back[0].hot  # neither prefetched nor protected on its lines


def test_without_durations_no_prediction_is_too_late(tmp_path: Path) -> None:
    """A log line without a duration is the request's one time, and a start hint comes at its arrival: the
    prediction made on it always comes before the next request, however quickly that follows, at the same instant
    included (a log of whole seconds)."""
    inv = make_inventory(tmp_path, adapters=4, engines=[{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}])
    policy = LorafleetPolicy()
    core = PolicyCore(inv, policy)
    lines = [replace(e, time=e.seen, seen=None) for e in chain_lines(20, 0.0)]
    ask(core, lines)
    assert policy.too_late and set(policy.too_late.values()) == {0.0}
    # a log that gives whole seconds: several requests at one instant, none of them before the prediction
    seconds = [replace(e, time=float(int(e.time))) for e in lines]
    policy = LorafleetPolicy()
    ask(PolicyCore(inv, policy), seconds)
    assert len({e.time for e in seconds}) < len(seconds) and set(policy.too_late.values()) == {0.0}
