"""MockClock (manual and autojump) and SystemClock."""

from __future__ import annotations

import asyncio

import pytest

from corun.resilience import Clock, SystemClock, Timeout, TimeoutOptions
from corun.testing import MockClock
from corun.testing.clock import _ready_count


def test_both_clocks_implement_the_protocol() -> None:
    assert isinstance(MockClock(), Clock)
    assert isinstance(SystemClock(), Clock)


def test_advance_fires_due_timers_in_deadline_order_at_their_deadline(run) -> None:
    clock = MockClock(start=10.0)
    fired: list[tuple[str, float]] = []

    async def main() -> None:
        clock.call_later(2.0, lambda: fired.append(("b", clock.now())))
        clock.call_later(1.0, lambda: fired.append(("a", clock.now())))
        clock.call_later(2.0, lambda: fired.append(("c", clock.now())))
        late = clock.call_later(5.0, lambda: fired.append(("late", clock.now())))
        clock.advance(3.0)
        assert fired == [("a", 11.0), ("b", 12.0), ("c", 12.0)]
        assert clock.now() == 13.0
        assert clock.pending == 1
        late.cancel()
        late.cancel()  # harmless twice
        assert clock.pending == 0
        clock.advance(10.0)
        assert [name for name, _ in fired] == ["a", "b", "c"]

    run(main())


def test_advance_rejects_negative_and_non_finite() -> None:
    clock = MockClock()
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="advance"):
            clock.advance(bad)


def test_manual_sleep_wakes_only_when_advanced(run) -> None:
    clock = MockClock()

    async def main() -> None:
        task = asyncio.ensure_future(clock.sleep(5.0))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done()
        clock.advance(4.999)
        await asyncio.sleep(0)
        assert not task.done()
        clock.advance(0.001)
        await task
        assert clock.now() == pytest.approx(5.0)

    run(main())


def test_cancelled_sleep_disarms_its_timer(run) -> None:
    clock = MockClock()

    async def main() -> None:
        task = asyncio.ensure_future(clock.sleep(5.0))
        await asyncio.sleep(0)
        assert clock.pending == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert clock.pending == 0
        assert clock.next_deadline() is None

    run(main())


def test_autojump_runs_long_sleeps_in_virtual_time(run, clock: MockClock) -> None:
    order: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        order.append((name, clock.now()))

    async def main() -> None:
        await asyncio.gather(sleeper("hour", 3600), sleeper("minute", 60), sleeper("day", 86400))

    run(main())
    assert order == [("minute", 60.0), ("hour", 3600.0), ("day", 86400.0)]
    assert clock.jumps == 3


def test_autojump_waits_while_any_task_can_run(run, clock: MockClock) -> None:
    # A task busy with zero-time work is not blocked: the clock must not
    # move under it, so a timeout armed around it must not fire. (A rule of
    # "jump after N quiet loop iterations" fails this test.)
    timeout = Timeout(TimeoutOptions(1.0), clock=clock)

    async def busy() -> str:
        for _ in range(500):
            await asyncio.sleep(0)
        return "done"

    assert run(timeout.execute(busy)) == "done"
    assert clock.now() == 0.0
    assert clock.jumps == 0


def test_autojump_moves_while_other_tasks_wait_on_futures(run, clock: MockClock) -> None:
    # Tasks blocked on a future only the clock can resolve count as blocked.
    async def main() -> float:
        event = asyncio.Event()

        async def setter() -> None:
            await clock.sleep(7)
            event.set()

        task = asyncio.ensure_future(setter())
        await event.wait()
        await task
        return clock.now()

    assert run(main()) == 7.0


def test_sleep_zero_yields_without_a_timer(run, clock: MockClock) -> None:
    async def main() -> None:
        await clock.sleep(0)
        await clock.sleep(-1)

    run(main())
    assert clock.now() == 0.0 and clock.jumps == 0


def test_wall_moves_with_the_clock() -> None:
    clock = MockClock(start=5.0, wall_start=1_000_000.0)
    assert clock.wall() == 1_000_000.0
    clock.advance(2.5)
    assert clock.wall() == 1_000_002.5


def test_clock_can_be_reused_on_a_second_loop(loop_factory) -> None:
    clock = MockClock(autojump=True)
    for _ in range(2):
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(clock.sleep(10))
    assert clock.now() == 20.0


def test_ready_count_refuses_a_loop_it_cannot_see() -> None:
    with pytest.raises(RuntimeError, match="cannot see the ready queue"):
        _ready_count(object())  # type: ignore[arg-type]


def test_system_clock_follows_the_running_loop(run) -> None:
    clock = SystemClock()
    fired: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert abs(clock.now() - loop.time()) < 1.0
        handle = clock.call_later(0, lambda: fired.append("ran"))
        cancelled = clock.call_later(0, lambda: fired.append("cancelled"))
        cancelled.cancel()
        await clock.sleep(0)
        await asyncio.sleep(0)
        assert handle is not None

    run(main())
    assert fired == ["ran"]
    assert clock.now() > 0  # outside a loop: time.monotonic()
    assert clock.wall() > 1_600_000_000


def test_autojump_keeps_going_after_a_callback_raises(run, clock: MockClock, errors) -> None:
    def broken() -> None:
        raise RuntimeError("callback bug")

    async def main() -> float:
        clock.call_later(1.0, broken)
        await clock.sleep(5.0)
        return clock.now()

    assert run(main()) == 5.0
    context = errors.pop("Exception in callback")
    assert isinstance(context["exception"], RuntimeError)
