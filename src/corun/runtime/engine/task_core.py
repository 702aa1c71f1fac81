"""``TaskCore``: drives a coroutine, one step at a time, on the loop.

(The public ``Task`` is a thin subclass in ``tasks.py``; see there why.)

A step sends a value into the coroutine (or throws an exception into it) and
looks at what it yields. A future-like object with ``_asyncio_future_blocking``
set means "wake me when this is done": the task registers ``_wakeup`` as a
done callback and sleeps. A bare ``yield`` (``asyncio.sleep(0)``) means "run
me again on the next iteration". Anything else is a programming error that is
thrown back into the coroutine.

Cancellation is cooperative. ``cancel()`` cancels the future the task waits on,
which wakes the task with CancelledError thrown in at its ``await``; if the
task is not waiting (it is scheduled to run), ``_must_cancel`` makes its next
step throw CancelledError instead of sending.

The task registers with asyncio (through ``asyncio_compat``), so
``asyncio.current_task()``, ``asyncio.all_tasks()`` and everything built on
them (``timeout``, ``TaskGroup``) see corun tasks.

An eager task (``eager_start=True``, Python 3.12's eager task factories) runs
its first step at once, inside ``__init__``, as the current task in place of
its creator; it is only scheduled if that step does not finish it.
"""

from __future__ import annotations

import contextvars
import inspect
import itertools
import linecache
import sys
import traceback
from asyncio import AbstractEventLoop, CancelledError, InvalidStateError, iscoroutine
from asyncio import Task as AsyncioTask
from collections.abc import Callable, Coroutine, Generator
from types import CoroutineType, FrameType
from typing import IO, Any, Final, cast

from mypy_extensions import mypyc_attr

from corun.runtime.engine.accounting import LoopAccounting
from corun.runtime.engine.asyncio_compat import (
    PY312,
    enter_task,
    leave_task,
    register_eager_task,
    register_task,
    swap_current_task,
    unregister_eager_task,
)
from corun.runtime.engine.formatting import format_coroutine
from corun.runtime.engine.futures import FINISHED, PENDING, Future, add_callback
from corun.runtime.engine.handles import LoopBase, call_soon
from corun.runtime.engine.instruments import NO_INSTRUMENTS, Instruments

# asyncio's registry of current and all tasks (see asyncio_compat), as
# compiled statics: mypyc looks an imported name up by name on every use.
_register_task: Final[Callable[[Any], None]] = register_task
# Compiled statics: mypyc looks a builtin or an imported name up by name on
# every use, and these are used on every task or step.
_COROUTINE_TYPE: Final[type[Any]] = CoroutineType
_ASYNCIO_TASK: Final[type[Any]] = AsyncioTask
_StopIteration: Final = StopIteration
_enter_task: Final[Callable[[AbstractEventLoop, Any], None]] = enter_task
_leave_task: Final[Callable[[AbstractEventLoop, Any], None]] = leave_task

_next_task_number: Final = itertools.count(1).__next__

# Python 3.13 made uncancel() down to zero also withdraw a cancellation that
# has not been delivered yet; earlier versions still deliver it.
_UNCANCEL_CLEARS_PENDING: Final = sys.version_info >= (3, 13)


def _drop_own_frame(exc: BaseException) -> None:
    """Remove the step's own frame from the traceback of what the coroutine raised.

    That frame holds the task, and the task holds the exception: a reference
    cycle that would keep the task, its coroutine and everything they
    reference alive until the garbage collector runs. The frame says nothing
    useful to the reader of the traceback either.

    Only the pure-Python build has that frame. Compiled, the step has no
    frame (its traceback entry holds no locals), and ``sys._getframe(1)``
    names some caller further out, or raises ValueError when the Python stack
    is shallower than that: ``run_until_complete()`` called at the top level
    of a script.
    """
    tb = exc.__traceback__
    if tb is None:
        return
    try:
        step_frame = sys._getframe(1)
    except ValueError:
        return
    if tb.tb_frame is step_frame:
        exc.__traceback__ = tb.tb_next


