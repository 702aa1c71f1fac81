"""corun.resilience: adaptive concurrency limits, retry, retry budgets, circuit breakers, bulkheads, rate limits, hedging, timeouts.

Pure Python on any asyncio loop, with time from an injectable ``Clock``.
Each policy is a class with a frozen ``<Name>Options``; each runs a callable
(``await policy.execute(fn, *args, key=...)``), decorates one (``@policy``),
and where it can, guards a block (``async with policy.scope(key=...)``).
``Pipeline`` composes them, the first outermost. ``Listener`` receives their
events; ``Metrics`` turns those into counters and latency histograms.

See docs/resilience.md.
"""

from corun.resilience.adaptive import (
    AdaptiveLimit,
    AdaptiveLimitOptions,
    AdaptiveLimitStatistics,
)
from corun.resilience.breaker import (
    Breaker,
    BreakerOptions,
    BreakerScope,
    BreakerState,
    BreakerStatistics,
    CircuitStatistics,
    Closed,
    HalfOpen,
    Open,
)
from corun.resilience.budget import RetryBudget, RetryBudgetOptions, RetryBudgetStatistics
from corun.resilience.bulkhead import Bulkhead, BulkheadOptions, BulkheadScope, BulkheadStatistics
from corun.resilience.clock import Cancellable, Clock, LoopClock, SystemClock, WallClock
from corun.resilience.errors import (
    AttemptTimeout,
    BreakerOpen,
    BulkheadFull,
    CallRejected,
    OverallTimeout,
    RateLimited,
    ResilienceError,
    RetryBudgetExhausted,
)
from corun.resilience.events import (
    BreakerStateChanged,
    BreakerStateName,
    CallFinished,
    GaveUp,
    GiveUpReason,
    HedgeLaunched,
    Listener,
    Outcome,
    Rejected,
    RejectReason,
    RetryScheduled,
    TimedOut,
)
from corun.resilience.hedge import Hedge, HedgeOptions, HedgeStatistics
from corun.resilience.metrics import (
    LatencyHistogram,
    LatencyStatistics,
    Metrics,
    MetricsStatistics,
    WindowedHistogram,
)
from corun.resilience.pipeline import Pipeline
from corun.resilience.policy import Policy, PolicyBase, PolicyDescription
from corun.resilience.ratelimit import (
    RateLimiter,
    RateLimiterOptions,
    RateLimiterScope,
    RateLimiterStatistics,
    TokenBucket,
)
from corun.resilience.retry import (
    Attempt,
    AttemptLoop,
    Retry,
    RetryCall,
    RetryOptions,
    RetryStatistics,
)
from corun.resilience.retry_after import parse_retry_after, retry_after_delay
from corun.resilience.timeouts import Timeout, TimeoutOptions, TimeoutScope, TimeoutStatistics

__all__ = [
    "AdaptiveLimit",
    "AdaptiveLimitOptions",
    "AdaptiveLimitStatistics",
    "Attempt",
    "AttemptLoop",
    "AttemptTimeout",
    "Breaker",
    "BreakerOpen",
    "BreakerOptions",
    "BreakerScope",
    "BreakerState",
    "BreakerStateChanged",
    "BreakerStateName",
    "BreakerStatistics",
    "Bulkhead",
    "BulkheadFull",
    "BulkheadOptions",
    "BulkheadScope",
    "BulkheadStatistics",
    "CallFinished",
    "CallRejected",
    "Cancellable",
    "CircuitStatistics",
    "Clock",
    "Closed",
    "GaveUp",
    "GiveUpReason",
    "HalfOpen",
    "Hedge",
    "HedgeLaunched",
    "HedgeOptions",
    "HedgeStatistics",
    "LatencyHistogram",
    "LatencyStatistics",
    "Listener",
    "LoopClock",
    "Metrics",
    "MetricsStatistics",
    "Open",
    "Outcome",
    "OverallTimeout",
    "Pipeline",
    "Policy",
    "PolicyBase",
    "PolicyDescription",
    "RateLimited",
    "RateLimiter",
    "RateLimiterOptions",
    "RateLimiterScope",
    "RateLimiterStatistics",
    "RejectReason",
    "Rejected",
    "ResilienceError",
    "Retry",
    "RetryBudget",
    "RetryBudgetExhausted",
    "RetryBudgetOptions",
    "RetryBudgetStatistics",
    "RetryCall",
    "RetryOptions",
    "RetryScheduled",
    "RetryStatistics",
    "SystemClock",
    "TimedOut",
    "Timeout",
    "TimeoutOptions",
    "TimeoutScope",
    "TimeoutStatistics",
    "TokenBucket",
    "WallClock",
    "WindowedHistogram",
    "parse_retry_after",
    "retry_after_delay",
]
