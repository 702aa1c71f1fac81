"""How long a thread of observation held the loop up: its CPU time between two pauses.

The serving thread builds and sends an answer in stretches, pausing between
them so that the loop's thread can take the GIL (``observer.pause``). While it
runs a stretch, a loop that wants the GIL waits, so the longest stretch is the
longest the answer held the loop up. It is measured in the thread's CPU time:
time the thread spent descheduled by the machine, or waiting in a system call,
held nothing up for which it can be blamed.
"""

from __future__ import annotations

import threading
import time


class Holds:
    """The longest stretch of CPU time a thread ran between two of its pauses."""

    __slots__ = ("_since", "longest")

    def __init__(self) -> None:
        self._since = time.thread_time()
        self.longest = 0.0

    def mark(self) -> None:
        """A pause: the stretch since the last one ends here."""
        now = time.thread_time()
        self.longest = max(self.longest, now - self._since)
        self._since = now


_current = threading.local()


def start() -> Holds:
    """Measure this thread's stretches from now on (until ``stop()``)."""
    holds = Holds()
    _current.holds = holds
    return holds


def _measuring() -> Holds | None:
    holds: Holds | None = getattr(_current, "holds", None)
    return holds


def stop() -> Holds | None:
    """Stop measuring this thread's stretches; the last measurement, closed by a mark."""
    holds = _measuring()
    mark()
    _current.holds = None
    return holds


def mark() -> None:
    """This thread pauses for the loop (a no-op unless it is being measured)."""
    holds = _measuring()
    if holds is not None:
        holds.mark()
