"""``FetchOptions``: everything a ``corun fetch`` run is configured by, in one frozen object."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Final

from corun.http import ClientOptions
from corun.resilience import AdaptiveLimitOptions, BreakerOptions, RetryOptions, _validate

DEFAULT_USER_AGENT: Final = "corun-fetch/0.1 (+https://github.com/corun)"
#: The fetcher's timeouts and body cap default to the client's own.
_CLIENT_DEFAULTS: Final = ClientOptions()


@dataclass(frozen=True, slots=True)
class FetchOptions:
    """Options of a fetch run; the defaults suit unknown public hosts.

    Attributes:
        input: the input file, or ``"-"`` for stdin (copied to
            ``OUT.stdin`` first, so that a re-run can resume).
        output: the output JSONL path; the journal is ``OUTPUT.journal``.
        concurrency: requests in flight at most, over all hosts, in [1, 10000].
        per_host: the ceiling of each host's adaptive limit on requests in
            flight, in [1, 10000]. Each host starts at 2 (or less) and grows
            while it answers fast and healthy (``docs/fetch.md``).
        adaptive: False keeps ``per_host`` in flight to every host from the
            start, whatever its answers (for servers you own and know).
        rate: a hard limit on requests per second to one host; None (the
            default): only the adaptive limit paces a host.
        retries: retries of a line after its first attempt, spent on errors
            that count for it (timeouts, resets, 5xx), in [0, 20].
        retry_delay: the backoff ceiling after the first failure, doubling
            per retry up to 10 s (full jitter), in [0, 60] s.
        connect_timeout, read_timeout, total_timeout: seconds, per attempt.
        breaker_failure_rate: a host's breaker opens at this failure rate.
        breaker_min_calls: ... once it has seen this many calls in the window.
        breaker_open_duration: seconds an open breaker waits before it lets
            a probe through, in (0, 86400].
        host_give_up: seconds a host may stay unavailable (its breaker not
            closed) before its remaining lines end as ``host_unavailable``,
            in (0, 604800].
        max_retry_after: the cap on a ``Retry-After`` pause, in (0, 86400] s.
        retry_failed: fetch again the journalled lines whose result is an
            error or a retryable status (429, 502, 503, 504).
        save_dir: write bodies to ``DIR/<line>.body`` instead of the output.
        summary_json: also write the summary as JSON here.
        progress: draw the progress bar (on a terminal only).
        max_body_bytes: the body cap.
        user_agent: the ``User-Agent`` header.
        client: ``ClientOptions`` to build the client from instead of the
            fields above (tests use it for a private CA). Its policies
            (retry, breaker, rate, bulkhead) are dropped: the fetcher runs
            its own, per line and per host.
    """

    input: str
    output: str
    concurrency: int = 32
    per_host: int = 8
    adaptive: bool = True
    rate: float | None = None
    retries: int = 3
    retry_delay: float = 0.25
    connect_timeout: float = _CLIENT_DEFAULTS.connect_timeout
    read_timeout: float = _CLIENT_DEFAULTS.read_timeout
    total_timeout: float = _CLIENT_DEFAULTS.total_timeout
    breaker_failure_rate: float = 0.5
    breaker_min_calls: int = 20
    breaker_open_duration: float = 30.0
    host_give_up: float = 600.0
    max_retry_after: float = 120.0
    retry_failed: bool = False
    save_dir: str | None = None
    summary_json: str | None = None
    progress: bool = True
    max_body_bytes: int = _CLIENT_DEFAULTS.max_body_bytes
    user_agent: str = DEFAULT_USER_AGENT
    client: ClientOptions | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        owner = "FetchOptions"
        _validate.count(owner, "concurrency", self.concurrency, high=10_000)
        _validate.count(owner, "per_host", self.per_host, high=10_000)
        _validate.count(owner, "retries", self.retries, low=0, high=20)
        if self.rate is not None:
            _validate.number(owner, "rate", self.rate, low=0.001, high=1_000_000.0)
        _validate.number(owner, "retry_delay", self.retry_delay, low=0.0, high=60.0)
        _validate.number(owner, "host_give_up", self.host_give_up, low=0.001, high=604_800.0)
        _validate.normalize(self, owner, "max_retry_after", _validate.seconds)
        for name in ("adaptive", "retry_failed"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{owner}.{name} must be a bool, got {getattr(self, name)!r}")
        # These validate the rest.
        self.client_options()
        self.breaker_options()
        self.retry_options()

    def client_options(self) -> ClientOptions:
        """The ``ClientOptions`` of the run's client: a pool with timeouts, no policies."""
        base = self.client
        if base is None:
            base = ClientOptions(
                connect_timeout=self.connect_timeout,
                read_timeout=self.read_timeout,
                total_timeout=self.total_timeout,
                max_body_bytes=self.max_body_bytes,
                user_agent=self.user_agent,
            )
        return dataclasses.replace(
            base,
            limit=max(self.concurrency, 1),
            limit_per_host=self.per_host,
            retry=None,
            budget=None,
            breaker=None,
            per_host_concurrency=None,
            rate=None,
        )

    def breaker_options(self) -> BreakerOptions:
        """The options of each host's breaker."""
        return BreakerOptions(
            failure_rate=self.breaker_failure_rate,
            minimum_calls=self.breaker_min_calls,
            consecutive_failures=None,
            open_duration=self.breaker_open_duration,
        )

    def retry_options(self) -> RetryOptions:
        """The backoff of a line's retries (the fetcher decides what is retried)."""
        return RetryOptions(
            max_attempts=self.retries + 1,
            initial_delay=self.retry_delay,
            max_delay=max(10.0, self.retry_delay),
        )

    def limit_options(self) -> AdaptiveLimitOptions:
        """The options of each host's limit: from 2 up to ``per_host``; fixed when not adaptive."""
        if not self.adaptive:
            per_host = self.per_host
            return AdaptiveLimitOptions(initial=per_host, min_limit=per_host, max_limit=per_host)
        return AdaptiveLimitOptions(initial=min(2, self.per_host), max_limit=self.per_host)
