"""The exception handler API: call_exception_handler and friends."""

from __future__ import annotations

import asyncio
import logging

import pytest


def test_callback_exception_reported_with_context_and_loop_continues(loop, errors):
    seen = []
    exc = RuntimeError("cb failed")

    def bad():
        raise exc

    handle = loop.call_soon(bad)
    loop.call_soon(seen.append, "after")
    loop.run_until_complete(asyncio.sleep(0))
    assert seen == ["after"]
    ctx = errors.pop("Exception in callback")
    assert ctx["exception"] is exc
    assert ctx["handle"] is handle
    assert errors.loops == [] and errors.contexts == []


def test_handler_receives_the_loop(loop):
    calls = []
    loop.set_exception_handler(lambda lp, ctx: calls.append((lp, ctx["message"])))
    loop.call_soon(lambda: 1 / 0)
    loop.run_until_complete(asyncio.sleep(0))
    assert len(calls) == 1
    assert calls[0][0] is loop
    assert calls[0][1].startswith("Exception in callback")


def test_timer_callback_exception_reported(loop, errors):
    def bad():
        raise OSError("timer failed")

    handle = loop.call_later(0.001, bad)
    loop.run_until_complete(asyncio.sleep(0.01))
    ctx = errors.pop("Exception in callback")
    assert isinstance(ctx["exception"], OSError)
    assert ctx["handle"] is handle


def test_set_get_exception_handler(loop, errors):
    assert loop.get_exception_handler() is errors

    def handler(lp, ctx):
        pass

    loop.set_exception_handler(handler)
    assert loop.get_exception_handler() is handler
    loop.set_exception_handler(None)
    assert loop.get_exception_handler() is None


@pytest.mark.parametrize("bad", [1, "handler", object()])
def test_set_exception_handler_rejects_non_callable(loop, bad, errors):
    with pytest.raises(TypeError):
        loop.set_exception_handler(bad)
    assert loop.get_exception_handler() is errors


def test_call_exception_handler_passes_context(loop, errors):
    ctx = {"message": "custom message", "extra": 42}
    loop.call_exception_handler(ctx)
    got = errors.pop("custom message")
    assert got["extra"] == 42


def test_default_handler_logs_to_asyncio_logger(loop, caplog):
    loop.set_exception_handler(None)
    exc = ValueError("logged")

    def bad():
        raise exc

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_soon(bad)
        loop.run_until_complete(asyncio.sleep(0))
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    rec = records[0]
    assert rec.levelno == logging.ERROR
    assert "Exception in callback" in rec.getMessage()
    assert rec.exc_info is not None and rec.exc_info[1] is exc


def test_default_exception_handler_direct_call(loop, caplog):
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.default_exception_handler({"message": "plain message", "thing": "value-xyz"})
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    text = records[0].getMessage()
    assert "plain message" in text
    # Extra context keys are rendered too.
    assert "value-xyz" in text
    assert not records[0].exc_info


def test_call_exception_handler_without_custom_handler_logs(loop, caplog):
    loop.set_exception_handler(None)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        try:
            raise KeyError("k")
        except KeyError as e:
            loop.call_exception_handler({"message": "boom happened", "exception": e})
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert len(records) == 1
    assert "boom happened" in records[0].getMessage()
    assert isinstance(records[0].exc_info[1], KeyError)


def test_handler_that_raises_is_logged_and_loop_continues(loop, caplog):
    def bad_handler(lp, ctx):
        raise ZeroDivisionError("handler broke")

    loop.set_exception_handler(bad_handler)
    seen = []
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.call_soon(lambda: 1 / 0)
        loop.call_soon(seen.append, "next")
        loop.run_until_complete(asyncio.sleep(0))
    assert seen == ["next"]
    records = [r for r in caplog.records if r.name == "asyncio"]
    assert records, "failure of the custom handler must be logged"
    text = "\n".join(r.getMessage() for r in records)
    assert "Unhandled error in exception handler" in text
    assert any(r.exc_info and isinstance(r.exc_info[1], ZeroDivisionError) for r in records)


def test_keyboard_interrupt_in_callback_propagates(loop, errors):
    seen = []

    def interrupt():
        raise KeyboardInterrupt

    loop.call_soon(interrupt)
    loop.call_soon(seen.append, "later")
    with pytest.raises(KeyboardInterrupt):
        loop.run_forever()
    assert not loop.is_running()
    assert errors.contexts == []
    # The loop is usable afterwards; the remaining callback still runs.
    loop.run_until_complete(asyncio.sleep(0))
    assert seen == ["later"]


def test_system_exit_in_task_propagates(loop, errors):
    async def main():
        await asyncio.sleep(0)
        raise SystemExit(7)

    with pytest.raises(SystemExit) as info:
        loop.run_until_complete(main())
    assert info.value.code == 7
    assert not loop.is_running()
    assert asyncio.events._get_running_loop() is None
    assert errors.contexts == []


def test_awaited_task_exception_is_not_reported(loop, errors):
    async def fail():
        raise ValueError("handled")

    async def main():
        with pytest.raises(ValueError):
            await loop.create_task(fail())

    loop.run_until_complete(main())
    assert errors.contexts == []


def test_done_callback_exception_reported_others_still_run(loop, errors):
    fut = loop.create_future()
    seen = []

    def bad(f):
        raise RuntimeError("done cb")

    fut.add_done_callback(bad)
    fut.add_done_callback(lambda f: seen.append(f.result()))
    fut.set_result(5)
    loop.run_until_complete(asyncio.sleep(0))
    assert seen == [5]
    ctx = errors.pop("Exception in callback")
    assert isinstance(ctx["exception"], RuntimeError)


def test_many_failures_each_reported(loop, errors):
    for i in range(20):
        loop.call_soon(lambda i=i: (_ for _ in ()).throw(IndexError(i)))
    loop.run_until_complete(asyncio.sleep(0))
    got = errors.pop_all()
    assert [c["exception"].args[0] for c in got] == list(range(20))