@mypyc_attr(allow_interpreted_subclasses=True)
class TaskCore(Future):
    """The implementation of ``corun.Task``: a coroutine wrapped in a Future.

    Not used directly; ``corun.Task`` subclasses it.
    """

    # The flags first and together, as in Future: they share one slot.
    # Log "Task was destroyed but it is pending!" when collected while pending.
    # False until init_task has run: a task whose construction failed (a bad
    # argument) has nothing to report, and no loop to report it to.
    _log_destroy_pending: bool = False
    _must_cancel: bool = False
    # Set by init_task (which __init__ calls).
    #
    # Invariant: _fut_waiter is None and a step is scheduled, or it is the
    # future this task waits on and no step is scheduled. _must_cancel is
    # True only while a step is scheduled and must throw CancelledError.
    # The name, or for a default name its number: "Task-N" is made when it is
    # first asked for (as CPython 3.12 does), not for every task; the flight
    # recorder keeps the number without encoding a text.
    _name: str | int
    _num_cancels_requested: int
    # corun.observe's per-task counters (accounting.py), inline: a separate
    # object would cost more than these 64 bytes. _corun_id is 0 for a task
    # created while the accounting was off, and so is _corun_parent for a
    # task without a parent (or created off).
    _corun_id: int = 0
    _corun_parent: int = 0
    _corun_steps: int = 0
    _corun_busy: float = 0.0
    _corun_longest: float = 0.0
    _corun_wake_total: float = 0.0
    _corun_wake_max: float = 0.0
    _corun_wake_p99: float = 0.0
    # Its group for corun top, if the application set one (else the
    # coroutine's qualified name, read when asked: task_group), and when it
    # was spawned, on the loop's clock (0.0: not known, spawned while the
    # accounting was off).
    _corun_group: str | None = None
    _corun_born: float = 0.0
    _fut_waiter: Any
    # None once an eager task finished in its first step (as asyncio drops it).
    _coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any] | None
    _context: contextvars.Context

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        *,
        loop: AbstractEventLoop | None = None,
        name: object = None,
        context: object = None,
        eager_start: object = False,
    ) -> None:
        if eager_start is not False and not PY312:
            raise TypeError("Task.__init__() got an unexpected keyword argument 'eager_start'")
        init_task(self, coro, loop, name, context, bool(eager_start))

    def __del__(self) -> None:
        if self._state == PENDING and self._log_destroy_pending:
            context: dict[str, Any] = {
                "task": self,
                "message": "Task was destroyed but it is pending!",
            }
            if self._source_traceback:
                context["source_traceback"] = self._source_traceback
            self._loop.call_exception_handler(context)
        super().__del__()

    @property  # type: ignore[misc]  # see futures.py: "Passing isinstance(fut, asyncio.Future)"
    def __class__(self) -> type[Any]:
        """``asyncio.Task``, so that ``isinstance(task, asyncio.Task)`` holds."""
        return _ASYNCIO_TASK

    def _repr_info(self) -> list[str]:
        info = super()._repr_info()
        if self._num_cancels_requested and self._state == PENDING:
            # Still pending, but asked to cancel.
            info[0] = "cancelling"
        info.insert(1, f"name={self.get_name()!r}")
        position = 2
        if self._coro is not None:
            info.insert(position, f"coro=<{format_coroutine(self._coro)}>")
            position += 1
        if self._fut_waiter is not None:
            info.insert(position, f"wait_for={self._fut_waiter!r}")
        return info

    # --- the public Task API -------------------------------------------------

    def get_coro(self) -> Coroutine[Any, Any, Any] | Generator[Any, None, Any] | None:
        """The coroutine this task runs (None for an eager task that finished eagerly)."""
        return self._coro

    def get_context(self) -> contextvars.Context:
        """The context every step of this task runs in."""
        return self._context

    def get_name(self) -> str:
        """The task's name."""
        name = self._name
        if isinstance(name, str):
            return name
        text = f"Task-{name}"
        self._name = text
        return text

    def set_name(self, value: object) -> None:
        """Rename the task (the value is converted with ``str``)."""
        self._name = str(value)

    def set_result(self, result: Any) -> None:
        """Not supported: a task's result comes from its coroutine."""
        raise RuntimeError("Task does not support set_result operation")

    def set_exception(self, exception: type | BaseException) -> None:
        """Not supported: a task's exception comes from its coroutine."""
        raise RuntimeError("Task does not support set_exception operation")

    def get_stack(self, *, limit: int | None = None) -> list[FrameType]:
        """The frames of this task's coroutine.

        For a suspended coroutine that is its own frame; for a task that
        failed, the frames of the exception's traceback. At most ``limit``
        frames are returned (the newest for a stack, the oldest for a
        traceback), as asyncio does.
        """
        frames: list[FrameType] = []
        coro = self._coro
        frame: FrameType | None = getattr(coro, "cr_frame", None)
        if frame is None:
            frame = getattr(coro, "gi_frame", None)
        if frame is not None:
            while frame is not None:
                if limit is not None:
                    if limit <= 0:
                        break
                    limit -= 1
                frames.append(frame)
                frame = frame.f_back
            frames.reverse()
        elif self._exception is not None:
            tb = self._exception.__traceback__
            while tb is not None:
                if limit is not None:
                    if limit <= 0:
                        break
                    limit -= 1
                frames.append(tb.tb_frame)
                tb = tb.tb_next
        return frames

    def print_stack(self, *, limit: int | None = None, file: IO[str] | None = None) -> None:
        """Print ``get_stack()`` like a traceback, to ``file`` (default: stderr)."""
        if file is None:
            file = sys.stderr
        extracted: list[tuple[str, int, str, str]] = []
        checked: set[str] = set()
        for frame in self.get_stack(limit=limit):
            lineno = frame.f_lineno or 0
            code = frame.f_code
            filename = code.co_filename
            if filename not in checked:
                checked.add(filename)
                linecache.checkcache(filename)
            line = linecache.getline(filename, lineno, frame.f_globals)
            extracted.append((filename, lineno, code.co_name, line))
        exc = self._exception
        if not extracted:
            print(f"No stack for {self!r}", file=file)
        elif exc is not None:
            print(f"Traceback for {self!r} (most recent call last):", file=file)
        else:
            print(f"Stack for {self!r} (most recent call last):", file=file)
        traceback.print_list(traceback.StackSummary.from_list(extracted), file=file)
        if exc is not None:
            for line in traceback.format_exception_only(type(exc), exc):
                print(line, file=file, end="")

    def cancel(self, msg: Any | None = None) -> bool:
        """Ask the task to cancel itself.

        CancelledError is thrown into the coroutine at its current ``await``
        (or at its first step). The coroutine may catch it; ``cancelling()``
        counts the requests.

        Returns:
            False if the task is already done, True otherwise.
        """
        self._log_traceback = False
        if self._state != PENDING:
            return False
        self._num_cancels_requested += 1
        accounting = _accounting_of(self)
        if accounting is not None:
            accounting.task_cancelled(self._corun_id, self.get_name())
        waiter = self._fut_waiter
        if waiter is not None and waiter.cancel(msg=msg):
            # The wakeup callback will throw CancelledError into the coroutine.
            return True
        # The task is scheduled to run: make that step throw instead.
        self._must_cancel = True
        self._cancel_message = msg
        return True

    def cancelling(self) -> int:
        """How many cancellation requests are pending (see ``uncancel``)."""
        return self._num_cancels_requested

    def uncancel(self) -> int:
        """Withdraw one cancellation request; return how many remain."""
        if self._num_cancels_requested > 0:
            self._num_cancels_requested -= 1
            if self._num_cancels_requested == 0 and _UNCANCEL_CLEARS_PENDING:
                self._must_cancel = False
        return self._num_cancels_requested

    # --- driving the coroutine -------------------------------------------------

    def _wakeup(self, future: Any) -> None:
        # The done callback of the future this task waits on. Its only job is
        # to be a bound method (asyncio code and tools look for the task in
        # ``callback.__self__``); the work is in task_wakeup.
        task_wakeup(self, future)


