"""Micro benchmarks, run inside a worker on the loop under test.

Each function takes a fresh loop (created by the worker, not timed) and the
case's params, times only the measured section with ``time.perf_counter``,
and returns the metrics. Where it helps the interpreter's specialisation
settle, a run a tenth of the size goes first on the same loop (``warmup``).
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import random
import time
import tracemalloc
from typing import Any

Metrics = dict[str, float]


def _run_measured(loop: asyncio.AbstractEventLoop, coro: Any) -> float:
    result = loop.run_until_complete(coro)
    assert isinstance(result, float)
    return result


# --------------------------------------------------------------------------- call_soon


class _CallSoonChains:
    """``chains`` callbacks in flight; each schedules the next until ``n`` ran."""

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int, chains: int) -> None:
        self.loop = loop
        self.n = n
        self.chains = min(chains, n)
        self.to_schedule = n - self.chains
        self.done = 0
        self.cb = self._cb  # bound method cached: one object for every handle

    def _cb(self) -> None:
        self.done += 1
        if self.to_schedule > 0:
            self.to_schedule -= 1
            self.loop.call_soon(self.cb)
        elif self.done == self.n:
            self.loop.stop()

    def run(self) -> float:
        t0 = time.perf_counter()
        for _ in range(self.chains):
            self.loop.call_soon(self.cb)
        self.loop.run_forever()
        elapsed = time.perf_counter() - t0
        assert self.done == self.n, (self.done, self.n)
        return elapsed


def call_soon(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``n`` callbacks: ``chains`` of ``call_soon`` that each reschedule themselves."""
    n, chains = int(params["n"]), int(params["chains"])
    _CallSoonChains(loop, max(1, n // 10), chains).run()  # warmup
    return {"time_ms": _CallSoonChains(loop, n, chains).run() * 1e3}


# --------------------------------------------------------------------------- gather


async def _gathered(value: int) -> int:
    return value


async def _gather_main(rounds: int, width: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        results = await asyncio.gather(*[_gathered(i) for i in range(width)])
        assert len(results) == width
    return time.perf_counter() - t0


def gather(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``rounds`` of ``asyncio.gather`` over ``width`` trivial coroutines (tasks made, run, collected)."""
    rounds, width = int(params["rounds"]), int(params["width"])
    _run_measured(loop, _gather_main(max(1, rounds // 10), width))
    return {"time_ms": _run_measured(loop, _gather_main(rounds, width)) * 1e3}


# --------------------------------------------------------------------------- loops


def loops(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``n`` loops of the same kind as ``loop`` created, run once and closed."""
    n = int(params["n"])
    factory = type(loop)

    def cycle(count: int) -> float:
        t0 = time.perf_counter()
        for _ in range(count):
            other = factory()
            other.run_until_complete(asyncio.sleep(0))
            other.close()
        return time.perf_counter() - t0

    cycle(max(1, n // 10))
    return {"time_ms": cycle(n) * 1e3}


# --------------------------------------------------------------------------- tasks


async def _sleeper(steps: int) -> None:
    for _ in range(steps):
        await asyncio.sleep(0)


async def _tasks_main(loop: asyncio.AbstractEventLoop, n: int, steps: int) -> float:
    t0 = time.perf_counter()
    tasks = [loop.create_task(_sleeper(steps)) for _ in range(n)]
    for t in tasks:
        await t
    return time.perf_counter() - t0


def tasks(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``n`` tasks created at once, each doing ``steps`` ``await asyncio.sleep(0)``."""
    n, steps = int(params["n"]), int(params["steps"])
    _run_measured(loop, _tasks_main(loop, max(1, n // 10), steps))
    return {"time_ms": _run_measured(loop, _tasks_main(loop, n, steps)) * 1e3}


# --------------------------------------------------------------------------- steps


async def _spin(steps: int) -> None:
    for _ in range(steps):
        await asyncio.sleep(0)


async def _steps_main(loop: asyncio.AbstractEventLoop, tasks: int, steps: int) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(*(_spin(steps) for _ in range(tasks)))
    return time.perf_counter() - t0


async def _idle_tasks(loop: asyncio.AbstractEventLoop, count: int) -> Any:
    """``count`` tasks waiting on one event, and the event that releases them."""
    release = asyncio.Event()
    idle = [loop.create_task(release.wait()) for _ in range(count)]
    await asyncio.sleep(0)
    return release, idle


def steps(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """Empty task steps: ``tasks`` tasks each doing ``n // tasks`` ``await asyncio.sleep(0)``.

    The cost of one step of the loop and nothing else; ``ns_per_step`` is what
    observation's per-step budget is stated in. With ``idle``, that many more
    tasks wait on an event meanwhile (what ``corun top`` has to look through).
    """
    n, tasks = int(params["n"]), int(params["tasks"])
    idle = int(params.get("idle", 0))
    held = loop.run_until_complete(_idle_tasks(loop, idle)) if idle else None
    _run_measured(loop, _steps_main(loop, tasks, max(1, n // tasks // 10)))
    elapsed = _run_measured(loop, _steps_main(loop, tasks, n // tasks))
    if held is not None:
        held[0].set()
        loop.run_until_complete(asyncio.gather(*held[1]))
    return {"time_ms": elapsed * 1e3, "ns_per_step": elapsed / n * 1e9}


# --------------------------------------------------------------------------- ping-pong


class _PingPong:
    """Two tasks hand a value back and forth through a fresh future each way."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ping: asyncio.Future[int] = loop.create_future()
        self.pong: asyncio.Future[int] = loop.create_future()

    async def ponger(self, n: int) -> None:
        loop = self.loop
        for _ in range(n):
            value = await self.ping
            self.ping = loop.create_future()  # before waking the pinger
            self.pong.set_result(value)

    async def main(self, n: int) -> float:
        loop = self.loop
        t0 = time.perf_counter()
        other = loop.create_task(self.ponger(n))
        for i in range(n):
            self.pong = loop.create_future()
            self.ping.set_result(i)
            await self.pong
        await other
        return time.perf_counter() - t0


def ping_pong(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``n`` round trips between two tasks over futures."""
    n = int(params["n"])
    _run_measured(loop, _PingPong(loop).main(max(1, n // 10)))
    return {"time_ms": _run_measured(loop, _PingPong(loop).main(n)) * 1e3}


# --------------------------------------------------------------------------- timers


class _Timers:
    """Schedule ``n`` timers from a callback, cancel every other one, run the rest."""

    def __init__(self, loop: asyncio.AbstractEventLoop, n: int, max_delay: float) -> None:
        rng = random.Random(42)
        self.loop = loop
        self.delays = [rng.random() * max_delay for _ in range(n)]
        self.expected = n - (n + 1) // 2
        self.fired = 0
        self.cb = self._fired

    def _fired(self) -> None:
        self.fired += 1
        if self.fired == self.expected:
            self.loop.stop()

    def _schedule(self) -> None:
        call_later = self.loop.call_later
        cb = self.cb
        handles = [call_later(d, cb) for d in self.delays]
        for h in handles[::2]:
            h.cancel()
        if self.expected == 0:
            self.loop.stop()

    def run(self) -> float:
        t0 = time.perf_counter()
        self.loop.call_soon(self._schedule)
        self.loop.run_forever()
        elapsed = time.perf_counter() - t0
        assert self.fired == self.expected, (self.fired, self.expected)
        return elapsed


def timers(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``n`` ``call_later`` with delays in [0, max_delay), half cancelled at once."""
    n, max_delay = int(params["n"]), float(params["max_delay"])
    _Timers(loop, max(2, n // 10), max_delay).run()
    return {"time_ms": _Timers(loop, n, max_delay).run() * 1e3}


# --------------------------------------------------------------------------- idle tasks


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


async def _park(fut: asyncio.Future[None]) -> None:
    await fut


async def _idle_main(loop: asyncio.AbstractEventLoop, n: int, traced: bool) -> Metrics:
    gc.collect()
    if traced:
        tracemalloc.start()
    traced0 = tracemalloc.get_traced_memory()[0] if traced else 0
    rss0 = _rss_bytes()
    t0 = time.perf_counter()
    futures: list[asyncio.Future[None]] = []
    tasks: list[asyncio.Task[None]] = []
    for _ in range(n):
        fut: asyncio.Future[None] = loop.create_future()
        futures.append(fut)
        tasks.append(loop.create_task(_park(fut)))
    await asyncio.sleep(0)  # every task runs its first step and parks on its future
    elapsed = time.perf_counter() - t0
    rss1 = _rss_bytes()
    traced1 = tracemalloc.get_traced_memory()[0] if traced else 0
    if traced:
        tracemalloc.stop()
    for fut in futures:
        fut.set_result(None)
    for t in tasks:
        await t
    if traced:
        return {"traced_per_task": (traced1 - traced0) / n}
    return {"create_ms": elapsed * 1e3, "rss_per_task": (rss1 - rss0) / n}


def idle_tasks(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``n`` tasks, each parked on its own future: creation time and memory per task.

    The memory includes the task, its coroutine and the future it waits on,
    plus 16 bytes of list slots that every loop pays alike. With
    ``tracemalloc`` the time is not reported (tracing slows allocation down).
    """
    n, traced = int(params["n"]), bool(params["tracemalloc"])
    result = loop.run_until_complete(_idle_main(loop, n, traced))
    assert isinstance(result, dict)
    return result


# --------------------------------------------------------------------------- getaddrinfo


async def _getaddrinfo_main(loop: asyncio.AbstractEventLoop, n: int, host: str, port: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        await loop.getaddrinfo(host, port)
    return time.perf_counter() - t0


def getaddrinfo(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``n`` sequential ``await loop.getaddrinfo(host, port)`` with a numeric host."""
    n, host, port = int(params["n"]), str(params["host"]), int(params["port"])
    _run_measured(loop, _getaddrinfo_main(loop, max(1, n // 10), host, port))
    return {"time_ms": _run_measured(loop, _getaddrinfo_main(loop, n, host, port)) * 1e3}


# --------------------------------------------------------------------------- subprocess spawn


class _Exit(asyncio.SubprocessProtocol):
    def __init__(self, exited: asyncio.Future[None]) -> None:
        self.exited = exited

    def process_exited(self) -> None:
        self.exited.set_result(None)


async def _spawn_main(loop: asyncio.AbstractEventLoop, n: int, heap_mib: int) -> list[float]:
    latencies = []
    for _ in range(n):
        exited = loop.create_future()
        t0 = time.perf_counter()
        transport, _ = await loop.subprocess_exec(
            functools.partial(_Exit, exited), "/bin/true", stdin=None, stdout=None, stderr=None
        )
        latencies.append(time.perf_counter() - t0)  # until subprocess_exec returned
        await exited
        transport.close()
    return latencies


def spawn(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> Metrics:
    """``n`` sequential ``subprocess_exec("/bin/true")`` from a process holding ``heap_mib``.

    Reports the median time until ``subprocess_exec`` returned (the child runs
    and the protocol is connected), and how long the loop was unable to run
    a callback meanwhile: a ticker every 0.5 ms records its longest lateness.
    """
    n, heap_mib = int(params["n"]), int(params["heap_mib"])
    heap = [bytearray(1024 * 1024) for _ in range(heap_mib)]  # a large heap makes fork slower
    worst = [0.0]

    def tick(due: float) -> None:
        now = loop.time()
        worst[0] = max(worst[0], now - due)
        if not stopped:
            loop.call_at(now + 0.0005, tick, now + 0.0005)

    stopped = False
    loop.call_soon(tick, loop.time())
    loop.run_until_complete(_spawn_main(loop, max(1, n // 10), heap_mib))  # warm up
    worst[0] = 0.0
    latencies = loop.run_until_complete(_spawn_main(loop, n, heap_mib))
    stopped = True
    del heap
    latencies.sort()
    return {
        "spawn_ms": latencies[len(latencies) // 2] * 1e3,
        "loop_blocked_ms": worst[0] * 1e3,
    }
