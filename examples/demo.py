"""A plain asyncio program; run it on corun with `corun run examples/demo.py`.

(`make demo` is another demo: `corun demo`, the fetcher against a local
fault-injecting server, in src/corun/fetch/demo.py.)

Nothing here is corun-specific except the report at the end, which shows the
loop it ran on and what an instrument on corun's seam counted. Run it with
`python examples/demo.py` too: it works on the stdlib loop, without the report.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import os
import signal
import sys
import time

request_id: contextvars.ContextVar[int] = contextvars.ContextVar("request_id")


def checksum(data: bytes) -> str:
    """CPU work that belongs in a thread, not on the loop."""
    return hashlib.sha256(data * 2000).hexdigest()[:12]


async def producer(queue: asyncio.Queue[int | None], count: int) -> None:
    for item in range(count):
        await queue.put(item)
    await queue.put(None)


async def worker(queue: asyncio.Queue[int | None], results: list[str]) -> None:
    loop = asyncio.get_running_loop()
    while (item := await queue.get()) is not None:
        request_id.set(item)
        await asyncio.sleep(0.001 * (item % 5))
        results.append(await loop.run_in_executor(None, checksum, str(item).encode()))
    await queue.put(None)  # let the other workers see the end too


async def slow_dependency() -> str:
    await asyncio.sleep(10)
    return "never"


async def main() -> int:
    loop = asyncio.get_running_loop()
    started = time.perf_counter()

    # 1. A pipeline: a producer and four workers in a TaskGroup, a bounded queue.
    queue: asyncio.Queue[int | None] = asyncio.Queue(maxsize=16)
    results: list[str] = []
    async with asyncio.TaskGroup() as group:
        group.create_task(producer(queue, 200))
        for _ in range(4):
            group.create_task(worker(queue, results))
    print(f"pipeline: {len(results)} items hashed in worker threads")

    # 2. Deadlines: asyncio.timeout and wait_for cancel what overruns.
    try:
        async with asyncio.timeout(0.05):
            await slow_dependency()
    except TimeoutError:
        print("timeout: slow dependency cancelled after 50 ms")
    try:
        await asyncio.wait_for(slow_dependency(), timeout=0.05)
    except TimeoutError:
        print("wait_for: cancelled after 50 ms")

    # 3. Fan-out with gather, and shield keeping one call alive.
    squares = await asyncio.gather(*(asyncio.sleep(0.01, i * i) for i in range(10)))
    shielded = await asyncio.shield(asyncio.sleep(0.01, "kept"))
    print(f"gather: {squares}; shield: {shielded}")

    # 4. A real signal, delivered to a handler on the loop.
    got_signal = loop.create_future()
    loop.add_signal_handler(signal.SIGUSR1, got_signal.set_result, "SIGUSR1")
    os.kill(os.getpid(), signal.SIGUSR1)
    print(f"signal: {await got_signal} handled on the loop")
    loop.remove_signal_handler(signal.SIGUSR1)

    elapsed = time.perf_counter() - started
    print(f"done in {elapsed:.2f} s on {type(loop).__module__}.{type(loop).__qualname__}")
    return 0


def run_with_report() -> int:
    """Run main(); on corun, count task steps and I/O waits through an instrument."""
    try:
        import corun
    except ImportError:
        return asyncio.run(main())

    class Counter(corun.Instrument):
        def __init__(self) -> None:
            self.tasks = self.steps = self.waits = 0

        def task_spawned(self, task: object) -> None:
            self.tasks += 1

        def after_task_step(self, task: object) -> None:
            self.steps += 1

        def before_io_wait(self, timeout: float | None) -> None:
            self.waits += 1

    counter = Counter()

    async def instrumented() -> int:
        loop = asyncio.get_running_loop()
        if isinstance(loop, corun.EventLoop):
            loop.add_instrument(counter)
        return await main()

    code = asyncio.run(instrumented())
    if counter.tasks:
        print(
            f"corun instrument: {counter.tasks} tasks, {counter.steps} task steps, "
            f"{counter.waits} I/O waits"
        )
    return code


if __name__ == "__main__":
    sys.exit(run_with_report())
