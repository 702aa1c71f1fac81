"""Breaker: transitions, fail-fast, half-open probes, per-key circuits, events."""

from __future__ import annotations

import asyncio

import pytest

from corun.resilience import (
    Breaker,
    BreakerOpen,
    BreakerOptions,
    BreakerStateChanged,
    BulkheadFull,
    Rejected,
)
from corun.testing import EventRecorder, MockClock

from .helpers import Boom


async def ok() -> str:
    return "ok"


async def fail() -> None:
    raise Boom("down")


def make(clock: MockClock, recorder: EventRecorder | None = None, **options: object) -> Breaker:
    return Breaker(
        BreakerOptions(**options),  # type: ignore[arg-type]
        name="api",
        clock=clock,
        listeners=[recorder] if recorder else [],
    )


def transitions(recorder: EventRecorder) -> list[tuple[object, str, str]]:
    return [(e.key, e.old, e.new) for e in recorder.of_type(BreakerStateChanged)]


async def fail_times(breaker: Breaker, n: int, key: object = None) -> None:
    for _ in range(n):
        with pytest.raises(Boom):
            await breaker.execute(fail, key=key)


def test_opens_after_consecutive_failures_and_fails_fast(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    breaker = make(clock, recorder, consecutive_failures=3, open_duration=30)
    calls = 0

    async def counted() -> None:
        nonlocal calls
        calls += 1
        raise Boom("down")

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(Boom):
                await breaker.execute(counted)
        await breaker.execute(ok)  # a success resets the run
        for _ in range(2):
            with pytest.raises(Boom):
                await breaker.execute(counted)
        assert breaker.state() == "closed"
        with pytest.raises(Boom):
            await breaker.execute(counted)
        assert breaker.state() == "open"
        clock.advance(5)
        with pytest.raises(BreakerOpen) as info:
            await breaker.execute(counted)
        error = info.value
        assert calls == 5  # failing fast: the function was not called
        assert (error.state, error.probe_at, error.retry_in) == ("open", 30.0, 25.0)
        assert str(error) == (
            "circuit breaker 'api' is open: it will let a probe call through in 25.000 s (at t=30.000)"
        )

    run(main())
    (opened,) = recorder.of_type(BreakerStateChanged)
    assert (opened.old, opened.new, opened.reason) == ("closed", "open", "3 consecutive failures")
    assert (opened.at, opened.probe_at) == (0.0, 30.0)
    (rejected,) = recorder.of_type(Rejected)
    assert (rejected.reason, rejected.retry_in) == ("breaker_open", 25.0)
    stats = breaker.statistics()
    assert (stats.calls, stats.rejected, stats.opened, stats.open) == (6, 1, 1, 1)


def test_opens_on_failure_rate_only_with_minimum_calls(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    breaker = make(
        clock,
        recorder,
        consecutive_failures=None,
        failure_rate=0.5,
        minimum_calls=10,
        window=10,
    )

    async def main() -> None:
        # 4 failures of 5 calls: a rate of 80 %, but too few calls.
        await breaker.execute(ok)
        await fail_times(breaker, 4)
        assert breaker.state() == "closed"
        # 10 calls, 4 failures (40 %): still closed.
        for _ in range(5):
            await breaker.execute(ok)
        assert breaker.circuit().failures == 4 and breaker.circuit().successes == 6
        assert breaker.state() == "closed"
        # The 5th failure of 11 calls (45 %): closed; the 6th of 12 (50 %): open.
        await fail_times(breaker, 1)
        assert breaker.state() == "closed"
        await fail_times(breaker, 1)
        assert breaker.state() == "open"

    run(main())
    (opened,) = recorder.of_type(BreakerStateChanged)
    assert opened.reason == "failure rate 50% >= 50% over 12 calls in 10 s"


def test_old_failures_leave_the_sliding_window(run, clock: MockClock) -> None:
    breaker = make(clock, consecutive_failures=None, minimum_calls=4, failure_rate=0.5, window=10)

    async def main() -> None:
        await fail_times(breaker, 3)
        clock.advance(11)
        assert breaker.circuit().failures == 0
        for _ in range(3):
            await breaker.execute(ok)
        await fail_times(breaker, 1)  # 1 of 4 in the window
        assert breaker.state() == "closed"

    run(main())


def test_half_open_after_the_open_duration_then_closes_on_success(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    breaker = make(clock, recorder, consecutive_failures=1, open_duration=30)

    async def main() -> None:
        await fail_times(breaker, 1)
        clock.advance(29.9)
        with pytest.raises(BreakerOpen):
            await breaker.execute(ok)
        clock.advance(0.1)
        assert breaker.state() == "half_open"
        assert await breaker.execute(ok) == "ok"
        assert breaker.state() == "closed"

    run(main())
    events = recorder.of_type(BreakerStateChanged)
    assert [(e.old, e.new, e.reason) for e in events] == [
        ("closed", "open", "1 consecutive failures"),
        ("open", "half_open", "open for 30 s"),
        ("half_open", "closed", "1 probe succeeded"),
    ]
    assert events[1].at == 30.0


def test_a_failed_probe_reopens_with_a_new_probe_time(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    breaker = make(clock, recorder, consecutive_failures=1, open_duration=10)

    async def main() -> None:
        await fail_times(breaker, 1)
        clock.advance(10)
        await fail_times(breaker, 1)  # the probe
        assert breaker.state() == "open"
        with pytest.raises(BreakerOpen) as info:
            await breaker.execute(ok)
        assert info.value.probe_at == 20.0

    run(main())
    assert transitions(recorder) == [
        (None, "closed", "open"),
        (None, "open", "half_open"),
        (None, "half_open", "open"),
    ]
    assert recorder.of_type(BreakerStateChanged)[-1].reason == "a probe failed"


def test_half_open_lets_a_limited_number_of_probes_through(run, clock: MockClock) -> None:
    breaker = make(clock, consecutive_failures=1, open_duration=10, half_open_probes=2)
    release = asyncio.Event()
    entered = 0

    async def probe() -> str:
        nonlocal entered
        entered += 1
        await release.wait()
        return "ok"

    async def main() -> None:
        await fail_times(breaker, 1)
        clock.advance(10)
        probes = [asyncio.ensure_future(breaker.execute(probe)) for _ in range(2)]
        await asyncio.sleep(0)
        assert entered == 2
        with pytest.raises(BreakerOpen) as info:
            await breaker.execute(probe)
        assert info.value.state == "half_open" and info.value.probe_at is None
        assert "a probe call is in flight" in str(info.value)
        assert breaker.circuit().probes_in_flight == 2
        release.set()
        assert await asyncio.gather(*probes) == ["ok", "ok"]
        assert breaker.state() == "closed"

    run(main())
    assert entered == 2


def test_a_cancelled_probe_gives_its_slot_back(run, clock: MockClock) -> None:
    breaker = make(clock, consecutive_failures=1, open_duration=10)

    async def main() -> None:
        await fail_times(breaker, 1)
        clock.advance(10)
        stuck = asyncio.ensure_future(breaker.execute(asyncio.sleep, 3600))
        await asyncio.sleep(0)
        with pytest.raises(BreakerOpen):
            await breaker.execute(ok)
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert breaker.state() == "half_open"
        assert await breaker.execute(ok) == "ok"
        assert breaker.state() == "closed"

    run(main())


def test_circuits_are_per_key(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    breaker = make(clock, recorder, consecutive_failures=2)

    async def main() -> None:
        await fail_times(breaker, 2, key="bad.example")
        await fail_times(breaker, 1, key="good.example")
        assert breaker.state("bad.example") == "open"
        assert breaker.state("good.example") == "closed"
        assert await breaker.execute(ok, key="good.example") == "ok"
        with pytest.raises(BreakerOpen, match=r"'api' for key 'bad\.example' is open"):
            await breaker.execute(ok, key="bad.example")

    run(main())
    assert transitions(recorder) == [("bad.example", "closed", "open")]
    assert recorder.of_type(Rejected)[0].key == "bad.example"
    assert breaker.statistics().keys == 2


def test_what_counts_as_a_failure(run, clock: MockClock) -> None:
    breaker = make(
        clock,
        consecutive_failures=2,
        failure_on=(OSError,),
        failure_on_result=lambda status: status == 503,
    )

    async def not_found() -> None:
        raise KeyError("404")

    async def rejected() -> None:
        raise BulkheadFull(policy="inner", key=None, max_concurrent=1, max_queue=0)

    async def unavailable() -> int:
        return 503

    async def main() -> None:
        # Other exceptions are answers from the dependency: successes.
        with pytest.raises(KeyError):
            await breaker.execute(not_found)
        assert breaker.circuit().successes == 1
        # Rejections further in count as nothing.
        with pytest.raises(BulkheadFull):
            await breaker.execute(rejected)
        assert (breaker.circuit().failures, breaker.circuit().successes) == (0, 1)
        # Results can be failures.
        assert await breaker.execute(unavailable) == 503
        assert await breaker.execute(unavailable) == 503
        assert breaker.state() == "open"

    run(main())


def test_a_slow_call_from_an_older_state_does_not_count(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    breaker = make(clock, recorder, consecutive_failures=1, open_duration=100)

    async def slow_failure() -> None:
        await clock.sleep(150)
        raise Boom("late")

    async def main() -> None:
        slow = asyncio.ensure_future(breaker.execute(slow_failure))
        await asyncio.sleep(0)  # admitted while closed, at t=0
        await fail_times(breaker, 1)  # opens at t=0
        clock.advance(100)
        assert await breaker.execute(ok) == "ok"  # the probe closes it at t=100
        # At t=150 the old call fails: it was admitted by a state the
        # breaker has left, so it must not reopen the new closed state.
        with pytest.raises(Boom, match="late"):
            await slow
        assert breaker.state() == "closed"
        assert breaker.circuit().failures == 0

    run(main())
    assert [e.new for e in recorder.of_type(BreakerStateChanged)] == ["open", "half_open", "closed"]


def test_scope_guards_a_block_and_marks_result_failures(run, clock: MockClock) -> None:
    breaker = make(clock, consecutive_failures=2)

    async def main() -> None:
        async with breaker.scope(key="db"):
            pass
        for _ in range(2):
            async with breaker.scope(key="db") as call:
                call.mark_failed()  # a response that is a failure without raising
        with pytest.raises(BreakerOpen):
            async with breaker.scope(key="db"):
                raise AssertionError("not reached")
        scope = breaker.scope()
        async with scope:
            pass
        with pytest.raises(RuntimeError, match="only once"):
            async with scope:
                pass

    run(main())


def test_decorator(run, clock: MockClock) -> None:
    breaker = make(clock, consecutive_failures=1)

    @breaker
    async def call(x: int) -> int:
        if x < 0:
            raise Boom("negative")
        return x * 2

    async def main() -> None:
        assert await call(2) == 4
        with pytest.raises(Boom):
            await call(-1)
        with pytest.raises(BreakerOpen):
            await call(3)

    run(main())


def test_reset_closes_and_emits(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    breaker = make(clock, recorder, consecutive_failures=1)

    async def main() -> None:
        await fail_times(breaker, 1, key="k")
        breaker.reset("k")
        assert breaker.state("k") == "closed"
        assert await breaker.execute(ok, key="k") == "ok"

    run(main())
    assert recorder.of_type(BreakerStateChanged)[-1].reason == "reset"


def test_registry_forgets_the_least_recently_used_key(run, clock: MockClock) -> None:
    breaker = make(clock, consecutive_failures=1, max_keys=2)

    async def main() -> None:
        await fail_times(breaker, 1, key="a")
        await breaker.execute(ok, key="b")
        assert breaker.state("a") == "open"  # touching "a" makes "b" the oldest
        await breaker.execute(ok, key="c")
        assert breaker.statistics().keys == 2
        assert breaker.state("a") == "open"
        await fail_times(breaker, 1, key="d")  # evicts "c", then "a" is oldest
        await breaker.execute(ok, key="e")
        assert breaker.state("a") == "closed"  # forgotten

    run(main())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"failure_rate": 0}, "failure_rate must be a fraction in"),
        ({"failure_rate": 1.5}, "failure_rate"),
        ({"minimum_calls": 0}, "minimum_calls must be between 1"),
        ({"consecutive_failures": 0}, "consecutive_failures"),
        ({"open_duration": 0}, "open_duration"),
        ({"open_duration": 1e12}, "open_duration"),
        ({"half_open_probes": 1001}, "half_open_probes"),
        ({"max_keys": 0}, "max_keys"),
        ({"window": -1}, "window"),
    ],
)
def test_options_reject_bad_values(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BreakerOptions(**options)  # type: ignore[arg-type]


def test_options_reject_wrong_types() -> None:
    with pytest.raises(TypeError):
        BreakerOptions(failure_on="OSError")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        BreakerOptions(failure_on_result=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Breaker(BreakerOptions(), clock=object())  # type: ignore[arg-type]
