"""Say so when a loop that is not corun's runs where corun was asked for.

``corun run`` makes corun asyncio's default loop, but a program may choose
its loop itself: uvicorn builds one from its ``--loop`` option (uvloop when
installed, else asyncio's), hypercorn's ``uvloop`` worker class builds
uvloop. That program then runs on another loop, and nothing would tell the
user. So ``watch()`` wraps asyncio's ``_set_running_loop``, which every
asyncio loop (and uvloop) calls as it starts running, and the first time a
loop of a class that is not corun's starts, one line goes to stderr: the
class, and the option that fixes it.

uvloop looks the function up once, when it is imported: ``watch()`` must run
before, as ``corun run`` and ``import corun`` with ``CORUN_OBSERVE=1`` do.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

from corun.runtime.loop import EventLoop

#: The option that makes each server run corun, by the module that shows it runs.
_FIXES: Final = (
    ("uvicorn", "uvicorn: pass --loop corun:new_event_loop"),
    ("hypercorn", "hypercorn: use --worker-class asyncio"),
    ("gunicorn", "gunicorn: use corun's worker, -k corun.servers.UvicornWorker"),
)
_DOCS: Final = "docs/servers.md"

_lock = threading.Lock()
_reported: set[type] = set()
_why = "corun run"
_original: Callable[[Any], None] | None = None


def watch(why: str) -> None:
    """Warn on stderr, once per class, when a loop that is not corun's starts running.

    ``why``: what asked for corun, for the message (``corun run``, ``CORUN_OBSERVE=1``).
    """
    global _original, _why
    _why = why
    with _lock:
        if _original is not None:
            return
        _original = asyncio.events._set_running_loop
        asyncio.events._set_running_loop = _set_running_loop
        asyncio._set_running_loop = _set_running_loop


def message(loop: object) -> str:
    """The line printed for ``loop``, a loop that is not corun's."""
    cls = type(loop)
    fixes = [fix for module, fix in _FIXES if module in sys.modules]
    how = "; ".join(fixes) if fixes else f"pass corun.new_event_loop as its loop factory ({_DOCS})"
    return (
        f"corun: {cls.__module__}.{cls.__qualname__} started running, not corun's loop, "
        f"though {_why} asked for corun (the program chose its loop itself); {how}"
    )


def _set_running_loop(loop: Any) -> None:
    original = _original
    assert original is not None
    original(loop)
    if loop is None or isinstance(loop, EventLoop):
        return
    cls = type(loop)
    with _lock:
        if cls in _reported:
            return
        _reported.add(cls)
    try:
        print(message(loop), file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: nothing to tell
        pass
