"""The asyncio internals the engine relies on, and how each CPython version spells them.

The one place where the engine touches asyncio below its public API, so that a
new CPython changes this module and its test (``tests/runtime/test_versions.py``,
which pins every name below on every version), not the task step.

Why each is needed:

* ``register_task``, ``enter_task``, ``leave_task``: ``asyncio.current_task()``
  and ``asyncio.all_tasks()`` read asyncio's own registry, and offer a task of
  another class no public way into it. These three are the hooks asyncio names
  for "third-party task implementations" (they are in ``asyncio.tasks.__all__``);
  ``timeout()``, ``TaskGroup`` and the call graph depend on them seeing corun's
  tasks. Every version from 3.11 to 3.15 has them. 3.14 keeps the current task
  per thread in C (``enter_task`` now insists that the loop is the thread's
  running loop) and a task that is not a C ``asyncio.Task`` in a weak set of
  its own: the calls are unchanged, what they do is not.
* ``swap_current_task``, ``register_eager_task``, ``unregister_eager_task``:
  an eager task (3.12's ``eager_start``) runs its first step inside the step of
  the task that created it, so it becomes the current task for that step and
  hands the place back afterwards. 3.12 added these for that; 3.11 has no
  eager tasks (``Task`` refuses ``eager_start`` there, as asyncio's does).
* ``awaiter_of_callback``: 3.14's ``asyncio.capture_call_graph()`` asks a
  future who awaits it (``_asyncio_awaited_by``). asyncio records that for its
  own futures only (``future_add_to_awaited_by`` ignores other classes), so a
  corun future works it out from its callbacks: a task waiting on it (its
  ``_fut_waiter``), or a ``TaskGroup``'s done callback, whose parent task
  asyncio counts as awaiting every child (``_on_task_done``, ``_parent_task``).
* ``iscoroutinefunction``: 3.14 deprecates ``asyncio.iscoroutinefunction`` in
  favour of ``inspect.iscoroutinefunction``.
* ``default_policy_class``, ``set_event_loop_policy``: 3.14 deprecates the
  policy system (removal in 3.16) with no replacement for what
  ``corun.install()`` does (make ``asyncio.run()`` and ``new_event_loop()``
  make corun loops); ``asyncio.run(main(), loop_factory=corun.new_event_loop)``
  is the way that needs neither. Until then ``install()`` uses the policy
  API without passing 3.14's warning on to the program.
* ``TASK_FACTORY_KWARGS``: 3.13 passes ``create_task``'s keyword arguments
  to a task factory; 3.11 and 3.12 pass ``context`` at most, and set the name
  afterwards. ``TASK_FACTORY_GETS_NAME``: 3.14 passes the name to the factory too.

Version checks are module constants, decided once at import.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import warnings
from asyncio import AbstractEventLoop
from asyncio import TaskGroup as _TaskGroup
from asyncio import tasks as _tasks
from collections.abc import Callable
from typing import Any, Final

PY312: Final = sys.version_info >= (3, 12)
#: 3.13 hands a task factory ``create_task``'s keyword arguments.
TASK_FACTORY_KWARGS: Final = sys.version_info >= (3, 13)
#: 3.14 hands the factory the name as well, instead of calling ``set_name`` after it.
TASK_FACTORY_GETS_NAME: Final = sys.version_info >= (3, 14)
#: 3.14 deprecates asyncio's policies and ``asyncio.iscoroutinefunction``.
PY314: Final = sys.version_info >= (3, 14)

# Typed loosely: typeshed asks for asyncio.Task, and any Task-like object works.
register_task: Final[Callable[[Any], None]] = _tasks._register_task
enter_task: Final[Callable[[AbstractEventLoop, Any], None]] = _tasks._enter_task
leave_task: Final[Callable[[AbstractEventLoop, Any], None]] = _tasks._leave_task


def _no_eager_tasks(*args: Any) -> Any:
    """3.11 has no eager tasks: ``Task`` refuses ``eager_start`` there, so this is not reached."""
    raise RuntimeError("eager tasks need Python 3.12 or later")


# getattr: mypy checks against 3.11, whose asyncio has none of the three.
swap_current_task: Final[Callable[[AbstractEventLoop, Any], Any]] = (
    getattr(_tasks, "_swap_current_task") if PY312 else _no_eager_tasks  # noqa: B009
)
register_eager_task: Final[Callable[[Any], None]] = (
    getattr(_tasks, "_register_eager_task") if PY312 else _no_eager_tasks  # noqa: B009
)
unregister_eager_task: Final[Callable[[Any], None]] = (
    getattr(_tasks, "_unregister_eager_task") if PY312 else _no_eager_tasks  # noqa: B009
)


def awaiter_of_callback(future: object, callback: Any) -> Any:
    """The task that ``callback``, a done callback of ``future``, shows to await it, or None."""
    owner = getattr(callback, "__self__", None)
    if owner is None:
        return None
    if isinstance(owner, _TaskGroup):
        # TaskGroup.create_task registers its _on_task_done on every child.
        if getattr(callback, "__name__", None) == "_on_task_done":
            return getattr(owner, "_parent_task", None)
        return None
    # A task's wakeup callback, on the future the task is waiting on.
    if owner is not future and getattr(owner, "_fut_waiter", None) is future:
        return owner
    return None


iscoroutinefunction: Final[Callable[[object], bool]] = (
    inspect.iscoroutinefunction if PY314 else asyncio.iscoroutinefunction
)


def default_policy_class() -> type[Any]:
    """asyncio's default event loop policy class (deprecated from 3.14)."""
    if not PY314:
        return asyncio.DefaultEventLoopPolicy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return asyncio.DefaultEventLoopPolicy


def set_event_loop_policy(policy: Any) -> None:
    """``asyncio.set_event_loop_policy`` (deprecated from 3.14)."""
    if not PY314:
        asyncio.set_event_loop_policy(policy)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(policy)
