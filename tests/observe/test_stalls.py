"""The stall detection suite: four kinds of stall, each found in time, named, with its stack.

Each test blocks a real corun loop in a different way and checks what the
watchdog saw *while* it blocked: the right task or callback, the blocking
function on the stack, computing or parked, and the final duration.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import socket
import sys
import threading
import time
from typing import Any

import pytest

import corun
import corun.observe as observe
from corun.observe import Stall, backstop
from corun.observe.monitor import parse_faulthandler

# Detection budget: the threshold plus 10 ms, at the 99th percentile.
SLACK = 0.010


def _wait_for_stalls(observer: observe.Observer, count: int) -> tuple[Stall, ...]:
    # The watchdog takes a finished stall on its next look.
    deadline = time.monotonic() + 5.0
    while len(observer.stall_list()) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return observer.stall_list()


def _delays(stalls: tuple[Stall, ...]) -> list[float]:
    # A stall the watchdog did not see while it ran counts as never detected.
    return sorted(math.inf if s.detected_after is None else s.detected_after for s in stalls)


def _p99_delay(stalls: tuple[Stall, ...]) -> float:
    delays = _delays(stalls)
    return delays[math.ceil(0.99 * len(delays)) - 1]


def _sleeping_step(seconds: float = 0.3) -> None:
    time.sleep(seconds)


def _busy_step(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize(
    ("threshold", "rounds", "step"),
    [
        # At 20 ms, the watchdog looks every half threshold while no step is long.
        (0.02, 120, 0.04),  # the 99th percentile of 120 leaves out the worst one
        # Above it, every threshold less 10 ms (here every 40 ms, not 25): a
        # step that starts just after a look must still be seen in time.
        (0.05, 101, 0.065),
    ],
)
def test_time_sleep_in_a_task_is_a_parked_stall_found_in_time(
    loop: corun.EventLoop, threshold: float, rounds: int, step: float
) -> None:
    # time.sleep releases the GIL: the watchdog must see each stall within
    # the threshold plus 10 ms, at the 99th percentile.
    observer = observe.enable(loop, stall_threshold=threshold, serve=False)

    async def sleeper() -> None:
        for _ in range(rounds):
            await asyncio.sleep(0.004)
            _sleeping_step(step)

    async def main() -> None:
        await asyncio.create_task(sleeper(), name="the-sleeper")

    loop.run_until_complete(main())
    stalls = _wait_for_stalls(observer, rounds)
    assert len(stalls) == rounds
    for stall in stalls:
        assert stall.task == "the-sleeper"
        assert stall.task_id is not None
        assert step - 0.001 <= stall.duration < step + 0.16
        assert not stall.computing, stall
        if stall.detected_after is not None:  # seen while it blocked
            assert stall.stack[-1].endswith(" _sleeping_step"), stall.stack
            assert any(line.endswith(" sleeper") for line in stall.stack)
    assert _p99_delay(stalls) <= threshold + SLACK, _delays(stalls)


def test_a_busy_loop_is_a_computing_stall_seen_while_it_runs(loop: corun.EventLoop) -> None:
    # A pure-Python loop holds the GIL and hands it over every switch
    # interval: the watchdog needs it twice (to see the step start, and at
    # the threshold), so its budget is two switch intervals more.
    threshold = 0.02
    budget = threshold + SLACK + 2 * sys.getswitchinterval()
    observer = observe.enable(loop, stall_threshold=threshold, serve=False)
    rounds = 30

    async def spinner() -> None:
        for _ in range(rounds):
            await asyncio.sleep(0.005)
            _busy_step(0.06)

    loop.run_until_complete(spinner())
    stalls = _wait_for_stalls(observer, rounds)
    assert len(stalls) == rounds
    seen = [s for s in stalls if s.detected_after is not None]
    assert all(s.stack[-1].endswith(" _busy_step") for s in seen)
    assert all(s.computing for s in seen), [round(s.cpu / s.duration, 2) for s in seen]
    assert _p99_delay(stalls) <= budget, _delays(stalls)


def _c_call_holding_the_gil(microseconds: int) -> None:
    # A C call that blocks and never lets go of the GIL, as a C extension
    # that forgets Py_BEGIN_ALLOW_THREADS does: PyDLL keeps the GIL across
    # the call. A fixed wall time, not a CPU loop sized by a calibration
    # that a busy host can make too short.
    usleep = ctypes.PyDLL(None, use_errno=True).usleep
    assert usleep(microseconds) == 0, ctypes.get_errno()


def test_a_c_call_holding_the_gil_is_caught_by_the_faulthandler_backstop(
    loop: corun.EventLoop,
) -> None:
    observer = observe.enable(loop, stall_threshold=0.05, serve=False)

    async def cruncher() -> None:
        # Let the watchdog arm the backstop while the loop runs.
        await asyncio.sleep(0.4)
        _c_call_holding_the_gil(1_600_000)

    started = time.monotonic()
    loop.run_until_complete(asyncio.ensure_future(cruncher(), loop=loop))
    assert time.monotonic() - started >= 2.0
    (stall,) = _wait_for_stalls(observer, 1)
    assert stall.backstop, stall
    # faulthandler dumped the stacks within BACKSTOP (1 s) of the GIL getting stuck.
    assert stall.detected_after is not None and stall.detected_after <= 1.05, stall
    assert stall.stack[-1].endswith(" _c_call_holding_the_gil"), stall.stack
    assert any(line.endswith(" cruncher") for line in stall.stack)
    assert stall.duration >= 1.6


def _take_dump() -> str:
    file = backstop.dump_file()
    file.seek(0)
    text = file.read().decode("utf-8", "replace")
    file.seek(0)
    file.truncate()
    return text


@pytest.mark.parametrize("by_signal", [True, False], ids=["timer-signal", "faulthandler-thread"])
def test_the_backstop_dumps_the_stacks_its_seconds_after_the_last_arming(
    monkeypatch: pytest.MonkeyPatch, by_signal: bool
) -> None:
    # Re-armed, it waits its seconds again; disarmed, it never fires. Without
    # POSIX timers (or with its signal taken), faulthandler's thread does it.
    if not by_signal:

        def no_timer(self: backstop.Backstop) -> Any:
            raise OSError("no POSIX timers (the test took them away)")

        monkeypatch.setattr(backstop.Backstop, "_signal_timer", no_timer)
    dumper = backstop.Backstop(0.4)
    assert dumper.by_signal is by_signal
    _take_dump()
    try:
        dumper.arm()
        time.sleep(0.2)
        dumper.arm()
        time.sleep(0.25)
        assert _take_dump() == "", "dumped 0.45 s after the first arming, 0.25 after the second"
        time.sleep(0.35)
        stacks = parse_faulthandler(_take_dump())
        here = stacks.get(threading.get_ident(), [])
        assert any(
            line.endswith(" test_the_backstop_dumps_the_stacks_its_seconds_after_the_last_arming")
            for line in here
        ), stacks
        dumper.arm()
        time.sleep(0.1)
        dumper.disarm()
        time.sleep(0.5)
        assert _take_dump() == "", "dumped after it was disarmed"
    finally:
        dumper.close()


def test_a_blocking_data_received_is_a_callback_stall(loop: corun.EventLoop) -> None:
    observer = observe.enable(loop, stall_threshold=0.05, serve=False)

    class Blocking(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            time.sleep(0.25)

    async def main() -> None:
        server = await loop.create_server(Blocking, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        try:
            client.sendall(b"hello")
            await asyncio.sleep(0.5)
        finally:
            client.close()
            server.close()
            await server.wait_closed()

    loop.run_until_complete(main())
    (stall,) = _wait_for_stalls(observer, 1)
    assert stall.task_id is None, "a callback, not a task"
    assert "_read_ready" in stall.task, stall.task
    assert stall.stack[-1].endswith(" data_received"), stall.stack
    assert stall.detected_after is not None and stall.detected_after <= 0.05 + SLACK
    assert not stall.computing


def test_a_stall_shows_in_the_flight_recorder_and_the_blocked_view(
    loop: corun.EventLoop,
) -> None:
    observer = observe.enable(loop, stall_threshold=0.05, serve=False)
    seen: list[Stall | None] = []

    async def main() -> None:
        def look() -> None:
            seen.append(observer.blocked())

        # A thread asks while the loop is blocked, as `corun ps` would.
        import threading

        timer = threading.Timer(0.15, look)
        timer.start()
        await asyncio.sleep(0)
        _sleeping_step()
        timer.join()

    loop.run_until_complete(main())
    (blocked,) = seen
    assert blocked is not None
    assert blocked.duration >= 0.05
    assert blocked.stack and blocked.stack[-1].endswith(" _sleeping_step")
    _wait_for_stalls(observer, 1)
    kinds = [event.kind for event in observer.events()]
    assert "stall" in kinds


def test_a_backstop_signal_after_faulthandler_lets_go_does_not_end_the_process() -> None:
    """The interpreter's finalization unregisters faulthandler's handler; a timer may still fire.

    faulthandler puts back the disposition it found: the default one ended
    the process on the signal (status -61, a child of the suite on 3.15).
    """
    import subprocess

    program = (
        "import faulthandler, signal, threading\n"
        "from corun.observe import backstop\n"
        "stop = backstop.Backstop(60.0)\n"
        "assert stop.by_signal, 'no POSIX timer here'\n"
        "faulthandler.unregister(backstop.SIGNAL)  # as finalization does\n"
        "signal.pthread_kill(threading.get_ident(), backstop.SIGNAL)  # the timer's, late\n"
        "stop.close()\n"
        "print('alive')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "alive\n"), done.stderr
