"""Ways to get corun loops: a factory, ``run()``, and a policy for ``install()``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from corun.runtime.loop import EventLoop

_T = TypeVar("_T")


def new_event_loop() -> EventLoop:
    """A new corun event loop (pass this as ``asyncio.Runner(loop_factory=...)``)."""
    return EventLoop()


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """Run coroutine ``main`` on a new corun loop and return its result.

    Behaves like ``asyncio.run``: it cancels the tasks left over, closes
    asynchronous generators, shuts the default executor down and closes the
    loop. It cannot be called while another loop runs in this thread.
    """
    if asyncio.events._get_running_loop() is not None:
        # Checked before a loop is made, so nothing is left half set up.
        raise RuntimeError("corun.run() cannot be called from a running event loop")
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """An asyncio event loop policy whose loops are corun's.

    Prefer ``corun.run`` or a ``loop_factory``: asyncio deprecates policies
    in Python 3.14. This exists for programs that call ``asyncio.run`` or
    ``asyncio.new_event_loop`` themselves (see ``corun.install``).
    """

    def new_event_loop(self) -> EventLoop:
        """A new corun event loop."""
        return new_event_loop()


def install() -> None:
    """Make asyncio create corun loops (``asyncio.run``, ``asyncio.new_event_loop``)."""
    asyncio.set_event_loop_policy(EventLoopPolicy())
