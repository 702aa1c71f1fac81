"""``Client``: a resilient HTTP client on ``aiohttp.ClientSession``.

One call of ``Client.request`` runs through a ``corun.resilience.Pipeline``
of these policies, outermost first (the order ``docs/resilience.md``
recommends), linked once when the client is made::

    total timeout ─▶ retry (+ budget) ─▶ rate limiter[host] ─▶ breaker[host]
                  ─▶ bulkhead[host] ─▶ one aiohttp request (connect/read timeouts,
                                        redirects, body cap)

* The innermost attempt turns aiohttp's exceptions into ``corun.http``'s
  (by one table, ``_ERRORS``): ``ConnectError``, ``TLSError``, ``RequestTimeout``, ``BodyTooLarge``,
  ``TooManyRedirects``, ``ProtocolError``, so every policy above sees one
  vocabulary: the retry policy retries ``ConnectError`` (not ``TLSError``: a
  bad certificate does not get better) and ``RequestTimeout``, and the
  breaker counts those and 5xx responses as failures of the host.
* Responses with status 429, 502, 503 or 504 are retried, waiting what
  ``Retry-After`` asks (capped at ``RetryOptions.max_server_delay``);
  other statuses, 4xx included, are returned at once. When the retries run
  out, the last response is returned: a status is never an exception.
* Only idempotent methods are retried unless ``retry_non_idempotent`` (or
  ``request(..., idempotent=True)``) says otherwise.
* A policy refusal (``BreakerOpen``, ``RateLimited``, ``BulkheadFull``)
  becomes ``RejectedError``; the total timeout becomes ``RequestTimeout``.

Keys: the breaker, the rate limiter and the bulkhead are keyed by
``host:port`` (``host_key``), so two servers on one machine are two hosts.
"""

from __future__ import annotations

import dataclasses
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar, final

import aiohttp
from yarl import URL

from corun.http import errors
from corun.http.options import IDEMPOTENT_METHODS, RETRY_STATUSES, ClientOptions
from corun.resilience import (
    Breaker,
    BreakerOpen,
    BreakerOptions,
    Bulkhead,
    BulkheadFull,
    BulkheadOptions,
    CallRejected,
    Clock,
    Listener,
    Metrics,
    MetricsStatistics,
    OverallTimeout,
    Pipeline,
    Policy,
    PolicyBase,
    RateLimited,
    RateLimiter,
    Retry,
    RetryBudget,
    RetryOptions,
    SystemClock,
    Timeout,
    TimeoutOptions,
    _validate,
    retry_after_delay,
)

SCHEMES: Final = frozenset({"http", "https"})
_CHUNK: Final = 64 * 1024
#: Idle per-host bulkheads kept at most; busy ones are never dropped.
_MAX_BULKHEADS: Final = 10_000
#: The retry policy's default ``retry_on``, which the client replaces.
_DEFAULT_RETRY_ON: Final = RetryOptions().retry_on
_DEFAULT_FAILURE_ON: Final = BreakerOptions().failure_on
#: Whitespace and control characters (all of them are <= 0x20), refused in a URL.
_BAD_URL_CHARS: Final = re.compile(r"[\x00-\x20]")

T = TypeVar("T")


def parse_url(url: str) -> URL:
    """``url`` parsed and checked: an absolute http(s) URL with a host.

    Raises:
        UnsupportedScheme: the scheme is not http or https.
        InvalidURL: anything else wrong with it.
    """
    if not isinstance(url, str) or not url.strip():
        raise errors.InvalidURL("malformed URL: empty", url=str(url))
    if _BAD_URL_CHARS.search(url) is not None:
        raise errors.InvalidURL(
            f"malformed URL {url!r}: contains whitespace or control characters", url=url
        )
    try:
        parsed = URL(url)
    except (ValueError, TypeError) as exc:
        raise errors.InvalidURL(f"malformed URL {url!r}: {exc}", url=url) from exc
    _check_parsed(parsed, url)
    return parsed


