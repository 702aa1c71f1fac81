"""The asynchronous generator finalizer that the loop installs with ``sys.set_asyncgen_hooks``.

Deliberately not compiled (setup.py compiles every module in ``engine/`` but
those named ``interpreted_*``). CPython calls the finalizer while it clears the
frame that dropped the generator. Called from compiled code, with no frame of
its own, debug mode's ``sys._getframe(0)`` (``formatting.extract_stack``) then
returns that half-cleared frame on 3.14, and reading it crashes the process.
An interpreted function is a frame of its own, as asyncio's hook is.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any


def finalizer(
    finalize: Callable[[AsyncGenerator[Any, Any]], None],
) -> Callable[[AsyncGenerator[Any, Any]], None]:
    """``finalize`` (the loop's own finalizer), called from an interpreted frame."""

    def asyncgen_finalizer_hook(agen: AsyncGenerator[Any, Any]) -> None:
        finalize(agen)

    return asyncgen_finalizer_hook
