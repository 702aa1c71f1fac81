"""The watchdog's alarm: a kernel timer that a running loop keeps pushing back.

The watchdog needs the GIL for every look at a loop, and a loop of short
steps hands it over only at a poll: at the default threshold, 12 looks and
hand-overs a second, though none could find a stall. So each observed loop
has a ``timerfd``: the loop sets it to ring a stall threshold ahead, again
every half threshold while its steps end (``LoopAccounting.arm_alarm``), and
the watchdog sleeps on it without the GIL. It rings only when the loop has
run one step, or waited, for half a threshold: the only times a look can find
a stall.

Linux's ``timerfd_create`` and ``timerfd_settime``, through ``ctypes``
(``os.timerfd_create`` is Python 3.13's). Where they are missing, the
watchdog looks by its own timer, as before.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
from collections.abc import Callable
from typing import Final

_CLOCK_MONOTONIC: Final = 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class Itimerspec(ctypes.Structure):
    """Linux's ``struct itimerspec``: a timer's interval and its first expiry."""

    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))

    def expire_after(self, seconds: float) -> None:
        """Set the first expiry ``seconds`` after the setting, once (0: the timer is disarmed)."""
        whole = math.floor(seconds)
        self.it_value.tv_sec = whole
        self.it_value.tv_nsec = min(999_999_999, round((seconds - whole) * 1e9))


@functools.cache
def _calls() -> tuple[Callable[..., int], Callable[..., int]]:
    # PyDLL: the call keeps the GIL. A system call of a microsecond, made in
    # the middle of the loop's steps, would otherwise let a waiting thread in.
    libc = ctypes.PyDLL(None, use_errno=True)
    create = libc.timerfd_create
    create.argtypes = (ctypes.c_int, ctypes.c_int)
    create.restype = ctypes.c_int
    settime = libc.timerfd_settime
    settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    settime.restype = ctypes.c_int
    return create, settime


@functools.cache
def _read_call() -> Callable[..., int] | None:
    try:
        read = ctypes.PyDLL(None, use_errno=True).read
    except (AttributeError, OSError):
        return None
    read.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t)
    read.restype = ctypes.c_ssize_t
    return read


def read_count(fd: int) -> int:
    """The count a timerfd or eventfd holds (taken: the fd stops being readable), or 0.

    Read without letting go of the GIL. The watchdog reads its fds after it
    wakes, and ``os.read`` lets go of the GIL: while a step holds it, taking
    it back cost a switch interval (5 ms) per read, before the watchdog could
    look at the step.
    """
    read = _read_call()
    if read is None:
        try:
            return int.from_bytes(os.read(fd, 8), "little")
        except OSError:  # nothing to read, or closed
            return 0
    count = ctypes.c_uint64()
    if read(fd, ctypes.byref(count), 8) != 8:
        return 0
    return count.value


class Alarm:
    """A one-shot timer on a file descriptor, set to ring ``seconds`` after each ``arm()``.

    Raises ``OSError`` when the system has no timerfd.
    """

    def __init__(self, seconds: float) -> None:
        try:
            create, settime = _calls()
        except (AttributeError, OSError) as exc:  # no such symbol, or no libc to load
            raise OSError(f"no timerfd: {exc}") from exc
        fd = create(_CLOCK_MONOTONIC, os.O_CLOEXEC | os.O_NONBLOCK)
        if fd < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"timerfd_create: {os.strerror(error)}")
        self.fd: int = fd
        #: Times it rang (as ``drain`` read them).
        self.rings: int = 0
        self._spec = Itimerspec()
        self.set_seconds(seconds)
        #: Sets it to ring ``seconds`` from now (what the loop calls: no arguments to parse).
        self.arm: Callable[[], int] = functools.partial(
            settime, fd, 0, ctypes.addressof(self._spec), None
        )

    def set_seconds(self, seconds: float) -> None:
        """Ring ``seconds`` after each arming from now on."""
        # Never zero: that would disarm it.
        self._spec.expire_after(max(seconds, 1e-9))

    def drain(self) -> int:
        """Take the rings since the last drain (0 if none): the fd stops being readable."""
        if self.fd < 0:
            return 0
        rang = read_count(self.fd)
        self.rings += rang
        return rang

    def close(self) -> None:
        """Close the file descriptor (whoever arms it must have stopped)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