def _check_parsed(parsed: URL, url: str) -> None:
    """The checks of ``parse_url`` that need the parsed form."""
    if not parsed.scheme:
        raise errors.InvalidURL(
            f"malformed URL {url!r}: no scheme (expected http:// or https://)", url=url
        )
    if parsed.scheme.lower() not in SCHEMES:
        raise errors.UnsupportedScheme(
            f"unsupported scheme {parsed.scheme!r} in {url!r} (expected http or https)", url=url
        )
    try:
        host = parsed.host
        port = parsed.port
    except ValueError as exc:
        raise errors.InvalidURL(f"malformed URL {url!r}: {exc}", url=url) from exc
    if not host:
        raise errors.InvalidURL(f"malformed URL {url!r}: no host", url=url)
    if port is None or not 0 < port < 65536:
        raise errors.InvalidURL(f"malformed URL {url!r}: bad port", url=url)


def host_key(url: URL) -> str:
    """The per-host policy key of ``url``: ``host:port``."""
    return f"{url.host}:{url.port}"


@dataclass(frozen=True, slots=True)
class Response:
    """A complete response.

    Attributes:
        status: the status code.
        headers: the response headers (case-insensitive lookup).
        body: the whole body, at most ``max_body_bytes``.
        url: the final URL, after redirects.
        attempts: requests sent for this call, the last included.
        elapsed: seconds from the call to the last byte, retries included.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str
    attempts: int
    elapsed: float

    def text(self, encoding: str = "utf-8", errors: str = "replace") -> str:
        """The body decoded (UTF-8 by default; undecodable bytes replaced)."""
        return self.body.decode(encoding, errors)


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    """A snapshot of a ``Client``.

    Attributes:
        requests: calls of ``request()`` started.
        in_flight: calls not finished yet.
        attempts: requests sent (retries included).
        retries: retries scheduled.
        errors: calls that raised.
        breaker_trips: transitions of a host's breaker to open.
        open_breakers: hosts whose breaker is open or half-open now.
        metrics: every policy event counted, and latency per policy.
    """

    requests: int
    in_flight: int
    attempts: int
    retries: int
    errors: int
    breaker_trips: int
    open_breakers: int
    metrics: MetricsStatistics


E = TypeVar("E", bound=errors.HttpError)


@final
class _Call:
    """One call's request and its attempt count (shared by its attempts)."""

    __slots__ = ("attempts", "body", "headers", "host", "method", "raw_url", "url")

    def __init__(
        self,
        method: str,
        raw_url: str,
        url: URL,
        headers: Mapping[str, str] | None,
        body: bytes | str | None,
    ) -> None:
        self.method = method
        self.raw_url = raw_url
        self.url = url
        self.host = host_key(url)
        self.headers = headers
        self.body = body
        self.attempts = 0

    def error(self, cls: type[E], detail: str, **extra: Any) -> E:
        """A ``cls`` error about this call: ``"METHOD URL: detail"``, with its context."""
        return cls(
            f"{self.method} {self.raw_url}: {detail}",
            method=self.method,
            url=self.raw_url,
            attempts=self.attempts,
            **extra,
        )


@dataclass(frozen=True, slots=True)
class _Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str


def _is_retry_status(reply: object) -> bool:
    return isinstance(reply, _Reply) and reply.status in RETRY_STATUSES


def _is_server_failure(reply: object) -> bool:
    return isinstance(reply, _Reply) and reply.status >= 500


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


#: aiohttp >= 3.10 has ConnectionTimeoutError; older ones raise
#: ServerTimeoutError for both, so those are reported as read timeouts.
_CONNECT_TIMEOUTS: Final[tuple[type[BaseException], ...]] = tuple(
    kind
    for kind in (getattr(aiohttp, "ConnectionTimeoutError", None),)
    if isinstance(kind, type) and issubclass(kind, BaseException)
)

#: How the detail of an error message is worded, from the exception raised.
_Detail: TypeAlias = Callable[[BaseException, _Call, ClientOptions], str]

