"""What a task waits on, and its await chain, read off its coroutine.

A suspended task is a chain of coroutines, each awaiting the next
(``cr_await``), down to a future. The chain gives the stack that ``corun ps``
prints, and its innermost frames say what the task waits for: asyncio's
``sleep`` holds its timer, ``Lock.acquire`` its lock, ``StreamReader`` its
transport. Reading them needs no help from the loop, so it works from another
thread, and while the loop is blocked.
"""

from __future__ import annotations

import asyncio
import os
from types import CodeType, CoroutineType, FrameType, GeneratorType
from typing import Any, Final

#: Frames kept per task, innermost ones.
MAX_FRAMES: Final = 32

_ASYNCIO_DIR: Final = os.path.dirname(os.path.abspath(asyncio.__file__ or ""))
# asyncio's and corun's own frames are named by what they wait for.
_ASYNCIO_WAITS: Final = {
    ("tasks.py", "sleep"): "sleep",
    ("locks.py", "acquire"): "lock",
    ("locks.py", "wait"): "event",
    ("queues.py", "get"): "queue get",
    ("queues.py", "put"): "queue put",
    ("queues.py", "join"): "queue join",
    ("streams.py", "_wait_for_data"): "socket read",
    ("streams.py", "_drain_helper"): "socket write",
    ("subprocess.py", "wait"): "subprocess",
    ("subprocess.py", "communicate"): "subprocess",
    ("tasks.py", "gather"): "tasks",
    ("tasks.py", "wait"): "tasks",
    ("tasks.py", "_wait"): "tasks",
    ("tasks.py", "wait_for"): "task",
    ("taskgroups.py", "__aexit__"): "task group",
    ("base_events.py", "sock_connect"): "socket connect",
}


# "file:line function" per (code, instruction offset): the tasks of a process
# stand at a few hundred places between them, and the line number is costly
# to compute (the line table is searched). Bounded: code made by exec()
# would otherwise pile up.
_LOCATIONS: dict[tuple[CodeType, int], str] = {}
_MAX_LOCATIONS: Final = 50_000
# Per code object: what a frame of it waits on ("" for none).
_CODE_KIND: dict[CodeType, str] = {}


def _location(frame: FrameType) -> str:
    key = (frame.f_code, frame.f_lasti)
    location = _LOCATIONS.get(key)
    if location is None:
        if len(_LOCATIONS) >= _MAX_LOCATIONS:
            _LOCATIONS.clear()
        code = key[0]
        location = _LOCATIONS[key] = f"{code.co_filename}:{frame.f_lineno} {code.co_name}"
    return location


def _kind(code: CodeType) -> str:
    kind = _CODE_KIND.get(code)
    if kind is None:
        filename = code.co_filename
        kind = ""
        if os.path.dirname(filename) == _ASYNCIO_DIR:
            kind = _ASYNCIO_WAITS.get((os.path.basename(filename), code.co_name), "")
        elif code.co_name == "_wait_fd" and filename.endswith(os.path.join("net", "sockets.py")):
            kind = "fd"
        _CODE_KIND[code] = kind
    return kind


def await_chain(coro: Any) -> list[Any]:
    """The coroutines and generators from ``coro`` down to what it awaits, outermost first."""
    chain: list[Any] = []
    current = coro
    while current is not None and len(chain) < 256:
        chain.append(current)
        kind = type(current)
        if kind is CoroutineType:
            current = current.cr_await
        elif kind is GeneratorType:
            current = current.gi_yieldfrom
        else:
            nxt = getattr(current, "cr_await", None)
            if nxt is None:
                nxt = getattr(current, "gi_yieldfrom", None)
            if nxt is None:
                nxt = getattr(current, "ag_await", None)
            current = nxt
    return chain


def frame_of(awaitable: Any) -> FrameType | None:
    """The frame of a coroutine, generator or async generator (None when it has none)."""
    kind = type(awaitable)
    if kind is CoroutineType:
        return awaitable.cr_frame  # type: ignore[no-any-return]
    if kind is GeneratorType:
        return awaitable.gi_frame  # type: ignore[no-any-return]
    for name in ("cr_frame", "gi_frame", "ag_frame"):
        frame = getattr(awaitable, name, None)
        if frame is not None:
            return frame  # type: ignore[no-any-return]
    return None


