"""Timeouts on the policy clock: per attempt, or for a whole operation.

A ``Timeout`` cancels the guarded call when its time is up and raises
``AttemptTimeout`` (``overall=False``, the default) or ``OverallTimeout``
(``overall=True``); both are ``TimeoutError`` subclasses. Which one you want
depends on where the timeout sits in a pipeline: inside a ``Retry`` it
limits each attempt, outside it limits everything, backoff sleeps included.

How it works, and why like this: the timer is armed with
``clock.call_later`` and, when it fires, cancels the task running the call.
On the way out, ``scope`` tells its own cancellation from anyone else's with
``Task.cancelling()``/``uncancel()``, as ``asyncio.timeout`` does: the
timeout turns the ``CancelledError`` it caused into its ``TimeoutError``,
and lets every other cancellation through untouched. We do not reuse
``asyncio.timeout`` because it runs on the loop's clock, and these timeouts
must follow the injected one (a ``MockClock`` in tests).

The guarded code must let ``CancelledError`` through. Code that swallows it
cannot be timed out, here as with ``asyncio.timeout``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar, Unpack, final

from corun.resilience import _validate
from corun.resilience.clock import Cancellable
from corun.resilience.errors import AttemptTimeout, OverallTimeout
from corun.resilience.events import TimedOut
from corun.resilience.policy import PolicyArgs, PolicyBase

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TimeoutOptions:
    """Options of a ``Timeout``.

    Attributes:
        seconds: the limit, in (0, 86400].
        overall: False (default): a per-attempt timeout raising
            ``AttemptTimeout``; True: an overall timeout raising
            ``OverallTimeout``.
    """

    seconds: float
    overall: bool = False

    def __post_init__(self) -> None:
        _validate.normalize(self, "TimeoutOptions", "seconds", _validate.seconds)
        if not isinstance(self.overall, bool):
            raise TypeError(f"TimeoutOptions.overall must be a bool, got {self.overall!r}")


@dataclass(frozen=True, slots=True)
class TimeoutStatistics:
    """Counters of a ``Timeout``: calls that entered it, and calls it cancelled."""

    calls: int
    timed_out: int


@final
class TimeoutScope:
    """One guarded block: the async context manager that ``Timeout.scope()`` returns.

    Use it once. It must be entered from inside a task.
    """

    __slots__ = ("_cancelling", "_expired", "_handle", "_key", "_policy", "_task")

    def __init__(self, policy: Timeout, key: Hashable) -> None:
        self._policy = policy
        self._key = key
        # Invariant: _handle is the armed timer between __aenter__ and
        # __aexit__, None before and after; _expired is True once the timer
        # fired, which it does at most once, and then _task has one more
        # pending cancellation request than when the scope was entered.
        self._task: asyncio.Task[Any] | None = None
        self._handle: Cancellable | None = None
        self._expired = False
        self._cancelling = 0

    @property
    def expired(self) -> bool:
        """Whether the timer fired."""
        return self._expired

    async def __aenter__(self) -> TimeoutScope:
        if self._task is not None:
            raise RuntimeError("a TimeoutScope can be entered only once")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Timeout must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        policy = self._policy
        policy._calls += 1
        self._handle = policy.clock.call_later(policy.options.seconds, self._expire)
        return self

    def _expire(self) -> None:
        assert self._task is not None
        self._expired = True
        self._handle = None
        self._task.cancel(msg="corun.resilience.Timeout expired")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        if not self._expired:
            return
        assert self._task is not None
        if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise self._policy._timed_out(self._key) from exc


class Timeout(PolicyBase):
    """Cancel the call when it runs longer than ``options.seconds``.

    Example::

        timeout = Timeout(TimeoutOptions(seconds=2.0))


        async def main():
            async with timeout.scope():
                await asyncio.sleep(0)
            return await timeout.execute(asyncio.sleep, 0, key="api")

    Events: ``timed_out`` when it fires.
    """

    kind = "timeout"

    options: TimeoutOptions

    def __init__(self, options: TimeoutOptions, **common: Unpack[PolicyArgs]) -> None:
        super().__init__(_validate.options(options, TimeoutOptions, required=True), **common)
        self._calls = 0
        self._timed_out_count = 0

    def scope(self, *, key: Hashable = None) -> TimeoutScope:
        """An async context manager that times out the block it guards."""
        return TimeoutScope(self, key)

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        async with TimeoutScope(self, key):
            return await fn(*args)

    def _timed_out(self, key: Hashable) -> TimeoutError:
        self._timed_out_count += 1
        options = self.options
        if self.hooks.timed_out:
            event = TimedOut(
                policy=self.name,
                key=key,
                at=self.clock.now(),
                timeout=options.seconds,
                overall=options.overall,
            )
            self.hooks.emit("timed_out", self.hooks.timed_out, event)
        if options.overall:
            return OverallTimeout(policy=self.name, key=key, timeout=options.seconds)
        return AttemptTimeout(policy=self.name, key=key, timeout=options.seconds)

    def statistics(self) -> TimeoutStatistics:
        """Counters: calls entered, calls timed out."""
        return TimeoutStatistics(calls=self._calls, timed_out=self._timed_out_count)