#: What an exception raised under a request becomes (as httpcore's
#: ``map_exceptions``): the first row whose types match wins, so the order
#: matters (``ClientSSLError`` is a ``ClientConnectionError``, ``ssl.SSLError``
#: an ``OSError``, and aiohttp's timeouts are connection errors too).
#: Applied to each attempt, so that the policies see corun.http's errors, and
#: to the whole call, for the refusals and the total timeout around it.
_ERRORS: Final[
    tuple[tuple[tuple[type[BaseException], ...], type[errors.HttpError], _Detail], ...]
] = (
    (
        (OverallTimeout,),
        errors.RequestTimeout,
        lambda exc, call, options: (
            f"total timeout of {options.total_timeout:g} s "
            f"after {_plural(call.attempts, 'attempt')}"
        ),
    ),
    ((CallRejected,), errors.RejectedError, lambda exc, call, options: str(exc)),
    (
        (aiohttp.TooManyRedirects,),
        errors.TooManyRedirects,
        lambda exc, call, options: f"more than {options.max_redirects} redirects",
    ),
    (
        _CONNECT_TIMEOUTS,
        errors.RequestTimeout,
        lambda exc, call, options: f"connect timeout of {options.connect_timeout:g} s",
    ),
    (
        (TimeoutError,),
        errors.RequestTimeout,
        lambda exc, call, options: f"read timeout of {options.read_timeout:g} s",
    ),
    (
        (aiohttp.ClientSSLError, ssl.SSLError),
        errors.TLSError,
        lambda exc, call, options: f"TLS failed: {_reason(exc)}",
    ),
    (
        (aiohttp.InvalidURL,),
        errors.InvalidURL,
        lambda exc, call, options: f"invalid URL: {_reason(exc)}",
    ),
    (
        (aiohttp.ClientConnectionError, OSError),
        errors.ConnectError,
        lambda exc, call, options: f"connection failed: {_reason(exc)}",
    ),
    (
        (aiohttp.ClientError,),
        errors.ProtocolError,
        lambda exc, call, options: f"bad response: {_reason(exc)}",
    ),
)

#: ``RejectedError.kind`` for each refusal of a policy.
_REJECTIONS: Final[tuple[tuple[type[CallRejected], str], ...]] = (
    (BreakerOpen, "breaker_open"),
    (RateLimited, "rate_limited"),
    (BulkheadFull, "bulkhead_full"),
)


def _http_error(exc: Exception, call: _Call, options: ClientOptions) -> errors.HttpError | None:
    """``exc`` as a corun.http error (``exc`` itself if it is one); None: let it through."""
    if isinstance(exc, errors.HttpError):
        exc.attempts = call.attempts
        return exc
    for raised, cls, detail in _ERRORS:
        if isinstance(exc, raised):
            if isinstance(exc, CallRejected):
                kind = next((k for t, k in _REJECTIONS if isinstance(exc, t)), "rejected")
                return call.error(cls, detail(exc, call, options), kind=kind, retry_in=exc.retry_in)
            return call.error(cls, detail(exc, call, options))
    return None


@final
class _PerHostBulkhead(PolicyBase):
    """A ``Bulkhead`` per key (host), made on first use.

    At most ``_MAX_BULKHEADS`` are kept, least recently used first; one is
    dropped only while nothing is in flight or queued on it.
    """

    kind = "bulkhead"

    options: BulkheadOptions

    def __init__(self, limit: int, *, clock: Clock, listeners: Iterable[Listener]) -> None:
        options = BulkheadOptions(max_concurrent=limit, max_queue=1_000_000)
        super().__init__(options, name="per_host", clock=clock)
        self._listeners = tuple(listeners)
        self._bulkheads: OrderedDict[Hashable, Bulkhead] = OrderedDict()

    def _bulkhead(self, key: Hashable) -> Bulkhead:
        bulkheads = self._bulkheads
        bulkhead = bulkheads.get(key)
        if bulkhead is not None:
            bulkheads.move_to_end(key)
            return bulkhead
        if len(bulkheads) >= _MAX_BULKHEADS:
            for name, old in list(bulkheads.items()):
                stats = old.statistics()
                if stats.in_flight == 0 and stats.queued == 0:
                    del bulkheads[name]
                    break
        bulkhead = Bulkhead(
            self.options, name=self.name, clock=self.clock, listeners=self._listeners
        )
        bulkheads[key] = bulkhead
        return bulkhead

    async def _run(
        self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], key: Hashable
    ) -> T:
        # The bulkhead's scope, not its execute(): the client's host policies
        # report no call_finished of their own.
        async with self._bulkhead(key).scope(key=key):
            return await fn(*args)