# The step and the wakeup are module-level functions, not methods, on purpose:
# tasks are instances of the interpreted subclass Task, on which every call of
# a compiled method costs a Python-level dispatch, while a call of a compiled
# function is a plain C call. The step is scheduled as
# ``OneArgHandle(task_step, task)``, or ``Handle(task_step, (task, exc))`` to
# throw ``exc`` in: no bound method to make.


def init_task(
    task: TaskCore,
    coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
    loop: AbstractEventLoop | None,
    name: object,
    context: object,
    eager_start: bool = False,
) -> None:
    """``TaskCore.__init__``'s work, callable on an instance made by ``__new__``.

    ``loop.create_task()`` makes its tasks that way: calling the interpreted
    Task class with keyword arguments packs them into a dict and unpacks them
    again, which cost more than the rest of creating the task.
    """
    Future.__init__(task, loop=loop)
    # The exact type first: asyncio.iscoroutine() is an interpreted function.
    if type(coro) is not _COROUTINE_TYPE and not iscoroutine(coro):
        # The task never ran; don't log that it was destroyed pending.
        task._log_destroy_pending = False
        raise TypeError(f"a coroutine was expected, got {coro!r}")
    if context is not None and not isinstance(context, contextvars.Context):
        # Checked now, not when the first step runs in it (CPython gh-157301).
        task._log_destroy_pending = False
        raise TypeError(f"a contextvars.Context was expected, got {type(context).__name__}")
    task._log_destroy_pending = True
    if name is None:
        task._name = _next_task_number()
    else:
        task._name = str(name)
    task._num_cancels_requested = 0
    task._must_cancel = False
    task._fut_waiter = None
    task._coro = coro
    task._context = contextvars.copy_context() if context is None else context
    instruments = _instruments_of(task)
    accounting = _accounting_of(task) if instruments is not NO_INSTRUMENTS else None
    if accounting is not None:
        task._corun_id = accounting.new_task_id()
        parent = accounting.step_task
        if isinstance(parent, TaskCore):  # typed: a native read, not a getattr
            if not parent._corun_id:  # created before observation started
                parent._corun_id = accounting.new_task_id()
            task._corun_parent = parent._corun_id
        # The running step's start, not a clock read of its own.
        task._corun_born = (
            accounting.step_start if accounting.step_handle is not None else accounting.clock()
        )
        accounting.task_spawned(task._corun_id, task._corun_parent, task._name)
    if instruments.task_spawned:
        instruments.call_task_hook("task_spawned", instruments.task_spawned, task)
    if eager_start and task._loop.is_running():
        try:
            _eager_start(task)
        except BaseException:
            task._log_destroy_pending = False
            raise
    else:
        schedule_step(task, None)
        _register_task(task)


