"""Debug mode: slow callbacks, thread checks, source tracebacks, origins."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest


def test_debug_defaults_off_and_toggles(loop):
    # -X dev or PYTHONASYNCIODEBUG (unless -E), exactly like asyncio decides
    expected = asyncio.coroutines._is_debug_mode()
    assert loop.get_debug() is expected
    loop.set_debug(True)
    assert loop.get_debug() is True
    loop.set_debug(False)
    assert loop.get_debug() is False


def test_slow_callback_duration_default_and_settable(loop):
    assert loop.slow_callback_duration == pytest.approx(0.1)
    loop.slow_callback_duration = 0.02
    assert loop.slow_callback_duration == pytest.approx(0.02)


def slow_function_for_test():
    time.sleep(0.06)


def test_slow_callback_warning(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 0.03
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.call_soon(slow_function_for_test)
        loop.call_soon(lambda: None)  # fast: must not be reported
        loop.run_until_complete(asyncio.sleep(0))
    records = [r for r in caplog.records if r.name == "asyncio" and r.levelno == logging.WARNING]
    assert len(records) == 1, [r.getMessage() for r in records]
    text = records[0].getMessage()
    assert text.startswith("Executing ")
    assert "slow_function_for_test" in text
    assert "took" in text and "seconds" in text


def test_slow_callback_threshold_is_respected(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 10.0
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.call_soon(slow_function_for_test)
        loop.run_until_complete(asyncio.sleep(0))
    assert not [r for r in caplog.records if r.name == "asyncio"]


def test_slow_callback_not_reported_without_debug(loop, caplog):
    loop.set_debug(False)
    loop.slow_callback_duration = 0.01
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.call_soon(slow_function_for_test)
        loop.run_until_complete(asyncio.sleep(0))
    assert not [r for r in caplog.records if r.name == "asyncio"]


def test_slow_task_step_names_the_task(loop, caplog):
    loop.set_debug(True)
    loop.slow_callback_duration = 0.03

    async def blocking():
        await asyncio.sleep(0)
        time.sleep(0.06)

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        loop.run_until_complete(loop.create_task(blocking(), name="slowpoke-task"))
    texts = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert any("slowpoke-task" in t and "took" in t for t in texts), texts


@pytest.mark.parametrize("method", ["call_soon", "call_later", "call_at"])
def test_non_threadsafe_call_from_other_thread_raises_in_debug(loop, method):
    loop.set_debug(True)
    outcome = {}

    def worker():
        try:
            if method == "call_soon":
                loop.call_soon(lambda: None)
            elif method == "call_later":
                loop.call_later(1, lambda: None)
            else:
                loop.call_at(loop.time() + 1, lambda: None)
        except BaseException as exc:
            outcome["exc"] = exc
        loop.call_soon_threadsafe(loop.stop)

    loop.call_soon(threading.Thread(target=worker).start)
    loop.run_forever()
    exc = outcome.get("exc")
    assert isinstance(exc, RuntimeError), outcome
    assert "Non-thread-safe operation" in str(exc)


def test_non_threadsafe_call_from_other_thread_allowed_without_debug(loop):
    loop.set_debug(False)
    outcome = {}
    stopped = threading.Event()

    def worker():
        try:
            outcome["handle"] = loop.call_soon(lambda: None)
        except BaseException as exc:  # pragma: no cover - would be a bug
            outcome["exc"] = exc
        stopped.set()
        loop.call_soon_threadsafe(loop.stop)

    loop.call_soon(threading.Thread(target=worker).start)
    loop.run_forever()
    stopped.wait(5)
    loop.run_until_complete(asyncio.sleep(0))
    assert "exc" not in outcome


def _frames_named(tb, name):
    return [f for f in tb if f.name == name]


def test_source_traceback_in_debug(loop):
    loop.set_debug(True)
    handle = loop.call_soon(lambda: None)
    timer = loop.call_later(10, lambda: None)
    fut = loop.create_future()
    me = "test_source_traceback_in_debug"
    for obj in (handle, timer, fut):
        tb = obj._source_traceback
        assert tb, obj
        assert _frames_named(tb, me), (obj, tb)
    # The handle's traceback ends at the caller of call_soon.
    assert handle._source_traceback[-1].name == me
    assert timer._source_traceback[-1].name == me
    timer.cancel()
    fut.cancel()
    handle.cancel()

    async def coro():
        pass

    task = loop.create_task(coro())
    assert _frames_named(task._source_traceback, me)
    loop.run_until_complete(task)


def test_no_source_traceback_without_debug(loop):
    loop.set_debug(False)
    handle = loop.call_soon(lambda: None)
    fut = loop.create_future()
    assert getattr(handle, "_source_traceback", None) is None
    assert getattr(fut, "_source_traceback", None) is None
    handle.cancel()
    fut.cancel()


def test_coroutine_origin_tracking_while_running_in_debug(loop):
    before = sys.get_coroutine_origin_tracking_depth()
    loop.set_debug(True)

    async def probe():
        return sys.get_coroutine_origin_tracking_depth()

    assert loop.run_until_complete(probe()) > 0
    assert sys.get_coroutine_origin_tracking_depth() == before
    loop.set_debug(False)
    assert loop.run_until_complete(probe()) == before


async def never_awaited_coro():
    pass


def make_and_drop_coroutine():
    never_awaited_coro()  # deliberately not awaited


def test_never_awaited_warning_shows_origin(loop):
    loop.set_debug(True)

    async def main():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            make_and_drop_coroutine()
            gc.collect()
        return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]

    messages = loop.run_until_complete(main())
    assert any("was never awaited" in m for m in messages), messages
    msg = next(m for m in messages if "was never awaited" in m)
    assert "Coroutine created at" in msg
    assert "make_and_drop_coroutine" in msg


def test_debug_callback_error_context_has_source_traceback(loop, errors):
    loop.set_debug(True)
    handle = loop.call_soon(lambda: 1 / 0)
    loop.run_until_complete(asyncio.sleep(0))
    ctx = errors.pop("Exception in callback")
    assert ctx["handle"] is handle
    assert ctx.get("source_traceback")


SUBPROCESS_PROBE = textwrap.dedent(
    """
    import asyncio, sys
    kind = sys.argv[1]
    if kind == "corun":
        import corun
        loop = corun.new_event_loop()
        assert isinstance(loop, corun.EventLoop)
    else:
        loop = asyncio.new_event_loop()
    print(loop.get_debug())
    loop.close()
    """
)


@pytest.mark.parametrize(
    "flags,env,expected",
    [
        ([], {}, "False"),
        ([], {"PYTHONASYNCIODEBUG": "1"}, "True"),
        (["-X", "dev"], {}, "True"),
    ],
    ids=["default", "PYTHONASYNCIODEBUG", "dev-mode"],
)
def test_debug_from_environment(loop_kind, subprocess_env, flags, env, expected):
    full_env = dict(subprocess_env)
    full_env.update(env)
    proc = subprocess.run(
        [sys.executable, *flags, "-c", SUBPROCESS_PROBE, loop_kind],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected
