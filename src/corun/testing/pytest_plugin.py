"""A pytest plugin that runs a project's async tests on corun.

Load it in the project's ``conftest.py``::

    pytest_plugins = ["corun.testing.pytest_plugin"]

or for one run, ``pytest -p corun.testing.pytest_plugin``. Then:

* pytest-asyncio (1.4 and later) runs every async test and fixture on a
  corun loop, through its ``pytest_asyncio_loop_factories`` hook;
* anyio's pytest plugin runs its tests on asyncio with corun's loop (the
  ``anyio_backend`` fixture; a conftest that defines its own keeps it);
* ``unittest.IsolatedAsyncioTestCase`` (3.13 and later) makes corun loops,
  unless a test case sets its own ``loop_factory``.

Nothing else changes: ``asyncio.run()`` inside a test still makes the loop
that asyncio's policy gives. A test can check where it runs with
``isinstance(asyncio.get_running_loop(), corun.EventLoop)``.
"""

from __future__ import annotations

import asyncio
import sys
import unittest
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from corun.runtime.runner import new_event_loop


@pytest.hookimpl(optionalhook=True)
def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: every async test on corun's loop."""
    return {"corun": new_event_loop}


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    """anyio's backend for the tests it runs: asyncio, on corun's loop."""
    return ("asyncio", {"loop_factory": new_event_loop})


def pytest_configure(config: pytest.Config) -> None:
    """Make corun the loop of ``IsolatedAsyncioTestCase``s that choose none (3.13+)."""
    if sys.version_info >= (3, 13) and unittest.IsolatedAsyncioTestCase.loop_factory is None:
        unittest.IsolatedAsyncioTestCase.loop_factory = staticmethod(new_event_loop)  # type: ignore[assignment]