def _eager_start(task: TaskCore) -> None:
    """Run the first step of ``task`` now, as the current task of its loop.

    The creator (the current task, if any) gives its place up for the step and
    gets it back after; the task is registered with asyncio as eager for the
    step, and as an ordinary task only if the step did not finish it.
    """
    loop = task._loop
    accounting = _accounting_of(task)
    creator = accounting.step_task if accounting is not None else None
    previous = swap_current_task(loop, task)
    try:
        register_eager_task(task)
        try:
            task._context.run(_TASK_STEP, task, None, True)
        finally:
            unregister_eager_task(task)
    finally:
        try:
            swap_current_task(loop, previous)
        finally:
            if accounting is not None:
                accounting.step_task = creator
                if task._state != PENDING:
                    # Its step was its creator's (whose step time includes it).
                    _end_task(task, accounting, accounting.clock())
            if task._state != PENDING:
                task._coro = None
            else:
                _register_task(task)


def _instruments_of(task: TaskCore) -> Instruments:
    """The instruments of the task's loop (none on a loop that is not corun's)."""
    if task._corun_loop:
        return cast(LoopBase, task._loop)._corun_instruments
    return NO_INSTRUMENTS


def _accounting_of(task: TaskCore) -> LoopAccounting | None:
    """corun.observe's accounting on the task's loop, if it is on."""
    if task._corun_loop:
        return cast(LoopBase, task._loop)._corun_accounting
    return None


