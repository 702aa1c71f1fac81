"""A process with 10,000 tasks waiting on every kind of thing, observed (CORUN_OBSERVE=1).

Prints ``ready BASELINE`` when all tasks wait, BASELINE being the longest gap
its 1 ms ticker saw beyond the 1 ms (in ms) over a second with nothing asked
of it; then, when its stdin closes, the longest gap since (in ms), and on a
second line the gaps over 1 ms since, as JSON ``[[end, gap_ms], ...]`` (``end``
on ``time.monotonic()``, which every process shares), on a third the longest
time each answer held the loop up (``held_ms`` of the inspection server's audit
lines, as JSON), and exits.
Task names say what each waits on: ``sleep-N``, ``event-N``, ``queue-N``,
``lock-N``, ``sock-N``, ``stream-N``, ``task-N`` (awaits ``sleep-N``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
import sys
import time

import corun

#: Tasks of each kind: 10,000 in all. Stream readers need a connection each
#: (one StreamReader serves one reader at a time), so there are fewer.
COUNTS = {
    "sleep": 1656,
    "event": 1656,
    "queue": 1656,
    "lock": 1656,
    "sock": 1656,
    "stream": 64,
    "task": 1656,
}


class _Holds(logging.Handler):
    """The ``held_ms`` of each audit line of ``corun.observe``'s server."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.held: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = re.search(r" held_ms=([\d.]+)", record.getMessage())
        if found:
            self.held.append(float(found.group(1)))


async def main() -> None:
    audits = _Holds()
    logging.getLogger("corun.observe").addHandler(audits)
    logging.getLogger("corun.observe").setLevel(logging.INFO)
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    queue: asyncio.Queue[int] = asyncio.Queue()
    lock = asyncio.Lock()
    await lock.acquire()
    pairs = [socket.socketpair() for _ in range(8)]
    for a, b in pairs:
        a.setblocking(False)
        b.setblocking(False)
    accepted: list[asyncio.StreamWriter] = []  # kept open, so that reads wait
    server = await asyncio.start_server(lambda r, w: accepted.append(w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    # Both ends kept: a writer that is collected closes its connection.
    streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(COUNTS["stream"])]
    readers = [reader for reader, _writer in streams]
    sleepers: list[asyncio.Task[None]] = []
    tasks: list[asyncio.Task[object]] = []
    for n in range(COUNTS["sleep"]):
        sleepers.append(asyncio.create_task(asyncio.sleep(3600), name=f"sleep-{n}"))
        tasks.append(asyncio.create_task(_await(sleepers[-1]), name=f"task-{n}"))
        tasks.append(asyncio.create_task(event.wait(), name=f"event-{n}"))
        tasks.append(asyncio.create_task(queue.get(), name=f"queue-{n}"))
        tasks.append(asyncio.create_task(lock.acquire(), name=f"lock-{n}"))
        sock = pairs[n % len(pairs)][0]
        tasks.append(asyncio.create_task(loop.sock_recv(sock, 1), name=f"sock-{n}"))
    for n, reader in enumerate(readers):
        tasks.append(asyncio.create_task(reader.read(1), name=f"stream-{n}"))
    await asyncio.sleep(0.2)
    worst = 0.0
    gaps: list[tuple[float, float]] = []

    async def ticker() -> None:
        nonlocal worst
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.001)
            now = time.monotonic()
            gap = now - last - 0.001
            worst = max(worst, gap)
            if gap > 0.001 and len(gaps) < 1_000:  # a pipe's worth, unread by the test
                gaps.append((now, round(gap * 1e3, 3)))
            last = now

    tick = asyncio.create_task(ticker(), name="ticker")
    await asyncio.sleep(0.2)
    worst = 0.0
    await asyncio.sleep(1.0)
    baseline = worst
    worst = 0.0
    gaps.clear()
    print(f"ready {baseline * 1e3:.3f}", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
    print(f"{worst * 1e3:.3f}", flush=True)
    print(json.dumps(gaps), flush=True)
    print(json.dumps(audits.held), flush=True)
    tick.cancel()
    for task in [*sleepers, *tasks]:
        task.cancel()
    await asyncio.gather(*sleepers, *tasks, return_exceptions=True)
    server.close()


async def _await(task: asyncio.Task[None]) -> None:
    await task


if __name__ == "__main__":
    corun.run(main())
