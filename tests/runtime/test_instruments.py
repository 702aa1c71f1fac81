"""corun.Instrument: the observability seam (corun only)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

pytestmark = pytest.mark.corun_only

HOOKS = (
    "task_spawned",
    "before_task_step",
    "after_task_step",
    "task_exited",
    "before_io_wait",
    "after_io_wait",
)


@pytest.fixture
def Instrument():
    import corun

    return corun.Instrument


@pytest.fixture
def Recorder(Instrument):
    class Recorder(Instrument):
        """Records every hook call (Trio's TaskRecorder)."""

        def __init__(self):
            self.events = []

        def task_spawned(self, task):
            self.events.append(("task_spawned", task))

        def before_task_step(self, task):
            self.events.append(("before_task_step", task))

        def after_task_step(self, task):
            self.events.append(("after_task_step", task))

        def task_exited(self, task):
            self.events.append(("task_exited", task))

        def before_io_wait(self, timeout):
            self.events.append(("before_io_wait", timeout))

        def after_io_wait(self, timeout):
            self.events.append(("after_io_wait", timeout))

        def for_task(self, task):
            return [name for name, obj in self.events if obj is task and name in HOOKS[:4]]

        def io(self):
            return [(n, t) for n, t in self.events if n.endswith("io_wait")]

    return Recorder


def test_task_lifecycle_order(loop, Recorder):
    rec = Recorder()
    loop.add_instrument(rec)

    async def two_suspensions():
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return "done"

    task = loop.create_task(two_suspensions())
    # spawned synchronously at creation, before the first step
    assert rec.for_task(task) == ["task_spawned"]
    assert loop.run_until_complete(task) == "done"
    assert rec.for_task(task) == [
        "task_spawned",
        "before_task_step",
        "after_task_step",
        "before_task_step",
        "after_task_step",
        "before_task_step",
        "after_task_step",
        "task_exited",
    ]
    loop.remove_instrument(rec)


@pytest.mark.parametrize("outcome", ["raises", "cancelled", "cancelled-before-start"])
def test_task_exited_for_failed_and_cancelled_tasks(loop, Recorder, outcome):
    rec = Recorder()
    loop.add_instrument(rec)

    async def body():
        if outcome == "raises":
            raise ValueError("x")
        await asyncio.sleep(60)

    async def main():
        t = loop.create_task(body())
        if outcome != "cancelled-before-start":
            await asyncio.sleep(0)
        t.cancel()
        await asyncio.gather(t, return_exceptions=True)
        return t

    t = loop.run_until_complete(main())
    events = rec.for_task(t)
    assert events[0] == "task_spawned"
    assert events[-1] == "task_exited"
    assert events.count("task_exited") == 1
    steps = events[1:-1]
    assert steps and steps == ["before_task_step", "after_task_step"] * (len(steps) // 2)
    loop.remove_instrument(rec)


def test_instrument_sees_the_task_objects(loop, Recorder):
    import corun

    rec = Recorder()
    loop.add_instrument(rec)

    async def child():
        return asyncio.current_task()

    async def main():
        return asyncio.current_task(), await loop.create_task(child())

    main_task, child_task = loop.run_until_complete(main())
    spawned = [obj for name, obj in rec.events if name == "task_spawned"]
    assert main_task in spawned and child_task in spawned
    assert all(type(t) is corun.Task for t in spawned)
    loop.remove_instrument(rec)


def test_io_wait_hooks_bracket_and_report_timeout(loop, Recorder):
    rec = Recorder()
    loop.add_instrument(rec)
    loop.run_until_complete(asyncio.sleep(0.05))
    io = rec.io()
    assert io, "no io waits recorded"
    # strictly alternating before/after with the same timeout value
    for (b, tb), (a, ta) in zip(io[0::2], io[1::2], strict=True):
        assert (b, a) == ("before_io_wait", "after_io_wait")
        assert tb == ta
    timeouts = [t for n, t in io if n == "before_io_wait"]
    # the sleep's timer bounds the wait
    assert any(t is not None and 0.0 < t <= 0.05 for t in timeouts), timeouts
    assert all(t is None or 0.0 <= t <= 0.05 + 1e-6 for t in timeouts), timeouts
    loop.remove_instrument(rec)


def test_io_wait_timeout_zero_when_work_is_ready(loop, Recorder):
    rec = Recorder()
    loop.add_instrument(rec)
    loop.call_soon(lambda: None)  # ready work when the run starts
    loop.call_soon(loop.stop)
    loop.run_forever()  # its first iteration always checks for I/O
    timeouts = [t for n, t in rec.io() if n == "before_io_wait"]
    assert timeouts and timeouts[0] == 0.0
    loop.remove_instrument(rec)


def test_busy_loop_checks_io_once_per_poll_interval(loop, Recorder):
    from corun.runtime.engine.handles import POLL_INTERVAL

    rec = Recorder()
    loop.add_instrument(rec)
    iterations = 10 * POLL_INTERVAL
    left = [iterations]

    def chain():  # one callback per iteration, so work is always ready
        left[0] -= 1
        if left[0]:
            loop.call_soon(chain)
        else:
            loop.stop()

    loop.call_soon(chain)
    loop.run_forever()
    waits = [t for n, t in rec.io() if n == "before_io_wait"]
    assert waits == [0.0] * len(waits)
    # Once per POLL_INTERVAL callbacks (plus the run's first iteration), not
    # once per iteration.
    assert iterations // POLL_INTERVAL <= len(waits) <= iterations // POLL_INTERVAL + 2
    loop.remove_instrument(rec)


@pytest.mark.timeout(10)
def test_io_wait_timeout_none_when_nothing_scheduled(loop, Recorder):
    rec = Recorder()
    loop.add_instrument(rec)

    def waker():
        time.sleep(0.05)
        loop.call_soon_threadsafe(loop.stop)

    t = threading.Thread(target=waker)
    t.start()
    loop.run_forever()
    t.join()
    timeouts = [t for n, t in rec.io() if n == "before_io_wait"]
    assert None in timeouts, timeouts
    loop.remove_instrument(rec)


def test_only_overridden_hooks_are_called(loop, Instrument):
    accessed = []

    class OnlySpawned(Instrument):
        def __init__(self):
            self.spawned = []

        def __getattribute__(self, name):
            if name in HOOKS:
                accessed.append(name)
            return object.__getattribute__(self, name)

        def task_spawned(self, task):
            self.spawned.append(task)

    instr = OnlySpawned()
    loop.add_instrument(instr)
    accessed.clear()  # registration may inspect the instrument

    async def coro():
        await asyncio.sleep(0.001)

    task = loop.create_task(coro())
    loop.run_until_complete(task)
    assert instr.spawned == [task]
    assert set(accessed) == {"task_spawned"}, accessed
    loop.remove_instrument(instr)


def test_add_remove(loop, Recorder):
    rec = Recorder()
    loop.add_instrument(rec)
    loop.remove_instrument(rec)

    async def coro():
        await asyncio.sleep(0)

    loop.run_until_complete(coro())
    assert rec.events == []
    with pytest.raises(KeyError):
        loop.remove_instrument(rec)


def test_remove_unregistered_raises_key_error(loop, Recorder):
    with pytest.raises(KeyError):
        loop.remove_instrument(Recorder())


def test_add_twice_is_idempotent(loop, Recorder):
    rec = Recorder()
    loop.add_instrument(rec)
    loop.add_instrument(rec)

    async def coro():
        pass

    task = loop.create_task(coro())
    loop.run_until_complete(task)
    assert rec.for_task(task).count("task_spawned") == 1
    loop.remove_instrument(rec)
    with pytest.raises(KeyError):
        loop.remove_instrument(rec)


def test_add_non_instrument_is_type_error(loop):
    with pytest.raises(TypeError):
        loop.add_instrument(object())


def test_two_instruments_both_called(loop, Recorder):
    r1, r2 = Recorder(), Recorder()
    loop.add_instrument(r1)
    loop.add_instrument(r2)

    async def coro():
        pass

    task = loop.create_task(coro())
    loop.run_until_complete(task)
    assert (
        r1.for_task(task)
        == r2.for_task(task)
        == [
            "task_spawned",
            "before_task_step",
            "after_task_step",
            "task_exited",
        ]
    )
    loop.remove_instrument(r1)
    loop.remove_instrument(r2)


@pytest.mark.parametrize("hook", HOOKS)
def test_raising_instrument_is_removed_and_logged(loop, Instrument, Recorder, hook, caplog):
    calls = []

    def boom(self, arg):
        calls.append(arg)
        raise RuntimeError(f"broken {hook}")

    Broken = type("Broken", (Instrument,), {hook: boom})
    broken = Broken()
    healthy = Recorder()
    loop.add_instrument(broken)
    loop.add_instrument(healthy)

    async def coro():
        await asyncio.sleep(0.001)
        return "survived"

    with caplog.at_level(logging.ERROR, logger="corun"):
        assert loop.run_until_complete(loop.create_task(coro())) == "survived"
        assert loop.run_until_complete(loop.create_task(coro())) == "survived"
    assert len(calls) == 1, "a failing instrument must be called no more"
    records = [r for r in caplog.records if r.name == "corun"]
    assert len(records) == 1
    assert records[0].levelno >= logging.ERROR
    assert records[0].exc_info and isinstance(records[0].exc_info[1], RuntimeError)
    with pytest.raises(KeyError):
        loop.remove_instrument(broken)
    # the other instrument kept working throughout
    assert [n for n, _ in healthy.events].count("task_exited") == 2
    loop.remove_instrument(healthy)


def test_instrument_removing_itself_in_hook(loop, Instrument):
    seen = []

    class Once(Instrument):
        def task_spawned(self, task):
            seen.append(task)
            loop.remove_instrument(self)

    loop.add_instrument(Once())

    async def coro():
        pass

    t1 = loop.create_task(coro())
    t2 = loop.create_task(coro())
    loop.run_until_complete(asyncio.gather(t1, t2))
    assert seen == [t1]


def test_instruments_are_per_loop(loop, make_loop, Recorder):
    other = make_loop()
    rec = Recorder()
    loop.add_instrument(rec)

    async def coro():
        pass

    other.run_until_complete(other.create_task(coro()))
    assert rec.events == []
    loop.remove_instrument(rec)


def test_stdlib_task_on_corun_loop_does_not_break_instruments(loop, Recorder):
    rec = Recorder()
    loop.add_instrument(rec)

    async def coro():
        await asyncio.sleep(0)
        return 7

    assert loop.run_until_complete(asyncio.tasks._PyTask(coro(), loop=loop)) == 7
    assert loop.run_until_complete(asyncio.Task(coro(), loop=loop)) == 7
    loop.remove_instrument(rec)


def test_task_scheduled_marks_each_wakeup_before_its_step(loop, Instrument):
    """task_scheduled (as in Trio): at creation, then whenever the task is woken."""
    events = []

    class Scheduling(Instrument):
        def task_scheduled(self, task):
            events.append(("scheduled", task))

        def before_task_step(self, task):
            events.append(("step", task))

    async def waiter(fut):
        await fut  # woken when fut completes
        await asyncio.sleep(0)  # woken by its own yield

    async def main():
        fut = loop.create_future()
        task = loop.create_task(waiter(fut))
        await asyncio.sleep(0)
        fut.set_result(None)
        await task
        return task

    loop.add_instrument(Scheduling())
    task = loop.run_until_complete(main())
    mine = [name for name, obj in events if obj is task]
    # Three steps, each scheduled first; a callback that merely shares the
    # name of the task's step is not taken for one.
    assert mine == ["scheduled", "step"] * 3