def coroutine_group(coro: object) -> str:
    """The group of a task that runs ``coro``: its function's qualified name."""
    name = getattr(coro, "__qualname__", None)
    return name if isinstance(name, str) else type(coro).__qualname__


def task_group(task: TaskCore) -> str:
    """The group ``task`` counts in (see ``LoopAccounting.task_ended``)."""
    group = task._corun_group
    if group is None:
        group = coroutine_group(task._coro) if task._coro is not None else "(unknown)"
    return group


def set_task_group(task: object, group: str) -> bool:
    """Put ``task`` in ``group`` for corun top; False if it is not a corun task."""
    if isinstance(task, TaskCore):
        task._corun_group = group
        return True
    return False


def _end_task(task: TaskCore, accounting: LoopAccounting, end: float) -> None:
    born = task._corun_born
    accounting.task_ended(
        task_group(task), task._corun_steps, task._corun_busy, end - born if born > 0.0 else -1.0
    )


def account_task_step(
    task: TaskCore, duration: float, lag: float, accounting: LoopAccounting, end: float
) -> None:
    """Count one step of ``task`` that took ``duration`` to ``end``, ``lag`` after it was woken.

    The step that ends the task adds its counters to its group's.
    """
    task._corun_steps += 1
    task._corun_busy += duration
    if duration > task._corun_longest:
        task._corun_longest = duration
    if lag >= 0.0:
        task._corun_wake_total += lag
        if lag > task._corun_wake_max:
            task._corun_wake_max = lag
        # A running estimate of the 99th percentile (stochastic approximation:
        # a step up of 0.99 * rate when above, down 0.01 * rate when not,
        # settles where 1% of the samples lie above), scaled to its value.
        estimate = task._corun_wake_p99
        if estimate <= 0.0:
            task._corun_wake_p99 = lag
        else:
            rate = 0.05 * estimate
            if lag > estimate:
                task._corun_wake_p99 = estimate + 0.99 * rate
            else:
                task._corun_wake_p99 = estimate - 0.01 * rate
    if task._state != PENDING:
        _end_task(task, accounting, end)


def schedule_step(task: TaskCore, exc: BaseException | None) -> None:
    """Schedule ``task_step(task, exc)`` in the task's context."""
    if exc is None:
        call_soon(task._loop, task._corun_loop, _TASK_STEP, task, task._context)
    else:
        # Rare (a bad yield, a future of another loop): the loop's own call_soon.
        task._loop.call_soon(_TASK_STEP, task, exc, context=task._context)


