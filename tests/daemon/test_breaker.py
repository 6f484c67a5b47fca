"""The circuit breaker and the per-adapter backoff (daemon/breaker.py), each rule of its docstring, on a clock
the test moves."""

from __future__ import annotations

from lorafleet.daemon.breaker import CLOSED, HALF_OPEN, OPEN, AdapterBackoff, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failures_in_a_row_open_it_and_a_success_between_them_starts_the_count_again() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures_to_open=3, cooldown_s=5.0, clock=clock)
    breaker.failure()
    breaker.failure()
    breaker.success()
    breaker.failure()
    breaker.failure()
    assert breaker.state == CLOSED and breaker.allow()
    breaker.failure()
    assert (breaker.state, breaker.opened, breaker.open_until) == (OPEN, 1, 1005.0)


def test_open_sends_nothing_until_the_cooldown_then_one_probe() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures_to_open=1, cooldown_s=5.0, clock=clock)
    breaker.failure()
    clock.now = 1004.9
    assert not breaker.allow()
    clock.now = 1005.0
    assert breaker.allow() and breaker.state == HALF_OPEN
    assert not breaker.allow()  # one probe at a time


def test_a_failed_probe_doubles_the_cooldown_up_to_its_cap_and_a_success_resets_it() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures_to_open=1, cooldown_s=5.0, max_cooldown_s=15.0, clock=clock)
    breaker.failure()
    cooldowns = []
    for _ in range(3):
        clock.now = breaker.open_until
        assert breaker.allow()
        breaker.failure()  # the probe failed
        cooldowns.append(breaker.open_until - clock.now)
    assert cooldowns == [10.0, 15.0, 15.0] and breaker.opened == 4
    clock.now = breaker.open_until
    assert breaker.allow()
    breaker.success()
    assert (breaker.state, breaker.failures, breaker.cooldown_s) == (CLOSED, 0, 5.0)
    breaker.failure()
    assert breaker.open_until == clock.now + 5.0


def test_failures_while_open_do_not_reopen_or_extend_it() -> None:
    """A call already in flight when the breaker opened may fail after: the open window stays as it was."""
    clock = Clock()
    breaker = CircuitBreaker(failures_to_open=2, cooldown_s=5.0, clock=clock)
    breaker.failure()
    breaker.failure()
    clock.now = 1002.0
    breaker.failure()
    assert (breaker.state, breaker.opened, breaker.open_until) == (OPEN, 1, 1005.0)


def test_an_adapters_backoff_doubles_from_its_first_wait_up_to_the_cap_and_a_success_forgets_it() -> None:
    clock = Clock()
    backoff = AdapterBackoff(first_s=5.0, max_s=12.0, clock=clock)
    assert backoff.blocked("a") is None
    waits = []
    for error in ("missing", "missing again", "still missing"):
        backoff.failure("a", error)
        until = backoff.waits["a"][0]
        waits.append(until - clock.now)
        assert backoff.blocked("a") == error and backoff.blocked("b") is None  # one adapter only
        clock.now = until - 0.1
        assert backoff.blocked("a") == error
        clock.now = until
        assert backoff.blocked("a") is None
    assert waits == [5.0, 10.0, 12.0]
    backoff.success("a")
    backoff.failure("a", "new")
    assert backoff.waits["a"][0] - clock.now == 5.0
