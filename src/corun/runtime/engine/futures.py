"""``Future``: the state container a coroutine waits on.

It speaks asyncio's Future protocol exactly (``_asyncio_future_blocking``,
``get_loop()``, callbacks scheduled through ``loop.call_soon``), so asyncio's
Task and functions accept it, and corun's Task accepts asyncio's futures.

Passing ``isinstance(fut, asyncio.Future)``
===========================================

Libraries check ``isinstance(x, asyncio.Future)`` rather than
``asyncio.isfuture(x)``: anyio's cancel delivery, for one, does not cancel a
task whose waiter is an ``asyncio.Future`` that is already done, and on a
loop whose futures fail the check it cancels tasks that were already handed
an item, which is then lost. So every corun future and task must pass it.
The ways considered:

* Subclass asyncio's classes. ``asyncio.Future`` is a C type with its own
  instance layout; a mypyc class cannot have it as a base, and an
  interpreted class cannot have both it and ``Future`` as bases (their
  layouts conflict). Making the whole Future interpreted would give up the
  compiled step and callbacks that make corun fast.
* Hand out asyncio's own futures from ``create_future``. Then a task waiting
  on one runs asyncio's callbacks and wake-ups, not corun's, and the
  accounting that tasks and the observer rely on is gone.
* ``__class__``, as ``unittest.mock`` does for ``spec``: ``isinstance`` asks
  an object for its ``__class__`` when its type does not match. A property
  here answers ``asyncio.Future`` (``asyncio.Task`` for tasks), so the
  check passes, while ``type(fut)`` is still corun's and every corun code
  path is unchanged. It costs nothing on the hot path: only ``isinstance``
  against a class corun does not derive from, and ``isfuture``, read it.

The last is the one chosen. What it changes: ``fut.__class__`` is asyncio's
class (``type(fut)`` is the honest answer, and is what corun's reprs use).
"""

from __future__ import annotations

import contextvars
import sys
import traceback
import warnings
from asyncio import AbstractEventLoop, CancelledError, InvalidStateError, get_event_loop
from asyncio import Future as AsyncioFuture
from collections.abc import Callable
from types import GenericAlias, TracebackType
from typing import Any, Final, cast, final

from mypy_extensions import mypyc_attr

from corun.runtime.engine import interpreted_await
from corun.runtime.engine.asyncio_compat import awaiter_of_callback
from corun.runtime.engine.formatting import format_callbacks, short_repr
from corun.runtime.engine.handles import LoopBase, call_soon
from corun.runtime.engine.interpreted_stack import extract_stack

_Callback = Callable[[Any], object]

# The same strings as asyncio uses, so tools that read ``_state`` keep working.
PENDING: Final = "PENDING"
CANCELLED: Final = "CANCELLED"
FINISHED: Final = "FINISHED"

_ASYNCIO_FUTURE: Final[type[Any]] = AsyncioFuture

# Python 3.13 turns a StopIteration (or subclass) given to set_exception() into
# a RuntimeError caused by it; 3.11 and 3.12 refuse exactly StopIteration with
# a TypeError (a subclass passes). Behave like the running Python.
_STOPITERATION_TO_RUNTIMEERROR: Final = sys.version_info >= (3, 13)
# Python 3.15 refuses __init__ on a future (or task) already initialized.
_REFUSE_SECOND_INIT: Final = sys.version_info >= (3, 15)
_STOPITERATION_MESSAGE: Final = (
    "StopIteration interacts badly with generators and cannot be raised into a Future"
)


