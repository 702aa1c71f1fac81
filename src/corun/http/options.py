"""``ClientOptions``: everything a ``Client`` is configured by, in one frozen object."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Final

from corun.resilience import (
    BreakerOptions,
    RateLimiterOptions,
    RetryBudgetOptions,
    RetryOptions,
    _validate,
)

#: The default cap on a response body: 10 MiB.
DEFAULT_MAX_BODY: Final = 10 * 1024 * 1024
#: The largest body cap accepted: 1 GiB.
MAX_BODY_LIMIT: Final = 1024 * 1024 * 1024
#: Methods that RFC 9110 defines as idempotent: only these are retried by default.
IDEMPOTENT_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
#: Response statuses that are retried (for retryable methods).
RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})
DEFAULT_USER_AGENT: Final = "corun-http/0.1"


def _default_retry() -> RetryOptions:
    return RetryOptions(max_attempts=3, initial_delay=0.2, max_delay=10.0, max_server_delay=60.0)


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Options of a ``Client``; the defaults are safe for talking to strangers.

    Attributes:
        limit: connections open at most, over all hosts, in [1, 100000].
        limit_per_host: connections open at most to one host, in [1, 100000].
        keepalive_timeout: seconds an idle connection is kept, in (0, 86400].
        connect_timeout: seconds to connect (TCP and TLS), per attempt.
        read_timeout: seconds between two reads of the response, per attempt.
        total_timeout: seconds for the whole call, retries and backoff
            included. Every timeout is in (0, 86400].
        max_body_bytes: the response body cap, in [0, 1 GiB]; a larger body
            raises ``BodyTooLarge``.
        max_redirects: redirects followed at most, in [0, 100]; 0 returns a
            3xx response as it is.
        verify_tls: verify certificates and host names. There is no reason
            to turn it off that a trusted ``ssl_context`` does not serve
            better.
        ssl_context: an ``ssl.SSLContext`` to use instead of the default one
            (to trust a private CA, say). Requires ``verify_tls``.
        retry: the retry policy; None never retries. Its ``retry_on``,
            ``retry_on_result`` and ``delay_from`` are set by the client when
            left at their defaults (connection errors and timeouts; 429, 502,
            503 and 504; ``Retry-After``).
        retry_non_idempotent: retry POST and PATCH too (every method).
        budget: one retry budget shared by every call of the client; None
            for none.
        breaker: a circuit breaker per host; None for none. Connection
            errors, timeouts and 5xx responses count as failures.
        per_host_concurrency: calls in flight per host at most (a bulkhead
            per host; others wait), in [1, 100000]; None for no limit beyond
            ``limit_per_host``.
        rate: a rate limiter keyed by host (``per_key_rate``) and/or global
            (``rate``); None for none.
        user_agent: the ``User-Agent`` header.
        trust_env: use the proxies that ``HTTP_PROXY``, ``HTTPS_PROXY`` and
            ``NO_PROXY`` (or their lower-case forms) name, as curl does.
    """

    limit: int = 100
    limit_per_host: int = 10
    keepalive_timeout: float = 30.0
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    total_timeout: float = 60.0
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_redirects: int = 5
    verify_tls: bool = True
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    retry: RetryOptions | None = field(default_factory=_default_retry)
    retry_non_idempotent: bool = False
    budget: RetryBudgetOptions | None = field(default_factory=RetryBudgetOptions)
    breaker: BreakerOptions | None = field(default_factory=BreakerOptions)
    per_host_concurrency: int | None = None
    rate: RateLimiterOptions | None = None
    user_agent: str = DEFAULT_USER_AGENT
    trust_env: bool = True

    def __post_init__(self) -> None:
        owner = "ClientOptions"
        _validate.count(owner, "limit", self.limit, high=100_000)
        _validate.count(owner, "limit_per_host", self.limit_per_host, high=100_000)
        for name in ("keepalive_timeout", "connect_timeout", "read_timeout", "total_timeout"):
            _validate.normalize(self, owner, name, _validate.seconds)
        _validate.count(owner, "max_body_bytes", self.max_body_bytes, low=0, high=MAX_BODY_LIMIT)
        _validate.count(owner, "max_redirects", self.max_redirects, low=0, high=100)
        for name in ("verify_tls", "retry_non_idempotent", "trust_env"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{owner}.{name} must be a bool, got {getattr(self, name)!r}")
        if self.ssl_context is not None:
            if not isinstance(self.ssl_context, ssl.SSLContext):
                raise TypeError(f"{owner}.ssl_context must be an ssl.SSLContext or None")
            if not self.verify_tls:
                raise ValueError(f"{owner}.ssl_context cannot be combined with verify_tls=False")
        checks: tuple[tuple[str, type], ...] = (
            ("retry", RetryOptions),
            ("budget", RetryBudgetOptions),
            ("breaker", BreakerOptions),
            ("rate", RateLimiterOptions),
        )
        for name, kind in checks:
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{owner}.{name} must be {kind.__name__} or None, got {value!r}")
        if self.per_host_concurrency is not None:
            _validate.count(owner, "per_host_concurrency", self.per_host_concurrency, high=100_000)
        if not isinstance(self.user_agent, str) or any(c in self.user_agent for c in "\r\n"):
            raise ValueError(f"{owner}.user_agent must be a one-line str")
