"""``Client``: a resilient HTTP client on corun's own keep-alive pool.

One call of ``Client.request`` runs through a ``corun.resilience.Pipeline``
of these policies, outermost first (the order ``docs/resilience.md``
recommends), linked once when the client is made::

    total timeout ─▶ retry (+ budget) ─▶ rate limiter[host] ─▶ breaker[host]
                  ─▶ bulkhead[host] ─▶ one attempt (``_attempt``: a pooled
                                        connection, redirects, body cap)

* The innermost attempt takes a connection from the ``Pool`` (pool.py),
  sends on it and awaits its ``Reply`` (connection.py: httptools). The
  engine's failures come as ``WireError`` and become ``corun.http``'s
  errors there: ``ConnectError``, ``TLSError``, ``RequestTimeout``,
  ``BodyTooLarge``, ``TooManyRedirects``, ``ProtocolError``, so every policy
  above sees one vocabulary: the retry policy retries ``ConnectError`` (not ``TLSError``: a
  bad certificate does not get better) and ``RequestTimeout``, and the
  breaker counts those and 5xx responses as failures of the host.
* Responses with status 429, 502, 503 or 504 are retried, waiting what
  ``Retry-After`` asks (capped at ``RetryOptions.max_server_delay``);
  other statuses, 4xx included, are returned at once. When the retries run
  out, the last response is returned: a status is never an exception.
* Only idempotent methods are retried unless ``retry_non_idempotent`` (or
  ``request(..., idempotent=True)``) says otherwise.
* A policy refusal (``BreakerOpen``, ``RateLimited``, ``BulkheadFull``)
  becomes ``RejectedError``; the total timeout becomes ``RequestTimeout``
  (one table, ``_ERRORS``).
* A request whose reused keep-alive connection turns out closed before a
  byte of the response came is sent once more at once, on another
  connection, when it may be retried (RFC 9112 section 9.3.1): the server
  closed an idle connection as the request went out. It counts as an
  attempt, not as a retry of the policy.

Keys: the breaker, the rate limiter and the bulkhead are keyed by
``host:port`` (``host_key``), so two servers on one machine are two hosts.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar, final

from yarl import URL

from corun.http import errors
from corun.http.connection import ACCEPT_ENCODING, Reply, WireError
from corun.http.options import IDEMPOTENT_METHODS, RETRY_STATUSES, ClientOptions
from corun.http.pool import Pool, Route, proxies_from_environment
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
#: Statuses whose ``Location`` is followed.
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
#: Methods that carry a body, so that an empty one is announced (some servers want a length).
_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
#: Request header names refused from callers: the client frames the request itself.
_FRAMING: Final = frozenset({"content-length", "transfer-encoding", "host", "connection"})
#: Idle per-host bulkheads kept at most; busy ones are never dropped.
_MAX_BULKHEADS: Final = 10_000
#: The retry policy's default ``retry_on``, which the client replaces.
_DEFAULT_RETRY_ON: Final = RetryOptions().retry_on
_DEFAULT_FAILURE_ON: Final = BreakerOptions().failure_on
#: Whitespace and control characters (all of them are <= 0x20), refused in a URL.
_BAD_URL_CHARS: Final = re.compile(r"[\x00-\x20]")
#: A method is an RFC 9110 token: nothing that could end the request line early.
_METHOD: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Z]+")
#: Characters that would end a header line early (request smuggling), refused in headers.
_BAD_HEADER_CHARS: Final = re.compile(r"[\r\n\x00]")

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
    """One call's request and its attempt count (shared by its attempts).

    ``data`` is the request as sent to the first URL, built once for every
    attempt; a redirect builds the next hop's.
    """

    __slots__ = (
        "attempts",
        "body",
        "data",
        "deadline",
        "headers",
        "host",
        "method",
        "origin",
        "raw_url",
        "retryable",
        "url",
    )

    def __init__(
        self,
        method: str,
        raw_url: str,
        url: URL,
        headers: Mapping[str, str] | None,
        body: bytes | None,
        retryable: bool,
    ) -> None:
        self.method = method
        self.raw_url = raw_url
        self.url = url
        self.host = host_key(url)
        self.origin = f"{url.scheme}://{self.host}"
        self.headers = headers
        self.body = body
        self.retryable = retryable
        self.attempts = 0
        self.data = b""
        #: The loop time the call must end by, when the engine keeps the total
        #: timeout (no retry, no host policies); 0.0 when the pipeline does.
        self.deadline = 0.0

    def error(self, cls: type[E], detail: str, **extra: Any) -> E:
        """A ``cls`` error about this call: ``"METHOD URL: detail"``, with its context."""
        return cls(
            f"{self.method} {self.raw_url}: {detail}",
            method=self.method,
            url=self.raw_url,
            attempts=self.attempts,
            **extra,
        )


def _request_bytes(
    method: str,
    url: URL,
    route: Route,
    headers: Mapping[str, str] | None,
    body: bytes | None,
    user_agent: str,
) -> bytes:
    """The request as it goes on the wire: the head, then the body.

    Raises:
        InvalidRequest: a header that cannot be sent as it is.
    """
    host = route.host
    target = url.raw_path_qs
    if route.absolute_form:  # to a proxy: the whole URL, without user info or fragment
        target = f"{url.scheme}://{host}{target}"
    line = f"{method} {target} HTTP/1.1\r\n"
    plain = not headers and body is None and method not in _BODY_METHODS
    if plain and url.raw_user is None and route.plain is not None:
        # The common request: the header block is the origin's, made once.
        try:
            return line.encode("latin-1") + route.plain
        except UnicodeEncodeError as exc:
            raise errors.InvalidRequest(f"the request line is not Latin-1: {exc}") from exc
    lines = [line, f"Host: {host}\r\n"]
    given: set[str] = set()
    if headers:
        for name, value in headers.items():
            lower = name.lower()
            if lower in _FRAMING:
                continue
            if _BAD_HEADER_CHARS.search(name) or _BAD_HEADER_CHARS.search(value) or ":" in name:
                raise errors.InvalidRequest(f"invalid header {name!r}: {value!r}")
            given.add(lower)
            lines.append(f"{name}: {value}\r\n")
    if "user-agent" not in given:
        lines.append(f"User-Agent: {user_agent}\r\n")
    if "accept-encoding" not in given:
        lines.append(f"Accept-Encoding: {ACCEPT_ENCODING}\r\n")
    if "accept" not in given:
        lines.append("Accept: */*\r\n")
    if "authorization" not in given and url.raw_user is not None:
        basic = f"{url.user or ''}:{url.password or ''}".encode()
        lines.append(f"Authorization: Basic {base64.b64encode(basic).decode('ascii')}\r\n")
    if route.proxy_auth is not None:
        lines.append(f"Proxy-Authorization: {route.proxy_auth}\r\n")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}\r\n")
    elif method in _BODY_METHODS:
        lines.append("Content-Length: 0\r\n")
    lines.append("\r\n")
    try:
        head = "".join(lines).encode("latin-1")
    except UnicodeEncodeError as exc:
        raise errors.InvalidRequest(f"a header is not Latin-1: {exc}") from exc
    if plain and url.raw_user is None:
        route.plain = head[len(line) :]  # Latin-1: one byte per character
    return head + body if body else head


def _is_retry_status(reply: object) -> bool:
    return isinstance(reply, Reply) and reply.status in RETRY_STATUSES


def _is_server_failure(reply: object) -> bool:
    return isinstance(reply, Reply) and reply.status >= 500


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


#: How the detail of an error message is worded, from the exception raised.
_Detail: TypeAlias = Callable[[BaseException, _Call, ClientOptions], str]

#: What an exception raised under a call becomes (as httpcore's
#: ``map_exceptions``): the first row whose types match wins, so the order
#: matters (``ssl.SSLError`` is an ``OSError``). The engine's own failures
#: (``WireError``) are turned into errors by ``_attempt``, which knows the
#: call; this table is for the refusals and the total timeout around it.
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
        (TimeoutError,),
        errors.RequestTimeout,
        lambda exc, call, options: f"timeout: {_reason(exc)}",
    ),
    (
        (ssl.SSLError,),
        errors.TLSError,
        lambda exc, call, options: f"TLS failed: {_reason(exc)}",
    ),
    (
        (OSError,),
        errors.ConnectError,
        lambda exc, call, options: f"connection failed: {_reason(exc)}",
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
        self._pool: Pool | None = None
        self._now: Callable[[], float] = self.clock.now
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
        # With no retry and no host policy, the total timeout is all the
        # pipeline would do: the engine keeps it instead (the pool's watchdog,
        # see pool.py), so such a call is one coroutine awaiting one future.
        self._direct = self._retry is None and not host_policies

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
        if isinstance(outcome, Reply) and outcome.status in RETRY_STATUSES:
            wall = getattr(self.clock, "wall", None)
            now = wall() if callable(wall) else time.time()
            return retry_after_delay(outcome.headers, float(now))
        return None

    # ---- lifecycle

    async def __aenter__(self) -> Client:
        if self._pool is not None or self._closed:
            raise RuntimeError("a Client can be entered only once")
        options = self.options
        # The loop is read here, once: every request, connection and timer of
        # this client runs on it.
        loop = asyncio.get_running_loop()
        proxies = proxies_from_environment() if options.trust_env else {}
        self._pool = Pool(loop, options, proxies)
        if type(self.clock) is SystemClock:
            # The same clock without a loop look-up per read (a getpid() on 3.11).
            self._now = loop.time
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection. The client cannot be used afterwards."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

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
            headers: extra request headers (``Host``, ``Content-Length``,
                ``Transfer-Encoding`` and ``Connection`` are the client's
                own and are ignored).
            body: the request body (a ``str`` is sent as UTF-8).
            idempotent: whether the call may be retried; None decides by the
                method (and ``ClientOptions.retry_non_idempotent``).

        Returns:
            The ``Response``. Any status is a response, not an error; when
            retries of a 429/502/503/504 run out, the last such response.
            Bodies in gzip, deflate or br are decoded.

        Raises:
            InvalidURL: a malformed URL (``UnsupportedScheme``: not http(s),
                here or in a redirect).
            InvalidRequest: a header that cannot be sent.
            ConnectError: the connection failed (``TLSError``: TLS did).
            RequestTimeout: a connect, read or the total timeout fired.
            BodyTooLarge: the body is over ``max_body_bytes``.
            TooManyRedirects: more than ``max_redirects`` redirects.
            ProtocolError: the response was not valid HTTP.
            RejectedError: the host's breaker is open, or a rate limit or
                bulkhead refused.
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError("use the Client in 'async with Client(...) as client:'")
        method = method.upper()
        if _METHOD.fullmatch(method) is None:
            raise errors.InvalidRequest(
                f"{method!r} {url}: invalid method (expected an HTTP token)",
                method=method,
                url=str(url),
            )
        if isinstance(url, URL):
            parsed = url
            url = str(url)
            _check_parsed(parsed, url)
        else:
            parsed = parse_url(url)
        retryable = idempotent
        if retryable is None:
            retryable = method in IDEMPOTENT_METHODS or self.options.retry_non_idempotent
        payload = body.encode("utf-8") if isinstance(body, str) else body
        call = _Call(method, url, parsed, headers, payload, retryable)
        route = pool.route(call.origin, parsed)
        try:
            call.data = _request_bytes(
                method, parsed, route, headers, payload, self.options.user_agent
            )
        except errors.InvalidRequest as exc:
            raise call.error(errors.InvalidRequest, str(exc)) from None
        now = self._now
        started = now()
        self._requests += 1
        self._in_flight += 1
        try:
            if self._direct:
                call.deadline = pool.now() + self.options.total_timeout
                reply = await self._attempt(call)
            else:
                pipeline = self._retried if retryable else self._once
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
            elapsed=now() - started,
        )

    async def _attempt(self, call: _Call) -> Reply:
        """One attempt: the request on a pooled connection, and its redirects.

        No coroutine below this one: a connection is taken synchronously when
        one is idle, and its future is awaited directly.
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError("the Client is closed")
        options = self.options
        cap = options.max_body_bytes
        method, url, key, data, raw_url = (
            call.method,
            call.url,
            call.origin,
            call.data,
            call.raw_url,
        )
        headers, body = call.headers, call.body
        redirects = 0
        resent = False
        count = True
        while True:
            if count:
                call.attempts += 1
                self._attempts += 1
            conn = pool.take(key)
            if conn is None:
                try:
                    conn = await pool.acquire(key, url, call.deadline)
                except WireError as exc:
                    raise call.error(exc.cls, self._detail(exc, call)) from exc.__cause__
            reused = conn.served > 0
            waiter = conn.send(
                data, head=method == "HEAD", cap=cap, url=raw_url, deadline=call.deadline
            )
            try:
                reply = await waiter
            except WireError as exc:
                if exc.unanswered and reused and call.retryable and not resent:
                    resent = count = True  # the server had closed it: once more, on another
                    continue
                raise call.error(exc.cls, self._detail(exc, call)) from exc
            except BaseException:
                if conn.waiter is waiter:
                    conn.abort()  # abandoned midway: the connection's framing is lost
                raise
            count = False
            if reply.status not in REDIRECT_STATUSES or not options.max_redirects:
                return reply
            location = reply.headers.get("Location")
            if location is None:
                return reply
            redirects += 1
            if redirects > options.max_redirects:
                raise call.error(
                    errors.TooManyRedirects, f"more than {options.max_redirects} redirects"
                )
            url, method, headers, body = self._redirect(
                call, url, method, headers, body, location, reply.status
            )
            key = f"{url.scheme}://{host_key(url)}"
            try:
                data = _request_bytes(
                    method, url, pool.route(key, url), headers, body, options.user_agent
                )
            except errors.InvalidRequest as exc:
                raise call.error(errors.InvalidRequest, str(exc)) from None
            raw_url = str(url)

    def _detail(self, exc: WireError, call: _Call) -> str:
        if exc.total:
            timeout = self.options.total_timeout
            return f"total timeout of {timeout:g} s after {_plural(call.attempts, 'attempt')}"
        return exc.detail

    @staticmethod
    def _redirect(
        call: _Call,
        url: URL,
        method: str,
        headers: Mapping[str, str] | None,
        body: bytes | None,
        location: str,
        status: int,
    ) -> tuple[URL, str, Mapping[str, str] | None, bytes | None]:
        """Where a redirect leads: the next URL, method, headers and body.

        303 (and 301/302 after a POST) turns the request into a GET without
        a body, as browsers do. ``Authorization`` is dropped for good once a
        redirect leaves the origin it was sent to.
        """
        try:
            target = url.join(URL(location))
            _check_parsed(target, str(target))
        except errors.UnsupportedScheme as exc:
            raise call.error(errors.UnsupportedScheme, f"redirect to {location!r}: {exc}") from None
        except (ValueError, TypeError) as exc:
            raise call.error(errors.InvalidURL, f"bad redirect to {location!r}: {exc}") from None
        if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
            method, body = "GET", None
        if headers:
            crossed = target.scheme != url.scheme or host_key(target) != host_key(url)
            dropped = {"authorization"} if crossed else set()
            if body is None:
                dropped.add("content-type")
            headers = {k: v for k, v in headers.items() if k.lower() not in dropped}
        return target, method, headers, body

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
