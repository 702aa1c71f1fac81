"""The exceptions that ``corun.http`` raises.

Every one derives from ``HttpError`` and carries the request's ``method``,
``url`` and ``attempts`` (requests sent, 0 when none left the client), and a
short machine-readable ``kind`` (``"connect"``, ``"timeout"``, ...) that
``corun fetch`` uses to count errors. The underlying exception (the
socket's, the TLS layer's, or a ``corun.resilience`` refusal) is the
``__cause__``.

A response is never an exception: a 404 or a 503 that was retried until the
policy gave up is returned as a ``Response`` with that status.
"""

from __future__ import annotations


class HttpError(Exception):
    """Base class of every ``corun.http`` error.

    Attributes:
        kind: a short name for the kind of failure, stable across releases.
        method: the request method.
        url: the request URL, as given.
        attempts: requests sent for this call (0 when none was sent).
    """

    kind = "http"

    def __init__(self, message: str, *, method: str = "", url: str = "", attempts: int = 0) -> None:
        super().__init__(message)
        self.method = method
        self.url = url
        self.attempts = attempts


class InvalidURL(HttpError, ValueError):
    """The URL is malformed: it does not parse, or has no host."""

    kind = "invalid_url"


class UnsupportedScheme(InvalidURL):
    """The URL's scheme is not ``http`` or ``https``."""

    kind = "unsupported_scheme"


class InvalidRequest(HttpError, ValueError):
    """The request cannot be sent as given: a header with a line break, or not Latin-1."""

    kind = "invalid_request"


class ConnectError(HttpError):
    """The connection failed: refused, reset, DNS, TLS handshake or certificate, or dropped."""

    kind = "connect"


class TLSError(ConnectError):
    """The TLS handshake failed, for example because the certificate is not trusted."""

    kind = "tls"


class RequestTimeout(HttpError, TimeoutError):
    """A connect, read or total timeout fired."""

    kind = "timeout"


class BodyTooLarge(HttpError):
    """The response body is larger than ``ClientOptions.max_body_bytes``."""

    kind = "body_too_large"


class TooManyRedirects(HttpError):
    """The response redirected more than ``ClientOptions.max_redirects`` times."""

    kind = "too_many_redirects"


class ProtocolError(HttpError):
    """The server's response was not valid HTTP (or its body was cut short)."""

    kind = "protocol"


class RejectedError(HttpError):
    """A client policy refused the call without sending it (or without retrying it).

    ``kind`` is ``"breaker_open"``, ``"rate_limited"`` or ``"bulkhead_full"``;
    ``retry_in`` is the policy's estimate of when a call could go through.
    """

    kind = "rejected"

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        retry_in: float | None,
        method: str = "",
        url: str = "",
        attempts: int = 0,
    ) -> None:
        super().__init__(message, method=method, url=url, attempts=attempts)
        self.kind = kind
        self.retry_in = retry_in
