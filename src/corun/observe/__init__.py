"""corun.observe: see inside a running corun loop, from inside and outside the process.

Turn it on with ``corun.observe.enable(loop)``, with ``corun run --observe
script.py``, or with ``CORUN_OBSERVE=1`` in the environment of any program that
uses a corun loop. Then ``observer.snapshot()`` gives loop lag, utilisation,
per-task accounting, stalls with the stack that was blocking, and the flight
recorder; ``corun ps/top/dump PID`` read the same from another process,
through an owner-only Unix socket. See ``docs/observe.md``.

The pieces: ``observer.py`` (one loop: accounting read into snapshots, the
stall watch), ``monitor.py`` (the process's watchdog thread and the
faulthandler backstop), ``alarm.py`` (the timer each loop keeps pushing back,
which wakes the watchdog), ``backstop.py`` (the timer that fires faulthandler's
dump), ``waits.py`` (what a task waits on), ``histogram.py``,
``snapshot.py`` (the dataclasses), ``answers.py`` and ``prometheus.py`` (what
the socket serves), ``metrics.py`` (the figures both exports report),
``otel.py`` (the optional OpenTelemetry instruments), ``server.py`` and ``client.py`` (the socket),
``dumps.py`` (the flight recorder on SIGTERM and crash), ``views.py`` (what
the commands print).
"""

from __future__ import annotations

import asyncio
import atexit
import os
from collections.abc import Callable
from typing import Any, Final

from corun.observe.histogram import LatencyHistogram
from corun.observe.monitor import MONITOR
from corun.observe.observer import (
    DEFAULT_STALL_THRESHOLD,
    MIN_STALL_THRESHOLD,
    ObserveError,
    Observer,
    pause,
)
from corun.observe.protocol import logger
from corun.observe.snapshot import Event, LoopSummary, Snapshot, Stall, TaskSummary
from corun.runtime.engine.task_core import set_task_group
from corun.runtime.loop import EventLoop

#: The environment switch: any value but "" and "0" turns observation on.
ENVIRONMENT_SWITCH: Final = "CORUN_OBSERVE"
#: The stall threshold from the environment, in milliseconds.
ENVIRONMENT_THRESHOLD: Final = "CORUN_OBSERVE_STALL_MS"

__all__ = [
    "DEFAULT_STALL_THRESHOLD",
    "Event",
    "LatencyHistogram",
    "LoopSummary",
    "ObserveError",
    "Observer",
    "Snapshot",
    "Stall",
    "TaskSummary",
    "enable",
    "observer_of",
    "set_group",
]

#: The longest group label ``set_group`` takes, in characters.
MAX_GROUP_LABEL: Final = 200


def observer_of(loop: object) -> Observer | None:
    """The observer of ``loop``, if observation is on for it."""
    for observer in MONITOR.observers():
        if observer.loop is loop:
            return observer
    return None


def set_group(label: str, task: asyncio.Task[Any] | None = None) -> None:
    """Count ``task`` (default: the current task) in the group ``label`` in ``corun top``.

    ``corun top`` shows tasks grouped by the coroutine function they run; a
    server whose request tasks all run the same function (uvicorn's) labels
    each by its route instead (``corun.observe.asgi.RouteGroups`` does). The
    whole task counts in its last label, work done before included. Keep the
    labels few (routes, not URLs): a loop keeps 128 groups, and counts the
    tasks of any more as "(other groups)". Cheap enough to call per request,
    with observation on or off; a task of a loop that is not corun's is left
    as it is (nothing observes it).

    Raises:
        TypeError: ``label`` is not a string.
        ValueError: ``label`` is empty or longer than 200 characters.
        RuntimeError: no task given, and none is running (or no loop).
    """
    if not isinstance(label, str):
        raise TypeError(f"a group label must be a string, not {type(label).__name__}")
    if not 0 < len(label) <= MAX_GROUP_LABEL:
        raise ValueError(
            f"a group label must have 1 to {MAX_GROUP_LABEL} characters, not {len(label)}"
        )
    if task is None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("set_group() needs a task: none is running")
    set_task_group(task, label)


