"""corun.http: a resilient HTTP client on its own keep-alive pool, configured by one ``ClientOptions``.

See docs/http.md.
"""

from corun.http.client import Client, ClientStatistics, Response, host_key, parse_url
from corun.http.errors import (
    BodyTooLarge,
    ConnectError,
    HttpError,
    InvalidRequest,
    InvalidURL,
    ProtocolError,
    RejectedError,
    RequestTimeout,
    TLSError,
    TooManyRedirects,
    UnsupportedScheme,
)
from corun.http.options import (
    DEFAULT_MAX_BODY,
    IDEMPOTENT_METHODS,
    RETRY_STATUSES,
    ClientOptions,
)

__all__ = [
    "DEFAULT_MAX_BODY",
    "IDEMPOTENT_METHODS",
    "RETRY_STATUSES",
    "BodyTooLarge",
    "Client",
    "ClientOptions",
    "ClientStatistics",
    "ConnectError",
    "HttpError",
    "InvalidRequest",
    "InvalidURL",
    "ProtocolError",
    "RejectedError",
    "RequestTimeout",
    "Response",
    "TLSError",
    "TooManyRedirects",
    "UnsupportedScheme",
    "host_key",
    "parse_url",
]
