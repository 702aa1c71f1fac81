"""Hedge: a second attempt after a delay; the first success wins, the loser is cancelled."""

from __future__ import annotations

import asyncio

import pytest

from corun.resilience import Hedge, HedgeLaunched, HedgeOptions
from corun.testing import EventRecorder, MockClock

from .helpers import Boom


class Replica:
    """An attempt per call: latencies and failures by attempt number; records what happened."""

    def __init__(
        self, clock: MockClock, latencies: list[float], fail: tuple[int, ...] = ()
    ) -> None:
        self.clock = clock
        self.latencies = latencies
        self.fail = fail
        self.started: list[tuple[int, float]] = []
        self.cancelled: list[int] = []
        self.finished: list[int] = []

    async def __call__(self) -> str:
        n = len(self.started) + 1
        self.started.append((n, self.clock.now()))
        try:
            await self.clock.sleep(self.latencies[n - 1])
        except asyncio.CancelledError:
            self.cancelled.append(n)
            raise
        self.finished.append(n)
        if n in self.fail:
            raise Boom(f"attempt {n} failed")
        return f"attempt {n}"


def test_a_fast_call_is_not_hedged(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    hedge = Hedge(HedgeOptions(delay=1.0), clock=clock, listeners=[recorder])
    replica = Replica(clock, [0.5])
    assert run(hedge.execute(replica)) == "attempt 1"
    assert replica.started == [(1, 0.0)]
    assert recorder.of_type(HedgeLaunched) == []
    assert hedge.statistics().hedges == 0


def test_a_slow_call_is_hedged_after_the_delay_and_the_loser_cancelled(
    run, clock: MockClock
) -> None:
    recorder = EventRecorder()
    hedge = Hedge(HedgeOptions(delay=0.2), name="dns", clock=clock, listeners=[recorder])
    replica = Replica(clock, [5.0, 0.1])
    assert run(hedge.execute(replica, key="resolver")) == "attempt 2"
    assert replica.started == [(1, 0.0), (2, 0.2)]
    assert replica.cancelled == [1]  # the loser was cancelled, and awaited
    assert clock.now() == pytest.approx(0.3)
    (launched,) = recorder.of_type(HedgeLaunched)
    assert (launched.policy, launched.key, launched.attempt, launched.delay) == (
        "dns",
        "resolver",
        2,
        0.2,
    )
    assert launched.at == 0.2
    stats = hedge.statistics()
    assert (stats.calls, stats.hedges, stats.hedge_wins) == (1, 1, 1)


def test_the_first_attempt_can_still_win(run, clock: MockClock) -> None:
    hedge = Hedge(HedgeOptions(delay=0.2), clock=clock)
    replica = Replica(clock, [0.3, 1.0])
    assert run(hedge.execute(replica)) == "attempt 1"
    assert replica.cancelled == [2]
    assert hedge.statistics().hedge_wins == 0


def test_a_failure_before_the_delay_is_not_hedged(run, clock: MockClock) -> None:
    hedge = Hedge(HedgeOptions(delay=1.0), clock=clock)
    replica = Replica(clock, [0.1], fail=(1,))
    with pytest.raises(Boom, match="attempt 1"):
        run(hedge.execute(replica))
    assert len(replica.started) == 1


def test_a_failed_attempt_waits_for_the_other(run, clock: MockClock) -> None:
    hedge = Hedge(HedgeOptions(delay=0.5), clock=clock)
    replica = Replica(clock, [1.0, 1.0], fail=(1,))
    assert run(hedge.execute(replica)) == "attempt 2"
    assert clock.now() == 1.5


def test_when_all_attempts_fail_the_last_failure_is_raised(run, clock: MockClock) -> None:
    hedge = Hedge(HedgeOptions(delay=0.5), clock=clock)
    replica = Replica(clock, [1.0, 1.0], fail=(1, 2))
    with pytest.raises(Boom, match="attempt 2"):
        run(hedge.execute(replica))


def test_several_hedges_each_a_delay_apart(run, clock: MockClock) -> None:
    hedge = Hedge(HedgeOptions(delay=1.0, max_hedges=2), clock=clock)
    replica = Replica(clock, [10.0, 10.0, 0.5])
    assert run(hedge.execute(replica)) == "attempt 3"
    assert replica.started == [(1, 0.0), (2, 1.0), (3, 2.0)]
    assert sorted(replica.cancelled) == [1, 2]


def test_percentile_delay_follows_recent_latencies(run, clock: MockClock) -> None:
    hedge = Hedge(HedgeOptions(delay=5.0, percentile=90.0, min_samples=10, window=60), clock=clock)

    async def main() -> None:
        assert hedge.delay() == 5.0  # no samples yet: the fallback
        for latency in [0.1] * 9 + [0.5] * 1:
            await hedge.execute(clock.sleep, latency)
        # Rounded up to the histogram bucket's upper bound: at most 4.4 % more.
        assert 0.1 <= hedge.delay() <= 0.1 * 1.045
        for _ in range(10):
            await hedge.execute(clock.sleep, 0.5)
        assert 0.5 <= hedge.delay() <= 0.5 * 1.045

    run(main())


def test_percentile_delay_hedges_a_slow_outlier(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    hedge = Hedge(
        HedgeOptions(delay=5.0, percentile=95.0, min_samples=5), clock=clock, listeners=[recorder]
    )

    async def main() -> None:
        for _ in range(20):
            await hedge.execute(clock.sleep, 0.2)
        replica = Replica(clock, [30.0, 0.2])
        start = clock.now()
        assert await hedge.execute(replica) == "attempt 2"
        assert 0.2 <= replica.started[1][1] - start <= 0.2 * 1.045

    run(main())
    # Calls as fast as the percentile were not hedged; only the outlier was.
    assert len(recorder.of_type(HedgeLaunched)) == 1


def test_outer_cancellation_cancels_every_attempt(run, clock: MockClock) -> None:
    hedge = Hedge(HedgeOptions(delay=1.0), clock=clock)
    replica = Replica(clock, [100.0, 100.0])

    async def main() -> None:
        task = asyncio.ensure_future(hedge.execute(replica))
        await clock.sleep(2.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert sorted(replica.cancelled) == [1, 2]


def test_decorator(run, clock: MockClock) -> None:
    hedge = Hedge(HedgeOptions(delay=0.1), clock=clock)
    replica = Replica(clock, [1.0, 0.1])

    @hedge
    async def lookup() -> str:
        return await replica()

    assert run(lookup()) == "attempt 2"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delay": -1}, "delay must be between 0"),
        ({"percentile": 0}, "percentile must be in \\(0, 100\\)"),
        ({"percentile": 100}, "percentile must be in"),
        ({"percentile": 101}, "percentile must be between 0 and 100"),
        ({"min_samples": 0}, "min_samples"),
        ({"window": 0}, "window"),
        ({"max_hedges": 11}, "max_hedges must be between 1 and 10"),
    ],
)
def test_options_reject_bad_values(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HedgeOptions(**options)  # type: ignore[arg-type]
