"""The rules of settling (drive/settling.py) and of the session's use of it (drive/session.py): the stand-in
engines, a horizon (and a poll's margin) behind the newest line, serve each request in arrival order — at one
instant ends, then calls, then arrivals, then the ends of requests taken late — and each count made from a line
that they served otherwise is counted again, GPU hit and wait avoided included."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from lorafleet.daemon.journaling import Journaling
from lorafleet.daemon.metrics import DaemonMetrics
from lorafleet.drive.session import LOADED, UNLOADED, Counts, Recounted, Served, Session
from lorafleet.drive.settling import MAX_HORIZON_S, WAIT_SETTLED_MS, Counted, Settled, Settling, recount
from lorafleet.policy.baselines import LruPolicy
from lorafleet.policy.core import HIT, LATE, LOAD, MISS, PREFETCH, TOUCH, UNLOAD, PolicyCore
from lorafleet.policy.events import ADAPTER, RequestEvent
from tests.policy.builders import Scripted, live_session, make_inventory, read_live, recounted, timed_line

ONE_SLOT = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 1}]
TWO_SLOTS = [{"kind": "vllm", "max_loras": 1, "max_cpu_loras": 2}]
FOUR_SLOTS = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 4}]
SGLANG_TWO = [{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 2}]  # one pin allowed
E0 = "h/e0"
# Counted as no outcome is: every request the stand-ins serve with it is reported, with what they made of it
PROBE = Counted("probe", 0.0, False, 0.0)


# --- the stand-ins alone ---------------------------------------------------------------------------------------


def _standins(
    tmp: Path,
    engines: list[dict[str, object]] | None = None,
    start: float = 1000.0,
    held: Sequence[tuple[str, float]] = (),
    margin_s: float = 0.0,
) -> Settling:
    """Settling on one engine (two host slots by default) from the first line at `start`, holding `held`."""
    core = PolicyCore(make_inventory(tmp, adapters=4, engines=engines or TWO_SLOTS), LruPolicy())
    return Settling(core.book.engines, core.load_ms, core.sizes, start, {E0: list(held)}, margin_s)


def _serve(settling: Settling, adapter: str, arrival: float, end: float, probe: bool = True) -> None:
    """A line read: probed (reported whatever the stand-ins made of it), or counted as known on arrival."""
    settling.served(timed_line(adapter, arrival, end), E0, PROBE if probe else None)


def _outcomes(settled: list[Settled]) -> list[tuple[float, str, str]]:
    return [(s.event.time, s.event.adapter or "", s.served.outcome) for s in settled]


def test_a_request_that_came_before_the_stand_ins_had_run_is_served_for_what_it_leaves_but_never_settled(
    tmp_path: Path,
) -> None:
    """The stand-ins start 30 s before the first line (970). a0's request came at 960, before that: taken when
    its line comes, at the instant already run (970, never back in time), it loads a0 — still loading for a
    request at 970.001, held for one at 1002 — and is never settled itself, whatever it was counted."""
    settling = _standins(tmp_path)
    assert settling.at == 970.0
    _serve(settling, "a0", 960.0, 1001.0)
    _serve(settling, "a0", 970.001, 1001.5)
    _serve(settling, "a0", 1002.0, 1003.0)
    assert _outcomes(settling.drain()) == [(970.001, "a0", LATE), (1002.0, "a0", HIT)]


def test_at_one_instant_a_request_that_ended_frees_its_adapter_before_an_arrival_is_served(tmp_path: Path) -> None:
    """One slot. a0's request ran 1000-1010, a1's came at 1010: a0 in use no more, a1's load evicted it, so a0's
    request at 1012 was a miss (served before the end, a0 still in use, the engine would have kept both)."""
    settling = _standins(tmp_path, ONE_SLOT)
    _serve(settling, "a1", 1010.0, 1010.5, probe=False)  # its line read first: a follower's poll is no order
    _serve(settling, "a0", 1000.0, 1010.0, probe=False)
    _serve(settling, "a0", 1012.0, 1013.0)
    assert _outcomes(settling.drain()) == [(1012.0, "a0", MISS)]


def test_at_one_instant_a_request_that_ended_is_older_than_a_call_made_then(tmp_path: Path) -> None:
    """Two slots holding a0 and a1. a0's request ran 1000-1010 and a touch of a1 was made at 1010: the touch
    came after the end, so a1 was the most recent and a2's arrival at 1011 evicted a0 (the other way round,
    a1)."""
    settling = _standins(tmp_path, held=[("a0", 0.0), ("a1", 0.0)])
    settling.called(1010.0, TOUCH, E0, "a1")
    _serve(settling, "a0", 1000.0, 1010.0, probe=False)
    _serve(settling, "a2", 1011.0, 1011.5, probe=False)
    _serve(settling, "a0", 1012.0, 1012.5)
    assert _outcomes(settling.drain()) == [(1012.0, "a0", MISS)]


def test_at_one_instant_a_call_comes_before_an_arrival(tmp_path: Path) -> None:
    """An unload of a0 at 1005, and a request for a0 that came at 1005: the engine had let a0 go — a miss."""
    settling = _standins(tmp_path, held=[("a0", 0.0)])
    _serve(settling, "a0", 1005.0, 1005.5)
    settling.called(1005.0, UNLOAD, E0, "a0")
    assert _outcomes(settling.drain()) == [(1005.0, "a0", MISS)]


def test_at_one_instant_an_arrival_is_served_before_a_request_taken_late_ends(tmp_path: Path) -> None:
    """One slot. a0's request came at 960, before the stand-ins' start (taken late), and ended at 1010, when a1's
    came: still in use for that arrival, a0 was kept (the engine runs past its slot), a hit at 1012."""
    settling = _standins(tmp_path, ONE_SLOT)
    _serve(settling, "a0", 960.0, 1010.0, probe=False)
    _serve(settling, "a1", 1010.0, 1010.5, probe=False)
    _serve(settling, "a0", 1012.0, 1013.0)
    assert _outcomes(settling.drain()) == [(1012.0, "a0", HIT)]


def test_at_one_instant_an_arrival_is_served_before_a_hinted_request_ends(tmp_path: Path) -> None:
    """One slot. a0's request, taken at its start hint at 1000, ended at 1010 (its line read then), when a1's came:
    a0 was still in use for that arrival, and kept."""
    settling = _standins(tmp_path, ONE_SLOT)
    settling.began(RequestEvent(1000.0, ADAPTER, "a0", tenant="t", base_model="m"), E0)
    settling.ended(1010.0, E0, "a0")
    _serve(settling, "a1", 1010.0, 1010.5, probe=False)
    _serve(settling, "a0", 1012.0, 1013.0)
    assert _outcomes(settling.drain()) == [(1012.0, "a0", HIT)]


def test_the_stand_ins_run_a_polls_margin_behind_the_horizon_before_the_newest_line(tmp_path: Path) -> None:
    """A follower reads a line up to `margin_s` (5 s) after one written later: a request is served only once the
    newest line is a horizon (30 s) and that margin past its arrival — at 1039.5 for one that came at 1004.5."""
    settling = _standins(tmp_path, margin_s=5.0)
    _serve(settling, "a0", 1004.5, 1005.0)
    _serve(settling, "a1", 1036.0, 1036.5, probe=False)
    assert settling.run() == []  # a horizon past it, not the margin too
    _serve(settling, "a1", 1039.0, 1039.5, probe=False)
    assert _outcomes(settling.run()) == [(1004.5, "a0", MISS)]


def test_the_horizon_is_the_longest_request_read_and_never_less_than_the_least(tmp_path: Path) -> None:
    """At first 30 s behind the newest line; a 60 s request puts it 60 s behind, and a shorter one after it does
    not bring it closer."""
    settling = _standins(tmp_path)
    _serve(settling, "a0", 1005.0, 1006.0)
    assert settling.run() == []  # 1006 - 30 s: a request still running may have come before it
    _serve(settling, "a1", 1006.5, 1007.0)
    _serve(settling, "a2", 1000.0, 1060.0, probe=False)
    assert settling.run() == []
    _serve(settling, "a3", 1064.0, 1065.0, probe=False)
    assert _outcomes(settling.run()) == [(1005.0, "a0", MISS)]  # 1065 - 60 s


def test_a_request_longer_than_the_cap_holds_the_stand_ins_back_no_more_than_the_cap(tmp_path: Path) -> None:
    """A request of 2000 s sets the horizon at the cap (900 s): a request that came at 2000 is served once the
    newest line is at 3000, and one that came at 2101 is not yet."""
    settling = _standins(tmp_path)
    _serve(settling, "a1", 2000.0, 2001.0)
    _serve(settling, "a2", 2101.0, 2102.0)
    _serve(settling, "a0", 1000.0, 3000.0, probe=False)
    assert settling.horizon == MAX_HORIZON_S
    assert _outcomes(settling.run()) == [(2000.0, "a1", MISS)]


def test_a_call_is_placed_at_the_sessions_clock_but_no_further_than_a_horizon_past_the_newest_line(
    tmp_path: Path,
) -> None:
    """The newest line at 1000 (horizon 30 s): an unload of a0 made at 1010 comes at 1010, and an unload of a1
    made at the clock 5000 (a daemon reading an old log) comes at 1030."""
    settling = _standins(tmp_path, held=[("a0", 0.0), ("a1", 0.0)])
    settling.called(1010.0, UNLOAD, E0, "a0")
    settling.called(5000.0, UNLOAD, E0, "a1")
    for adapter, arrival in (("a0", 1009.0), ("a0", 1011.0), ("a1", 1029.0), ("a1", 1031.0)):
        _serve(settling, adapter, arrival, arrival + 0.5)
    expected = [(1009.0, "a0", HIT), (1011.0, "a0", MISS), (1029.0, "a1", HIT), (1031.0, "a1", MISS)]
    assert _outcomes(settling.drain()) == expected


def test_a_touch_makes_its_adapter_the_most_recent_on_the_stand_ins(tmp_path: Path) -> None:
    """Two slots holding a0 (the least recently used) and a1: a touch of a0 at 1001 made a2's arrival at 1002
    evict a1 instead."""
    settling = _standins(tmp_path, held=[("a0", 0.0), ("a1", 0.0)])
    settling.called(1001.0, TOUCH, E0, "a0")
    _serve(settling, "a2", 1002.0, 1002.5, probe=False)
    _serve(settling, "a0", 1003.0, 1003.5)
    _serve(settling, "a1", 1004.0, 1004.5)
    assert _outcomes(settling.drain()) == [(1003.0, "a0", HIT), (1004.0, "a1", MISS)]


def test_an_unload_drops_its_adapter_from_the_stand_ins(tmp_path: Path) -> None:
    settling = _standins(tmp_path, held=[("a0", 0.0), ("a1", 0.0)])
    settling.called(1001.0, UNLOAD, E0, "a0")
    _serve(settling, "a0", 1002.0, 1002.5)
    _serve(settling, "a1", 1003.0, 1003.5)
    assert _outcomes(settling.drain()) == [(1002.0, "a0", MISS), (1003.0, "a1", HIT)]


def test_a_pinned_load_is_never_evicted_by_an_engine_that_holds_pins(tmp_path: Path) -> None:
    """SGLang, two slots: a0 loaded pinned at 1000.5, then a1's and a2's requests — a2's load evicted a1, not a0,
    the least recently used."""
    settling = _standins(tmp_path, SGLANG_TWO)
    settling.called(1000.5, LOAD, E0, "a0", pinned=True)
    _serve(settling, "a1", 1001.0, 1001.5, probe=False)
    _serve(settling, "a2", 1002.0, 1002.5, probe=False)
    _serve(settling, "a0", 1003.0, 1003.5)
    _serve(settling, "a1", 1004.0, 1004.5)
    assert _outcomes(settling.drain()) == [(1003.0, "a0", HIT), (1004.0, "a1", MISS)]


def test_a_prefetch_of_a_name_vllm_knows_loads_it_where_a_demand_load_would_not(tmp_path: Path) -> None:
    """Two slots. a0, loaded by a request at 1000, was evicted by a1's and a2's: vLLM still knows its name. A
    prefetch of it (a 1-token request) loads it again; a demand load's call is answered "already loaded"."""
    for demand, outcome in ((False, HIT), (True, MISS)):
        settling = _standins(tmp_path, start=1000.0)
        for adapter, arrival in (("a0", 1000.0), ("a1", 1001.0), ("a2", 1002.0)):
            _serve(settling, adapter, arrival, arrival + 0.5, probe=False)
        settling.called(1003.0, LOAD, E0, "a0", demand=demand)
        _serve(settling, "a0", 1004.0, 1004.5)
        assert _outcomes(settling.drain()) == [(1004.0, "a0", outcome)], demand


