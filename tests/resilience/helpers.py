"""Helpers shared by the corun.resilience tests."""

from __future__ import annotations

from collections.abc import Callable

from corun.testing import MockClock


class Boom(OSError):
    """A retryable failure for tests (an OSError, like a connection error)."""


class Flaky:
    """An async callable that fails ``failures`` times, then returns ``value``.

    Each call may first sleep ``latency`` seconds on ``clock``. ``calls``
    counts calls, ``started`` records the clock time each started at.
    """

    def __init__(
        self,
        clock: MockClock,
        failures: int = 0,
        *,
        value: object = "ok",
        latency: float = 0.0,
        error: Callable[[], BaseException] = lambda: Boom("boom"),
    ) -> None:
        self.clock = clock
        self.failures = failures
        self.value = value
        self.latency = latency
        self.error = error
        self.calls = 0
        self.started: list[float] = []

    async def __call__(self) -> object:
        self.calls += 1
        self.started.append(self.clock.now())
        if self.latency:
            await self.clock.sleep(self.latency)
        if self.calls <= self.failures:
            raise self.error()
        return self.value
