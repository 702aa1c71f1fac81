"""aiohttp servers for the fetch-behaviour tests, on 127.0.0.1.

``AppThread`` serves an app from a thread of the test's process (its own
loop); handlers update plain attributes that tests read after it closes.
``ThreadServer`` serves the HTTP tests' fault-injecting server the same way.

``ServerProcess`` runs a capacity server (``shedding`` or ``latency``) in a
process of its own (``python fetch_servers.py KIND ...``), so that what it
measures (requests in flight, arrival times) is not distorted by the
client's work: in one process the two would share the GIL, and a busy
client would look like a slow server. Its ``Load`` comes back as JSON from
``GET /_load``.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

from aiohttp import web

# The fault-injecting server of the HTTP tests, for ThreadServer.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "http"))

from http_servers import Faults, serve


class ServedThread:
    """Run ``serving()`` on a loop of its own in a thread: an async context manager
    that serves until it is exited, yielding the server's base URL."""

    def __init__(self, serving: Callable[[], AbstractAsyncContextManager[str]]) -> None:
        self.base = ""
        self._serving = serving
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with self._serving() as base:
            self.base = base
            self._ready.set()
            await self._stop.wait()

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10)

    def close(self) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AppThread(ServedThread):
    """Serve the ``web.Application`` that ``make_app()`` returns, from a thread."""

    def __init__(self, make_app: Callable[[], web.Application]) -> None:
        super().__init__(lambda: _app_served(make_app))


class ThreadServer(ServedThread):
    """The fault-injecting server (``http_servers``) on its own loop in a thread (so a
    child process, or a test's own loop, can talk to it)."""

    def __init__(self) -> None:
        self.faults = Faults()
        super().__init__(lambda: serve(self.faults))


@asynccontextmanager
async def _app_served(make_app: Callable[[], web.Application]) -> AsyncIterator[str]:
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@dataclass
class Load:
    """What a capacity server saw: requests in flight over time, and the refusals.

    ``events`` holds ``(time, +1)`` when a served request arrives and
    ``(time, -1)`` when it leaves; ``arrivals`` holds ``(time, in_flight,
    refused)`` per request, ``in_flight`` counting it.
    """

    in_flight: int = 0
    events: list[tuple[float, int]] = field(default_factory=list)
    arrivals: list[tuple[float, int, bool]] = field(default_factory=list)

    def enter(self) -> int:
        self.in_flight += 1
        now = time.monotonic()
        self.events.append((now, +1))
        self.arrivals.append((now, self.in_flight, False))
        return self.in_flight

    def leave(self) -> None:
        self.in_flight -= 1
        self.events.append((time.monotonic(), -1))

    def refuse(self) -> None:
        self.arrivals.append((time.monotonic(), self.in_flight + 1, True))

    def second_half(self) -> tuple[float, float]:
        """The time span of the second half of the requests (by arrival)."""
        times = [t for t, _, _ in self.arrivals]
        return times[len(times) // 2], times[-1]

    def mean_in_flight(self, start: float, end: float) -> float:
        """The time-weighted mean of requests in flight (served ones) over [start, end]."""
        level = 0
        area = 0.0
        last = start
        for when, step in self.events:
            if when > end:
                break
            if when > start:
                area += level * (when - last)
                last = when
            level += step
        area += level * (end - last)
        return area / (end - start)

    def in_window(self, start: float, end: float) -> list[tuple[float, int, bool]]:
        times = [t for t, _, _ in self.arrivals]
        return self.arrivals[bisect.bisect_left(times, start) : bisect.bisect_right(times, end)]


def shedding_app(load: Load, capacity: int, delay: float) -> Callable[[], web.Application]:
    """503 (no ``Retry-After``) to a request that arrives with ``capacity`` in flight; else
    200 after ``delay`` seconds."""

    async def handle(request: web.Request) -> web.Response:
        if load.in_flight >= capacity:
            load.refuse()
            return web.Response(status=503, text="overloaded")
        load.enter()
        try:
            await asyncio.sleep(delay)
        finally:
            load.leave()
        return web.Response(text="ok")

    return _with_load_route(load, handle)


def latency_app(load: Load, base: float, capacity: int) -> Callable[[], web.Application]:
    """200 after ``base * (1 + (n - 1) / capacity)`` seconds, ``n`` being the requests in
    flight with this one: latency doubles when ``capacity + 1`` are in flight."""

    async def handle(request: web.Request) -> web.Response:
        n = load.enter()
        try:
            await asyncio.sleep(base * (1 + (n - 1) / capacity))
        finally:
            load.leave()
        return web.Response(text="ok")

    return _with_load_route(load, handle)


def _with_load_route(
    load: Load, handle: Callable[[web.Request], Any]
) -> Callable[[], web.Application]:
    async def report(request: web.Request) -> web.Response:
        return web.json_response(asdict(load))

    def make() -> web.Application:
        app = web.Application()
        app.router.add_get("/_load", report)
        app.router.add_get("/{tail:.*}", handle)
        return app

    return make


class ServerProcess:
    """``shedding_app`` or ``latency_app`` served by a child process; ``load()`` fetches its
    ``Load``.

    Args:
        kind: ``"shedding"`` (args: capacity, delay) or ``"latency"`` (base, capacity).
    """

    def __init__(self, kind: str, *args: float) -> None:
        self._argv = [sys.executable, __file__, kind, *map(str, args)]
        self._proc: subprocess.Popen[str] | None = None
        self.base = ""

    def __enter__(self) -> ServerProcess:
        self._proc = subprocess.Popen(self._argv, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self.base = self._proc.stdout.readline().strip()
        assert self.base.startswith("http://127.0.0.1:"), self.base
        return self

    def load(self) -> Load:
        with urllib.request.urlopen(self.base + "/_load", timeout=30) as response:
            data = json.loads(response.read())
        return Load(
            in_flight=data["in_flight"],
            events=[(t, step) for t, step in data["events"]],
            arrivals=[(t, n, refused) for t, n, refused in data["arrivals"]],
        )

    def __exit__(self, *exc_info: object) -> None:
        assert self._proc is not None
        self._proc.terminate()
        self._proc.wait(10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _serve_forever(kind: str, args: list[str]) -> None:
    load = Load()
    if kind == "shedding":
        make = shedding_app(load, int(args[0]), float(args[1]))
    else:
        make = latency_app(load, float(args[0]), int(float(args[1])))
    server = AppThread(make)
    with server:
        print(server.base, flush=True)
        threading.Event().wait()


def refused_port() -> tuple[socket.socket, int]:
    """A loopback port that is bound but never listens: every connection is refused.

    Keep the socket open while the test runs, so nothing else takes the port.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock, int(sock.getsockname()[1])


if __name__ == "__main__":
    _serve_forever(sys.argv[1], sys.argv[2:])
