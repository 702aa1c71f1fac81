"""Timeout: per attempt and overall, on the injected clock."""

from __future__ import annotations

import asyncio

import pytest

from corun.resilience import (
    AttemptTimeout,
    OverallTimeout,
    Retry,
    RetryOptions,
    TimedOut,
    Timeout,
    TimeoutOptions,
)
from corun.testing import EventRecorder, MockClock


class Slow:
    """Sleeps ``seconds`` on the clock per call; records cancellations."""

    def __init__(self, clock: MockClock, *seconds: float) -> None:
        self.clock = clock
        self.seconds = list(seconds)
        self.calls = 0
        self.cancelled = 0

    async def __call__(self) -> str:
        self.calls += 1
        try:
            await self.clock.sleep(self.seconds[min(self.calls, len(self.seconds)) - 1])
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return f"call {self.calls}"


def test_attempt_timeout_cancels_the_call_at_the_limit(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    timeout = Timeout(TimeoutOptions(2.0), name="t", clock=clock, listeners=[recorder])
    slow = Slow(clock, 10.0)
    with pytest.raises(AttemptTimeout) as info:
        run(timeout.execute(slow, key="k"))
    assert isinstance(info.value, TimeoutError)
    assert isinstance(info.value.__cause__, asyncio.CancelledError)
    assert str(info.value) == "attempt timed out after 2 s ('t' for key 'k')"
    assert (slow.cancelled, clock.now()) == (1, 2.0)
    (event,) = recorder.of_type(TimedOut)
    assert (event.policy, event.key, event.at, event.timeout, event.overall) == (
        "t",
        "k",
        2.0,
        2.0,
        False,
    )
    stats = timeout.statistics()
    assert (stats.calls, stats.timed_out) == (1, 1)


def test_overall_timeout_raises_its_own_error(run, clock: MockClock) -> None:
    timeout = Timeout(TimeoutOptions(1.5, overall=True), clock=clock)
    with pytest.raises(OverallTimeout, match=r"operation timed out after 1\.5 s"):
        run(timeout.execute(Slow(clock, 10.0)))


def test_a_fast_call_disarms_the_timer(run, clock: MockClock) -> None:
    timeout = Timeout(TimeoutOptions(2.0), clock=clock)
    assert run(timeout.execute(Slow(clock, 1.0))) == "call 1"
    assert clock.pending == 0
    assert clock.now() == 1.0
    assert timeout.statistics().timed_out == 0


def test_outside_cancellation_is_not_turned_into_a_timeout(run, clock: MockClock) -> None:
    timeout = Timeout(TimeoutOptions(5.0), clock=clock)
    slow = Slow(clock, 10.0)

    async def main() -> None:
        task = asyncio.ensure_future(timeout.execute(slow))
        await clock.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    run(main())
    assert timeout.statistics().timed_out == 0


def test_a_cancellation_racing_the_timeout_stays_a_cancellation(run) -> None:
    # The timer fires and, before the task runs again, someone else cancels
    # it too: the caller asked for cancellation, so it must not become a
    # TimeoutError (asyncio.timeout's rule, via Task.cancelling/uncancel).
    clock = MockClock()
    timeout = Timeout(TimeoutOptions(1.0), clock=clock)

    async def main() -> None:
        task = asyncio.ensure_future(timeout.execute(clock.sleep, 10))
        await asyncio.sleep(0)  # the task enters the scope and sleeps
        clock.advance(1.0)  # the timeout fires and cancels the task...
        task.cancel()  # ...and so does its owner
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    run(main())
    assert clock.pending == 0


def test_nested_timeouts_report_the_one_that_fired(run, clock: MockClock) -> None:
    outer = Timeout(TimeoutOptions(3.0, overall=True), clock=clock)
    inner = Timeout(TimeoutOptions(1.0), clock=clock)

    async def main() -> None:
        async with outer.scope():
            with pytest.raises(AttemptTimeout):
                async with inner.scope():
                    await clock.sleep(10)
            assert clock.now() == 1.0
            # The inner one fired at t=1; the outer one still guards the rest.
            await clock.sleep(10)

    with pytest.raises(OverallTimeout):
        run(main())
    assert clock.now() == 3.0


def test_scope_guards_a_block(run, clock: MockClock) -> None:
    timeout = Timeout(TimeoutOptions(1.0), clock=clock)

    async def main() -> None:
        async with timeout.scope() as scope:
            await clock.sleep(0.5)
        assert not scope.expired
        with pytest.raises(AttemptTimeout):
            async with timeout.scope() as scope:
                await clock.sleep(5)
        assert scope.expired
        with pytest.raises(RuntimeError, match="only once"):
            async with scope:
                pass

    run(main())


def test_scope_outside_a_task_is_an_error() -> None:
    timeout = Timeout(TimeoutOptions(1.0), clock=MockClock())
    coro = timeout.scope().__aenter__()
    with pytest.raises(RuntimeError):
        coro.send(None)


def test_decorator(run, clock: MockClock) -> None:
    timeout = Timeout(TimeoutOptions(1.0), clock=clock)

    @timeout
    async def work(seconds: float) -> float:
        await clock.sleep(seconds)
        return seconds

    assert run(work(0.5)) == 0.5
    with pytest.raises(AttemptTimeout):
        run(work(2.0))


def test_attempt_timeouts_inside_a_retry_are_retried(run, clock: MockClock) -> None:
    timeout = Timeout(TimeoutOptions(1.0), clock=clock)
    retry = Retry(RetryOptions(max_attempts=3, initial_delay=0.5, jitter=False), clock=clock)
    slow = Slow(clock, 5.0, 5.0, 0.2)
    assert run(retry.execute(timeout.execute, slow)) == "call 3"
    # 1 s, backoff 0.5 s, 1 s, backoff 1 s, 0.2 s.
    assert clock.now() == pytest.approx(3.7)
    assert slow.cancelled == 2


def test_an_overall_timeout_outside_a_retry_ends_the_retries(run, clock: MockClock) -> None:
    overall = Timeout(TimeoutOptions(4.0, overall=True), clock=clock)
    retry = Retry(RetryOptions(max_attempts=10, initial_delay=1.0, jitter=False), clock=clock)
    slow = Slow(clock, 1.5)

    async def failing() -> None:
        await slow()
        raise OSError("down")

    with pytest.raises(OverallTimeout):
        run(overall.execute(retry.execute, failing))
    assert clock.now() == 4.0
    assert slow.calls == 2  # at 0 and at 2.5; the third would start at 6


@pytest.mark.parametrize(
    ("seconds", "exception"),
    [
        (0, ValueError),
        (-1, ValueError),
        (float("nan"), ValueError),
        (1e6, ValueError),
        ("1", TypeError),
    ],
)
def test_options_reject_bad_values(seconds: object, exception: type[Exception]) -> None:
    with pytest.raises(exception, match=r"TimeoutOptions\.seconds"):
        TimeoutOptions(seconds)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        TimeoutOptions(1.0, overall="yes")  # type: ignore[arg-type]
