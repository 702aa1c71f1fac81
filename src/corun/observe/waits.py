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
from json.encoder import encode_basestring_ascii
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


# Per (code, instruction offset): "file:line function", the same as JSON
# text, and what a frame there waits on (see _kind). The tasks of a process
# stand at a few hundred places between them, and the line number is costly
# to compute (the line table is searched). Bounded: code made by exec() would
# otherwise pile up.
_LOCATIONS: dict[tuple[CodeType, int], tuple[str, str, str]] = {}
_MAX_LOCATIONS: Final = 50_000
# Per code object: what a frame of it waits on ("" for none).
_CODE_KIND: dict[CodeType, str] = {}


def _located(frame: FrameType) -> tuple[str, str, str]:
    key = (frame.f_code, frame.f_lasti)
    location = _LOCATIONS.get(key)
    if location is None:
        if len(_LOCATIONS) >= _MAX_LOCATIONS:
            _LOCATIONS.clear()
        code = key[0]
        text = f"{code.co_filename}:{frame.f_lineno} {code.co_name}"
        location = _LOCATIONS[key] = (text, encode_basestring_ascii(text), _kind(code))
    return location


def _location(frame: FrameType) -> str:
    return _located(frame)[0]


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


# Per type of awaitable other than Python's own coroutines and generators: the
# names of its frame and of what it awaits (Cython's coroutines, async
# generators' asend), or None for a future or other leaf, where a chain ends.
# Asking a future for attributes it lacks raises inside getattr, several
# times per task: the answer per type is kept instead.
_CHAIN_ATTRS: dict[type, tuple[str, str] | None] = {}
_MAX_CHAIN_TYPES: Final = 1_000
_CHAIN_NAMES: Final = (
    ("cr_frame", "cr_await"),
    ("gi_frame", "gi_yieldfrom"),
    ("ag_frame", "ag_await"),
)


def _chain_attrs(kind: type) -> tuple[str, str] | None:
    try:
        return _CHAIN_ATTRS[kind]
    except KeyError:
        pass
    if len(_CHAIN_ATTRS) >= _MAX_CHAIN_TYPES:
        _CHAIN_ATTRS.clear()
    found = next((names for names in _CHAIN_NAMES if hasattr(kind, names[1])), None)
    _CHAIN_ATTRS[kind] = found
    return found


def chain_frames(coro: Any) -> list[FrameType]:
    """The frames of ``coro`` and of what it awaits, in turn, outermost first.

    A suspended task's coroutine awaits another (``cr_await``), down to a
    future; the chain's frames are its stack. A finished coroutine has none.
    """
    frames: list[FrameType] = []
    current = coro
    for _depth in range(256):
        if current is None:
            break
        kind = type(current)
        if kind is CoroutineType:
            frame = current.cr_frame
            current = current.cr_await
        elif kind is GeneratorType:
            frame = current.gi_frame
            current = current.gi_yieldfrom
        else:
            names = _chain_attrs(kind)
            if names is None:
                break
            frame = getattr(current, names[0], None)
            current = getattr(current, names[1], None)
        if frame is not None:
            frames.append(frame)
    return frames


def task_view(
    task: Any, waiter: Any, loop_time: float, *, as_json: bool = False
) -> tuple[str, list[str]]:
    """What ``task`` waits on ("" when it is ready to run), and its stack, from one pass over its await chain.

    The stack is ``file:line function`` strings, innermost last, or with
    ``as_json`` each of them as JSON text: ``corun ps`` of 10,000 tasks then
    encodes a few hundred strings, not tens of thousands, as each
    location's JSON is kept with it. ``waiter`` is the future the task
    waits on (None: it is ready); ``loop_time`` is the loop's clock now, to
    turn a sleep's deadline into the time left. A task that changes under a
    reader in another thread can be unreadable: the wait says so.
    """
    field = 1 if as_json else 0
    stack: list[str] = []
    try:
        inner: FrameType | None = None
        kind = ""
        for frame in chain_frames(task.get_coro())[-MAX_FRAMES:]:
            location = _located(frame)
            stack.append(location[field])
            if location[2]:  # the innermost frame that says what it waits on wins
                inner, kind = frame, location[2]
        waits = "" if waiter is None else _wait_text(waiter, kind, inner, loop_time)
    except Exception as exc:
        waits = f"(unreadable: {type(exc).__name__})"
    return waits, stack


def thread_stack(frame: FrameType | None) -> list[str]:
    """A thread's stack from its innermost frame, as ``file:line function``, innermost last."""
    lines: list[str] = []
    while frame is not None and len(lines) < MAX_FRAMES * 4:
        lines.append(_location(frame))
        frame = frame.f_back
    lines.reverse()
    return lines[-MAX_FRAMES:]


def _wait_text(waiter: Any, kind: str, frame: FrameType | None, loop_time: float) -> str:
    """The wait on ``waiter``, told by ``frame`` (of ``kind``) if a frame tells it."""
    if frame is not None:
        return _fd_wait(frame) if kind == "fd" else _detail(kind, frame, loop_time)
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
