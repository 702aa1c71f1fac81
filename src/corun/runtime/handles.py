"""Handles: a callback, its arguments and its context, waiting in the ready queue."""

from __future__ import annotations

import contextvars
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from corun.runtime.formatting import extract_stack, format_callback_source

if TYPE_CHECKING:
    from corun.runtime.core import LoopCore


class Handle:
    """A scheduled callback, returned by ``call_soon`` and friends.

    ``cancel()`` is lazy: the handle stays wherever it is queued and the loop
    skips it when its turn comes.
    """

    __slots__ = (
        "__weakref__",
        "_args",
        "_callback",
        "_cancelled",
        "_context",
        "_loop",
        "_repr",
        "_source_traceback",
    )

    def __init__(
        self,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: LoopCore,
        context: contextvars.Context | None = None,
    ) -> None:
        if context is None:
            context = contextvars.copy_context()
        self._context: contextvars.Context = context
        self._loop: LoopCore = loop
        self._callback: Callable[..., object] | None = callback
        self._args: Sequence[Any] | None = args
        self._cancelled: bool = False
        self._repr: str | None = None
        self._source_traceback: traceback.StackSummary | None = None
        if loop._debug:  # the attribute: a method call costs a Python dispatch here
            self._source_traceback = extract_stack()

    def _repr_info(self) -> list[str]:
        info = [type(self).__name__]
        if self._cancelled:
            info.append("cancelled")
        if self._callback is not None and self._args is not None:
            info.append(format_callback_source(self._callback, self._args))
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
            self._context.run(callback, *args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            context: dict[str, Any] = {
                "message": f"Exception in callback {format_callback_source(callback, args)}",
                "exception": exc,
                "handle": self,
            }
            if self._source_traceback:
                context["source_traceback"] = self._source_traceback
            self._loop.call_exception_handler(context)
