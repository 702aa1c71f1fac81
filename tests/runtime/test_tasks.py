"""Tasks: lifecycle, cancellation at every await point, introspection, and
the asyncio combinators (TaskGroup, timeout, wait_for, gather, shield, wait,
as_completed) running on the loop's own Task class."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import io
import sys
import types

import pytest


def run(loop, coro):
    return loop.run_until_complete(coro)


# ---------------------------------------------------------------- basics


def test_create_task_type_and_result(loop, task_cls):
    async def coro():
        await asyncio.sleep(0)
        return type(asyncio.current_task())

    task = loop.create_task(coro())
    assert type(task) is task_cls
    assert asyncio.isfuture(task)
    assert task.get_loop() is loop
    assert run(loop, task) is task_cls
    assert task.done() and task.result() is task_cls


@pytest.mark.corun_only
def test_corun_tasks_are_own_class(loop):
    import corun

    async def coro():
        return asyncio.current_task()

    task = loop.create_task(coro())
    assert run(loop, task) is task
    assert type(task) is corun.Task
    assert not issubclass(type(task), asyncio.Task)  # own class, not a subclass
    assert isinstance(task, asyncio.Task)  # yet libraries' isinstance checks pass
    assert type(asyncio.ensure_future(coro(), loop=loop)) is corun.Task
    run(loop, asyncio.sleep(0))


def test_task_constructor(loop, task_cls):
    async def coro():
        return 5

    task = task_cls(coro(), loop=loop, name="made-directly")
    assert task.get_name() == "made-directly"
    assert run(loop, task) == 5


def test_names(loop):
    async def coro():
        await asyncio.sleep(0)

    t1 = loop.create_task(coro())
    assert t1.get_name().startswith("Task-")
    t2 = loop.create_task(coro(), name="custom")
    assert t2.get_name() == "custom"
    t2.set_name("renamed")
    assert t2.get_name() == "renamed"
    t2.set_name(123)
    assert t2.get_name() == "123"
    assert "renamed" not in repr(t2) and "123" in repr(t2)
    run(loop, asyncio.gather(t1, t2))


def test_default_names_are_unique(loop):
    async def coro():
        pass

    tasks = [loop.create_task(coro()) for _ in range(5)]
    assert len({t.get_name() for t in tasks}) == 5
    run(loop, asyncio.gather(*tasks))


def test_default_names_are_numbered_at_creation_though_made_when_asked(loop):
    # The text "Task-N" is made on the first get_name() (or repr), but N is
    # the task's place in the order of creation, not of asking.
    async def coro():
        pass

    first, second, third = (loop.create_task(coro()) for _ in range(3))
    later = int(third.get_name().removeprefix("Task-"))
    assert second.get_name() == f"Task-{later - 1}"
    assert f"name='Task-{later - 2}'" in repr(first)
    assert first.get_name() is first.get_name()  # made once
    second.set_name("renamed")
    assert second.get_name() == "renamed"
    run(loop, asyncio.gather(first, second, third))


def test_get_coro(loop):
    async def coro():
        pass

    c = coro()
    task = loop.create_task(c)
    assert task.get_coro() is c
    run(loop, task)


def test_task_exception_propagates_to_awaiter(loop):
    async def fail():
        await asyncio.sleep(0)
        raise LookupError("task failed")

    async def main():
        task = loop.create_task(fail())
        with pytest.raises(LookupError, match="task failed"):
            await task
        return task

    task = run(loop, main())
    assert isinstance(task.exception(), LookupError)


def test_task_runs_in_given_context(loop):
    var = contextvars.ContextVar("v", default="default")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "ctx-value")

    async def coro():
        before = var.get()
        var.set("set-inside")
        await asyncio.sleep(0)
        return before, var.get()

    assert run(loop, loop.create_task(coro(), context=ctx)) == ("ctx-value", "set-inside")
    assert ctx[var] == "set-inside"
    assert var.get() == "default"


def test_task_copies_current_context(loop):
    var = contextvars.ContextVar("v", default="default")

    async def child():
        seen = var.get()
        var.set("child-change")
        return seen

    async def parent():
        var.set("parent")
        result = await loop.create_task(child())
        return result, var.get()

    assert run(loop, parent()) == ("parent", "parent")


def test_sleep_zero_interleaves_tasks(loop):
    order = []

    async def worker(name):
        for i in range(3):
            order.append(f"{name}{i}")
            await asyncio.sleep(0)

    async def main():
        await asyncio.gather(worker("a"), worker("b"))

    run(loop, main())
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_current_task_and_all_tasks(loop, task_cls):
    seen = {}

    async def child(ev):
        await ev.wait()

    async def main():
        me = asyncio.current_task()
        seen["me_type"] = type(me)
        ev = asyncio.Event()
        c = loop.create_task(child(ev))
        await asyncio.sleep(0)
        seen["all"] = asyncio.all_tasks()
        seen["all_loop"] = asyncio.all_tasks(loop)
        ev.set()
        await c
        seen["after"] = asyncio.all_tasks()
        return me, c

    def cb():
        seen["in_callback"] = asyncio.current_task()

    loop.call_soon(cb)
    me, c = run(loop, main())
    assert seen["me_type"] is task_cls
    assert seen["all"] == {me, c}
    assert seen["all_loop"] == {me, c}
    assert seen["after"] == {me}
    assert seen["in_callback"] is None
    assert asyncio.current_task(loop) is None
    assert asyncio.all_tasks(loop) == set()


def test_task_on_closed_loop_raises(loop):
    async def coro():
        pass

    loop.close()
    c = coro()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        loop.create_task(c)
    c.close()


def test_task_factory(loop, task_cls):
    made = []

    def factory(lp, coro, **kwargs):
        made.append((lp, kwargs))
        return task_cls(coro, loop=lp, **kwargs)

    assert loop.get_task_factory() is None
    loop.set_task_factory(factory)
    assert loop.get_task_factory() is factory

    async def coro():
        return asyncio.current_task().get_name()

    assert run(loop, loop.create_task(coro(), name="via-factory")) == "via-factory"
    assert made and made[0][0] is loop
    loop.set_task_factory(None)
    assert loop.get_task_factory() is None
    with pytest.raises(TypeError):
        loop.set_task_factory(1)


# ---------------------------------------------------------------- cancellation


def test_cancel_during_sleep(loop):
    state = []

    async def sleeper():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            state.append("cancelled")
            raise

    async def main():
        t = loop.create_task(sleeper())
        await asyncio.sleep(0)
        assert t.cancel() is True
        with pytest.raises(asyncio.CancelledError):
            await t
        return t

    t = run(loop, main())
    assert t.cancelled()
    assert state == ["cancelled"]


def test_cancel_while_awaiting_future_cancels_the_future(loop):
    fut = loop.create_future()

    async def waiter():
        await fut

    async def main():
        t = loop.create_task(waiter())
        await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    run(loop, main())
    assert fut.cancelled()


def test_cancel_nested_coroutines_unwinds_all_frames(loop):
    unwound = []

    async def level3():
        try:
            await loop.create_future()
        finally:
            unwound.append(3)

    async def level2():
        try:
            await level3()
        finally:
            unwound.append(2)

    async def level1():
        try:
            await level2()
        finally:
            unwound.append(1)

    async def main():
        t = loop.create_task(level1())
        await asyncio.sleep(0)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        return t

    assert run(loop, main()).cancelled()
    assert unwound == [3, 2, 1]


def test_cancel_before_first_step_never_runs_body(loop):
    ran = []

    async def body():
        ran.append(True)

    async def main():
        t = loop.create_task(body())
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        return t

    assert run(loop, main()).cancelled()
    assert ran == []


def test_cancel_swallowed_task_completes_normally(loop):
    async def stubborn():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "swallowed"

    async def main():
        t = loop.create_task(stubborn())
        await asyncio.sleep(0)
        t.cancel()
        return await t, t

    result, t = run(loop, main())
    assert result == "swallowed"
    assert not t.cancelled()
    assert t.cancelling() == 1


def test_cancel_with_message(loop):
    inside = []

    async def victim():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError as exc:
            inside.append(exc.args)
            raise

    async def main():
        t = loop.create_task(victim())
        await asyncio.sleep(0)
        t.cancel(msg="stop it")
        try:
            await t
        except asyncio.CancelledError as exc:
            return exc.args, t

    outer_args, t = run(loop, main())
    assert inside == [("stop it",)]
    assert outer_args == ("stop it",)
    assert t.cancelled()


def test_cancel_done_task_returns_false(loop):
    async def quick():
        return 1

    t = loop.create_task(quick())
    run(loop, t)
    assert t.cancel() is False
    assert not t.cancelled()
    assert t.cancelling() == 0


def test_cancelling_and_uncancel(loop):
    async def victim():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            counts = [task.cancelling()]
            counts.append(task.uncancel())
            counts.append(task.uncancel())
            counts.append(task.cancelling())
            return counts

    async def main():
        t = loop.create_task(victim())
        await asyncio.sleep(0)
        assert t.cancelling() == 0
        t.cancel()
        t.cancel()
        assert t.cancelling() == 2
        return await t

    assert run(loop, main()) == [2, 1, 0, 0]


def test_cancel_then_uncancel_before_first_step(loop):
    """Python < 3.13: uncancel() only decrements the counter, the pending
    cancellation still happens. 3.13 made it rescind the request at zero."""

    async def body():
        return "ran"

    task = loop.create_task(body())
    assert task.cancel() is True
    assert task.uncancel() == 0
    if sys.version_info < (3, 13):
        with pytest.raises(asyncio.CancelledError):
            run(loop, task)
        assert task.cancelled()
    else:
        assert run(loop, task) == "ran"


def test_cancel_after_uncancel_can_be_requested_again(loop):
    async def victim():
        caught = 0
        for _ in range(2):
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                caught += 1
                asyncio.current_task().uncancel()
        return caught

    async def main():
        t = loop.create_task(victim())
        await asyncio.sleep(0)
        t.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        t.cancel()
        return await t

    assert run(loop, main()) == 2


def test_shield_protects_inner_task(loop):
    inner_done = []

    async def inner():
        await asyncio.sleep(0.01)
        inner_done.append(True)
        return "inner result"

    async def outer(inner_task):
        return await asyncio.shield(inner_task)

    async def main():
        it = loop.create_task(inner())
        ot = loop.create_task(outer(it))
        await asyncio.sleep(0)
        ot.cancel()
        with pytest.raises(asyncio.CancelledError):
            await ot
        assert not it.done()
        return await it

    assert run(loop, main()) == "inner result"
    assert inner_done == [True]


def test_shield_of_cancelled_inner_cancels_outer(loop):
    async def main():
        inner = loop.create_future()
        shielded = asyncio.shield(inner)
        inner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await shielded

    run(loop, main())


def test_cancelled_error_not_swallowed_by_except_exception(loop):
    async def victim():
        try:
            await asyncio.sleep(60)
        except Exception:  # CancelledError is a BaseException
            return "wrongly caught"

    async def main():
        t = loop.create_task(victim())
        await asyncio.sleep(0)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        return t

    assert run(loop, main()).cancelled()


# ---------------------------------------------------------------- introspection


async def suspended_here(fut):
    await fut


def test_get_stack_and_print_stack(loop):
    fut = loop.create_future()
    task = loop.create_task(suspended_here(fut))
    run(loop, asyncio.sleep(0))
    stack = task.get_stack()
    assert len(stack) >= 1
    assert stack[0].f_code.co_name == "suspended_here"
    buf = io.StringIO()
    task.print_stack(file=buf)
    text = buf.getvalue()
    assert "Stack for" in text
    assert "suspended_here" in text
    fut.set_result(None)
    run(loop, task)
    assert task.get_stack() == []


def test_get_stack_of_failed_task_shows_traceback(loop):
    async def failing():
        raise ValueError("for the stack")

    task = loop.create_task(failing())
    run(loop, asyncio.sleep(0))
    stack = task.get_stack()
    # The C Task shows only the coroutine's frames; asyncio's pure-Python
    # Task (like corun's) also shows its own step frame first.
    assert stack[-1].f_code.co_name == "failing"
    buf = io.StringIO()
    task.print_stack(file=buf)
    assert "ValueError: for the stack" in buf.getvalue()
    task.exception()


def test_repr(loop):
    fut = loop.create_future()
    task = loop.create_task(suspended_here(fut), name="repr-me")
    run(loop, asyncio.sleep(0))
    r = repr(task)
    assert "pending" in r and "repr-me" in r and "suspended_here" in r
    fut.set_result(None)
    run(loop, task)
    assert "finished" in repr(task)


def test_task_exception_never_retrieved_is_reported(loop, errors):
    async def fail():
        raise KeyError("nobody looks")

    task = loop.create_task(fail())
    run(loop, asyncio.sleep(0))
    assert task.done()
    del task
    gc.collect()
    ctx = errors.pop("Task exception was never retrieved")
    assert isinstance(ctx["exception"], KeyError)
    assert "future" in ctx


def test_task_destroyed_but_pending_is_reported(loop, errors):
    async def stuck():
        await loop.create_future()

    task = loop.create_task(stuck(), name="doomed")
    run(loop, asyncio.sleep(0))
    assert not task.done()
    del task
    gc.collect()
    ctx = errors.pop("Task was destroyed but it is pending!")
    assert ctx["task"].get_name() == "doomed"


def test_bad_yield_is_runtime_error(loop):
    @types.coroutine
    def bad():
        yield "not a future"

    async def main():
        await bad()

    with pytest.raises(RuntimeError, match="bad yield"):
        run(loop, main())


def test_task_awaiting_itself_is_runtime_error(loop):
    async def main():
        await asyncio.current_task()

    with pytest.raises(RuntimeError, match="cannot await on itself"):
        run(loop, main())


def test_non_coroutine_is_type_error(loop, task_cls):
    with pytest.raises(TypeError):
        loop.create_task(123)
    with pytest.raises(TypeError):
        task_cls(lambda: None, loop=loop)


def test_a_task_refused_by_its_constructor_is_freed_quietly(loop, task_cls):
    """A bad keyword argument leaves a half-made task: freeing it reports nothing.

    (corun's task used to raise from __del__ about an attribute never set,
    which Python printed as an unraisable exception.)
    """
    unraisable = []
    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        coro = asyncio.sleep(0)
        with pytest.raises(TypeError):
            task_cls(coro, loop=loop, no_such_argument=True)
        coro.close()
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert [str(u.exc_value) for u in unraisable] == []


@pytest.mark.corun_only
@pytest.mark.parametrize("eager", [False, True])
def test_a_context_that_is_not_a_context_is_refused(loop, eager):
    """Refused by the constructor, not by the first step (CPython gh-157301).

    Corun only: asyncio checks it from the releases that carry that fix
    (3.13.18, 3.14.10 and 3.15 here; not 3.11.7 or 3.12.1), and CPython's
    test_tasks checks both, under tests/conformance.
    """
    import corun

    async def main():
        coro = asyncio.sleep(0)
        with pytest.raises(TypeError, match=r"contextvars\.Context was expected, got str"):
            if eager and sys.version_info >= (3, 12):
                corun.Task(coro, loop=loop, context="not a context", eager_start=True)
            else:
                loop.create_task(coro, context="not a context")
        coro.close()
        await asyncio.sleep(0)  # the loop still runs
        return "usable"

    assert run(loop, main()) == "usable"


def test_set_result_on_task_is_not_allowed(loop):
    async def coro():
        await asyncio.sleep(0)

    task = loop.create_task(coro())
    with pytest.raises(RuntimeError):
        task.set_result(1)
    with pytest.raises(RuntimeError):
        task.set_exception(ValueError())
    run(loop, task)


# ---------------------------------------------------------------- combinators


def test_task_group_success(loop, task_cls):
    async def work(x):
        await asyncio.sleep(0.001 * x)
        return x * 10

    async def main():
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(work(i)) for i in range(5)]
        assert all(type(t) is task_cls for t in tasks)
        return [t.result() for t in tasks]

    assert run(loop, main()) == [0, 10, 20, 30, 40]


def test_task_group_failure_cancels_siblings(loop):
    cancelled = []

    async def sibling():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def failer():
        await asyncio.sleep(0.001)
        raise ValueError("group member failed")

    async def main():
        with pytest.raises(ExceptionGroup) as info:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(sibling())
                tg.create_task(sibling())
                tg.create_task(failer())
        return info.value

    eg = run(loop, main())
    assert [type(e) for e in eg.exceptions] == [ValueError]
    assert cancelled == [True, True]


def test_timeout_context_manager(loop):
    async def main():
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await asyncio.sleep(60)
        async with asyncio.timeout(1) as cm:
            await asyncio.sleep(0)
        assert not cm.expired()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(None) as cm2:
                cm2.reschedule(loop.time() + 0.01)
                await asyncio.sleep(60)
        assert cm2.expired()
        return "ok"

    assert run(loop, main()) == "ok"


def test_timeout_expires_and_task_is_not_left_cancelling(loop):
    async def main():
        try:
            async with asyncio.timeout(0.01) as cm:
                await asyncio.sleep(60)
        except TimeoutError:
            pass
        return cm.expired(), asyncio.current_task().cancelling()

    assert run(loop, main()) == (True, 0)


def test_wait_for(loop):
    inner_cancelled = []

    async def slow():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            inner_cancelled.append(True)
            raise

    async def fast():
        await asyncio.sleep(0)
        return "fast"

    async def main():
        assert await asyncio.wait_for(fast(), timeout=1) == "fast"
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow(), timeout=0.01)
        return "ok"

    assert run(loop, main()) == "ok"
    assert inner_cancelled == [True]


def test_gather(loop):
    async def val(x, delay):
        await asyncio.sleep(delay)
        return x

    async def bad():
        raise OSError("gathered")

    async def main():
        r = await asyncio.gather(val(1, 0.01), val(2, 0), val(3, 0.005))
        r2 = await asyncio.gather(val("a", 0), bad(), return_exceptions=True)
        return r, r2

    r, r2 = run(loop, main())
    assert r == [1, 2, 3]
    assert r2[0] == "a" and isinstance(r2[1], OSError)


def test_gather_cancel_propagates_to_children(loop):
    cancelled = []

    async def child(i):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    async def main():
        g = asyncio.gather(child(1), child(2))
        await asyncio.sleep(0)
        g.cancel()
        with pytest.raises(asyncio.CancelledError):
            await g

    run(loop, main())
    assert sorted(cancelled) == [1, 2]


def test_wait_first_completed_and_all(loop):
    async def val(x, delay):
        await asyncio.sleep(delay)
        return x

    async def main():
        fast = loop.create_task(val("fast", 0))
        slow = loop.create_task(val("slow", 0.05))
        done, pending = await asyncio.wait({fast, slow}, return_when=asyncio.FIRST_COMPLETED)
        assert done == {fast} and pending == {slow}
        done, pending = await asyncio.wait({slow}, timeout=0.001)
        assert done == set() and pending == {slow}
        done, pending = await asyncio.wait({fast, slow})
        assert done == {fast, slow} and pending == set()
        return "ok"

    assert run(loop, main()) == "ok"


def test_as_completed_order(loop):
    async def val(x, delay):
        await asyncio.sleep(delay)
        return x

    async def main():
        out = []
        for f in asyncio.as_completed([val("c", 0.03), val("a", 0.0), val("b", 0.015)]):
            out.append(await f)
        return out

    assert run(loop, main()) == ["a", "b", "c"]


def test_sync_primitives(loop):
    async def main():
        lock, ev, sem, cond = (
            asyncio.Lock(),
            asyncio.Event(),
            asyncio.Semaphore(2),
            asyncio.Condition(),
        )
        q: asyncio.Queue[int] = asyncio.Queue()
        order = []

        async def producer():
            for i in range(3):
                await q.put(i)
            async with lock:
                order.append("producer-locked")
            ev.set()
            async with cond:
                cond.notify_all()

        async def consumer():
            got = [await q.get() for _ in range(3)]
            await ev.wait()
            async with sem:
                order.append("consumer-sem")
            return got

        async def cond_waiter():
            async with cond:
                await cond.wait_for(ev.is_set)
            return "cond-ok"

        res = await asyncio.gather(consumer(), producer(), cond_waiter())
        return res[0], res[2], order

    got, cond_res, order = run(loop, main())
    assert got == [0, 1, 2]
    assert cond_res == "cond-ok"
    assert order == ["producer-locked", "consumer-sem"]
