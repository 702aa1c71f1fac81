"""Human-readable descriptions of callbacks, coroutines and stacks.

These produce the same shapes of text as asyncio's reprs (``<Future pending
cb=[...]>``, ``main() running at file.py:12``), because users read both in
one log, and tools and tests match on them. The code is ours.
"""

from __future__ import annotations

import functools
import inspect
import reprlib
import types
from collections.abc import Callable, Sequence
from typing import Any, Final

#: How many frames a debug-mode source traceback keeps (asyncio keeps 10).
DEBUG_STACK_DEPTH: Final = 10


def _source_location(func: object) -> tuple[str, int] | None:
    func = inspect.unwrap(func)  # type: ignore[arg-type]
    if isinstance(func, types.FunctionType):
        code = func.__code__
        return code.co_filename, code.co_firstlineno
    if isinstance(func, functools.partial):
        return _source_location(func.func)
    if isinstance(func, functools.partialmethod):
        return _source_location(func.func)
    return None


def _format_args(args: Sequence[object]) -> str:
    parts = [reprlib.repr(arg) for arg in args]
    if len(parts) == 1 and parts[0].endswith(","):
        return f"({parts[0]})"
    return f"({', '.join(parts)})"


def _format_callback(func: object, args: Sequence[object], suffix: str = "") -> str:
    if isinstance(func, functools.partial):
        return _format_callback(func.func, func.args, _format_args(args) + suffix)
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    text = str(name) if name is not None else repr(func)
    return text + _format_args(args) + suffix


def format_callback_source(func: Callable[..., object], args: Sequence[object]) -> str:
    """``name(args) at file:line`` for a callback, as asyncio's handle reprs show it."""
    text = _format_callback(func, args)
    location = _source_location(func)
    if location is not None:
        text += f" at {location[0]}:{location[1]}"
    return text


def format_callbacks(callbacks: Sequence[tuple[Callable[..., object], object]]) -> str:
    """The ``cb=[...]`` part of a future's repr."""
    count = len(callbacks)
    if count == 0:
        return "cb=[]"
    first = format_callback_source(callbacks[0][0], ())
    if count == 1:
        return f"cb=[{first}]"
    last = format_callback_source(callbacks[-1][0], ())
    if count == 2:
        return f"cb=[{first}, {last}]"
    return f"cb=[{first}, <{count - 2} more>, {last}]"


def format_coroutine(coro: Any) -> str:
    """``name() running at file:line`` or ``name() done, defined at file:line``."""
    name = getattr(coro, "__qualname__", None) or getattr(coro, "__name__", None)
    if name is None:
        name = type(coro).__qualname__
    name = f"{name}()"
    frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
    code = getattr(coro, "cr_code", None) or getattr(coro, "gi_code", None)
    if frame is not None:
        return f"{name} running at {frame.f_code.co_filename}:{frame.f_lineno}"
    if code is not None:
        running = getattr(coro, "cr_running", False) or getattr(coro, "gi_running", False)
        state = "running" if running else "done,"
        return f"{name} {state} defined at {code.co_filename}:{code.co_firstlineno}"
    return name


#: Frames of files in this directory are corun's own and left out of source tracebacks.
def short_repr(value: object) -> str:
    """A bounded repr, for results inside other reprs."""
    return reprlib.repr(value)
