"""Ways to get corun loops: a factory, ``run()``, and a policy for ``install()``.

The way to hand corun to asyncio is a loop factory:
``asyncio.run(main(), loop_factory=corun.new_event_loop)`` (Python 3.12+) or
``asyncio.Runner(loop_factory=corun.new_event_loop)`` (3.11+). ``install()``
replaces asyncio's event loop policy instead, for programs that call
``asyncio.run(main())`` or ``asyncio.new_event_loop()`` themselves; policies are
deprecated from Python 3.14 on and go in 3.16.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from corun.runtime.engine.asyncio_compat import default_policy_class, set_event_loop_policy
from corun.runtime.loop import EventLoop

_T = TypeVar("_T")


def new_event_loop() -> EventLoop:
    """A new corun event loop.

    The loop factory to give asyncio: ``asyncio.run(main(), loop_factory=corun.new_event_loop)``
    or ``asyncio.Runner(loop_factory=corun.new_event_loop)``.
    """
    return EventLoop()


def run(main: Coroutine[Any, Any, _T], *, debug: bool | None = None) -> _T:
    """Run coroutine ``main`` on a new corun loop and return its result.

    Behaves like ``asyncio.run`` (it is ``asyncio.Runner`` with corun's loop
    factory): it cancels the tasks left over, closes asynchronous generators,
    shuts the default executor down and closes the loop. It cannot be called
    while another loop runs in this thread.
    """
    if asyncio.events._get_running_loop() is not None:
        # Checked before a loop is made, so nothing is left half set up.
        raise RuntimeError("corun.run() cannot be called from a running event loop")
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)


class EventLoopPolicy(default_policy_class()):  # type: ignore[misc]
    """An asyncio event loop policy whose loops are corun's.

    Prefer ``asyncio.run(main(), loop_factory=corun.new_event_loop)`` or
    ``corun.run``: asyncio deprecates policies from Python 3.14 on. This
    exists for programs that call ``asyncio.run(main())`` or
    ``asyncio.new_event_loop()`` themselves (see ``corun.install``).
    """

    def new_event_loop(self) -> EventLoop:
        """A new corun event loop."""
        return new_event_loop()


def install() -> None:
    """Make asyncio create corun loops (``asyncio.run``, ``asyncio.new_event_loop``).

    Sets an ``EventLoopPolicy``. Works on every supported Python without a
    DeprecationWarning; from 3.14 on, where asyncio deprecates policies,
    prefer ``asyncio.run(main(), loop_factory=corun.new_event_loop)``.
    """
    set_event_loop_policy(EventLoopPolicy())