def test_a_demand_load_of_a_name_sglang_knows_loads_it_sglang_loads_nothing_on_request(tmp_path: Path) -> None:
    """SGLang does not load an adapter a request names: a demand load of a registered name, evicted meanwhile,
    loads it."""
    settling = _standins(tmp_path, SGLANG_TWO)
    for adapter, arrival in (("a0", 1000.0), ("a1", 1001.0), ("a2", 1002.0)):
        _serve(settling, adapter, arrival, arrival + 0.5, probe=False)
    settling.called(1003.0, LOAD, E0, "a0", demand=True)
    _serve(settling, "a0", 1004.0, 1004.5)
    assert _outcomes(settling.drain()) == [(1004.0, "a0", HIT)]


def test_a_load_of_an_adapter_already_held_loads_nothing_and_its_failure_unloads_nothing(tmp_path: Path) -> None:
    """a0 is held from the start; a prefetch of it at 1001 (its turn came: a touch) is answered with an error
    past the horizon, at 1040: it had loaded nothing, so a0 stays, a hit at 1045."""
    settling = _standins(tmp_path, held=[("a0", 0.0)])
    change = settling.called(1001.0, LOAD, E0, "a0")
    _serve(settling, "a1", 1035.0, 1035.5, probe=False)
    settling.run()
    assert not change.loaded
    settling.failed(1040.0, change)
    _serve(settling, "a0", 1045.0, 1045.5)
    assert _outcomes(settling.drain()) == [(1045.0, "a0", HIT)]


