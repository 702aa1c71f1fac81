"""``MockClock``: virtual time for ``corun.resilience`` policies.

A ``MockClock`` implements ``corun.resilience.Clock`` without ever reading
the system time. Time moves only when you say so:

* ``advance(seconds)`` moves it forward and fires every timer (and wakes
  every ``sleep()``) that falls due, in deadline order;
* with ``autojump=True``, the clock moves itself: as soon as no callback is
  ready to run on the loop, so that every task is blocked, waiting on the
  clock or on something only the clock can cause, it jumps to the next
  deadline. This is Trio's ``MockClock(autojump_threshold=0)``. A test that
  waits out a 30 s breaker and ten backoff sleeps runs in microseconds and
  sees exactly the same times on every run.

How autojump knows the loop is idle, and the alternatives rejected: while a
timer is armed, the clock keeps one callback of its own (``_tick``) in the
loop's ready queue. When ``_tick`` runs and finds the ready queue otherwise
empty, nothing can run until time passes, so it jumps. It reads the queue's
length through ``corun.EventLoop.statistics().ready`` on corun's loop and
through ``_ready`` on the stdlib's loops (every ``BaseEventLoop`` has it; it
is private, which is acceptable in a test tool and checked at first use).
Two rules that need no loop internals were rejected: "jump after N loop
iterations without clock activity" fires a timeout while a task is still
busy with zero-time work (a retry loop with backoff off, say), which turns a
passing test into a failing one depending on N; and a watchdog task that
jumps on a real-time delay is neither fast nor deterministic. On any other
loop, autojump raises ``RuntimeError`` and ``advance()`` still works.

The clock also keeps a wall time (``wall()``), which starts at
``wall_start`` and moves with the clock, for code that takes a
``corun.resilience.WallClock`` (``Retry-After`` dates).
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import math
from collections.abc import Callable
from typing import Final, final

#: Wall time at which a MockClock starts unless told otherwise: 2023-11-14T22:13:20Z.
DEFAULT_WALL_START: Final = 1_700_000_000.0


@final
class MockTimer:
    """A timer armed on a ``MockClock``; ``cancel()`` disarms it."""

    __slots__ = ("_clock", "callback", "cancelled", "deadline", "fired", "seq")

    def __init__(
        self, clock: MockClock, deadline: float, seq: int, callback: Callable[[], object]
    ) -> None:
        self._clock = clock
        self.deadline = deadline
        self.seq = seq
        self.callback = callback
        self.cancelled = False
        self.fired = False

    def __lt__(self, other: MockTimer) -> bool:
        return (self.deadline, self.seq) < (other.deadline, other.seq)

    def cancel(self) -> None:
        """Disarm the timer; harmless when it already fired or was cancelled."""
        if not (self.cancelled or self.fired):
            self.cancelled = True
            self._clock._live -= 1

    def __repr__(self) -> str:
        state = "cancelled" if self.cancelled else "fired" if self.fired else "armed"
        return f"<MockTimer {state} at t={self.deadline!r}>"


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _ready_count(loop: asyncio.AbstractEventLoop) -> int:
    """How many callbacks wait in ``loop``'s ready queue."""
    statistics = getattr(loop, "statistics", None)
    if statistics is not None:
        ready = getattr(statistics(), "ready", None)
        if isinstance(ready, int):
            return ready  # corun's loop: public API
    ready_queue = getattr(loop, "_ready", None)
    if ready_queue is None:
        raise RuntimeError(
            f"MockClock autojump cannot see the ready queue of {type(loop).__name__}; "
            "use corun's loop or asyncio's, or advance the clock by hand"
        )
    return len(ready_queue)