def task_stack(task: Any, chain: list[Any] | None = None) -> list[str]:
    """The task's await chain as ``file:line function`` strings, innermost last."""
    if chain is None:
        chain = await_chain(task.get_coro())
    lines = []
    for item in chain:
        frame = frame_of(item)
        if frame is not None:
            lines.append(_location(frame))
    return lines[-MAX_FRAMES:]


def thread_stack(frame: FrameType | None) -> list[str]:
    """A thread's stack from its innermost frame, as ``file:line function``, innermost last."""
    lines: list[str] = []
    while frame is not None and len(lines) < MAX_FRAMES * 4:
        lines.append(_location(frame))
        frame = frame.f_back
    lines.reverse()
    return lines[-MAX_FRAMES:]


def waiting_on(task: Any, loop_time: float, chain: list[Any] | None = None) -> str:
    """A short description of what ``task`` waits for ("" when it is ready to run).

    ``loop_time`` is the loop's clock now, to turn a sleep's deadline into
    the time left. ``chain`` saves walking the await chain again.
    """
    waiter = getattr(task, "_fut_waiter", None)
    if waiter is None:
        return ""
    if chain is None:
        chain = await_chain(task.get_coro())
    for awaitable in reversed(chain):
        frame = frame_of(awaitable)
        if frame is None:
            continue
        kind = _kind(frame.f_code)
        if kind == "fd":
            return _fd_wait(frame)
        if kind:
            return _detail(kind, frame, loop_time)
    if _is_task(waiter):
        return f"task {waiter.get_name()}"
    return f"future {_short_repr(waiter)}"


def _detail(kind: str, frame: FrameType, loop_time: float) -> str:
    local = frame.f_locals
    owner = local.get("self")
    if kind == "sleep":
        timer = local.get("h")
        if timer is not None:
            return f"sleep until +{max(0.0, timer.when() - loop_time):.3f}s"
        return "sleep"
    if kind == "lock":
        return f"{type(owner).__name__.lower()} {_short_id(owner)}"
    if kind == "event":
        return f"{type(owner).__name__.lower()} {_short_id(owner)}"
    if kind.startswith("queue"):
        size = owner.qsize() if owner is not None else 0
        return f"{kind} {_short_id(owner)} (size {size})"
    if kind in ("socket read", "socket write"):
        return f"{kind} {_transport_fd(owner)}"
    if kind == "subprocess":
        pid = getattr(owner, "pid", None)
        return f"subprocess pid {pid}"
    if kind == "task":
        inner = local.get("fut")
        if inner is not None and _is_task(inner):
            return f"task {inner.get_name()}"
        return "task"
    if kind == "tasks":
        futures = local.get("fs") or local.get("children") or ()
        try:
            count = len(futures)
        except TypeError:
            count = 0
        return f"tasks ({count})" if count else "tasks"
    if kind == "task group":
        tasks = getattr(owner, "_tasks", ())
        return f"task group ({len(tasks)} tasks)"
    return kind


def _fd_wait(frame: FrameType) -> str:
    local = frame.f_locals
    fd = local.get("fd")
    direction = "write" if local.get("writable") else "read"
    return f"fd {fd} {direction}"


def _transport_fd(stream: Any) -> str:
    transport = getattr(stream, "_transport", None)
    if transport is None:
        protocol = getattr(stream, "_protocol", None)
        transport = getattr(protocol, "_transport", None)
    sock = transport.get_extra_info("socket") if transport is not None else None
    try:
        return f"fd {sock.fileno()}" if sock is not None else "(no socket)"
    except (AttributeError, OSError):
        return "(closed)"


def _is_task(obj: Any) -> bool:
    return hasattr(obj, "get_coro") and hasattr(obj, "get_name")


def _short_id(obj: Any) -> str:
    return f"at {id(obj):#x}"


def _short_repr(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."
