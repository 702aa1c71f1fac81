"""Handles: a callback, its arguments and its context, waiting in the ready queue.

``LoopBase`` is the part of the loop that Handles, Futures and Tasks touch on
every step, and ``call_soon`` below is how Futures and Tasks schedule onto it.
"""

from __future__ import annotations

import contextvars
import traceback
from asyncio import AbstractEventLoop
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final, cast

from mypy_extensions import mypyc_attr

from corun.runtime.engine.accounting import LoopAccounting
from corun.runtime.engine.formatting import format_callback_source
from corun.runtime.engine.instruments import Instruments
from corun.runtime.engine.interpreted_stack import extract_stack

# While callbacks are ready and the loop watches no fd but its own wakeup
# socket (and has no signal handlers), it checks for I/O once this many
# callbacks have run rather than on every iteration: such a check can find
# nothing but a wakeup, whose callbacks are already queued, and it is still an
# epoll_wait system call, which costs as much as a whole task hand-off. libuv
# skips the poll when it watches nothing; Tokio checks once per 61 tasks run.
# With any other fd registered, the loop checks on every iteration, as
# asyncio does, so that the pace of I/O is the same.
POLL_INTERVAL: Final = 64


@mypyc_attr(allow_interpreted_subclasses=True)
class LoopBase:
    """The loop's first base class: its ready queue, and the flags that decide how to append to it.

    ``LoopCore`` (``loop_core.py``) is its only subclass. It sits down here, in
    the module of the handles that point at it, so that Futures and
    Tasks can schedule their callbacks by appending to the queue: calling
    ``loop.call_soon`` on the interpreted ``EventLoop`` costs a Python-level
    method dispatch, while these attributes are read directly.
    """

    def __init__(self) -> None:
        # Invariant: _ready holds handles in FIFO order; cancelled ones are
        # skipped when popped. _plain_call_soon is False once call_soon was
        # overridden (by a subclass, or on the instance): then the override
        # is called, as asyncio's Future and Task would call it.
        self._ready: deque[Handle] = deque()
        self._closed: bool = False
        self._debug: bool = False
        self._plain_call_soon: bool = True
        # Callbacks run since the loop last checked for I/O; see POLL_INTERVAL.
        self._ran_since_poll: int = 0
        # Read by every task step; the name keeps it apart from asyncio's attributes.
        self._corun_instruments: Instruments = Instruments()
        # corun.observe's accounting, or None (see accounting.py). _observed
        # says that queued handles must be seen: stamped for the accounting,
        # or passed to task_scheduled instruments.
        self._corun_accounting: LoopAccounting | None = None
        self._observed: bool = False
        # Whether a task step has anything to call: the accounting, or a
        # before/after-step or exit instrument. One flag read twice per step
        # instead of four reads and tests.
        self._step_hooks: bool = False

    def _update_observed(self) -> None:
        instruments = self._corun_instruments
        accounting = self._corun_accounting is not None
        self._observed = accounting or bool(instruments.task_scheduled)
        self._step_hooks = accounting or bool(
            instruments.before_task_step or instruments.after_task_step or instruments.task_exited
        )


def call_soon(
    loop: AbstractEventLoop,
    corun_loop: bool,
    callback: Callable[[Any], object],
    arg: object,
    context: contextvars.Context | None,
) -> None:
    """``loop.call_soon(callback, arg, context=context)``, for Futures and Tasks.

    Their callbacks all take one argument (the future, the task), which a
    ``OneArgHandle`` keeps without an argument tuple. ``corun_loop`` says
    that ``loop`` is a corun loop (a LoopBase); Futures keep that as a flag
    rather than a second reference, which packs with their other flags.
    Straight onto the ready queue when nothing would differ from
    ``LoopCore.call_soon``: the loop is open, not in debug mode (thread and
    callback checks), and its ``call_soon`` is not overridden.
    """
    if corun_loop:
        queue = cast(LoopBase, loop)
        if queue._plain_call_soon and not queue._debug and not queue._closed:
            handle = OneArgHandle(callback, arg, queue, context)
            queue._ready.append(handle)
            if queue._observed:
                handle_queued(queue, handle)
            return
    loop.call_soon(callback, arg, context=context)


def handle_queued(loop: LoopBase, handle: Handle) -> None:
    """Let observers see a handle that was just queued (``LoopBase._observed`` is set)."""
    accounting = loop._corun_accounting
    if accounting is not None:
        # Queued by a running step: stamped with that step's start, which the
        # loop has read already, rather than a clock read of its own, as
        # often as steps wake tasks. The lateness counted is then from the
        # start of the step that queued it: within that step's duration
        # (microseconds; a longer one is a stall, reported as such).
        if accounting.step_handle is not None:
            handle._queued = accounting.step_start
        else:
            handle._queued = accounting.clock()
    instruments = loop._corun_instruments
    if instruments.task_scheduled:
        task = task_of(handle)
        if task is not None:
            instruments.call_task_hook("task_scheduled", instruments.task_scheduled, task)


