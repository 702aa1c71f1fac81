"""One HTTP/1.1 keep-alive connection: an ``asyncio.Protocol`` driving httptools.

A ``Connection`` carries one request at a time (no pipelining). ``send``
writes the request and returns a future; ``data_received`` feeds the bytes
to llhttp (through ``httptools.HttpResponseParser``), whose callbacks
collect the status, the headers and the body; the future gets a ``Reply``
when the message is complete. The connection then goes back to its pool,
from inside the callback, so that a waiting request can take it before the
awaiting coroutine even resumes.

Why these choices (see docs/http.md for the engines that were measured):

* llhttp is the parser of Node.js and of aiohttp; ``httptools`` is its
  public binding (uvicorn's). It parses in C and calls back in Python once
  per header and body piece, which is what a pooled client needs.
* llhttp cannot be told that a response answers a HEAD request (its
  ``on_headers_complete`` would have to return 1, and httptools returns 1
  only on upgrades). A HEAD's response is finished by us when its headers
  are, and parsing stops there (``_HeadDone``). The parser is then in the
  middle of a message, so the next request gets a fresh one. The connection
  is kept only when the headers ended the bytes received: whatever follows
  would be framing we did not parse.
* A response framed by the connection's close (no Content-Length, not
  chunked) ends at EOF; httptools exposes no ``llhttp_finish``, so
  ``connection_lost`` finishes it from the framing seen in the headers.
* llhttp bounds nothing: the status line and headers are counted here
  (``MAX_HEADER_BYTES``) as they arrive, before httptools buffers them, and
  the body is counted against the caller's cap in ``on_body``.
* Decompression runs once on the whole body, bounded by the cap
  (``max_length``), so a small bomb cannot become a large allocation.
* No clock is read per request: the pool's watchdog counts ticks without
  progress (``stall``), which ``send`` and every read reset.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from typing import Final, Protocol, final

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from corun.http import errors

#: The status line and the headers of a response, at most.
MAX_HEADER_BYTES: Final = 64 * 1024
#: Header fields in a response, at most.
MAX_HEADERS: Final = 256
#: The ``Accept-Encoding`` the client sends.
ACCEPT_ENCODING: Final = "gzip, deflate, br"
_NO_HEADERS: Final = CIMultiDictProxy(CIMultiDict[str]())


class Owner(Protocol):
    """What a ``Connection`` needs of its pool (``pool.Pool``), without importing it."""

    def release(self, conn: Connection) -> None:
        """``conn`` completed a keep-alive response and may carry another request."""

    def discard(self, conn: Connection) -> None:
        """``conn`` is closed (or closing) and must no longer be counted or handed out."""


@final
class Reply:
    """A response as it came off the wire (the body decoded)."""

    __slots__ = ("body", "headers", "status", "url")

    def __init__(self, status: int, headers: CIMultiDictProxy[str], body: bytes, url: str) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.url = url


@final
class WireError(Exception):
    """A failure of one exchange, before the call's context is known.

    The client turns it into ``cls`` with the call's method and URL
    (``_Call.error``). ``unanswered``: the connection closed before a byte of
    the response came, which is what a reused keep-alive connection that
    the server had already dropped looks like.
    """

    def __init__(
        self,
        cls: type[errors.HttpError],
        detail: str,
        *,
        unanswered: bool = False,
        total: bool = False,
    ) -> None:
        super().__init__(detail)
        self.cls = cls
        self.detail = detail
        self.unanswered = unanswered
        #: The call's total timeout fired (the client words the message).
        self.total = total


class _HeadDone(Exception):
    """Raised from ``on_headers_complete`` to stop llhttp after a HEAD's headers."""


def _decoder(encoding: str, cap: int) -> Callable[[bytes], bytes] | None:
    """A function that decodes a whole body in ``encoding``, producing at most ``cap + 1`` bytes."""
    limit = cap + 1
    if encoding in ("gzip", "x-gzip"):

        def gunzip(data: bytes) -> bytes:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, limit)

        return gunzip
    if encoding == "deflate":

        def inflate(data: bytes) -> bytes:
            # RFC 9110 says zlib-wrapped; some servers send raw deflate.
            wbits = zlib.MAX_WBITS if data[:1] == b"\x78" else -zlib.MAX_WBITS
            return zlib.decompressobj(wbits).decompress(data, limit)

        return inflate
    if encoding == "br":
        return _unbrotli(limit)
    return None


