"""``Hedge``: when a call is slow, start another one and take the first success.

For idempotent calls only: a hedged call may run twice (or more) on the
dependency. It trades a little extra load for a shorter tail latency (Dean
and Barroso, *The Tail at Scale*, 2013).

The policy starts the call as a task. If it has not finished after the
hedging delay, it starts another attempt, up to ``max_hedges`` extra ones,
each a delay after the previous. The first attempt to *succeed* wins: its
result is returned and every other attempt is cancelled, and awaited, so
their cleanup is done when ``execute`` returns. An attempt that fails while
others run is set aside; when all have failed, the last failure is raised.
A first attempt that fails *before* the delay is not hedged: that is a
failure, for ``Retry`` to handle, not slowness.

The delay is ``delay`` seconds, or with ``percentile`` set, that percentile
of the latencies of recent successful attempts (``window`` seconds of them,
in a ``WindowedHistogram``), once there are ``min_samples`` of them;
``delay`` is used until then.

Hedging has no block form (``scope()``): it must start the callable again,
which a ``with`` block cannot do.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, Unpack, final

from corun.resilience import _validate
from corun.resilience.events import HedgeLaunched
from corun.resilience.metrics import WindowedHistogram
from corun.resilience.policy import PolicyArgs, PolicyBase

T = TypeVar("T")

#: The most extra attempts a hedge may start.
MAX_HEDGES = 10


@dataclass(frozen=True, slots=True)
class HedgeOptions:
    """Options of a ``Hedge``.

    Attributes:
        delay: seconds before each extra attempt, in [0, 86400]; with
            ``percentile``, the delay used until there are enough samples.
        percentile: if set, in (0, 100): hedge after this percentile of
            recent successful latencies instead (95.0: the slowest 5 %).
        min_samples: samples needed before the percentile is used, in
            [1, 1000000].
        window: how far back latencies count, in (0, 86400] s.
        max_hedges: extra attempts at most, in [1, 10].
    """

    delay: float = 0.1
    percentile: float | None = None
    min_samples: int = 20
    window: float = 60.0
    max_hedges: int = 1

    def __post_init__(self) -> None:
        owner = "HedgeOptions"
        _validate.normalize(self, owner, "delay", _validate.seconds, allow_zero=True)
        if self.percentile is not None:
            value = _validate.number(owner, "percentile", self.percentile, low=0.0, high=100.0)
            if value in (0.0, 100.0):
                raise ValueError(f"{owner}.percentile must be in (0, 100), got {self.percentile!r}")
            object.__setattr__(self, "percentile", value)
        _validate.count(owner, "min_samples", self.min_samples)
        _validate.normalize(self, owner, "window", _validate.seconds)
        _validate.count(owner, "max_hedges", self.max_hedges, high=MAX_HEDGES)


@dataclass(frozen=True, slots=True)
class HedgeStatistics:
    """Counters of a ``Hedge``.

    Attributes:
        calls: calls started.
        hedges: extra attempts started.
        hedge_wins: calls won by an extra attempt.
        delay: the hedging delay a call would use now.
    """

    calls: int
    hedges: int
    hedge_wins: int
    delay: float


def _fire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@final
class _Attempt(Generic[T]):
    """One attempt's coroutine; records its latency when it succeeds."""

    __slots__ = ("args", "fn", "policy")

    def __init__(
        self, policy: Hedge, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]
    ) -> None:
        self.policy = policy
        self.fn = fn
        self.args = args

    async def run(self) -> T:
        clock = self.policy.clock
        started = clock.now()
        result = await self.fn(*self.args)
        end = clock.now()
        self.policy._latency.record(end - started, end)
        return result


class Hedge(PolicyBase):
    """Start another attempt when the first is slow; the first success wins.

    Example::

        hedge = Hedge(HedgeOptions(percentile=95.0, delay=0.05))


        @hedge
        async def lookup(name: str) -> str: ...

    Events: ``hedge_launched`` for each extra attempt.
    """

    kind = "hedge"

    options: HedgeOptions

    def __init__(self, options: HedgeOptions | None = None, **common: Unpack[PolicyArgs]) -> None:
        super().__init__(_validate.options(options, HedgeOptions), **common)
        self._latency = WindowedHistogram(self.options.window)
        self._calls = 0
        self._hedges = 0
        self._hedge_wins = 0

    def delay(self) -> float:
        """The hedging delay a call started now would use."""
        options = self.options
        if options.percentile is None:
            return options.delay
        now = self.clock.now()
        if self._latency.count(now) < options.min_samples:
            return options.delay
        value = self._latency.percentile(options.percentile, now)
        return options.delay if value is None else value

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        self._calls += 1
        loop = asyncio.get_running_loop()
        attempt = _Attempt(self, fn, args)
        delay = self.delay()
        # Invariant: order lists every attempt task in launch order; pending
        # holds those not finished; every task in order is finished or
        # cancelled and awaited before this method returns.
        order: list[asyncio.Task[T]] = [loop.create_task(attempt.run())]
        pending: set[asyncio.Task[T]] = set(order)
        failure: BaseException | None = None
        try:
            while True:
                hedge_due: asyncio.Future[None] | None = None
                timer = None
                if len(order) <= self.options.max_hedges:
                    hedge_due = loop.create_future()
                    timer = self.clock.call_later(delay, functools.partial(_fire, hedge_due))
                    waiting: set[asyncio.Future[Any]] = {*pending, hedge_due}
                else:
                    waiting = set(pending)
                try:
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if timer is not None:
                        timer.cancel()
                # Finished attempts first, in launch order: a success wins
                # even if the hedge timer fired in the same loop iteration.
                for task in order:
                    if task not in pending or not task.done():
                        continue
                    pending.discard(task)
                    if task.cancelled():
                        failure = asyncio.CancelledError()
                        continue
                    error = task.exception()
                    if error is None:
                        if task is not order[0]:
                            self._hedge_wins += 1
                        return task.result()
                    failure = error
                if pending and hedge_due is not None and hedge_due.done():
                    self._launch(loop, attempt, order, pending, key, delay)
                elif not pending:
                    assert failure is not None
                    raise failure
        finally:
            failure = None  # breaks a reference cycle through the traceback
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _launch(
        self,
        loop: asyncio.AbstractEventLoop,
        attempt: _Attempt[T],
        order: list[asyncio.Task[T]],
        pending: set[asyncio.Task[T]],
        key: Hashable,
        delay: float,
    ) -> None:
        task = loop.create_task(attempt.run())
        order.append(task)
        pending.add(task)
        self._hedges += 1
        hooks = self.hooks
        if hooks.hedge_launched:
            event = HedgeLaunched(
                policy=self.name, key=key, at=self.clock.now(), attempt=len(order), delay=delay
            )
            hooks.emit("hedge_launched", hooks.hedge_launched, event)

    def statistics(self) -> HedgeStatistics:
        """Counters, and the delay a call would use now."""
        return HedgeStatistics(
            calls=self._calls, hedges=self._hedges, hedge_wins=self._hedge_wins, delay=self.delay()
        )
