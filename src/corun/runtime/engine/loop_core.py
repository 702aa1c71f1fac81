"""``LoopCore``: the part of corun's event loop that every other part builds on.

It holds the ready queue, the timers, fd readiness, threadsafe wakeups,
executors, signals, async generators, error reporting and debug mode.
``corun.runtime.loop.EventLoop`` adds sockets, transports, servers, TLS and
subprocesses on top, using only what this class offers.

One iteration (``_run_once``):

1. drop cancelled timers from the top of the heap (compacting it when they
   dominate), and work out how long the loop may sleep: not at all if
   callbacks are ready or the loop is stopping, until the next timer if there
   is one, forever otherwise;
2. wait for I/O that long, and queue the handles of ready fds;
3. queue the timers that are due;
4. run exactly the handles that were in the ready queue at this point, in
   FIFO order. Handles they schedule run in the next iteration, so a callback
   that keeps rescheduling itself cannot starve I/O.

Other threads wake a sleeping loop through a self-pipe (a socketpair), which
also receives the numbers of caught signals from ``signal.set_wakeup_fd``.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import errno
import os
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
import weakref
from asyncio import (
    AbstractEventLoop,
    ensure_future,
    gather,
    iscoroutine,
    isfuture,
    wrap_future,
)
from asyncio import Future as AsyncioFuture
from asyncio import events as _events
from asyncio import timeout as _timeout
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeAlias, TypeVar, TypeVarTuple, Unpack, cast

from mypy_extensions import mypyc_attr

from corun.runtime._constants import logger
from corun.runtime.engine.accounting import LoopAccounting
from corun.runtime.engine.asyncio_compat import (
    TASK_FACTORY_GETS_NAME,
    TASK_FACTORY_KWARGS,
    iscoroutinefunction,
)
from corun.runtime.engine.epoll import EpollIO
from corun.runtime.engine.formatting import DEBUG_STACK_DEPTH
from corun.runtime.engine.futures import Future, set_result_unless_cancelled
from corun.runtime.engine.handles import POLL_INTERVAL, Handle, LoopBase, handle_queued
from corun.runtime.engine.instruments import Instrument
from corun.runtime.engine.interpreted_task import Task
from corun.runtime.engine.task_core import TaskCore, account_task_step, init_task, task_step
from corun.runtime.engine.timers import TimerHandle, TimerQueue

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


FileDescriptorLike: TypeAlias = "int | _HasFileno"
_ExceptionHandler = Callable[[Any, dict[str, Any]], object]
_TaskFactory = Callable[..., Any]

# A compiled static: a class imported from an interpreted module is otherwise
# looked up in this module's dict on every use.
_TASK: Final[type[Task[Any]]] = Task

# mypyc looks builtins up by name on every use; a Final alias is a C static.
_callable: Final = callable


def _check_io(loop: LoopCore, timeout: float | None, queue: deque[Handle]) -> None:
    """Wait for I/O up to ``timeout`` and queue the handles of ready fds.

    Functions rather than methods, here and below: the loop is an instance of
    the interpreted EventLoop, on which a compiled method call is a Python-level
    dispatch.
    """
    loop._ran_since_poll = 0
    instruments = loop._corun_instruments
    if instruments.before_io_wait:
        instruments.call_io_hook("before_io_wait", instruments.before_io_wait, timeout)
    accounting = loop._corun_accounting
    if accounting is None:
        loop._io.poll(timeout, queue, None)
    else:
        # The wait starts where the last batch of handles ended, and the next
        # batch starts where it ends: two clock reads fewer per iteration, for
        # the microseconds of the loop's own bookkeeping in between.
        start = accounting.last_read
        if start <= 0.0:
            start = accounting.clock()
        # Narrowed once: comparing a ``float | None`` is a generic comparison.
        waits = timeout is None or timeout != 0.0
        if start >= accounting.turn_due and waits:
            # The serving thread wants the GIL and the loop is about to wait:
            # hand it over before the wait, not after. A poll that returns
            # while that thread holds the GIL waits for it, until the thread
            # next lets go or the interpreter forces a switch (5 ms).
            now = accounting.hand_over(start)
            if timeout is not None:
                timeout = max(0.0, timeout - (now - start))
            start = now
        accounting.io_wait_since = start
        try:
            # A poll that does not wait returns within a system call: its
            # handles are stamped, and the next batch starts, at the reading
            # before it. One clock read fewer per iteration of a busy loop;
            # the microsecond goes to the next step, like the loop's other
            # bookkeeping between two batches.
            end = loop._io.poll(timeout, queue, accounting.clock if waits else None, start)
        finally:
            accounting.io_wait_since = 0.0
        accounting.last_read = end
        if end >= accounting.alarm_at:
            accounting.arm_alarm(end)
        # An empty poll is the loop's own bookkeeping, not a wait.
        if waits:
            accounting.io_wait_total += end - start
        if loop._io.arrived:
            loop._io.arrived = False
            accounting.client_arrived(end)
        # A look waits while the serving thread takes turns: waiting on the
        # look's gate, the loop would miss the turn, and lose a slice of a walk.
        # (A turn not yet due, the serving thread's wait for a client, is none.)
        if end - accounting.turn_due >= accounting.turn_grace or (
            end >= accounting.look_due and accounting.turn_due > end
        ):
            accounting.hand_over(end)
    if instruments.after_io_wait:
        instruments.call_io_hook("after_io_wait", instruments.after_io_wait, timeout)


def _run_once(loop: LoopCore) -> None:
    """One iteration of ``loop``: wait for I/O or the next timer, then run what is ready.

    A function, as ``_check_io``: ``run_forever`` calls it without a dispatch
    unless ``_run_once`` was replaced (see there).
    """
    ready = loop._ready
    timers = loop._timers
    # A time() replaced on the instance (mock.patch.object(loop, "time"),
    # as tests across the ecosystem do) decides which timers are due, as
    # on asyncio's loop; otherwise the clock seam, without a dispatch.
    clock = loop._clock if loop._plain_timers else loop.time
    deadline = timers.next_deadline()
    timeout: float | None
    if ready or loop._stopping:
        timeout = 0.0
    elif deadline is not None:
        accounting = loop._corun_accounting
        now = clock() if accounting is None else _timers_now(loop, accounting)
        timeout = deadline - now
        if timeout < 0.0:
            timeout = 0.0
    else:
        timeout = None

    # See POLL_INTERVAL: the check is skipped only while work is ready and
    # nothing outside the loop can become ready.
    if (
        timeout != 0.0
        or loop._stopping
        or loop._ran_since_poll >= POLL_INTERVAL
        or len(loop._io) > 1  # more fds than the loop's own wakeup socket
        or loop._signal_handlers
    ):
        _check_io(loop, timeout, ready)

    if deadline is not None:
        accounting = loop._corun_accounting
        if accounting is None:
            timers.pop_due(clock() + loop._clock_resolution, ready, False)
        else:
            # A timer's lateness is counted from its deadline, when that
            # is on the accounting's clock.
            timers.pop_due(
                _timers_now(loop, accounting) + loop._clock_resolution,
                ready,
                loop._plain_timers,
            )

    # Run only what is ready now; what these callbacks schedule waits
    # for the next iteration.
    _run_handles(loop, ready, len(ready))


def _run_handles(loop: LoopCore, queue: deque[Handle], todo: int) -> None:
    """Run the first ``todo`` handles of ``queue``, skipping cancelled ones."""
    loop._ran_since_poll += todo
    accounting = loop._corun_accounting
    if accounting is not None:
        _run_handles_accounted(loop, accounting, todo)
        return
    if loop._debug:
        loop._run_ready_debug(queue, todo)
        return
    if todo == 1:  # common when tasks hand off to each other; no bound method
        handle = queue.popleft()
        if not handle._cancelled:
            handle._run()
        return
    popleft = queue.popleft
    for _i in range(todo):  # not `_`: mypyc boxes that name as an object
        handle = popleft()
        if not handle._cancelled:
            handle._run()


def _run_handles_accounted(loop: LoopCore, accounting: LoopAccounting, todo: int) -> None:
    """``_run_handles`` with the accounting on: one clock read between two handles.

    The queue is the loop's ready queue, whose ``popleft`` the accounting holds.
    """
    clock = accounting.clock
    lag_histogram = accounting.lag
    schedule_histogram = accounting.schedule
    threshold = accounting.stall_threshold
    debug = loop._debug
    popleft = accounting.popleft
    now = accounting.last_read  # see _check_io
    if now <= 0.0:
        now = clock()
    try:
        for _i in range(todo):
            handle: Handle = popleft()
            if handle._cancelled:
                continue
            queued = handle._queued
            lag = -1.0
            if queued > 0.0:
                # A timer due after the batch's start reading is on time, not early.
                lag = now - queued if now > queued else 0.0
            accounting.step_seq += 1
            accounting.step_start = now
            # The previous step's handle and task go to the retired slots first:
            # overwritten directly, they could be freed while the watchdog can
            # still read them (``LoopAccounting.retire_step``).
            accounting.retired_handle = accounting.step_handle
            accounting.retired_task = accounting.step_task
            accounting.step_handle = handle
            accounting.step_task = None
            accounting.step_gc = accounting.gc_total
            if debug:
                loop._current_handle = handle
            handle._run()
            end = clock()
            duration = end - now
            if end >= accounting.alarm_at:
                accounting.arm_alarm(end)
            accounting.steps += 1
            accounting.busy += duration
            task = accounting.step_task
            if task is not None:
                # A task's lateness goes to the schedule histogram only; the
                # loop's lag is both histograms added up (see accounting.py).
                if lag >= 0.0:
                    schedule_histogram.record(lag)
                account_task_step(task, duration, lag, accounting, end)
            elif lag >= 0.0:
                lag_histogram.record(lag)
            if duration > accounting.longest:
                accounting.longest = duration
                # A name, not the object: holding a task or handle would keep
                # it (and all it references) alive.
                accounting.longest_owner = (
                    getattr(handle._callback, "__qualname__", "a callback")
                    if task is None
                    else task.get_name()
                )
            if duration >= threshold:
                accounting.long_step(handle if task is None else task, now, duration)
            if debug:
                loop._current_handle = None
                if duration >= loop.slow_callback_duration:
                    logger.warning(
                        "Executing %s took %.3f seconds", _format_handle(handle), duration
                    )
            now = end
    finally:
        accounting.last_read = now
        accounting.retire_step()


def _timers_now(loop: LoopCore, accounting: LoopAccounting) -> float:
    """The time for the loop's timers, with the accounting on: its last reading, if it has one.

    The accounting reads the clock at the end of every wait and every batch
    of handles, and the loop would read it again straight after, for its
    timers: with observation on, that was two of a web request's eight
    readings. Only when the readings are the timers' own clock: ``loop.time``
    not replaced, and the accounting on the loop's clock seam.
    """
    if not loop._plain_timers:
        return loop.time()
    now = accounting.last_read
    if now > 0.0 and accounting.clock is loop._clock:
        return now
    return loop._clock()


def as_asyncio_loop(loop: LoopCore) -> AbstractEventLoop:
    """``loop`` as the type checker should see it: every LoopCore is an EventLoop."""
    return cast(AbstractEventLoop, loop)


def _is_debug_mode() -> bool:
    """Debug mode from the environment: ``-X dev`` or ``PYTHONASYNCIODEBUG``."""
    return sys.flags.dev_mode or (
        not sys.flags.ignore_environment and bool(os.environ.get("PYTHONASYNCIODEBUG"))
    )


def _fileobj_to_fd(fileobj: FileDescriptorLike) -> int:
    """An fd from an int or an object with ``fileno()``, checked as ``selectors`` does."""
    if isinstance(fileobj, int):
        fd = fileobj
    else:
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
    if fd < 0:
        raise ValueError(f"Invalid file descriptor: {fd}")
    return fd


def _run_until_complete_cb(fut: Any) -> None:
    if not fut.cancelled():
        exc = fut.exception()
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            # The exception propagates out of run_forever() by itself;
            # stopping here would hide it.
            return
    fut.get_loop().stop()


def _sighandler_noop(signum: int, frame: object) -> None:
    """Installed for signals the loop handles: the wakeup fd does the work."""


def _format_handle(handle: Handle) -> str:
    callback = handle._callback
    args = handle._arguments()
    owner = args[0] if callback is task_step and args else getattr(callback, "__self__", None)
    if isinstance(owner, TaskCore):
        # A task's step or wakeup: name the task, which says more than "task_step".
        return repr(owner)
    return str(handle)


@dataclass(frozen=True)
class LoopStatistics:
    """A snapshot of the loop's queues, from ``EventLoop.statistics()``."""

    #: Handles waiting in the ready queue.
    ready: int
    #: Timers in the heap, live and cancelled.
    timers: int
    #: Cancelled timers not yet dropped from the heap.
    cancelled_timers: int
    #: File descriptors registered for I/O (the loop's own wakeup fd included).
    io_registrations: int
    #: Signals with handlers.
    signal_handlers: int
    #: Instruments registered.
    instruments: int


