"""AdaptiveLimit: slow start, additive increase, multiplicative decrease, on the mock clock."""

from __future__ import annotations

import pytest

from corun.resilience import AdaptiveLimit, AdaptiveLimitOptions
from corun.testing import MockClock


def fill(limit: AdaptiveLimit) -> list[float]:
    """Acquire until the limit refuses; the start times."""
    started = []
    while (at := limit.acquire()) is not None:
        started.append(at)
    return started


def round_trip(limit: AdaptiveLimit, clock: MockClock, latency: float) -> int:
    """One round trip at the limit: fill it, wait ``latency``, every call succeeds."""
    started = fill(limit)
    clock.advance(latency)
    for at in started:
        limit.succeeded(at)
    return len(started)


def test_slow_start_doubles_per_round_trip_up_to_the_ceiling() -> None:
    clock = MockClock()
    limit = AdaptiveLimit(AdaptiveLimitOptions(initial=2, max_limit=64), clock=clock)
    sent = [round_trip(limit, clock, 0.05) for _ in range(7)]
    assert sent == [2, 4, 8, 16, 32, 64, 64]
    stats = limit.statistics()
    assert (stats.limit, stats.peak, stats.slow_start, stats.decreases) == (64, 64, True, 0)
    assert stats.baseline == pytest.approx(0.05)


def test_overload_halves_the_limit_once_per_round_trip() -> None:
    clock = MockClock()
    limit = AdaptiveLimit(AdaptiveLimitOptions(initial=32, max_limit=64), clock=clock)
    started = fill(limit)
    clock.advance(0.05)
    # Every call of that round trip is refused (429s): one decrease, not 32.
    for at in started:
        limit.overloaded(at)
    assert (limit.limit, limit.decreases, limit.slow_start) == (16, 1, False)
    # A call sent after the decrease that is refused decreases again.
    [at] = fill(limit)[:1]
    limit.overloaded(at)
    assert limit.limit == 8
    assert limit.in_flight == 15  # the others are still out
    limit_min = AdaptiveLimit(AdaptiveLimitOptions(initial=1, min_limit=1), clock=clock)
    at = limit_min.acquire()
    assert at is not None
    limit_min.overloaded(at)
    assert limit_min.limit == 1  # never below min_limit


def test_after_a_decrease_it_grows_by_one_per_round_trip() -> None:
    clock = MockClock()
    limit = AdaptiveLimit(AdaptiveLimitOptions(initial=10, max_limit=64), clock=clock)
    at = limit.acquire()
    assert at is not None
    clock.advance(0.01)
    limit.overloaded(at)
    assert limit.limit == 5
    assert [round_trip(limit, clock, 0.05) for _ in range(4)] == [5, 6, 7, 8]


def answer(limit: AdaptiveLimit, clock: MockClock, latencies: list[float]) -> None:
    """Send ``len(latencies)`` calls at once; answer them after those latencies."""
    started = [limit.acquire() for _ in latencies]
    elapsed = 0.0
    for at, latency in sorted(zip(started, latencies, strict=True), key=lambda p: p[1]):
        assert at is not None
        clock.advance(latency - elapsed)
        elapsed = latency
        limit.succeeded(at)


def test_a_round_trip_whose_median_latency_doubles_shrinks_the_limit() -> None:
    clock = MockClock()
    options = AdaptiveLimitOptions(initial=20, max_limit=20, latency_slack=0.02)
    limit = AdaptiveLimit(options, clock=clock)
    answer(limit, clock, [0.05] * 20)  # baseline 50 ms
    assert (limit.limit, limit.decreases) == (20, 0)
    # A minority of slow answers (slow pages) is not queueing.
    answer(limit, clock, [0.05] * 11 + [0.5] * 9)
    assert limit.decreases == 0
    # Up to latency_tolerance times the baseline is healthy.
    answer(limit, clock, [0.099] * 20)
    assert limit.decreases == 0
    # A round trip whose median is 2.1x the baseline and 55 ms above it:
    # one decrease by latency_backoff.
    answer(limit, clock, [0.105] * 20)
    assert limit.decreases == 1
    assert limit.limit == int(20 * options.latency_backoff)


def test_latency_slack_keeps_jitter_on_a_fast_dependency_from_shrinking_it() -> None:
    clock = MockClock()
    limit = AdaptiveLimit(AdaptiveLimitOptions(initial=8, latency_slack=0.02), clock=clock)
    answer(limit, clock, [0.001] * 8)
    answer(limit, clock, [0.015] * 8)  # 15x the baseline, but only 14 ms above it
    assert limit.decreases == 0


def test_it_does_not_grow_a_limit_it_does_not_use() -> None:
    clock = MockClock()
    limit = AdaptiveLimit(AdaptiveLimitOptions(initial=10, max_limit=64), clock=clock)
    for _ in range(100):
        at = limit.acquire()
        assert at is not None
        clock.advance(0.01)
        limit.succeeded(at)  # one in flight of 10: the limit is not the constraint
    assert limit.limit == 10 and limit.increases == 0


def test_the_baseline_forgets_an_old_minimum() -> None:
    clock = MockClock()
    options = AdaptiveLimitOptions(initial=4, max_limit=4, baseline_window=10.0)
    limit = AdaptiveLimit(options, clock=clock)
    round_trip(limit, clock, 0.01)
    assert limit.baseline == pytest.approx(0.01)
    # The dependency got slower for good: within one to two windows the
    # baseline follows it, and 200 ms stops counting as a rise.
    for _ in range(150):
        round_trip(limit, clock, 0.2)
    assert limit.baseline == pytest.approx(0.2)


def test_ignored_calls_release_their_slot_and_change_nothing() -> None:
    clock = MockClock()
    limit = AdaptiveLimit(AdaptiveLimitOptions(initial=2, max_limit=8), clock=clock)
    assert fill(limit) == [0.0, 0.0] and limit.full
    limit.ignored()
    assert not limit.full and limit.limit == 2 and limit.in_flight == 1
    assert limit.statistics().baseline is None


@pytest.mark.parametrize(
    "options",
    [
        {"initial": 0},
        {"initial": 65, "max_limit": 64},
        {"min_limit": 5, "initial": 2},
        {"max_limit": 100_001},
        {"backoff": 1.0},
        {"latency_backoff": 0.0},
        {"latency_tolerance": 1.0},
        {"latency_slack": -1.0},
        {"baseline_window": 0.0},
        {"latency_samples": 0},
    ],
)
def test_options_are_validated(options: dict[str, float]) -> None:
    with pytest.raises((ValueError, TypeError)):
        AdaptiveLimitOptions(**options)  # type: ignore[arg-type]
