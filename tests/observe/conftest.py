"""Fixtures for the observe tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

import corun
import corun.observe as observe


@pytest.fixture(autouse=True)
def _own_inspection_socket_closed() -> Iterator[None]:
    """Close this process's own inspection socket, which CORUN_OBSERVE=1 starts.

    These tests serve ``<pid>.sock`` themselves, at the same path; the next
    observed loop starts the process's socket again.
    """
    monitor = sys.modules.get("corun.observe.monitor")
    server = getattr(getattr(monitor, "MONITOR", None), "server", None)
    if server:
        server.close()
        monitor.MONITOR.server = None  # type: ignore[union-attr]
    yield


@pytest.fixture
def loop() -> Iterator[corun.EventLoop]:
    """A corun loop of the test's own; observation of it, if enabled, ends with it."""
    loop = corun.new_event_loop()
    try:
        yield loop
    finally:
        observer = observe.observer_of(loop)
        if observer is not None:
            observer.close()
        loop.close()