@mypyc_attr(allow_interpreted_subclasses=True)
class LoopCore(LoopBase):
    """The core of corun's event loop: a ready queue, a timer heap and epoll.

    Not used directly: ``corun.EventLoop`` (``loop.py``) is the complete loop.
    It is a compiled class with no Python base class; ``EventLoop`` adds
    ``asyncio.AbstractEventLoop`` as a second base, which a compiled class
    cannot have (as uvloop's ``Loop`` does over its Cython base).
    """

    def __init__(self) -> None:
        # The ready queue, _closed and _debug live in LoopBase.
        super().__init__()
        # Invariant: _thread_id is the running thread's id while run_forever()
        # runs, None otherwise.
        self._plain_timers: bool = True
        self._check_seams()
        self._timers: TimerQueue = TimerQueue()
        self._io: EpollIO = EpollIO()
        self._stopping: bool = False
        self._thread_id: int | None = None
        # The clock seam. An attribute, not a call of self.time(): on the
        # interpreted EventLoop subclass a method call costs a Python dispatch.
        self._clock: Callable[[], float] = time.monotonic
        self._clock_resolution: float = time.get_clock_info("monotonic").resolution
        self._exception_handler: _ExceptionHandler | None = None
        self._debug = _is_debug_mode()
        # What set_debug() was given, which get_debug() hands back, as asyncio does.
        self._debug_setting: object = self._debug
        #: In debug mode, callbacks that run longer than this are logged.
        # Any number, kept as given (asyncio hands back what it was set to).
        self.slow_callback_duration: Any = 0.1
        self._current_handle: Handle | None = None
        self._task_factory: _TaskFactory | None = None
        self._coroutine_origin_tracking_enabled: bool = False
        self._coroutine_origin_tracking_saved_depth: int = 0
        self._asyncgens: weakref.WeakSet[AsyncGenerator[Any, Any]] = weakref.WeakSet()
        self._asyncgens_shutdown_called: bool = False
        self._executor_shutdown_called: bool = False
        self._default_executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._signal_handlers: dict[int, Handle] = {}
        # What stream transports recv_into (see streams.py), made on first use.
        # One per loop: its transports read one at a time, on its thread.
        self._read_buffer: memoryview | None = None
        # fd -> the transport that owns it; add_reader() and friends refuse
        # those fds, as asyncio does, since the transport's callbacks would be lost.
        self._transports: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        # The self-pipe. _wakeup_pending is set while a wakeup byte is unread,
        # so a burst of threadsafe calls writes one byte, not one each.
        self._ssock, self._csock = socket.socketpair()
        self._ssock.setblocking(False)
        self._csock.setblocking(False)
        self._wakeup_pending: bool = False
        self._io.set_reader(self._ssock.fileno(), Handle(self._read_from_self, (), self, None))

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} running={self.is_running()} "
            f"closed={self.is_closed()} debug={self.get_debug()}>"
        )

    def __del__(self) -> None:
        if not self._closed:
            warnings.warn(
                f"unclosed event loop {self!r}", ResourceWarning, stacklevel=2, source=self
            )
            if not self.is_running():
                self.close()

    # --- running and stopping ------------------------------------------------

    def _check_closed(self) -> None:
        if self._closed:
            raise RuntimeError("Event loop is closed")

    def _check_running(self) -> None:
        if self.is_running():
            raise RuntimeError("This event loop is already running")
        if _events._get_running_loop() is not None:
            raise RuntimeError("Cannot run the event loop while another loop is running")

    def run_forever(self) -> None:
        """Run until ``stop()`` is called."""
        self._check_closed()
        self._check_running()
        self._set_coroutine_origin_tracking(self._debug)
        old_agen_hooks = sys.get_asyncgen_hooks()
        try:
            self._thread_id = threading.get_ident()
            sys.set_asyncgen_hooks(
                firstiter=self._asyncgen_firstiter_hook,
                finalizer=self._asyncgen_finalizer_hook,
            )
            _events._set_running_loop(as_asyncio_loop(self))
            self._ran_since_poll = POLL_INTERVAL  # the first iteration checks for I/O
            accounting = self._corun_accounting
            if accounting is not None:
                accounting.last_read = 0.0  # from before this run: no start for a wait
            # The method is called only if it was replaced, on the class or the
            # instance (as CPython's test_timeout_rounding does to count
            # iterations): on the interpreted EventLoop a compiled method call
            # is a Python-level dispatch, about 700 instructions an iteration.
            replaced = type(self)._run_once is not _RUN_ONCE_METHOD or (
                "_run_once" in getattr(self, "__dict__", _NO_ATTRIBUTES)
            )
            while True:
                if replaced:
                    self._run_once()
                else:
                    _run_once(self)
                if self._stopping:
                    break
        finally:
            self._stopping = False
            self._thread_id = None
            _events._set_running_loop(None)
            self._set_coroutine_origin_tracking(False)
            sys.set_asyncgen_hooks(*old_agen_hooks)

    def run_until_complete(self, future: Generator[Any, None, _T] | Awaitable[_T]) -> _T:
        """Run until ``future`` (a future, task or coroutine) is done; return its result."""
        self._check_closed()
        self._check_running()
        new_task = not isfuture(future)
        task: Any = ensure_future(future, loop=as_asyncio_loop(self))  # type: ignore[arg-type]
        if new_task:
            # We created it; if the loop stops early, the caller gets an
            # error from here, so don't also log that it was destroyed pending.
            task._log_destroy_pending = False
        task.add_done_callback(_run_until_complete_cb)
        try:
            self.run_forever()
        except BaseException:
            if new_task and task.done() and not task.cancelled():
                # The exception propagates; mark the task's as retrieved.
                task.exception()
            raise
        finally:
            task.remove_done_callback(_run_until_complete_cb)
        if not task.done():
            raise RuntimeError("Event loop stopped before Future completed.")
        return task.result()  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Stop after the current iteration (run_forever returns)."""
        self._stopping = True

    def is_running(self) -> bool:
        """Whether the loop is running."""
        return self._thread_id is not None

    def is_closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    def close(self) -> None:
        """Close the loop: drop pending callbacks and timers, release fds and threads.

        Raises:
            RuntimeError: the loop is running.
        """
        if self.is_running():
            raise RuntimeError("Cannot close a running event loop")
        if self._closed:
            return
        if self._debug:
            logger.debug("Close %r", self)
        for sig in list(self._signal_handlers):
            self.remove_signal_handler(sig)
        self._closed = True
        self._ready.clear()
        self._timers.clear()
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is not None:
            self._default_executor = None
            executor.shutdown(wait=False)
        self._io.close()
        self._ssock.close()
        self._csock.close()

    def _check_seams(self) -> None:
        """Set the direct paths on or off: on while a seam is LoopCore's own.

        Futures and Tasks append to the ready queue directly while
        ``call_soon`` is LoopCore's own, and timers read the clock seam and
        go to the heap directly while ``time`` and ``call_at`` are. Replaced
        by a subclass or on the instance (``mock.patch.object``, tracing
        tools), the replacement is called instead, as asyncio would.
        ``EventLoop`` calls this again whenever one of them is set or deleted
        on the instance.
        """
        own: Any = getattr(self, "__dict__", None) or {}
        cls = type(self)
        self._plain_call_soon = "call_soon" not in own and cls.call_soon is LoopCore.call_soon
        self._plain_timers = (
            "time" not in own
            and "call_at" not in own
            and cls.time is LoopCore.time
            and cls.call_at is LoopCore.call_at
        )

    def time(self) -> float:
        """The loop's clock: ``time.monotonic()``."""
        return self._clock()

    def statistics(self) -> LoopStatistics:
        """A snapshot of the loop's queues."""
        return LoopStatistics(
            ready=len(self._ready),
            timers=len(self._timers),
            cancelled_timers=self._timers.cancelled_count,
            io_registrations=len(self._io),
            signal_handlers=len(self._signal_handlers),
            instruments=len(self._corun_instruments),
        )

    # --- one iteration -----------------------------------------------------

    def _run_once(self) -> None:
        """One iteration: wait for I/O or the next timer, then run what is ready."""
        _run_once(self)

    def _run_ready_debug(self, ready: deque[Handle], todo: int) -> None:
        for _i in range(todo):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            self._current_handle = handle
            try:
                start = self.time()
                handle._run()
                duration = self.time() - start
                if duration >= self.slow_callback_duration:
                    logger.warning(
                        "Executing %s took %.3f seconds", _format_handle(handle), duration
                    )
            finally:
                self._current_handle = None

    # --- scheduling callbacks ----------------------------------------------

    def _check_thread(self) -> None:
        """In debug mode: fail when called from a thread other than the loop's."""
        if self._thread_id is None:
            return
        if threading.get_ident() != self._thread_id:
            raise RuntimeError(
                "Non-thread-safe operation invoked on an event loop other than the current one"
            )

    def _check_callback(self, callback: object, method: str) -> None:
        if iscoroutine(callback) or iscoroutinefunction(callback):
            raise TypeError(f"coroutines cannot be used with {method}()")
        if not _callable(callback):
            raise TypeError(f"a callable object was expected by {method}(), got {callback!r}")

    def call_soon(
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> Handle:
        """Run ``callback(*args)`` on the next iteration, after those scheduled before it.

        Raises:
            RuntimeError: the loop is closed.
            TypeError: ``callback`` is a coroutine, or not callable.
        """
        _check_schedulable(self, callback, "call_soon")
        handle = Handle(callback, args, self, context)
        self._ready.append(handle)
        if self._observed:
            handle_queued(self, handle)
        return handle

    def call_soon_threadsafe(
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> Handle:
        """Like ``call_soon``, from any thread; wakes the loop if it is waiting."""
        self._check_closed()
        if self._debug or not _callable(callback):
            self._check_callback(callback, "call_soon_threadsafe")
        handle = Handle(callback, args, self, context)
        # Append first, then wake: the loop reads the pipe before it runs the
        # ready queue, so it cannot miss this handle (see _read_from_self).
        if self._observed:
            handle_queued(self, handle)
        self._ready.append(handle)
        if not self._wakeup_pending:
            self._wakeup_pending = True
            self._write_to_self()
        return handle

    def call_later(
        self,
        delay: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` after ``delay`` seconds; timers due together run in FIFO order."""
        if delay is None:
            raise TypeError("delay must not be None")
        if self._plain_timers:
            # self.time() and self.call_at() would each cost a Python-level
            # dispatch on the interpreted EventLoop, for the same result.
            return _add_timer(self, self._clock() + delay, callback, args, context)
        return self.call_at(self.time() + delay, callback, *args, context=context)

    def call_at(
        self,
        when: Any,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` at ``when`` on the loop's clock (``loop.time()``)."""
        if when is None:
            raise TypeError("when cannot be None")
        # Typed Any, not float: compiled, a float parameter would turn 7591
        # into 7591.0, and asyncio hands back what it was given.
        timer = _add_timer(self, float(when), callback, args, context)
        if type(when) is not float:
            timer._given = when
        return timer

    # --- the self-pipe -------------------------------------------------------

    def _write_to_self(self) -> None:
        try:
            self._csock.send(b"\0")
        except OSError:
            # Full (the loop will wake up anyway) or closed (nothing to wake).
            pass

    def _read_from_self(self) -> None:
        while True:
            try:
                data = self._ssock.recv(4096)
            except InterruptedError:
                continue
            except BlockingIOError:
                break
            if not data:
                break
            for byte in data:
                if byte:  # a signal number from set_wakeup_fd; 0 is a plain wakeup
                    self._handle_signal(byte)
        # Cleared after draining: a thread that saw the flag set has already
        # appended its handle, which this iteration or the next will run.
        self._wakeup_pending = False

    # --- futures and tasks -------------------------------------------------

    def create_future(self) -> Future:
        """A new corun Future bound to this loop."""
        return Future(loop=as_asyncio_loop(self))

    def create_task(
        self,
        coro: Coroutine[Any, Any, _T] | Generator[Any, None, _T],
        *,
        name: object = None,
        context: contextvars.Context | None = None,
        **kwargs: Any,
    ) -> Any:
        """Schedule ``coro`` as a Task (or what the task factory makes of it).

        As the running Python's asyncio does: from 3.13 on, other keyword
        arguments (``eager_start=True``) go to the Task or the task factory,
        and from 3.14 on the factory is given the name as well.
        """
        if self._closed:  # not self._check_closed(): a Python-level dispatch here
            raise RuntimeError("Event loop is closed")
        if kwargs and not TASK_FACTORY_KWARGS:
            raise TypeError(
                f"create_task() got an unexpected keyword argument {next(iter(kwargs))!r}"
            )
        factory = self._task_factory
        if factory is None:
            # Task(coro, loop=..., name=..., context=...) without the keyword
            # arguments: see init_task.
            task: Any = _TASK.__new__(_TASK)
            if kwargs:
                eager_start = kwargs.pop("eager_start", False)
                if kwargs:
                    raise TypeError(
                        f"Task() got an unexpected keyword argument {next(iter(kwargs))!r}"
                    )
                init_task(task, coro, as_asyncio_loop(self), name, context, bool(eager_start))
            else:
                init_task(task, coro, as_asyncio_loop(self), name, context)
        else:
            if TASK_FACTORY_KWARGS:
                if context is not None:
                    kwargs["context"] = context
                if TASK_FACTORY_GETS_NAME and name is not None:
                    kwargs["name"] = name
                    name = None
                task = factory(self, coro, **kwargs)
            elif context is None:
                task = factory(self, coro)
            else:
                task = factory(self, coro, context=context)
            if name is not None:
                try:
                    set_name = task.set_name
                except AttributeError:
                    pass
                else:
                    set_name(name)
        return task

    def set_task_factory(self, factory: _TaskFactory | None) -> None:
        """Use ``factory(loop, coro, **kwargs)`` in ``create_task``; None restores the default."""
        if factory is not None and not callable(factory):
            raise TypeError("task factory must be a callable or None")
        self._task_factory = factory

    def get_task_factory(self) -> _TaskFactory | None:
        """The task factory, or None for the default."""
        return self._task_factory

    # --- instruments ---------------------------------------------------------

    def add_instrument(self, instrument: Instrument) -> None:
        """Start calling ``instrument``'s hooks (see ``corun.Instrument``)."""
        self._corun_instruments.add(instrument)
        self._update_observed()

    def remove_instrument(self, instrument: Instrument) -> None:
        """Stop calling ``instrument``'s hooks.

        Raises:
            KeyError: it was not added.
        """
        self._corun_instruments.remove(instrument)
        self._update_observed()

    def _set_accounting(self, accounting: LoopAccounting | None) -> None:
        """Attach ``corun.observe``'s accounting (None detaches it)."""
        if accounting is not None:
            accounting.popleft = self._ready.popleft
        self._corun_accounting = accounting
        self._update_observed()

    def _watch_arrivals(self, fd: int) -> None:
        """Watch corun.observe's inspection socket ``fd`` in the loop's polls (-1: stop).

        See ``LoopAccounting.client_arrived``. Callable from any thread; a
        closed loop has nothing to watch with.
        """
        if not self._closed:
            self._io.watch_arrivals(fd)

    # --- I/O readiness -------------------------------------------------------

    def _ensure_fd_no_transport(self, fd: FileDescriptorLike) -> None:
        fileno = _fileobj_to_fd(fd)
        transport = self._transports.get(fileno)
        if transport is not None and not transport.is_closing():
            raise RuntimeError(f"File descriptor {fd!r} is used by transport {transport!r}")

    def add_reader(
        self, fd: FileDescriptorLike, callback: Callable[[*_Ts], object], *args: *_Ts
    ) -> None:
        """Call ``callback(*args)`` whenever ``fd`` is readable."""
        self._check_closed()
        fileno = _fileobj_to_fd(fd)
        self._ensure_fd_no_transport(fileno)
        self._add_reader(fileno, callback, *args)
        self._io.remember(fileno, fd)

    def remove_reader(self, fd: FileDescriptorLike) -> bool:
        """Stop watching ``fd`` for reading; True if a reader was registered."""
        fileno = self._registered_fd(fd)
        self._ensure_fd_no_transport(fileno)
        return self._remove_reader(fileno)

    def add_writer(
        self, fd: FileDescriptorLike, callback: Callable[[*_Ts], object], *args: *_Ts
    ) -> None:
        """Call ``callback(*args)`` whenever ``fd`` is writable."""
        self._check_closed()
        fileno = _fileobj_to_fd(fd)
        self._ensure_fd_no_transport(fileno)
        self._add_writer(fileno, callback, *args)
        self._io.remember(fileno, fd)

    def remove_writer(self, fd: FileDescriptorLike) -> bool:
        """Stop watching ``fd`` for writing; True if a writer was registered."""
        fileno = self._registered_fd(fd)
        self._ensure_fd_no_transport(fileno)
        return self._remove_writer(fileno)

    def _registered_fd(self, fileobj: FileDescriptorLike) -> int:
        """The fd of ``fileobj``; for one closed since it was registered, the fd it had then."""
        try:
            return _fileobj_to_fd(fileobj)
        except ValueError:
            fd = self._io.find(fileobj)
            if fd < 0:
                raise
            return fd

    # The same without the transport check: for transports and socket
    # operations, which own their fds.

    def _add_reader(self, fd: int, callback: Callable[..., object], *args: Any) -> Handle:
        self._check_closed()
        handle = Handle(callback, args, self, None)
        self._io.set_reader(fd, handle)
        return handle

    def _remove_reader(self, fd: int) -> bool:
        if self._closed:
            return False
        return self._io.remove_reader(fd)

    def _add_writer(self, fd: int, callback: Callable[..., object], *args: Any) -> Handle:
        self._check_closed()
        handle = Handle(callback, args, self, None)
        self._io.set_writer(fd, handle)
        return handle

    def _remove_writer(self, fd: int) -> bool:
        if self._closed:
            return False
        return self._io.remove_writer(fd)

    # --- executors -----------------------------------------------------------

    def run_in_executor(
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[[Unpack[_Ts]], _T],
        *args: *_Ts,
    ) -> AsyncioFuture[_T]:
        """Run ``func(*args)`` in ``executor`` (default: a thread pool); await the result."""
        self._check_closed()
        if self._debug:
            self._check_callback(func, "run_in_executor")
        if executor is None:
            if self._executor_shutdown_called:
                raise RuntimeError("Executor shutdown has been called")
            executor = self._default_executor
            if executor is None:
                executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="corun")
                self._default_executor = executor
        return wrap_future(executor.submit(func, *args), loop=as_asyncio_loop(self))

    def set_default_executor(self, executor: Any) -> None:
        """Use ``executor`` (a ThreadPoolExecutor) for ``run_in_executor(None, ...)``."""
        if not isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            raise TypeError("executor must be ThreadPoolExecutor")
        self._default_executor = executor

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Shut the default executor down and wait for its threads, at most ``timeout`` s."""
        self._executor_shutdown_called = True
        executor = self._default_executor
        if executor is None:
            return
        future = self.create_future()
        thread = threading.Thread(target=self._do_shutdown, args=(executor, future))
        thread.start()
        try:
            async with _timeout(timeout):
                await future
        except TimeoutError:
            warnings.warn(
                f"The executor did not finishing joining its threads within {timeout} seconds.",
                RuntimeWarning,
                stacklevel=2,
            )
            executor.shutdown(wait=False)
        else:
            thread.join()

    def _do_shutdown(self, executor: concurrent.futures.Executor, future: Future) -> None:
        try:
            executor.shutdown(wait=True)
            if not self._closed:
                self.call_soon_threadsafe(set_result_unless_cancelled, future, None)
        except Exception as exc:
            if not self._closed and not future.cancelled():
                self.call_soon_threadsafe(future.set_exception, exc)

    # --- asynchronous generators ---------------------------------------------

    def _asyncgen_firstiter_hook(self, agen: AsyncGenerator[Any, Any]) -> None:
        if self._asyncgens_shutdown_called:
            warnings.warn(
                f"asynchronous generator {agen!r} was scheduled after "
                "loop.shutdown_asyncgens() call",
                ResourceWarning,
                stacklevel=2,
                source=self,
            )
        self._asyncgens.add(agen)

    def _asyncgen_finalizer_hook(self, agen: AsyncGenerator[Any, Any]) -> None:
        self._asyncgens.discard(agen)
        if not self._closed:
            self.call_soon_threadsafe(self.create_task, agen.aclose())

    async def shutdown_asyncgens(self) -> None:
        """Close every asynchronous generator that is still open."""
        self._asyncgens_shutdown_called = True
        if not len(self._asyncgens):
            return
        closing = list(self._asyncgens)
        self._asyncgens.clear()
        results = await gather(*[agen.aclose() for agen in closing], return_exceptions=True)
        for result, agen in zip(results, closing, strict=True):
            if isinstance(result, Exception):
                self.call_exception_handler(
                    {
                        "message": "an error occurred during closing of "
                        f"asynchronous generator {agen!r}",
                        "exception": result,
                        "asyncgen": agen,
                    }
                )

    # --- signals ---------------------------------------------------------------

    def _check_signal(self, sig: object) -> int:
        if not isinstance(sig, int):
            raise TypeError(f"sig must be an int, not {sig!r}")
        if sig not in signal.valid_signals():
            raise ValueError(f"invalid signal number {sig}")
        return sig

    def add_signal_handler(
        self, sig: int, callback: Callable[[Unpack[_Ts]], object], *args: *_Ts
    ) -> None:
        """Run ``callback(*args)`` on the loop when signal ``sig`` arrives.

        Only from the main thread, as with asyncio.

        Raises:
            TypeError: ``callback`` is a coroutine, or ``sig`` is not an int.
            ValueError: ``sig`` is not a valid signal number.
            RuntimeError: ``sig`` cannot be caught, or this is not the main thread.
        """
        if iscoroutine(callback) or iscoroutinefunction(callback):
            raise TypeError("coroutines cannot be used with add_signal_handler()")
        self._check_signal(sig)
        self._check_closed()
        try:
            # Raises ValueError outside the main thread.
            signal.set_wakeup_fd(self._csock.fileno())
        except (ValueError, OSError) as exc:
            raise RuntimeError(str(exc)) from None
        handle = Handle(callback, args, self, None)
        self._signal_handlers[sig] = handle
        try:
            # The Python-level handler does nothing; the C handler writes the
            # signal number to the wakeup fd, which _read_from_self dispatches.
            signal.signal(sig, _sighandler_noop)
            # Restart interrupted system calls instead of failing with EINTR.
            signal.siginterrupt(sig, False)
        except OSError as exc:
            del self._signal_handlers[sig]
            if not self._signal_handlers:
                self._clear_wakeup_fd()
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from None
            raise

    def remove_signal_handler(self, sig: int) -> bool:
        """Remove the handler for ``sig``; False if there was none."""
        self._check_signal(sig)
        try:
            del self._signal_handlers[sig]
        except KeyError:
            return False
        handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise RuntimeError(f"sig {sig:d} cannot be caught") from None
            raise
        if not self._signal_handlers:
            self._clear_wakeup_fd()
        return True

    def _clear_wakeup_fd(self) -> None:
        try:
            signal.set_wakeup_fd(-1)
        except (ValueError, OSError) as exc:
            logger.info("set_wakeup_fd(-1) failed: %s", exc)

    def _handle_signal(self, sig: int) -> None:
        handle = self._signal_handlers.get(sig)
        if handle is None:
            return  # a signal someone else handles, e.g. SIGINT in asyncio.Runner
        if handle._cancelled:
            self.remove_signal_handler(sig)
        else:
            self._ready.append(handle)
            if self._observed:
                handle_queued(self, handle)

    # --- errors ----------------------------------------------------------------

    def get_exception_handler(self) -> _ExceptionHandler | None:
        """The custom exception handler, or None for the default."""
        return self._exception_handler

    def set_exception_handler(self, handler: _ExceptionHandler | None) -> None:
        """Call ``handler(loop, context)`` for errors nobody else can report."""
        if handler is not None and not callable(handler):
            raise TypeError(f"A callable object or None is expected, got {handler!r}")
        self._exception_handler = handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        """Log ``context`` to the ``asyncio`` logger, with the exception's traceback."""
        message = context.get("message") or "Unhandled exception in event loop"
        exception = context.get("exception")
        exc_info: Any = False
        if exception is not None:
            exc_info = (type(exception), exception, exception.__traceback__)
        current = self._current_handle
        if "source_traceback" not in context and current is not None and current._source_traceback:
            context["handle_traceback"] = current._source_traceback
        lines = [message]
        for key in sorted(context):
            if key in ("message", "exception"):
                continue
            value = context[key]
            if key == "source_traceback":
                text = "".join(_format_list(value)).rstrip()
                text = f"Object created at (most recent call last):\n{text}"
            elif key == "handle_traceback":
                text = "".join(_format_list(value)).rstrip()
                text = f"Handle created at (most recent call last):\n{text}"
            else:
                text = repr(value)
            lines.append(f"{key}: {text}")
        logger.error("\n".join(lines), exc_info=exc_info)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        """Report an error: to the custom handler if one is set, else to the default one."""
        handler = self._exception_handler
        if handler is None:
            try:
                self.default_exception_handler(context)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                # Never let a reporting failure escape into the loop.
                logger.error("Exception in default exception handler", exc_info=True)
            return
        try:
            handler(self, context)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                self.default_exception_handler(
                    {
                        "message": "Unhandled error in exception handler",
                        "exception": exc,
                        "context": context,
                    }
                )
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException:
                logger.error(
                    "Exception in default exception handler while handling an "
                    "unexpected error in custom exception handler",
                    exc_info=True,
                )

    # --- debug mode ------------------------------------------------------------

    def get_debug(self) -> Any:
        """Whether debug mode is on: what ``set_debug`` was given."""
        return self._debug_setting

    def set_debug(self, enabled: object) -> None:
        """Turn debug mode on or off (slow-callback warnings, thread checks, tracebacks).

        Any truthy value turns it on, as with asyncio (aiohttp's tests pass 1).
        """
        on = bool(enabled)
        self._debug = on
        self._debug_setting = enabled
        if self.is_running():
            self.call_soon_threadsafe(self._set_coroutine_origin_tracking, on)

    def _set_coroutine_origin_tracking(self, enabled: bool) -> None:
        if bool(enabled) == self._coroutine_origin_tracking_enabled:
            return
        if enabled:
            self._coroutine_origin_tracking_saved_depth = sys.get_coroutine_origin_tracking_depth()
            sys.set_coroutine_origin_tracking_depth(DEBUG_STACK_DEPTH)
        else:
            sys.set_coroutine_origin_tracking_depth(self._coroutine_origin_tracking_saved_depth)
        self._coroutine_origin_tracking_enabled = bool(enabled)


def _check_schedulable(loop: LoopCore, callback: object, method: str) -> None:
    """What ``call_soon`` and ``call_at`` check before scheduling ``callback``.

    Raises:
        RuntimeError: the loop is closed, or (debug mode) this is not its thread.
        TypeError: ``callback`` is a coroutine, or not callable.
    """
    if loop._closed:
        raise RuntimeError("Event loop is closed")
    if loop._debug:
        loop._check_thread()
    if loop._debug or not _callable(callback):  # callable() is cheap and rejects coroutines
        loop._check_callback(callback, method)


def _add_timer(
    loop: LoopCore,
    when: float,
    callback: Callable[..., object],
    args: tuple[Any, ...],
    context: contextvars.Context | None,
) -> TimerHandle:
    """``call_at``'s work, shared with ``call_later``'s direct path."""
    _check_schedulable(loop, callback, "call_at")
    timer = TimerHandle(when, callback, args, loop, context)
    loop._timers.push(timer)
    return timer


def _format_list(stack: Any) -> list[str]:
    return traceback.format_list(stack)


# What run_forever compares with, to see whether _run_once was replaced.
_RUN_ONCE_METHOD: Final[object] = LoopCore._run_once
_NO_ATTRIBUTES: Final[dict[str, Any]] = {}
