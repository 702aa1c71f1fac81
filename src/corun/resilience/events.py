"""Events: what the policies tell the outside world, and how they tell it.

Every event is a frozen dataclass (stamina's ``RetryDetails`` is the model)
with three common fields first:

* ``policy``: the name of the policy instance that emitted it;
* ``key``: the key the call was made with (``None`` for calls without one);
* ``at``: the policy clock's ``now()`` when it happened.

A ``Listener`` receives them. Subclass it and override the hooks you need;
the hooks are named for the facts they report, in the past tense:

============================  ==========================  ======================
hook                          payload                     emitted by
============================  ==========================  ======================
``retry_scheduled``           ``RetryScheduled``          ``Retry`` (on_retry)
``gave_up``                   ``GaveUp``                  ``Retry`` (on_give_up)
``breaker_state_changed``     ``BreakerStateChanged``     ``Breaker``
``rejected``                  ``Rejected``                ``Breaker``, ``Bulkhead``, ``RateLimiter``
``timed_out``                 ``TimedOut``                ``Timeout``
``hedge_launched``            ``HedgeLaunched``           ``Hedge``
``call_finished``             ``CallFinished``            every policy and ``Pipeline``
============================  ==========================  ======================

Contract for hook implementations (the same as ``corun.Instrument``'s):

* Hooks run synchronously, in the task that made the call, at the moment the
  fact becomes true: ``retry_scheduled`` before the backoff sleep starts,
  ``breaker_state_changed`` right after the transition. They must be quick
  and must not block or await.
* Only overridden hooks are called: a policy checks one tuple for emptiness
  before it even builds the event, so an unused hook costs nothing.
* A hook cannot change a policy's outcome. One that raises is logged on the
  ``corun.resilience`` logger and the call carries on. Unlike the runtime's
  instruments, the listener stays registered: a resilience listener is
  usually the metrics of a service, and losing them for good over one bad
  event would be worse than logging the same bug again.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, final

logger: Final = logging.getLogger("corun.resilience")

#: Why a retry policy stopped retrying.
GiveUpReason: TypeAlias = Literal["attempts", "deadline", "budget"]
#: Why a policy refused a call.
RejectReason: TypeAlias = Literal["breaker_open", "bulkhead_full", "rate_limited"]
#: The three states of a circuit breaker.
BreakerStateName: TypeAlias = Literal["closed", "open", "half_open"]
#: How a call through a policy ended.
Outcome: TypeAlias = Literal["success", "failure", "rejected", "cancelled"]


@dataclass(frozen=True, slots=True)
class RetryScheduled:
    """An attempt failed and another one is scheduled (the issue's ``on_retry``).

    Emitted before the backoff sleep, so a listener learns about the failure
    at once, together with when the next attempt will start.
    """

    policy: str
    key: Hashable
    at: float
    #: The attempt that just failed (1 for the first call).
    attempt: int
    #: Seconds the policy will wait before the next attempt.
    delay: float
    #: Seconds since the first attempt started.
    elapsed: float
    #: The exception that made the attempt fail, or None for a result.
    caused_by: BaseException | None
    #: The result that was judged a failure (``retry_on_result``), or None.
    result: object
    #: The delay the dependency asked for (``delay_from``), before the
    #: ``max_server_delay`` cap; None when it asked for none.
    server_delay: float | None


@dataclass(frozen=True, slots=True)
class GaveUp:
    """A retry policy stopped retrying (the issue's ``on_give_up``).

    Emitted just before the last exception is re-raised or the last result
    is returned. Not emitted when an outcome is not retryable at all.
    """

    policy: str
    key: Hashable
    at: float
    #: Attempts made, the failed last one included.
    attempts: int
    #: Seconds since the first attempt started.
    elapsed: float
    #: ``"attempts"`` (max_attempts reached), ``"deadline"`` (the next
    #: attempt would start after the deadline) or ``"budget"`` (the retry
    #: budget refused the retry).
    reason: GiveUpReason
    caused_by: BaseException | None
    result: object


@dataclass(frozen=True, slots=True)
class BreakerStateChanged:
    """A circuit breaker moved from one state to another, for one key."""

    policy: str
    key: Hashable
    at: float
    old: BreakerStateName
    new: BreakerStateName
    #: Why, in words: "5 consecutive failures", "probe succeeded", ...
    reason: str
    #: When ``new`` is ``"open"``: the clock time of the next probe.
    probe_at: float | None


@dataclass(frozen=True, slots=True)
class Rejected:
    """A policy refused a call without running it (and raised ``CallRejected``)."""

    policy: str
    key: Hashable
    at: float
    reason: RejectReason
    #: Seconds until a call is expected to be admitted, when known.
    retry_in: float | None


@dataclass(frozen=True, slots=True)
class TimedOut:
    """A timeout policy cancelled a call that ran too long."""

    policy: str
    key: Hashable
    at: float
    #: The limit, in seconds.
    timeout: float
    #: True for an overall timeout, False for a per-attempt one.
    overall: bool


@dataclass(frozen=True, slots=True)
class HedgeLaunched:
    """A hedging policy started another attempt while the first is still running."""

    policy: str
    key: Hashable
    at: float
    #: The attempt started: 2 for the first hedge.
    attempt: int
    #: The hedging delay that elapsed before it started.
    delay: float


@dataclass(frozen=True, slots=True)
class CallFinished:
    """A call through a policy ended. Metrics build latency histograms from it."""

    policy: str
    key: Hashable
    at: float
    #: The kind of policy: "retry", "breaker", ..., "pipeline".
    kind: str
    #: Seconds from entering the policy to leaving it (``at`` is the end).
    duration: float
    #: ``"success"``: returned; ``"rejected"``: raised ``CallRejected``;
    #: ``"failure"``: raised another ``Exception``; ``"cancelled"``: raised a
    #: ``BaseException`` such as ``CancelledError``.
    outcome: Outcome


class Listener:
    """Base class for event listeners. Every hook is a no-op; override the ones you need."""

    def retry_scheduled(self, event: RetryScheduled) -> None:
        """An attempt failed and another is scheduled after ``event.delay``."""

    def gave_up(self, event: GaveUp) -> None:
        """A retry policy stopped retrying."""

    def breaker_state_changed(self, event: BreakerStateChanged) -> None:
        """A breaker changed state for ``event.key``."""

    def rejected(self, event: Rejected) -> None:
        """A policy refused a call."""

    def timed_out(self, event: TimedOut) -> None:
        """A timeout fired."""

    def hedge_launched(self, event: HedgeLaunched) -> None:
        """A hedged attempt started."""

    def call_finished(self, event: CallFinished) -> None:
        """A call through a policy ended."""


HOOK_NAMES: Final = (
    "retry_scheduled",
    "gave_up",
    "breaker_state_changed",
    "rejected",
    "timed_out",
    "hedge_launched",
    "call_finished",
)


@final
class Hooks:
    """The listeners of one policy, with one tuple of subscribers per hook.

    Policies test a hook's tuple for emptiness before building its event, so
    an unused hook costs one attribute load and a truth test. The tuples are
    rebuilt on ``add``/``remove``, which are rare.
    """

    __slots__ = (
        "_listeners",
        "breaker_state_changed",
        "call_finished",
        "gave_up",
        "hedge_launched",
        "rejected",
        "retry_scheduled",
        "timed_out",
    )

    def __init__(self, listeners: Iterable[Listener] = ()) -> None:
        self._listeners: list[Listener] = []
        self.retry_scheduled: tuple[Listener, ...] = ()
        self.gave_up: tuple[Listener, ...] = ()
        self.breaker_state_changed: tuple[Listener, ...] = ()
        self.rejected: tuple[Listener, ...] = ()
        self.timed_out: tuple[Listener, ...] = ()
        self.hedge_launched: tuple[Listener, ...] = ()
        self.call_finished: tuple[Listener, ...] = ()
        for listener in listeners:
            self.add(listener)

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """Every registered listener, in registration order."""
        return tuple(self._listeners)

    def add(self, listener: Listener) -> None:
        """Register ``listener``; adding one that is registered already does nothing.

        Raises:
            TypeError: ``listener`` is not a ``Listener``.
        """
        if not isinstance(listener, Listener):
            raise TypeError(
                f"listener must be a corun.resilience.Listener, not {type(listener).__name__}"
            )
        if listener not in self._listeners:
            self._listeners.append(listener)
            self._rebuild()

    def remove(self, listener: Listener) -> None:
        """Unregister ``listener``.

        Raises:
            KeyError: it was not registered.
        """
        try:
            self._listeners.remove(listener)
        except ValueError:
            raise KeyError(f"listener {listener!r} is not registered") from None
        self._rebuild()

    def _rebuild(self) -> None:
        subscribers: dict[str, list[Listener]] = {name: [] for name in HOOK_NAMES}
        for listener in self._listeners:
            cls = type(listener)
            for name in HOOK_NAMES:
                # Only listeners that override a hook are called for it.
                if getattr(cls, name) is not getattr(Listener, name):
                    subscribers[name].append(listener)
        self.retry_scheduled = tuple(subscribers["retry_scheduled"])
        self.gave_up = tuple(subscribers["gave_up"])
        self.breaker_state_changed = tuple(subscribers["breaker_state_changed"])
        self.rejected = tuple(subscribers["rejected"])
        self.timed_out = tuple(subscribers["timed_out"])
        self.hedge_launched = tuple(subscribers["hedge_launched"])
        self.call_finished = tuple(subscribers["call_finished"])

    def emit(self, hook: str, subscribers: tuple[Listener, ...], event: object) -> None:
        """Call ``hook(event)`` on each subscriber; log any that raises and go on."""
        for listener in subscribers:
            try:
                getattr(listener, hook)(event)
            except Exception:
                logger.exception("listener %r raised in %s(%r)", listener, hook, event)
