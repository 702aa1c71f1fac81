"""Pipeline: composition order, describe(), listeners, and the policies working together."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

import pytest

from corun.resilience import (
    AttemptTimeout,
    Breaker,
    BreakerOpen,
    BreakerOptions,
    Bulkhead,
    BulkheadOptions,
    CallFinished,
    Hedge,
    HedgeOptions,
    Metrics,
    Pipeline,
    PolicyBase,
    PolicyDescription,
    RateLimiter,
    RateLimiterOptions,
    Retry,
    RetryOptions,
    RetryScheduled,
    Timeout,
    TimeoutOptions,
)
from corun.testing import EventRecorder, MockClock

from .helpers import Boom, Flaky

T = TypeVar("T")


class Tracing(PolicyBase):
    """A policy that logs when calls enter and leave it."""

    kind = "tracing"

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__(name=name, clock=None, listeners=())
        self.log = log

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        self.log.append(f"enter {self.name} {key}")
        try:
            return await fn(*args)
        finally:
            self.log.append(f"exit {self.name}")


def test_the_first_policy_is_the_outermost(run) -> None:
    log: list[str] = []

    async def work(x: int) -> int:
        log.append("work")
        return x + 1

    pipeline = Pipeline(Tracing("a", log), Tracing("b", log), Tracing("c", log))
    assert run(pipeline.execute(work, 1, key="k")) == 2
    assert log == ["enter a k", "enter b k", "enter c k", "work", "exit c", "exit b", "exit a"]


def test_the_order_decides_what_a_retry_repeats(run, clock: MockClock) -> None:
    log: list[str] = []
    retry = Retry(RetryOptions(max_attempts=2, initial_delay=1), clock=clock)
    flaky = Flaky(clock, failures=1)
    run(Pipeline(Tracing("outside", log), retry, Tracing("inside", log)).execute(flaky))
    assert log == ["enter outside None"] + ["enter inside None", "exit inside"] * 2 + [
        "exit outside"
    ]


def test_describe_is_structured(clock: MockClock) -> None:
    retry_options = RetryOptions(max_attempts=4)
    inner = Pipeline(
        Bulkhead(BulkheadOptions(max_concurrent=3)), Timeout(TimeoutOptions(2.0)), name="inner"
    )
    pipeline = Pipeline(
        Timeout(TimeoutOptions(10.0, overall=True), name="total"),
        Retry(retry_options, name="retry"),
        Breaker(name="breaker"),
        inner,
        name="api",
    )
    description = pipeline.describe()
    assert description.kind == "pipeline" and description.name == "api"
    assert [(c.kind, c.name) for c in description.children] == [
        ("timeout", "total"),
        ("retry", "retry"),
        ("breaker", "breaker"),
        ("pipeline", "inner"),
    ]
    assert description.children[1].options is retry_options
    assert description.children[0].options == TimeoutOptions(10.0, overall=True)
    assert description.children[3] == PolicyDescription(
        kind="pipeline",
        name="inner",
        options=None,
        children=(
            PolicyDescription("bulkhead", "bulkhead", BulkheadOptions(max_concurrent=3)),
            PolicyDescription("timeout", "timeout", TimeoutOptions(2.0)),
        ),
    )


def test_a_pipeline_is_a_policy_with_a_decorator(run) -> None:
    log: list[str] = []
    pipeline = Pipeline(Tracing("only", log))

    @pipeline
    async def work(*, x: int) -> int:
        return x

    assert run(work(x=3)) == 3
    assert log == ["enter only None", "exit only"]


def test_invalid_pipelines_are_refused() -> None:
    tracing = Tracing("t", [])
    with pytest.raises(ValueError, match="at least one policy"):
        Pipeline()
    with pytest.raises(ValueError, match="appears twice"):
        Pipeline(tracing, tracing)
    with pytest.raises(TypeError, match="not a policy"):
        Pipeline(object())  # type: ignore[arg-type]


def test_add_listener_reaches_every_policy_and_the_key_too(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = Retry(RetryOptions(max_attempts=2, initial_delay=1), clock=clock)
    bulkhead = Bulkhead(clock=clock)
    pipeline = Pipeline(retry, bulkhead, clock=clock)
    pipeline.add_listener(recorder)
    run(pipeline.execute(Flaky(clock, failures=1), key="host"))
    finished = [(e.policy, e.outcome) for e in recorder.of_type(CallFinished)]
    assert finished == [
        ("bulkhead", "failure"),
        ("bulkhead", "success"),
        ("retry", "success"),
        ("pipeline", "success"),
    ]
    assert {e.key for e in recorder.events} == {"host"}  # type: ignore[attr-defined]
    assert len(recorder.of_type(RetryScheduled)) == 1
    pipeline.remove_listener(recorder)
    recorder.clear()
    run(pipeline.execute(Flaky(clock)))
    assert recorder.events == []


def test_an_open_breaker_ends_the_retries_at_once(run, clock: MockClock) -> None:
    breaker = Breaker(BreakerOptions(consecutive_failures=2, open_duration=60), clock=clock)
    retry = Retry(RetryOptions(max_attempts=5, initial_delay=1, jitter=False), clock=clock)
    flaky = Flaky(clock, failures=10)
    with pytest.raises(BreakerOpen):
        run(Pipeline(retry, breaker).execute(flaky))
    assert flaky.calls == 2  # the third attempt was refused, and not retried


def test_a_full_stack_recovers_from_a_slow_then_failing_dependency(run, clock: MockClock) -> None:
    metrics = Metrics()
    calls: list[float] = []

    async def dependency(path: str) -> str:
        calls.append(clock.now())
        n = len(calls)
        if n == 1:
            await clock.sleep(5)  # hangs: the attempt timeout cuts it
        elif n == 2:
            raise Boom("reset by peer")
        await clock.sleep(0.1)
        return f"200 {path}"

    pipeline = Pipeline(
        Timeout(TimeoutOptions(30, overall=True), name="total", clock=clock),
        Retry(RetryOptions(max_attempts=4, initial_delay=0.5, jitter=False), clock=clock),
        RateLimiter(RateLimiterOptions(per_key_rate=10, max_wait=1), clock=clock),
        Breaker(BreakerOptions(consecutive_failures=5), clock=clock),
        Bulkhead(BulkheadOptions(max_concurrent=4, max_queue=8), clock=clock),
        Timeout(TimeoutOptions(1.0), name="attempt", clock=clock),
        clock=clock,
    )
    pipeline.add_listener(metrics)
    assert run(pipeline.execute(dependency, "/x", key="api.example")) == "200 /x"
    # Attempt 1 timed out at 1.0, backoff 0.5; attempt 2 failed at 1.5,
    # backoff 1.0; attempt 3 succeeded at 2.6.
    assert calls == [0.0, 1.5, 2.5]
    assert clock.now() == pytest.approx(2.6)
    stats = metrics.statistics()
    assert stats.count("attempt", "timed_out.attempt") == 1
    assert stats.count("retry", "retries") == 2
    assert stats.count("pipeline", "calls.success") == 1
    assert stats.count("breaker", "calls.failure") == 2
    assert stats.latency["pipeline"].maximum == pytest.approx(2.6)


def test_hedge_inside_retry_with_per_copy_timeouts(run, clock: MockClock) -> None:
    starts: list[float] = []

    async def replica() -> str:
        starts.append(clock.now())
        await clock.sleep(10 if len(starts) == 1 else 0.1)
        return "fast copy"

    pipeline = Pipeline(
        Retry(RetryOptions(max_attempts=2), clock=clock),
        Hedge(HedgeOptions(delay=0.5), clock=clock),
        Timeout(TimeoutOptions(2.0), clock=clock),
    )
    assert run(pipeline.execute(replica)) == "fast copy"
    assert starts == [0.0, 0.5]


def test_runs_on_asyncio_runner_with_corun_loop() -> None:
    import corun

    clock = MockClock(autojump=True)
    pipeline = Pipeline(
        Retry(RetryOptions(max_attempts=3, initial_delay=1, jitter=False), clock=clock),
        Timeout(TimeoutOptions(1.0), clock=clock),
    )
    flaky = Flaky(clock, failures=2, latency=0.5)
    with asyncio.Runner(loop_factory=corun.new_event_loop) as runner:
        assert isinstance(runner.get_loop(), corun.EventLoop)
        assert runner.run(pipeline.execute(flaky)) == "ok"
    assert flaky.started == [0.0, 1.5, 4.0]
    assert clock.pending == 0


def test_attempt_timeout_is_retryable_by_default(run, clock: MockClock) -> None:
    retry = Retry(RetryOptions(max_attempts=2, initial_delay=0), clock=clock)
    with pytest.raises(AttemptTimeout):
        run(Pipeline(retry, Timeout(TimeoutOptions(1.0), clock=clock)).execute(clock.sleep, 5))
    assert retry.statistics().attempts == 2


def test_untimed_policies_report_their_other_events_only(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    retry = Retry(RetryOptions(max_attempts=2, initial_delay=1), clock=clock, listeners=[recorder])
    bulkhead = Bulkhead(clock=clock, listeners=[recorder])
    pipeline = Pipeline(retry, bulkhead, clock=clock, listeners=[recorder], time_policies=False)
    run(pipeline.execute(Flaky(clock, failures=1), key="host"))
    assert [e.policy for e in recorder.of_type(CallFinished)] == ["pipeline"]
    assert len(recorder.of_type(RetryScheduled)) == 1
    # The same policies, run by themselves, still time their calls.
    recorder.clear()
    run(bulkhead.execute(Flaky(clock)))
    assert [e.policy for e in recorder.of_type(CallFinished)] == ["bulkhead"]


def test_one_policy_may_sit_in_several_pipelines(run, clock: MockClock) -> None:
    log: list[str] = []
    shared = Tracing("shared", log)
    with_retry = Pipeline(Retry(RetryOptions(max_attempts=2, initial_delay=0), clock=clock), shared)
    without = Pipeline(shared)
    run(with_retry.execute(Flaky(clock, failures=1)))
    with pytest.raises(Boom):
        run(without.execute(Flaky(clock, failures=1)))
    assert log == ["enter shared None", "exit shared"] * 3
