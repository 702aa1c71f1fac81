"""``Breaker``: a circuit breaker per key, with closed, open and half-open states.

The states, one class each (as hyx does), and every transition::

                 failure rate >= failure_rate over the window
                 (with >= minimum_calls calls), or
                 consecutive_failures failures in a row
      ┌────────┐ ─────────────────────────────────────────▶ ┌────────┐
      │ closed │                                            │  open  │ ◀─┐
      └────────┘ ◀──────────┐              open_duration    └────────┘   │
                            │              has passed            │       │ a probe
          half_open_probes  │     ┌───────────┐ ◀───────────────┘       │ failed
          probes succeeded  └──── │ half-open │ ─────────────────────────┘
                                  └───────────┘

* **Closed** runs every call and counts outcomes in a sliding time window
  (``RollingCounts``) and in a run of consecutive failures.
* **Open** fails fast with ``BreakerOpen``, whose message says when it will
  let a probe through, until ``open_duration`` has passed.
* **Half-open** lets ``half_open_probes`` calls through. When they all
  succeed it closes (with a fresh window); the first failure reopens it.
  Calls beyond the probes fail fast.

What counts: an exception matching ``failure_on`` is a failure, as is a
result for which ``failure_on_result`` returns True. Any other exception or
result is a success, since the dependency answered. ``CallRejected``
(raised by an inner bulkhead, say) and cancellation count as neither: the
dependency was not called, or the call did not finish.

Time-based transitions (open to half-open) happen lazily, when the next call
or ``state()`` looks at the key; the event then carries that time.

Each key (a host, say) has its own circuit, so one bad host does not open
the breaker for all. Keys live in an LRU registry of at most ``max_keys``;
the least recently used circuit is forgotten first.

Shape: the state classes are pure state machines. Each step takes the time
and returns the next state (or None) with a reason; ``Breaker`` applies it
and emits the events afterwards (httpcore's "pure step, effects outside").
A result is recorded only against the state object that admitted the call,
so a slow call that started while closed cannot close a breaker that has
opened since.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Final, TypeAlias, TypeVar, Unpack, final

from corun.resilience import _validate
from corun.resilience._window import RollingCounts
from corun.resilience.errors import BreakerOpen, CallRejected
from corun.resilience.events import BreakerStateChanged, BreakerStateName
from corun.resilience.policy import PolicyArgs, PolicyBase

T = TypeVar("T")

#: Slots in the sliding window of a closed circuit.
_BUCKETS: Final = 10


@dataclass(frozen=True, slots=True)
class BreakerOptions:
    """Options of a ``Breaker``.

    Attributes:
        failure_rate: open when failures / calls in the window reach this,
            in (0, 1].
        window: the sliding window, in (0, 86400] s.
        minimum_calls: the rate rule applies only with at least this many
            calls in the window, in [1, 1000000].
        consecutive_failures: open after this many failures in a row, in
            [1, 1000000]; None to rely on the rate alone.
        open_duration: how long the breaker stays open before probing, in
            (0, 86400] s.
        half_open_probes: probe calls let through when half-open, all of
            which must succeed to close, in [1, 1000].
        failure_on: exception classes, or a predicate, that count as
            failures (default: every ``Exception``; never ``CallRejected``).
        failure_on_result: a predicate on a result; True counts as a failure.
        max_keys: circuits kept (LRU), in [1, 1000000].
    """

    failure_rate: float = 0.5
    window: float = 10.0
    minimum_calls: int = 10
    consecutive_failures: int | None = 5
    open_duration: float = 30.0
    half_open_probes: int = 1
    failure_on: tuple[type[BaseException], ...] | Callable[[BaseException], bool] = (Exception,)
    failure_on_result: Callable[[Any], bool] | None = None
    max_keys: int = 10_000

    def __post_init__(self) -> None:
        owner = "BreakerOptions"
        _validate.normalize(self, owner, "failure_rate", _validate.ratio)
        _validate.normalize(self, owner, "window", _validate.seconds)
        _validate.count(owner, "minimum_calls", self.minimum_calls)
        if self.consecutive_failures is not None:
            _validate.count(owner, "consecutive_failures", self.consecutive_failures)
        _validate.normalize(self, owner, "open_duration", _validate.seconds)
        _validate.count(owner, "half_open_probes", self.half_open_probes, high=1000)
        if not callable(self.failure_on) or isinstance(self.failure_on, type):
            _validate.normalize(self, owner, "failure_on", _validate.exception_types)
        if self.failure_on_result is not None and not callable(self.failure_on_result):
            raise TypeError(f"{owner}.failure_on_result must be callable or None")
        _validate.count(owner, "max_keys", self.max_keys)


#: A state change: the next state and why, in words.
Transition: TypeAlias = "tuple[BreakerState, str]"


class BreakerState:
    """One state of one key's circuit. A pure state machine: steps return transitions.

    ``admit`` may only change counters inside the state; everything else
    returns the next state and a reason, or None to stay.
    """

    name: ClassVar[BreakerStateName]

    __slots__ = ("options",)

    def __init__(self, options: BreakerOptions) -> None:
        self.options = options

    def due(self, now: float) -> Transition | None:
        """A transition that time alone causes."""
        return None

    def admit(self, now: float) -> bool:
        """Whether to let a call through now (counting it if so)."""
        raise NotImplementedError

    def succeeded(self, now: float) -> Transition | None:
        """An admitted call succeeded."""
        return None

    def failed(self, now: float) -> Transition | None:
        """An admitted call failed."""
        return None

    def released(self) -> None:
        """An admitted call ended without a verdict (cancelled, or rejected further in)."""

    def probe_at(self) -> float | None:
        """When a probe is next let through, for open states."""
        return None


@final
class Closed(BreakerState):
    """Calls run; outcomes are counted. Opens on the failure rate or a failure run.

    Transitions::

        ──▶ [closed] ── rate >= failure_rate (>= minimum_calls) ──▶ [open]
               │  ▲    or consecutive_failures in a row
               └──┘ success or failure: counted in the window

    A new ``Closed`` starts with an empty window: what happened before the
    breaker opened says nothing about the dependency once a probe succeeded.
    """

    name = "closed"

    __slots__ = ("consecutive", "counts")

    def __init__(self, options: BreakerOptions) -> None:
        super().__init__(options)
        # Invariant: counts holds (failures, successes) of the window;
        # consecutive is the run of failures since the last success.
        self.counts = RollingCounts(options.window, _BUCKETS)
        self.consecutive = 0

    def admit(self, now: float) -> bool:
        return True

    def succeeded(self, now: float) -> Transition | None:
        self.consecutive = 0
        self.counts.add(now, second=1)
        return None

    def failed(self, now: float) -> Transition | None:
        options = self.options
        self.consecutive += 1
        self.counts.add(now, first=1)
        limit = options.consecutive_failures
        if limit is not None and self.consecutive >= limit:
            return Open(options, now), f"{self.consecutive} consecutive failures"
        failures, successes = self.counts.totals(now)
        calls = failures + successes
        if calls >= options.minimum_calls and failures >= options.failure_rate * calls:
            return (
                Open(options, now),
                f"failure rate {failures / calls:.0%} >= {options.failure_rate:.0%} "
                f"over {calls} calls in {options.window:g} s",
            )
        return None


@final
class Open(BreakerState):
    """Calls fail fast with ``BreakerOpen`` until ``open_duration`` has passed.

    Transitions::

        [open] ── now >= opened_at + open_duration ──▶ [half-open]

    The transition happens when a call or ``Breaker.state()`` looks.
    """

    name = "open"

    __slots__ = ("opened_at",)

    def __init__(self, options: BreakerOptions, opened_at: float) -> None:
        super().__init__(options)
        self.opened_at = opened_at

    def probe_at(self) -> float:
        return self.opened_at + self.options.open_duration

    def due(self, now: float) -> Transition | None:
        if now >= self.probe_at():
            return HalfOpen(self.options), f"open for {self.options.open_duration:g} s"
        return None

    def admit(self, now: float) -> bool:
        return False


@final
class HalfOpen(BreakerState):
    """``half_open_probes`` calls go through; the rest fail fast.

    Transitions::

        [half-open] ── all probes succeeded ──▶ [closed]
        [half-open] ── a probe failed ────────▶ [open]

    A probe that is cancelled, or rejected by a policy further in, gives its
    slot back for another probe.
    """

    name = "half_open"

    __slots__ = ("admitted", "succeeded_count")

    def __init__(self, options: BreakerOptions) -> None:
        super().__init__(options)
        # Invariant: admitted counts probes let through and not released;
        # succeeded_count <= admitted <= half_open_probes.
        self.admitted = 0
        self.succeeded_count = 0

    def admit(self, now: float) -> bool:
        if self.admitted >= self.options.half_open_probes:
            return False
        self.admitted += 1
        return True

    def succeeded(self, now: float) -> Transition | None:
        self.succeeded_count += 1
        probes = self.options.half_open_probes
        if self.succeeded_count >= probes:
            return Closed(self.options), f"{probes} probe{'s' if probes > 1 else ''} succeeded"
        return None

    def failed(self, now: float) -> Transition | None:
        return Open(self.options, now), "a probe failed"

    def released(self) -> None:
        self.admitted -= 1


@dataclass(frozen=True, slots=True)
class CircuitStatistics:
    """A snapshot of one key's circuit.

    Attributes:
        state: the state's name.
        failures: failures in the window (closed only, else 0).
        successes: successes in the window (closed only, else 0).
        consecutive_failures: the current run of failures (closed only).
        probe_at: when the next probe is let through (open only).
        probes_in_flight: probes admitted and not finished (half-open only).
    """

    state: BreakerStateName
    failures: int
    successes: int
    consecutive_failures: int
    probe_at: float | None
    probes_in_flight: int


@dataclass(frozen=True, slots=True)
class BreakerStatistics:
    """Counters of a ``Breaker`` across its keys.

    Attributes:
        keys: circuits in the registry.
        open: of those, open or half-open.
        calls: calls admitted.
        rejected: calls refused with ``BreakerOpen``.
        opened: transitions to open.
    """

    keys: int
    open: int
    calls: int
    rejected: int
    opened: int


@final
class BreakerScope:
    """One guarded block: the async context manager that ``Breaker.scope()`` returns.

    Entering it raises ``BreakerOpen`` when the circuit refuses the call.
    Leaving it records the outcome: the block's exception, or success.
    Call ``mark_failed()`` inside the block to record a result as a failure
    (an HTTP 503 that raised nothing, say).
    """

    __slots__ = ("_breaker", "_failed", "_key", "_permit")

    def __init__(self, breaker: Breaker, key: Hashable) -> None:
        self._breaker = breaker
        self._key = key
        self._permit: BreakerState | None = None
        self._failed = False

    def mark_failed(self) -> None:
        """Record this call as a failure even if the block raises nothing."""
        self._failed = True

    async def __aenter__(self) -> BreakerScope:
        if self._permit is not None:
            raise RuntimeError("a BreakerScope can be entered only once")
        self._permit = self._breaker.acquire(self._key)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        permit = self._permit
        assert permit is not None
        breaker = self._breaker
        if exc is None:
            breaker.record(self._key, permit, failed=self._failed)
        elif isinstance(exc, CallRejected) or not isinstance(exc, Exception):
            breaker.release(self._key, permit)
        else:
            breaker.record(
                self._key, permit, failed=self._failed or breaker._counts_as_failure(exc)
            )


class Breaker(PolicyBase):
    """A circuit breaker with one circuit per key.

    Example::

        breaker = Breaker(BreakerOptions(consecutive_failures=3, open_duration=10))


        async def get(host: str) -> bytes:
            return await breaker.execute(fetch, host, key=host)

    Events: ``breaker_state_changed`` on every transition, ``rejected``
    (reason ``"breaker_open"``) on every refusal.
    """

    kind = "breaker"

    options: BreakerOptions

    def __init__(self, options: BreakerOptions | None = None, **common: Unpack[PolicyArgs]) -> None:
        super().__init__(_validate.options(options, BreakerOptions), **common)
        # Invariant: _circuits maps each known key to its current state, in
        # least-recently-used-first order, with at most options.max_keys
        # entries. A key without an entry is closed with empty counts.
        self._circuits: dict[Hashable, BreakerState] = {}
        self._calls = 0
        self._rejected = 0
        self._opened = 0

    # ---- the state machine driver

    def _current(self, key: Hashable, now: float) -> BreakerState:
        """The state of ``key`` at ``now``, after any time-based transition (LRU-touched)."""
        circuits = self._circuits
        state = circuits.pop(key, None)
        if state is None:
            state = Closed(self.options)
            if len(circuits) >= self.options.max_keys:
                del circuits[next(iter(circuits))]  # the least recently used
        circuits[key] = state
        transition = state.due(now)
        if transition is not None:
            state = self._apply(key, state, transition, now)
        return state

    def _apply(
        self, key: Hashable, old: BreakerState, transition: Transition, now: float
    ) -> BreakerState:
        new, reason = transition
        self._circuits[key] = new  # the key is present: every caller looked it up
        if new.name == "open":
            self._opened += 1
        hooks = self.hooks
        if hooks.breaker_state_changed:
            event = BreakerStateChanged(
                policy=self.name,
                key=key,
                at=now,
                old=old.name,
                new=new.name,
                reason=reason,
                probe_at=new.probe_at(),
            )
            hooks.emit("breaker_state_changed", hooks.breaker_state_changed, event)
        return new

    def acquire(self, key: Hashable) -> BreakerState:
        """Admit one call of ``key`` now: the permit to report with; the sync form of ``scope``.

        The caller must end every permit with ``record`` or ``release``.

        Raises:
            BreakerOpen: the circuit refuses the call (it says when to probe).
        """
        now = self.clock.now()
        state = self._current(key, now)
        if state.admit(now):
            self._calls += 1
            return state
        self._rejected += 1
        error = BreakerOpen(
            policy=self.name, key=key, state=state.name, now=now, probe_at=state.probe_at()
        )
        raise self._refused(error, "breaker_open", now)

    def record(self, key: Hashable, permit: BreakerState, *, failed: bool) -> None:
        """Report the outcome of a call that ``acquire`` admitted with ``permit``."""
        if self._circuits.get(key) is not permit:
            return  # admitted by a state that has been left since (or forgotten)
        now = self.clock.now()
        transition = permit.failed(now) if failed else permit.succeeded(now)
        if transition is not None:
            self._apply(key, permit, transition, now)

    def release(self, key: Hashable, permit: BreakerState) -> None:
        """End a permit without a verdict (the call was cancelled, or never made)."""
        if self._circuits.get(key) is permit:
            permit.released()

    def _counts_as_failure(self, exc: BaseException) -> bool:
        failure_on = self.options.failure_on
        if isinstance(failure_on, tuple):
            return isinstance(exc, failure_on)
        return bool(failure_on(exc))

    # ---- public API

    def scope(self, *, key: Hashable = None) -> BreakerScope:
        """An async context manager that guards a block with ``key``'s circuit."""
        return BreakerScope(self, key)

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        failure_on_result = self.options.failure_on_result
        async with BreakerScope(self, key) as scope:
            result = await fn(*args)
            if failure_on_result is not None and failure_on_result(result):
                scope.mark_failed()
            return result

    def state(self, key: Hashable = None) -> BreakerStateName:
        """The state of ``key``'s circuit now (moving open to half-open when due)."""
        if key not in self._circuits:
            return "closed"
        return self._current(key, self.clock.now()).name

    def reset(self, key: Hashable = None) -> None:
        """Close ``key``'s circuit and forget its counts (emits the change if it was not closed)."""
        state = self._circuits.get(key)
        if state is not None and state.name != "closed":
            self._apply(key, state, (Closed(self.options), "reset"), self.clock.now())
        else:
            self._circuits.pop(key, None)

    def circuit(self, key: Hashable = None) -> CircuitStatistics:
        """A snapshot of ``key``'s circuit."""
        if key not in self._circuits:
            return CircuitStatistics("closed", 0, 0, 0, None, 0)
        now = self.clock.now()
        state = self._current(key, now)
        if isinstance(state, Closed):
            failures, successes = state.counts.totals(now)
            return CircuitStatistics("closed", failures, successes, state.consecutive, None, 0)
        if isinstance(state, HalfOpen):
            in_flight = state.admitted - state.succeeded_count
            return CircuitStatistics("half_open", 0, 0, 0, None, in_flight)
        return CircuitStatistics("open", 0, 0, 0, state.probe_at(), 0)

    def statistics(self) -> BreakerStatistics:
        """Counters across keys: circuits, open ones, calls, rejections, openings."""
        not_closed = sum(1 for s in self._circuits.values() if s.name != "closed")
        return BreakerStatistics(
            keys=len(self._circuits),
            open=not_closed,
            calls=self._calls,
            rejected=self._rejected,
            opened=self._opened,
        )
