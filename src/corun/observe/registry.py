"""Reading asyncio's registry of tasks from any thread: the one version switch for it.

``corun ps``, ``top``, the Prometheus text and the OpenTelemetry instruments
list a loop's tasks from a thread that is not the loop's, while the loop may
be blocked. Where the registry lives changed with each Python:

- 3.11: one ``WeakSet``, ``asyncio.tasks._all_tasks``.
- 3.12, 3.13: a ``WeakSet``, ``asyncio.tasks._scheduled_tasks``, and a plain
  set of eager tasks (``eager_task_factory``), ``asyncio.tasks._eager_tasks``.
- 3.14 and later: the C extension keeps native tasks in per-thread lists and
  any other task (corun's ``Task`` is not asyncio's C ``Task``) in a
  ``WeakSet`` that only C can reach; ``asyncio.tasks._scheduled_tasks`` still
  exists but nothing registers there. Only ``asyncio.all_tasks(loop)`` sees
  them all, and it is safe off the loop's thread: it takes the loop
  explicitly, and walks the other threads' lists by design.

Up to 3.13 the internals are read rather than ``asyncio.all_tasks``: that
iterates the ``WeakSet`` in Python and gives up after 1,000 tries when the
loop adds a task meanwhile, and filters every task in Python; here the weak
references are copied by one C call, and filtered in one compiled pass.
``tests/observe/test_registry.py`` pins which way each version reads.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Final

from corun.runtime.engine.task_core import live_tasks_of

#: How the registry is read on this Python: "all_tasks" (public API),
#: "scheduled+eager" (3.12, 3.13) or "all_tasks_weakset" (3.11).
SOURCE: Final = (
    "all_tasks"
    if sys.version_info >= (3, 14)
    else "scheduled+eager"
    if sys.version_info >= (3, 12)
    else "all_tasks_weakset"
)

#: Tries before giving up on a registry that keeps changing under the copy.
_TRIES: Final = 100


def _copy(collection: Any) -> list[Any]:
    """``list(collection)``, tried again when another thread changed it meanwhile."""
    for _attempt in range(_TRIES):
        try:
            return list(collection)
        except RuntimeError:  # "changed size during iteration"
            continue
    return []


# One definition per registry, picked at import (mypy checks the one of the
# Python it runs on).
if sys.version_info >= (3, 14):

    def pending_tasks(loop: asyncio.AbstractEventLoop) -> list[Any]:
        """The pending tasks of ``loop``, read from any thread without the loop's help."""
        # Iterates a WeakSet in Python: the loop may add a task meanwhile.
        for _attempt in range(_TRIES):
            try:
                return list(asyncio.all_tasks(loop))
            except RuntimeError:
                continue
        return []

elif sys.version_info >= (3, 12):

    def pending_tasks(loop: asyncio.AbstractEventLoop) -> list[Any]:
        """The pending tasks of ``loop``, read from any thread without the loop's help."""
        tasks_module: Any = asyncio.tasks
        # The eager ones first: one that becomes a scheduled task meanwhile is
        # then seen once at least (asyncio.all_tasks reads them in this order).
        eager = _copy(tasks_module._eager_tasks)
        # The weak references, copied in C: iterating the WeakSet itself runs
        # a Python generator.
        live = live_tasks_of(_copy(tasks_module._scheduled_tasks.data), loop)
        if eager:
            seen = {id(task) for task in live}
            live.extend(
                task
                for task in eager
                if id(task) not in seen and task.get_loop() is loop and not task.done()
            )
        return live

else:

    def pending_tasks(loop: asyncio.AbstractEventLoop) -> list[Any]:
        """The pending tasks of ``loop``, read from any thread without the loop's help."""
        tasks_module: Any = asyncio.tasks
        return live_tasks_of(_copy(tasks_module._all_tasks.data), loop)