def task_step(task: TaskCore, exc: BaseException | None = None, eager: bool = False) -> None:
    """Run one step of ``task``: send None into its coroutine, or throw ``exc`` in.

    ``eager``: the first step of an eager task, which ``_eager_start`` made
    the current task already.
    """
    if task._state != PENDING:
        raise InvalidStateError(f"_step(): already done: {task!r}, {exc!r}")
    if task._must_cancel:
        if not isinstance(exc, CancelledError):
            exc = task._make_cancelled_error()
        task._must_cancel = False
    task._fut_waiter = None
    loop = task._loop
    # One flag of the loop's for every per-step hook, read once (the cast to
    # LoopBase is a type check): this runs on every step. An instrument
    # added during the step is called from the next one on.
    hooked = False
    accounting: LoopAccounting | None = None
    instruments = NO_INSTRUMENTS
    if task._corun_loop:
        base = cast(LoopBase, loop)
        hooked = base._step_hooks
    if hooked:
        accounting = base._corun_accounting
        instruments = base._corun_instruments
        if accounting is not None:
            accounting.step_task = task
        if instruments.before_task_step:
            instruments.call_task_hook("before_task_step", instruments.before_task_step, task)
    if not eager:
        _enter_task(loop, task)
    try:
        coro = cast(Coroutine[Any, Any, Any], task._coro)  # None only once done
        try:
            if exc is None:
                result = coro.send(None)
            else:
                result = coro.throw(exc)
        except _StopIteration as stop:
            exc = None
            if task._must_cancel:
                # The task was cancelled while running its last step.
                task._must_cancel = False
                Future.cancel(task, msg=task._cancel_message)
            else:
                Future.set_result(task, stop.value)
        except CancelledError as cancelled:
            exc = None
            _drop_own_frame(cancelled)
            task._cancelled_exc = cancelled  # re-raised by result() with its traceback
            Future.cancel(task)
        except (KeyboardInterrupt, SystemExit) as error:
            exc = None
            Future.set_exception(task, error)
            raise
        except BaseException as error:
            exc = None
            _drop_own_frame(error)
            Future.set_exception(task, error)
        else:
            if result is None:
                # A bare yield (asyncio.sleep(0)): run again on the next iteration.
                schedule_step(task, None)
            elif isinstance(result, Future) and result._loop is loop:
                # corun's own future or task (the common case): its fields
                # are read directly instead of through generic calls, as
                # asyncio's C Task does for its own Future. (A subclass
                # overriding add_done_callback is therefore not consulted.)
                if not result._asyncio_future_blocking or result is task:
                    _handle_yield(task, result)
                else:
                    result._asyncio_future_blocking = False
                    wakeup = task._wakeup
                    if result._state == PENDING:
                        add_callback(result, wakeup, task._context)
                    else:
                        call_soon(loop, task._corun_loop, wakeup, result, task._context)
                    task._fut_waiter = result
                    if task._must_cancel and result.cancel(msg=task._cancel_message):
                        task._must_cancel = False
            else:
                _handle_yield(task, result)
    finally:
        if not eager:
            _leave_task(loop, task)
        if hooked:
            if accounting is not None and task._state != PENDING:
                accounting.task_exited(
                    task._corun_id, task._corun_steps + 1, task._name, task._state
                )
            if instruments.after_task_step:
                instruments.call_task_hook("after_task_step", instruments.after_task_step, task)
            if instruments.task_exited and task._state != PENDING:
                instruments.call_task_hook("task_exited", instruments.task_exited, task)


# The step as an object, held in a compiled static: naming ``task_step`` where
# an object is needed looks it up in the module's dict on every call.
_TASK_STEP: Final[Callable[..., None]] = task_step


def _handle_yield(task: TaskCore, result: Any) -> None:
    """What the coroutine yielded, on the general (slower) path."""
    loop = task._loop
    blocking = getattr(result, "_asyncio_future_blocking", None)
    if blocking is not None:
        # A future-like object: wait for it.
        if result.get_loop() is not loop:
            schedule_step(
                task,
                RuntimeError(f"Task {task!r} got Future {result!r} attached to a different loop"),
            )
        elif blocking:
            if result is task:
                schedule_step(task, RuntimeError(f"Task cannot await on itself: {task!r}"))
            else:
                result._asyncio_future_blocking = False
                result.add_done_callback(task._wakeup, context=task._context)
                task._fut_waiter = result
                if task._must_cancel and result.cancel(msg=task._cancel_message):
                    task._must_cancel = False
        else:
            schedule_step(
                task,
                RuntimeError(
                    f"yield was used instead of yield from in task {task!r} with {result!r}"
                ),
            )
    elif result is None:
        # A bare yield: run again on the next iteration.
        schedule_step(task, None)
    elif inspect.isgenerator(result):
        schedule_step(
            task,
            RuntimeError(
                f"yield was used instead of yield from for generator in task {task!r} "
                f"with {result!r}"
            ),
        )
    else:
        schedule_step(task, RuntimeError(f"Task got bad yield: {result!r}"))


def task_wakeup(task: TaskCore, future: Any) -> None:
    """Resume ``task`` now that ``future``, which it waited on, is done."""
    if isinstance(future, Future) and future._state == FINISHED and future._exception is None:
        # The common case, without raising and catching anything.
        task_step(task, None)
        return
    try:
        future.result()
    except BaseException as exc:
        # This may also be a cancellation.
        task_step(task, exc)
    else:
        # Don't pass the result: the coroutine reads it from the future
        # itself, which keeps tracebacks shorter and frees the value sooner.
        task_step(task, None)