def test_a_load_is_marked_loaded_only_when_its_turn_came(tmp_path: Path) -> None:
    """A load the stand-ins have not reached yet has loaded nothing: failing then, it unloads nothing (a request
    brought a0 at 1002), and when its turn comes it loads nothing."""
    settling = _standins(tmp_path)
    change = settling.called(1001.0, LOAD, E0, "a0")
    assert not change.loaded
    settling.failed(1001.5, change)
    assert change.failed and len(settling) == 1  # no unload made
    _serve(settling, "a0", 1002.0, 1002.5, probe=False)
    _serve(settling, "a0", 1004.0, 1004.5)
    assert _outcomes(settling.drain()) == [(1004.0, "a0", HIT)]
    assert not change.loaded


def test_what_names_an_engine_the_stand_ins_do_not_have_is_passed_over(tmp_path: Path) -> None:
    """An engine gone from the inventory meanwhile: its requests and calls are skipped, the others served."""
    settling = _standins(tmp_path)
    settling.served(timed_line("a0", 1001.0, 1001.5), "h/gone", PROBE)
    settling.called(1001.2, LOAD, "h/gone", "a1")
    settling.registered(1001.3, "h/gone", [])
    _serve(settling, "a1", 1002.0, 1002.5)
    assert _outcomes(settling.drain()) == [(1002.0, "a1", MISS)]


def test_what_the_stand_ins_start_holding_leaves_out_adapters_no_longer_in_the_inventory(tmp_path: Path) -> None:
    settling = _standins(tmp_path, held=[("gone", 0.0), ("a0", 0.0)])
    assert settling.standins.holds(E0) == ["a0"]


def test_past_their_bound_the_stand_ins_serve_the_oldest_down_to_exactly_the_bound(tmp_path: Path) -> None:
    """Bound to 4 entries, three requests (six) within the horizon: the two oldest entries are served at once."""
    settling = _standins(tmp_path)
    settling.max_pending = 4
    for i in range(3):
        _serve(settling, f"a{i}", 1001.0 + i, 1001.5 + i, probe=i == 0)
    assert _outcomes(settling.run()) == [(1001.0, "a0", MISS)]
    assert len(settling) == 4


def test_a_line_that_ended_before_the_newest_holds_the_stand_ins_where_they_were(tmp_path: Path) -> None:
    """Lines come out of their end order (a line without a duration, known on arrival): an older one does not
    bring the newest line back."""
    settling = _standins(tmp_path)
    _serve(settling, "a0", 1005.0, 1036.0)
    settling.served(RequestEvent(1010.0, ADAPTER, "a1", tenant="t", base_model="m"), E0, None)
    assert settling.newest == 1036.0
    assert _outcomes(settling.run()) == [(1005.0, "a0", MISS)]


def test_a_settled_move_takes_back_the_gpu_hit_and_the_wait_avoided_and_moves_the_wait_paid() -> None:
    """A request counted a GPU hit, the first use of a prefetch (50 ms avoided, 2 ms paid), that the stand-ins
    served as a miss waiting 120 ms: a miss that kept no GPU hit, avoided nothing and used no prefetch, its paid
    wait moved by 118 ms. Another, counted a miss that waited 120 ms, served as a hit in a GPU slot: a GPU hit
    that waited nothing."""
    fields = {"paid": "cold_ms_paid", "avoided": "cold_ms_avoided", "used": "prefetch_used"}
    counts = Counts(requests=2, hits=1, misses=1, gpu_hits=1, cold_ms_paid=122.0, cold_ms_avoided=50.0)
    counts.prefetch_used = 1
    more = recount(counts, Counted(HIT, 2.0, True, 50.0, True), Counted(MISS, 120.0, False, 0.0), **fields)
    assert more == 118.0
    assert (counts.requests, counts.hits, counts.misses, counts.gpu_hits) == (2, 0, 2, 0)
    assert (counts.cold_ms_paid, counts.cold_ms_avoided, counts.prefetch_used) == (240.0, 0.0, 0)
    back = recount(counts, Counted(MISS, 120.0, False, 0.0), Counted(HIT, 0.0, True, 0.0), **fields)
    assert back == -120.0
    assert (counts.hits, counts.misses, counts.gpu_hits, counts.cold_ms_paid) == (1, 1, 1, 120.0)
    recount(counts, Counted(HIT, 0.0, True, 0.0), Counted(MISS, 50.0, False, 0.0), **fields)  # used no prefetch
    assert (counts.hits, counts.misses, counts.prefetch_used) == (0, 2, 0)


