"""Reading the loop's lag histograms: percentiles, merging, Prometheus buckets.

The loop counts durations in log-linear buckets (``runtime.engine.accounting``):
under 0.5 us, then 64 buckets per power of two up to about 69 s, so a
bucket is at most 1.6% of its value wide. A percentile is read as the
midpoint of its bucket, within 0.8% of the true value, and never above the
largest value seen.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

from corun.runtime.engine.accounting import BUCKETS, Histogram, bucket_bounds

#: The bucket bounds (seconds) of the Prometheus export: a usual ladder
#: from 10 us to 60 s, on top of the fine buckets kept inside.
PROMETHEUS_BOUNDS: Final = (
    1e-5,
    5e-5,
    1e-4,
    2.5e-4,
    5e-4,
    1e-3,
    2.5e-3,
    5e-3,
    1e-2,
    2.5e-2,
    5e-2,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    60.0,
)


@dataclass(frozen=True)
class LatencyHistogram:
    """A frozen copy of a lag histogram. Add two to merge them (same layout always)."""

    counts: tuple[int, ...]
    #: Samples counted.
    count: int
    #: Sum of the samples, in seconds.
    total: float
    #: The largest sample, in seconds.
    max: float

    @classmethod
    def empty(cls) -> LatencyHistogram:
        """A histogram with no samples."""
        return cls((0,) * BUCKETS, 0, 0.0, 0.0)

    @classmethod
    def copy_of(cls, histogram: Histogram) -> LatencyHistogram:
        """A copy of the loop's live histogram (safe from any thread)."""
        counts = tuple(histogram.counts())
        # Read the count from the copy: the loop may count more meanwhile.
        return cls(counts, sum(counts), histogram.total, histogram.max)

    def __add__(self, other: LatencyHistogram) -> LatencyHistogram:
        # map() over the 1,730 buckets, not a generator: corun top merges
        # histograms in every answer, with the GIL held.
        return LatencyHistogram(
            tuple(map(operator.add, *_layouts(self, other))),
            self.count + other.count,
            self.total + other.total,
            max(self.max, other.max),
        )

    def __sub__(self, earlier: LatencyHistogram) -> LatencyHistogram:
        """What was counted since ``earlier`` (its max is this one's: maxima don't subtract)."""
        counts = tuple(map(operator.sub, *_layouts(self, earlier)))
        return LatencyHistogram(counts, sum(counts), self.total - earlier.total, self.max)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0 to 1) in seconds; 0.0 when empty."""
        return self.quantiles((q,))[0]

    def quantiles(self, qs: tuple[float, ...]) -> list[float]:
        """The quantiles ``qs`` (each 0 to 1) in seconds, from one pass over the buckets."""
        for q in qs:
            if not 0.0 <= q <= 1.0:
                raise ValueError(f"quantile must be between 0 and 1, not {q!r}")
        if self.count == 0:
            return [0.0] * len(qs)
        seen = list(accumulate(self.counts))
        out: list[float] = []
        for q in qs:
            # The first bucket whose running count reaches the rank (at least
            # one sample in): that bucket is not empty.
            index = bisect_left(seen, max(q * self.count, 1))
            if index >= BUCKETS:
                out.append(self.max)
                continue
            low, high = bucket_bounds(index)
            out.append(min((low + high) / 2e9, self.max))
        return out

    @property
    def mean(self) -> float:
        """The mean sample, in seconds."""
        return self.total / self.count if self.count else 0.0

    @property
    def p50(self) -> float:
        """The median, in seconds."""
        return self.quantile(0.5)

    @property
    def p90(self) -> float:
        """The 90th percentile, in seconds."""
        return self.quantile(0.9)

    @property
    def p99(self) -> float:
        """The 99th percentile, in seconds."""
        return self.quantile(0.99)

    def cumulative(self, bounds: tuple[float, ...] = PROMETHEUS_BOUNDS) -> list[int]:
        """Counts at or under each bound (Prometheus ``le`` buckets), then ``+Inf``."""
        out: list[int] = []
        index = 0
        seen = 0
        for bound in bounds:
            limit = bound * 1e9
            while index < BUCKETS and bucket_bounds(index)[1] <= limit:
                seen += self.counts[index]
                index += 1
            out.append(seen)
        out.append(self.count)
        return out

    def summary(self) -> dict[str, float]:
        """p50, p90, p99, max (seconds) and count, as the JSON answers give them."""
        p50, p90, p99 = self.quantiles((0.5, 0.9, 0.99))
        return {"p50": p50, "p90": p90, "p99": p99, "max": self.max, "count": self.count}


def _layouts(
    one: LatencyHistogram, other: LatencyHistogram
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The counts of both, which must have the same buckets (map() would cut the longer)."""
    if len(one.counts) != len(other.counts):
        raise ValueError(
            f"histograms of {len(one.counts)} and {len(other.counts)} buckets do not add up"
        )
    return one.counts, other.counts
