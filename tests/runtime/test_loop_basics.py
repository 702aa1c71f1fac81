"""The ready queue, run/stop/close, and the loop's basic state."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import subprocess
import sys
import time

import pytest

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


def test_is_an_abstract_event_loop(loop):
    assert isinstance(loop, asyncio.AbstractEventLoop)
    assert not loop.is_running()
    assert not loop.is_closed()


@pytest.mark.corun_only
def test_corun_loop_type(loop):
    import corun

    assert isinstance(loop, corun.EventLoop)
    assert issubclass(corun.EventLoop, asyncio.AbstractEventLoop)
    # Own implementation, not a re-export of the stdlib loop.
    assert not isinstance(loop, asyncio.BaseEventLoop)


def test_call_soon_is_strict_fifo(loop):
    seen = []
    for i in range(500):
        loop.call_soon(seen.append, i)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == list(range(500))


def test_call_soon_passes_args(loop):
    seen = []
    loop.call_soon(lambda *a: seen.append(a), 1, "two", None)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == [(1, "two", None)]


def test_call_soon_runs_in_given_context(loop):
    ctx = contextvars.copy_context()
    ctx.run(var.set, "in-ctx")
    seen = []

    def cb():
        seen.append(var.get())
        var.set("changed-by-cb")

    loop.call_soon(cb, context=ctx)
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == ["in-ctx"]
    # The callback ran *in* ctx, so its change is visible there ...
    assert ctx[var] == "changed-by-cb"
    # ... and not in ours.
    assert var.get() == "unset"


def test_call_soon_default_context_is_a_copy_of_the_callers(loop):
    seen = []

    def schedule():
        token = var.set("at-schedule-time")
        loop.call_soon(read)
        var.reset(token)

    def read():
        seen.append(var.get())
        var.set("leak?")

    ctx = contextvars.copy_context()
    ctx.run(schedule)
    loop.call_soon(lambda: seen.append(var.get()))
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == ["at-schedule-time", "unset"]
    assert var.get() == "unset"


def test_handle_cancel_prevents_run(loop):
    seen = []
    h1 = loop.call_soon(seen.append, 1)
    h2 = loop.call_soon(seen.append, 2)
    h3 = loop.call_soon(seen.append, 3)
    assert not h2.cancelled()
    h2.cancel()
    assert h2.cancelled()
    h2.cancel()  # idempotent
    assert h2.cancelled()
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == [1, 3]
    assert not h1.cancelled() and not h3.cancelled()


def test_handle_cancelled_by_earlier_callback_in_same_batch(loop):
    seen = []
    handles = {}

    def first():
        seen.append("first")
        handles["victim"].cancel()

    loop.call_soon(first)
    handles["victim"] = loop.call_soon(seen.append, "victim")
    loop.call_soon(seen.append, "last")
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == ["first", "last"]


def test_one_iteration_runs_only_callbacks_ready_at_its_start(loop):
    seen = []

    def a():
        seen.append("a")
        loop.call_soon(seen.append, "a2")

    def b():
        seen.append("b")
        loop.call_soon(seen.append, "b2")

    loop.call_soon(a)
    loop.call_soon(b)
    loop.call_soon(seen.append, "c")
    loop.call_soon(loop.stop)
    loop.run_forever()
    # stop() ends the loop after the current batch: a2/b2 were scheduled
    # during the batch, so they wait for the next run.
    assert seen == ["a", "b", "c"]
    loop.call_soon(loop.stop)
    loop.run_forever()
    assert seen == ["a", "b", "c", "a2", "b2"]


def test_call_soon_chains_interleave(loop):
    seen = []

    def chain(name, n):
        seen.append(f"{name}{n}")
        if n < 3:
            loop.call_soon(chain, name, n + 1)

    loop.call_soon(chain, "x", 0)
    loop.call_soon(chain, "y", 0)
    loop.run_until_complete(asyncio.sleep(0.01))
    assert seen == ["x0", "y0", "x1", "y1", "x2", "y2", "x3", "y3"]


@pytest.mark.parametrize("via", ["call_soon", "future_callback", "call_later"])
def test_finalizer_scheduling_a_callback_while_a_handle_is_freed(loop, via):
    # The last reference to an object with __del__ goes away when the handle
    # that held it is freed, and __del__ schedules a callback: that new
    # handle must be whole (a handle reused while still being torn down
    # would lose the fields cleared after it was handed out).
    ran = []

    class SchedulesOnDelete:
        def __del__(self):
            loop.call_soon(ran.append, "scheduled from __del__")
            fut = loop.create_future()
            fut.add_done_callback(lambda f: ran.append(f.result()))
            fut.set_result("future callback from __del__")

    def noop(*args):
        pass

    if via == "call_soon":
        loop.call_soon(noop, SchedulesOnDelete())
    elif via == "future_callback":
        fut = loop.create_future()
        holder = SchedulesOnDelete()
        fut.add_done_callback(lambda f, holder=holder: None)
        del holder
        fut.set_result(None)
        del fut
    else:
        loop.call_later(0, noop, SchedulesOnDelete())

    async def settle():
        for _ in range(5):
            await asyncio.sleep(0)

    loop.run_until_complete(settle())
    assert sorted(ran) == ["future callback from __del__", "scheduled from __del__"]


def test_stop_before_run_forever_runs_one_iteration(loop):
    seen = []
    loop.call_soon(seen.append, 1)
    loop.call_soon(lambda: loop.call_soon(seen.append, "later"))
    loop.stop()
    loop.run_forever()
    assert seen == [1]
    assert not loop.is_running()
    loop.stop()
    loop.run_forever()
    assert seen == [1, "later"]


def test_is_running_inside_and_outside(loop):
    seen = []

    def cb():
        seen.append(loop.is_running())
        seen.append(asyncio.get_running_loop() is loop)
        seen.append(asyncio.get_event_loop() is loop)
        loop.stop()

    loop.call_soon(cb)
    assert not loop.is_running()
    loop.run_forever()
    assert seen == [True, True, True]
    assert not loop.is_running()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_run_until_complete_returns_result_of_coroutine(loop):
    async def coro(x):
        await asyncio.sleep(0)
        return x * 2

    assert loop.run_until_complete(coro(21)) == 42


def test_run_until_complete_accepts_future(loop):
    fut = loop.create_future()
    loop.call_soon(fut.set_result, "done")
    assert loop.run_until_complete(fut) == "done"


def test_run_until_complete_propagates_exception(loop):
    async def boom():
        await asyncio.sleep(0)
        raise ZeroDivisionError("x")

    with pytest.raises(ZeroDivisionError, match="x"):
        loop.run_until_complete(boom())
    # The loop is reusable after a failure.
    assert loop.run_until_complete(asyncio.sleep(0, "again")) == "again"


def test_run_until_complete_stopped_early(loop):
    fut = loop.create_future()
    loop.call_soon(loop.stop)
    with pytest.raises(RuntimeError, match=r"Event loop stopped before Future completed\."):
        loop.run_until_complete(fut)
    fut.cancel()


def test_run_until_complete_cancelled_task_raises_cancelled(loop):
    async def wait_forever():
        await loop.create_future()

    task = loop.create_task(wait_forever())
    loop.call_soon(task.cancel)
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)
    assert task.cancelled()


def test_run_forever_twice_sequentially(loop):
    count = []
    for _ in range(3):
        loop.call_soon(count.append, 1)
        loop.call_soon(loop.stop)
        loop.run_forever()
    assert count == [1, 1, 1]


def test_close_is_idempotent_and_sets_closed(loop):
    loop.close()
    assert loop.is_closed()
    loop.close()
    assert loop.is_closed()


def test_time_is_monotonic_and_advances(loop):
    t0 = loop.time()
    m0 = time.monotonic()
    time.sleep(0.1)
    t1 = loop.time()
    m1 = time.monotonic()
    assert t1 >= t0
    assert t1 - t0 >= 0.095
    # The loop clock advances at the rate of the monotonic clock.
    assert abs((t1 - t0) - (m1 - m0)) < 0.02
    values = [loop.time() for _ in range(1000)]
    assert values == sorted(values)


def test_create_future_belongs_to_loop(loop):
    fut = loop.create_future()
    assert asyncio.isfuture(fut)
    assert fut.get_loop() is loop
    assert not fut.done()
    fut.cancel()


def test_get_running_loop_in_coroutine(loop):
    async def main():
        return asyncio.get_running_loop(), asyncio.get_event_loop()

    running, event_loop = loop.run_until_complete(main())
    assert running is loop
    assert event_loop is loop
    assert asyncio.events._get_running_loop() is None


def test_shutdown_asyncgens_finalizes_suspended_generators(loop):
    finalized = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            finalized.append(asyncio.get_running_loop() is loop)

    gen = agen()

    async def main():
        return await gen.__anext__()

    assert loop.run_until_complete(main()) == 1
    assert finalized == []
    loop.run_until_complete(loop.shutdown_asyncgens())
    assert finalized == [True]


def test_garbage_collected_asyncgen_is_finalized_in_loop(loop):
    finalized = []

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            await asyncio.sleep(0)  # needs the loop, not just close()
            finalized.append("closed")

    async def main():
        g = agen()
        assert await g.__anext__() == 1
        del g
        gc.collect()
        for _ in range(10):
            await asyncio.sleep(0)
            if finalized:
                break

    loop.run_until_complete(main())
    assert finalized == ["closed"]


_FINALIZED_AS_ITS_FRAME_IS_CLEARED = """
import asyncio, sys
import corun

