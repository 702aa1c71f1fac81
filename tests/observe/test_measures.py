"""What observation measures: the lag histogram, per-task counters, utilisation, the recorder."""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import socket
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import corun
import corun.observe as observe
from corun.observe import LatencyHistogram, answers
from corun.runtime.engine.accounting import (
    BUCKETS,
    HANDOFF_RETRIES,
    SLOT,
    SLOTS,
    EventRing,
    Histogram,
    LoopAccounting,
    bucket_bounds,
    bucket_of,
)

# --- the histogram ---------------------------------------------------------------


def test_every_value_from_1us_to_60s_lands_in_a_bucket_within_3_percent() -> None:
    rng = random.Random(7)
    values = [int(10 ** rng.uniform(3, 10.78)) for _ in range(20_000)]
    values += [1024, 1025, 2047, 2048, 10**6, 60 * 10**9]
    for ns in values:
        index = bucket_of(ns)
        low, high = bucket_bounds(index)
        assert low <= ns < high, (ns, index, low, high)
        midpoint = (low + high) / 2
        assert abs(midpoint - ns) / ns <= 0.03


def test_buckets_cover_the_range_without_gaps() -> None:
    previous_high = bucket_bounds(0)[1]
    for index in range(1, BUCKETS - 1):
        low, high = bucket_bounds(index)
        assert low == previous_high
        assert bucket_of(low) == index
        assert bucket_of(high - 1) == index
        previous_high = high


def test_quantiles_and_merge() -> None:
    first, second = Histogram(), Histogram()
    for i in range(1, 1001):
        first.record(i * 1e-5)  # 10 us .. 10 ms
    for _ in range(1000):
        second.record(0.5)
    a = LatencyHistogram.copy_of(first)
    b = LatencyHistogram.copy_of(second)
    assert a.count == 1000
    assert a.p50 == pytest.approx(5e-3, rel=0.03)
    assert a.p90 == pytest.approx(9e-3, rel=0.03)
    assert a.p99 == pytest.approx(9.9e-3, rel=0.03)
    assert a.max == pytest.approx(1e-2)
    merged = a + b
    assert merged.count == 2000
    assert merged.p50 == pytest.approx(1e-2, rel=0.03)
    assert merged.p90 == pytest.approx(0.5, rel=0.03)
    assert merged.max == pytest.approx(0.5)
    assert (merged - a).count == 1000
    with pytest.raises(ValueError, match="between 0 and 1"):
        a.quantile(1.5)


