"""``RateLimiter``: token buckets with a rate and a burst, global and per key.

A token bucket holds at most ``burst`` tokens and gains ``rate`` tokens per
second; each call takes one. So a quiet client may send ``burst`` calls at
once, and over any long stretch no more than ``rate`` per second.

A ``RateLimiter`` has a global bucket (``rate``/``burst``), a bucket per key
(``per_key_rate``/``per_key_burst``), or both; a call needs a token from
each bucket that applies. When a token is not there yet the call may wait
for it, up to ``max_wait`` seconds; if it would have to wait longer it fails
at once with ``RateLimited``, which says how long until the next token.

Waiting works by reservation (like Go's ``rate.Limiter.Reserve``): the token
is taken at once, which may leave the bucket negative, and the caller sleeps
until the bucket would have refilled it. Later callers see the debt and wait
longer, so waiters are served in arrival order without a queue. A caller
cancelled while it waits gives its token back.

Per-key buckets live in an LRU registry of at most ``max_keys``; a key that
is forgotten starts again with a full bucket.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, Unpack, final

from corun.resilience import _validate
from corun.resilience.errors import RateLimited
from corun.resilience.policy import PolicyArgs, PolicyBase

T = TypeVar("T")

#: The highest rate a bucket accepts, in tokens per second.
MAX_RATE: Final = 1_000_000.0
#: Float slack when comparing a refilled level with one token: 0.1 s at
#: 10/s must give a token although 0.1 * 10 may round to 0.9999999999999999.
_SLACK: Final = 1e-9


@dataclass(frozen=True, slots=True)
class RateLimiterOptions:
    """Options of a ``RateLimiter``. Set ``rate``, ``per_key_rate``, or both.

    Attributes:
        rate: global tokens per second, in (0, 1e6]; None for no global limit.
        burst: the global bucket's size, in [1, 1000000]; default
            ``ceil(rate)`` (one second's worth).
        per_key_rate: tokens per second for each key; None for no per-key limit.
        per_key_burst: each key's bucket size; default ``ceil(per_key_rate)``.
        max_wait: the longest a call waits for a token, in [0, 86400] s; 0
            rejects at once when no token is there.
        max_keys: per-key buckets kept (LRU), in [1, 1000000].
    """

    rate: float | None = None
    burst: int | None = None
    per_key_rate: float | None = None
    per_key_burst: int | None = None
    max_wait: float = 0.0
    max_keys: int = 10_000

    def __post_init__(self) -> None:
        owner = "RateLimiterOptions"
        if self.rate is None and self.per_key_rate is None:
            raise ValueError(f"{owner} needs rate, per_key_rate or both")
        for rate_field, burst_field in (("rate", "burst"), ("per_key_rate", "per_key_burst")):
            rate = getattr(self, rate_field)
            burst = getattr(self, burst_field)
            if rate is None:
                if burst is not None:
                    raise ValueError(f"{owner}.{burst_field} needs {rate_field}")
                continue
            rate = _validate.number(owner, rate_field, rate, low=0.0, high=MAX_RATE)
            if rate == 0.0:
                raise ValueError(f"{owner}.{rate_field} must be positive, got {rate!r}")
            object.__setattr__(self, rate_field, rate)
            if burst is None:
                burst = max(1, math.ceil(rate))
            object.__setattr__(self, burst_field, _validate.count(owner, burst_field, burst))
        _validate.normalize(self, owner, "max_wait", _validate.seconds, allow_zero=True)
        _validate.count(owner, "max_keys", self.max_keys)


@final
class TokenBucket:
    """A token bucket. Pure: every step takes the time from the caller.

    ``tokens`` may be negative: that is the debt of reservations made ahead
    of time (see the module docstring).
    """

    __slots__ = ("burst", "rate", "tokens", "updated")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        # Invariant: tokens <= burst; tokens is the level at time updated.
        self.rate = rate
        self.burst = burst
        self.tokens = float(burst)
        self.updated = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def wait_time(self, now: float) -> float:
        """Seconds until a token is available (0.0: one is there now)."""
        self._refill(now)
        if self.tokens >= 1.0 - _SLACK:
            return 0.0
        return (1.0 - self.tokens) / self.rate

    def take(self, now: float) -> None:
        """Take one token, going into debt if there is none."""
        self._refill(now)
        self.tokens -= 1.0

    def give_back(self, now: float) -> None:
        """Return a token taken by ``take`` and not used."""
        self._refill(now)
        self.tokens = min(float(self.burst), self.tokens + 1.0)

    def level(self, now: float) -> float:
        """The tokens in the bucket at ``now`` (negative: reserved ahead)."""
        self._refill(now)
        return self.tokens


@dataclass(frozen=True, slots=True)
class RateLimiterStatistics:
    """Counters of a ``RateLimiter``.

    Attributes:
        admitted: calls that got their tokens.
        waited: of those, calls that had to wait.
        rejected: calls refused with ``RateLimited``.
        keys: per-key buckets in the registry.
        global_tokens: the global bucket's level now (None without one).
    """

    admitted: int
    waited: int
    rejected: int
    keys: int
    global_tokens: float | None


@final
class RateLimiterScope:
    """One guarded block: the async context manager that ``RateLimiter.scope()`` returns.

    Entering it takes the tokens (waiting up to ``max_wait``); leaving it
    does nothing, since tokens are not given back after use.
    """

    __slots__ = ("_key", "_limiter")

    def __init__(self, limiter: RateLimiter, key: Hashable) -> None:
        self._limiter = limiter
        self._key = key

    async def __aenter__(self) -> RateLimiterScope:
        await self._limiter.acquire(key=self._key)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


class RateLimiter(PolicyBase):
    """Limit the rate of calls with token buckets, global and per key.

    Example::

        limiter = RateLimiter(RateLimiterOptions(rate=100, per_key_rate=10, max_wait=0.5))


        async def get(host: str) -> bytes:
            return await limiter.execute(fetch, host, key=host)

    Events: ``rejected`` (reason ``"rate_limited"``).
    """

    kind = "rate_limiter"

    options: RateLimiterOptions

    def __init__(self, options: RateLimiterOptions, **common: Unpack[PolicyArgs]) -> None:
        super().__init__(_validate.options(options, RateLimiterOptions, required=True), **common)
        # Invariant: _global exists iff options.rate is set; _buckets holds
        # at most options.max_keys buckets, least recently used first, and
        # is empty when options.per_key_rate is None.
        self._global: TokenBucket | None = None
        self._buckets: dict[Hashable, TokenBucket] = {}
        self._admitted = 0
        self._waited = 0
        self._rejected = 0

    def _global_bucket(self, now: float) -> TokenBucket | None:
        options = self.options
        if options.rate is None:
            return None
        if self._global is None:
            assert options.burst is not None
            self._global = TokenBucket(options.rate, options.burst, now)
        return self._global

    def _key_bucket(self, key: Hashable, now: float) -> TokenBucket | None:
        options = self.options
        if options.per_key_rate is None:
            return None
        buckets = self._buckets
        bucket = buckets.pop(key, None)
        if bucket is None:
            assert options.per_key_burst is not None
            bucket = TokenBucket(options.per_key_rate, options.per_key_burst, now)
            if len(buckets) >= options.max_keys:
                del buckets[next(iter(buckets))]  # the least recently used
        buckets[key] = bucket
        return bucket

    async def acquire(self, *, key: Hashable = None) -> None:
        """Take a token from each bucket that applies, waiting up to ``max_wait``.

        Raises:
            RateLimited: a token would take longer than ``max_wait``; nothing
                is taken then.
        """
        now = self.clock.now()
        global_bucket = self._global_bucket(now)
        key_bucket = self._key_bucket(key, now)
        global_wait = global_bucket.wait_time(now) if global_bucket is not None else 0.0
        key_wait = key_bucket.wait_time(now) if key_bucket is not None else 0.0
        wait = max(global_wait, key_wait)
        if wait > self.options.max_wait:
            self._rejected += 1
            scope = "global" if global_wait >= key_wait else "key"
            error = RateLimited(policy=self.name, key=key, scope=scope, retry_in=wait)
            raise self._refused(error, "rate_limited", now)
        if global_bucket is not None:
            global_bucket.take(now)
        if key_bucket is not None:
            key_bucket.take(now)
        if wait > 0.0:
            try:
                await self.clock.sleep(wait)
            except BaseException:
                later = self.clock.now()
                if global_bucket is not None:
                    global_bucket.give_back(later)
                if key_bucket is not None:
                    key_bucket.give_back(later)
                raise
            self._waited += 1
        self._admitted += 1

    def scope(self, *, key: Hashable = None) -> RateLimiterScope:
        """An async context manager that takes the tokens before the block runs."""
        return RateLimiterScope(self, key)

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        await self.acquire(key=key)
        return await fn(*args)

    def statistics(self) -> RateLimiterStatistics:
        """Counters, the number of key buckets, and the global bucket's level."""
        now = self.clock.now()
        return RateLimiterStatistics(
            admitted=self._admitted,
            waited=self._waited,
            rejected=self._rejected,
            keys=len(self._buckets),
            global_tokens=self._global.level(now) if self._global is not None else None,
        )