def _unbrotli(limit: int) -> Callable[[bytes], bytes]:
    import brotli  # type: ignore[import-untyped]  # no type information ships with it

    def unbrotli(data: bytes) -> bytes:
        out: bytes = brotli.Decompressor().process(data, output_buffer_limit=limit)
        return out

    return unbrotli


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to one origin, owned by a ``Pool``.

    Invariant: ``waiter`` is not None exactly while a request is in flight
    (sent, its response not complete); only then do ``data_received`` and
    ``connection_lost`` report to anyone. An idle connection that receives
    bytes closes: nothing was asked.
    """

    __slots__ = (
        "_cap",
        "_chunked",
        "_chunks",
        "_decode",
        "_head",
        "_header_bytes",
        "_headers",
        "_headers_done",
        "_length",
        "_parser",
        "_reply_headers",
        "_size",
        "_status",
        "_url",
        "closed",
        "deadline",
        "key",
        "loop",
        "pool",
        "served",
        "stall",
        "transport",
        "waiter",
    )

    def __init__(self, pool: Owner, key: str, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.key = key
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        # Invariant: waiter is None <=> no request in flight (see the class docstring).
        self.waiter: asyncio.Future[Reply] | None = None
        #: Responses completed on this connection (> 0: a reused connection).
        self.served = 0
        #: Watchdog ticks since the last progress (a read, a send, a release).
        self.stall = 0
        #: The loop time the request in flight must end by (0.0: no deadline).
        self.deadline = 0.0
        self.closed = False
        self._reset(False, 0, "")

    def _reset(self, head: bool, cap: int, url: str) -> None:
        self._head = head
        self._cap = cap
        self._url = url
        self._status = 0
        self._headers: list[tuple[str, str]] = []
        self._headers_done = False
        self._header_bytes = 0
        self._chunks: list[bytes] = []
        self._size = 0
        self._length: int | None = None
        self._chunked = False
        self._decode: Callable[[bytes], bytes] | None = None
        self._reply_headers: CIMultiDictProxy[str] = _NO_HEADERS

    # ---- the request

    def send(
        self, data: bytes, *, head: bool, cap: int, url: str, deadline: float = 0.0
    ) -> asyncio.Future[Reply]:
        """Write one request; the future gets its ``Reply`` or a ``WireError``.

        Args:
            data: the whole request (head and body).
            head: the request is a HEAD (its response has no body).
            cap: the body cap in bytes.
            url: the request's URL, for the ``Reply``.
            deadline: the loop time by which the response must be complete
                (0.0: none); the pool's watchdog enforces it.
        """
        waiter: asyncio.Future[Reply] = self.loop.create_future()
        self.waiter = waiter
        self._reset(head, cap, url)
        self.stall = 0
        self.deadline = deadline
        transport = self.transport
        assert transport is not None
        transport.write(data)
        return waiter

    def abort(self) -> None:
        """Close at once (a request abandoned midway leaves the connection unusable)."""
        if self.closed:
            return
        self.closed = True
        transport = self.transport
        if transport is not None:
            transport.abort()  # connection_lost follows, and tells the pool
        else:
            self.pool.discard(self)

    def fail_timeout(self, seconds: float) -> None:
        """The watchdog saw no byte for ``seconds``: fail the request in flight."""
        self._fail(WireError(errors.RequestTimeout, f"read timeout of {seconds:g} s"))

    def fail_deadline(self) -> None:
        """The watchdog saw the request's deadline pass: fail it."""
        self._fail(WireError(errors.RequestTimeout, "total timeout", total=True))

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport (the TLS one when a proxy tunnel was upgraded)."""
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        """Parse what came; complete or fail the waiter."""
        if self.waiter is None:
            self.abort()  # bytes nobody asked for: the framing is lost
            return
        self.stall = 0
        if not self._headers_done:
            self._header_bytes += len(data)
        try:
            self._parser.feed_data(data)
            # Checked after parsing, so that the body's first bytes do not count;
            # httptools holds at most this much of an unfinished head.
            if not self._headers_done and self._header_bytes > MAX_HEADER_BYTES:
                self._fail(
                    WireError(
                        errors.ProtocolError,
                        f"bad response: status line and headers over {MAX_HEADER_BYTES} bytes",
                    )
                )
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            if isinstance(cause, _HeadDone):
                self._head_done(data)
            elif isinstance(cause, WireError):
                self._fail(cause)
            else:
                self._fail(WireError(errors.ProtocolError, f"bad response: {cause!r}"))
        except httptools.HttpParserError as exc:
            self._fail(WireError(errors.ProtocolError, f"bad response: {_parser_reason(exc)}"))

    def eof_received(self) -> bool:
        """Let the transport close; ``connection_lost`` decides what the EOF meant."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """Finish a close-delimited body, or fail the request in flight."""
        self.closed = True
        self.pool.discard(self)
        waiter = self.waiter
        if waiter is None:
            return
        if self._headers_done and self._length is None and not self._chunked:
            self._complete(False)  # framed by the close: this is its end
            return
        why = f": {exc}" if exc is not None else ""
        if not self._status and not self._header_bytes:
            error = WireError(
                errors.ConnectError,
                f"connection failed: the server closed the connection without a response{why}",
                unanswered=True,
            )
        elif not self._headers_done:
            error = WireError(
                errors.ProtocolError, f"bad response: connection closed inside the headers{why}"
            )
        elif self._chunked:
            error = WireError(
                errors.ProtocolError,
                f"bad response: connection closed inside the chunked body, "
                f"after {self._size} bytes{why}",
            )
        else:
            error = WireError(
                errors.ProtocolError,
                f"bad response: body truncated: connection closed after {self._size} "
                f"of {self._length} bytes{why}",
            )
        self._fail(error)

    # ---- httptools callbacks

    def on_message_begin(self) -> None:
        """A response starts (again, after a 1xx)."""
        if self.waiter is None:
            # More bytes after a complete response, in the same read: unasked for.
            raise WireError(errors.ProtocolError, "bad response: data after the response")
        self._headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        """One header field."""
        headers = self._headers
        if len(headers) >= MAX_HEADERS:
            raise WireError(errors.ProtocolError, f"bad response: more than {MAX_HEADERS} headers")
        headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        """The status and headers are in: check the framing and the cap."""
        status = self._parser.get_status_code()
        if status < 200:
            if status == 101:
                raise WireError(errors.ProtocolError, "bad response: unexpected 101 (upgrade)")
            return  # an interim response: the final one follows
        self._status = status
        self._headers_done = True
        headers = CIMultiDict(self._headers)
        self._headers = []
        proxy = CIMultiDictProxy(headers)
        self._reply_headers = proxy
        if self._head:
            raise _HeadDone
        length = headers.get("Content-Length")
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                size = -1  # llhttp has already refused a bad one
            self._length = size
            if size > self._cap:
                raise WireError(
                    errors.BodyTooLarge,
                    f"body of {size} bytes is over the cap of {self._cap} bytes",
                )
        if "chunked" in headers.get("Transfer-Encoding", "").lower():
            self._chunked = True
        if status in (204, 304):
            self._length = 0  # no body, whatever the headers say
        encoding = headers.get("Content-Encoding")
        if encoding is not None:
            self._decode = _decoder(encoding.strip().lower(), self._cap)

    def on_body(self, body: bytes) -> None:
        """A piece of the body."""
        size = self._size + len(body)
        if size > self._cap:
            raise WireError(errors.BodyTooLarge, f"body is over the cap of {self._cap} bytes")
        self._size = size
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        """The response is complete (or an interim 1xx one is)."""
        if self._headers_done:
            self._complete(self._parser.should_keep_alive())

    # ---- completion

    def _head_done(self, data: bytes) -> None:
        # The parser stopped inside the message: a fresh one for the next request,
        # and the connection kept only if nothing followed the headers.
        self._parser = httptools.HttpResponseParser(self)
        self._complete(data.endswith(b"\r\n\r\n") and self._keep_alive_header())

    def _keep_alive_header(self) -> bool:
        value = self._reply_headers.get("Connection", "")
        return "close" not in value.lower()

    def _complete(self, keep_alive: bool) -> None:
        waiter = self.waiter
        assert waiter is not None
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        decode = self._decode
        if decode is not None and body:
            try:
                body = decode(body)
            except Exception as exc:  # zlib.error, brotli.error
                self._fail(
                    WireError(errors.ProtocolError, f"bad response: undecodable body: {exc}")
                )
                return
            if len(body) > self._cap:
                self._fail(
                    WireError(
                        errors.BodyTooLarge,
                        f"decoded body is over the cap of {self._cap} bytes",
                    )
                )
                return
        self.waiter = None
        self._chunks = []
        self.served += 1
        if not waiter.done():
            waiter.set_result(Reply(self._status, self._reply_headers, body, self._url))
        if keep_alive and not self.closed:
            self.pool.release(self)
        else:
            self.abort()

    def _fail(self, error: WireError) -> None:
        waiter = self.waiter
        self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.abort()


def _parser_reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.removeprefix("HPE_").replace("_", " ").lower() if text.startswith("HPE_") else text


__all__ = ["ACCEPT_ENCODING", "MAX_HEADERS", "MAX_HEADER_BYTES", "Connection", "Reply", "WireError"]
