"""The state behind ``corun.testing.set_testing`` (stamina's ``set_testing``).

It lives here, below ``corun.testing``, because ``Retry`` reads it; only
``corun.testing`` writes it. It is the one piece of process-wide state in
``corun.resilience``, and it exists for tests only.
"""

from __future__ import annotations

from typing import final


@final
class TestMode:
    """Whether retries skip their waits, and an optional cap on attempts."""

    __slots__ = ("active", "attempts")
    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        # Invariant: attempts is None unless active.
        self.active = False
        self.attempts: int | None = None


#: The process-wide switch. Read by Retry at each decision, never cached.
TEST_MODE = TestMode()
