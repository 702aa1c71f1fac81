"""Bulkhead: concurrency limit, bounded FIFO queue, rejection, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from corun.resilience import Bulkhead, BulkheadFull, BulkheadOptions, Rejected
from corun.testing import EventRecorder, MockClock


class Tracker:
    """Calls that hold until their event is set; records concurrency and order."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.order: list[int] = []

    async def __call__(self, n: int, seconds: float, clock: MockClock) -> int:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.order.append(n)
        try:
            await clock.sleep(seconds)
        finally:
            self.in_flight -= 1
        return n


def test_at_most_n_in_flight_and_the_queue_runs_in_order(run, clock: MockClock) -> None:
    bulkhead = Bulkhead(BulkheadOptions(max_concurrent=2, max_queue=3), clock=clock)
    tracker = Tracker()

    async def main() -> list[int]:
        return await asyncio.gather(*(bulkhead.execute(tracker, n, 1.0, clock) for n in range(5)))

    assert run(main()) == [0, 1, 2, 3, 4]
    assert tracker.peak == 2
    assert tracker.order == [0, 1, 2, 3, 4]
    assert clock.now() == 3.0  # three waves of one second
    stats = bulkhead.statistics()
    assert (stats.in_flight, stats.queued, stats.admitted, stats.rejected) == (0, 0, 5, 0)


def test_a_full_queue_rejects_at_once(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    bulkhead = Bulkhead(
        BulkheadOptions(max_concurrent=1, max_queue=1), name="db", clock=clock, listeners=[recorder]
    )
    tracker = Tracker()

    async def main() -> None:
        first = asyncio.ensure_future(bulkhead.execute(tracker, 1, 5.0, clock))
        second = asyncio.ensure_future(bulkhead.execute(tracker, 2, 5.0, clock))
        await asyncio.sleep(0)
        stats = bulkhead.statistics()
        assert (stats.in_flight, stats.queued) == (1, 1)
        with pytest.raises(BulkheadFull) as info:
            await bulkhead.execute(tracker, 3, 5.0, clock, key="k")
        assert str(info.value) == (
            "bulkhead 'db' for key 'k' is full: 1 calls in flight and 1 waiting"
        )
        assert clock.now() == 0.0  # rejected without waiting
        assert await asyncio.gather(first, second) == [1, 2]

    run(main())
    assert tracker.order == [1, 2]
    (rejected,) = recorder.of_type(Rejected)
    assert (rejected.policy, rejected.key, rejected.reason) == ("db", "k", "bulkhead_full")
    assert bulkhead.statistics().rejected == 1


def test_no_queue_means_reject_when_busy(run, clock: MockClock) -> None:
    bulkhead = Bulkhead(BulkheadOptions(max_concurrent=1), clock=clock)

    async def main() -> None:
        busy = asyncio.ensure_future(bulkhead.execute(clock.sleep, 1))
        await asyncio.sleep(0)
        with pytest.raises(BulkheadFull):
            await bulkhead.execute(clock.sleep, 1)
        await busy
        await bulkhead.execute(clock.sleep, 1)  # free again

    run(main())


def test_a_cancelled_waiter_leaves_the_queue(run, clock: MockClock) -> None:
    bulkhead = Bulkhead(BulkheadOptions(max_concurrent=1, max_queue=1), clock=clock)

    async def main() -> None:
        busy = asyncio.ensure_future(bulkhead.execute(clock.sleep, 10))
        await asyncio.sleep(0)
        waiter = asyncio.ensure_future(bulkhead.execute(clock.sleep, 1))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert bulkhead.statistics().queued == 0
        # Its place in the queue is free again.
        again = asyncio.ensure_future(bulkhead.execute(clock.sleep, 1))
        await busy
        await again
        assert bulkhead.statistics().in_flight == 0

    run(main())


def test_a_waiter_cancelled_after_the_hand_over_passes_the_slot_on(run, clock: MockClock) -> None:
    bulkhead = Bulkhead(BulkheadOptions(max_concurrent=1, max_queue=2), clock=clock)
    ran: list[str] = []

    async def job(name: str) -> None:
        ran.append(name)

    async def main() -> None:
        async with bulkhead.scope():
            unlucky = asyncio.ensure_future(bulkhead.execute(job, "unlucky"))
            lucky = asyncio.ensure_future(bulkhead.execute(job, "lucky"))
            await asyncio.sleep(0)
            assert bulkhead.statistics().queued == 2
        # Leaving the scope handed the slot to "unlucky", which has not run
        # yet; it is cancelled now, before it can use the slot.
        unlucky.cancel()
        with pytest.raises(asyncio.CancelledError):
            await unlucky
        await lucky
        assert bulkhead.statistics().in_flight == 0

    run(main())
    assert ran == ["lucky"]


def test_scope_and_decorator(run, clock: MockClock) -> None:
    bulkhead = Bulkhead(BulkheadOptions(max_concurrent=1), clock=clock)

    @bulkhead
    async def guarded() -> str:
        return "ok"

    async def main() -> None:
        async with bulkhead.scope(key="a"):
            assert bulkhead.statistics().in_flight == 1
            with pytest.raises(BulkheadFull):
                await guarded()
            with pytest.raises(BulkheadFull):
                async with bulkhead.scope():
                    pass
        assert bulkhead.statistics().in_flight == 0
        assert await guarded() == "ok"
        # A failing block releases its slot too.
        with pytest.raises(KeyError):
            async with bulkhead.scope():
                raise KeyError("x")
        assert bulkhead.statistics().in_flight == 0

    run(main())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_concurrent": 0}, "max_concurrent must be between 1 and 1000000"),
        ({"max_concurrent": 10**7}, "max_concurrent"),
        ({"max_queue": -1}, "max_queue must be between 0"),
    ],
)
def test_options_reject_bad_values(options: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BulkheadOptions(**options)