def test_a_request_settled_as_it_was_counted_keeps_its_outcome_and_the_wait_its_prefetch_avoided() -> None:
    """Served as counted, a request's wait and GPU slot alone change: a hit on a prefetch (40 ms avoided) counted
    outside the GPU slots (3 ms copy) that the stand-ins found in one stays a hit that avoided 40 ms, now a GPU
    hit that waited nothing."""
    counts = Counts(requests=1, hits=1, cold_ms_paid=3.0, cold_ms_avoided=40.0)
    fields = ("cold_ms_paid", "cold_ms_avoided", "prefetch_used")
    counts.prefetch_used = 1
    more = recount(counts, Counted(HIT, 3.0, False, 40.0, True), Counted(HIT, 0.0, True, 40.0, True), *fields)
    assert more == -3.0
    assert (counts.hits, counts.gpu_hits, counts.cold_ms_paid, counts.cold_ms_avoided) == (1, 1, 0.0, 40.0)
    assert counts.prefetch_used == 1


def test_a_request_settled_late_from_a_prefetch_hit_still_used_it_and_avoided_what_it_did_not_wait() -> None:
    """Counted a hit on a prefetch (40 ms avoided) that the stand-ins served late, 12 ms before the prefetch was
    done: it waited on that load, so it used the prefetch, and avoided the 28 ms of it it did not wait."""
    counts = Counts(requests=1, hits=1, cold_ms_avoided=40.0, prefetch_used=1)
    fields = ("cold_ms_paid", "cold_ms_avoided", "prefetch_used")
    recount(counts, Counted(HIT, 0.0, True, 40.0, True), Counted(LATE, 12.0, False, 28.0, True), *fields)
    assert (counts.hits, counts.late, counts.prefetch_used) == (0, 1, 1)
    assert (counts.cold_ms_paid, counts.cold_ms_avoided) == (12.0, 28.0)


def test_a_miss_the_stand_ins_served_on_a_prefetch_uses_it_and_avoids_its_load() -> None:
    """The other way: a request counted a miss (the book had let the prefetch go, or never knew it loaded) that
    the stand-ins served as a hit on a prefetch no request had used: a hit that used a prefetch and avoided its
    load time, 90 ms."""
    counts = Counts(requests=1, misses=1, cold_ms_paid=90.0)
    fields = ("cold_ms_paid", "cold_ms_avoided", "prefetch_used")
    recount(counts, Counted(MISS, 90.0, False, 0.0), Counted(HIT, 0.0, True, 90.0, True), *fields)
    assert (counts.hits, counts.misses, counts.prefetch_used, counts.gpu_hits) == (1, 0, 1, 1)
    assert (counts.cold_ms_paid, counts.cold_ms_avoided) == (0.0, 90.0)


# --- the session's use of it ---------------------------------------------------------------------------------


def _warm_settled_a_miss(session: Session) -> None:
    """Two host slots holding a0 and a1; a2's request (1002-1010) evicted a0 before a0's at 1003, which the book,
    reading its line at 1004, counted a hit."""
    for line in (timed_line("a0", 999.0, 1000.1), timed_line("a1", 1001.0, 1001.1), timed_line("a0", 1003.0, 1004.0)):
        read_live(session, line)
    read_live(session, timed_line("a2", 1002.0, 1010.0))


def test_live_the_session_settles_a_poll_margin_later_than_the_horizon(tmp_path: Path) -> None:
    """a0's second request came at 1003 while its first (1000-1010) ran: counted a miss, a hit once settled. With
    lines read up to 5 s late (`read_after_s`), not when the newest line is 30 s past it, only 5 s after."""
    session = live_session(tmp_path, read_after_s=5.0)
    read_live(session, timed_line("a3", 990.0, 995.0))
    for line in (timed_line("a1", 1001.0, 1001.1), timed_line("a2", 1002.0, 1002.1), timed_line("a0", 1003.0, 1004.0)):
        read_live(session, line)
    read_live(session, timed_line("a0", 1000.0, 1010.0))
    read_live(session, timed_line("a3", 1030.0, 1033.5))
    assert recounted(session) == []
    read_live(session, timed_line("a3", 1035.0, 1038.5))
    assert recounted(session) == [(1003.0, "a0", MISS, HIT)]


def test_live_a_line_that_came_before_the_stand_ins_had_run_is_never_recounted(tmp_path: Path) -> None:
    """a0's request came at 1001 and ran 45 s, longer than any before it: by its line the stand-ins had run past
    1001, and past a0's load for a request at 1005. The book counted it a miss (a0 not held when it came); taken
    late, when the stand-ins held a0, it is not settled a hit."""
    session = live_session(tmp_path)
    for line in (timed_line("a3", 985.0, 990.0), timed_line("a0", 1005.0, 1005.5)):
        read_live(session, line)
    for i in range(18):  # a1's requests until 1040: the stand-ins run past 1005
        read_live(session, timed_line("a1", 1006.0 + 2 * i, 1006.5 + 2 * i))
    settling = session.settling
    assert settling is not None and settling.at > 1005.5
    misses = session.counts.misses
    read_live(session, timed_line("a0", 1001.0, 1046.0))
    assert session.counts.misses == misses + 1
    session.settle_all()
    assert recounted(session) == [] and session.recounted == 0


