"""Retry: backoff, jitter, caps, attempts, deadline, predicates, server delays, forms."""

from __future__ import annotations

import asyncio
import random

import pytest

from corun.resilience import GaveUp, Retry, RetryOptions, RetryScheduled
from corun.testing import EventRecorder, MockClock, set_testing

from .helpers import Boom, Flaky


def make_retry(clock: MockClock, recorder: EventRecorder | None = None, **options: object) -> Retry:
    options.setdefault("jitter", False)
    return Retry(
        RetryOptions(**options),  # type: ignore[arg-type]
        clock=clock,
        listeners=[recorder] if recorder else [],
    )


def test_retries_until_success_with_capped_exponential_backoff(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = make_retry(
        clock, recorder, max_attempts=6, initial_delay=1.0, multiplier=2.0, max_delay=5.0
    )
    flaky = Flaky(clock, failures=5)
    assert run(retry.execute(flaky)) == "ok"
    assert flaky.calls == 6
    # 1, 2, 4, then capped at 5, 5.
    assert flaky.started == [0.0, 1.0, 3.0, 7.0, 12.0, 17.0]
    scheduled = recorder.of_type(RetryScheduled)
    assert [e.delay for e in scheduled] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert [e.attempt for e in scheduled] == [1, 2, 3, 4, 5]
    assert all(isinstance(e.caused_by, Boom) for e in scheduled)
    assert recorder.of_type(GaveUp) == []
    stats = retry.statistics()
    assert (stats.calls, stats.attempts, stats.retries, stats.gave_up) == (1, 6, 5, 0)


def test_full_jitter_draws_below_the_ceiling(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = Retry(
        RetryOptions(max_attempts=4, initial_delay=2.0, max_delay=100.0),
        clock=clock,
        listeners=[recorder],
        rng=lambda: 0.25,
    )
    run(retry.execute(Flaky(clock, failures=3)))
    assert [e.delay for e in recorder.of_type(RetryScheduled)] == [0.5, 1.0, 2.0]


def test_full_jitter_spreads_over_the_whole_range(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = Retry(
        RetryOptions(max_attempts=100, initial_delay=1.0, max_delay=1.0),
        clock=clock,
        listeners=[recorder],
        rng=random.Random(7).random,
    )
    run(retry.execute(Flaky(clock, failures=99)))
    delays = [e.delay for e in recorder.of_type(RetryScheduled)]
    assert len(delays) == 99
    assert all(0.0 <= d < 1.0 for d in delays)
    assert min(delays) < 0.1 and max(delays) > 0.9  # full jitter, not "ceiling +/- a bit"


def test_gives_up_after_max_attempts_and_reraises_the_last_error(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = make_retry(clock, recorder, max_attempts=3, initial_delay=1.0)
    errors = iter([Boom("first"), Boom("second"), Boom("third")])
    calls = 0

    async def always_fails() -> None:
        nonlocal calls
        calls += 1
        raise next(errors)

    with pytest.raises(Boom, match="third") as info:
        run(retry.execute(always_fails))
    assert calls == 3
    assert "gave up after 3 attempts (attempts)" in "".join(info.value.__notes__)
    # The exception does not drag the earlier attempts along as its context.
    assert info.value.__context__ is None
    (gave_up,) = recorder.of_type(GaveUp)
    assert (gave_up.reason, gave_up.attempts, gave_up.elapsed) == ("attempts", 3, 3.0)
    assert gave_up.caused_by is info.value
    assert retry.statistics().gave_up == 1


def test_deadline_stops_retries_that_would_start_too_late(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = make_retry(clock, recorder, max_attempts=50, initial_delay=1.0, deadline=10.0)
    flaky = Flaky(clock, failures=100, latency=0.5)
    with pytest.raises(Boom):
        run(retry.execute(flaky))
    # Attempts start at 0, 1.5, 4, 8.5; the next would start at 8.5 + 0.5 + 8 > 10.
    assert flaky.started == [0.0, 1.5, 4.0, 8.5]
    (gave_up,) = recorder.of_type(GaveUp)
    assert gave_up.reason == "deadline"
    assert clock.now() < 10.0


def test_exceptions_outside_retry_on_propagate_at_once(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = make_retry(clock, recorder, retry_on=(ConnectionError,))
    flaky = Flaky(clock, failures=1, error=lambda: ValueError("not transient"))
    with pytest.raises(ValueError, match="not transient") as info:
        run(retry.execute(flaky))
    assert flaky.calls == 1
    # Not a give-up: it was never retryable.
    assert recorder.of_type(RetryScheduled) == [] and recorder.of_type(GaveUp) == []
    assert not getattr(info.value, "__notes__", None)


def test_retry_on_accepts_a_predicate(run, clock: MockClock) -> None:
    retry = make_retry(clock, retry_on=lambda exc: "again" in str(exc), initial_delay=0.1)
    flaky = Flaky(clock, failures=2, error=lambda: RuntimeError("try again"))
    assert run(retry.execute(flaky)) == "ok"
    assert flaky.calls == 3
    other = Flaky(clock, failures=2, error=lambda: RuntimeError("fatal"))
    with pytest.raises(RuntimeError, match="fatal"):
        run(retry.execute(other))
    assert other.calls == 1


def test_cancellation_is_never_retried(run, clock: MockClock) -> None:
    retry = make_retry(clock, retry_on=BaseException, max_attempts=5)
    flaky = Flaky(clock, failures=5, error=asyncio.CancelledError)

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await retry.execute(flaky)

    run(main())
    assert flaky.calls == 1


def test_cancellation_is_never_retried_in_the_block_form(run, clock: MockClock) -> None:
    retry = make_retry(clock, retry_on=BaseException, max_attempts=5)
    count = 0

    async def main() -> None:
        nonlocal count
        async for attempt in retry.attempts():
            async with attempt:
                count += 1
                raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        run(main())
    assert count == 1


def test_outer_cancellation_during_backoff_stops_the_retry(run, clock: MockClock) -> None:
    retry = make_retry(clock, max_attempts=5, initial_delay=100.0, max_delay=100.0)
    flaky = Flaky(clock, failures=5)

    async def main() -> None:
        task = asyncio.ensure_future(retry.execute(flaky))
        await clock.sleep(50)  # the retry is sleeping its 100 s backoff
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert flaky.calls == 1


def test_results_can_be_retried_and_the_last_one_returned(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    responses = iter([503, 503, 200])

    async def fetch() -> int:
        return next(responses)

    retry = make_retry(clock, recorder, retry_on_result=lambda status: status >= 500)
    assert run(retry.execute(fetch)) == 200
    assert [e.result for e in recorder.of_type(RetryScheduled)] == [503, 503]

    always = make_retry(clock, recorder, max_attempts=2, retry_on_result=lambda s: s >= 500)

    async def unavailable() -> int:
        return 503

    recorder.clear()
    assert run(always.execute(unavailable)) == 503
    (gave_up,) = recorder.of_type(GaveUp)
    assert (gave_up.result, gave_up.caused_by) == (503, None)


def test_server_delay_replaces_backoff_and_is_capped(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    asked = iter([3.0, 500.0, None])

    class Throttled(OSError):
        pass

    retry = make_retry(
        clock,
        recorder,
        max_attempts=4,
        initial_delay=1.0,
        max_server_delay=60.0,
        delay_from=lambda outcome: next(asked) if isinstance(outcome, Throttled) else None,
    )
    flaky = Flaky(clock, failures=3, error=lambda: Throttled("429"))
    assert run(retry.execute(flaky)) == "ok"
    scheduled = recorder.of_type(RetryScheduled)
    assert [e.server_delay for e in scheduled] == [3.0, 500.0, None]
    # 3 s as asked, 500 s capped to 60, then the backoff's own 4 s (attempt 3).
    assert [e.delay for e in scheduled] == [3.0, 60.0, 4.0]
    assert flaky.started == [0.0, 3.0, 63.0, 67.0]


def test_negative_server_delay_means_now(run, clock: MockClock) -> None:
    retry = make_retry(clock, initial_delay=10.0, delay_from=lambda _: -5.0)
    flaky = Flaky(clock, failures=1)
    run(retry.execute(flaky))
    assert flaky.started == [0.0, 0.0]


def test_decorator_keeps_the_signature_and_passes_arguments(run, clock: MockClock) -> None:
    retry = make_retry(clock, initial_delay=1.0)
    seen: list[tuple[int, str]] = []

    @retry
    async def fetch(n: int, *, suffix: str) -> str:
        """Fetch something."""
        seen.append((n, suffix))
        if len(seen) < 2:
            raise Boom("flaky")
        return f"{n}{suffix}"

    assert fetch.__name__ == "fetch" and fetch.__doc__ == "Fetch something."
    assert run(fetch(4, suffix="x")) == "4x"
    assert seen == [(4, "x"), (4, "x")]


def test_wrap_and_execute_put_the_key_in_events(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = make_retry(clock, recorder, initial_delay=1.0)
    run(retry.wrap(Flaky(clock, failures=1), key="db")())
    run(retry.execute(Flaky(clock, failures=1), key="cache"))
    assert [e.key for e in recorder.of_type(RetryScheduled)] == ["db", "cache"]


def test_attempts_block_form_retries_and_stops_on_success(run, clock: MockClock) -> None:
    retry = make_retry(clock, initial_delay=1.0, max_attempts=5)
    flaky = Flaky(clock, failures=2)

    async def main() -> list[int]:
        numbers = []
        async for attempt in retry.attempts(key="block"):
            numbers.append(attempt.number)
            async with attempt:
                await flaky()
        return numbers

    assert run(main()) == [1, 2, 3]
    assert flaky.started == [0.0, 1.0, 3.0]


def test_attempts_block_form_gives_up_with_the_last_error(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = make_retry(clock, recorder, initial_delay=1.0, max_attempts=2)

    async def main() -> None:
        async for attempt in retry.attempts():
            async with attempt:
                raise Boom(f"attempt {attempt.number}")

    with pytest.raises(Boom, match="attempt 2"):
        run(main())
    assert [e.reason for e in recorder.of_type(GaveUp)] == ["attempts"]


def test_attempts_block_form_does_not_retry_other_errors(run, clock: MockClock) -> None:
    retry = make_retry(clock)
    count = 0

    async def main() -> None:
        nonlocal count
        async for attempt in retry.attempts():
            async with attempt:
                count += 1
                raise KeyError("nope")

    with pytest.raises(KeyError):
        run(main())
    assert count == 1


def test_test_mode_turns_backoff_off_and_restores(run, clock: MockClock) -> None:
    retry = make_retry(
        clock, max_attempts=4, initial_delay=1000.0, max_delay=1000.0, delay_from=lambda _: 50.0
    )
    with set_testing(True):
        flaky = Flaky(clock, failures=3)
        assert run(retry.execute(flaky)) == "ok"
        assert flaky.started == [0.0, 0.0, 0.0, 0.0]
    flaky = Flaky(clock, failures=1)
    run(retry.execute(flaky))
    assert flaky.started == [0.0, 50.0]  # back to normal


def test_test_mode_can_cap_attempts(run, clock: MockClock) -> None:
    retry = make_retry(clock, max_attempts=10)
    with set_testing(True, attempts=2):
        flaky = Flaky(clock, failures=5)
        with pytest.raises(Boom):
            run(retry.execute(flaky))
        assert flaky.calls == 2
    with set_testing(True, attempts=1):
        flaky = Flaky(clock, failures=5)
        with pytest.raises(Boom):
            run(retry.execute(flaky))
        assert flaky.calls == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be between 1 and 100"),
        ({"max_attempts": 101}, "max_attempts must be between 1 and 100"),
        ({"deadline": 0}, "deadline must be between a positive number"),
        ({"deadline": float("inf")}, "deadline"),
        ({"initial_delay": -1}, "initial_delay must be between 0"),
        ({"max_delay": 1e9}, "max_delay must be between 0 and 86400"),
        ({"multiplier": 0.5}, "multiplier must be between 1 and 100"),
        ({"max_server_delay": float("nan")}, "max_server_delay"),
        ({"initial_delay": 20, "max_delay": 10}, r"initial_delay \(20 s\) must not exceed"),
    ],
)
def test_options_reject_bad_values(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryOptions(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 2.5},
        {"max_attempts": True},
        {"retry_on": "OSError"},
        {"retry_on": (OSError, "x")},
        {"retry_on_result": 3},
        {"jitter": "yes"},
        {"initial_delay": "1"},
    ],
)
def test_options_reject_wrong_types(options: dict[str, object]) -> None:
    with pytest.raises(TypeError):
        RetryOptions(**options)  # type: ignore[arg-type]


def test_options_normalise_a_single_exception_class() -> None:
    assert RetryOptions(retry_on=KeyError).retry_on == (KeyError,)
    assert RetryOptions(initial_delay=1).initial_delay == 1.0
    with pytest.raises(TypeError):
        Retry(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Retry(budget=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Retry(name="")