# TaskCore's interpreted subclass (Task) requires every base to allow them.
# Not Generic at run time: mypyc gives generic classes a __dict__ and a
# __weakref__ slot, and its dealloc does not clear weak references (a crash
# on Python 3.11). Future[int] still works at run time (__class_getitem__).
# Weakly referenceable all the same: setup.py adds the slot, and its clearing,
# to the compiled class (WEAKLY_REFERENCED).
@mypyc_attr(allow_interpreted_subclasses=True)
class Future:
    """A result that will be available later, bound to one event loop.

    Not thread-safe: use ``loop.call_soon_threadsafe`` to complete it from
    another thread. Done callbacks are always scheduled with
    ``loop.call_soon``, never called directly.
    """

    # The flags are declared first and together: compiled, each attribute
    # gets a struct field in the order of declaration, and adjacent flags
    # share one 8-byte slot instead of taking one each.
    #
    # Tells asyncio's ``isfuture()`` that this class speaks the Future protocol.
    _asyncio_future_blocking: bool = False
    # Class-level defaults keep a future whose __init__ was skipped (a
    # subclass's bug) from crashing in result(), exception() or __del__.
    __log_traceback: bool = False
    # Whether _loop is a corun loop: see handles.call_soon.
    _corun_loop: bool = False
    # Set by __init__: Python 3.15 refuses to initialize a future twice.
    _corun_initialized: bool = False
    _state: str = PENDING

    # Invariant: _state is PENDING, CANCELLED or FINISHED and only leaves
    # PENDING once. FINISHED means exactly one of _result and _exception was
    # set. There are no callbacks unless _state is PENDING. _log_traceback is
    # True only while a set exception has not been retrieved.
    #
    # The callbacks, in order: _callback0 (with _context0), then _more_callbacks.
    # Most futures get exactly one (the Task waiting on them), so it is kept
    # inline and the list is only made for a second one, as asyncio's C
    # Future does: an idle task costs less memory, a future less time.
    # _callback0 is only filled while _more_callbacks is None, which keeps
    # the order of registration.
    def __init__(self, *, loop: AbstractEventLoop | None = None) -> None:
        if _REFUSE_SECOND_INIT and self._corun_initialized:
            raise RuntimeError(f"{type(self).__name__} object is already initialized")
        if loop is None:
            loop = get_event_loop()
        self._loop: AbstractEventLoop = loop
        self._corun_initialized = True
        corun_loop = isinstance(loop, LoopBase)
        self._corun_loop = corun_loop
        self._state: str = PENDING
        self._result: Any = None
        self._exception: BaseException | None = None
        self._exception_tb: TracebackType | None = None
        self._callback0: _Callback | None = None
        self._context0: contextvars.Context | None = None
        self._more_callbacks: list[tuple[_Callback, contextvars.Context]] | None = None
        self._cancel_message: object = None
        self._cancelled_exc: CancelledError | None = None
        self.__log_traceback: bool = False
        self._asyncio_future_blocking = False
        self._source_traceback: traceback.StackSummary | None = None
        if cast(LoopBase, loop)._debug if corun_loop else loop.get_debug():
            self._source_traceback = extract_stack()

    @classmethod
    def __class_getitem__(cls, item: object) -> GenericAlias:
        """``Future[int]`` in annotations evaluated at run time."""
        return GenericAlias(cls, item)

    @property  # type: ignore[misc]  # a read-only __class__: see the module docstring
    def __class__(self) -> type[Any]:
        """``asyncio.Future``, so that ``isinstance(fut, asyncio.Future)`` holds."""
        return _ASYNCIO_FUTURE

    # --- reporting ---------------------------------------------------------

    def _repr_info(self) -> list[str]:
        info = [self._state.lower()]
        if self._state == FINISHED:
            if self._exception is not None:
                info.append(f"exception={self._exception!r}")
            else:
                info.append(f"result={short_repr(self._result)}")
        callbacks = self._callbacks
        if callbacks:
            info.append(format_callbacks(callbacks))
        if self._source_traceback:
            frame = self._source_traceback[-1]
            info.append(f"created at {frame.filename}:{frame.lineno}")
        return info

    def __repr__(self) -> str:
        return "<{} {}>".format(type(self).__name__, " ".join(self._repr_info()))

    def __del__(self) -> None:
        if not self.__log_traceback:
            # set_exception() was not called, or the exception was retrieved.
            return
        context: dict[str, Any] = {
            "message": f"{type(self).__name__} exception was never retrieved",
            "exception": self._exception,
            "future": self,
        }
        if self._source_traceback:
            context["source_traceback"] = self._source_traceback
        self._loop.call_exception_handler(context)

    @property
    def _callbacks(self) -> list[tuple[_Callback, contextvars.Context]] | None:
        """The registered callbacks as ``(fn, context)`` pairs; None when there are none.

        A snapshot, as asyncio's C Future gives.
        """
        callbacks: list[tuple[_Callback, contextvars.Context]] = []
        fn = self._callback0
        if fn is not None:
            context = self._context0
            assert context is not None
            callbacks.append((fn, context))
        if self._more_callbacks is not None:
            callbacks.extend(self._more_callbacks)
        return callbacks or None

    @property
    def _asyncio_awaited_by(self) -> frozenset[Any] | None:
        """The tasks awaiting this future, or None: what 3.14's call graph reads.

        Worked out from the callbacks when asked (see
        ``asyncio_compat.awaiter_of_callback``), so that awaiting costs nothing
        more: the tasks waiting on it, and for a task of a ``TaskGroup``, the
        group's parent task, as asyncio records for its own futures.
        """
        awaiters: set[Any] = set()
        fn = self._callback0
        if fn is not None:
            owner = awaiter_of_callback(self, fn)
            if owner is not None:
                awaiters.add(owner)
        more = self._more_callbacks
        if more is not None:
            for fn, _ in more:
                owner = awaiter_of_callback(self, fn)
                if owner is not None:
                    awaiters.add(owner)
        return frozenset(awaiters) if awaiters else None

    @property
    def _log_traceback(self) -> bool:
        return self.__log_traceback

    @_log_traceback.setter
    def _log_traceback(self, value: bool) -> None:
        if value:
            raise ValueError("_log_traceback can only be set to False")
        self.__log_traceback = False

    # --- state -------------------------------------------------------------

    def get_loop(self) -> AbstractEventLoop:
        """The event loop the future is bound to."""
        return self._loop

    def _make_cancelled_error(self) -> CancelledError:
        """The CancelledError to raise; consumes a stored one (from a Task) first."""
        exc = self._cancelled_exc
        if exc is not None:
            self._cancelled_exc = None
            return exc
        if self._cancel_message is None:
            return CancelledError()
        return CancelledError(self._cancel_message)

    def cancel(self, msg: Any | None = None) -> bool:
        """Cancel the future and schedule its callbacks.

        Returns:
            False if the future was already done or cancelled, True otherwise.
        """
        self.__log_traceback = False
        if self._state != PENDING:
            return False
        self._state = CANCELLED
        self._cancel_message = msg
        self._schedule_callbacks()
        return True

    def _schedule_callbacks(self) -> None:
        loop = self._loop
        corun_loop = self._corun_loop
        fn = self._callback0
        if fn is not None:
            context = self._context0
            self._callback0 = None
            self._context0 = None
            call_soon(loop, corun_loop, fn, self, context)
        more = self._more_callbacks
        if more is not None:
            self._more_callbacks = None
            for fn, context in more:
                call_soon(loop, corun_loop, fn, self, context)

    def cancelled(self) -> bool:
        """Whether the future was cancelled."""
        return self._state == CANCELLED

    def done(self) -> bool:
        """Whether the future has a result, an exception, or was cancelled."""
        return self._state != PENDING

    def result(self) -> Any:
        """The result, or raise the exception that was set.

        Raises:
            CancelledError: the future was cancelled.
            InvalidStateError: the future is not done yet.
        """
        self._retrieve("Result is not ready.")
        exc = self._exception
        if exc is not None:
            raise exc.with_traceback(self._exception_tb)
        return self._result

    def exception(self) -> BaseException | None:
        """The exception that was set, or None when a result was set.

        Raises:
            CancelledError: the future was cancelled.
            InvalidStateError: the future is not done yet.
        """
        self._retrieve("Exception is not set.")
        return self._exception

    def _retrieve(self, not_ready: str) -> None:
        """What result() and exception() check first; the outcome counts as seen."""
        state = self._state
        if state == CANCELLED:
            raise self._make_cancelled_error()
        if state != FINISHED:
            raise InvalidStateError(not_ready)
        self.__log_traceback = False

    def add_done_callback(
        self,
        fn: Callable[[Any], object],
        *,
        context: contextvars.Context | None = None,
    ) -> None:
        """Call ``fn(future)`` through the loop once the future is done.

        If it is done already, ``fn`` is scheduled with ``call_soon`` at once.
        """
        if self._state != PENDING:
            call_soon(self._loop, self._corun_loop, fn, self, context)
            return
        if context is None:
            context = contextvars.copy_context()
        add_callback(self, fn, context)

    def remove_done_callback(self, fn: Callable[[Any], object]) -> int:
        """Remove every registration of ``fn``; return how many were removed."""
        removed = 0
        first = self._callback0
        # ``!=``, as for the list below: it returns a bool even where a
        # user's ``__eq__`` returns something else.
        if first is not None and not first != fn:  # noqa: SIM202
            self._callback0 = None
            self._context0 = None
            removed += 1
        more = self._more_callbacks
        if more is not None:
            kept = [(f, ctx) for (f, ctx) in more if f != fn]
            if len(kept) != len(more):
                removed += len(more) - len(kept)
                # A callback may have removed itself while we compared (``==``
                # runs user code): only the list object is replaced, not mutated.
                self._more_callbacks = kept or None
        return removed

    def set_result(self, result: Any) -> None:
        """Mark the future done with ``result`` and schedule its callbacks.

        Raises:
            InvalidStateError: the future is done already.
        """
        if self._state != PENDING:
            raise InvalidStateError(f"{self._state}: {self!r}")
        self._result = result
        self._state = FINISHED
        self._schedule_callbacks()

    def set_exception(self, exception: type | BaseException) -> None:
        """Mark the future done with ``exception`` and schedule its callbacks.

        Raises:
            InvalidStateError: the future is done already.
            TypeError: ``exception`` is StopIteration (before Python 3.13).
        """
        if self._state != PENDING:
            raise InvalidStateError(f"{self._state}: {self!r}")
        if isinstance(exception, type):
            exception = exception()
        if not isinstance(exception, BaseException):
            raise TypeError(f"invalid exception object {exception!r}")
        if not _STOPITERATION_TO_RUNTIMEERROR:
            if type(exception) is StopIteration:
                raise TypeError(_STOPITERATION_MESSAGE)
        elif isinstance(exception, StopIteration):
            new_exc = RuntimeError(_STOPITERATION_MESSAGE)
            new_exc.__cause__ = exception
            new_exc.__context__ = exception
            exception = new_exc
        self._exception = exception
        self._exception_tb = exception.__traceback__
        self._state = FINISHED
        self._schedule_callbacks()
        self.__log_traceback = True

    # --- awaiting ----------------------------------------------------------

    def __await__(self) -> Any:
        if self._state == PENDING:
            return FutureIter(self)
        return _RESULT_OF(self)

    def __iter__(self) -> Any:
        return self.__await__()


