"""Events (payloads, dispatch) and metrics (counters, latency histograms)."""

from __future__ import annotations

import dataclasses
import logging
import math
import random

import pytest

from corun.resilience import (
    Breaker,
    BreakerOptions,
    Bulkhead,
    BulkheadFull,
    BulkheadOptions,
    CallFinished,
    GaveUp,
    LatencyHistogram,
    Listener,
    Metrics,
    RateLimiter,
    RateLimiterOptions,
    Retry,
    RetryOptions,
    RetryScheduled,
    Timeout,
    TimeoutOptions,
    WindowedHistogram,
)
from corun.resilience.events import Hooks
from corun.testing import EventRecorder, MockClock

from .helpers import Boom, Flaky


def test_event_payloads_are_frozen() -> None:
    event = GaveUp("p", None, 1.0, 3, 2.0, "attempts", None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.attempts = 4  # type: ignore[misc]


def test_only_overridden_hooks_are_subscribed() -> None:
    class OnlyRetries(Listener):
        def retry_scheduled(self, event: RetryScheduled) -> None:
            pass

    hooks = Hooks([OnlyRetries()])
    assert len(hooks.retry_scheduled) == 1
    assert hooks.gave_up == () and hooks.call_finished == ()
    with pytest.raises(TypeError, match=r"must be a corun\.resilience\.Listener"):
        hooks.add(object())  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        hooks.remove(Listener())


def test_a_raising_listener_is_logged_and_the_call_goes_on(
    run, clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Listener):
        def retry_scheduled(self, event: RetryScheduled) -> None:
            raise RuntimeError("listener bug")

    recorder = EventRecorder()
    retry = Retry(RetryOptions(initial_delay=0.1), clock=clock, listeners=[Broken(), recorder])
    with caplog.at_level(logging.ERROR, logger="corun.resilience"):
        assert run(retry.execute(Flaky(clock, failures=2))) == "ok"
    assert len(recorder.of_type(RetryScheduled)) == 2  # later listeners still called
    # Logged each time: the listener stays registered.
    logged = [r for r in caplog.records if r.name == "corun.resilience"]
    assert len(logged) == 2
    assert all("raised in retry_scheduled" in r.getMessage() for r in logged)


def test_retry_events_carry_the_details(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = Retry(
        RetryOptions(max_attempts=2, initial_delay=2.0, jitter=False),
        name="db",
        clock=clock,
        listeners=[recorder],
    )
    flaky = Flaky(clock, failures=5, latency=0.25)
    with pytest.raises(Boom):
        run(retry.execute(flaky, key="primary"))
    scheduled, gave_up, finished = recorder.events
    assert scheduled == RetryScheduled(
        policy="db",
        key="primary",
        at=0.25,
        attempt=1,
        delay=2.0,
        elapsed=0.25,
        caused_by=scheduled.caused_by,  # type: ignore[attr-defined]
        result=None,
        server_delay=None,
    )
    assert isinstance(scheduled.caused_by, Boom)  # type: ignore[attr-defined]
    assert isinstance(gave_up, GaveUp)
    assert (gave_up.at, gave_up.attempts, gave_up.elapsed, gave_up.reason) == (
        2.5,
        2,
        2.5,
        "attempts",
    )
    assert finished == CallFinished(
        policy="db", key="primary", at=2.5, kind="retry", duration=2.5, outcome="failure"
    )


def test_metrics_count_events_and_time_calls(run, clock: MockClock) -> None:
    metrics = Metrics()
    retry = Retry(RetryOptions(max_attempts=3, initial_delay=1, jitter=False), clock=clock)
    breaker = Breaker(BreakerOptions(consecutive_failures=2), clock=clock)
    bulkhead = Bulkhead(BulkheadOptions(max_concurrent=1), clock=clock)
    limiter = RateLimiter(RateLimiterOptions(rate=1, burst=1), clock=clock)
    timeout = Timeout(TimeoutOptions(1.0), clock=clock)
    for policy in (retry, breaker, bulkhead, limiter, timeout):
        policy.add_listener(metrics)

    async def main() -> None:
        for latency in (0.5, 0.5, 0.25):
            await retry.execute(Flaky(clock, latency=latency))
        with pytest.raises(Boom):
            await retry.execute(Flaky(clock, failures=9))
        for _ in range(2):
            with pytest.raises(Boom):
                await breaker.execute(Flaky(clock, failures=1))
        with pytest.raises(Exception, match="is open"):
            await breaker.execute(Flaky(clock))
        async with bulkhead.scope():
            with pytest.raises(BulkheadFull):
                await bulkhead.execute(Flaky(clock))
        await limiter.execute(Flaky(clock))
        with pytest.raises(Exception, match="limit reached"):
            await limiter.execute(Flaky(clock))
        with pytest.raises(TimeoutError):
            await timeout.execute(clock.sleep, 5)

    run(main())
    stats = metrics.statistics()
    assert stats.count("retry", "retries") == 2
    assert stats.count("retry", "gave_up.attempts") == 1
    assert stats.count("retry", "calls.success") == 3
    assert stats.count("retry", "calls.failure") == 1
    assert stats.count("breaker", "state.open") == 1
    assert stats.count("breaker", "rejected.breaker_open") == 1
    assert stats.count("breaker", "calls.rejected") == 1
    assert stats.count("bulkhead", "rejected.bulkhead_full") == 1
    assert stats.count("rate_limiter", "rejected.rate_limited") == 1
    assert stats.count("timeout", "timed_out.attempt") == 1
    assert stats.count("retry", "nothing") == 0
    latency = stats.latency["retry"]
    assert latency.count == 4  # success and failure, not rejections
    assert (latency.minimum, latency.maximum) == (0.25, 2.0 + 1.0)
    assert latency.p50 == pytest.approx(0.5, rel=0.025)
    assert "breaker" in stats.latency and "bulkhead" not in stats.latency
    assert metrics.histogram("retry") is not None and metrics.histogram("nope") is None


def test_histogram_percentiles_are_within_the_bucket_error() -> None:
    rng = random.Random(3)
    values = [rng.lognormvariate(-3, 1) for _ in range(20_000)]
    histogram = LatencyHistogram()
    for v in values:
        histogram.record(v)
    ordered = sorted(values)
    for q in (50, 90, 99, 99.9):
        exact = ordered[math.ceil(len(ordered) * q / 100) - 1]
        assert histogram.percentile(q) == pytest.approx(exact, rel=0.025)
    stats = histogram.statistics()
    assert stats.count == 20_000
    assert stats.mean == pytest.approx(sum(values) / len(values))
    assert (stats.minimum, stats.maximum) == (min(values), max(values))


def test_histogram_edges() -> None:
    histogram = LatencyHistogram()
    assert histogram.percentile(99) == 0.0
    assert histogram.statistics().count == 0
    for _ in range(10):
        histogram.record(0.125)
    assert histogram.percentile(50) == 0.125  # clamped to the exact min/max
    histogram.record(0.0)
    histogram.record(-1.0)  # counted as 0
    assert histogram.statistics().minimum == 0.0
    histogram.record(1e12)  # clamped into the last bucket, still counted
    assert histogram.statistics().maximum == 1e12
    with pytest.raises(ValueError, match="finite"):
        histogram.record(float("nan"))
    for bad in (0, -5, 100.5):
        with pytest.raises(ValueError, match="percentile"):
            histogram.percentile(bad)


def test_windowed_histogram_forgets_old_generations() -> None:
    window = WindowedHistogram(10.0)
    assert window.percentile(50, 0.0) is None
    for _ in range(10):
        window.record(1.0, now=0.0)
    assert window.count(5.0) == 10
    window.record(2.0, now=12.0)  # rotates: t=0 samples are now the previous generation
    assert window.count(12.0) == 11
    assert window.count(23.0) == 1  # rotates again: only the t=12 sample is left
    assert window.percentile(50, 35.0) is None  # two windows without samples
    with pytest.raises(ValueError):
        WindowedHistogram(0)
