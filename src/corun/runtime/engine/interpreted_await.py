"""What ``await future`` runs when the future is already done.

Deliberately not compiled (hence its name: setup.py compiles every module in
``engine/`` but those named ``interpreted_*``). A compiled ``__next__`` can only finish an ``await``
by raising StopIteration, and mypyc records every raise in a new traceback
entry (a code object and a frame: about 4,000 instructions on CPython 3.11).
CPython's own generators finish through ``am_send`` and raise nothing. A
pending future gets the small compiled ``FutureIter``: a generator is 152
bytes larger, and a parked task holds it for as long as it waits; setup.py
gives ``FutureIter`` an ``am_send`` slot of its own, and this generator is
what the pure-Python build and a done future keep.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol


class _Done(Protocol):
    # Only what this module needs of a Future: naming Future itself would
    # import futures.py, which imports this module.
    def result(self) -> Any: ...


def result_of(future: _Done) -> Generator[Any, None, Any]:
    """A generator that returns ``future.result()`` (or raises) without yielding."""
    try:
        return future.result()
    finally:
        # The raised exception's traceback holds this frame: from CPython 3.14 on
        # its locals outlive the generator's end, and the future holds the
        # exception, a cycle only gc could free.
        del future
    yield  # type: ignore[unreachable]  # makes this function a generator
