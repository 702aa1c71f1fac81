"""run_in_executor, default executors and their shutdown."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest


def test_default_executor_runs_in_another_thread(loop):
    main_ident = threading.get_ident()

    async def main():
        return await loop.run_in_executor(None, lambda a, b: (threading.get_ident(), a + b), 2, 3)

    ident, value = loop.run_until_complete(main())
    assert value == 5
    assert ident != main_ident


def test_run_in_executor_returns_awaitable_future(loop):
    fut = loop.run_in_executor(None, time.sleep, 0)
    assert asyncio.isfuture(fut)
    assert fut.get_loop() is loop
    assert loop.run_until_complete(fut) is None


def test_exception_propagates(loop):
    class Custom(Exception):
        pass

    def fail():
        raise Custom("from thread")

    async def main():
        await loop.run_in_executor(None, fail)

    with pytest.raises(Custom, match="from thread"):
        loop.run_until_complete(main())


def test_custom_executor(loop):
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="custom-pool") as ex:
        name = loop.run_until_complete(
            loop.run_in_executor(ex, lambda: threading.current_thread().name)
        )
    assert name.startswith("custom-pool")


def test_set_default_executor(loop):
    ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="my-default")
    loop.set_default_executor(ex)
    name = loop.run_until_complete(
        loop.run_in_executor(None, lambda: threading.current_thread().name)
    )
    assert name.startswith("my-default")
    loop.run_until_complete(loop.shutdown_default_executor())
    # shutdown_default_executor shut down *our* executor
    with pytest.raises(RuntimeError):
        ex.submit(lambda: None)


def test_set_default_executor_rejects_non_thread_pool(loop):
    class NotAPool(concurrent.futures.Executor):
        pass

    with pytest.raises(TypeError):
        loop.set_default_executor(NotAPool())


def test_shutdown_default_executor_then_run_in_executor_raises(loop):
    assert loop.run_until_complete(loop.run_in_executor(None, lambda: 1)) == 1
    loop.run_until_complete(loop.shutdown_default_executor())
    with pytest.raises(RuntimeError, match="Executor shutdown has been called"):
        loop.run_in_executor(None, lambda: 2)
    # An explicit executor still works.
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        assert loop.run_until_complete(loop.run_in_executor(ex, lambda: 3)) == 3


def test_shutdown_default_executor_without_executor(loop):
    loop.run_until_complete(loop.shutdown_default_executor())
    with pytest.raises(RuntimeError, match="Executor shutdown has been called"):
        loop.run_in_executor(None, lambda: 2)


def test_shutdown_default_executor_waits_for_running_jobs(loop):
    started = threading.Event()
    finished = []

    def job():
        started.set()
        time.sleep(0.05)
        finished.append(True)

    async def main():
        fut = loop.run_in_executor(None, job)
        await loop.run_in_executor(None, started.wait)  # job is running
        await loop.shutdown_default_executor()
        assert finished == [True]
        await fut

    loop.run_until_complete(main())


def test_many_jobs_in_parallel(loop):
    barrier = threading.Barrier(3, timeout=5)

    async def main():
        # Three jobs that can only finish together: proves concurrency.
        return await asyncio.gather(*(loop.run_in_executor(None, barrier.wait) for _ in range(3)))

    results = loop.run_until_complete(main())
    assert sorted(results) == [0, 1, 2]

    async def many():
        return await asyncio.gather(*(loop.run_in_executor(None, pow, i, 2) for i in range(50)))

    assert loop.run_until_complete(many()) == [i * i for i in range(50)]


def test_executor_result_wakes_blocked_loop(loop):
    far = loop.call_later(60, lambda: None)

    def slowish():
        time.sleep(0.05)
        return time.monotonic()

    done_at = loop.run_until_complete(loop.run_in_executor(None, slowish))
    assert time.monotonic() - done_at < 1.0
    far.cancel()


def test_run_in_executor_rejects_coroutine_function_in_debug(loop):
    async def coro_fn():
        pass

    # asyncio only validates the callable in debug mode.
    loop.set_debug(True)
    with pytest.raises(TypeError):
        loop.run_in_executor(None, coro_fn)


def test_run_in_executor_on_closed_loop(loop):
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.run_in_executor(None, lambda: None)


def test_cancelling_awaiter_cancels_pending_job(loop):
    gate = threading.Event()
    ran = []

    with concurrent.futures.ThreadPoolExecutor(1) as ex:

        async def main():
            blocker = loop.run_in_executor(ex, gate.wait, 5)
            queued = loop.run_in_executor(ex, ran.append, 1)  # waits behind blocker
            queued.cancel()
            # The cancel reaches the concurrent future through a done callback,
            # i.e. on the next iteration (on every loop): let it land before the
            # worker thread is released, or the worker may start the job first.
            await asyncio.sleep(0)
            gate.set()
            await blocker
            await asyncio.sleep(0.02)
            return queued.cancelled()

        assert loop.run_until_complete(main()) is True
    assert ran == []
