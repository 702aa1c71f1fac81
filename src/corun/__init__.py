"""corun: a Python coroutine runtime, compatible with asyncio.

Run a coroutine on corun's loop with ``corun.run(main())``, or hand corun to
asyncio with a loop factory: ``asyncio.run(main(), loop_factory=corun.new_event_loop)``
(Python 3.12+) or ``asyncio.Runner(loop_factory=corun.new_event_loop)``.
``corun.install()`` sets an event loop policy instead, for programs that call
``asyncio.run(main())`` themselves; asyncio deprecates policies from 3.14 on.
"""

import os as _os

from corun._version import __version__ as __version__
from corun.runtime.engine.futures import Future
from corun.runtime.engine.handles import Handle
from corun.runtime.engine.instruments import Instrument
from corun.runtime.engine.interpreted_task import Task
from corun.runtime.engine.loop_core import LoopStatistics
from corun.runtime.engine.timers import TimerHandle
from corun.runtime.loop import LOOP_CREATED, EventLoop
from corun.runtime.runner import EventLoopPolicy, install, new_event_loop, run


def _is_compiled() -> bool:
    from corun.runtime.engine import loop_core

    return not loop_core.__file__.endswith((".py", ".pyc"))


#: True when the mypyc-compiled build is loaded, False for the pure-Python build.
COMPILED: bool = _is_compiled()


def _observe_if_asked(loop: EventLoop) -> None:
    # CORUN_OBSERVE is read when each loop is made, so that `corun run --observe`
    # and a variable set after `import corun` both work; corun.observe is only
    # imported when it is set.
    if _os.environ.get("CORUN_OBSERVE", "") not in ("", "0"):
        from corun.observe import enable_from_environment

        enable_from_environment(loop)


LOOP_CREATED.append(_observe_if_asked)

if _os.environ.get("CORUN_OBSERVE", "") not in ("", "0"):
    # Observation asked for: a loop that is not corun's would go unseen, so say so.
    from corun.runtime import foreign as _foreign

    _foreign.watch("CORUN_OBSERVE=1")

__all__ = [
    "COMPILED",
    "EventLoop",
    "EventLoopPolicy",
    "Future",
    "Handle",
    "Instrument",
    "LoopStatistics",
    "Task",
    "TimerHandle",
    "install",
    "new_event_loop",
    "run",
]
