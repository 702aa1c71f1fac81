"""``Future``: the public future class, a thin interpreted subclass of ``FutureCore``.

What it adds is attributes set by the program: ``fut.tag = 1`` and
``asyncio.current_task().created = time.time()`` work on asyncio's C classes,
and real programs do them (mitmproxy, under websockets' proxy tests, for
one). A compiled class has no ``__dict__``, and mypyc allows no
``__setattr__`` or ``__getattr__`` on a class that interpreted classes
subclass. So the hooks are here, and the values live in a side table keyed
weakly by the object, made on first use: an idle task carries no dict
pointer, and costs what it cost before attributes were allowed. Attributes
the classes define (``_log_traceback``, ``_state``...) are set as before;
only names the class does not know go to the table.

Deliberately not compiled (setup.py compiles every module in ``engine/`` but
those named ``interpreted_*``): the weak-reference slot and the hooks need
an interpreted class (see ``interpreted_task.py`` for the weak reference).
"""

from __future__ import annotations

import weakref
from typing import Any

from corun.runtime.engine.futures import FutureCore

# The pure-Python build's FutureCore is a plain class: it has __weakref__ and
# a __dict__ already, and a subclass may not declare a second weak slot.
_SLOTS: tuple[str, ...] = () if hasattr(FutureCore, "__weakref__") else ("__weakref__",)

# Attributes set on futures and tasks beyond their class's own, per object.
_ATTRIBUTES: weakref.WeakKeyDictionary[FutureCore, dict[str, Any]] = weakref.WeakKeyDictionary()


class Future(FutureCore):
    """A result that will be available later, bound to one event loop.

    ``loop.create_future()`` makes them. It passes
    ``isinstance(fut, asyncio.Future)``, and accepts attributes of the
    program's own, as asyncio's futures do.
    """

    __slots__ = _SLOTS

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
