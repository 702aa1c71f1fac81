"""The exceptions that ``corun.resilience`` raises.

Two families:

* ``CallRejected`` and its subclasses are fast refusals: the policy did not
  run the call at all (the breaker is open, the bulkhead is full, the rate
  limit is reached, the retry budget is spent). They carry the policy's name
  and the key, and where it is known, how long until a call could succeed
  (``retry_in``). A breaker does not count them as failures of the
  dependency, since the dependency was never called.
* ``AttemptTimeout`` and ``OverallTimeout`` are ``TimeoutError`` subclasses,
  so code that already handles ``TimeoutError`` (or ``asyncio.TimeoutError``,
  the same class since 3.11) keeps working.

Every exception here also derives from ``ResilienceError``.
"""

from __future__ import annotations

from collections.abc import Hashable


def _where(policy: str, key: Hashable) -> str:
    return f"{policy!r}" if key is None else f"{policy!r} for key {key!r}"


class ResilienceError(Exception):
    """Base class of every exception raised by ``corun.resilience``."""


class CallRejected(ResilienceError):
    """A policy refused the call without running it.

    Attributes:
        policy: the name of the policy that refused.
        key: the key of the call (``None`` when the call had none).
        retry_in: seconds until a call is expected to be admitted, when the
            policy knows it; ``None`` otherwise.
    """

    def __init__(
        self, message: str, *, policy: str, key: Hashable = None, retry_in: float | None = None
    ) -> None:
        super().__init__(message)
        self.policy = policy
        self.key = key
        self.retry_in = retry_in


class BreakerOpen(CallRejected):
    """The circuit breaker is open (or half-open with every probe in use).

    The message says when the breaker will let a probe call through.

    Attributes:
        state: ``"open"`` or ``"half_open"``.
        probe_at: the clock time (``clock.now()``) at which the breaker lets a
            probe through; ``None`` while half-open probes are in flight.
        retry_in: ``probe_at - now`` when the call was refused, ``None`` while
            half-open probes are in flight.
    """

    def __init__(
        self, *, policy: str, key: Hashable, state: str, now: float, probe_at: float | None
    ) -> None:
        if probe_at is None:
            when = "a probe call is in flight; the next call is admitted once it succeeds"
            retry_in = None
        else:
            retry_in = max(0.0, probe_at - now)
            when = f"it will let a probe call through in {retry_in:.3f} s (at t={probe_at:.3f})"
        super().__init__(
            f"circuit breaker {_where(policy, key)} is {state.replace('_', '-')}: {when}",
            policy=policy,
            key=key,
            retry_in=retry_in,
        )
        self.state = state
        self.probe_at = probe_at


class BulkheadFull(CallRejected):
    """The bulkhead has ``max_concurrent`` calls in flight and a full wait queue.

    Attributes:
        max_concurrent: the bulkhead's limit on calls in flight.
        max_queue: the bulkhead's limit on waiting calls.
    """

    def __init__(self, *, policy: str, key: Hashable, max_concurrent: int, max_queue: int) -> None:
        super().__init__(
            f"bulkhead {_where(policy, key)} is full: {max_concurrent} calls in flight "
            f"and {max_queue} waiting",
            policy=policy,
            key=key,
        )
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue


class RateLimited(CallRejected):
    """The rate limiter has no token for the call within its ``max_wait``.

    Attributes:
        scope: ``"global"`` or ``"key"``: the bucket that ran out.
        retry_in: seconds until that bucket has a token again.
    """

    def __init__(self, *, policy: str, key: Hashable, scope: str, retry_in: float) -> None:
        bucket = "global" if scope == "global" else "per-key"
        super().__init__(
            f"rate limiter {_where(policy, key)}: {bucket} limit reached; "
            f"next token in {retry_in:.3f} s",
            policy=policy,
            key=key,
            retry_in=retry_in,
        )
        self.scope = scope


class RetryBudgetExhausted(CallRejected):
    """``RetryBudget.withdraw()`` found no retry left in the budget.

    ``Retry`` itself never raises this: when the budget stops it, it gives up
    the way it does after its last attempt (re-raising the last exception, or
    returning the last result), so callers keep seeing the dependency's own
    errors. This exception is for code that spends a budget by hand.
    """

    def __init__(self, *, policy: str, key: Hashable = None) -> None:
        super().__init__(
            f"retry budget {_where(policy, key)} is exhausted: retries already reached "
            "their share of recent requests",
            policy=policy,
            key=key,
        )


class _PolicyTimeout(ResilienceError, TimeoutError):
    """A timeout policy's ``TimeoutError``: what timed out, where, and the limit.

    Attributes:
        policy: the name of the timeout policy.
        key: the key of the call.
        timeout: the limit, in seconds.
    """

    what: str

    def __init__(self, *, policy: str, key: Hashable, timeout: float) -> None:
        super().__init__(f"{self.what} timed out after {timeout:g} s ({_where(policy, key)})")
        self.policy = policy
        self.key = key
        self.timeout = timeout


class AttemptTimeout(_PolicyTimeout):
    """One attempt took longer than its timeout and was cancelled."""

    what = "attempt"


class OverallTimeout(_PolicyTimeout):
    """The whole operation, retries included, took longer than its timeout."""

    what = "operation"
