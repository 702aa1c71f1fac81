"""corun.http's engine against a server that misbehaves on purpose, on both loops.

The server is a raw ``asyncio.Protocol`` on 127.0.0.1 that answers each
request with the bytes its path names (``SCRIPTS``) and then does what the
script says: keep the connection, close it, or stall. Every case must end in
a clear ``corun.http`` error (or the right response), never in a hang: each
test runs under a deadline.
"""

from __future__ import annotations

import asyncio
import gzip
import re
import zlib
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import brotli
import pytest

from corun.http import (
    BodyTooLarge,
    Client,
    ClientOptions,
    ConnectError,
    InvalidRequest,
    ProtocolError,
    RequestTimeout,
    UnsupportedScheme,
)

pytestmark = pytest.mark.timeout(30)

NO_RETRY = ClientOptions(retry=None, breaker=None)


def _ok(body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


#: path -> (bytes to send, then: "keep", "close" or "stall")
SCRIPTS: dict[str, tuple[bytes, str]] = {
    "/ok": (_ok(b"fine"), "keep"),
    "/bad-status": (b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", "keep"),
    "/not-http": (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "keep"),
    "/huge-headers": (
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 1000) for i in range(80)),
        "stall",
    ),
    "/many-headers": (
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(300)) + b"\r\n",
        "keep",
    ),
    "/truncated": (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10, "close"),
    "/mid-chunk": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc", "close"),
    "/bad-chunk": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "keep"),
    "/mid-headers": (b"HTTP/1.1 200 OK\r\nContent-Le", "close"),
    "/nothing": (b"", "close"),
    "/stall": (b"", "stall"),
    "/stall-body": (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "stall"),
    "/until-close": (b"HTTP/1.1 200 OK\r\n\r\nall of it", "close"),
    "/continue": (b"HTTP/1.1 100 Continue\r\n\r\n" + _ok(b"after 100"), "keep"),
    "/no-content": (b"HTTP/1.1 204 No Content\r\n\r\n", "keep"),
    "/gzip": (_ok(gzip.compress(b"zipped" * 100), "Content-Encoding: gzip"), "keep"),
    "/deflate": (_ok(zlib.compress(b"deflated" * 100), "Content-Encoding: deflate"), "keep"),
    "/br": (_ok(brotli.compress(b"brotli" * 100), "Content-Encoding: br"), "keep"),
    "/bad-gzip": (_ok(b"not gzip at all", "Content-Encoding: gzip"), "keep"),
    "/bomb": (_ok(gzip.compress(b"\0" * 5_000_000), "Content-Encoding: gzip"), "keep"),
    "/to-ftp": (b"HTTP/1.1 302 Found\r\nLocation: ftp://x/\r\nContent-Length: 0\r\n\r\n", "keep"),
}


class _Server(asyncio.Protocol):
    def __init__(self, seen: list[bytes]) -> None:
        self.seen = seen
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
            self.seen.append(head)
            path = head.split(b" ")[1].decode()
            payload, then = SCRIPTS[path.partition("?")[0]]
            self.transport.write(payload)
            if then == "close":
                self.transport.close()
            elif path.endswith("?then-close"):
                # Keep-alive as promised, then drop the idle connection without a word.
                asyncio.get_running_loop().call_later(0.05, self.transport.close)


@asynccontextmanager
async def serve() -> AsyncIterator[tuple[str, list[bytes]]]:
    seen: list[bytes] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Server(seen), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()
        await server.wait_closed()


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, 20))


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        ("/bad-status", ProtocolError, "bad response: Invalid status code"),
        ("/not-http", ProtocolError, "bad response: Expected HTTP/"),
        ("/huge-headers", ProtocolError, "headers over 65536 bytes"),
        ("/many-headers", ProtocolError, "more than 256 headers"),
        ("/truncated", ProtocolError, "body truncated: connection closed after 10 of 100 bytes"),
        ("/mid-chunk", ProtocolError, "connection closed inside the chunked body"),
        ("/bad-chunk", ProtocolError, "Invalid character in chunk size"),
        ("/mid-headers", ProtocolError, "connection closed inside the headers"),
        ("/nothing", ConnectError, "closed the connection without a response"),
        ("/bad-gzip", ProtocolError, "undecodable body"),
        ("/bomb", BodyTooLarge, "decoded body is over the cap of 1000000 bytes"),
        ("/to-ftp", UnsupportedScheme, "redirect to 'ftp://x/'"),
    ],
)
def test_malformed_responses_give_clear_errors(
    loop: asyncio.AbstractEventLoop, path: str, error: type[Exception], message: str
) -> None:
    async def main() -> None:
        async with serve() as (base, _), Client(ClientOptions(max_body_bytes=1_000_000)) as client:
            with pytest.raises(error, match=re.escape(message)) as info:
                await client.request("GET", base + path)
            assert str(info.value).startswith(f"GET {base}{path}: ")
            # The client is still usable: a good response after the bad one.
            assert (await client.request("GET", f"{base}/ok")).body == b"fine"

    run(loop, main())


@pytest.mark.parametrize("path", ["/stall", "/stall-body"])
def test_a_silent_server_is_a_read_timeout(loop: asyncio.AbstractEventLoop, path: str) -> None:
    async def main() -> None:
        options = ClientOptions(read_timeout=0.2, retry=None)
        async with serve() as (base, _), Client(options) as client:
            started = asyncio.get_running_loop().time()
            with pytest.raises(RequestTimeout, match=r"read timeout of 0\.2 s"):
                await client.request("GET", base + path)
            waited = asyncio.get_running_loop().time() - started
            assert 0.2 <= waited < 2.0

    run(loop, main())


