"""Timers: ``TimerHandle`` and the heap the loop keeps them in.

Cancellation is lazy. ``TimerHandle.cancel()`` only marks the handle and
counts it; the heap drops cancelled entries when they reach the top. A program
that schedules many timeouts and cancels most of them (every request with a
deadline that succeeds) would otherwise fill the heap with dead entries, so
when cancelled entries are the majority, and there are enough of them for the
O(n) rebuild to pay off, the heap is compacted in one pass.

The heap holds the handles themselves, ordered by ``(when, sequence)``: the
sequence number makes timers due at the same instant run in the order they
were scheduled. The sift loops are our own, compiled, rather than ``heapq``:
``heapq`` compares through ``<``, which would either have to be the handle's
public ``__lt__`` (asyncio's, by ``when`` alone, not stable) or compare
``(when, sequence, handle)`` tuples, one more garbage-collected allocation per
timer. Compiled, a comparison here is two field reads.
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

from corun.runtime.engine.handles import Handle, LoopBase

#: Compact only when at least this many cancelled timers are in the heap.
MIN_CANCELLED_FOR_COMPACTION: Final = 100
#: ... and when they are more than this fraction of it.
CANCELLED_FRACTION_FOR_COMPACTION: Final = 0.5


class TimerHandle(Handle):
    """A callback scheduled for a point in time, returned by ``call_later`` and ``call_at``."""

    __slots__ = ("_given", "_queue", "_seq", "_when")

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: LoopBase,
        context: contextvars.Context | None = None,
    ) -> None:
        super().__init__(callback, args, loop, context)
        self._when: float = when
        # What call_at() was given when it was not a float (an int, say):
        # when() hands it back, as asyncio does. None otherwise, so that the
        # float need not be boxed again on call_later's path.
        self._given: object = None
        # The tie-breaker for timers due at the same instant (set by push).
        self._seq: int = 0
        # Invariant: _queue is the TimerQueue whose heap holds this handle, or
        # None once it was popped (ran, or dropped as cancelled).
        self._queue: TimerQueue | None = None

    def _repr_info(self) -> list[str]:
        info = super()._repr_info()
        info.insert(2 if self._cancelled else 1, f"when={self.when()}")
        return info

    def __hash__(self) -> int:
        return hash(self._when)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            return self._when < other._when
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            return self._when < other._when or self.__eq__(other)
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            return self._when > other._when
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            return self._when > other._when or self.__eq__(other)
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TimerHandle):
            return (
                self._when == other._when
                and self._callback == other._callback
                and self._args == other._args
                and self._cancelled == other._cancelled
            )
        return NotImplemented

    def when(self) -> Any:
        """The absolute time, on the loop's clock, the callback is scheduled for.

        What ``call_at`` was given (an int stays an int, as in asyncio).
        """
        given = self._given
        return self._when if given is None else given

    def cancel(self) -> None:
        """Cancel the timer; it is dropped from the heap lazily."""
        if not self._cancelled:
            queue = self._queue
            if queue is not None:
                queue._cancelled_count += 1
        super().cancel()


def _before(a: TimerHandle, b: TimerHandle) -> bool:
    """The heap's order: by deadline, then by the order of scheduling."""
    return a._when < b._when or (a._when == b._when and a._seq < b._seq)


def _sift_toward_root(heap: list[TimerHandle], pos: int, start: int = 0) -> None:
    """Move ``heap[pos]`` up (no higher than ``start``) until its parent comes before it."""
    item = heap[pos]
    while pos > start:
        parent_pos = (pos - 1) >> 1
        parent = heap[parent_pos]
        if not _before(item, parent):
            break
        heap[pos] = parent
        pos = parent_pos
    heap[pos] = item


def _sift_toward_leaves(heap: list[TimerHandle], pos: int) -> None:
    """Restore the heap below ``pos`` after ``heap[pos]`` was replaced.

    As ``heapq`` does it: move the earlier child up until a leaf is reached,
    put the item there, then sift it back toward the root. That takes fewer
    comparisons than stopping early, since the item usually belongs low.
    """
    end = len(heap)
    start = pos
    item = heap[pos]
    child = 2 * pos + 1
    while child < end:
        right = child + 1
        if right < end and not _before(heap[child], heap[right]):
            child = right
        heap[pos] = heap[child]
        pos = child
        child = 2 * pos + 1
    heap[pos] = item
    _sift_toward_root(heap, pos, start)


def _pop(heap: list[TimerHandle]) -> TimerHandle:
    """Remove and return the first handle (the heap is not empty)."""
    last = heap.pop()
    if not heap:
        return last
    first = heap[0]
    heap[0] = last
    _sift_toward_leaves(heap, 0)
    return first


class TimerQueue:
    """The loop's timer heap, with lazy cancellation and compaction."""

    __slots__ = ("_cancelled_count", "_heap", "_sequence")

    def __init__(self) -> None:
        # Invariant: _cancelled_count is the number of cancelled handles in
        # _heap; every handle in _heap has _queue set to self.
        self._heap: list[TimerHandle] = []
        self._cancelled_count: int = 0
        self._sequence: int = 0

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def cancelled_count(self) -> int:
        """Cancelled timers still held in the heap."""
        return self._cancelled_count

    def push(self, handle: TimerHandle) -> None:
        """Schedule ``handle`` at ``handle.when()``."""
        handle._queue = self
        self._sequence += 1
        handle._seq = self._sequence
        heap = self._heap
        heap.append(handle)
        _sift_toward_root(heap, len(heap) - 1)

    def next_deadline(self) -> float | None:
        """When the earliest live timer is due, or None when there are none.

        Drops cancelled timers from the top, and compacts the heap when they
        dominate it.
        """
        heap = self._heap
        if (
            self._cancelled_count > MIN_CANCELLED_FOR_COMPACTION
            and self._cancelled_count > len(heap) * CANCELLED_FRACTION_FOR_COMPACTION
        ):
            self._compact()
        while heap:
            handle = heap[0]
            if not handle._cancelled:
                return handle._when
            _pop(heap)
            handle._queue = None
            self._cancelled_count -= 1
        return None

    def pop_due(self, end_time: float, ready: deque[Handle], stamp: bool = False) -> None:
        """Move every timer due at or before ``end_time`` to ``ready``, in order.

        With ``stamp``, each is marked as queued at its deadline (see Handle._queued).
        """
        heap = self._heap
        while heap and heap[0]._when < end_time:
            handle = _pop(heap)
            handle._queue = None
            if handle._cancelled:
                self._cancelled_count -= 1
            else:
                if stamp:
                    handle._queued = handle._when
                ready.append(handle)

    def clear(self) -> None:
        """Forget every timer (the loop is closing)."""
        for handle in self._heap:
            handle._queue = None
        self._heap.clear()
        self._cancelled_count = 0

    def _compact(self) -> None:
        live: list[TimerHandle] = []
        for handle in self._heap:
            if handle._cancelled:
                handle._queue = None
            else:
                live.append(handle)
        for pos in range(len(live) // 2 - 1, -1, -1):
            _sift_toward_leaves(live, pos)
        self._heap = live
        self._cancelled_count = 0

    def _check_invariants(self) -> None:
        heap = self._heap
        cancelled = sum(1 for h in heap if h._cancelled)
        assert cancelled == self._cancelled_count, (cancelled, self._cancelled_count)
        assert all(h._queue is self for h in heap)
        assert all(not _before(heap[i], heap[(i - 1) >> 1]) for i in range(1, len(heap)))
