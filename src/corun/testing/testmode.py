"""A switch that turns off retry backoff for tests (stamina's ``set_testing``).

Tests that exercise code *using* ``corun.resilience.Retry`` (not the retry
policy itself) usually want failures to be retried at once, and sometimes
not at all. ``set_testing(True)`` makes every retry delay 0 (backoff and
server-given delays alike) and, with ``attempts=n``, caps every retry policy
at ``n`` attempts. It applies process-wide until switched off; used as a
context manager it restores the previous setting on exit::

    with set_testing(True, attempts=2):
        await code_under_test()

Policy tests that check the delays themselves should leave it off and use
``MockClock`` instead, which keeps the delays but makes them free.
"""

from __future__ import annotations

from typing import final

from corun.resilience._testmode import TEST_MODE
from corun.resilience.retry import MAX_ATTEMPTS


@final
class TestingSetting:
    """What ``set_testing`` returns: a context manager that restores the previous setting."""

    __slots__ = ("_previous",)
    __test__ = False  # not a pytest test class

    def __init__(self, previous: tuple[bool, int | None]) -> None:
        self._previous = previous

    def __enter__(self) -> TestingSetting:
        return self

    def __exit__(self, *exc_info: object) -> None:
        TEST_MODE.active, TEST_MODE.attempts = self._previous


def set_testing(testing: bool, *, attempts: int | None = None) -> TestingSetting:
    """Turn the retry test mode on or off.

    Args:
        testing: True: retry delays become 0. False: normal behaviour.
        attempts: with ``testing``, cap every retry policy at this many
            attempts (1: no retries at all); None keeps each policy's own.

    Returns:
        A context manager; leaving it restores the setting from before.

    Raises:
        ValueError: ``attempts`` is out of [1, 100], or given with ``testing=False``.
    """
    if attempts is not None:
        if not testing:
            raise ValueError("attempts applies only with testing=True")
        if (
            isinstance(attempts, bool)
            or not isinstance(attempts, int)
            or not 1 <= attempts <= MAX_ATTEMPTS
        ):
            raise ValueError(f"attempts must be an int in [1, {MAX_ATTEMPTS}], got {attempts!r}")
    previous = (TEST_MODE.active, TEST_MODE.attempts)
    TEST_MODE.active = bool(testing)
    TEST_MODE.attempts = attempts if testing else None
    return TestingSetting(previous)


def is_testing() -> bool:
    """Whether the retry test mode is on."""
    return TEST_MODE.active