def test_live_a_recount_takes_back_a_gpu_hit_and_the_wait_a_prefetch_avoided(tmp_path: Path) -> None:
    """Two slots, GPU and host. A prefetch of a0 at 1001 made its request at 1002 a GPU hit for the book,
    the prefetch's load time avoided; but a2's request (1001.5-1010, its line last) and a3's at 1001.6 had pushed
    a0 out on the engine. Settled a miss: no GPU hit, no wait avoided, its cold load paid."""
    engines = [{"kind": "vllm", "max_loras": 2, "max_cpu_loras": 2}]
    session = live_session(tmp_path, engines, policy=Scripted([(1001.0, E0, "a0", PREFETCH)]))
    read_live(session, timed_line("a1", 1000.0, 1000.1))
    (call,) = session.advance(1001.0)
    session.answered(1001.2, call, LOADED, True, session.model_ms(E0, "a0"))
    read_live(session, timed_line("a3", 1001.6, 1001.7))
    counts = session.counts
    gpu, paid = counts.gpu_hits, counts.cold_ms_paid
    read_live(session, timed_line("a0", 1002.0, 1002.5))
    assert (counts.gpu_hits, counts.hits) == (gpu + 1, 1)
    assert counts.cold_ms_avoided > 0.0 and counts.cold_ms_paid == paid
    read_live(session, timed_line("a2", 1001.5, 1010.0))
    session.settle_all()
    assert recounted(session) == [(1002.0, "a0", HIT, MISS)]
    assert (counts.gpu_hits, counts.hits, counts.cold_ms_avoided) == (gpu, 0, 0.0)
    assert counts.cold_ms_paid > paid


def test_live_the_stand_ins_take_the_sessions_touches(tmp_path: Path) -> None:
    """Two host slots holding a0 and a1: a touch of a0 at 1002 (to keep it on the engine's own LRU) made a2's
    request at 1003 evict a1 there as in the book, so a0's at 1004 stays a hit."""
    session = live_session(tmp_path, TWO_SLOTS, policy=Scripted([(1002.0, E0, "a0", TOUCH)]))
    for line in (timed_line("a0", 999.0, 1000.1), timed_line("a1", 1001.0, 1001.1)):
        read_live(session, line)
    calls = session.advance(1002.0)
    assert [(c.action, c.adapter) for c in calls] == [(TOUCH, "a0")]
    for line in (timed_line("a2", 1003.0, 1003.1), timed_line("a0", 1004.0, 1004.5)):
        read_live(session, line)
    assert session.counts.hits == 1
    session.settle_all()
    assert recounted(session) == []


def test_live_the_stand_ins_take_the_sessions_unloads(tmp_path: Path) -> None:
    """SGLang, two slots. a0's request (1002-1010) kept it on the engine, a2's at 1004 evicting a1; the book,
    knowing only a1's later request, unloaded a0 for a2 at 1004.1. a0's request at 1005 found it gone, a miss
    for the book and the engine alike: not settled a hit."""
    session = live_session(tmp_path, SGLANG_TWO)
    for line in (timed_line("a0", 999.0, 1000.1), timed_line("a1", 1001.0, 1001.1), timed_line("a1", 1003.0, 1003.1)):
        read_live(session, line)
    calls = session.request(timed_line("a2", 1004.0, 1004.1))
    assert (UNLOAD, "a0") in [(c.action, c.adapter) for c in calls]
    for call in calls:
        session.answered(1004.1, call, UNLOADED if call.action == UNLOAD else LOADED, True, 10.0)
    read_live(session, timed_line("a0", 1005.0, 1005.5))
    read_live(session, timed_line("a0", 1002.0, 1010.0))
    session.settle_all()
    assert [r for r in recounted(session) if r[0] == 1005.0] == []


@pytest.mark.parametrize("when", ["after-the-start", "before-the-start", "in-flight-at-the-start"])
def test_live_a_pinned_prefetch_stays_pinned_on_the_stand_ins(tmp_path: Path, when: str) -> None:
    """SGLang, which holds pins itself, two slots: a0 prefetched pinned at 1001 — after the first line with a
    duration (a call the stand-ins take pinned), before any (held by them from the start with the book's pins), or
    still loading when the first one is read (a call made when it was sent, pinned) — stays through a1's and a2's
    requests (a2's load evicted a1), on the engine as in the book: a0's request at 1004 stays a hit, not to be
    settled a miss."""
    session = live_session(tmp_path, SGLANG_TWO, policy=Scripted([(1001.0, E0, "a0", "pinned")]))
    if when == "after-the-start":
        read_live(session, timed_line("a3", 999.0, 1000.0))
    (call,) = session.advance(1001.0)
    assert call.pinned
    if when == "in-flight-at-the-start":
        read_live(session, timed_line("a3", 999.0, 1001.05))
    session.answered(1001.1, call, LOADED, True, 10.0)
    for line in (timed_line("a1", 1002.0, 1002.1), timed_line("a2", 1003.0, 1003.1), timed_line("a0", 1004.0, 1004.5)):
        read_live(session, line)
    assert session.counts.hits == 1
    session.settle_all()
    assert recounted(session) == []


def test_live_the_stand_ins_start_holding_what_the_book_holds_least_recently_used_first(tmp_path: Path) -> None:
    """Two host slots. Lines without a duration loaded a0 (1000), then a1 (1001), then used a0 again (1002): the
    book holds a1 as its least recently used, a0 loaded first. From the first line with a duration (a2's, 1003)
    the stand-ins hold them in that order too: a2 evicted a1, and a0's request at 1004 stays a hit."""
    session = live_session(tmp_path, TWO_SLOTS)
    for adapter, at in (("a0", 1000.0), ("a1", 1001.0), ("a0", 1002.0)):
        read_live(session, RequestEvent(at, ADAPTER, adapter, tenant="t", base_model="m"))
    assert list(session.core.book.engines[E0].resident) == ["a1", "a0"]
    for line in (timed_line("a2", 1003.0, 1003.5), timed_line("a0", 1004.0, 1004.5)):
        read_live(session, line)
    assert session.counts.hits == 2
    session.settle_all()
    assert recounted(session) == []


