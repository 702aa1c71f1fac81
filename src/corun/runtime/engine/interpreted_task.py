"""``Task``: the public task class, a thin interpreted subclass of ``TaskCore``.

The implementation, ``TaskCore`` in ``task_core.py``, is compiled; this class
adds what only an interpreted class gets soundly from mypyc:

* ``Generic``, for ``Task[int]`` in annotations (mypyc gives a generic
  compiled class a ``__dict__`` and a weak reference slot it never clears).
* A ``__dict__``, for attributes set by the program: asyncio's C Task takes
  them (``asyncio.current_task().created = time.time()``), and real programs
  rely on it (mitmproxy, under websockets' proxy tests, for one). mypyc
  allows no ``__setattr__`` or ``__getattr__`` on a class that interpreted
  classes subclass, and a compiled class has no ``__dict__``. CPython owns
  this one: its ``subtype_traverse`` and ``subtype_clear`` visit and clear
  it before handing over to the compiled ``TaskCore``'s, so a task that
  refers to itself through an attribute (``task.x = task``, a callback that
  closes over it) is a cycle the garbage collector sees and frees, as
  asyncio's is. (A table keyed weakly by the task, which this replaces, kept
  such a task alive forever.) The dict is made on first use: an idle task
  costs the dict pointer CPython keeps beside the object.

Weak references (asyncio keeps its registry of tasks in a ``WeakSet``) come
from ``Future``, whose compiled layout has the slot (see ``setup.py``).

Deliberately not compiled (setup.py compiles every module in ``engine/`` but
those named ``interpreted_*``).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from corun.runtime.engine.task_core import TaskCore

_T = TypeVar("_T")


class Task(TaskCore, Generic[_T]):
    """A coroutine wrapped in a Future, run by the event loop.

    Create tasks with ``loop.create_task()`` or ``asyncio.create_task()``
    rather than directly. Passes ``isinstance(task, asyncio.Task)``, and
    takes attributes of the program's own, as asyncio's tasks do.
    """