@pytest.mark.parametrize("delay", [0.001, 0.010, 0.100])
def test_the_loop_lag_histogram_reads_injected_delays(loop: corun.EventLoop, delay: float) -> None:
    # Each round: one callback blocks for `delay`, and nine queued behind it
    # run late by that much. Every callback also measures its own lateness,
    # from its queueing (or its timer's deadline) to its start: the truth the
    # histogram's percentiles are held to, whatever else the machine does.
    #
    # The loop reads the clock between two callbacks, and stamps what a
    # callback queues with the start of its step: so each lateness is held
    # between two readings the callbacks take themselves, the end of the
    # callback before (`last_end`) and their own start. They differ by
    # microseconds, unless the system took the CPU away in between.
    observer = observe.enable(loop, serve=False)
    rounds = 20 if delay < 0.1 else 6
    done = loop.create_future()
    truth: list[float] = []
    low: list[float] = []  # the least the loop can have read, for each
    high: list[float] = []  # and the most
    last_end = [0.0]

    def sample(least: float, exact: float, most: float) -> None:
        low.append(max(least, 0.0))
        truth.append(exact)
        high.append(most)

    def block(step_start: tuple[float, float]) -> None:
        start = time.monotonic()
        sample(last_end[0] - step_start[1], start - step_start[1], start - step_start[0])
        end = time.perf_counter() + delay
        while time.perf_counter() < end:
            pass
        last_end[0] = time.monotonic()

    def probe(step_start: tuple[float, float]) -> None:
        start = time.monotonic()
        sample(last_end[0] - step_start[1], start - step_start[1], start - step_start[0])
        last_end[0] = time.monotonic()

    def next_round(remaining: int) -> None:
        # Due now: it runs after the block and the probes, late by as much.
        following: list[asyncio.TimerHandle] = []
        following.append(loop.call_later(0, round_, remaining, following))
        last_end[0] = time.monotonic()

    def round_(remaining: int, timer: list[asyncio.TimerHandle]) -> None:
        now = loop.time()
        # The loop ran the timer from a reading at or after its deadline
        # (less its clock's resolution), and after the callback before.
        due = timer[0].when()
        started = max(last_end[0], due - loop._clock_resolution)  # type: ignore[attr-defined]
        sample(started - due, now - due, now - due)
        if remaining == 0:
            done.set_result(None)
            return
        step_start = (started, time.monotonic())
        loop.call_soon(block, step_start)
        for _ in range(9):
            loop.call_soon(probe, step_start)
        next_round(remaining - 1)

    def first_round(queued: float) -> None:
        now = time.monotonic()
        sample(0.0, now - queued, now - queued)
        next_round(rounds)

    before = observer.lag()
    loop.call_soon(first_round, time.monotonic())
    loop.run_until_complete(done)
    lag = observer.lag() - before
    for values in (truth, low, high):
        values.sort()
    assert truth[len(truth) // 2] == pytest.approx(delay, rel=0.5), "the delay was injected"
    tolerance = 0.03 * delay + 50e-6
    for q in (0.5, 0.99):
        rank = math.ceil(q * len(truth)) - 1
        assert low[rank] - tolerance <= lag.quantile(q) <= high[rank] + tolerance, (
            q,
            low[rank],
            truth[rank],
            high[rank],
        )


# --- per task ----------------------------------------------------------------------


def test_every_handle_that_runs_is_one_lateness_sample(loop: corun.EventLoop) -> None:
    accounting = observe.enable(loop, serve=False).accounting

    def samples() -> int:
        return sum(accounting.lag.counts()) + sum(accounting.schedule.counts())

    async def main() -> int:
        fired: list[int] = []
        for i in range(300):
            loop.call_later((i % 7) * 0.0003, fired.append, i)
            loop.call_soon(fired.append, -i)
        for _ in range(50):
            await asyncio.sleep(0.0002)
        await asyncio.sleep(0.01)
        return len(fired)

    steps, counted = accounting.step_seq, samples()
    assert loop.run_until_complete(main()) == 600
    ran = accounting.step_seq - steps
    assert ran > 600  # the callbacks, and the task's steps
    assert samples() - counted == ran


def test_a_reader_seen_by_a_poll_that_does_not_wait_is_one_lateness_sample(
    loop: corun.EventLoop,
) -> None:
    # A busy loop polls without waiting and stamps what that poll queues with
    # the reading before it (no clock read of its own): the stamp must still
    # be there, or the reader's step would be left out of the lag.
    accounting = observe.enable(loop, serve=False).accounting
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    received: list[bytes] = []
    loop.add_reader(reader.fileno(), lambda: received.append(reader.recv(100)))

    def spin(left: int) -> None:
        # Always one more callback ready: every poll meanwhile does not wait.
        if left == 50:
            writer.send(b"x")
        if left and not received:
            loop.call_soon(spin, left - 1)

    try:
        steps = accounting.step_seq
        counted = sum(accounting.lag.counts()) + sum(accounting.schedule.counts())
        loop.call_soon(spin, 10_000)
        loop.run_until_complete(asyncio.sleep(0))
        while not received and accounting.step_seq - steps < 20_000:
            loop.run_until_complete(asyncio.sleep(0))
        assert received == [b"x"]
        ran = accounting.step_seq - steps
        assert sum(accounting.lag.counts()) + sum(accounting.schedule.counts()) - counted == ran
    finally:
        loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()


def test_a_timer_due_after_its_batch_started_counts_as_on_time(loop: corun.EventLoop) -> None:
    # A batch of handles starts from the loop's last clock reading, which a
    # timer popped just after it can be due after. Here every timer is: the
    # accounting's clock runs a second behind the loop's.
    accounting = LoopAccounting(lambda: time.monotonic() - 1.0, 0.1)
    loop._set_accounting(accounting)
    fired: list[int] = []
    for i in range(20):
        loop.call_later(0.001, fired.append, i)
    loop.run_until_complete(asyncio.sleep(0.01))
    assert len(fired) == 20
    counts = accounting.lag.counts()
    assert counts[0] >= 20  # on time: lateness 0, not left out
    assert sum(counts) + sum(accounting.schedule.counts()) == accounting.step_seq


def test_the_timers_take_the_accountings_reading_only_on_their_own_clock(
    loop: corun.EventLoop,
) -> None:
    # With the accounting on, the loop's timers use its last reading instead
    # of reading the clock again, but only when both are on the same clock.
    # Here the accounting's runs 10 s ahead: its reading would make a timer
    # 50 ms away due at once.
    loop._set_accounting(LoopAccounting(lambda: time.monotonic() + 10.0, 0.1))
    fired: list[float] = []
    start = time.monotonic()
    loop.call_later(0.05, lambda: fired.append(time.monotonic() - start))
    loop.run_until_complete(asyncio.sleep(0.1))
    assert len(fired) == 1 and fired[0] >= 0.05

    # On the loop's own clock the reading is shared, and timers are on time
    # (the clock cannot run backwards: the reading is never ahead of now).
    accounting = LoopAccounting(loop._clock, 0.1)
    loop._set_accounting(accounting)
    fired.clear()
    start = time.monotonic()
    for i in range(5):
        loop.call_later(0.01 * (i + 1), lambda: fired.append(time.monotonic() - start))
    loop.run_until_complete(asyncio.sleep(0.08))
    assert [t >= 0.01 * (i + 1) for i, t in enumerate(fired)] == [True] * 5
    assert sum(accounting.lag.counts()) >= 5


def test_per_task_counters_parents_and_states(loop: corun.EventLoop) -> None:
    observer = observe.enable(loop, serve=False)
    release = asyncio.Event()

    async def worker(steps: int) -> None:
        for _ in range(steps):
            await asyncio.sleep(0)
        await release.wait()

    async def main() -> dict[str, observe.TaskSummary]:
        async with asyncio.TaskGroup() as group:
            group.create_task(worker(10), name="ten")
            group.create_task(worker(3), name="three")
            await asyncio.sleep(0.05)
            listed = {task.name: task for task in observer.tasks()}
            release.set()
        return listed

    main_task = loop.create_task(main(), name="main")
    listed = loop.run_until_complete(main_task)
    ten, three, parent = listed["ten"], listed["three"], listed["main"]
    assert ten.parent == parent.id and three.parent == parent.id
    assert parent.state == "running"
    assert ten.state == three.state == "waiting"
    assert ten.waiting_on.startswith("event at ")
    assert ten.steps == 11 and three.steps == 4  # the first step, then one per sleep(0)
    assert 0.0 < ten.busy < 0.05
    assert ten.longest <= ten.busy
    assert 0.0 < ten.wake_mean <= ten.wake_max < 0.05
    assert ten.stack and ten.stack[-1].endswith(" wait")
    assert any(line.endswith(" worker") for line in ten.stack)


def test_utilisation_of_a_busy_and_an_idle_loop(loop: corun.EventLoop) -> None:
    observer = observe.enable(loop, serve=False)

    async def busy(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.004)  # blocks the loop, but parked: busy, not CPU
            await asyncio.sleep(0)

    loop.run_until_complete(busy(2.3))
    busy_share = observer.utilization
    loop.run_until_complete(asyncio.sleep(2.3))
    idle_share = observer.utilization
    assert busy_share > 0.9, busy_share
    assert idle_share < 0.1, idle_share
    assert observer.cpu < 0.2  # time.sleep and epoll both park the thread


def test_top_ranks_the_tasks_busiest_since_its_last_look(loop: corun.EventLoop) -> None:
    observer = observe.enable(loop, serve=False)
    release = asyncio.Event()
    turn = {"name": "early"}

    async def worker(name: str) -> None:
        while not release.is_set():
            if turn["name"] == name:
                end = time.perf_counter() + 0.002
                while time.perf_counter() < end:
                    pass
            await asyncio.sleep(0)

    async def idle() -> None:
        await release.wait()

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        for name in ("early", "late"):
            loop.create_task(worker(name), name=name)
        for n in range(50):
            loop.create_task(idle(), name=f"idle-{n}")
        await asyncio.sleep(0.1)
        first = answers.top([observer], rows=3)
        turn["name"] = "late"
        await asyncio.sleep(0.1)
        second = answers.top([observer], rows=3)
        release.set()
        return first, second

    first, second = loop.run_until_complete(loop.create_task(main(), name="main"))
    # Since the start, "early" did the work; since the first look, "late".
    # ("main" is busy too: the first answer was made in its step.)
    assert first["tasks"][0]["name"] == "early"
    assert second["tasks"][0]["name"] == "late"
    assert len(first["tasks"]) == len(second["tasks"]) == 3
    assert all(row["name"] in ("early", "late", "main") for row in second["tasks"])
    late = second["tasks"][0]
    assert late["busy"] >= 0.05 and late["steps"] >= 25 and late["state"] == "ready"
    # Every task is counted by state, though only three are listed.
    assert second["loop"]["tasks"] == {
        "total": 53,
        "running": 1,
        "ready": 2,
        "waiting": 50,
    }


# --- the flight recorder -------------------------------------------------------------


def test_the_ring_keeps_the_newest_ten_thousand_events_in_one_mebibyte() -> None:
    tracemalloc.start()
    try:
        ring = EventRing()
        for number in range(25_000):
            ring.add(1, number, number + 1, f"Task-{number}-" + "x" * 100)
        size, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert SLOTS * SLOT <= 1 << 20
    assert size <= 1 << 20
    events = ring.events()
    assert len(events) == SLOTS >= 10_000
    numbers = [a for _t, _kind, a, _b, _text in events]
    assert numbers == list(range(25_000 - SLOTS, 25_000))
    assert events[-1][4].startswith("Task-24999-")
    assert len(events[-1][4].encode()) <= 70


def test_the_ring_keeps_texts_and_numbers_whole_or_cut_cleanly() -> None:
    ring = EventRing(16)
    ring.add(1, -5, 1 << 63, "naïve-Task", 1.5)  # out-of-range numbers are stored as 0
    ring.add(1, 7, 8, "\ud800 lone", 2.5)  # a lone surrogate cannot be encoded as is
    ring.add(1, 9, 10, "€" * 30, 3.5)  # 90 bytes of UTF-8: cut inside the 24th character
    (first, second, third) = ring.events()
    assert first == (1.5, 1, 0, 0, "naïve-Task")
    assert second[:4] == (2.5, 1, 7, 8) and second[4].endswith(" lone")
    assert third[:4] == (3.5, 1, 9, 10)
    assert third[4] == "€" * 23 + "\ufffd"  # 70 bytes kept; the cut character is replaced
    # Written round and round: the 17th event takes the first one's slot.
    for number in range(14):
        ring.add(6, number, 0, f"note {number}", 4.0)
    assert ring.held() == (1, 17)
    assert [e[4] for e in ring.events()][:2] == [second[4], third[4]]


def test_the_ring_writes_a_default_task_name_as_its_number() -> None:
    ring = EventRing(16)
    ring.add_task(1, 3, 2, 41, 1.5)  # a spawn of "Task-41", written without a text
    ring.add_task(7, 3, 5, 41, 2.5)  # its exit: the outcome is in the kind
    ring.add_task(8, 4, 1, "named", 3.5)
    assert ring.events() == [
        (1.5, 1, 3, 2, "Task-41"),
        (2.5, 2, 3, 5, "Task-41 FINISHED"),
        (3.5, 2, 4, 1, "named CANCELLED"),
    ]
    # The text column is not read for a numbered event: an old text there stays hidden.
    for number in range(16):
        ring.add(6, number, 0, "x" * 70, 4.0)
    ring.add_task(1, 1, 0, 7, 5.0)
    assert ring.events()[-1] == (5.0, 1, 1, 0, "Task-7")


def test_spawn_exit_and_cancel_events(loop: corun.EventLoop) -> None:
    observer = observe.enable(loop, serve=False)

    async def victim() -> None:
        await asyncio.sleep(10)

    def canceller(task: asyncio.Task[None]) -> None:
        task.cancel()

    async def survivor() -> None:
        await asyncio.sleep(0)

    async def main() -> None:
        task = asyncio.create_task(victim(), name="victim")
        await asyncio.create_task(survivor(), name="survivor")
        canceller(task)
        with pytest.raises(asyncio.CancelledError):
            await task

    before = time.time()
    loop.run_until_complete(main())
    after = time.time()
    events = observer.events()
    kinds = [(e.kind, e.text) for e in events]
    spawned = [e for e in events if e.kind == "spawn"]
    assert spawned
    (cancel,) = [e for e in events if e.kind == "cancel"]
    assert cancel.text.startswith("victim <- ")
    assert "canceller" in cancel.text, cancel.text
    exits = [e for e in events if e.kind == "exit" and e.text.startswith("victim ")]
    assert exits and exits[0].text.endswith("CANCELLED"), kinds
    (finished,) = [e for e in events if e.kind == "exit" and e.text.startswith("survivor ")]
    assert finished.text == "survivor FINISHED"
    assert finished.value == 2  # its steps: to the sleep, and after it
    (born,) = [e for e in spawned if e.task_id == finished.task_id]
    if sys.version_info >= (3, 13):
        # asyncio.create_task hands the name to loop.create_task: the spawn has it.
        assert born.text == "survivor"
    else:
        # asyncio.create_task names the task after it is made: the spawn has its first name.
        assert born.text.startswith("Task-")
    # Events in a step are stamped from the step's start (one clock read for both).
    assert all(before <= e.time <= after for e in events), [(e.kind, e.time) for e in events]


def test_default_names_read_back_as_get_name_gives_them(loop: corun.EventLoop) -> None:
    # Such a name is written as its number until something asks for it, and
    # as its text after: both read back as the same name.
    observer = observe.enable(loop, serve=False)

    async def quiet() -> None:
        await asyncio.sleep(0)

    async def asked() -> str:
        await asyncio.sleep(0)
        return asyncio.current_task().get_name()  # type: ignore[union-attr]

    async def main() -> tuple[asyncio.Task[None], str]:
        first = asyncio.get_running_loop().create_task(quiet())
        name = await asyncio.get_running_loop().create_task(asked())
        await first
        return first, name

    first, asked_name = loop.run_until_complete(main())
    events = [(e.kind, e.text) for e in observer.events()]
    quiet_name = first.get_name()
    assert quiet_name.startswith("Task-") and asked_name.startswith("Task-")
    assert int(asked_name[5:]) == int(quiet_name[5:]) + 1
    for name in (quiet_name, asked_name):
        assert ("spawn", name) in events, events
        assert ("exit", f"{name} FINISHED") in events, events


# A child process: a crash there fails the test instead of killing the test run.
_FREED_STEP_CHILD = textwrap.dedent(
    """
    import asyncio, threading, time
    import corun, corun.observe as observe

    loop = corun.new_event_loop()
    accounting = observe.enable(loop, serve=False).accounting
    stop = threading.Event()
    reads = 0

    def read():  # what the watchdog does: read the step slots and use what they hold
        global reads
        while not stop.is_set():
            handle, task = accounting.step_handle, accounting.step_task
            if handle is not None:
                reads += 1
                type(handle).__name__, type(task).__name__

    class LeavesTheGil:
        def __del__(self):
            time.sleep(0)  # freed with its handle: the reader runs meanwhile

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for _ in range(20):
            for _ in range(500):
                loop.call_soon(lambda arg: None, LeavesTheGil())
            loop.run_until_complete(asyncio.sleep(0))
    finally:
        stop.set()
        thread.join()
    print(reads)
    """
)


def test_the_watchdog_never_reads_a_freed_step() -> None:
    # Compiled code releases an attribute's old value before storing the new
    # one; a handle freed that way, whose release runs Python code, used to
    # be read by the other thread from the step slot: a segmentation fault.
    run = subprocess.run(
        [sys.executable, "-c", _FREED_STEP_CHILD], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert int(run.stdout) > 0, "the reader saw steps running"


def test_a_failing_watchdog_part_is_switched_off_and_the_loop_goes_on(
    loop: corun.EventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    observer = observe.enable(loop, stall_threshold=0.02, serve=False)

    class Broken(RuntimeError):
        pass

    def broken_window(now: float) -> None:
        raise Broken("window")

    # A fault injected into the observer's own Python part.
    observer.window = broken_window  # type: ignore[method-assign]
    loop.run_until_complete(asyncio.sleep(1.3))
    assert "the window part failed and is switched off" in caplog.text
    assert any(e.kind == "note" and "window" in e.text for e in observer.events())
    # Still observing: the watch part goes on.
    loop.run_until_complete(asyncio.sleep(0.001))
    assert observer.accounting.steps > 0


def _voluntary_switches(native_id: int) -> int:
    with open(f"/proc/self/task/{native_id}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


def _short_steps(loop: corun.EventLoop, seconds: float) -> int:
    """Run 10 tasks of ``await asyncio.sleep(0)`` for ``seconds``; the steps they took."""

    async def steps_for(end: float) -> int:
        steps = 0
        while time.monotonic() < end:
            await asyncio.sleep(0)
            steps += 1
        return steps

    async def in_tasks() -> int:
        end = time.monotonic() + seconds
        return sum(await asyncio.gather(*(steps_for(end) for _ in range(10))))

    return loop.run_until_complete(in_tasks())


def _without_alarm(loop: corun.EventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    """Observers made from now on have no alarm: the watchdog looks by its timer.

    The loop's observer from CORUN_OBSERVE=1, made with one, is closed.
    """
    import corun.observe.observer as observer_module

    def no_alarm(seconds: float) -> Any:
        raise OSError("no timerfd (the test took it away)")

    monkeypatch.setattr(observer_module, "Alarm", no_alarm)
    existing = observe.observer_of(loop)
    if existing is not None:
        existing.close()


def test_an_alarm_rings_its_seconds_after_each_arming_and_not_before() -> None:
    from corun.observe.alarm import Alarm

    alarm = Alarm(0.05)
    try:
        started = time.monotonic()
        alarm.arm()
        time.sleep(0.03)
        alarm.arm()  # pushed back: rings 50 ms from here, not from the first
        time.sleep(0.035)
        assert alarm.drain() == 0, "rang 65 ms after the first arming, 35 after the second"
        time.sleep(0.03)
        assert alarm.drain() == 1
        assert time.monotonic() - started >= 0.08
        alarm.set_seconds(0.01)
        alarm.arm()
        time.sleep(0.03)
        assert alarm.drain() == 1 and alarm.rings == 2
        assert alarm.drain() == 0  # one-shot
    finally:
        alarm.close()


def test_a_closed_observers_alarm_is_always_listed_as_observations_until_it_is_closed(
    loop: corun.EventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tests' fd check reads own_fds() and then /proc, while the watchdog
    # may be closing an observer on its own thread. The alarm stays open
    # until the watchdog closes it, so at every point of the closing it must
    # be listed: with its observer, or retired. (It once was neither between
    # the two, and CI's CORUN_OBSERVE=1 pass reported a leaked timerfd.)
    from corun.observe import monitor

    observer = observe.enable(loop, serve=False)
    alarm = observer.alarm
    assert alarm is not None
    seen: list[bool] = []
    watch_arrivals = monitor._watch_arrivals

    def probe(watched: Any, fd: int) -> None:  # called by MONITOR.remove, after its lock
        if watched is observer:
            # The listing first: the watchdog, woken by remove(), may close the
            # alarm meanwhile, and then the fd read after it is -1.
            listed = monitor.MONITOR.own_fds()
            seen.append(alarm.fd < 0 or alarm.fd in listed)
        watch_arrivals(watched, fd)

    monkeypatch.setattr(monitor, "_watch_arrivals", probe)
    observer.close()
    assert seen == [True]
    assert alarm.fd in monitor.MONITOR.own_fds() or alarm.fd < 0
    deadline = time.monotonic() + 5.0
    while alarm.fd >= 0 and time.monotonic() < deadline:  # the watchdog closes it
        time.sleep(0.01)
    assert alarm.fd < 0


def test_the_watchdogs_reads_after_a_wake_keep_the_gil() -> None:
    # After a wake the watchdog reads its eventfd and timerfds. os.read lets go
    # of the GIL, and a step that holds it takes it back: with os.read, busy
    # stalls at a 20 ms threshold were seen up to 37 ms after they began
    # (p95 31 ms), against 27 ms at most with reads that keep the GIL.
    import threading

    from corun.observe.alarm import read_count

    fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
    os.eventfd_write(fd, 3)
    done = [False]

    def holds_the_gil() -> None:
        while not done[0]:
            pass

    spinner = threading.Thread(target=holds_the_gil)
    spinner.start()
    try:
        time.sleep(0.02)
        started = time.perf_counter()
        counts = [read_count(fd) for _ in range(400)]
        elapsed = time.perf_counter() - started
    finally:
        done[0] = True
        spinner.join()
        os.close(fd)
    assert counts[0] == 3 and not any(counts[1:])
    # 400 reads by os.read beside that thread: 80 to 100 ms here; kept: 1 ms.
    assert elapsed < 0.02, (
        f"400 reads took {elapsed * 1e3:.0f} ms beside a thread that holds the GIL"
    )


@pytest.mark.parametrize("with_alarm", [True, False], ids=["alarm", "timer"])
def test_the_watchdog_is_handed_the_gil_by_a_loop_of_short_steps(
    loop: corun.EventLoop, monkeypatch: pytest.MonkeyPatch, with_alarm: bool
) -> None:
    # A loop of short steps lets go of the GIL only for the moment of each
    # poll, and takes it back before a waiting thread can: the watchdog used
    # to wait for it for hundreds of milliseconds at each look, woken in vain
    # by every poll (about 10,000 times a second, which cost the loop a
    # third more per step). Now the loop hands it over when a look is due.
    # And with the alarm, the loop keeps pushing it back, so the watchdog
    # wakes only for its duties (a window, the backstop), twice a second.
    from corun.observe.monitor import MONITOR

    if not with_alarm:
        _without_alarm(loop, monkeypatch)
    observer = observe.enable(loop, serve=False)
    accounting = observer.accounting
    assert (observer.alarm is not None) is with_alarm

    _short_steps(loop, 0.2)  # the watchdog thread is up
    thread = MONITOR._thread
    assert thread is not None and thread.native_id is not None
    before = _voluntary_switches(thread.native_id)
    # Its rounds, not the loop's hand-overs: on a busy machine, where the
    # two threads share a core, it often takes the GIL at a poll unaided.
    looks, armed = MONITOR.rounds, accounting.alarms
    rings = observer.alarm.rings if observer.alarm is not None else 0
    started = time.monotonic()
    steps = _short_steps(loop, 2.0)
    switches = _voluntary_switches(thread.native_id) - before
    elapsed = time.monotonic() - started
    looks, armed = MONITOR.rounds - looks, accounting.alarms - armed
    assert steps > 10_000
    # It woke a few times per look (its timer, a poll or two before the
    # hand-over), not at each of the loop's polls, thousands between two looks.
    assert switches <= 20 * looks, f"the watchdog woke {switches} times for {looks} looks"
    if observer.alarm is None:
        # A look every threshold less 10 ms: 11 or 12 a second.
        assert looks > 5 * elapsed, f"{looks} looks in {elapsed:.1f} s"
        assert armed == 0
        return
    rings = observer.alarm.rings - rings
    # Set again every half threshold (50 ms), never rung by steps of microseconds
    # (but the machine may take the loop's CPU away for that long, once).
    assert 10 * elapsed < armed <= 20 * elapsed + 1, f"set {armed} times in {elapsed:.1f} s"
    assert rings <= 1, f"rang {rings} times for steps of microseconds"
    assert 1 * elapsed <= looks <= 3 * elapsed + 1, f"{looks} looks in {elapsed:.1f} s"


_WATCHDOG_START_CHILD = textwrap.dedent(
    """
    import asyncio, json, tempfile, threading, time
    import corun
    import corun.observe as observe
    from corun.observe.monitor import MONITOR

    made_on = []
    make = tempfile.TemporaryFile

    def recorded(*args, **kwargs):  # the backstop's file: which thread made it
        made_on.append(threading.current_thread().name)
        return make(*args, **kwargs)

    tempfile.TemporaryFile = recorded

    def switches(native_id):
        with open(f"/proc/self/task/{native_id}/status") as status:
            for line in status:
                if line.startswith("voluntary_ctxt_switches:"):
                    return int(line.split()[1])

    async def short_steps(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.sleep(0)

    loop = corun.new_event_loop()
    observe.enable(loop, serve=False)
    # Past the backstop's first arming, on the watchdog's second round.
    loop.run_until_complete(short_steps(1.2))
    print(json.dumps({"made_on": made_on, "switches": switches(MONITOR._thread.native_id)}))
    """
)


def test_the_watchdog_starts_beside_a_loop_of_short_steps_without_waiting_for_the_gil() -> None:
    # Its second round used to run as soon as its first had let the loop go
    # (a wake left set), with nothing handed over, and to make the backstop's
    # file there, which gives up the GIL: the loop took it, and the watchdog
    # waited for it until its next look, half a second, woken at every poll
    # (about 5,000 times). One start in five, measured; a fresh process each.
    for _ in range(3):
        run = subprocess.run(
            [sys.executable, "-c", _WATCHDOG_START_CHILD],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        seen = json.loads(run.stdout)
        assert seen["made_on"] == ["MainThread"], seen  # by observe.enable's caller
        # A few wakes per look, two looks a second (about 15 measured).
        assert seen["switches"] < 100, seen


@pytest.mark.parametrize(
    ("threshold", "most_looks", "rung"), [(0.1, 13.5, False), (0.01, 300, True)]
)
def test_without_an_alarm_a_loop_of_short_steps_rings_the_watchdog_for_its_looks_and_no_more(
    loop: corun.EventLoop,
    monkeypatch: pytest.MonkeyPatch,
    threshold: float,
    most_looks: float,
    rung: bool,
) -> None:
    # Woken by its own timer, the watchdog waits for the GIL while the loop
    # runs; for looks less than BELL_BELOW apart, the loop wakes it instead,
    # a little before the timer, at a poll. Duties due sooner than that (a
    # 1 s window's end) are done at the look a bell wakes: a bell for each
    # would make a look a millisecond.
    from corun.observe.monitor import MONITOR

    _without_alarm(loop, monkeypatch)
    observer = observe.enable(loop, serve=False, stall_threshold=threshold)
    accounting = observer.accounting

    _short_steps(loop, 0.2)
    bells, looks = accounting.look_bells, MONITOR.rounds
    started = time.monotonic()
    _short_steps(loop, 2.5)
    elapsed = time.monotonic() - started
    bells, looks = accounting.look_bells - bells, MONITOR.rounds - looks
    # A look every threshold less 10 ms (at least half a threshold), less a
    # quarter of that or 5 ms: 12 a second at 100 ms (14 with a bell for each
    # window's end), 267 at 10 ms.
    assert 5 * elapsed < looks < most_looks * elapsed, f"{looks} looks in {elapsed:.1f} s"
    if rung:
        assert bells >= 0.8 * looks, f"{bells} of {looks} looks rung by the loop"
    else:  # only a look cut short by a window's end comes sooner than BELL_BELOW
        assert bells <= looks / 4, f"{bells} of {looks} looks rung by the loop"


_TOP_CLIENT = """
import json, sys, time
from corun.observe.client import request
pid = int(sys.argv[1])
times = []
for _ in range(8):
    started = time.perf_counter()
    json.loads(request(pid, "top"))
    times.append(time.perf_counter() - started)
    time.sleep(0.2)
print(json.dumps(times))
"""


def test_the_serving_thread_is_handed_the_gil_by_a_loop_of_short_steps(
    loop: corun.EventLoop,
) -> None:
    # The same for the thread that answers corun top: each of its system
    # calls gave up the GIL, and each time it waited long to get it back
    # (answers took up to half a second, and the loop paid for every wake).
    from corun.observe.monitor import MONITOR

    observe.enable(loop)
    server = MONITOR.server
    assert server and server._thread is not None and server._thread.native_id is not None
    watchdog = MONITOR._thread
    assert watchdog is not None and watchdog.native_id is not None
    threads = (server._thread.native_id, watchdog.native_id)

    # The client is no child of the loop's: a watched pipe would make the
    # loop poll after every batch of handles rather than every 64 handles.
    client = subprocess.Popen(
        [sys.executable, "-c", _TOP_CLIENT, str(os.getpid())], stdout=subprocess.PIPE
    )

    async def short_steps() -> None:
        steps = 0
        while client.returncode is None:
            await asyncio.sleep(0)
            steps += 1
            if not steps % 1024:
                client.poll()

    before = sum(_voluntary_switches(t) for t in threads)
    started = time.monotonic()

    async def main() -> None:
        await asyncio.gather(*(short_steps() for _ in range(10)))

    loop.run_until_complete(main())
    rate = (sum(_voluntary_switches(t) for t in threads) - before) / (time.monotonic() - started)
    out, _ = client.communicate()
    times = json.loads(out)
    assert len(times) == 8
    assert max(times) < 0.05, times
    assert rate < 2_000, f"the serving thread and the watchdog woke {rate:.0f} times a second"


def test_the_loop_runs_between_the_slices_of_a_walk_off_its_thread(
    loop: corun.EventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    # corun ps walks the tasks on the serving thread in slices of about 1 ms,
    # pausing between them so that the loop runs. The loop used to wait for
    # the GIL at the end of its poll, while a slice held it, and then at the
    # pause's gate: a 1 ms ticker missed slices.
    import gc
    import itertools
    import statistics
    import threading

    from corun.observe import observer as observer_module

    # Slices of 2 ms here: twice the ticker's own period, so that a ticker
    # that runs at every pause and one that misses every other one differ.
    CHUNK_SECONDS = 0.002
    monkeypatch.setattr(observer_module, "CHUNK_SECONDS", CHUNK_SECONDS)
    TASKS = 30_000

    observer = observe.enable(loop, serve=False)

    async def main() -> tuple[list[float], int]:
        event = asyncio.Event()
        # Enough tasks that even a fast machine's walk spans many slices (CI's
        # walked 10,000 in nine).
        waiters = [asyncio.create_task(event.wait()) for _ in range(TASKS)]
        await asyncio.sleep(0.05)
        # The tasks just made would be moved to the oldest generation by a full
        # collection, due soon: 20 to 35 ms with the GIL held, on whichever
        # thread allocates next. A server's long-lived tasks have been moved.
        gc.collect()
        ticks: list[float] = []
        walking = True

        async def ticker() -> None:
            while walking:
                await asyncio.sleep(0.001)
                ticks.append(time.perf_counter())

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.05)
        pieces: list[list[bytes]] = []
        walk = threading.Thread(target=lambda: pieces.append(answers.ps_pieces([observer])))
        start = len(ticks)
        walk.start()
        while walk.is_alive():
            await asyncio.sleep(0.005)
        walking = False
        end = len(ticks)
        await tick
        event.set()
        await asyncio.gather(*waiters)
        document = json.loads(b"".join(pieces[0]))
        return ticks[start:end], len(document["tasks"])

    ticks, tasks = loop.run_until_complete(main())
    assert tasks >= TASKS
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(gaps) > 10, gaps  # the walk spans many slices
    # A turn at every pause: the ticker's typical gap is about one slice
    # (2.4 ms measured), not two or three (4.6 ms here before; 7 ms in ps's child).
    assert statistics.median(gaps) < 1.75 * CHUNK_SECONDS, sorted(gaps)


def test_the_loop_makes_the_serving_threads_turn_due_when_it_sees_a_client(
    loop: corun.EventLoop,
) -> None:
    # The serving thread waits for clients without the GIL and wakes wanting
    # it, before it can publish a turn: so it leaves a turn's gate that is not
    # due, and the loop, which watches the socket in its own polls, makes it
    # due. A loop of short steps kept that thread waiting 10 to 70 ms before.
    import socket
    import threading

    # An accounting of the test's own, which no thread of observation knows:
    # under CORUN_OBSERVE=1, the process's serving thread publishes its gates
    # to every observed loop's accounting, and would replace this test's.
    accounting = LoopAccounting(time.monotonic, 1.0)
    previous = loop._corun_accounting
    loop._set_accounting(accounting)
    gate = threading.Lock()
    gate.acquire()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"\0corun-test-arrivals-{os.getpid()}")
    listener.listen(4)
    clients: list[socket.socket] = []
    try:
        loop._watch_arrivals(listener.fileno())
        accounting.turn_gate = gate
        accounting.turn_due = math.inf

        def run_briefly() -> None:
            loop.run_until_complete(asyncio.sleep(0.005))

        run_briefly()
        # No client yet: nothing due, nothing waited for.
        assert accounting.turn_due == math.inf and accounting.turn_gate is gate
        assert accounting.turn_misses == 0
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        clients.append(client)
        client.connect(listener.getsockname())
        run_briefly()
        # Due, and waited for at the gate. Nobody opens it here: each wait
        # timed out, and the loop tried again at its next polls, then gave up.
        assert accounting.turn_misses == HANDOFF_RETRIES and accounting.turn_gate is None
        assert loop._io.get_reader(listener.fileno()) is None  # no handle: the thread's socket

        # Not watched any more: a client comes and nothing is due.
        loop._watch_arrivals(-1)
        accounting.turn_gate, accounting.turn_due, accounting.turn_misses = gate, math.inf, 0
        listener.accept()[0].close()
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        clients.append(client)
        client.connect(listener.getsockname())
        run_briefly()
        assert accounting.turn_due == math.inf and accounting.turn_gate is gate
        assert accounting.turn_misses == 0
    finally:
        loop._set_accounting(previous)
        loop._watch_arrivals(-1)
        for client in clients:
            client.close()
        listener.close()


def test_an_fd_with_a_reader_cannot_be_watched_for_arrivals(loop: corun.EventLoop) -> None:
    import socket

    left, right = socket.socketpair()
    try:
        loop.add_reader(left.fileno(), lambda: None)
        with pytest.raises(ValueError, match="registered for a reader or writer"):
            loop._watch_arrivals(left.fileno())
        loop.remove_reader(left.fileno())
    finally:
        left.close()
        right.close()


def test_observations_threads_are_named_for_the_os(loop: corun.EventLoop) -> None:
    # top -H, ps -L and /proc show which thread is whose (and the overhead
    # benchmark finds the answering thread's CPU time by its name).
    from corun.observe.monitor import MONITOR

    observe.enable(loop)
    threads = {"corun-watchdog": MONITOR._thread, "corun-inspect": MONITOR.server._thread}
    for name, thread in threads.items():
        assert thread is not None and thread.native_id is not None
        comm = Path(f"/proc/self/task/{thread.native_id}/comm")
        deadline = time.monotonic() + 5.0
        while comm.read_text().strip() != name and time.monotonic() < deadline:
            time.sleep(0.01)
        assert comm.read_text().strip() == name
