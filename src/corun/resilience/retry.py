"""``Retry``: try again after a failure, with capped exponential backoff and full jitter.

The policy, after attempt ``n`` fails with a retryable outcome:

1. gives up if ``n == max_attempts``;
2. computes the delay: the dependency's own (``delay_from``, for example an
   HTTP ``Retry-After``), capped at ``max_server_delay``; otherwise
   ``uniform(0, min(max_delay, initial_delay * multiplier ** (n - 1)))``
   ("full jitter", from the AWS architecture blog's *Exponential Backoff and
   Jitter*: it spreads retries of many clients evenly instead of in waves);
3. gives up if the next attempt would start at or after ``deadline`` seconds
   from the first one;
4. gives up if the retry budget (if any) refuses;
5. otherwise emits ``retry_scheduled``, sleeps on the clock, and tries again.

Giving up emits ``gave_up`` and then surfaces the last outcome: the last
exception is re-raised (with a note saying why the policy stopped) or the
last result returned. Callers keep seeing the dependency's own errors, so
``except ClientError`` still works under load.

What is retryable: an exception matching ``retry_on`` (classes or a
predicate), a result for which ``retry_on_result`` returns True. Never a
``BaseException`` that is not an ``Exception`` (``CancelledError``,
``KeyboardInterrupt``): cancellation always goes straight through.

The retry policy knows nothing of HTTP. It learns a server-given delay from
``delay_from(result_or_exception) -> float | None``; ``retry_after_delay`` in
``corun.resilience.retry_after`` turns a ``Retry-After`` header into one.

Block form: a ``with`` block cannot be re-run, so instead of ``scope()``
``Retry`` has ``attempts()``, as stamina's ``retry_context``::

    async for attempt in retry.attempts(key="db"):
        async with attempt:
            await write_row()

Test mode (``corun.testing.set_testing``) makes every delay 0, and can cap
``max_attempts``.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar, Unpack, final

from corun.resilience import _validate
from corun.resilience._testmode import TEST_MODE
from corun.resilience.budget import RetryBudget
from corun.resilience.events import GaveUp, GiveUpReason, RetryScheduled
from corun.resilience.policy import PolicyArgs, PolicyBase

T = TypeVar("T")

#: The most attempts a policy may make.
MAX_ATTEMPTS = 100


@dataclass(frozen=True, slots=True)
class RetryOptions:
    """Options of a ``Retry``.

    Attributes:
        max_attempts: attempts in all, the first included, in [1, 100].
        deadline: seconds from the first attempt after which no new attempt
            starts, in (0, 86400]; None for no deadline. It does not cancel
            an attempt in flight: put a ``Timeout`` outside for that.
        initial_delay: the backoff ceiling after the first failure, in
            [0, 86400] s.
        max_delay: the cap on the backoff ceiling, in [0, 86400] s; at least
            ``initial_delay``.
        multiplier: growth of the ceiling per attempt, in [1, 100].
        jitter: True for full jitter (a uniform draw below the ceiling);
            False to wait the ceiling itself.
        retry_on: exception classes to retry, or a predicate on the
            exception. The default retries ``OSError`` and ``TimeoutError``
            (connection errors and ``AttemptTimeout``).
        retry_on_result: a predicate on a result; True means "failed,
            retry". None: results are never retried.
        delay_from: given the failed result or exception, the delay the
            dependency asked for in seconds, or None. It replaces the
            backoff for that retry.
        max_server_delay: the cap on a ``delay_from`` delay, in [0, 86400] s.
    """

    max_attempts: int = 3
    deadline: float | None = None
    initial_delay: float = 0.1
    max_delay: float = 10.0
    multiplier: float = 2.0
    jitter: bool = True
    retry_on: tuple[type[BaseException], ...] | Callable[[BaseException], bool] = (
        OSError,
        TimeoutError,
    )
    retry_on_result: Callable[[Any], bool] | None = None
    delay_from: Callable[[object], float | None] | None = None
    max_server_delay: float = 60.0

    def __post_init__(self) -> None:
        owner = "RetryOptions"
        _validate.count(owner, "max_attempts", self.max_attempts, high=MAX_ATTEMPTS)
        if self.deadline is not None:
            _validate.normalize(self, owner, "deadline", _validate.seconds)
        for field in ("initial_delay", "max_delay", "max_server_delay"):
            _validate.normalize(self, owner, field, _validate.seconds, allow_zero=True)
        if self.initial_delay > self.max_delay:
            raise ValueError(
                f"{owner}.initial_delay ({self.initial_delay:g} s) must not exceed "
                f"max_delay ({self.max_delay:g} s), which caps every backoff"
            )
        _validate.normalize(self, owner, "multiplier", _validate.number, low=1.0, high=100.0)
        if not isinstance(self.jitter, bool):
            raise TypeError(f"{owner}.jitter must be a bool, got {self.jitter!r}")
        if not callable(self.retry_on) or isinstance(self.retry_on, type):
            _validate.normalize(self, owner, "retry_on", _validate.exception_types)
        for field in ("retry_on_result", "delay_from"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise TypeError(f"{owner}.{field} must be callable or None, got {value!r}")


@dataclass(frozen=True, slots=True)
class RetryStatistics:
    """Counters of a ``Retry``.

    Attributes:
        calls: calls (or ``attempts()`` loops) started.
        attempts: attempts made, first attempts included.
        retries: retries scheduled.
        gave_up: calls that gave up, for any reason.
        budget_denied: of those, the ones the retry budget stopped.
    """

    calls: int
    attempts: int
    retries: int
    gave_up: int
    budget_denied: int


@final
class RetryCall:
    """The state of one call through a ``Retry``: its attempts so far and what comes next.

    ``Retry.execute`` and ``attempts()`` both drive one. ``failed()`` is the
    decision step; its only side effects are the events and counters, and
    the sleep is left to the caller (``wait()``).
    """

    __slots__ = ("attempt", "delay", "key", "policy", "started")

    def __init__(self, policy: Retry, key: Hashable) -> None:
        # Invariant: attempt is the number of attempts started; delay is the
        # wait before the next attempt once failed() scheduled a retry, None
        # otherwise.
        self.policy = policy
        self.key = key
        self.attempt = 0
        self.delay: float | None = None
        self.started = policy.clock.now()
        policy._calls += 1
        if policy.budget is not None:
            policy.budget.deposit()

    def begin(self) -> int:
        """Count the start of an attempt; returns its number (1 for the first)."""
        self.attempt += 1
        self.delay = None
        self.policy._attempts += 1
        return self.attempt

    def retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` is an outcome this policy retries."""
        if not isinstance(exc, Exception):
            return False  # CancelledError, KeyboardInterrupt, SystemExit
        retry_on = self.policy.options.retry_on
        if isinstance(retry_on, tuple):
            return isinstance(exc, retry_on)
        return bool(retry_on(exc))

    def failed(self, exc: BaseException | None, result: object = None) -> bool:
        """Decide after a retryable failure: True when a retry is scheduled (``delay`` set).

        False means the policy gave up; the caller then surfaces ``exc``
        (re-raise) or ``result`` (return).
        """
        policy = self.policy
        now = policy.clock.now()
        elapsed = now - self.started
        reason, delay, server_delay = self._plan(elapsed, exc if exc is not None else result)
        hooks = policy.hooks
        if reason is not None:
            policy._gave_up += 1
            if reason == "budget":
                policy._budget_denied += 1
            if exc is not None:
                exc.add_note(
                    f"corun.resilience: retry {policy.name!r} gave up after "
                    f"{self.attempt} attempt{'s' if self.attempt > 1 else ''} ({reason})"
                )
            if hooks.gave_up:
                event = GaveUp(
                    policy=policy.name,
                    key=self.key,
                    at=now,
                    attempts=self.attempt,
                    elapsed=elapsed,
                    reason=reason,
                    caused_by=exc,
                    result=result,
                )
                hooks.emit("gave_up", hooks.gave_up, event)
            return False
        self.delay = delay
        policy._retries += 1
        if hooks.retry_scheduled:
            scheduled = RetryScheduled(
                policy=policy.name,
                key=self.key,
                at=now,
                attempt=self.attempt,
                delay=delay,
                elapsed=elapsed,
                caused_by=exc,
                result=result,
                server_delay=server_delay,
            )
            hooks.emit("retry_scheduled", hooks.retry_scheduled, scheduled)
        return True

    def _plan(
        self, elapsed: float, outcome: object
    ) -> tuple[GiveUpReason | None, float, float | None]:
        """The decision proper: (why to give up, or None; the delay; the server's delay).

        No events, no sleeping. Its one effect is the budget withdrawal, the
        last check, so that a retry that will not happen takes nothing.
        """
        policy = self.policy
        options = policy.options
        max_attempts = options.max_attempts
        if TEST_MODE.active and TEST_MODE.attempts is not None:
            max_attempts = TEST_MODE.attempts
        if self.attempt >= max_attempts:
            return "attempts", 0.0, None
        server_delay = options.delay_from(outcome) if options.delay_from is not None else None
        if server_delay is not None:
            delay = min(max(0.0, float(server_delay)), options.max_server_delay)
        else:
            delay = policy.backoff(self.attempt)
        if TEST_MODE.active:
            delay = 0.0
        if options.deadline is not None and elapsed + delay >= options.deadline:
            return "deadline", delay, server_delay
        if policy.budget is not None and not policy.budget.try_withdraw():
            return "budget", delay, server_delay
        return None, delay, server_delay

    async def wait(self) -> None:
        """Sleep the scheduled delay on the policy's clock."""
        delay = self.delay
        assert delay is not None, "wait() without a scheduled retry"
        await self.policy.clock.sleep(delay)