def test_live_the_stand_ins_start_with_a_load_in_flight_behind_what_the_book_holds(tmp_path: Path) -> None:
    """Two host slots: a1 held (since 1000), and a prefetch of a0 sent at 1000.5, not answered by the first line
    with a duration (a2's, 1001): the load in flight is the most recent, so a2's request evicted a1."""
    session = live_session(tmp_path, TWO_SLOTS, policy=Scripted([(1000.5, E0, "a0", PREFETCH)]))
    read_live(session, RequestEvent(1000.0, ADAPTER, "a1", tenant="t", base_model="m"))
    assert [c.adapter for c in session.advance(1000.5)] == ["a0"]
    for line in (timed_line("a2", 1000.9, 1001.0), timed_line("a1", 1002.0, 1002.5)):
        read_live(session, line)
    assert (session.counts.hits, session.counts.misses) == (0, 3)
    session.settle_all()
    assert recounted(session) == []


def test_live_a_load_in_flight_when_the_stand_ins_start_is_held_from_its_start_plus_its_cold_time(
    tmp_path: Path,
) -> None:
    """The clock far past the log (a reconcile at 5000): a prefetch of a0 sent at 5000.5 and not yet answered
    when the first line with a duration (1001) is read is taken as begun at that line, at the latest: a0 is
    still loading for a request half a cold load later (which the book, whose load began after it came, counted
    a miss), held for one two cold loads later (counted a hit from its line, in no GPU slot known: settled a GPU
    hit, the stand-ins' load of a0 having filled the slot)."""
    session = live_session(tmp_path, TWO_SLOTS, policy=Scripted([(5000.5, E0, "a0", PREFETCH)]))
    session.reconciled(5000.0, E0, [], [], [])
    assert [c.adapter for c in session.advance(5000.5)] == ["a0"]
    cold = session.cold_ms(E0, "a0") / 1000.0
    read_live(session, timed_line("a1", 999.0, 1001.0))
    early, later = 1001.0 + cold / 2, 1001.0 + 2 * cold
    for line in (timed_line("a0", early, 1001.5), timed_line("a0", later, 1002.0)):
        read_live(session, line)
    assert (session.counts.hits, session.counts.misses) == (1, 2)  # the second: a0 loaded for the first
    session.settle_all()
    assert recounted(session) == [(early, "a0", MISS, LATE), (later, "a0", HIT, HIT)]


def test_live_an_adapter_the_book_held_since_past_the_first_line_is_held_by_the_stand_ins_from_that_line(
    tmp_path: Path,
) -> None:
    """The clock far past the log: a0 loaded at 5000 for a line without a duration. The first line with one
    (1002) starts the stand-ins holding a0, done by then at the latest: a0's request at 1003 was a hit there (the
    book, whose record has a0 only from 5000, counted a miss)."""
    session = live_session(tmp_path, TWO_SLOTS)
    session.reconciled(5000.0, E0, [], [], [])
    read_live(session, RequestEvent(1000.0, ADAPTER, "a0", tenant="t", base_model="m"))
    for line in (timed_line("a1", 1001.0, 1002.0), timed_line("a0", 1003.0, 1003.5)):
        read_live(session, line)
    session.settle_all()
    assert recounted(session) == [(1003.0, "a0", MISS, HIT)]


def test_live_a_session_that_does_not_settle_makes_no_stand_ins(tmp_path: Path) -> None:
    """An expert's run (`settle` off): the request the stand-ins would settle a miss keeps its count."""
    session = live_session(tmp_path, TWO_SLOTS, settle=False)
    _warm_settled_a_miss(session)
    session.settle_all()
    assert session.settling is None and recounted(session) == []
    assert (session.counts.hits, session.counts.misses) == (1, 3)


def test_live_a_new_inventory_settles_first_what_came_on_the_engines_before_it(tmp_path: Path) -> None:
    """The requests read before an inventory change are settled on the engines they came to, then the stand-ins
    start anew from the next line."""
    session = live_session(tmp_path, TWO_SLOTS)
    _warm_settled_a_miss(session)
    assert recounted(session) == []
    session.replace_inventory(make_inventory(tmp_path, adapters=4, engines=TWO_SLOTS, name="again.yaml"))
    assert recounted(session) == [(1003.0, "a0", HIT, MISS)]
    assert session.settling is None


def test_live_a_load_sent_before_a_new_inventory_that_fails_after_it_takes_nothing_from_the_new_stand_ins(
    tmp_path: Path,
) -> None:
    """A prefetch of a0 sent at 1000.5 is still unanswered when the inventory changes (the old stand-ins take it
    as loaded); a0's request at 1001 starts the new stand-ins, which take the load in flight as a call made at
    1000.5. The prefetch then fails, at 1002, before their turn came to it: it loads nothing there, a0's request
    at 1001 loaded a0 itself, so a0's request at 1003 was a hit, where the book, which lost a0 with its load,
    counted a miss."""
    session = live_session(tmp_path, FOUR_SLOTS, policy=Scripted([(1000.5, E0, "a0", PREFETCH)]))
    read_live(session, timed_line("a1", 999.0, 1000.0))
    (prefetch,) = session.advance(1000.5)
    session.replace_inventory(make_inventory(tmp_path, adapters=4, engines=FOUR_SLOTS, name="again.yaml"))
    read_live(session, timed_line("a0", 1001.0, 1001.2))
    session.answered(1002.0, prefetch, "error", False, 1500.0, "timed out")
    read_live(session, timed_line("a0", 1003.0, 1003.5))
    session.settle_all()
    assert (1003.0, "a0", MISS, HIT) in recounted(session)


# --- faults a review found: the stand-ins differed from the engines they stand for --------------------------------


def test_live_a_load_in_flight_when_the_stand_ins_start_that_then_fails_loads_nothing_there(tmp_path: Path) -> None:
    """A prefetch of a0 sent at 1000.5 is in flight when the first line with a duration (1001) starts the
    stand-ins, and fails at 1001.2: the engine never held a0, so a0's request at 1003 was a miss, for the book
    and the stand-ins alike (`Settling.failed`: a load answered with an error loads nothing)."""
    session = live_session(tmp_path, policy=Scripted([(1000.5, E0, "a0", PREFETCH)]))
    (prefetch,) = session.advance(1000.5)
    read_live(session, timed_line("a1", 999.0, 1001.0))
    session.answered(1001.2, prefetch, "error", False, 700.0, "timed out")
    read_live(session, timed_line("a0", 1003.0, 1003.5))
    assert session.counts.misses == 2
    session.settle_all()
    assert recounted(session) == []


