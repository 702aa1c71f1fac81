"""corun: a Python coroutine runtime, compatible with asyncio.

Run a coroutine on corun's loop with ``corun.run(main())``, or hand corun to
asyncio with ``asyncio.Runner(loop_factory=corun.new_event_loop)`` or
``corun.install()``.
"""

from corun.runtime.core import LoopStatistics
from corun.runtime.futures import Future
from corun.runtime.handles import Handle
from corun.runtime.instruments import Instrument
from corun.runtime.loop import EventLoop
from corun.runtime.runner import EventLoopPolicy, install, new_event_loop, run
from corun.runtime.tasks import Task
from corun.runtime.timers import TimerHandle

__version__ = "0.1.0"


def _is_compiled() -> bool:
    from corun.runtime import core

    return not core.__file__.endswith((".py", ".pyc"))


#: True when the mypyc-compiled build is loaded, False for the pure-Python build.
COMPILED: bool = _is_compiled()

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
