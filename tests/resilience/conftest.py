"""Fixtures for the corun.resilience tests.

Every test here runs on both loops (corun's and the stdlib's) through the
``loop`` fixture of ``tests/conftest.py``, whose teardown fails the test on
a leaked task ("Task was destroyed but it is pending"), an unexpected call
of the exception handler, or a leaked fd. On top of that, the ``clock``
fixture fails a test that leaves a timer armed on the mock clock: every
policy must disarm what it arms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from corun.resilience._testmode import TEST_MODE
from corun.testing import MockClock

T = TypeVar("T")


@pytest.fixture
def clock() -> Iterator[MockClock]:
    """A MockClock in autojump mode; teardown asserts no timer is left armed."""
    mock = MockClock(autojump=True)
    yield mock
    assert mock.pending == 0, f"timers left armed on the mock clock: {mock!r}"


@pytest.fixture
def run(loop: asyncio.AbstractEventLoop) -> Callable[[Coroutine[Any, Any, T]], T]:
    """Run a coroutine to completion on the test's loop (corun's or asyncio's)."""
    return loop.run_until_complete


@pytest.fixture(autouse=True)
def _test_mode_off() -> Iterator[None]:
    """No test leaks the process-wide retry test mode into the next."""
    assert not TEST_MODE.active, "a previous test left set_testing() on"
    yield
    leaked = TEST_MODE.active
    TEST_MODE.active, TEST_MODE.attempts = False, None
    assert not leaked, "the test left set_testing() on"
