"""The clock seam: where every policy in ``corun.resilience`` gets its time.

Policies never call ``time``, ``asyncio.sleep`` or ``loop.call_later``
themselves. They read the time with ``clock.now()``, wait with ``await
clock.sleep(seconds)`` and arm timers with ``clock.call_later(seconds, fn)``,
so a test can hand them ``corun.testing.MockClock`` and run years of backoff
in microseconds, deterministically.

Why a timer method, and not only ``sleep``: a timeout must fire while the
guarded call runs in the same task. With only ``sleep`` that takes a watcher
task per call, which costs a task and must be reaped before the loop closes
(a pending task at close is reported as destroyed). ``asyncio.timeout``
itself is built on ``loop.call_at`` for the same reason.

Three clocks ship with corun:

* ``SystemClock`` (the default): the running loop's ``time()`` and
  ``asyncio.sleep``. It works on any asyncio loop, and looks the running
  loop up at every read.
* ``LoopClock(loop)``: the same clock bound to one loop, for code that runs
  on that loop only (``corun fetch``): ``now`` and ``call_later`` are the
  loop's own bound methods, so a read costs no loop lookup (on Python 3.11
  ``asyncio.get_running_loop()`` makes a ``getpid()`` system call).
* ``corun.testing.MockClock``: virtual time, advanced by hand or jumping to
  the next deadline when every sleeper is waiting (autojump).

Wall time is a separate, optional seam. Only one thing in this package needs
it: an HTTP ``Retry-After`` given as a date, which is wall time and cannot be
compared with a monotonic clock. Code that parses such a header takes a
``WallClock`` callable (``time.time`` in production, ``MockClock.wall`` in
tests) instead of reading the system time itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final, Protocol, TypeAlias, final, runtime_checkable

#: A callable that returns the wall time in seconds since the epoch (UTC).
WallClock: TypeAlias = Callable[[], float]


@runtime_checkable
class Clock(Protocol):
    """The time source of a policy.

    Contract:

    * ``now()`` returns seconds as a float from a monotonic clock: two calls
      never go backwards. Its origin is arbitrary, so only differences mean
      anything. It is cheap and may be called outside a coroutine.
    * ``await sleep(seconds)`` returns once ``now()`` has advanced by at least
      ``seconds`` (a value ``<= 0`` yields to the loop once and returns). It
      must be cancellable like ``asyncio.sleep``: cancelling the waiting task
      raises ``CancelledError`` in it and leaves nothing behind.
    * ``call_later(seconds, callback)`` arranges for ``callback()`` to run
      once ``now()`` has advanced by ``seconds``, from the loop (never from
      inside ``call_later`` itself), unless the returned handle's
      ``cancel()`` is called first. Cancelling twice, or after it ran, does
      nothing. Callbacks due at the same time run in the order they were
      armed.
    * All three are called only from the thread that runs the policy's loop.

    A clock that breaks these rules breaks every policy that uses it: a
    ``now()`` that goes backwards can reopen an old breaker window, and a
    ``sleep()`` that returns early shortens backoff and timeouts.
    """

    def now(self) -> float:
        """The current time, in monotonic seconds."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait until ``now()`` has advanced by ``seconds``."""
        ...

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Cancellable:
        """Run ``callback()`` once ``now()`` has advanced by ``seconds``."""
        ...


class Cancellable(Protocol):
    """A timer armed by ``Clock.call_later`` (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None:
        """Disarm the timer; harmless when it already ran or was cancelled."""
        ...


@final
class SystemClock:
    """The real clock: the running loop's ``time()``, ``asyncio.sleep`` and ``call_later``.

    ``now()`` reads the running loop's clock so that it agrees with the
    loop's own timers. Outside a running loop (for ``statistics()`` called
    from synchronous code) it falls back to ``time.monotonic()``, which is
    what both asyncio's loop and corun's return.
    """

    __slots__ = ()

    def now(self) -> float:
        """The running loop's time, or ``time.monotonic()`` without one."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return time.monotonic()
        return loop.time()

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep(seconds)``."""
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Cancellable:
        """``loop.call_later(seconds, callback)`` on the running loop."""
        return asyncio.get_running_loop().call_later(seconds, callback)

    def wall(self) -> float:
        """Wall time in seconds since the epoch (``time.time()``); a ``WallClock``."""
        return time.time()

    def __repr__(self) -> str:
        return "SystemClock()"


@final
class LoopClock:
    """The clock of one loop: ``loop.time``, ``loop.call_later`` and ``asyncio.sleep``.

    ``now`` and ``call_later`` are the loop's bound methods, taken once, so
    they cost what the loop's own do. Use it only from the thread that runs
    ``loop``, while it runs.

    Args:
        loop: the loop whose time and timers to use.
    """

    __slots__ = ("call_later", "loop", "now")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        # Bound methods cached: a read is one call, with no loop lookup.
        self.now: Callable[[], float] = loop.time
        self.call_later: Callable[[float, Callable[[], object]], Cancellable] = loop.call_later

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep(seconds)`` (on the running loop, which must be ``loop``)."""
        await asyncio.sleep(seconds)

    def wall(self) -> float:
        """Wall time in seconds since the epoch (``time.time()``); a ``WallClock``."""
        return time.time()

    def __repr__(self) -> str:
        return f"LoopClock({self.loop!r})"


#: The clock policies use when none is given. Stateless, so one is enough.
SYSTEM_CLOCK: Final = SystemClock()