def task_of(handle: Handle) -> Any:
    """The task whose step or wakeup ``handle`` runs, or None.

    By name, since this module sits below the task's: a step is scheduled as
    ``task_step(task)``, a wakeup as ``task._wakeup(future)``.
    """
    callback = handle._callback
    if callback is None:
        return None
    name = getattr(callback, "__name__", "")
    owner: Any = None
    if name == "task_step":
        args = handle._arguments()
        owner = args[0] if args else None
    elif name == "_wakeup":
        owner = getattr(callback, "__self__", None)
    # A callback of the user's that has one of those names is not a task's.
    return owner if hasattr(owner, "get_coro") else None


class Handle:
    """A scheduled callback, returned by ``call_soon`` and friends.

    ``cancel()`` is lazy: the handle stays wherever it is queued and the loop
    skips it when its turn comes.
    """

    # mypyc ignores __weakref__ here: the compiled build gets its weak
    # reference slot from setup.py (WEAKLY_REFERENCED), the pure one from this.
    __slots__ = (
        "__weakref__",
        "_args",
        "_callback",
        "_cancelled",
        "_context",
        "_loop",
        "_queued",
        "_repr",
        "_source_traceback",
    )

    def __init__(
        self,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: LoopBase,
        context: contextvars.Context | None = None,
    ) -> None:
        if context is None:
            context = contextvars.copy_context()
        self._context: contextvars.Context = context
        self._loop: LoopBase = loop
        self._callback: Callable[..., object] | None = callback
        self._args: Sequence[Any] | None = args
        self._cancelled: bool = False
        # When it was queued (or, for a timer, due) on the loop's clock, if
        # corun.observe is on; 0.0 otherwise.
        self._queued: float = 0.0
        self._repr: str | None = None
        self._source_traceback: traceback.StackSummary | None = None
        if loop._debug:  # the attribute: a method call costs a Python dispatch here
            self._source_traceback = extract_stack()

    def _arguments(self) -> Sequence[Any] | None:
        """The arguments the callback is called with (None once cancelled)."""
        return self._args

    def _repr_info(self) -> list[str]:
        info = [type(self).__name__]
        if self._cancelled:
            info.append("cancelled")
        args = self._arguments()
        if self._callback is not None and args is not None:
            info.append(format_callback_source(self._callback, args))
        if self._source_traceback:
            frame = self._source_traceback[-1]
            info.append(f"created at {frame.filename}:{frame.lineno}")
        return info

    def __repr__(self) -> str:
        if self._repr is not None:
            return self._repr
        return "<{}>".format(" ".join(self._repr_info()))

    def get_context(self) -> contextvars.Context:
        """The context the callback runs in."""
        return self._context

    def cancel(self) -> None:
        """Cancel the callback. Cancelling twice, or after it ran, does nothing."""
        if not self._cancelled:
            self._cancelled = True
            if self._loop._debug:
                # Keep the repr of what was cancelled: it is useful in logs.
                self._repr = repr(self)
            # Drop references so cancelled work can be collected early.
            self._callback = None
            self._args = None

    def cancelled(self) -> bool:
        """Whether ``cancel()`` was called."""
        return self._cancelled

    def _run(self) -> None:
        callback = self._callback
        args = self._args
        if callback is None or args is None:  # cancelled while queued
            return
        try:
            # Spelled out for the common arities: ``run(callback, *args)``
            # would build a new argument tuple on every call.
            nargs = len(args)
            if nargs == 0:
                self._context.run(callback)
            elif nargs == 1:
                self._context.run(callback, args[0])
            elif nargs == 2:
                self._context.run(callback, args[0], args[1])
            else:
                self._context.run(callback, *args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(exc, callback, args)

    def _report(
        self, exc: BaseException, callback: Callable[..., object], args: Sequence[Any]
    ) -> None:
        """Pass what the callback raised to the loop's exception handler."""
        context: dict[str, Any] = {
            "message": f"Exception in callback {format_callback_source(callback, args)}",
            "exception": exc,
            "handle": self,
        }
        if self._source_traceback:
            context["source_traceback"] = self._source_traceback
        # The loop is a LoopCore; the base class does not declare the method.
        cast(Any, self._loop).call_exception_handler(context)


class OneArgHandle(Handle):
    """A Handle for ``callback(arg)``: how Futures and Tasks schedule callbacks.

    The argument lives in a field rather than in an argument tuple: every task
    step and every future callback would otherwise allocate one, and tuples
    are tracked by the garbage collector.
    """

    __slots__ = ("_arg",)

    def __init__(
        self,
        callback: Callable[..., object],
        arg: object,
        loop: LoopBase,
        context: contextvars.Context | None = None,
    ) -> None:
        super().__init__(callback, (), loop, context)
        self._arg: object = arg

    def _arguments(self) -> Sequence[Any] | None:
        return None if self._args is None else (self._arg,)

    def cancel(self) -> None:
        super().cancel()
        self._arg = None

    def _run(self) -> None:
        callback = self._callback
        if callback is None:  # cancelled while queued
            return
        try:
            self._context.run(callback, self._arg)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(exc, callback, (self._arg,))
