"""Fixtures for the corun.fetch tests: a real aiohttp server in a thread of its own."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "http"))

from http_servers import Faults, serve


class ThreadServer:
    """The fault-injecting server on its own asyncio loop in a thread (so a child process,
    or a test's own loop, can talk to it)."""

    def __init__(self) -> None:
        self.faults = Faults()
        self.base = ""
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with serve(self.faults) as base:
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


@pytest.fixture
def server() -> Iterator[ThreadServer]:
    srv = ThreadServer()
    srv.start()
    yield srv
    srv.close()
