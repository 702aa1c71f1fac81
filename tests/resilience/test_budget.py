"""RetryBudget: retries limited to a share of recent requests plus a floor."""

from __future__ import annotations

import asyncio

import pytest

from corun.resilience import (
    GaveUp,
    Retry,
    RetryBudget,
    RetryBudgetExhausted,
    RetryBudgetOptions,
    RetryOptions,
)
from corun.testing import EventRecorder, MockClock

from .helpers import Boom


def test_retries_are_a_share_of_requests() -> None:
    clock = MockClock()
    budget = RetryBudget(RetryBudgetOptions(retry_ratio=0.2, min_retries_per_second=0), clock=clock)
    for _ in range(100):
        budget.deposit()
    granted = sum(budget.try_withdraw() for _ in range(50))
    assert granted == 20
    stats = budget.statistics()
    assert (stats.requests, stats.retries, stats.balance, stats.denied) == (100, 20, 0, 30)


def test_the_floor_allows_retries_without_traffic() -> None:
    clock = MockClock()
    budget = RetryBudget(
        RetryBudgetOptions(retry_ratio=0.2, min_retries_per_second=0.5, window=10), clock=clock
    )
    assert budget.statistics().balance == 5
    assert sum(budget.try_withdraw() for _ in range(10)) == 5


def test_the_window_slides() -> None:
    clock = MockClock()
    budget = RetryBudget(
        RetryBudgetOptions(retry_ratio=0.5, min_retries_per_second=0, window=10), clock=clock
    )
    for _ in range(10):
        budget.deposit()
    assert sum(budget.try_withdraw() for _ in range(10)) == 5
    clock.advance(5)
    assert not budget.try_withdraw()  # still within the window
    clock.advance(5)
    # Requests and retries from t=0 have left the window.
    assert budget.statistics().requests == 0
    for _ in range(4):
        budget.deposit()
    assert sum(budget.try_withdraw() for _ in range(10)) == 2


def test_withdraw_raises_a_clear_error() -> None:
    budget = RetryBudget(
        RetryBudgetOptions(retry_ratio=0, min_retries_per_second=0), name="api", clock=MockClock()
    )
    with pytest.raises(RetryBudgetExhausted, match="retry budget 'api' for key 'h' is exhausted"):
        budget.withdraw(key="h")


def test_retry_gives_up_when_the_budget_refuses(run, clock: MockClock) -> None:
    recorder = EventRecorder()
    budget = RetryBudget(RetryBudgetOptions(retry_ratio=0, min_retries_per_second=0.1), clock=clock)
    retry = Retry(
        RetryOptions(max_attempts=5, initial_delay=0.01),
        budget=budget,
        clock=clock,
        listeners=[recorder],
    )
    calls = 0

    async def fails() -> None:
        nonlocal calls
        calls += 1
        raise Boom("down")

    with pytest.raises(Boom) as info:
        run(retry.execute(fails))
    # The floor is 0.1/s * 10 s = 1 retry: two attempts, then the budget stops it.
    assert calls == 2
    assert "(budget)" in info.value.__notes__[0]
    (gave_up,) = recorder.of_type(GaveUp)
    assert (gave_up.reason, gave_up.attempts) == ("budget", 2)
    assert retry.statistics().budget_denied == 1


@pytest.mark.parametrize(("use_budget", "max_load"), [(False, 3.0), (True, 1.2 + 0.02)])
def test_budget_caps_load_under_sustained_failure(
    run, clock: MockClock, use_budget: bool, max_load: float
) -> None:
    # 10 calls per second for 100 s against a dependency that always fails.
    # Without a budget every call makes 3 attempts: 3x the load. With one
    # (20 % of requests + 0.1 retries per second), the load stays under
    # 1.2x plus the floor's 10 retries per 100 s (0.01 per call), with some
    # slack for the window's edges.
    budget = RetryBudget(
        RetryBudgetOptions(retry_ratio=0.2, min_retries_per_second=0.1, window=10), clock=clock
    )
    retry = Retry(
        RetryOptions(max_attempts=3, initial_delay=0.05),
        budget=budget if use_budget else None,
        clock=clock,
    )
    attempts = 0

    async def down() -> None:
        nonlocal attempts
        attempts += 1
        raise Boom("down")

    async def one_call() -> None:
        try:
            await retry.execute(down)
        except Boom:
            pass

    async def main() -> None:
        tasks = []
        for _ in range(1000):
            tasks.append(asyncio.ensure_future(one_call()))
            await clock.sleep(0.1)
        await asyncio.gather(*tasks)

    run(main())
    load = attempts / 1000
    assert load <= max_load
    if use_budget:
        assert load >= 1.15  # the budget is used, not just refused
        assert budget.statistics().denied > 0
    else:
        assert load == 3.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retry_ratio": -0.1}, "retry_ratio must be between 0 and 10"),
        ({"retry_ratio": 11}, "retry_ratio"),
        ({"min_retries_per_second": -1}, "min_retries_per_second"),
        ({"window": 0}, "window must be between a positive number"),
        ({"window": 1e7}, "window"),
    ],
)
def test_options_reject_bad_values(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryBudgetOptions(**options)
    with pytest.raises(TypeError):
        RetryBudget(object())  # type: ignore[arg-type]
