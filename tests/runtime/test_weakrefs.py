"""Weak references to futures, tasks, handles and transports; tasks that refer to themselves.

asyncio's Future, Task, Handle, TimerHandle and transports take weak references, and
programs (and test suites that check for leaks) take them. Freeing a weakly
referenced object must clear its references: ``ref()`` answers None and the
callbacks run, at once when the last reference goes, or at the collection
that frees a cycle. Each test runs on corun's loop and on asyncio's.

A task that refers to itself through an attribute of the program's own is a
cycle like any other, which the garbage collector must see and free, with
"Task was destroyed but it is pending!" when it was still waiting.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Callable
from typing import Any

import pytest

import corun


def run_once(loop: asyncio.AbstractEventLoop) -> None:
    """Run the callbacks that are ready (and those they schedule, one round)."""
    loop.run_until_complete(asyncio.sleep(0))


class Recorder:
    """A weak reference callback that notes the references it was called with."""

    def __init__(self) -> None:
        self.called: list[weakref.ref[Any]] = []

    def __call__(self, ref: weakref.ref[Any]) -> None:
        self.called.append(ref)


def assert_freed(ref: weakref.ref[Any], recorder: Recorder) -> None:
    assert ref() is None
    assert recorder.called == [ref]


# --- weak references are taken, and cleared when the object is freed ---------


@pytest.mark.parametrize("done", [False, True], ids=["pending", "done"])
def test_future_is_freed_with_its_weak_references_cleared(loop, done):
    fut = loop.create_future()
    recorder = Recorder()
    ref = weakref.ref(fut, recorder)
    assert ref() is fut
    if done:
        fut.set_result("x")
    del fut
    assert_freed(ref, recorder)


def test_future_made_by_its_class_is_weakly_referenced(loop, future_cls):
    fut = future_cls(loop=loop)
    recorder = Recorder()
    ref = weakref.ref(fut, recorder)
    del fut
    assert_freed(ref, recorder)


def test_subclass_of_future_is_weakly_referenced(loop, future_cls):
    class MyFuture(future_cls):  # type: ignore[misc, valid-type]
        pass

    fut = MyFuture(loop=loop)
    fut.note = "a subclass has a __dict__"
    recorder = Recorder()
    ref = weakref.ref(fut, recorder)
    del fut
    assert_freed(ref, recorder)


def test_task_is_freed_with_its_weak_references_cleared(loop):
    async def work():
        await asyncio.sleep(0)
        return 1

    task = loop.create_task(work())
    recorder = Recorder()
    ref = weakref.ref(task, recorder)
    assert loop.run_until_complete(task) == 1
    del task
    assert_freed(ref, recorder)


def test_handle_is_freed_with_its_weak_references_cleared(loop):
    ran = []
    handle = loop.call_soon(ran.append, 1)
    recorder = Recorder()
    ref = weakref.ref(handle, recorder)
    run_once(loop)
    assert ran == [1]
    assert ref() is handle
    del handle
    assert_freed(ref, recorder)


def test_cancelled_handle_is_freed_with_its_weak_references_cleared(loop):
    handle = loop.call_soon(print)
    recorder = Recorder()
    ref = weakref.ref(handle, recorder)
    handle.cancel()
    del handle
    run_once(loop)  # the queue lets go of it
    assert_freed(ref, recorder)


def test_timer_handle_is_freed_with_its_weak_references_cleared(loop):
    ran = []
    handle = loop.call_later(0, ran.append, 1)
    assert type(handle).__name__ == "TimerHandle"
    recorder = Recorder()
    ref = weakref.ref(handle, recorder)
    run_once(loop)
    run_once(loop)
    assert ran == [1]
    del handle
    assert_freed(ref, recorder)


def test_weak_collections_of_futures_and_handles_empty(loop):
    """What leak-checking test suites do: a WeakSet of everything made."""
    futures: weakref.WeakSet[Any] = weakref.WeakSet()
    handles: weakref.WeakSet[Any] = weakref.WeakSet()
    by_id: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
    for i in range(100):
        fut = loop.create_future()
        futures.add(fut)
        by_id[i] = fut
        handles.add(loop.call_soon(fut.set_result, i))
        handles.add(loop.call_later(0, print) if i % 2 else loop.call_soon(print))
    del fut
    assert len(futures) == 100 and len(by_id) == 100 and len(handles) == 200
    for handle in handles:
        if handle._callback is print:
            handle.cancel()
    del handle
    run_once(loop)
    run_once(loop)
    assert len(futures) == 0 and len(by_id) == 0
    assert len(handles) == 0


def test_future_in_an_unreachable_cycle_is_collected_with_its_references_cleared(loop):
    fut = loop.create_future()
    fut.set_result([fut])  # the future holds itself: only the collector frees it
    recorder = Recorder()
    ref = weakref.ref(fut, recorder)
    del fut
    gc.collect()
    assert_freed(ref, recorder)


def test_weak_reference_callback_runs_while_the_future_is_freed(loop):
    """The callback runs arbitrary code (here it makes and frees more futures)."""
    seen: list[object] = []
    inner_refs: list[weakref.ref[Any]] = []

    def callback(ref: weakref.ref[Any]) -> None:
        seen.append(ref())
        for _ in range(3):
            inner = loop.create_future()
            inner_refs.append(weakref.ref(inner, lambda r: seen.append("inner")))
            del inner

    fut = loop.create_future()
    ref = weakref.ref(fut, callback)
    del fut
    assert seen == [None, "inner", "inner", "inner"]
    assert ref() is None


@pytest.mark.corun_only
def test_compiled_hierarchy_keeps_one_weak_reference_slot():
    """A subclass's slot is its base's (one layout): a second would be a crash."""
    from corun.runtime.engine.futures import Future
    from corun.runtime.engine.handles import Handle, OneArgHandle
    from corun.runtime.engine.task_core import TaskCore
    from corun.runtime.engine.timers import TimerHandle

    for base, subclasses in (
        (Future, (TaskCore, corun.Task)),
        (Handle, (OneArgHandle, TimerHandle)),
    ):
        assert base.__weakrefoffset__ > 0
        for cls in subclasses:
            assert cls.__weakrefoffset__ == base.__weakrefoffset__, cls
            assert cls.__basicsize__ > cls.__weakrefoffset__, cls


# --- transports: the loop keeps them in a WeakValueDictionary ------------------


def _open_transports(loop: asyncio.AbstractEventLoop) -> list[asyncio.BaseTransport]:
    """A connected TCP pair's two transports, a UDP transport and a write pipe's."""
    import os

    async def main() -> list[asyncio.BaseTransport]:
        accepted: asyncio.Future[asyncio.BaseTransport] = loop.create_future()

        class Accept(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted.set_result(transport)

        server = await loop.create_server(Accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        udp, _ = await loop.create_datagram_endpoint(
            asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0)
        )
        read_fd, write_fd = os.pipe()
        os.close(read_fd)  # the write end is enough
        pipe, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, os.fdopen(write_fd, "wb"))
        server.close()
        return [client, await accepted, udp, pipe]

    return loop.run_until_complete(main())


def test_transports_are_freed_with_their_weak_references_cleared(loop):
    transports = _open_transports(loop)
    kinds = [asyncio.Transport, asyncio.Transport, asyncio.BaseTransport, asyncio.WriteTransport]
    for transport, kind in zip(transports, kinds, strict=True):
        assert isinstance(transport, kind), transport
    recorders = [Recorder() for _ in transports]
    refs = [weakref.ref(t, r) for t, r in zip(transports, recorders, strict=True)]
    for transport in transports:
        transport.close()
    del transport
    transports.clear()
    run_once(loop)
    run_once(loop)
    gc.collect()
    for ref, recorder in zip(refs, recorders, strict=True):
        assert_freed(ref, recorder)


# --- freed by the million, in a child: a dangling weak reference is a crash ----

CHURN = textwrap.dedent(
    """
    import asyncio, gc, json, sys, weakref
    import corun

    ROUNDS = int(sys.argv[2])
    loop = corun.new_event_loop() if sys.argv[1] == "corun" else asyncio.new_event_loop()
    called = 0

    def note(ref):
        global called
        called += 1

    def noop():
        pass

    alive = weakref.WeakSet()
    refs = []
    for _ in range(ROUNDS):
        batch = []
        for i in range(200):
            fut = loop.create_future()
            refs.append(weakref.ref(fut, note))
            alive.add(fut)
            handle = loop.call_soon(fut.set_result, i) if i % 2 else loop.call_later(0, noop)
            refs.append(weakref.ref(handle, note))
            alive.add(handle)
            if i % 6 == 0:  # one with no call_soon to set it
                fut.set_result([fut])  # a cycle, for the collector
            batch.append(fut)
        del fut, handle
        loop.run_until_complete(asyncio.sleep(0))
        loop.run_until_complete(asyncio.sleep(0))
        del batch
        if len(refs) > 20_000:
            gc.collect()
            assert all(r() is None for r in refs), "a weak reference outlived its object"
            refs.clear()
        assert len(alive) <= 400  # iterating touches every weak reference
    gc.collect()
    print(json.dumps({"alive": len(alive), "dangling": sum(r() is not None for r in refs),
                      "called": called, "compiled": corun.COMPILED}))
    """
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["corun", "asyncio"])
def test_hundreds_of_thousands_of_weakly_referenced_futures_and_handles_are_freed(kind):
    rounds = 500  # 100,000 futures and 100,000 handles
    proc = subprocess.run(
        [sys.executable, "-c", CHURN, kind, str(rounds)],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-2000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["alive"] == 0
    assert report["dangling"] == 0
    assert report["called"] == 2 * 200 * rounds
    assert report["compiled"] == corun.COMPILED


# --- a task that refers to itself through an attribute ------------------------

SELF_REFERENCES: dict[str, Callable[[Any], None]] = {
    "itself": lambda task: setattr(task, "me", task),
    "closure": lambda task: setattr(task, "on_done", lambda: task.done()),
    "container": lambda task: setattr(task, "state", {"owner": [task]}),
    "done_callback": lambda task: task.add_done_callback(lambda _: task.done()),
}


@pytest.mark.parametrize("how", list(SELF_REFERENCES))
def test_pending_task_referring_to_itself_is_collected_and_reported(loop, errors, how):
    async def wait_forever():
        await loop.create_future()  # nobody else holds it

    task = loop.create_task(wait_forever())
    run_once(loop)
    SELF_REFERENCES[how](task)
    recorder = Recorder()
    ref = weakref.ref(task, recorder)
    del task
    gc.collect()
    assert_freed(ref, recorder)
    context = errors.pop("Task was destroyed but it is pending")
    assert not context["task"].done()
    del context


@pytest.mark.parametrize("how", list(SELF_REFERENCES))
def test_finished_task_referring_to_itself_is_collected(loop, how):
    async def work():
        await asyncio.sleep(0)
        return "done"

    task = loop.create_task(work())
    SELF_REFERENCES[how](task)
    assert loop.run_until_complete(task) == "done"
    recorder = Recorder()
    ref = weakref.ref(task, recorder)
    del task
    gc.collect()
    assert_freed(ref, recorder)


def test_running_task_referring_to_itself_is_collected(loop):
    """``asyncio.current_task().me = ...``, as programs do, from inside."""

    async def work():
        task = asyncio.current_task()
        assert task is not None
        task.me = task
        task.created = 1.5
        await asyncio.sleep(0)
        return task.me, task.created

    task = loop.create_task(work())
    assert loop.run_until_complete(task) == (task, 1.5)
    ref = weakref.ref(task)
    del task
    gc.collect()
    assert ref() is None
