"""``RollingCounts``: two counters over a sliding time window, in buckets.

Shared by the breaker (failures, successes) and the retry budget (requests,
retries), so there is one sliding-window implementation. The window is cut
into ``buckets`` slots of ``window / buckets`` seconds; a slot is reused when
its time comes round again, so memory is fixed and the window slides in
steps of one slot (Polly's ``RollingHealthMetrics`` and Finagle's
``WindowedAdder`` do the same). Time comes from the caller, so this is a
pure data structure.
"""

from __future__ import annotations

import math
from typing import Final, final

#: The epoch of a slot never used (no clock reads this far back).
_NEVER: Final = -(2**62)


@final
class RollingCounts:
    """Counts ``first`` and ``second`` events over the last ``window`` seconds."""

    __slots__ = ("_epochs", "_first", "_second", "_width")

    def __init__(self, window: float, buckets: int = 10) -> None:
        if not (math.isfinite(window) and window > 0) or buckets < 1:
            raise ValueError(f"bad window {window!r} / buckets {buckets!r}")
        self._width = window / buckets
        # Invariant: slot i counts the events of epoch _epochs[i] (an epoch
        # is floor(now / _width)); a slot whose epoch is older than
        # buckets - 1 epochs before now is stale and counts as empty.
        self._epochs = [_NEVER] * buckets
        self._first = [0] * buckets
        self._second = [0] * buckets

    def add(self, now: float, first: int = 0, second: int = 0) -> None:
        """Count ``first`` and ``second`` events at time ``now``."""
        epoch = math.floor(now / self._width)
        slot = epoch % len(self._epochs)
        if self._epochs[slot] != epoch:
            self._epochs[slot] = epoch
            self._first[slot] = 0
            self._second[slot] = 0
        self._first[slot] += first
        self._second[slot] += second

    def totals(self, now: float) -> tuple[int, int]:
        """The two counts over the window ending at ``now``."""
        oldest = math.floor(now / self._width) - len(self._epochs) + 1
        first = second = 0
        for i, epoch in enumerate(self._epochs):
            if epoch >= oldest:
                first += self._first[i]
                second += self._second[i]
        return first, second

    def clear(self) -> None:
        """Forget everything."""
        n = len(self._epochs)
        self._epochs = [_NEVER] * n
        self._first = [0] * n
        self._second = [0] * n
