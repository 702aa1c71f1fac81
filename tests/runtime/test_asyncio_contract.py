"""What real libraries rely on beyond asyncio's documentation, on both loops.

Each test here was found by running a library on corun: anyio's isinstance
checks, sockets unregistered after they were closed, attributes set on tasks,
``set_debug(1)``, ``call_at`` with an int, and a ``loop.time`` patched with
``mock.patch.object``. Every one runs on corun and on the stdlib loop, which
is the reference.
"""

from __future__ import annotations

import asyncio
import socket
import time
from unittest import mock

import anyio
import pytest
from anyio.lowlevel import checkpoint

pytestmark = pytest.mark.timeout(30)


# --- isinstance(x, asyncio.Future) and isinstance(t, asyncio.Task) ------------


def test_futures_and_tasks_pass_asyncio_isinstance(loop):
    """create_future, create_task, and the waiters inside asyncio's primitives."""
    waiters: list[object] = []

    async def main():
        waiters.append(loop.create_future())
        task = loop.create_task(asyncio.sleep(10))
        waiters.append(task)
        lock, event, queue = asyncio.Lock(), asyncio.Event(), asyncio.Queue()
        semaphore, condition = asyncio.Semaphore(0), asyncio.Condition()
        await lock.acquire()

        async def block() -> None:
            await asyncio.gather(
                lock.acquire(),
                event.wait(),
                queue.get(),
                semaphore.acquire(),
                asyncio.sleep(10),
                return_exceptions=True,
            )

        blocked = loop.create_task(block())
        await asyncio.sleep(0.01)
        waiters.extend(lock._waiters)
        waiters.extend(event._waiters)
        waiters.extend(queue._getters)
        waiters.extend(semaphore._waiters)
        waiters.append(blocked._fut_waiter)  # the gathering future

        async def wait_on_condition() -> None:
            async with condition:
                await condition.wait()

        waiter_task = loop.create_task(wait_on_condition())
        await asyncio.sleep(0.01)
        waiters.extend(condition._waiters)
        for t in (task, blocked, waiter_task):
            t.cancel()
        await asyncio.gather(task, blocked, waiter_task, return_exceptions=True)
        return asyncio.current_task()

    current = loop.run_until_complete(main())
    assert len(waiters) == 8
    assert all(isinstance(w, asyncio.Future) for w in waiters), waiters
    assert isinstance(current, asyncio.Task)
    assert isinstance(waiters[1], asyncio.Task)
    assert not isinstance(waiters[0], asyncio.Task)


def test_anyio_does_not_lose_an_item_handed_over_as_its_scope_is_cancelled(loop):
    """anyio skips cancelling a task whose asyncio.Future waiter is already done.

    The receiver was handed the item (its waiter completed) in the same tick
    its scope was cancelled: it must return the item, not lose it.
    """

    async def scenario() -> list[str]:
        send, receive = anyio.create_memory_object_stream[str](0)
        got: list[str] = []
        scope = anyio.CancelScope()

        async def receiver() -> None:
            with scope:
                got.append(await receive.receive())

        async with anyio.create_task_group() as tg:
            tg.start_soon(receiver)
            for _ in range(5):
                await checkpoint()
            send.send_nowait("item")
            scope.cancel()
        send.close()
        receive.close()
        return got

    assert loop.run_until_complete(scenario()) == ["item"]


# --- attributes of the program's own ----------------------------------------


def test_tasks_take_attributes(loop):
    """As mitmproxy does: ``asyncio.current_task().created = time.time()``."""

    async def main():
        task = asyncio.current_task()
        assert task is not None
        task.created = time.time()
        assert task.created > 0
        del task.created
        with pytest.raises(AttributeError, match="has no attribute 'created'"):
            task.created  # noqa: B018
        with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
            task.nothing  # noqa: B018
        return task

    task = loop.run_until_complete(main())
    task.after = "done"  # a finished task too
    assert task.after == "done"


# --- remove_reader/remove_writer after the socket was closed ------------------


def test_remove_reader_and_writer_of_a_closed_socket(loop):
    a, b = socket.socketpair()
    for sock in (a, b):
        sock.setblocking(False)
    loop.add_reader(a, lambda: None)
    loop.add_writer(b, lambda: None)
    # As anyio's socket streams do: close, then unregister in a finally block.
    a.close()
    b.close()
    assert loop.remove_reader(a) is True
    assert loop.remove_writer(b) is True
    # Unregistered, a closed socket has no fd to be found by.
    with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
        loop.remove_reader(a)


def test_remove_reader_of_a_never_registered_closed_socket_is_an_error(loop):
    a, b = socket.socketpair()
    a.close()
    b.close()
    with pytest.raises(ValueError, match="Invalid file descriptor: -1"):
        loop.remove_reader(a)


# --- what asyncio accepts, and what it hands back ----------------------------


def test_set_debug_takes_any_truthy_value(loop):
    loop.set_debug(1)
    assert loop.get_debug() == 1 and type(loop.get_debug()) is int  # handed back as given
    loop.set_debug(0)
    assert not loop.get_debug()


def test_create_task_takes_any_name(loop):
    async def main():
        return asyncio.current_task().get_name()

    assert loop.run_until_complete(loop.create_task(main(), name=123)) == "123"


def test_slow_callback_duration_is_kept_as_given(loop):
    loop.slow_callback_duration = 1
    assert type(loop.slow_callback_duration) is int


def test_call_at_hands_back_the_time_it_was_given(loop):
    when = 7591
    handle = loop.call_at(when, lambda: None)
    try:
        assert handle.when() == when
        assert type(handle.when()) is int
        assert f"when={when}" in repr(handle)
    finally:
        handle.cancel()
    later = loop.call_later(0.5, lambda: None)
    assert type(later.when()) is float
    later.cancel()


# --- a patched loop.time decides which timers are due ------------------------


def test_patched_time_moves_timers(loop):
    fired: list[str] = []

    async def main():
        start = loop.time()
        loop.call_later(3600, fired.append, "in an hour")
        await asyncio.sleep(0)
        with mock.patch.object(loop, "time", return_value=start + 3601):
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        assert fired == ["in an hour"]
        # Unpatched, the loop's own clock is back: a timer an hour away waits.
        loop.call_later(3600, fired.append, "again")
        await asyncio.sleep(0.01)
        assert fired == ["in an hour"]

    loop.run_until_complete(main())
    assert loop.time() == pytest.approx(time.monotonic(), abs=1.0)
