"""``registry.pending_tasks``: a loop's tasks, read from another thread, on every Python.

Each test runs on corun's loop and on asyncio's, the loop in a thread of its
own and the reading done from the test's thread, as ``corun ps`` does.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import corun
from corun.observe import registry

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "corun": corun.new_event_loop,
    "asyncio": asyncio.new_event_loop,
}


@pytest.fixture(params=sorted(LOOPS))
def running_loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop]:
    """A loop of the kind named, running in a thread of its own."""
    loop = LOOPS[request.param]()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the loop's thread and return its result."""

    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(10)


def test_the_registry_is_read_the_way_this_python_keeps_it() -> None:
    if sys.version_info >= (3, 14):
        expected = "all_tasks"  # C keeps non-native tasks where only all_tasks sees them
    elif sys.version_info >= (3, 12):
        expected = "scheduled+eager"
    else:
        expected = "all_tasks_weakset"
    assert expected == registry.SOURCE


def test_the_loop_s_pending_tasks_are_read_from_another_thread(
    running_loop: asyncio.AbstractEventLoop,
) -> None:
    other = corun.new_event_loop()
    try:
        # A task of another loop (never run) is not listed.
        stranger = other.create_task(asyncio.sleep(3600), name="stranger")
        gate = asyncio.Event()

        async def waiter() -> None:
            await gate.wait()

        async def quick() -> None:
            return None

        def start() -> tuple[set[asyncio.Task[None]], asyncio.Task[None]]:
            waiting = {running_loop.create_task(waiter(), name=f"w{i}") for i in range(50)}
            return waiting, running_loop.create_task(quick(), name="quick")

        waiting, done = on_loop(running_loop, start)
        deadline = time.monotonic() + 10
        while not done.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert done.done()
        listed = registry.pending_tasks(running_loop)
        # Exactly the waiting ones: no done task, none of another loop.
        assert {id(task) for task in listed} == {id(task) for task in waiting}
        assert len(listed) == len(waiting)
        assert {id(t) for t in on_loop(running_loop, asyncio.all_tasks)} >= {id(t) for t in listed}
        on_loop(running_loop, gate.set)
        deadline = time.monotonic() + 10
        while registry.pending_tasks(running_loop) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert registry.pending_tasks(running_loop) == []
        stranger.cancel()
        other.run_until_complete(asyncio.gather(stranger, return_exceptions=True))
    finally:
        other.close()


def test_a_task_caught_in_its_eager_first_step_is_listed(
    running_loop: asyncio.AbstractEventLoop,
) -> None:
    """3.12+ keeps a task that runs its first step eagerly in a registry of its own."""
    if sys.version_info < (3, 12):
        # No eager tasks before 3.12: a task made by the factory is a plain one.
        assert not hasattr(asyncio, "eager_task_factory")
    inside = threading.Event()
    release = threading.Event()
    caught: list[asyncio.Task[Any] | None] = []

    async def blocks_in_first_step() -> None:
        caught.append(asyncio.current_task())
        inside.set()
        release.wait(10)  # holds the loop's thread in the eager step
        await asyncio.sleep(0)

    def start() -> None:
        if sys.version_info >= (3, 12):
            running_loop.set_task_factory(asyncio.eager_task_factory)
        running_loop.create_task(blocks_in_first_step())

    running_loop.call_soon_threadsafe(start)
    assert inside.wait(10)
    try:
        listed = registry.pending_tasks(running_loop)
    finally:
        release.set()
    # 3.12+: caught inside its eager step, before it was ever scheduled.
    assert caught[0] is not None
    assert [id(task) for task in listed] == [id(caught[0])]
