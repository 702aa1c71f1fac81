"""add_signal_handler / remove_signal_handler with real signals.

The loop fixture's teardown verifies that closing the loop restored the
signal dispositions and the wakeup fd.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest


def test_handler_called_with_args(loop):
    got = []

    def handler(*args):
        got.append((args, asyncio.get_running_loop() is loop))
        loop.stop()

    loop.add_signal_handler(signal.SIGUSR1, handler, "a", 2)
    loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
    loop.run_forever()
    assert got == [(("a", 2), True)]
    assert loop.remove_signal_handler(signal.SIGUSR1) is True


def test_handler_is_not_called_synchronously_from_the_signal(loop):
    """The handler runs as a loop callback, not inside the C signal handler."""
    order = []
    loop.add_signal_handler(signal.SIGUSR1, order.append, "handler")

    def send():
        os.kill(os.getpid(), signal.SIGUSR1)
        order.append("after-kill")

    loop.call_soon(send)
    loop.run_until_complete(asyncio.sleep(0.02))
    assert order == ["after-kill", "handler"]
    loop.remove_signal_handler(signal.SIGUSR1)


@pytest.mark.timeout(10)
def test_signal_from_thread_wakes_blocked_loop(loop):
    far = loop.call_later(60, lambda: None)
    got = []

    def handler():
        got.append(time.monotonic())
        loop.stop()

    loop.add_signal_handler(signal.SIGUSR2, handler)
    sent = []

    def worker():
        time.sleep(0.05)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGUSR2)

    t = threading.Thread(target=worker)
    t.start()
    loop.run_forever()
    t.join()
    far.cancel()
    assert got and got[0] - sent[0] < 1.0
    assert loop.remove_signal_handler(signal.SIGUSR2) is True


def test_signal_received_while_loop_not_running_is_handled_on_next_run(loop):
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "late")
    loop.run_until_complete(asyncio.sleep(0))
    os.kill(os.getpid(), signal.SIGUSR1)  # the loop is not running now
    assert got == []
    loop.run_until_complete(asyncio.sleep(0.01))
    assert got == ["late"]
    assert loop.remove_signal_handler(signal.SIGUSR1) is True


def test_two_signals_two_handlers(loop):
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "usr1")
    loop.add_signal_handler(signal.SIGUSR2, got.append, "usr2")

    async def main():
        os.kill(os.getpid(), signal.SIGUSR2)
        await asyncio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.sleep(0.01)

    loop.run_until_complete(main())
    assert got == ["usr2", "usr1"]
    assert loop.remove_signal_handler(signal.SIGUSR1) is True
    assert loop.remove_signal_handler(signal.SIGUSR2) is True


def test_add_again_replaces_handler(loop):
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, "old")
    loop.add_signal_handler(signal.SIGUSR1, got.append, "new")
    loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
    loop.run_until_complete(asyncio.sleep(0.02))
    assert got == ["new"]
    loop.remove_signal_handler(signal.SIGUSR1)


def test_remove_signal_handler_return_values_and_restores_default(loop):
    assert loop.remove_signal_handler(signal.SIGUSR1) is False
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    assert signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, signal.SIG_IGN, None)
    assert loop.remove_signal_handler(signal.SIGUSR1) is True
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert loop.remove_signal_handler(signal.SIGUSR1) is False


def test_remove_sigint_restores_default_int_handler(loop):
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not at its default handler in this process")
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    assert loop.remove_signal_handler(signal.SIGINT) is True
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_removed_handler_is_not_called(loop):
    got = []
    loop.add_signal_handler(signal.SIGUSR1, got.append, 1)
    loop.remove_signal_handler(signal.SIGUSR1)
    # Ignore the signal so the test process survives the kill.
    old = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
        loop.run_until_complete(asyncio.sleep(0.01))
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert got == []


def test_close_removes_signal_handlers(loop):
    loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    loop.add_signal_handler(signal.SIGUSR2, lambda: None)
    loop.close()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL


@pytest.mark.parametrize("sig", ["SIGUSR1", 1.5, None])
def test_non_int_signal_is_type_error(loop, sig):
    with pytest.raises(TypeError):
        loop.add_signal_handler(sig, lambda: None)
    with pytest.raises(TypeError):
        loop.remove_signal_handler(sig)


@pytest.mark.parametrize("sig", [-1, 0, 10_000])
def test_invalid_signal_number_is_value_error(loop, sig):
    with pytest.raises(ValueError):
        loop.add_signal_handler(sig, lambda: None)
    with pytest.raises(ValueError):
        loop.remove_signal_handler(sig)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP])
def test_uncatchable_signal_is_runtime_error(loop, sig):
    with pytest.raises(RuntimeError):
        loop.add_signal_handler(sig, lambda: None)
    assert loop.remove_signal_handler(sig) is False


def test_coroutine_function_handler_is_type_error(loop):
    async def handler():
        pass

    with pytest.raises(TypeError):
        loop.add_signal_handler(signal.SIGUSR1, handler)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_add_signal_handler_from_non_main_thread(make_loop):
    outcome = {}

    def worker():
        thread_loop = make_loop()
        try:
            thread_loop.add_signal_handler(signal.SIGUSR1, lambda: None)
        except BaseException as exc:
            outcome["exc"] = exc
        finally:
            thread_loop.close()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert isinstance(outcome.get("exc"), RuntimeError), outcome
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_add_signal_handler_on_closed_loop(loop):
    loop.close()
    with pytest.raises(RuntimeError):
        loop.add_signal_handler(signal.SIGUSR1, lambda: None)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_signal_handler_exception_is_reported(loop, errors):
    def handler():
        raise ValueError("in signal handler")

    loop.add_signal_handler(signal.SIGUSR1, handler)
    loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
    assert loop.run_until_complete(asyncio.sleep(0.02, "alive")) == "alive"
    ctx = errors.pop("Exception in callback")
    assert isinstance(ctx["exception"], ValueError)
    loop.remove_signal_handler(signal.SIGUSR1)


def test_signal_cancels_main_task(loop):
    """The common pattern: SIGTERM handler cancels the main task."""

    async def main():
        task = asyncio.current_task()
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
        loop.call_later(0.01, os.kill, os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "cancelled by signal"
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    assert loop.run_until_complete(main()) == "cancelled by signal"
