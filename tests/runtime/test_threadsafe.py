"""call_soon_threadsafe and run_coroutine_threadsafe from real threads."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest


@pytest.mark.timeout(10)
def test_threadsafe_wakes_loop_sleeping_on_far_timer(loop):
    fut = loop.create_future()
    far = loop.call_later(60, lambda: None)
    sent = []

    def worker():
        time.sleep(0.05)
        sent.append(time.monotonic())
        loop.call_soon_threadsafe(fut.set_result, "woken")

    t = threading.Thread(target=worker)
    t.start()
    assert loop.run_until_complete(fut) == "woken"
    woke = time.monotonic()
    t.join()
    far.cancel()
    assert woke - sent[0] < 1.0


@pytest.mark.timeout(10)
def test_threadsafe_wakes_loop_with_nothing_scheduled(loop):
    sent = []

    def worker():
        time.sleep(0.05)
        sent.append(time.monotonic())
        loop.call_soon_threadsafe(loop.stop)

    t = threading.Thread(target=worker)
    t.start()
    loop.run_forever()
    woke = time.monotonic()
    t.join()
    assert sent and woke - sent[0] < 1.0


@pytest.mark.timeout(10)
def test_threadsafe_wakes_loop_blocked_in_sleep_coroutine(loop):
    async def main():
        fut = loop.create_future()

        def worker():
            time.sleep(0.05)
            loop.call_soon_threadsafe(fut.set_result, time.monotonic())

        t = threading.Thread(target=worker)
        t.start()
        sleeper = asyncio.ensure_future(asyncio.sleep(60))
        sent = await fut
        woke = time.monotonic()
        sleeper.cancel()
        t.join()
        return woke - sent

    assert loop.run_until_complete(main()) < 1.0


@pytest.mark.timeout(30)
def test_many_threads_hammering_preserve_per_thread_order(loop):
    n_threads, per_thread = 8, 2000
    total = n_threads * per_thread
    got = []
    done = loop.create_future()

    def record(tid, i):
        got.append((tid, i))
        if len(got) == total:
            done.set_result(None)

    barrier = threading.Barrier(n_threads)

    def worker(tid):
        barrier.wait()
        for i in range(per_thread):
            loop.call_soon_threadsafe(record, tid, i)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    loop.run_until_complete(done)
    for t in threads:
        t.join()
    assert len(got) == total
    for tid in range(n_threads):
        assert [i for t, i in got if t == tid] == list(range(per_thread))


@pytest.mark.timeout(30)
def test_threads_hammering_while_loop_is_busy_and_idle(loop):
    """Wakeups must not be lost whether the loop is spinning or blocked."""
    n = 300
    got = []
    done = loop.create_future()

    def record(i):
        got.append(i)
        if len(got) == n:
            done.set_result(None)

    def worker():
        for i in range(n):
            loop.call_soon_threadsafe(record, i)
            if i % 50 == 0:
                time.sleep(0.002)  # let the loop go idle in between

    t = threading.Thread(target=worker)
    t.start()
    loop.run_until_complete(done)
    t.join()
    assert got == list(range(n))


def test_threadsafe_with_context(loop):
    var = contextvars.ContextVar("v")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "ctx")
    fut = loop.create_future()

    def worker():
        loop.call_soon_threadsafe(lambda: fut.set_result(var.get(None)), context=ctx)

    t = threading.Thread(target=worker)
    t.start()
    assert loop.run_until_complete(fut) == "ctx"
    t.join()


def test_threadsafe_returns_cancellable_handle(loop):
    seen = []
    h = loop.call_soon_threadsafe(seen.append, 1)
    h.cancel()
    assert h.cancelled()
    loop.call_soon_threadsafe(seen.append, 2)
    loop.run_until_complete(asyncio.sleep(0))
    assert seen == [2]


def test_threadsafe_on_closed_loop_raises(loop):
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_soon_threadsafe(lambda: None)


@pytest.mark.timeout(10)
def test_run_coroutine_threadsafe(loop):
    async def add(a, b):
        await asyncio.sleep(0.001)
        assert asyncio.get_running_loop() is loop
        return a + b

    results = []

    def worker():
        cf = asyncio.run_coroutine_threadsafe(add(2, 3), loop)
        results.append(cf.result(timeout=5))
        loop.call_soon_threadsafe(loop.stop)

    t = threading.Thread(target=worker)
    t.start()
    loop.run_forever()
    t.join()
    assert results == [5]


@pytest.mark.timeout(10)
def test_run_coroutine_threadsafe_exception_and_cancel(loop):
    async def fail():
        raise LookupError("nope")

    async def forever():
        await asyncio.sleep(60)

    outcome = {}

    def worker():
        cf = asyncio.run_coroutine_threadsafe(fail(), loop)
        try:
            cf.result(timeout=5)
        except LookupError as exc:
            outcome["exc"] = exc
        cf2 = asyncio.run_coroutine_threadsafe(forever(), loop)
        time.sleep(0.02)
        cf2.cancel()
        try:
            cf2.result(timeout=5)
        except BaseException as exc:  # concurrent.futures.CancelledError
            outcome["cancel"] = type(exc).__name__
        loop.call_soon_threadsafe(loop.stop)

    t = threading.Thread(target=worker)
    t.start()
    loop.run_forever()
    t.join()
    # let the cancelled task finish unwinding
    loop.run_until_complete(asyncio.sleep(0.01))
    assert isinstance(outcome["exc"], LookupError)
    assert outcome["cancel"] == "CancelledError"
