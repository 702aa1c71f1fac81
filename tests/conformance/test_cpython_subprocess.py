"""CPython test_asyncio.test_subprocess, unchanged, under corun's policy.

Every class is collected as CPython runs it on Unix: the ``SubprocessMixin``
tests once per child watcher (threaded, multi-loop -- skipped by CPython,
bpo-38323 --, safe, fast, pidfd; from 3.14, which removed the watchers,
threaded and pidfd only), each on a loop from the policy, plus
``SubprocessTransportTests`` (stdlib ``BaseSubprocessTransport`` on
``TestLoop``) and, up to 3.13, ``GenericWatcherTests``.
"""

import asyncio

import pytest

from ._harness import bind

bind(globals(), "test_subprocess")


@pytest.fixture(autouse=True)
def _policy_as_an_earlier_test_left_it():
    """``set_event_loop(None)`` on the fresh policy, before each test.

    In CPython's own run the module shares one policy, on which an earlier
    ``test_utils.TestCase.tearDown`` has called ``set_event_loop(None)``; so
    3.12's ``GenericWatcherTests.test_create_subprocess_with_pidfd`` gets a
    RuntimeError from ``get_event_loop()`` with no loop set.  The harness
    gives each test a fresh policy (conftest.py), on which that call would
    instead create a loop (with a DeprecationWarning): the test failed on the
    stdlib baseline too.  This puts the policy in the state CPython's run has.
    """
    asyncio.set_event_loop(None)
