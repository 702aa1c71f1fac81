"""``AdaptiveLimit``: how many calls to keep in flight to one dependency, learned as they finish.

The algorithm is AIMD (additive increase, multiplicative decrease) with a
slow start and a latency signal, the scheme of TCP congestion control
applied to requests in flight, as Netflix's ``AIMDLimit`` does:

* **Slow start.** The limit starts at ``initial`` and grows by one for every
  healthy response, so it doubles every round trip, until the first sign of
  overload. A dependency that never pushes back reaches ``max_limit`` after
  ``max_limit - initial`` responses: well under a second for a fast API.
* **Additive increase.** After the first decrease, every ``limit`` healthy
  responses add one: one more call in flight per round trip.
* **Multiplicative decrease.** An overload signal (the caller reports 429,
  503 or a timeout as ``overloaded``) multiplies the limit by ``backoff``.
  Latency is judged once per round trip: when the median latency of the
  last round trip's answers (at least ``latency_samples`` of them) is more
  than ``latency_tolerance`` times the baseline (and ``latency_slack``
  above it), the limit is multiplied by ``latency_backoff``. The median,
  not each answer: a host serves slow pages and fast ones, and a minority of
  slow pages says nothing about its load, while queueing slows them all.
* **Once per round trip.** Calls that started before the last decrease were
  sent under the old limit; their signals cannot be news, so they do not
  decrease it again (TCP's "once per window"). Without that, one burst of
  50 rejected calls would take the limit from 64 to 1.
* **Only when used.** A response makes the limit grow only if at least half
  of the limit was in use at some point since its call started: a limit
  the caller does not need says nothing about the dependency, and would let
  a later burst go out unchecked.
* **Baseline.** The baseline latency is the least latency seen over the
  last one to two ``baseline_window`` s (a minimum over two rotating
  buckets), so it follows a dependency that got slower for good.

Why AIMD and not a gradient (Netflix's ``Gradient2Limit``, Envoy's
adaptive concurrency filter): a gradient sets the limit from the ratio of
the baseline to the current latency, which needs a steady stream of
samples and a periodic "minimum RTT" measurement at a reduced limit to
keep the baseline honest. A batch fetcher talks to many hosts, most with a
few hundred requests, and gets explicit overload signals (429, 503 with
``Retry-After``) far more often than it could estimate a gradient from.
AIMD acts on each signal at once, needs no measurement phase, and has two
parameters whose effect is easy to state: where it settles (the limit at
which latency passes ``latency_tolerance`` times the baseline, or the
server starts refusing) and how far it falls back (``backoff``).

The class is pure: it reads the time from its ``Clock`` and holds no
tasks or timers; the caller acquires before a call and reports the outcome
after it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, final

from corun.resilience import _validate
from corun.resilience.clock import SYSTEM_CLOCK, Clock

#: The largest limit accepted.
MAX_LIMIT: Final = 100_000


@dataclass(frozen=True, slots=True)
class AdaptiveLimitOptions:
    """Options of an ``AdaptiveLimit``; the defaults suit an unknown public host.

    Attributes:
        initial: the limit at the start, in [1, max_limit].
        min_limit: the limit never goes below this, in [1, max_limit].
        max_limit: the ceiling, in [1, 100000].
        backoff: the factor applied on an overload signal, in (0, 1).
        latency_backoff: the factor applied when latency rises, in (0, 1);
            less (down to ``backoff``) when it rose far above the tolerance.
        latency_tolerance: latency above this many times the baseline is a
            rise, in [1.1, 100].
        latency_slack: ... and only if it is at least this many seconds above
            the baseline too, in [0, 60] (so that jitter on a sub-millisecond
            baseline is not taken for queueing).
        latency_samples: the latency signal is the median of this many
            answers, or of ``limit`` answers (one round trip) when that is
            more, in [1, 10000].
        baseline_window: seconds over which the baseline is the least
            latency seen, in (0, 86400].
    """

    initial: int = 2
    min_limit: int = 1
    max_limit: int = 64
    backoff: float = 0.5
    latency_backoff: float = 0.8
    latency_tolerance: float = 2.0
    latency_slack: float = 0.02
    latency_samples: int = 8
    baseline_window: float = 60.0

    def __post_init__(self) -> None:
        owner = "AdaptiveLimitOptions"
        _validate.count(owner, "max_limit", self.max_limit, high=MAX_LIMIT)
        _validate.count(owner, "min_limit", self.min_limit, high=self.max_limit)
        _validate.count(owner, "initial", self.initial, low=self.min_limit, high=self.max_limit)
        for name in ("backoff", "latency_backoff"):
            value = _validate.number(owner, name, getattr(self, name), low=0.0, high=1.0)
            if not 0.0 < value < 1.0:
                raise ValueError(f"{owner}.{name} must be in (0, 1), got {value!r}")
            object.__setattr__(self, name, value)
        _validate.normalize(self, owner, "latency_tolerance", _validate.number, low=1.1, high=100.0)
        _validate.normalize(self, owner, "latency_slack", _validate.number, low=0.0, high=60.0)
        _validate.count(owner, "latency_samples", self.latency_samples, high=10_000)
        _validate.normalize(self, owner, "baseline_window", _validate.seconds)


@dataclass(frozen=True, slots=True)
class AdaptiveLimitStatistics:
    """A snapshot of an ``AdaptiveLimit``.

    Attributes:
        limit: calls allowed in flight now.
        in_flight: calls acquired and not yet reported.
        baseline: the baseline latency in seconds (None before any sample).
        slow_start: still in slow start (no decrease yet).
        increases: times the limit grew by a whole call.
        decreases: multiplicative decreases (overload or latency).
        peak: the highest limit reached.
    """

    limit: int
    in_flight: int
    baseline: float | None
    slow_start: bool
    increases: int
    decreases: int
    peak: int


@final
class AdaptiveLimit:
    """An adaptive limit on calls in flight to one dependency (see the module docstring).

    Use::

        started = limit.acquire()  # None: at the limit, wait for a call to finish
        ...  # make the call
        limit.succeeded(started)  # or overloaded(started), or ignored()

    Args:
        options: the ``AdaptiveLimitOptions`` (defaults when None).
        clock: the clock that times calls (default ``SystemClock``).
    """

    __slots__ = (
        "_bucket_min",
        "_bucket_start",
        "_busy_at",
        "_clock",
        "_credit",
        "_decreased_at",
        "_limit",
        "_previous_min",
        "_window",
        "_window_size",
        "decreases",
        "in_flight",
        "increases",
        "options",
        "peak",
        "slow_start",
    )

    def __init__(self, options: AdaptiveLimitOptions | None = None, *, clock: Clock | None = None):
        self.options = options = _validate.options(options, AdaptiveLimitOptions)
        self._clock = clock if clock is not None else SYSTEM_CLOCK
        # Invariant: min_limit <= _limit <= max_limit; in_flight >= 0 counts
        # acquire() calls not yet reported. The baseline is the least of
        # _bucket_min (samples since _bucket_start) and _previous_min (the
        # bucket before); both are inf before any sample. _busy_at is the last
        # time an acquire left at least half the limit in use; _credit counts
        # healthy answers towards the next additive increase. _window holds
        # the latencies of healthy answers to calls sent since the last
        # decrease, until there are enough for the latency signal.
        self._limit = float(options.initial)
        self.in_flight = 0
        self.slow_start = True
        self._decreased_at = -math.inf
        self._busy_at = -math.inf
        self._credit = 0
        self._window: list[float] = []
        self._window_size = options.latency_samples
        self._bucket_min = math.inf
        self._previous_min = math.inf
        self._bucket_start = self._clock.now()
        self.increases = 0
        self.decreases = 0
        self.peak = options.initial

    @property
    def limit(self) -> int:
        """Calls allowed in flight now."""
        return int(self._limit)

    @property
    def full(self) -> bool:
        """True when ``acquire`` would refuse."""
        return self.in_flight >= int(self._limit)

    @property
    def baseline(self) -> float | None:
        """The baseline latency, in seconds (None before any sample)."""
        baseline = min(self._bucket_min, self._previous_min)
        return None if baseline == math.inf else baseline

    def acquire(self) -> float | None:
        """Take a slot for one call: its start time, or None when the limit is reached."""
        limit = int(self._limit)
        if self.in_flight >= limit:
            return None
        self.in_flight += 1
        now = self._clock.now()
        if self.in_flight * 2 >= limit:
            self._busy_at = now
        return now

    def succeeded(self, started: float) -> None:
        """The call that ``acquire`` returned ``started`` for got a healthy answer."""
        self.in_flight -= 1
        now = self._clock.now()
        latency = now - started
        options = self.options
        if now - self._bucket_start >= options.baseline_window:
            self._previous_min = self._bucket_min
            self._bucket_min = math.inf
            self._bucket_start = now
        if latency < self._bucket_min:
            self._bucket_min = latency
        if started >= self._decreased_at:
            window = self._window
            if not window:  # a new round trip: its size is the limit now
                self._window_size = max(options.latency_samples, int(self._limit))
            window.append(latency)
            if len(window) >= self._window_size:
                window.sort()
                median = window[len(window) // 2]
                window.clear()
                baseline = min(self._bucket_min, self._previous_min)
                target = baseline * options.latency_tolerance
                if median > target and median - baseline > options.latency_slack:
                    # Far above the target, fall back in proportion (a gradient
                    # step, at most backoff): a slow start that overshot comes
                    # back in one or two round trips, not ten.
                    factor = min(options.latency_backoff, max(options.backoff, target / median))
                    self._decrease(started, now, factor)
                    return
        limit = self._limit
        if limit >= options.max_limit or self._busy_at < started:
            return  # at the ceiling, or not using what it has
        if not self.slow_start:
            # One more per round trip: per int(limit) healthy answers.
            self._credit += 1
            if self._credit < int(limit):
                return
            self._credit = 0
        grown = min(float(options.max_limit), limit + 1.0)
        if int(grown) > int(limit):
            self.increases += 1
            self.peak = max(self.peak, int(grown))
        self._limit = grown

    def overloaded(self, started: float) -> None:
        """The call was refused for overload (429, 503) or timed out: back off."""
        self.in_flight -= 1
        self._decrease(started, self._clock.now(), self.options.backoff)

    def ignored(self) -> None:
        """The call ended without saying anything about load (an error of its own, say)."""
        self.in_flight -= 1

    def _decrease(self, started: float, now: float, factor: float) -> None:
        if started < self._decreased_at:
            return  # sent under the limit before the last decrease: not news
        self.slow_start = False
        self._decreased_at = now
        self.decreases += 1
        self._credit = 0
        self._window.clear()
        self._limit = max(float(self.options.min_limit), self._limit * factor)

    def statistics(self) -> AdaptiveLimitStatistics:
        """A snapshot: the limit, calls in flight, the baseline and the counters."""
        return AdaptiveLimitStatistics(
            limit=self.limit,
            in_flight=self.in_flight,
            baseline=self.baseline,
            slow_start=self.slow_start,
            increases=self.increases,
            decreases=self.decreases,
            peak=self.peak,
        )

    def __repr__(self) -> str:
        return f"<AdaptiveLimit limit={self.limit} in_flight={self.in_flight}>"