def enable(
    loop: asyncio.AbstractEventLoop | None = None,
    *,
    stall_threshold: float = DEFAULT_STALL_THRESHOLD,
    serve: bool = True,
) -> Observer:
    """Observe ``loop`` (default: the running loop) until ``Observer.close()``.

    ``stall_threshold`` (seconds, 0.01 to 60): a step or callback that runs
    longer is a stall. ``serve``: also answer ``corun ps/top/dump`` for this
    process over its Unix socket. Enabling a loop twice returns its observer,
    with the new threshold.

    Raises:
        ObserveError: ``loop`` is not a corun loop, or the threshold is out of range.
    """
    if loop is None:
        loop = asyncio.get_running_loop()
    if not isinstance(loop, EventLoop):
        raise ObserveError(f"corun.observe needs a corun loop, not {type(loop).__name__}")
    if isinstance(stall_threshold, bool) or not isinstance(stall_threshold, (int, float)):
        raise ObserveError(f"stall_threshold must be a number of seconds, not {stall_threshold!r}")
    if not MIN_STALL_THRESHOLD <= stall_threshold <= 60.0:
        raise ObserveError(
            f"stall_threshold must be between {MIN_STALL_THRESHOLD} and 60 seconds, "
            f"not {stall_threshold!r}"
        )
    existing = observer_of(loop)
    if existing is not None:
        existing.set_stall_threshold(float(stall_threshold))
        return existing
    if loop.is_closed():
        raise ObserveError("the loop is closed")
    observer = Observer(loop, float(stall_threshold), MONITOR)
    MONITOR.add(observer)
    if serve:
        _serve()
    return observer


def _serve() -> None:
    """Start the process's inspection socket and crash dumps (once; failures are logged)."""
    if MONITOR.server is not None:
        return
    from corun.observe import answers, dumps, prometheus
    from corun.observe.server import Answer, InspectServer

    def answer(make: Callable[[list[Observer]], dict[str, Any]]) -> Callable[[], str]:
        return lambda: answers.encode(make(MONITOR.observers()))

    handlers: dict[str, Callable[[], Answer]] = {
        "ps": lambda: answers.ps_pieces(MONITOR.observers()),
        "top": answer(answers.top),
        "dump": lambda: answers.dump_pieces(MONITOR.observers()),
        "incidents": lambda: answers.dump_pieces(MONITOR.observers(), incidents_only=True),
        "metrics": lambda: prometheus.exposition(MONITOR.observers()),
    }
    try:
        server = InspectServer(
            handlers,
            turn=MONITOR.turn,
            turns_done=MONITOR.turns_done,
            waiting=MONITOR.wait_for_client,
            pause=lambda: pause(MONITOR),
        )
        path = server.start()
    except Exception as exc:
        logger.warning("corun.observe: no inspection socket (%s); observing in process only", exc)
        MONITOR.server = False
        return
    MONITOR.server = server
    MONITOR.watch_arrivals()
    # A normal exit removes the socket; SIGTERM's dump does (dumps.py).
    atexit.register(server.close)
    dumps.install(os.path.dirname(path), path)


def enable_from_environment(loop: EventLoop) -> Observer | None:
    """``enable(loop)`` if ``CORUN_OBSERVE`` asks for it (the loop-creation hook)."""
    if os.environ.get(ENVIRONMENT_SWITCH, "") in ("", "0"):
        return None
    threshold = DEFAULT_STALL_THRESHOLD
    setting = os.environ.get(ENVIRONMENT_THRESHOLD, "")
    if setting:
        try:
            threshold = float(setting) / 1e3
        except ValueError:
            logger.warning("corun.observe: ignoring %s=%r", ENVIRONMENT_THRESHOLD, setting)
    try:
        return enable(loop, stall_threshold=threshold)
    except ObserveError as exc:
        logger.warning("corun.observe: not enabled: %s", exc)
        return None
