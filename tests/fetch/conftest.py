"""Fixtures for the corun.fetch tests: a real aiohttp server in a thread of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fetch_servers import ThreadServer


@pytest.fixture
def server() -> Iterator[ThreadServer]:
    srv = ThreadServer()
    srv.start()
    yield srv
    srv.close()