# A compiled static: a name imported from an interpreted module is looked up
# in this module's dict on every use. See corun.runtime.engine.interpreted_await for why.
_RESULT_OF: Final[Callable[[Future], Any]] = interpreted_await.result_of
_StopIteration: Final = StopIteration  # a static: mypyc looks builtins up by name

# Python 3.12 deprecated throw(type, value, traceback) on generators, and on
# asyncio's future iterator with them.
_THROW_SIGNATURE_DEPRECATED: Final = sys.version_info >= (3, 12)
_THROW_DEPRECATION: Final = (
    "the (type, exc, tb) signature of throw() is deprecated, use the single-arg signature instead."
)


def _exception_to_throw(typ: Any, val: Any) -> BaseException:
    """The exception ``throw(typ, val)`` raises, checked as generator.throw() checks it."""
    if isinstance(typ, type) and issubclass(typ, BaseException):
        if val is None:
            return typ()
        if isinstance(val, typ):
            return val
        if isinstance(val, tuple):
            return typ(*val)
        return typ(val)
    if isinstance(typ, BaseException):
        if val is not None:
            raise TypeError("instance exception may not have a separate value")
        return typ
    raise TypeError(
        "exceptions must be classes deriving BaseException or instances of such a class"
    )


# free_list_len=1: mypyc keeps the last instance freed and hands it to the next
# allocation (one per await). Sound only because the class has one field: mypyc
# offers the instance for reuse before it clears the fields, so a finalizer run
# by clearing one field could be handed the instance and then lose the fields
# cleared after it. Handles have several fields and so have no free list
# (test_finalizer_scheduling_a_callback_while_a_handle_is_freed).
@final
@mypyc_attr(free_list_len=1)
class FutureIter:
    """What ``await future`` iterates: yields the future once, then returns its result.

    A small object rather than a generator, as asyncio's C Future has: it is
    cheaper, and ``throw()`` re-raises the exception it is given with its
    traceback intact (mypyc's compiled generators start a new traceback,
    which would hide where a cancellation came from).
    """

    __slots__ = ("_future",)

    def __init__(self, future: Future) -> None:
        self._future: Future | None = future

    def __iter__(self) -> FutureIter:
        return self

    def __next__(self) -> Any:
        value = self._advance()
        if self._future is None:
            raise _StopIteration(value)
        return value

    def _advance(self) -> Any:
        """One step of ``await``, with no StopIteration: done once ``_future`` is None.

        Returns the future while it is pending (which tells the Task driving
        the ``await`` to wait for it), then its result. The compiled build
        calls this from the ``am_send`` slot setup.py gives this class, so
        that ``await future`` returns like a C Future's, without raising and
        catching a StopIteration (with mypyc, a traceback entry as well).
        """
        future = self._future
        if future is None:
            return None
        if future._state == PENDING:
            if not future._asyncio_future_blocking:
                future._asyncio_future_blocking = True
                return future
            raise RuntimeError("await wasn't used with future")
        self._future = None
        return future.result()

    def send(self, value: object) -> Any:
        """Resume; the value sent is ignored, as asyncio's Future ignores it."""
        return self.__next__()

    def throw(self, typ: Any, *rest: Any) -> Any:
        """Raise an exception at the ``await``, with generator.throw()'s checks.

        ``throw(exc)``; the ``throw(type, value, traceback)`` form is
        deprecated from Python 3.12 on, as for generators.
        """
        if len(rest) > 2:
            raise TypeError(f"throw expected at most 3 arguments, got {len(rest) + 1}")
        val: Any = None
        tb: Any = None
        if rest:
            if _THROW_SIGNATURE_DEPRECATED:
                warnings.warn(_THROW_DEPRECATION, DeprecationWarning, stacklevel=1)
            val = rest[0]
            if len(rest) == 2:
                tb = rest[1]
        rest = ()
        if tb is not None and not isinstance(tb, TracebackType):
            raise TypeError("throw() third argument must be a traceback")
        exc: BaseException | None = _exception_to_throw(typ, val)
        self._future = None
        try:
            assert exc is not None
            if tb is not None:
                raise exc.with_traceback(tb)
            raise exc
        finally:
            # The traceback holds this frame (in the pure build), and the frame
            # would hold the exception: a cycle that keeps everything the
            # exception's traceback references alive until the GC runs. (The
            # arguments hold it too: coro.throw(exc) passes it as typ.)
            exc = typ = val = tb = None

    def close(self) -> None:
        """Stop iterating."""
        self._future = None


def set_result_unless_cancelled(future: Any, result: object) -> None:
    """Complete ``future`` with ``result`` unless it was cancelled meanwhile.

    For a completion scheduled with ``call_soon``: by the time it runs, the
    waiter may have been cancelled, and ``set_result`` would raise.
    """
    if not future.cancelled():
        future.set_result(result)


def add_callback(future: Future, fn: _Callback, context: contextvars.Context) -> None:
    """Register ``fn`` on ``future``, which is pending.

    A function rather than a method: tasks call it on the futures (and tasks)
    they wait for, and a compiled method called on an instance of the
    interpreted Task costs a Python-level dispatch.
    """
    more = future._more_callbacks
    if more is not None:
        more.append((fn, context))
    elif future._callback0 is None:
        future._callback0 = fn
        future._context0 = context
    else:
        future._more_callbacks = [(fn, context)]
