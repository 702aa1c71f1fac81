"""Interop both ways between the loop's own Future/Task and the stdlib's.

On corun these cross the corun <-> asyncio class boundary; on the asyncio
loop the same tests are the reference behaviour.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
import time

import pytest

STDLIB_TASKS = {
    "PyTask": lambda coro, loop: asyncio.tasks._PyTask(coro, loop=loop),
    "CTask": lambda coro, loop: asyncio.Task(coro, loop=loop),
}
STDLIB_FUTURES = {
    "PyFuture": lambda loop: asyncio.futures._PyFuture(loop=loop),
    "CFuture": lambda loop: asyncio.Future(loop=loop),
}


@pytest.fixture(params=sorted(STDLIB_FUTURES))
def stdlib_future(request, loop):
    return lambda: STDLIB_FUTURES[request.param](loop)


@pytest.fixture(params=sorted(STDLIB_TASKS))
def stdlib_task(request, loop):
    return lambda coro: STDLIB_TASKS[request.param](coro, loop)


def test_own_task_awaits_stdlib_future(loop, stdlib_future, task_cls):
    fut = stdlib_future()

    async def waiter():
        assert type(asyncio.current_task()) is task_cls
        return await fut

    task = loop.create_task(waiter())
    loop.call_later(0.001, fut.set_result, "from stdlib future")
    assert loop.run_until_complete(task) == "from stdlib future"


def test_own_task_awaits_stdlib_future_exception(loop, stdlib_future):
    fut = stdlib_future()

    async def waiter():
        await fut

    loop.call_soon(fut.set_exception, OverflowError("x"))
    with pytest.raises(OverflowError):
        loop.run_until_complete(loop.create_task(waiter()))


def test_cancel_own_task_cancels_awaited_stdlib_future(loop, stdlib_future):
    fut = stdlib_future()

    async def waiter():
        await fut

    async def main():
        t = loop.create_task(waiter())
        await asyncio.sleep(0)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        return t

    assert loop.run_until_complete(main()).cancelled()
    assert fut.cancelled()


def test_own_task_awaits_wrapped_concurrent_future(loop):
    cf: concurrent.futures.Future[str] = concurrent.futures.Future()

    def complete_later():
        time.sleep(0.02)
        cf.set_result("from thread")

    async def waiter():
        wrapped = asyncio.wrap_future(cf, loop=loop)
        assert asyncio.isfuture(wrapped) and wrapped.get_loop() is loop
        return await wrapped

    t = threading.Thread(target=complete_later)
    t.start()
    assert loop.run_until_complete(loop.create_task(waiter())) == "from thread"
    t.join()


# Python 3.14 keeps the running C task per thread, where asyncio.current_task()
# (C) looks; its pure-Python Task registers in the pure-Python registry instead,
# which only asyncio.tasks._py_current_task() reads.
_PY_TASK_HAS_OWN_REGISTRY = sys.version_info >= (3, 14)


def test_stdlib_task_awaits_own_future(loop, stdlib_task, request):
    fut = loop.create_future()
    current_task = asyncio.current_task
    if _PY_TASK_HAS_OWN_REGISTRY and "PyTask" in request.node.callspec.id:
        current_task = asyncio.tasks._py_current_task

    async def waiter():
        return await fut, current_task()

    task = stdlib_task(waiter())
    loop.call_later(0.001, fut.set_result, "own future result")
    result, current = loop.run_until_complete(task)
    assert result == "own future result"
    assert current is task


def test_stdlib_task_awaits_own_future_exception_and_cancel(loop, stdlib_task):
    f_exc = loop.create_future()
    f_wait = loop.create_future()

    async def waiter(f):
        await f

    t1 = stdlib_task(waiter(f_exc))
    loop.call_soon(f_exc.set_exception, NotImplementedError())
    with pytest.raises(NotImplementedError):
        loop.run_until_complete(t1)

    t2 = stdlib_task(waiter(f_wait))

    async def cancel_it():
        await asyncio.sleep(0)
        t2.cancel()
        await asyncio.gather(t2, return_exceptions=True)

    loop.run_until_complete(cancel_it())
    assert t2.cancelled()
    assert f_wait.cancelled()


def test_stdlib_task_awaits_own_task(loop, stdlib_task, task_cls):
    async def inner():
        await asyncio.sleep(0.001)
        return type(asyncio.current_task())

    async def outer():
        return await loop.create_task(inner())

    assert loop.run_until_complete(stdlib_task(outer())) is task_cls


def test_own_task_awaits_stdlib_task(loop, stdlib_task):
    async def inner():
        await asyncio.sleep(0.001)
        return "stdlib task result"

    async def outer():
        return await stdlib_task(inner())

    assert loop.run_until_complete(loop.create_task(outer())) == "stdlib task result"


def test_gather_mixes_future_kinds(loop, stdlib_future):
    async def main():
        own = loop.create_future()
        std = stdlib_future()
        loop.call_soon(own.set_result, 1)
        loop.call_soon(std.set_result, 2)

        async def coro():
            return 3

        return await asyncio.gather(own, std, coro())

    assert loop.run_until_complete(main()) == [1, 2, 3]


def test_wait_for_on_stdlib_future_times_out_and_cancels_it(loop, stdlib_future):
    fut = stdlib_future()

    async def main():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(fut, 0.01)

    loop.run_until_complete(main())
    assert fut.cancelled()


def test_shield_stdlib_future_from_own_task(loop, stdlib_future):
    inner = stdlib_future()

    async def outer():
        return await asyncio.shield(inner)

    async def main():
        t = loop.create_task(outer())
        await asyncio.sleep(0)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        assert t.cancelled() and not inner.done()
        inner.set_result("still fine")
        return await inner

    assert loop.run_until_complete(main()) == "still fine"


def test_run_until_complete_accepts_stdlib_future(loop, stdlib_future):
    fut = stdlib_future()
    loop.call_soon(fut.set_result, "std")
    assert loop.run_until_complete(fut) == "std"


def test_ensure_future_uses_loop_create_task(loop, task_cls):
    async def coro():
        return 1

    t = asyncio.ensure_future(coro(), loop=loop)
    assert type(t) is task_cls
    assert loop.run_until_complete(t) == 1


def test_wrap_future_chains_cancellation_to_concurrent_future(loop):
    cf: concurrent.futures.Future[None] = concurrent.futures.Future()

    async def main():
        wrapped = asyncio.wrap_future(cf, loop=loop)
        wrapped.cancel()
        await asyncio.sleep(0)

    loop.run_until_complete(main())
    assert cf.cancelled()


@pytest.mark.corun_only
def test_stdlib_future_done_callbacks_scheduled_on_corun_loop(loop):
    fut = asyncio.Future(loop=loop)
    seen = []
    fut.add_done_callback(lambda f: seen.append(asyncio.get_running_loop()))
    fut.set_result(None)
    loop.run_until_complete(asyncio.sleep(0))
    assert seen == [loop]
