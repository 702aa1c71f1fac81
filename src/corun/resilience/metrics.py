"""Counters and latency histograms, readable in process.

``LatencyHistogram`` records durations in logarithmic buckets: sixteen per
doubling from 1 µs up, so a percentile is within about 2.2 % of the true
value while memory stays bounded by the spread of the data (only buckets
that hold something exist; 10 µs to 10 s is at most 160 of them), not by the
number of samples.

``Metrics`` is a ``Listener``: register it on policies (or on a whole
``Pipeline`` with ``add_listener``) and it counts their events and builds a
latency histogram per policy from ``call_finished``. ``statistics()`` returns
a frozen snapshot.

Counter names, per policy name:

================================  =========================================
counter                           counts
================================  =========================================
``retries``                       ``retry_scheduled``
``gave_up.<reason>``              ``gave_up`` (attempts, deadline, budget)
``state.<new state>``             ``breaker_state_changed`` (closed, open,
                                  half_open)
``rejected.<reason>``             ``rejected`` (breaker_open, bulkhead_full,
                                  rate_limited)
``timed_out.<kind>``              ``timed_out`` (attempt, overall)
``hedges``                        ``hedge_launched``
``calls.<outcome>``               ``call_finished`` (success, failure,
                                  rejected, cancelled)
================================  =========================================

Latency histograms take the calls that ran: outcomes ``success`` and
``failure``. Rejections take no time worth measuring, and a cancelled call
(a hedge's loser) did not finish. Counters are per policy, not per key, so
that a key with unbounded cardinality (a URL) cannot grow them without bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, final

from corun.resilience.events import (
    BreakerStateChanged,
    CallFinished,
    GaveUp,
    HedgeLaunched,
    Listener,
    Rejected,
    RetryScheduled,
    TimedOut,
)

#: Smallest distinct value; smaller ones (0 on a mock clock) share its bucket.
_FLOOR: Final = 1e-6
#: Buckets per doubling of the value: relative error <= 2 ** (1 / 32) - 1.
_PER_DOUBLING: Final = 16
#: The largest bucket index (about 1e6 s); larger values are clamped into it.
_MAX_INDEX: Final = 640


#: The counter name of each ``CallFinished.outcome``.
_CALLS: Final[dict[str, str]] = {
    outcome: f"calls.{outcome}" for outcome in ("success", "failure", "rejected", "cancelled")
}


def _bucket(value: float) -> int:
    if value <= _FLOOR:
        return 0
    return min(_MAX_INDEX, int(math.log2(value / _FLOOR) * _PER_DOUBLING))


def _representative(index: int) -> float:
    # The geometric middle of the bucket.
    return float(_FLOOR * 2.0 ** ((index + 0.5) / _PER_DOUBLING))


def _upper_bound(index: int) -> float:
    return float(_FLOOR * 2.0 ** ((index + 1) / _PER_DOUBLING))


def _check_quantile(q: float) -> None:
    if not 0.0 < q <= 100.0:
        raise ValueError(f"percentile must be in (0, 100], got {q!r}")


def _percentile(counts: Iterable[Mapping[int, int]], total: int, q: float) -> int:
    """The index of the bucket holding the ``q``-th percentile of merged ``counts``."""
    merged: dict[int, int] = {}
    for mapping in counts:
        for index, n in mapping.items():
            merged[index] = merged.get(index, 0) + n
    rank = max(1, math.ceil(total * q / 100.0))
    seen = 0
    for index in sorted(merged):
        seen += merged[index]
        if seen >= rank:
            return index
    raise AssertionError("unreachable: rank <= total")


@dataclass(frozen=True, slots=True)
class LatencyStatistics:
    """A snapshot of a ``LatencyHistogram``; every field is 0.0 when it is empty."""

    count: int
    total: float
    minimum: float
    maximum: float
    mean: float
    p50: float
    p90: float
    p99: float


@final
class LatencyHistogram:
    """Durations in logarithmic buckets, with exact count, sum, min and max."""

    __slots__ = ("_counts", "_max", "_min", "count", "total")

    def __init__(self) -> None:
        # Invariant: count == sum(_counts.values()); _min <= _max when count > 0.
        self._counts: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self._min = math.inf
        self._max = -math.inf

    def record(self, seconds: float) -> None:
        """Add one duration (negative values count as 0).

        Raises:
            ValueError: ``seconds`` is NaN or infinite.
        """
        if not math.isfinite(seconds):
            raise ValueError(f"duration must be finite, got {seconds!r}")
        seconds = max(0.0, seconds)
        index = _bucket(seconds)
        self._counts[index] = self._counts.get(index, 0) + 1
        self.count += 1
        self.total += seconds
        self._min = min(self._min, seconds)
        self._max = max(self._max, seconds)

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (``q`` in (0, 100]), within ~2.2 %; 0.0 when empty.

        The result is clamped to the exact minimum and maximum, so a histogram
        of identical values returns that value.

        Raises:
            ValueError: ``q`` is out of range.
        """
        _check_quantile(q)
        if not self.count:
            return 0.0
        index = _percentile((self._counts,), self.count, q)
        return min(self._max, max(self._min, _representative(index)))

    def statistics(self) -> LatencyStatistics:
        """A frozen snapshot: count, total, min, max, mean, p50, p90, p99."""
        if not self.count:
            return LatencyStatistics(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        return LatencyStatistics(
            count=self.count,
            total=self.total,
            minimum=self._min,
            maximum=self._max,
            mean=self.total / self.count,
            p50=self.percentile(50),
            p90=self.percentile(90),
            p99=self.percentile(99),
        )


@final
class WindowedHistogram:
    """A latency histogram of roughly the last ``window`` seconds.

    Two generations: samples go into the current one, and when it is
    ``window`` old it becomes the previous one and a new current one starts.
    Percentiles merge both, so they cover between one and two windows of
    data: recent enough to follow a change, and never empty right after a
    rotation. Time comes from the caller (``now``), so this stays a pure
    data structure.
    """

    __slots__ = ("_current", "_current_n", "_previous", "_previous_n", "_started", "window")

    def __init__(self, window: float) -> None:
        if not (math.isfinite(window) and window > 0):
            raise ValueError(f"window must be a positive number of seconds, got {window!r}")
        self.window = window
        # Invariant: _current_n == sum(_current.values()), likewise _previous;
        # _current holds samples recorded since _started (None: none yet).
        self._current: dict[int, int] = {}
        self._previous: dict[int, int] = {}
        self._current_n = 0
        self._previous_n = 0
        self._started: float | None = None

    def _rotate(self, now: float) -> None:
        if self._started is None:
            self._started = now
            return
        age = now - self._started
        if age < self.window:
            return
        if age < 2 * self.window:
            self._previous, self._previous_n = self._current, self._current_n
        else:
            self._previous, self._previous_n = {}, 0
        self._current, self._current_n = {}, 0
        self._started = now

    def record(self, seconds: float, now: float) -> None:
        """Add one duration observed at clock time ``now``."""
        if not math.isfinite(seconds):
            raise ValueError(f"duration must be finite, got {seconds!r}")
        self._rotate(now)
        index = _bucket(max(0.0, seconds))
        self._current[index] = self._current.get(index, 0) + 1
        self._current_n += 1

    def count(self, now: float) -> int:
        """Samples in the window as of ``now``."""
        self._rotate(now)
        return self._current_n + self._previous_n

    def percentile(self, q: float, now: float) -> float | None:
        """The ``q``-th percentile of the window, rounded up; None when empty.

        Rounded up to its bucket's upper bound (at most 4.4 % above), unlike
        ``LatencyHistogram.percentile``: a hedging delay must not fall just
        below the latency it was computed from, or calls exactly that fast
        would all be hedged.
        """
        _check_quantile(q)
        self._rotate(now)
        total = self._current_n + self._previous_n
        if not total:
            return None
        return _upper_bound(_percentile((self._previous, self._current), total, q))


@dataclass(frozen=True, slots=True)
class MetricsStatistics:
    """A snapshot of ``Metrics``.

    Attributes:
        counters: ``(policy name, counter name) -> count``; names as in the
            table of ``corun.resilience.metrics``.
        latency: ``policy name -> LatencyStatistics`` of its calls.
    """

    counters: Mapping[tuple[str, str], int]
    latency: Mapping[str, LatencyStatistics]

    def count(self, policy: str, name: str) -> int:
        """The counter ``name`` of ``policy``, 0 when it never fired."""
        return self.counters.get((policy, name), 0)


class Metrics(Listener):
    """Counts every event and keeps a latency histogram per policy.

    Register one instance on the policies to watch; it can be shared by many.
    """

    def __init__(self) -> None:
        self._counters: dict[tuple[str, str], int] = {}
        self._latency: dict[str, LatencyHistogram] = {}

    def _bump(self, policy: str, name: str) -> None:
        key = (policy, name)
        self._counters[key] = self._counters.get(key, 0) + 1

    def retry_scheduled(self, event: RetryScheduled) -> None:
        self._bump(event.policy, "retries")

    def gave_up(self, event: GaveUp) -> None:
        self._bump(event.policy, f"gave_up.{event.reason}")

    def breaker_state_changed(self, event: BreakerStateChanged) -> None:
        self._bump(event.policy, f"state.{event.new}")

    def rejected(self, event: Rejected) -> None:
        self._bump(event.policy, f"rejected.{event.reason}")

    def timed_out(self, event: TimedOut) -> None:
        self._bump(event.policy, "timed_out.overall" if event.overall else "timed_out.attempt")

    def hedge_launched(self, event: HedgeLaunched) -> None:
        self._bump(event.policy, "hedges")

    def call_finished(self, event: CallFinished) -> None:
        # Once per call of every policy: the counter name is looked up, not formatted.
        self._bump(event.policy, _CALLS[event.outcome])
        if event.outcome == "success" or event.outcome == "failure":
            histogram = self._latency.get(event.policy)
            if histogram is None:
                histogram = self._latency[event.policy] = LatencyHistogram()
            histogram.record(event.duration)

    def histogram(self, policy: str) -> LatencyHistogram | None:
        """The live latency histogram of ``policy``, if it has recorded a call."""
        return self._latency.get(policy)

    def statistics(self) -> MetricsStatistics:
        """A frozen snapshot of every counter and latency histogram."""
        return MetricsStatistics(
            counters=MappingProxyType(dict(self._counters)),
            latency=MappingProxyType({p: h.statistics() for p, h in self._latency.items()}),
        )