@final
class Attempt:
    """One attempt of an ``attempts()`` loop: enter it around the code to retry.

    On a retryable exception that the policy will retry, ``__aexit__``
    swallows it and the loop goes round again (after the backoff); otherwise
    the exception propagates and the loop ends.
    """

    __slots__ = ("_call", "_done", "number")

    def __init__(self, call: RetryCall, number: int) -> None:
        self._call = call
        self.number = number
        self._done = False

    async def __aenter__(self) -> Attempt:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._done = True
        if exc is None:
            return False
        call = self._call
        return call.retryable(exc) and call.failed(exc)

    def __repr__(self) -> str:
        return f"<Attempt {self.number} of {self._call.policy.name!r}>"


@final
class AttemptLoop:
    """What ``Retry.attempts()`` returns: ``async for attempt in ...`` yields ``Attempt``.

    A class rather than an async generator on purpose: a generator left
    suspended when the block's exception ends the loop must be finalized by
    the loop (``shutdown_asyncgens``), and one that outlives its loop is
    reported as a pending task destroyed. This object holds no frame.
    """

    __slots__ = ("_call", "_last")

    def __init__(self, call: RetryCall) -> None:
        self._call = call
        self._last: Attempt | None = None

    def __aiter__(self) -> AttemptLoop:
        return self

    async def __anext__(self) -> Attempt:
        call = self._call
        last = self._last
        if last is not None:
            if not last._done or call.delay is None:
                raise StopAsyncIteration
            await call.wait()
        attempt = Attempt(call, call.begin())
        self._last = attempt
        return attempt