class Client:
    """A resilient HTTP client; use it as an async context manager.

    Example::

        async with Client(ClientOptions(limit_per_host=4)) as client:
            response = await client.request("GET", "https://example.org/")
            print(response.status, len(response.body))

    Args:
        options: the ``ClientOptions`` (defaults when None).
        clock: the clock every policy reads and sleeps on (default
            ``SystemClock``).
        listeners: ``corun.resilience.Listener`` objects added to every policy.
    """

    def __init__(
        self,
        options: ClientOptions | None = None,
        *,
        clock: Clock | None = None,
        listeners: Iterable[Listener] = (),
    ) -> None:
        self.options = options = _validate.options(options, ClientOptions)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._metrics = Metrics()
        listeners = [self._metrics, *listeners]
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._requests = 0
        self._in_flight = 0
        self._attempts = 0
        self._errors = 0
        clock_ = self.clock
        total = Timeout(
            TimeoutOptions(options.total_timeout, overall=True),
            name="total",
            clock=clock_,
            listeners=listeners,
        )
        self._retry: Retry | None = None
        if options.retry is not None:
            budget = (
                RetryBudget(options.budget, clock=clock_) if options.budget is not None else None
            )
            self._retry = Retry(
                self._retry_options(options.retry),
                budget=budget,
                name="retry",
                clock=clock_,
                listeners=listeners,
            )
        self._breaker: Breaker | None = None
        if options.breaker is not None:
            breaker_options = options.breaker
            if breaker_options.failure_on == _DEFAULT_FAILURE_ON:
                breaker_options = dataclasses.replace(
                    breaker_options,
                    failure_on=(errors.ConnectError, errors.RequestTimeout, errors.ProtocolError),
                )
            breaker_options = dataclasses.replace(
                breaker_options, failure_on_result=_is_server_failure
            )
            self._breaker = Breaker(
                breaker_options, name="breaker", clock=clock_, listeners=listeners
            )
        host_policies: list[Policy] = []
        if options.rate is not None:
            host_policies.append(
                RateLimiter(options.rate, name="rate", clock=clock_, listeners=listeners)
            )
        if self._breaker is not None:
            host_policies.append(self._breaker)
        if options.per_host_concurrency is not None:
            host_policies.append(
                _PerHostBulkhead(options.per_host_concurrency, clock=clock_, listeners=listeners)
            )
        # Every request runs through one of two pipelines, linked here once
        # and sharing their policies: with the retry, or without it (methods
        # that are not idempotent). The host policies report no call_finished
        # (time_policies=False): only the total and the retry are timed.
        inner: tuple[Policy, ...] = ()
        if host_policies:
            inner = (Pipeline(*host_policies, name="host", time_policies=False),)
        self._once = Pipeline(total, *inner, name="request")
        self._retried = self._once
        if self._retry is not None:
            self._retried = Pipeline(total, self._retry, *inner, name="request")

    def _retry_options(self, retry: RetryOptions) -> RetryOptions:
        changes: dict[str, Any] = {}
        if retry.retry_on == _DEFAULT_RETRY_ON:
            changes["retry_on"] = self._retryable_error
        if retry.retry_on_result is None:
            changes["retry_on_result"] = _is_retry_status
        if retry.delay_from is None:
            changes["delay_from"] = self._server_delay
        return dataclasses.replace(retry, **changes) if changes else retry

    @staticmethod
    def _retryable_error(exc: BaseException) -> bool:
        return isinstance(exc, errors.RequestTimeout | errors.ConnectError) and not isinstance(
            exc, errors.TLSError
        )

    def _server_delay(self, outcome: object) -> float | None:
        if isinstance(outcome, _Reply) and outcome.status in RETRY_STATUSES:
            wall = getattr(self.clock, "wall", None)
            now = wall() if callable(wall) else time.time()
            return retry_after_delay(outcome.headers, float(now))
        return None

    # ---- lifecycle

    async def __aenter__(self) -> Client:
        if self._session is not None or self._closed:
            raise RuntimeError("a Client can be entered only once")
        options = self.options
        ssl_arg: ssl.SSLContext | bool
        if options.ssl_context is not None:
            ssl_arg = options.ssl_context
        else:
            ssl_arg = bool(options.verify_tls)
        connector = aiohttp.TCPConnector(
            limit=options.limit,
            limit_per_host=options.limit_per_host,
            keepalive_timeout=options.keepalive_timeout,
            ssl=ssl_arg,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=None,
                sock_connect=options.connect_timeout,
                sock_read=options.read_timeout,
            ),
            headers={"User-Agent": options.user_agent},
            raise_for_status=False,
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection. The client cannot be used afterwards."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # ---- requests

    async def request(
        self,
        method: str,
        url: str | URL,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | str | None = None,
        idempotent: bool | None = None,
    ) -> Response:
        """Send a request through every policy and return the complete response.

        Args:
            method: the HTTP method (case-insensitive).
            url: an absolute http or https URL, as a string or as the
                ``yarl.URL`` that ``parse_url`` returned for it (which
                saves parsing it again).
            headers: extra request headers.
            body: the request body.
            idempotent: whether the call may be retried; None decides by the
                method (and ``ClientOptions.retry_non_idempotent``).

        Returns:
            The ``Response``. Any status is a response, not an error; when
            retries of a 429/502/503/504 run out, the last such response.

        Raises:
            InvalidURL: a malformed URL (``UnsupportedScheme``: not http(s)).
            ConnectError: the connection failed (``TLSError``: TLS did).
            RequestTimeout: a connect, read or the total timeout fired.
            BodyTooLarge: the body is over ``max_body_bytes``.
            TooManyRedirects: more than ``max_redirects`` redirects.
            ProtocolError: the response was not valid HTTP.
            RejectedError: the host's breaker is open, or a rate limit or
                bulkhead refused.
        """
        session = self._session
        if session is None:
            raise RuntimeError("use the Client in 'async with Client(...) as client:'")
        method = method.upper()
        if isinstance(url, URL):
            parsed = url
            url = str(url)
            _check_parsed(parsed, url)
        else:
            parsed = parse_url(url)
        call = _Call(method, url, parsed, headers, body)
        retryable = idempotent
        if retryable is None:
            retryable = method in IDEMPOTENT_METHODS or self.options.retry_non_idempotent
        clock = self.clock
        started = clock.now()
        self._requests += 1
        self._in_flight += 1
        pipeline = self._retried if retryable else self._once
        try:
            reply = await pipeline.execute(self._attempt, call, key=call.host)
        except Exception as exc:
            error = _http_error(exc, call, self.options)
            if error is None:
                raise
            self._errors += 1
            if error is exc:
                raise
            raise error from exc
        finally:
            self._in_flight -= 1
        return Response(
            status=reply.status,
            headers=reply.headers,
            body=reply.body,
            url=reply.url,
            attempts=call.attempts,
            elapsed=clock.now() - started,
        )

    async def _attempt(self, call: _Call) -> _Reply:
        """One request on the wire, with aiohttp's exceptions turned into ours."""
        session = self._session
        if session is None:
            raise RuntimeError("the Client is closed")
        call.attempts += 1
        self._attempts += 1
        options = self.options
        try:
            async with session.request(
                call.method,
                call.url,
                headers=call.headers,
                data=call.body,
                allow_redirects=options.max_redirects > 0,
                max_redirects=options.max_redirects + 1,  # aiohttp raises on reaching it
            ) as response:
                cap = options.max_body_bytes
                length = response.content_length
                if length is not None and length > cap and call.method != "HEAD":
                    raise call.error(
                        errors.BodyTooLarge,
                        f"body of {length} bytes is over the cap of {cap} bytes",
                    )
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.content.iter_chunked(_CHUNK):
                    size += len(chunk)
                    if size > cap:
                        raise call.error(
                            errors.BodyTooLarge, f"body is over the cap of {cap} bytes"
                        )
                    chunks.append(chunk)
                return _Reply(
                    status=response.status,
                    headers=response.headers,
                    body=b"".join(chunks),
                    url=str(response.url),
                )
        except Exception as exc:
            error = _http_error(exc, call, options)
            if error is None or error is exc:
                raise
            raise error from exc

    # ---- introspection

    def statistics(self) -> ClientStatistics:
        """Counters of this client and of every policy in it."""
        retries = self._retry.statistics().retries if self._retry is not None else 0
        trips = opened = 0
        if self._breaker is not None:
            stats = self._breaker.statistics()
            trips, opened = stats.opened, stats.open
        return ClientStatistics(
            requests=self._requests,
            in_flight=self._in_flight,
            attempts=self._attempts,
            retries=retries,
            errors=self._errors,
            breaker_trips=trips,
            open_breakers=opened,
            metrics=self._metrics.statistics(),
        )

    def breaker_state(self, url_or_host: str) -> str:
        """The breaker state of a host (``"closed"`` without a breaker).

        Args:
            url_or_host: a URL, or a ``host:port`` key.
        """
        if self._breaker is None:
            return "closed"
        key = url_or_host
        if "://" in url_or_host:
            key = host_key(parse_url(url_or_host))
        return self._breaker.state(key)


__all__ = ["Client", "ClientStatistics", "Response", "host_key", "parse_url"]