def test_live_an_adapter_a_reconcile_finds_registered_on_sglang_is_held_by_the_stand_ins_too(tmp_path: Path) -> None:
    """SGLang holds every registered adapter in host memory: a reconcile at 1001 found a0 registered (another
    process loaded it), and the book adopted it. a0's request at 1002 was a hit, not to be settled a miss."""
    session = live_session(tmp_path, [{"kind": "sglang", "max_loras_per_batch": 2, "max_loaded_loras": 4}])
    read_live(session, timed_line("a1", 999.0, 1000.0))
    session.reconciled(1001.0, E0, ["a1", "a0"], [], [])
    assert "a0" in session.core.book.engines[E0].resident
    read_live(session, timed_line("a0", 1002.0, 1002.5))
    assert session.counts.hits == 1
    session.settle_all()
    assert recounted(session) == []


# --- waits: a request served as counted, its wait or GPU slot otherwise ----------------------------------------


def test_live_a_miss_queued_behind_another_load_is_settled_a_miss_with_the_wait_it_waited(tmp_path: Path) -> None:
    """a0's and a1's requests came at the same instant to an engine with one loader: a1's load waited for a0's.
    Counted from its line, a1's miss waited its own load's time; settled, a miss still (not counted among the
    requests settling moved), with a0's load's time added to its wait, and to the cold time paid."""
    session = live_session(tmp_path)
    read_live(session, timed_line("a3", 990.0, 995.0))
    for line in (timed_line("a0", 1000.0, 1001.0), timed_line("a1", 1000.0, 1001.5)):
        read_live(session, line)
    counts = session.counts
    paid = counts.cold_ms_paid
    session.settle_all()
    moves = [a for a in session.take_answers() if isinstance(a, Recounted)]
    assert [(a.event.adapter, a.counted.outcome, a.served.outcome) for a in moves] == [("a1", MISS, MISS)]
    ahead = session.cold_ms(E0, "a0")
    assert moves[0].served.waited_ms == pytest.approx(moves[0].counted.waited_ms + ahead)
    assert counts.cold_ms_paid == pytest.approx(paid + ahead)
    assert (counts.misses, session.recounted) == (3, 0)


def test_a_wait_differing_by_less_than_a_millisecond_is_left_as_counted(tmp_path: Path) -> None:
    """The stand-ins' wait for a miss on an idle loader is its cold load's time: counted within `WAIT_SETTLED_MS`
    of it, the request is left; counted that much off or more, it is settled."""
    (probe,) = (s for s in _probe_waits(tmp_path / "p"))
    for off, settled in ((WAIT_SETTLED_MS * 0.9, False), (WAIT_SETTLED_MS, True), (-WAIT_SETTLED_MS, True)):
        (tmp_path / str(off)).mkdir()
        settling = _standins(tmp_path / str(off))
        settling.served(timed_line("a0", 1000.0, 1001.0), E0, Counted(MISS, probe + off, False, 0.0))
        assert bool(settling.drain()) is settled, off


def _probe_waits(tmp: Path) -> list[float]:
    tmp.mkdir()
    settling = _standins(tmp)
    _serve(settling, "a0", 1000.0, 1001.0)
    return [s.served.waited_ms for s in settling.drain()]


def test_each_request_and_call_is_served_with_the_engines_calibration_as_it_was_counted(tmp_path: Path) -> None:
    """The session's calibration of an engine's load times (measured over modelled) changes as loads are answered:
    a request counted while loads took twice the model's time is served with twice its cold time, one counted
    after they took three times with three, and a call with the calibration as it was made."""
    speed = {E0: 2.0}
    core = PolicyCore(make_inventory(tmp_path, adapters=4, engines=FOUR_SLOTS), LruPolicy())
    settling = Settling(core.book.engines, core.load_ms, core.sizes, 1000.0, {E0: []}, 0.0, None, speed)
    cold = {a: core.load_ms[E0].cold_ms(core.sizes[a]) for a in ("a0", "a1", "a2")}
    settling.served(timed_line("a0", 1000.0, 1001.0), E0, PROBE)
    speed[E0] = 3.0
    settling.served(timed_line("a1", 1010.0, 1011.0), E0, PROBE)
    settling.called(1020.0, LOAD, E0, "a2")
    speed[E0] = 1.0
    settling.served(timed_line("a2", 1020.0, 1020.5), E0, PROBE)  # came as the load was made: waits all of it
    speed[E0] = 2.0
    settling.served(timed_line("a0", 1030.0, 1030.5), E0, PROBE)  # two GPU slots, a1's and a2's: a0 waits its copy
    waits = {s.event.time: s.served.waited_ms for s in settling.drain()}
    copy = core.load_ms[E0].copy_ms(core.sizes["a0"])
    expected = {1000.0: 2 * cold["a0"], 1010.0: 3 * cold["a1"], 1020.0: 3 * cold["a2"], 1030.0: 2 * copy}
    assert waits == pytest.approx(expected)


def test_live_a_prefetch_hit_settled_a_miss_used_no_prefetch(tmp_path: Path) -> None:
    """Two host slots. a0 prefetched at 1001 (answered at 1001.1); a1's request at 1001.5 made a1 the most
    recent; a2's, at 1002 and running until 1010, evicted a0 on the engine. a0's request at 1003, its line read
    at 1004, found the book still holding the prefetch: counted a hit that used it. Settled, a miss that used no
    prefetch: the count of prefetches used goes back by one, and the journal's rows (their prefetch hits) too."""
    session = live_session(tmp_path, TWO_SLOTS, policy=Scripted([(1001.0, E0, "a0")]))
    read_live(session, timed_line("a1", 999.0, 1000.1))
    (call,) = session.advance(1001.0)
    session.answered(1001.1, call, LOADED, True, 10.0)
    read_live(session, timed_line("a1", 1001.5, 1001.6))
    read_live(session, timed_line("a0", 1003.0, 1004.0))
    counts = session.counts
    assert (counts.hits, counts.prefetch_used) == (2, 1)
    read_live(session, timed_line("a2", 1002.0, 1010.0))
    session.settle_all()
    moves = [a for a in session.take_answers() if isinstance(a, Recounted)]
    assert [(a.event.time, a.counted.outcome, a.counted.used, a.served.outcome) for a in moves] == [
        (1003.0, HIT, True, MISS)
    ]
    assert counts.prefetch_used == 0
    journal = Journaling(DaemonMetrics(), shadow=False, clock=lambda: "2026-12-06T00:00:00Z")
    journal.fold([Served(1004.0, moves[0].event, E0, HIT, False, True, 0.0), *moves])
    (o,) = journal.batch.rollups.values()
    assert (o.requests, o.hits, o.misses, o.prefetch_hits) == (1, 0, 1, 0)


