"""What each CPython version from 3.11 to 3.15 added to asyncio's task API, on both loops.

Every test runs on corun's loop and on the stdlib's, and asserts the running
version's behaviour: eager tasks (3.12), task factories given keyword
arguments and ``Queue.shutdown`` (3.13), the call graph and the deprecation of
policies (3.14). The pins of ``corun.runtime.engine.asyncio_compat`` are here too.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import re
import subprocess
import sys
import threading
import warnings

import pytest


def _child_env():
    """This environment (the venv's corun), without settings that change warnings."""
    env = dict(os.environ)
    for name in ("PYTHONASYNCIODEBUG", "PYTHONDEVMODE", "PYTHONWARNINGS"):
        env.pop(name, None)
    return env


PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)
PY314 = sys.version_info >= (3, 14)


def run(loop, coro):
    return loop.run_until_complete(coro)


# ---------------------------------------------------------------- asyncio_compat


@pytest.mark.corun_only
def test_asyncio_compat_binds_this_versions_internals():
    """The one module that reaches below asyncio's API binds what this version has."""
    from asyncio import tasks

    from corun.runtime.engine import asyncio_compat as compat

    assert compat.register_task is tasks._register_task
    assert compat.enter_task is tasks._enter_task
    assert compat.leave_task is tasks._leave_task
    if PY312:
        assert compat.swap_current_task is tasks._swap_current_task
        assert compat.register_eager_task is tasks._register_eager_task
        assert compat.unregister_eager_task is tasks._unregister_eager_task
    else:
        assert not hasattr(tasks, "_swap_current_task")
        for name in ("swap_current_task", "register_eager_task", "unregister_eager_task"):
            assert getattr(compat, name) is compat._no_eager_tasks
    assert compat.TASK_FACTORY_KWARGS is PY313
    assert compat.TASK_FACTORY_GETS_NAME is PY314
    if PY314:
        assert compat.iscoroutinefunction is inspect.iscoroutinefunction
    else:
        assert compat.iscoroutinefunction is asyncio.iscoroutinefunction


def test_current_task_and_all_tasks_see_the_loops_tasks(loop, task_cls):
    """asyncio's own current_task()/all_tasks() see the tasks (3.12+: the C current_task)."""
    import _asyncio

    assert (asyncio.current_task is getattr(_asyncio, "current_task", None)) is PY312
    seen = {}
    release = loop.create_future()

    async def child():
        seen["child"] = asyncio.current_task()
        await release
        seen["child after wait"] = asyncio.current_task()

    async def main():
        task = asyncio.current_task()
        assert type(task) is task_cls
        kid = asyncio.create_task(child())
        await asyncio.sleep(0)
        assert asyncio.current_task() is task
        assert asyncio.all_tasks() == {task, kid}
        assert asyncio.all_tasks(loop) == {task, kid}
        release.set_result(None)
        await kid
        assert asyncio.all_tasks() == {task}
        return task, kid

    _, kid = run(loop, main())
    assert seen == {"child": kid, "child after wait": kid}
    assert asyncio.current_task(loop) is None
    assert asyncio.all_tasks(loop) == set()


def test_current_task_per_thread(loop, make_loop):
    """Two loops running in two threads each see their own current task (3.14: per thread)."""
    other = make_loop()
    in_other = threading.Event()
    found = {}
    leave = other.create_future()

    async def other_main():
        found["other"] = asyncio.current_task()
        found["other all"] = asyncio.all_tasks()
        in_other.set()
        await leave

    thread = threading.Thread(target=other.run_until_complete, args=(other_main(),))
    thread.start()
    try:
        assert in_other.wait(10)

        async def main():
            me = asyncio.current_task()
            # The other loop's task waits: no task of that loop is running.
            assert asyncio.current_task(other) is None
            assert asyncio.all_tasks() == {me}
            assert asyncio.all_tasks(other) == {found["other"]}
            return me

        me = run(loop, main())
    finally:
        other.call_soon_threadsafe(leave.set_result, None)
        thread.join(10)
    assert found["other"] is not me
    assert found["other all"] == {found["other"]}


