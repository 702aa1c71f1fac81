"""``Task``: the public task class, a thin interpreted subclass of ``TaskCore``.

asyncio keeps its registry of all tasks (``asyncio.all_tasks()``) in a
``WeakSet``, so a task must support weak references: ``TaskCore`` inherits
the weak reference slot that ``setup.py`` adds to the compiled ``Future``
(mypyc alone cannot give one that is cleared when the object is freed). This
class adds ``Generic``, for ``Task[int]`` in annotations; the
implementation, ``TaskCore`` in ``task_core.py``, stays compiled, and
``__slots__`` keeps instances free of a ``__dict__``.
``tests/runtime/test_task_lifecycle.py`` creates and frees millions of
tasks, weakly referenced by asyncio, to prove it.

It also takes attributes set by the program: asyncio's C Task does
(``asyncio.current_task().created = time.time()``), and real programs rely
on it (mitmproxy, under websockets' proxy tests, for one). A compiled class
has no ``__dict__``, and mypyc allows no ``__setattr__`` or ``__getattr__``
on a class that interpreted classes subclass, so the hooks are here, and the
values live in a side table keyed weakly by the task, made on first use: an
idle task carries no dict pointer and costs what it cost before. Attributes
the class defines are set as before; only names it does not know go to the
table. Futures do not take attributes: they are instances of the compiled
class itself, and making them interpreted, to hold these hooks, measured 40%
more instructions per await (see ``futures.py``).

Deliberately not compiled (setup.py compiles every module in ``engine/`` but
those named ``interpreted_*``).
"""

from __future__ import annotations

import weakref
from typing import Any, Generic, TypeVar

from corun.runtime.engine.task_core import TaskCore

_T = TypeVar("_T")

# Attributes set on tasks beyond their class's own, per task.
_ATTRIBUTES: weakref.WeakKeyDictionary[TaskCore, dict[str, Any]] = weakref.WeakKeyDictionary()


class Task(TaskCore, Generic[_T]):
    """A coroutine wrapped in a Future, run by the event loop.

    Create tasks with ``loop.create_task()`` or ``asyncio.create_task()``
    rather than directly. Passes ``isinstance(task, asyncio.Task)``, and
    takes attributes of the program's own, as asyncio's tasks do.
    """

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        # Called only when the ordinary lookup found nothing.
        extra = _ATTRIBUTES.get(self)
        if extra is not None and name in extra:
            return extra[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            object.__setattr__(self, name, value)
        except AttributeError:
            if hasattr(type(self), name):
                raise  # an attribute of the class that refuses to be set
            extra = _ATTRIBUTES.get(self)
            if extra is None:
                extra = _ATTRIBUTES[self] = {}
            extra[name] = value

    def __delattr__(self, name: str) -> None:
        extra = _ATTRIBUTES.get(self)
        if extra is not None and name in extra:
            del extra[name]
        else:
            object.__delattr__(self, name)
