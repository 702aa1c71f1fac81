"""The Future protocol (corun.Future on corun, asyncio.Future on asyncio)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import sys

import pytest


@pytest.fixture(params=["create_future", "constructor"])
def make_future(request, loop, future_cls):
    """Futures made both ways: loop.create_future() and Future(loop=loop)."""
    if request.param == "create_future":
        return loop.create_future
    return lambda: future_cls(loop=loop)


def drain(loop, n=3):
    async def go():
        for _ in range(n):
            await asyncio.sleep(0)

    loop.run_until_complete(go())


@pytest.mark.corun_only
def test_corun_future_types(loop):
    import corun

    fut = loop.create_future()
    assert type(fut) is corun.Future
    assert not issubclass(type(fut), asyncio.Future)  # own class, not a subclass
    assert isinstance(fut, asyncio.Future)  # yet libraries' isinstance checks pass
    assert asyncio.isfuture(corun.Future(loop=loop))
    assert corun.Future[int] is not None  # generic like asyncio.Future
    fut.cancel()


def test_isfuture_and_protocol(make_future, loop):
    fut = make_future()
    assert asyncio.isfuture(fut)
    assert fut.get_loop() is loop
    assert hasattr(fut, "_asyncio_future_blocking")
    assert asyncio.ensure_future(fut) is fut
    assert asyncio.wrap_future(fut) is fut
    fut.cancel()


def test_result_before_done_is_invalid_state(make_future):
    fut = make_future()
    assert not fut.done()
    with pytest.raises(asyncio.InvalidStateError):
        fut.result()
    with pytest.raises(asyncio.InvalidStateError):
        fut.exception()
    fut.cancel()


def test_set_result(make_future):
    fut = make_future()
    fut.set_result(42)
    assert fut.done() and not fut.cancelled()
    assert fut.result() == 42
    assert fut.exception() is None


def test_set_result_twice_is_invalid_state(make_future):
    fut = make_future()
    fut.set_result(1)
    with pytest.raises(asyncio.InvalidStateError):
        fut.set_result(2)
    with pytest.raises(asyncio.InvalidStateError):
        fut.set_exception(ValueError())
    assert fut.result() == 1


def test_set_exception_instance_and_class(make_future):
    fut = make_future()
    exc = KeyError("k")
    fut.set_exception(exc)
    assert fut.done()
    assert fut.exception() is exc
    with pytest.raises(KeyError) as info:
        fut.result()
    assert info.value is exc

    fut2 = make_future()
    fut2.set_exception(ValueError)  # a class is instantiated
    assert isinstance(fut2.exception(), ValueError)
    fut2.exception()


class _StopSubclass(StopIteration):
    pass


# 3.13 turned a StopIteration given to set_exception() into a RuntimeError
# (caused by it) that the future holds; 3.11 and 3.12 refuse one with a
# TypeError, and take a subclass of it as any other exception.
_STOP_BECOMES_RUNTIMEERROR = sys.version_info >= (3, 13)


@pytest.mark.parametrize("stop", [StopIteration, StopIteration()])
def test_set_exception_stop_iteration(make_future, stop):
    fut = make_future()
    if _STOP_BECOMES_RUNTIMEERROR:
        fut.set_exception(stop)
        exc = fut.exception()
        assert type(exc) is RuntimeError
        assert "StopIteration interacts badly" in str(exc)
        assert type(exc.__cause__) is StopIteration
        assert exc.__context__ is exc.__cause__
        with pytest.raises(RuntimeError):
            fut.result()
    else:
        with pytest.raises(TypeError, match="StopIteration interacts badly"):
            fut.set_exception(stop)
        assert not fut.done()
        fut.cancel()


def test_set_exception_stop_iteration_subclass(make_future):
    fut = make_future()
    stop = _StopSubclass()
    fut.set_exception(stop)
    exc = fut.exception()
    if _STOP_BECOMES_RUNTIMEERROR:
        assert type(exc) is RuntimeError
        assert exc.__cause__ is stop
    else:
        assert exc is stop


def test_set_exception_rejects_non_exception(make_future):
    fut = make_future()
    with pytest.raises(TypeError):
        fut.set_exception("not an exception")
    fut.cancel()


def test_cancel(make_future):
    fut = make_future()
    assert fut.cancel() is True
    assert fut.cancelled() and fut.done()
    assert fut.cancel() is False
    with pytest.raises(asyncio.CancelledError):
        fut.result()
    with pytest.raises(asyncio.CancelledError):
        fut.exception()
    with pytest.raises(asyncio.InvalidStateError):
        fut.set_result(1)


def test_cancel_with_message(make_future):
    fut = make_future()
    assert fut.cancel(msg="my reason")
    with pytest.raises(asyncio.CancelledError) as info:
        fut.result()
    assert info.value.args == ("my reason",)
    fut2 = make_future()
    fut2.cancel()
    with pytest.raises(asyncio.CancelledError) as info2:
        fut2.result()
    assert info2.value.args == ()


def test_cancel_done_future_returns_false(make_future):
    fut = make_future()
    fut.set_result(None)
    assert fut.cancel() is False
    assert not fut.cancelled()


def test_done_callbacks_are_scheduled_not_called_synchronously(make_future, loop):
    fut = make_future()
    seen = []
    fut.add_done_callback(lambda f: seen.append(("a", f)))
    fut.add_done_callback(lambda f: seen.append(("b", f)))
    fut.set_result(1)
    assert seen == []
    drain(loop)
    assert seen == [("a", fut), ("b", fut)]
    drain(loop)
    assert len(seen) == 2  # exactly once


def test_done_callback_on_already_done_future(make_future, loop):
    fut = make_future()
    fut.set_result(1)
    seen = []
    fut.add_done_callback(seen.append)
    assert seen == []
    drain(loop)
    assert seen == [fut]


def test_done_callback_context(make_future, loop):
    var = contextvars.ContextVar("v", default="default")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "from-ctx")
    fut = make_future()
    seen = []
    fut.add_done_callback(lambda f: seen.append(var.get()), context=ctx)
    var_token = var.set("at-add-time")
    fut.add_done_callback(lambda f: seen.append(var.get()))
    var.reset(var_token)
    fut.set_result(None)
    drain(loop)
    assert seen == ["from-ctx", "at-add-time"]


def test_remove_done_callback(make_future, loop):
    fut = make_future()
    seen = []

    def cb(f):
        seen.append("cb")

    def other(f):
        seen.append("other")

    fut.add_done_callback(cb)
    fut.add_done_callback(other)
    fut.add_done_callback(cb)
    assert fut.remove_done_callback(cb) == 2
    assert fut.remove_done_callback(cb) == 0
    fut.set_result(None)
    drain(loop)
    assert seen == ["other"]


def test_callbacks_run_on_cancel_and_exception(make_future, loop):
    f1, f2 = make_future(), make_future()
    seen = []
    f1.add_done_callback(lambda f: seen.append(("f1", f.cancelled())))
    f2.add_done_callback(lambda f: seen.append(("f2", type(f.exception()).__name__)))
    f1.cancel()
    f2.set_exception(OSError())
    drain(loop)
    assert seen == [("f1", True), ("f2", "OSError")]


def test_await_future(make_future, loop):
    fut = make_future()

    async def waiter():
        return await fut

    loop.call_soon(fut.set_result, "awaited")
    assert loop.run_until_complete(waiter()) == "awaited"


def test_await_future_exception_and_cancel(make_future, loop):
    f_exc, f_cancel = make_future(), make_future()

    async def waiter(f):
        try:
            await f
        except BaseException as exc:
            return exc

    loop.call_soon(f_exc.set_exception, ArithmeticError("arith"))
    loop.call_soon(f_cancel.cancel, "why")
    r1 = loop.run_until_complete(waiter(f_exc))
    r2 = loop.run_until_complete(waiter(f_cancel))
    assert isinstance(r1, ArithmeticError)
    assert isinstance(r2, asyncio.CancelledError)
    assert r2.args == ("why",)


def test_await_protocol_via_iter(make_future, loop):
    fut = make_future()
    it = fut.__await__()
    assert next(it) is fut  # yields itself while pending
    assert fut._asyncio_future_blocking is True
    fut._asyncio_future_blocking = False
    fut.set_result(9)
    with pytest.raises(StopIteration) as info:
        next(it)
    assert info.value.value == 9
    fut2 = make_future()
    fut2.set_result(3)
    gen = iter(fut2)  # __iter__ is __await__
    with pytest.raises(StopIteration) as info2:
        next(gen)
    assert info2.value.value == 3


@pytest.mark.parametrize("state", ["pending", "done"])
def test_await_iterator_throw_checks_its_arguments(make_future, state):
    # corun gives a pending future and a done one different iterators; both
    # must reject what generator.throw() rejects, and never crash on it.
    fut = make_future()
    if state == "done":
        fut.set_result(1)
    it = fut.__await__()
    with pytest.raises(TypeError):
        it.throw(list)
    it = fut.__await__()
    with pytest.raises(TypeError):
        it.throw(Exception, Exception("elephant"), 32)
    it = fut.__await__()
    with pytest.raises(ZeroDivisionError):
        it.throw(ZeroDivisionError("thrown"))


def test_await_done_future_raises_its_exception_and_marks_it_retrieved(loop, errors):
    fut = loop.create_future()
    fut.set_exception(KeyError("done before the await"))

    async def waiter(f):
        await f

    with pytest.raises(KeyError, match="done before the await"):
        loop.run_until_complete(waiter(fut))
    del fut
    gc.collect()
    assert errors.contexts == []


def test_repr_shows_state(make_future):
    f1, f2, f3 = make_future(), make_future(), make_future()
    assert "pending" in repr(f1)
    f2.set_result(12345)
    assert "finished" in repr(f2) and "12345" in repr(f2)
    f3.cancel()
    assert "cancelled" in repr(f3)
    f1.cancel()


def test_generic_alias(future_cls):
    alias = future_cls[int]
    assert alias.__origin__ is future_cls


def test_exception_never_retrieved_is_reported(make_future, errors, loop):
    fut = make_future()
    fut.set_exception(ValueError("lost"))
    del fut
    gc.collect()
    ctx = errors.pop("Future exception was never retrieved")
    assert isinstance(ctx["exception"], ValueError)
    assert "future" in ctx


def test_retrieved_exception_is_not_reported(make_future, errors):
    f1, f2 = make_future(), make_future()
    for f in (f1, f2):
        f.set_exception(ValueError("seen"))
    f1.exception()
    with pytest.raises(ValueError):
        f2.result()
    del f, f1, f2
    gc.collect()
    assert errors.contexts == []


def test_done_callback_retrieval_prevents_report(make_future, errors, loop):
    fut = make_future()
    fut.add_done_callback(lambda f: f.exception())
    fut.set_exception(ValueError())
    drain(loop)
    del fut
    gc.collect()
    assert errors.contexts == []


def test_future_from_closed_loop_still_usable(make_future, loop):
    fut = make_future()
    fut.set_result(1)
    loop.close()
    assert fut.result() == 1


def test_set_result_on_future_of_closed_loop_with_callbacks(make_future, loop):
    fut = make_future()
    fut.add_done_callback(lambda f: None)
    loop.close()
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        fut.set_result(1)


def test_call_soon_replaced_on_the_instance_schedules_done_callbacks(loop, future_cls):
    # Futures schedule their callbacks with loop.call_soon, as asyncio's do,
    # even where corun appends to its ready queue directly.
    scheduled = []
    real_call_soon = loop.call_soon

    def spy(callback, *args, context=None):
        scheduled.append(callback)
        return real_call_soon(callback, *args, context=context)

    loop.call_soon = spy
    fut = future_cls(loop=loop)
    seen = []
    fut.add_done_callback(seen.append)
    fut.set_result(1)
    assert scheduled == [seen.append]
    loop.run_until_complete(asyncio.sleep(0))
    assert seen == [fut]


def test_initializing_a_future_twice(make_future, loop):
    """3.15 refuses a second __init__; earlier versions start the future afresh."""
    fut = make_future()
    if sys.version_info >= (3, 15):
        with pytest.raises(RuntimeError, match="already initialized"):
            fut.__init__(loop=loop)
        assert fut.get_loop() is loop and not fut.done()
    else:
        fut.set_result(1)
        fut.__init__(loop=loop)
        assert not fut.done()
    fut.cancel()


# --- await: the compiled iterator's am_send slot (setup.py) ---------------------


def _am_send_slot(cls: type) -> int:
    """The address in ``cls``'s ``tp_as_async->am_send`` (0: none)."""
    import ctypes

    # PyTypeObject on 64-bit CPython 3.11 to 3.15: tp_as_async is the pointer
    # at byte 80; in PyAsyncMethods, am_send is the fourth pointer.
    as_async = ctypes.c_void_p.from_address(id(cls) + 80).value
    if not as_async:
        return 0
    return ctypes.c_void_p.from_address(as_async + 3 * 8).value or 0


@pytest.mark.corun_only
def test_awaiting_a_pending_future_resumes_through_am_send(loop):
    """Compiled, ``await`` returns the result with no StopIteration (setup.py's slot)."""
    import corun
    from corun.runtime.engine.futures import FutureIter

    assert sys.maxsize > 2**32
    assert bool(_am_send_slot(FutureIter)) == corun.COMPILED
    # The layout read is right: asyncio's Future iterator has the slot.
    assert _am_send_slot(type(asyncio.Future(loop=loop).__await__())) != 0
    raised: list[str] = []

    async def main() -> list[object]:
        got: list[object] = []
        for value in (7, None, (1, 2), StopIteration):
            fut = loop.create_future()
            loop.call_soon(fut.set_result, value)
            got.append(await fut)
        fut = loop.create_future()
        loop.call_soon(fut.set_exception, KeyError("k"))
        try:
            await fut
        except KeyError as exc:
            raised.append(repr(exc))
        return got

    assert loop.run_until_complete(main()) == [7, None, (1, 2), StopIteration]
    assert raised == ["KeyError('k')"]