# ---------------------------------------------------------------- 3.12: eager tasks


async def _record_eagerly(log, name, wait=None):
    log.append((name, "start", asyncio.current_task()))
    if wait is not None:
        await wait
    log.append((name, "end", asyncio.current_task()))
    return name


def test_eager_start_runs_the_first_step_at_once(loop, task_cls):
    if not PY312:
        coro = asyncio.sleep(0)
        with pytest.raises(TypeError):
            task_cls(coro, loop=loop, eager_start=True)
        coro.close()
        return
    log = []

    async def main():
        me = asyncio.current_task()
        gate = loop.create_future()
        done = task_cls(_record_eagerly(log, "done"), loop=loop, eager_start=True)
        # Finished inside the constructor, as itself the current task.
        assert done.done() and done.result() == "done"
        assert log == [("done", "start", done), ("done", "end", done)]
        assert asyncio.current_task() is me
        assert done not in asyncio.all_tasks()
        blocked = task_cls(_record_eagerly(log, "blocked", gate), loop=loop, eager_start=True)
        assert not blocked.done()
        assert log[2] == ("blocked", "start", blocked)
        assert asyncio.current_task() is me
        assert asyncio.all_tasks() == {me, blocked}
        gate.set_result(None)
        assert await blocked == "blocked"
        assert log[3] == ("blocked", "end", blocked)

    run(loop, main())


def test_eager_start_when_the_loop_is_not_running_is_scheduled(loop, task_cls):
    if not PY312:
        return  # no eager_start before 3.12 (see the test above)
    log = []
    task = task_cls(_record_eagerly(log, "later"), loop=loop, eager_start=True)
    assert not task.done() and log == []
    assert run(loop, task) == "later"


def test_eager_task_that_fails_in_its_first_step(loop, task_cls):
    if not PY312:
        return

    async def fail():
        raise ValueError("first step")

    async def main():
        task = task_cls(fail(), loop=loop, eager_start=True)
        assert task.done()
        with pytest.raises(ValueError, match="first step"):
            task.result()
        # The coroutine is dropped once it is done, as asyncio does. (asyncio's
        # C Task crashed in get_coro() there before 3.12.5: CPython gh-122332.)
        if task_cls is not asyncio.Task or sys.version_info >= (3, 12, 5):
            assert task.get_coro() is None

    run(loop, main())


def test_eager_task_factory(loop, task_cls):
    """asyncio.eager_task_factory (stdlib tasks) and create_eager_task_factory(the loop's Task)."""
    if not PY312:
        assert not hasattr(asyncio, "eager_task_factory")
        return
    for factory, expected in (
        (asyncio.eager_task_factory, asyncio.Task),
        (asyncio.create_eager_task_factory(task_cls), task_cls),
    ):
        log = []
        loop.set_task_factory(factory)

        async def main(log, expected):
            me = asyncio.current_task()
            gate = loop.create_future()
            task = asyncio.create_task(_record_eagerly(log, "eager", gate), name="eager")
            assert type(task) is expected
            assert task.get_name() == "eager"
            assert log == [("eager", "start", task)]
            assert asyncio.current_task() is me
            assert task in asyncio.all_tasks()
            gate.set_result(None)
            await task
            async with asyncio.TaskGroup() as group:
                quick = group.create_task(asyncio.sleep(0, "quick"))
            return quick.result()

        try:
            assert run(loop, asyncio.wait_for(main(log, expected), 10)) == "quick"
        finally:
            loop.set_task_factory(None)
        assert log[-1] == ("eager", "end", log[0][2])


def test_create_task_eager_start_keyword(loop):
    """3.13 passes create_task's keyword arguments on to the Task."""

    async def main():
        task = loop.create_task(asyncio.sleep(0, "x"), eager_start=True)
        assert not task.done()  # sleep(0) yields once
        assert await task == "x"

        async def quick():
            return 1

        task = loop.create_task(quick(), eager_start=True)
        assert task.done() and task.result() == 1

    if PY313:
        run(loop, main())
    else:
        coro = asyncio.sleep(0)
        with pytest.raises(TypeError, match="eager_start"):
            loop.create_task(coro, eager_start=True)
        coro.close()