closed = []

async def agen():
    try:
        yield 1
        yield 2
    finally:
        await asyncio.sleep(0)
        closed.append(True)

async def main():
    iterator = aiter(agen())
    await anext(iterator)
    # Returning drops the generator while CPython clears this frame: the
    # finalizer runs then, and debug mode takes the stack for its handle.

factory = corun.new_event_loop if sys.argv[1] == "corun" else asyncio.new_event_loop
with asyncio.Runner(debug=True, loop_factory=factory) as runner:
    runner.run(main())
    runner.run(asyncio.sleep(0))
print(closed)
"""


@pytest.mark.parametrize("which", ["corun", "asyncio"])
def test_asyncgen_finalized_while_its_frame_is_cleared_in_debug_mode(which):
    # The finalizer called from compiled code had no frame of its own, and on
    # 3.14 debug mode's stack walk read the half-cleared one: a segfault
    # (websockets' suite found it).
    run = subprocess.run(
        [sys.executable, "-X", "dev", "-c", _FINALIZED_AS_ITS_FRAME_IS_CLEARED, which],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "[True]", run.stdout + run.stderr[-2000:]


def test_close_with_pending_callbacks_drops_them(loop):
    seen = []
    loop.call_soon(seen.append, 1)
    loop.call_later(10, seen.append, 2)
    loop.close()
    assert loop.is_closed()
    assert seen == []
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.call_soon(seen.append, 3)


def test_shutdown_asyncgens_reports_aclose_errors(loop, errors):
    async def agen():
        try:
            yield 1
        finally:
            raise ValueError("in aclose")

    holder = []

    async def main():
        g = agen()  # first iterated inside the loop: tracked by its hooks
        holder.append(g)
        return await g.__anext__()

    assert loop.run_until_complete(main()) == 1
    loop.run_until_complete(loop.shutdown_asyncgens())
    ctx = errors.pop("an error occurred during closing of asynchronous generator")
    assert isinstance(ctx["exception"], ValueError)
    assert ctx["asyncgen"] is holder[0]


def test_unclosed_loop_resource_warning(loop_factory):
    import warnings

    lp = loop_factory()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del lp
        gc.collect()
    assert any(
        issubclass(w.category, ResourceWarning) and "unclosed event loop" in str(w.message)
        for w in caught
    ), [str(w.message) for w in caught]


def test_cancel_handles_after_close(loop):
    h = loop.call_soon(lambda: None)
    t = loop.call_later(10, lambda: None)
    loop.close()
    h.cancel()
    t.cancel()
    assert h.cancelled() and t.cancelled()


def test_close_shuts_down_default_executor(loop):
    import threading

    worker = loop.run_until_complete(loop.run_in_executor(None, threading.current_thread))
    assert worker.is_alive()
    loop.close()
    worker.join(5)
    assert not worker.is_alive()


@pytest.mark.timeout(30)
def test_many_tasks_scale(loop):
    """A smoke test for accidentally quadratic paths (asyncio: ~0.2 s)."""
    n = 5000

    async def worker(i):
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return i

    async def main():
        return await asyncio.gather(*(worker(i) for i in range(n)))

    start = time.monotonic()
    assert loop.run_until_complete(main()) == list(range(n))
    assert time.monotonic() - start < 10
