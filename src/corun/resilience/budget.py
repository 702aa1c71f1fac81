"""``RetryBudget``: retries limited to a share of recent requests, plus a small floor.

Why: a per-call retry limit (``max_attempts=3``) still lets a fleet of
callers triple the load on a dependency that is already failing, exactly
when it can least take it. A budget caps retries across *all* calls that
share it: over the last ``window`` seconds, retries may be at most
``retry_ratio`` of the requests, plus ``min_retries_per_second`` so that a
caller with little traffic can still retry at all. This is Finagle's
``RetryBudget`` (``ttl``, ``percentCanRetry``, ``minRetriesPerSec``); Envoy's
``retry_budget`` is the same idea over active requests.

The rule, over the sliding window that ends now::

    allowed(retry) <=> retries + 1 <= retry_ratio * requests + min_retries_per_second * window

So under sustained failure, the load on the dependency is at most
``(1 + retry_ratio)`` times the first attempts, plus the floor: with the
defaults (0.2, 10/s, 10 s), 20 % extra load and 100 retries per window.

``Retry`` spends a budget for you: each call deposits one request, each
retry withdraws one. One budget is normally shared by every ``Retry`` that
calls the same dependency. A budget denial is not an error of its own inside
``Retry``: the retry gives up as after its last attempt (``GaveUp`` with
``reason="budget"``).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Final

from corun.resilience import _validate
from corun.resilience._window import RollingCounts
from corun.resilience.clock import SYSTEM_CLOCK, Clock
from corun.resilience.errors import RetryBudgetExhausted

#: Slots in the sliding window.
_BUCKETS: Final = 10


@dataclass(frozen=True, slots=True)
class RetryBudgetOptions:
    """Options of a ``RetryBudget``.

    Attributes:
        retry_ratio: retries allowed per request in the window, in [0, 10]
            (0.2: 20 % extra load).
        min_retries_per_second: the floor, in [0, 100000] retries per second
            of window, allowed whatever the traffic.
        window: how far back requests and retries count, in (0, 86400] s.
    """

    retry_ratio: float = 0.2
    min_retries_per_second: float = 10.0
    window: float = 10.0

    def __post_init__(self) -> None:
        owner = "RetryBudgetOptions"
        _validate.normalize(self, owner, "retry_ratio", _validate.number, low=0.0, high=10.0)
        _validate.normalize(
            self, owner, "min_retries_per_second", _validate.number, low=0.0, high=100_000.0
        )
        _validate.normalize(self, owner, "window", _validate.seconds)


@dataclass(frozen=True, slots=True)
class RetryBudgetStatistics:
    """A snapshot of a ``RetryBudget``.

    Attributes:
        requests: requests deposited in the current window.
        retries: retries withdrawn in the current window.
        balance: retries that would be allowed now.
        denied: retries refused since the budget was made.
    """

    requests: int
    retries: int
    balance: int
    denied: int


class RetryBudget:
    """A shared allowance of retries. Pass it to ``Retry(..., budget=...)``.

    Example::

        budget = RetryBudget(RetryBudgetOptions(retry_ratio=0.1))
        api_retry = Retry(RetryOptions(max_attempts=3), budget=budget)
    """

    def __init__(
        self,
        options: RetryBudgetOptions | None = None,
        *,
        name: str = "retry_budget",
        clock: Clock | None = None,
    ) -> None:
        self.options = options = _validate.options(options, RetryBudgetOptions)
        self.name = name
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        # Invariant: _counts holds (requests, retries) of the window; the
        # floor is a constant of the options, not a stored balance.
        self._counts = RollingCounts(options.window, _BUCKETS)
        self._floor = options.min_retries_per_second * options.window
        self._denied = 0

    def _balance(self, now: float) -> int:
        requests, retries = self._counts.totals(now)
        return math.floor(self.options.retry_ratio * requests + self._floor + 1e-9) - retries

    def deposit(self) -> None:
        """Count one request (a first attempt)."""
        self._counts.add(self.clock.now(), first=1)

    def try_withdraw(self) -> bool:
        """Take one retry from the budget; False (and nothing taken) when none is left."""
        now = self.clock.now()
        if self._balance(now) < 1:
            self._denied += 1
            return False
        self._counts.add(now, second=1)
        return True

    def withdraw(self, *, key: Hashable = None) -> None:
        """Take one retry from the budget.

        Raises:
            RetryBudgetExhausted: none is left.
        """
        if not self.try_withdraw():
            raise RetryBudgetExhausted(policy=self.name, key=key)

    def statistics(self) -> RetryBudgetStatistics:
        """Requests and retries in the window, the balance, and denials so far."""
        now = self.clock.now()
        requests, retries = self._counts.totals(now)
        return RetryBudgetStatistics(
            requests=requests,
            retries=retries,
            balance=max(0, self._balance(now)),
            denied=self._denied,
        )

    def __repr__(self) -> str:
        return f"<RetryBudget {self.name!r} {self.options!r}>"