#: What ``task_counters`` gives per task: id, parent id, steps, seconds busy,
#: longest step, summed wake latency, longest wake latency, p99 estimate.
TaskCounters = tuple[int, int, int, float, float, float, float, float]


def task_counters(tasks: list[Any]) -> list[TaskCounters]:
    """The accounting counters of ``tasks``, read in one compiled pass (for corun top)."""
    out: list[TaskCounters] = []
    for task in tasks:
        if isinstance(task, TaskCore):
            out.append(
                (
                    task._corun_id,
                    task._corun_parent,
                    task._corun_steps,
                    task._corun_busy,
                    task._corun_longest,
                    task._corun_wake_total,
                    task._corun_wake_max,
                    task._corun_wake_p99,
                )
            )
        else:
            out.append((0, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0))
    return out


def live_groups(tasks: list[Any]) -> dict[str, tuple[int, int, float]]:
    """Live tasks by group (``task_group``): their number, steps and seconds busy, in one pass."""
    out: dict[str, tuple[int, int, float]] = {}
    for task in tasks:
        if isinstance(task, TaskCore):
            group = task_group(task)
            steps = task._corun_steps
            busy = task._corun_busy
        else:  # a foreign task: counted, with no counters
            group = coroutine_group(task.get_coro())
            steps = 0
            busy = 0.0
        count, total_steps, total_busy = out.get(group, (0, 0, 0.0))
        out[group] = (count + 1, total_steps + steps, total_busy + busy)
    return out


#: Task states, as ``rank_busiest`` counts them: indexes into its counts.
STATE_NAMES: Final = ("running", "ready", "waiting", "cancelling")


def live_tasks_of(references: list[Any], loop: object) -> list[Any]:
    """The pending tasks of ``loop`` among weak ``references`` (one compiled pass)."""
    live: list[Any] = []
    for reference in references:
        task = reference()
        if task is None:
            continue
        if isinstance(task, TaskCore):
            if task._loop is loop and task._state == PENDING:
                live.append(task)
        elif task.get_loop() is loop and not task.done():
            live.append(task)
    return live


def rank_busiest(
    tasks: list[Any], step_task: object, last: dict[int, float], rows: int
) -> tuple[list[int], list[float], dict[int, float], list[int]]:
    """For ``corun top``, in one compiled pass over ``tasks``.

    Returns the indexes of the ``rows`` tasks that spent the most time on the
    loop since ``last`` (seconds on the loop by task id, as returned by the
    previous call), busiest first; their seconds since then; the seconds by
    task id now (``last`` itself, updated); and how many tasks are in each
    state (``STATE_NAMES``).
    """
    counts = [0, 0, 0, 0]
    # ``last`` is updated in place, for the tasks that ran since: most did
    # not, and a new dict of 10,000 entries a second was half of top's cost.
    # The ids of tasks that have ended are dropped when they would double it.
    rebuild = len(last) > 2 * len(tasks) + 1024
    now: dict[int, float] = {} if rebuild else last
    # Most tasks did nothing since the last look: only the others are sorted.
    active: list[tuple[float, int]] = []
    idle: list[int] = []
    for index, task in enumerate(tasks):
        if isinstance(task, TaskCore):
            ident = task._corun_id or id(task)
            busy = task._corun_busy
            if task is step_task:
                counts[0] += 1
            elif task._num_cancels_requested:
                counts[3] += 1
            elif task._fut_waiter is None:
                counts[1] += 1
            else:
                counts[2] += 1
        else:
            ident = id(task)
            busy = 0.0
            counts[3 if task.cancelling() else 1] += 1  # its waits are not known
        previous = last.get(ident, 0.0)
        if rebuild or busy != previous:
            now[ident] = busy
        recent = busy - previous
        if recent > 0.0:
            active.append((recent, index))
        elif len(idle) < rows:
            idle.append(index)
    active.sort(reverse=True)
    chosen: list[int] = []
    recents: list[float] = []
    for recent, position in active[:rows]:
        chosen.append(position)
        recents.append(recent)
    for position in idle[: rows - len(chosen)]:
        chosen.append(position)
        recents.append(0.0)
    return chosen, recents, now, counts