class Retry(PolicyBase):
    """Retry a failed call with capped, jittered exponential backoff.

    Example::

        retry = Retry(RetryOptions(max_attempts=4, initial_delay=0.2, deadline=10))


        @retry
        async def fetch(url: str) -> bytes: ...

    Args:
        options: the ``RetryOptions`` (defaults when None).
        budget: a ``RetryBudget`` to spend, usually shared.
        name: the name in events and notes (default ``"retry"``).
        clock: the clock to read and sleep on (default ``SystemClock``).
        listeners: ``Listener`` objects for ``retry_scheduled`` and ``gave_up``.
        rng: a callable returning floats in [0, 1) for jitter (default
            ``random.random``); tests pass a fixed one.
    """

    kind = "retry"

    options: RetryOptions

    def __init__(
        self,
        options: RetryOptions | None = None,
        *,
        budget: RetryBudget | None = None,
        rng: Callable[[], float] | None = None,
        **common: Unpack[PolicyArgs],
    ) -> None:
        options = _validate.options(options, RetryOptions)
        if budget is not None and not isinstance(budget, RetryBudget):
            raise TypeError(f"budget must be a RetryBudget, got {budget!r}")
        super().__init__(options, **common)
        self.budget = budget
        self._rng: Callable[[], float] = rng if rng is not None else random.random
        self._calls = 0
        self._attempts = 0
        self._retries = 0
        self._gave_up = 0
        self._budget_denied = 0

    def backoff(self, attempt: int) -> float:
        """The backoff after failed attempt ``attempt`` (1-based), jittered; before test mode."""
        options = self.options
        ceiling = min(
            options.max_delay, options.initial_delay * options.multiplier ** (attempt - 1)
        )
        if not options.jitter:
            return ceiling
        return ceiling * self._rng()

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        call = RetryCall(self, key)
        retry_on_result = self.options.retry_on_result
        while True:
            call.begin()
            try:
                result = await fn(*args)
            except Exception as exc:
                if not (call.retryable(exc) and call.failed(exc)):
                    raise
            else:
                if retry_on_result is None or not retry_on_result(result):
                    return result
                if not call.failed(None, result):
                    return result
            # Outside the except block, so that the next attempt's exception
            # does not chain this one as its __context__.
            await call.wait()

    def attempts(self, *, key: Hashable = None) -> AttemptLoop:
        """An async iterator of ``Attempt`` context managers, for retrying a block.

        The loop ends after an attempt whose block raised nothing, and by
        the block's exception when the policy does not retry it. Results
        are not inspected: ``retry_on_result`` applies to ``execute`` only.
        """
        return AttemptLoop(RetryCall(self, key))

    def statistics(self) -> RetryStatistics:
        """Counters: calls, attempts, retries, give-ups, budget denials."""
        return RetryStatistics(
            calls=self._calls,
            attempts=self._attempts,
            retries=self._retries,
            gave_up=self._gave_up,
            budget_denied=self._budget_denied,
        )