@final
class MockClock:
    """A ``corun.resilience.Clock`` whose time moves only by ``advance()`` or autojump.

    Args:
        start: the initial ``now()``.
        autojump: jump to the next deadline whenever the loop is idle.
        wall_start: the initial ``wall()`` (seconds since the epoch).

    Example::

        clock = MockClock(autojump=True)


        async def main():
            await clock.sleep(3600)  # returns at once, in virtual time
            return clock.now()


        assert asyncio.run(main()) == 3600.0
    """

    __slots__ = (
        "_autojump",
        "_heap",
        "_live",
        "_now",
        "_seq",
        "_start",
        "_tick_loop",
        "_wall_start",
        "jumps",
    )

    def __init__(
        self, start: float = 0.0, *, autojump: bool = False, wall_start: float = DEFAULT_WALL_START
    ) -> None:
        if not (math.isfinite(start) and math.isfinite(wall_start)):
            raise ValueError("MockClock start and wall_start must be finite")
        # Invariant: _heap holds every armed timer (cancelled ones are dropped
        # lazily); _live counts the armed, uncancelled, unfired ones; no live
        # timer has a deadline < _now. _tick_loop is the loop on which a
        # _tick is scheduled, None when none is.
        self._now = float(start)
        self._start = float(start)
        self._wall_start = float(wall_start)
        self._heap: list[MockTimer] = []
        self._live = 0
        self._seq = 0
        self._autojump = autojump
        self._tick_loop: asyncio.AbstractEventLoop | None = None
        #: How many times ``jump()`` moved the clock (autojump calls it).
        self.jumps = 0

    # ---- the Clock protocol

    def now(self) -> float:
        """The virtual time."""
        return self._now

    def wall(self) -> float:
        """The virtual wall time: ``wall_start`` plus the time advanced so far."""
        return self._wall_start + (self._now - self._start)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> MockTimer:
        """Run ``callback()`` once the clock has advanced by ``seconds`` (>= 0)."""
        if not math.isfinite(seconds):
            raise ValueError(f"delay must be finite, got {seconds!r}")
        timer = MockTimer(self, self._now + max(0.0, seconds), self._seq, callback)
        self._seq += 1
        heapq.heappush(self._heap, timer)
        self._live += 1
        self._schedule_tick()
        return timer

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has advanced by ``seconds``; ``<= 0`` yields once."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, functools.partial(_wake, future))
        try:
            await future
        finally:
            timer.cancel()

    # ---- moving time

    @property
    def autojump(self) -> bool:
        """Whether the clock jumps to the next deadline when the loop is idle."""
        return self._autojump

    @autojump.setter
    def autojump(self, value: bool) -> None:
        self._autojump = bool(value)
        self._schedule_tick()

    @property
    def pending(self) -> int:
        """Armed timers and sleepers that have not fired."""
        return self._live

    def next_deadline(self) -> float | None:
        """The deadline of the earliest armed timer, or None."""
        heap = self._heap
        while heap and heap[0].cancelled:
            heapq.heappop(heap)
        return heap[0].deadline if heap else None

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` and fire what falls due, in deadline order.

        Each timer's callback sees ``now()`` equal to its own deadline; after
        the last one, ``now()`` is the old time plus ``seconds``. Sleepers
        are woken (their futures resolved) and run at the loop's next
        iteration.

        Raises:
            ValueError: ``seconds`` is negative or not finite.
        """
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"MockClock can only advance by a finite amount >= 0, got {seconds!r}")
        self._fire_until(self._now + seconds)

    def _fire_until(self, target: float) -> None:
        heap = self._heap
        while heap and heap[0].deadline <= target:
            timer = heapq.heappop(heap)
            if timer.cancelled:
                continue
            self._now = max(self._now, timer.deadline)
            timer.fired = True
            self._live -= 1
            timer.callback()
        self._now = max(self._now, target)

    def jump(self) -> bool:
        """Advance to the next deadline and fire what is due there; False if none."""
        deadline = self.next_deadline()
        if deadline is None:
            return False
        self.jumps += 1
        self._fire_until(deadline)
        return True

    # ---- autojump

    def _schedule_tick(self) -> None:
        if not (self._autojump and self._live):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # armed outside a loop: the first timer armed inside one schedules it
        if self._tick_loop is loop:
            return
        # None, or a loop that stopped with our tick still queued (a test
        # that reuses the clock on a new loop): start ticking on this one.
        _ready_count(loop)  # fail now, not at the first tick, on a loop we cannot watch
        self._tick_loop = loop
        loop.call_soon(self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._tick_loop:
            return  # a stale tick of a loop we no longer watch
        self._tick_loop = None
        if not (self._autojump and self._live):
            return
        try:
            if _ready_count(loop) == 0:
                # Nothing else can run before time passes: every task waits.
                self.jump()
        finally:
            # Even if a timer's callback raised (the loop's exception
            # handler reports it), keep ticking: a stopped autojump hangs.
            self._schedule_tick()

    def __repr__(self) -> str:
        mode = ", autojump" if self._autojump else ""
        return f"<MockClock now={self._now!r}{mode}, {self._live} pending>"