@pytest.mark.parametrize(("path", "body"), [
    ("/until-close", b"all of it"),
    ("/continue", b"after 100"),
    ("/gzip", b"zipped" * 100),
    ("/deflate", b"deflated" * 100),
    ("/br", b"brotli" * 100),
])  # fmt: skip
def test_framings_and_encodings(loop: asyncio.AbstractEventLoop, path: str, body: bytes) -> None:
    async def main() -> None:
        async with serve() as (base, seen), Client(NO_RETRY) as client:
            response = await client.request("GET", base + path)
            assert (response.status, response.body) == (200, body)
            assert b"Accept-Encoding: gzip, deflate, br" in seen[0]

    run(loop, main())


def test_an_idle_connection_the_server_closed_is_not_reused(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def main() -> None:
        async with serve() as (base, seen), Client(NO_RETRY) as client:
            first = await client.request("GET", f"{base}/ok?then-close")
            assert first.attempts == 1
            await asyncio.sleep(0.1)  # the server closes the idle connection meanwhile
            again = await client.request("GET", f"{base}/ok")
            # The client saw the close and opened another: one request, one attempt.
            assert (again.body, again.attempts) == (b"fine", 1)
            assert len(seen) == 2

    run(loop, main())


class _Forgetful(asyncio.Protocol):
    """Answers the first request of a connection; closes at the second, unanswered."""

    def __init__(self) -> None:
        self.requests = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.requests += 1
        if self.requests == 1:
            self.transport.write(_ok(b"first"))
        else:
            self.transport.close()


@pytest.mark.parametrize(("method", "resent"), [("GET", True), ("POST", False)])
def test_reused_connection_closed_unanswered(
    loop: asyncio.AbstractEventLoop, method: str, resent: bool
) -> None:
    async def main() -> None:
        loop_ = asyncio.get_running_loop()
        server = await loop_.create_server(_Forgetful, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            async with Client(NO_RETRY) as client:
                assert (await client.request(method, base)).body == b"first"
                if resent:
                    # Sent again at once on a new connection, counted as an attempt.
                    response = await client.request(method, base)
                    assert (response.body, response.attempts) == (b"first", 2)
                else:
                    # Not idempotent: the server may have acted on it.
                    with pytest.raises(ConnectError, match="without a response"):
                        await client.request(method, base)
        finally:
            server.close()
            await server.wait_closed()

    run(loop, main())


def test_204_has_no_body_and_the_next_response_is_whole(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with serve() as (base, seen), Client(NO_RETRY) as client:
            response = await client.request("GET", f"{base}/no-content")
            assert (response.status, response.body) == (204, b"")
            assert (await client.request("GET", f"{base}/ok")).body == b"fine"
            assert len(seen) == 2
        assert client.statistics().attempts == 2

    run(loop, main())


def test_header_injection_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with serve() as (base, seen), Client(NO_RETRY) as client:
            with pytest.raises(InvalidRequest, match="invalid header"):
                await client.request("GET", f"{base}/ok", headers={"X-A": "1\r\nX-B: 2"})
            with pytest.raises(InvalidRequest, match="invalid method"):
                await client.request("GET /x HTTP/1.1\r\nX-B:", f"{base}/ok")
            assert seen == []  # nothing was sent

    run(loop, main())


@pytest.mark.parametrize("policies", [False, True])
def test_the_total_timeout_bounds_a_trickling_response(
    loop: asyncio.AbstractEventLoop, policies: bool
) -> None:
    """Without policies the engine keeps the total timeout; with them, the pipeline does."""

    async def main() -> None:
        options = ClientOptions(
            total_timeout=0.3,
            read_timeout=10.0,
            retry=None,
            breaker=None if not policies else ClientOptions().breaker,
        )
        async with serve() as (base, _), Client(options) as client:
            started = asyncio.get_running_loop().time()
            with pytest.raises(RequestTimeout, match=r"total timeout of 0\.3 s after 1 attempt"):
                await client.request("GET", f"{base}/stall-body")
            assert 0.3 <= asyncio.get_running_loop().time() - started < 2.0
            assert (await client.request("GET", f"{base}/ok")).body == b"fine"

    run(loop, main())


def test_requests_carry_the_same_fields_each_time(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with serve() as (base, seen), Client(NO_RETRY) as client:
            for method in ("GET", "HEAD", "GET"):
                await client.request(method, f"{base}/ok")
            await client.request("GET", f"{base}/ok", headers={"X-Extra": "1"})
        port = base.rsplit(":", 1)[1]
        fields = (
            f"Host: 127.0.0.1:{port}\r\nUser-Agent: corun-http/0.1\r\n"
            "Accept-Encoding: gzip, deflate, br\r\nAccept: */*"
        ).encode()
        assert seen[:3] == [
            b"GET /ok HTTP/1.1\r\n" + fields,
            b"HEAD /ok HTTP/1.1\r\n" + fields,
            b"GET /ok HTTP/1.1\r\n" + fields,
        ]
        assert seen[3] == b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1:" + port.encode() + (
            b"\r\nX-Extra: 1\r\nUser-Agent: corun-http/0.1\r\n"
            b"Accept-Encoding: gzip, deflate, br\r\nAccept: */*"
        )

    run(loop, main())
