"""Misuse must fail the way asyncio fails (same exception types)."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest


async def simple_coro():
    return 1


# ---------------------------------------------------------------- callbacks


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at", "call_soon_threadsafe"])
def test_coroutine_as_callback_is_type_error_in_debug(loop, method):
    # asyncio validates callbacks only in debug mode.
    loop.set_debug(True)
    coro = simple_coro()
    args = {
        "call_soon": (),
        "call_soon_threadsafe": (),
        "call_later": (0.01,),
        "call_at": (loop.time() + 0.01,),
    }[method]
    try:
        with pytest.raises(TypeError):
            getattr(loop, method)(*args, coro)
        with pytest.raises(TypeError):
            getattr(loop, method)(*args, simple_coro)
    finally:
        coro.close()


@pytest.mark.parametrize("bad", [None, 1, "str"])
def test_non_callable_callback_is_type_error_in_debug(loop, bad):
    loop.set_debug(True)
    with pytest.raises(TypeError):
        loop.call_soon(bad)


# ---------------------------------------------------------------- running / closed


def test_run_until_complete_on_running_loop(loop):
    async def main():
        c = simple_coro()
        try:
            with pytest.raises(RuntimeError, match="already running"):
                loop.run_until_complete(c)
        finally:
            c.close()
        with pytest.raises(RuntimeError, match="already running"):
            loop.run_forever()
        return "ok"

    assert loop.run_until_complete(main()) == "ok"
    assert not loop.is_running()


def test_running_another_loop_inside_a_running_loop(loop, make_loop):
    other = make_loop()

    async def main():
        c = simple_coro()
        try:
            with pytest.raises(RuntimeError, match="another loop is running"):
                other.run_until_complete(c)
        finally:
            c.close()
        return "ok"

    assert loop.run_until_complete(main()) == "ok"
    assert not other.is_running()


def test_run_until_complete_on_closed_loop(loop):
    loop.close()
    coro = simple_coro()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_until_complete(coro)
    coro.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_forever()


@pytest.mark.parametrize(
    "call",
    [
        lambda lp: lp.call_soon(lambda: None),
        lambda lp: lp.call_later(1, lambda: None),
        lambda lp: lp.call_at(lp.time() + 1, lambda: None),
        lambda lp: lp.call_soon_threadsafe(lambda: None),
        lambda lp: lp.run_in_executor(None, lambda: None),
    ],
    ids=["call_soon", "call_later", "call_at", "call_soon_threadsafe", "run_in_executor"],
)
def test_scheduling_on_closed_loop(loop, call):
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        call(loop)


def test_close_running_loop_is_runtime_error(loop):
    async def main():
        with pytest.raises(RuntimeError):
            loop.close()
        return loop.is_closed()

    assert loop.run_until_complete(main()) is False
    assert not loop.is_closed()


def test_close_with_pending_tasks_and_callbacks(loop, errors):
    async def forever():
        await asyncio.sleep(60)

    task = loop.create_task(forever())
    loop.run_until_complete(asyncio.sleep(0))
    loop.call_soon(lambda: None)
    loop.call_later(30, lambda: None)
    loop.close()
    assert loop.is_closed()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_soon(lambda: None)
    assert not task.done()
    del task
    gc.collect()
    errors.pop("Task was destroyed but it is pending!")


def test_stop_on_closed_loop_does_not_raise(loop):
    loop.close()
    loop.stop()  # asyncio: harmless


# ---------------------------------------------------------------- foreign futures


def test_run_until_complete_with_future_of_another_loop(loop, make_loop):
    other = make_loop()
    fut = other.create_future()
    with pytest.raises(ValueError):
        loop.run_until_complete(fut)
    fut.cancel()


def test_awaiting_future_of_another_loop(loop, make_loop):
    other = make_loop()
    foreign = other.create_future()

    async def main():
        await foreign

    with pytest.raises(RuntimeError, match="attached to a different loop"):
        loop.run_until_complete(main())
    foreign.cancel()


def test_task_of_another_loop_in_gather(loop, make_loop):
    other = make_loop()
    foreign = other.create_future()

    async def main():
        await asyncio.gather(foreign, loop.create_future())

    with pytest.raises(ValueError):
        loop.run_until_complete(main())
    foreign.cancel()


def test_future_used_from_other_loop_via_wrap_is_fine(loop, make_loop):
    """The sanctioned way across loops: run_coroutine_threadsafe."""
    other = make_loop()
    ready = threading.Event()
    result = []

    def other_thread():
        async def serve():
            ready.set()
            await asyncio.sleep(0.05)

        other.run_until_complete(serve())

    t = threading.Thread(target=other_thread)
    t.start()
    ready.wait(5)

    async def work():
        return "from other loop"

    async def main():
        cf = asyncio.run_coroutine_threadsafe(work(), other)
        result.append(await asyncio.wrap_future(cf))

    loop.run_until_complete(main())
    t.join()
    assert result == ["from other loop"]


# ---------------------------------------------------------------- futures / tasks


def test_future_state_errors(loop):
    fut = loop.create_future()
    fut.set_result(1)
    with pytest.raises(asyncio.InvalidStateError):
        fut.set_result(2)
    with pytest.raises(asyncio.InvalidStateError):
        fut.set_exception(ValueError())
    fut2 = loop.create_future()
    fut2.cancel()
    with pytest.raises(asyncio.InvalidStateError):
        fut2.set_result(1)


def test_create_task_with_non_coroutine(loop):
    for bad in (None, 1, lambda: None, simple_coro):
        with pytest.raises(TypeError):
            loop.create_task(bad)


def test_run_until_complete_with_non_awaitable(loop):
    with pytest.raises(TypeError):
        loop.run_until_complete(42)


def test_negative_fd(loop):
    with pytest.raises(ValueError):
        loop.add_reader(-5, lambda: None)
    with pytest.raises(ValueError):
        loop.add_writer(-5, lambda: None)


def test_set_default_executor_wrong_type(loop):
    with pytest.raises(TypeError):
        loop.set_default_executor(object())


def test_set_task_factory_wrong_type(loop):
    with pytest.raises(TypeError):
        loop.set_task_factory("not callable")
