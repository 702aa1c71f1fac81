"""``Task``: the public task class, a thin interpreted subclass of ``TaskCore``.

asyncio keeps its registry of all tasks (``asyncio.all_tasks()``) in a
``WeakSet``, so a task must support weak references. mypyc cannot give a
compiled class a ``__weakref__`` slot soundly: the only ways (a plain Python
base class, or ``Generic``) give it one that its generated dealloc never
clears, and freeing a weakly referenced object then crashes Python 3.11
(mypyc issue 1102). A class written in Python that subclasses a compiled one
is an ordinary heap type: its ``__weakref__`` slot is cleared by CPython's own
dealloc before the compiled one runs. That slot is all this class adds (and
``Generic``, for ``Task[int]`` in annotations); the implementation,
``TaskCore`` in ``task_core.py``, stays compiled, and ``__slots__`` keeps
instances free of a ``__dict__``: an idle task costs one pointer more than
the compiled core. ``tests/runtime/test_task_lifecycle.py`` creates and
frees millions of tasks, weakly referenced by asyncio, to prove it.

It also derives from the public ``Future`` (``interpreted_future.py``), so
that a task is a ``corun.Future`` and takes attributes of the program's own
as that class does, with no dict pointer per task.

Deliberately not compiled (setup.py compiles every module in ``engine/`` but
those named ``interpreted_*``).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from corun.runtime.engine.interpreted_future import Future
from corun.runtime.engine.task_core import TaskCore

_T = TypeVar("_T")

# The pure-Python build's TaskCore has a __weakref__ slot already, and a
# subclass may not declare a second one.
_SLOTS: tuple[str, ...] = () if hasattr(TaskCore, "__weakref__") else ("__weakref__",)


class Task(TaskCore, Future, Generic[_T]):
    """A coroutine wrapped in a Future, run by the event loop.

    Create tasks with ``loop.create_task()`` or ``asyncio.create_task()``
    rather than directly.
    """

    __slots__ = _SLOTS