def test_asyncio_run_with_a_loop_factory(loop_factory, loop_kind):
    async def main():
        return type(asyncio.get_running_loop())

    if PY312:
        kind = asyncio.run(main(), loop_factory=loop_factory)
    else:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            kind = runner.run(main())
    assert (kind.__module__.split(".")[0] == "corun") is (loop_kind == "corun")


# ---------------------------------------------------------------- 3.13: factories, Queue.shutdown


def test_task_factory_is_given_this_versions_arguments(loop, task_cls):
    calls = []

    def factory(loop, coro, **kwargs):
        calls.append(sorted(kwargs))
        return task_cls(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)

    async def main():
        context = contextvars.copy_context()
        plain = loop.create_task(asyncio.sleep(0))
        named = loop.create_task(asyncio.sleep(0), name="named", context=context)
        await asyncio.gather(plain, named)
        assert named.get_name() == "named"
        if PY312:  # get_context() is 3.12's
            assert named.get_context() is context
        if PY313:
            eager = loop.create_task(asyncio.sleep(0), eager_start=True)
            await eager

    try:
        run(loop, main())
    finally:
        loop.set_task_factory(None)
    # The factory of the main task, then the two tasks (and the eager one).
    if PY314:
        expected = [[], [], ["context", "name"], ["eager_start"]]
    elif PY313:
        expected = [[], [], ["context"], ["eager_start"]]
    else:
        expected = [[], [], ["context"]]
    assert calls == expected


def test_queue_shutdown(loop):
    if not PY313:
        assert not hasattr(asyncio.Queue, "shutdown")
        return

    async def main():
        queue = asyncio.Queue()
        queue.put_nowait(1)
        getter_results = []

        async def getter():
            try:
                while True:
                    getter_results.append(await queue.get())
            except asyncio.QueueShutDown:
                getter_results.append("shut down")

        task = asyncio.create_task(getter())
        await asyncio.sleep(0)
        queue.shutdown()
        with pytest.raises(asyncio.QueueShutDown):
            await queue.put(2)
        await task
        assert getter_results == [1, "shut down"]

        full = asyncio.Queue(1)
        full.put_nowait("x")
        putter = asyncio.create_task(full.put("y"))
        await asyncio.sleep(0)
        full.shutdown(immediate=True)
        with pytest.raises(asyncio.QueueShutDown):
            await putter
        assert full.empty()

    run(loop, main())


# ---------------------------------------------------------------- 3.14: call graph


def _graph_shape(text):
    """The formatted graph with ids and line numbers taken out."""
    text = re.sub(r"id=0x[0-9a-f]+", "id=?", text)
    return re.sub(r"line \d+", "line ?", text)


def test_capture_call_graph(loop, task_cls):
    if not PY314:
        assert not hasattr(asyncio, "capture_call_graph")
        return
    graphs = {}

    async def leaf(gate):
        graphs["leaf"] = asyncio.capture_call_graph()
        graphs["leaf text"] = asyncio.format_call_graph()
        await gate

    async def middle(gate):
        await leaf(gate)

    async def main():
        gate = loop.create_future()
        async with asyncio.TaskGroup() as group:
            child = group.create_task(middle(gate), name="child")
            waiter = asyncio.create_task(_await(child), name="waiter")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            graphs["child"] = asyncio.capture_call_graph(child)
            graphs["gate"] = asyncio.capture_call_graph(gate)
            gate.set_result(None)
        await waiter
        return asyncio.current_task()

    async def _await(task):
        await task

    main_task = run(loop, main())
    leaf_graph = graphs["leaf"]
    assert type(leaf_graph.future) is task_cls
    assert [entry.frame.f_code.co_name for entry in leaf_graph.call_stack] == [
        "leaf",
        "middle",
    ]
    # Awaited by the TaskGroup's parent task (the main task).
    assert [g.future for g in leaf_graph.awaited_by] == [main_task]
    child_graph = graphs["child"]
    assert child_graph.future.get_name() == "child"
    assert [entry.frame.f_code.co_name for entry in child_graph.call_stack] == [
        "leaf",
        "middle",
    ]
    awaiters = {g.future.get_name() for g in child_graph.awaited_by}
    assert awaiters == {"waiter", main_task.get_name()}
    gate_graph = graphs["gate"]
    assert gate_graph.call_stack == ()
    assert [g.future.get_name() for g in gate_graph.awaited_by] == ["child"]
    text = _graph_shape(graphs["leaf text"])
    assert text.splitlines()[0] == "* Task(name='child', id=?)"
    assert "  + Call stack:" in text
    assert re.search(r"in async \S*\bleaf\(\)", text)
    assert re.search(r"in async \S*\bmiddle\(\)", text)
    assert f"    * Task(name='{main_task.get_name()}', id=?)" in text


