"""The backstop's trigger: faulthandler's dump, fired by a kernel timer unless re-armed.

A C call that holds the GIL stops the watchdog, so something that needs no
GIL must dump the stacks. ``faulthandler.dump_traceback_later`` does, from a
C thread, but re-arming it ends that thread and starts another: twice a
second, that cost a loop serving echo over streams about a point of its CPU
(1.0 point more than the accounting alone with it, 0.05 less without, in one
interleaved run of 60 rounds). So ``faulthandler.register`` installs its
dump as the handler of a real-time signal, and a POSIX timer (``timer_create``)
sends that signal to the watchdog's own thread when it runs out: re-arming it
is one system call. Where the signal is taken (a handler other than the
default) or the calls are missing, it falls back to ``dump_traceback_later``.
The dumps go to one file for the process (``dump_file``), read back by the
watchdog (``monitor.py``).
"""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import signal
import tempfile
import threading
from collections.abc import Callable
from typing import IO, Final

from corun.observe.alarm import Itimerspec

#: The signal the timer sends: near the top of the real-time range, which
#: programs rarely use (the bottom few are glibc's and the first ones taken).
SIGNAL: Final = signal.SIGRTMAX - 3
_CLOCK_MONOTONIC: Final = 1
_SIGEV_THREAD_ID: Final = 4
_SIG_IGN: Final = 1


class _Sigevent(ctypes.Structure):
    # Linux's struct sigevent: 64 bytes, the thread id first in its union.
    _fields_ = (
        ("sigev_value", ctypes.c_void_p),
        ("sigev_signo", ctypes.c_int),
        ("sigev_notify", ctypes.c_int),
        ("sigev_notify_thread_id", ctypes.c_int),
        ("_pad", ctypes.c_int * 11),
    )


@functools.cache
def _libc() -> ctypes.PyDLL:
    return ctypes.PyDLL(None, use_errno=True)


def _ignore_when_unregistered() -> None:
    """Make the signal's disposition, under faulthandler's handler, "ignore".

    faulthandler puts back the disposition it found when it unregisters,
    which it does as the interpreter finalizes: a timer's signal arriving
    after that found the default action and ended the process (status -61,
    seen on 3.15). Set in C, as ``signal.signal`` may only be called from
    the main thread and this runs on the watchdog's.
    """
    handler = _libc().signal
    handler.argtypes = (ctypes.c_int, ctypes.c_void_p)
    handler.restype = ctypes.c_void_p
    handler(int(SIGNAL), _SIG_IGN)


@functools.cache
def _calls() -> tuple[Callable[..., int], Callable[..., int], Callable[..., int]]:
    # PyDLL: the watchdog keeps the GIL over a system call of a microsecond.
    libc = _libc()
    create = libc.timer_create
    create.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    create.restype = ctypes.c_int
    settime = libc.timer_settime
    settime.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    settime.restype = ctypes.c_int
    delete = libc.timer_delete
    delete.argtypes = (ctypes.c_void_p,)
    delete.restype = ctypes.c_int
    return create, settime, delete


_file: IO[bytes] | None = None
_registered = False


def dump_file() -> IO[bytes]:
    """The file the dumps go to: one for the process, kept open for its life.

    faulthandler writes to its descriptor, from a signal handler or its own
    thread, whenever it fires: closed, the number could be another file's.
    """
    global _file
    if _file is None:
        _file = tempfile.TemporaryFile()  # noqa: SIM115
    return _file


def prepare() -> None:
    """Open the dumps' file and load the timer's calls, on the calling thread.

    Both give up the GIL (a file's creation, the C library's loading). On the
    watchdog's thread beside a loop of short steps that is not handing it
    over, that left the watchdog waiting for the GIL until its next look:
    half a second, woken in vain at every poll of the loop (about one start
    in five, measured).
    """
    dump_file()
    try:
        _calls()
    except (AttributeError, OSError):
        pass  # Backstop falls back to dump_traceback_later


def dump_file_made() -> IO[bytes] | None:
    """The dumps' file, if one was made (without making it)."""
    return _file


class Backstop:
    """Dumps every thread's stack into ``dump_file()`` ``seconds`` after ``arm()``, unless armed again first.

    Made, armed and closed on one thread (the watchdog's): the timer's signal
    goes to that thread, which is waiting for the GIL when it fires. The
    signal's handler stays for the life of the process once installed: a
    signal still on its way when a timer is deleted would otherwise find the
    default action, which ends the process.
    """

    def __init__(self, seconds: float) -> None:
        global _registered
        self._seconds = seconds
        self._file = dump_file()
        self._timer: ctypes.c_void_p | None = None
        self._armed = False
        try:
            if not _registered and signal.getsignal(SIGNAL) != signal.SIG_DFL:
                raise OSError(f"signal {SIGNAL} has a handler already")
            self._timer = self._signal_timer()
        except OSError:
            self._timer = None  # dump_traceback_later, below
            return
        if not _registered:
            _ignore_when_unregistered()
            faulthandler.register(SIGNAL, file=self._file, all_threads=True, chain=False)
            _registered = True

    @property
    def by_signal(self) -> bool:
        """Whether a timer and a signal trigger the dump (else faulthandler's own thread)."""
        return self._timer is not None

    def _signal_timer(self) -> ctypes.c_void_p:
        try:
            create, _, _ = _calls()
        except (AttributeError, OSError) as exc:
            raise OSError(f"no POSIX timers: {exc}") from exc
        event = _Sigevent()
        event.sigev_signo = SIGNAL
        event.sigev_notify = _SIGEV_THREAD_ID
        event.sigev_notify_thread_id = threading.get_native_id()
        timer = ctypes.c_void_p()
        if create(_CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)) != 0:
            raise OSError(ctypes.get_errno(), "timer_create failed")
        return timer

    def _set(self, seconds: float) -> None:
        assert self._timer is not None
        spec = Itimerspec()
        spec.expire_after(seconds)  # 0: disarmed
        _, settime, _ = _calls()
        if settime(self._timer, 0, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timer_settime failed")

    def arm(self) -> None:
        """Dump ``seconds`` from now, unless armed again or disarmed before."""
        if self._timer is not None:
            self._set(self._seconds)
        else:
            faulthandler.dump_traceback_later(self._seconds, repeat=False, file=self._file)
        self._armed = True

    def disarm(self) -> None:
        """No dump until armed again."""
        if not self._armed:
            return
        if self._timer is not None:
            self._set(0.0)
        else:
            faulthandler.cancel_dump_traceback_later()
        self._armed = False

    def close(self) -> None:
        """Disarm it for good (its thread is about to end)."""
        self.disarm()
        if self._timer is not None:
            _, _, delete = _calls()
            delete(self._timer)
            self._timer = None