def test_live_a_prefetch_of_an_adapter_a_running_request_brought_is_settled_as_no_use(tmp_path: Path) -> None:
    """a1's request came at 1000 and ran until 1005: the engine loaded a1 for it. The book, which reads its line
    only at 1005, prefetched a1 at 1001 (answered at 1001.1), and counted a1's next request (1003, read at 1003.5)
    a hit that used the prefetch and avoided its load. The engine had a1 already: the prefetch loaded nothing.
    Settled, the hit stays a hit that used no prefetch and avoided nothing, in the counts and in the journal."""
    session = live_session(tmp_path, policy=Scripted([(1001.0, E0, "a1")]))
    read_live(session, timed_line("a0", 998.0, 998.5))
    (call,) = session.advance(1001.0)
    session.answered(1001.1, call, LOADED, True, 10.0)
    read_live(session, timed_line("a1", 1003.0, 1003.5))
    counts = session.counts
    assert (counts.hits, counts.prefetch_used) == (1, 1) and counts.cold_ms_avoided > 0
    read_live(session, timed_line("a1", 1000.0, 1005.0))
    session.settle_all()
    moves = [a for a in session.take_answers() if isinstance(a, Recounted)]
    assert [(a.event.time, a.counted.used, a.served.outcome, a.served.used) for a in moves] == [
        (1003.0, True, HIT, False)
    ]
    assert (counts.hits, counts.prefetch_used, counts.cold_ms_avoided) == (1, 0, 0.0)
    assert session.recounted == 0  # no move of outcome
    journal = Journaling(DaemonMetrics(), shadow=False, clock=lambda: "2026-12-06T00:00:00Z")
    counted = moves[0].counted
    journal.fold([Served(1003.5, moves[0].event, E0, HIT, counted.gpu, True, counted.avoided_ms), *moves])
    (o,) = journal.batch.rollups.values()
    assert (o.requests, o.hits, o.prefetch_hits, o.avoided_ms) == (1, 1, 0, 0.0)


def test_live_a_request_late_on_a_prefetch_queued_behind_a_running_requests_load_used_it_all_the_same(
    tmp_path: Path,
) -> None:
    """a2's request came half a load time before a1's prefetch was sent, and ran until 1010: the engine's loader
    was loading a2 when the prefetch came, so the prefetch waited its turn. a1's request, a tenth of a load time
    after the prefetch, was counted late on it, having waited what the book knew of the load when its line came
    (nothing: done by then, as the book had it); the stand-ins served it late on the same prefetch, waiting the
    rest of a2's load and 0.9 of its own. Settled: late still, the prefetch used
    still, and no load time avoided (it waited more than a whole load)."""
    session = live_session(tmp_path, policy=Scripted([(1001.0, E0, "a1")]))
    read_live(session, timed_line("a0", 998.0, 998.5))
    cold = session.model_ms(E0, "a1") / 1000.0
    (call,) = session.advance(1001.0)
    read_live(session, timed_line("a1", 1001.0 + cold / 10, 1001.0 + 2 * cold))
    session.answered(1001.0 + cold, call, LOADED, True, cold * 1000.0)
    counts = session.counts
    assert (counts.late, counts.prefetch_used) == (1, 1) and counts.cold_ms_avoided > 0
    read_live(session, timed_line("a2", 1001.0 - cold / 2, 1010.0))
    session.settle_all()
    moves = [a for a in session.take_answers() if isinstance(a, Recounted)]
    assert [(a.event.adapter, a.counted.outcome, a.served.outcome, a.served.used) for a in moves] == [
        ("a1", LATE, LATE, True)
    ]
    a2 = session.model_ms(E0, "a2")  # a2's load began half of a1's before the prefetch; then a1's, less a tenth
    assert moves[0].served.waited_ms == pytest.approx(a2 + 0.4 * cold * 1000.0)
    assert (counts.late, counts.prefetch_used, counts.cold_ms_avoided) == (1, 1, 0.0)


def test_live_a_prefetch_made_before_the_first_line_with_a_duration_is_used_on_the_stand_ins_too(
    tmp_path: Path,
) -> None:
    """The stand-ins start from the book when the first line with a duration comes: a1, prefetched and done
    before it, and a2, prefetched and still loading, are loads ahead of demand there too, so the requests that
    use them, counted so, stay so (nothing settled); a3, loaded by a request before, is no prefetch."""
    session = live_session(tmp_path, policy=Scripted([(1001.0, E0, "a1"), (1002.0, E0, "a2")]))
    (first,) = session.advance(1001.0)
    session.answered(1001.5, first, LOADED, True, 10.0)
    session.advance(1002.0)  # a2's load in flight until its answer
    for line in (
        timed_line("a3", 1002.1, 1002.2),
        timed_line("a1", 1002.3, 1002.4),
        timed_line("a2", 1002.4, 1002.5),
        timed_line("a3", 1002.6, 1002.7),
    ):
        read_live(session, line)
    counts = session.counts
    assert (counts.misses, counts.hits, counts.late, counts.prefetch_used) == (1, 2, 1, 2)
    session.settle_all()
    assert [a for a in session.take_answers() if isinstance(a, Recounted) and a.served.used != a.counted.used] == []
    assert counts.prefetch_used == 2