def test_print_call_graph_is_the_same_on_both_loops(loop_factory):
    """print_call_graph() writes the same lines on corun's loop as on asyncio's."""
    if not PY314:
        assert not hasattr(asyncio, "print_call_graph")
        return

    def graph_on(factory):
        import io

        out = io.StringIO()

        async def inner(gate):
            asyncio.print_call_graph(file=out)
            await gate

        async def outer(gate):
            await inner(gate)

        async def main():
            gate = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(outer(gate), name="outer")
            await asyncio.sleep(0)
            asyncio.print_call_graph(task, file=out)
            gate.set_result(None)
            await task

        asyncio.run(main(), loop_factory=factory)
        text = _graph_shape(out.getvalue())
        # The main task's generated name and the file's path do not matter.
        return re.sub(r"Task-\d+", "Task-N", text)

    assert graph_on(loop_factory) == graph_on(asyncio.new_event_loop)


# ---------------------------------------------------------------- 3.14: policies


_NO_DEPRECATIONS = """
import asyncio, sys
import corun

async def main():
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    return type(loop).__module__, type(task).__module__

corun.install()
print(asyncio.run(main()))
if sys.version_info >= (3, 12):
    print(asyncio.run(main(), loop_factory=corun.new_event_loop))
print(corun.run(main()))
"""


def test_import_and_install_give_no_deprecation_warning():
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", _NO_DEPRECATIONS],
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "('corun.runtime.loop', 'corun.runtime.engine.interpreted_task')"
    assert all(line == lines[0] for line in lines)
    assert len(lines) == (3 if PY312 else 2)


_GET_EVENT_LOOP = """
import asyncio, sys, warnings
import corun

if sys.argv[1] == "corun":
    corun.install()
warnings.simplefilter("error", DeprecationWarning)
try:
    loop = asyncio.get_event_loop()
except RuntimeError as exc:
    print("RuntimeError", "no current event loop" in str(exc))
except DeprecationWarning as exc:
    print("DeprecationWarning")
else:
    print("loop", type(loop).__module__)
    loop.close()
"""


@pytest.mark.parametrize("kind", ["corun", "asyncio"])
def test_get_event_loop_without_a_loop(kind):
    """asyncio.get_event_loop() outside a loop, under corun.install() and without it."""
    result = subprocess.run(
        [sys.executable, "-c", _GET_EVENT_LOOP, kind],
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    # 3.14 no longer makes a loop here; 3.12 and 3.13 warn that they do
    # (here an error); 3.11 makes one quietly in the main thread.
    if PY314:
        assert result.stdout.split() == ["RuntimeError", "True"]
    elif PY312:
        assert result.stdout.split() == ["DeprecationWarning"]
    else:
        expected = "corun.runtime.loop" if kind == "corun" else "asyncio.unix_events"
        assert result.stdout.split() == ["loop", expected]


def test_get_event_loop_in_a_running_loop(loop):
    async def main():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return asyncio.get_event_loop()

    assert run(loop, main()) is loop
