"""``Bulkhead``: at most N calls in flight, a bounded wait queue, then rejection.

This is the backpressure of the layer. A call enters when fewer than
``max_concurrent`` calls are in flight; otherwise it waits in a FIFO queue
of at most ``max_queue`` calls; when that is full too it fails at once with
``BulkheadFull``. Failing fast is the point: an unbounded queue (a bare
``asyncio.Semaphore``) turns overload into ever-growing latency and memory.
To bound the *time* spent waiting, put a ``Timeout`` outside the bulkhead.

Fairness and hand-over: a slot freed while calls wait is handed to the
oldest waiter directly (the in-flight count does not drop and rise again),
so a newcomer cannot overtake the queue. A waiter cancelled after it was
handed a slot, but before it ran, passes the slot on to the next one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar, Unpack, final

from corun.resilience import _validate
from corun.resilience.errors import BulkheadFull
from corun.resilience.policy import PolicyArgs, PolicyBase

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BulkheadOptions:
    """Options of a ``Bulkhead``.

    Attributes:
        max_concurrent: calls in flight at most, in [1, 1000000].
        max_queue: calls waiting at most, in [0, 1000000] (0: reject at
            once when all slots are taken).
    """

    max_concurrent: int = 10
    max_queue: int = 0

    def __post_init__(self) -> None:
        _validate.count("BulkheadOptions", "max_concurrent", self.max_concurrent)
        _validate.count("BulkheadOptions", "max_queue", self.max_queue, low=0)


@dataclass(frozen=True, slots=True)
class BulkheadStatistics:
    """A snapshot of a ``Bulkhead``.

    Attributes:
        in_flight: calls holding a slot now.
        queued: calls waiting now.
        admitted: calls that got a slot since the bulkhead was made.
        rejected: calls refused with ``BulkheadFull``.
    """

    in_flight: int
    queued: int
    admitted: int
    rejected: int


@final
class BulkheadScope:
    """One guarded block: the async context manager that ``Bulkhead.scope()`` returns."""

    __slots__ = ("_bulkhead", "_entered", "_key")

    def __init__(self, bulkhead: Bulkhead, key: Hashable) -> None:
        self._bulkhead = bulkhead
        self._key = key
        self._entered = False

    async def __aenter__(self) -> BulkheadScope:
        if self._entered:
            raise RuntimeError("a BulkheadScope can be entered only once")
        await self._bulkhead._acquire(self._key)
        self._entered = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._bulkhead._release()


class Bulkhead(PolicyBase):
    """Limit concurrent calls, queue a bounded number, reject the rest.

    Example::

        bulkhead = Bulkhead(BulkheadOptions(max_concurrent=8, max_queue=32))


        async def query(sql: str) -> list[tuple[object, ...]]:
            async with bulkhead.scope():
                return await db.fetch(sql)

    Events: ``rejected`` (reason ``"bulkhead_full"``).
    """

    kind = "bulkhead"

    options: BulkheadOptions

    def __init__(
        self, options: BulkheadOptions | None = None, **common: Unpack[PolicyArgs]
    ) -> None:
        super().__init__(_validate.options(options, BulkheadOptions), **common)
        # Invariant: 0 <= _in_flight <= max_concurrent, and _in_flight counts
        # the slots handed to waiters that have not run yet. _waiters holds
        # the futures of queued calls, oldest first, at most max_queue; a
        # cancelled one may linger until its task removes it, and is skipped.
        # _waiters is empty whenever _in_flight < max_concurrent (a freed slot
        # goes to a waiter before the count may drop).
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._admitted = 0
        self._rejected = 0

    async def _acquire(self, key: Hashable) -> None:
        options = self.options
        if self._in_flight < options.max_concurrent:
            self._in_flight += 1
            self._admitted += 1
            return
        if len(self._waiters) >= options.max_queue:
            self._rejected += 1
            error = BulkheadFull(
                policy=self.name,
                key=key,
                max_concurrent=options.max_concurrent,
                max_queue=options.max_queue,
            )
            raise self._refused(error, "bulkhead_full")
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a slot, but cancelled before using it
            else:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass  # already skipped by a _release()
            raise
        self._admitted += 1

    def _release(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # hand the slot over; _in_flight stays
                return
        self._in_flight -= 1

    def scope(self, *, key: Hashable = None) -> BulkheadScope:
        """An async context manager that holds a slot for the block it guards."""
        return BulkheadScope(self, key)

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        await self._acquire(key)
        try:
            return await fn(*args)
        finally:
            self._release()

    def statistics(self) -> BulkheadStatistics:
        """Calls in flight and queued now; admitted and rejected so far."""
        return BulkheadStatistics(
            in_flight=self._in_flight,
            queued=sum(1 for w in self._waiters if not w.done()),
            admitted=self._admitted,
            rejected=self._rejected,
        )
