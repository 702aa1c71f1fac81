"""TLS: ``corun.runtime.transports.tls`` (TLSProtocol, SSLTransport, start_tls).

Every test runs on both loops (the ``loop`` fixture). Connections are made in
one of two modes:

* ``upgrade``: a plain TCP connection from the loop's own ``create_connection``
  and ``create_server``, with corun's ``TLSProtocol`` installed over it
  (``set_protocol`` + ``connection_made``, what ``create_connection(ssl=)``
  does). This is corun's TLS on both loops, so the asyncio parametrization
  checks it against the stdlib's reference transports.
* ``native``: the loop's own ``create_connection(ssl=)`` and
  ``create_server(ssl=)``: corun's TLS on corun, and asyncio's ``sslproto`` on
  the stdlib loop, the reference for behaviour we share. Tests of behaviour
  where corun deliberately differs from asyncio skip that combination.

Misbehaving peers are built from the same parts: a plain transport whose
protocol is swapped back to a black hole after the handshake never answers
close_notify; closing the plain transport under a TLS session is an
unexpected EOF; and so on. Certificates come from ``trustme``.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import inspect
import logging
import ssl
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

trustme = pytest.importorskip("trustme")

from corun.runtime.transports import tls  # noqa: E402  (after the importorskip)

TIMEOUT = 5.0
MODES = ("upgrade", "native")


# ------------------------------------------------------------------ fixtures


class Certs:
    """A CA, a server certificate for localhost/127.0.0.1 and contexts using them."""

    def __init__(self) -> None:
        self.ca = trustme.CA()
        self.server_cert = self.ca.issue_cert("localhost", "127.0.0.1")
        self.client_cert = self.ca.issue_cert("client@example.com")
        self.other_ca = trustme.CA()

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.server_cert.configure_cert(ctx)
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            self.ca.configure_trust(ctx)
        return ctx

    def client_context(self, *, trusted: bool = True, cert: Any = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        (self.ca if trusted else self.other_ca).configure_trust(ctx)
        if cert is not None:
            cert.configure_cert(ctx)
        return ctx


@pytest.fixture(scope="session")
def certs() -> Certs:
    return Certs()


@pytest.fixture(autouse=True)
def no_resource_warnings() -> Iterator[None]:
    """Fails the test if an unclosed transport or socket was garbage collected.

    Autouse, so it is set up before ``loop`` and torn down after the loop
    checker, which closes the loop and collects garbage.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        yield
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaks, leaks


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def ours(loop: asyncio.AbstractEventLoop, mode: str) -> bool:
    """Whether connections in ``mode`` on ``loop`` run corun's TLS."""
    return mode == "upgrade" or not isinstance(loop, asyncio.BaseEventLoop)


def require_ours(loop: asyncio.AbstractEventLoop, mode: str) -> None:
    if not ours(loop, mode):
        pytest.skip("asyncio's own sslproto differs here (see corun.runtime.transports.tls)")


def server_handshake_failed(loop: asyncio.AbstractEventLoop, mode: str, errors: Any) -> None:
    """A native server's failed handshake: consume what debug mode reports.

    In debug mode asyncio's server (and corun's, which matches it) reports
    "Error on transport creation for incoming connection".
    """
    if mode == "native" and loop.get_debug():
        errors.pop("Error on transport creation for incoming connection")


def run(loop: asyncio.AbstractEventLoop, coro: Any, timeout: float = TIMEOUT) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


# ------------------------------------------------------------------ protocols


class Recorder(asyncio.Protocol):
    """Records what a protocol hears, and checks the order of the calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: Any = None
        self.data = bytearray()
        self.state = "INIT"
        self.made = loop.create_future()
        self.eof = loop.create_future()
        self.lost = loop.create_future()
        self.pauses = 0
        self.resumes = 0
        self._want: tuple[int, Any] | None = None
        self.eof_result: bool | None = None

    def connection_made(self, transport: Any) -> None:
        assert self.state == "INIT", self.state
        self.state = "CONNECTED"
        self.transport = transport
        self.made.set_result(transport)

    def _got(self, n: int) -> None:
        assert self.state == "CONNECTED", self.state
        want = self._want
        if want is not None and len(self.data) >= want[0]:
            self._want = None
            if not want[1].done():
                want[1].set_result(None)

    def data_received(self, data: bytes) -> None:
        self.data += data
        self._got(len(data))

    def eof_received(self) -> bool | None:
        assert self.state == "CONNECTED", self.state
        self.state = "EOF"
        self.eof.set_result(None)
        return self.eof_result

    def connection_lost(self, exc: BaseException | None) -> None:
        assert self.state in ("CONNECTED", "EOF"), self.state
        self.state = "CLOSED"
        self.lost.set_result(exc)

    def pause_writing(self) -> None:
        self.pauses += 1

    def resume_writing(self) -> None:
        self.resumes += 1

    async def wait_bytes(self, n: int) -> bytes:
        if len(self.data) < n:
            fut = self.loop.create_future()
            self._want = (n, fut)
            await fut
        return bytes(self.data)


class BufferedRecorder(Recorder, asyncio.BufferedProtocol):
    """The same through get_buffer()/buffer_updated(), with a small buffer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int = 1000, *, view: bool) -> None:
        super().__init__(loop)
        self.buf = bytearray(size)
        self.view = view
        self.hints: list[int] = []

    def get_buffer(self, sizehint: int) -> Any:
        self.hints.append(sizehint)
        return memoryview(self.buf) if self.view else self.buf

    def buffer_updated(self, nbytes: int) -> None:
        self.data += self.buf[:nbytes]
        self._got(nbytes)

    def data_received(self, data: bytes) -> None:  # pragma: no cover
        raise AssertionError("a BufferedProtocol must not get data_received()")


class BlackHole(asyncio.Protocol):
    """Takes everything and answers nothing."""

    def __init__(self, holes: list[BlackHole] | None = None) -> None:
        self.transport: Any = None
        self.received = 0
        if holes is not None:
            holes.append(self)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += len(data)

    def eof_received(self) -> bool:
        return True  # keep the connection open: silence, not EOF


class SilentServer:
    """A plain TCP server whose connections never answer."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.holes: list[BlackHole] = []
        self.server: Any = None

    async def start(self) -> int:
        self.server = await self.loop.create_server(lambda: BlackHole(self.holes), "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        # Close the connections too: corun's wait_closed() waits for them
        # (Python 3.12 semantics), 3.11's does not.
        for hole in self.holes:
            if hole.transport is not None:
                hole.transport.close()
        self.server.close()
        await self.server.wait_closed()


class Acceptor(asyncio.Protocol):
    """Server side of the ``upgrade`` mode: installs a TLSProtocol on accept."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair

    def connection_made(self, transport: Any) -> None:
        pair = self.pair
        app = pair.server_factory()
        waiter = pair.loop.create_future()
        waiter.add_done_callback(pair.server_handshake_done)
        tls_protocol = tls.TLSProtocol(
            pair.loop,
            app,
            pair.server_ctx,
            waiter,
            server_side=True,
            **pair.server_kwargs,
        )
        pair.server_tls.append(tls_protocol)
        transport.set_protocol(tls_protocol)
        tls_protocol.connection_made(transport)


class Pair:
    """A TLS client and server on one loop, connected in ``mode``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        mode: str,
        certs: Certs,
        *,
        client_factory: Callable[[], Any] | None = None,
        server_factory: Callable[[], Any] | None = None,
        client_ctx: ssl.SSLContext | None = None,
        server_ctx: ssl.SSLContext | None = None,
        server_hostname: str = "localhost",
        client_kwargs: dict[str, Any] | None = None,
        server_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.loop = loop
        self.mode = mode
        self.client_ctx = client_ctx or certs.client_context()
        self.server_ctx = server_ctx or certs.server_context()
        self.server_hostname = server_hostname
        self.client_factory = client_factory or (lambda: Recorder(loop))
        self.server_factory_inner = server_factory or (lambda: Recorder(loop))
        self.client_kwargs = client_kwargs or {}
        self.server_kwargs = server_kwargs or {}
        self.server_apps: list[Any] = []
        self.server_tls: list[tls.TLSProtocol] = []
        self.server_handshakes: asyncio.Future[Any] = loop.create_future()
        self.server: Any = None
        self.client: Any = None
        self.client_transport: Any = None

    def server_factory(self) -> Any:
        app = self.server_factory_inner()
        self.server_apps.append(app)
        return app

    def server_handshake_done(self, waiter: Any) -> None:
        if not waiter.cancelled():
            waiter.exception()  # retrieved, whether or not it is the first
        if self.server_handshakes.done():
            return
        if waiter.cancelled():
            self.server_handshakes.cancel()
        elif waiter.exception() is not None:
            self.server_handshakes.set_exception(waiter.exception())
        else:
            self.server_handshakes.set_result(None)

    async def start_server(self) -> int:
        if self.mode == "native":
            self.server = await self.loop.create_server(
                self.server_factory, "127.0.0.1", 0, ssl=self.server_ctx, **self.server_kwargs
            )
        else:
            self.server = await self.loop.create_server(lambda: Acceptor(self), "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def connect(self) -> tuple[Any, Any]:
        """Connect; returns (client transport, client protocol)."""
        port = await self.start_server()
        if self.mode == "native":
            tr, pr = await self.loop.create_connection(
                self.client_factory,
                "127.0.0.1",
                port,
                ssl=self.client_ctx,
                server_hostname=self.server_hostname,
                **self.client_kwargs,
            )
        else:
            plain, _ = await self.loop.create_connection(BlackHole, "127.0.0.1", port)
            pr = self.client_factory()
            waiter = self.loop.create_future()
            tls_protocol = tls.TLSProtocol(
                self.loop,
                pr,
                self.client_ctx,
                waiter,
                server_hostname=self.server_hostname,
                **self.client_kwargs,
            )
            tr = tls_protocol._app_transport
            plain.set_protocol(tls_protocol)
            tls_protocol.connection_made(plain)
            try:
                await waiter
            except BaseException:
                plain.close()
                del waiter  # no cycle through this frame (see test_no_cycles_...)
                raise
        self.client, self.client_transport = pr, tr
        return tr, pr

    async def server_app(self) -> Any:
        """The first server-side application protocol, once it is connected."""
        while not self.server_apps:
            await asyncio.sleep(0)
        await self.server_apps[0].made
        return self.server_apps[0]

    async def server_handshake_error(self) -> BaseException | None:
        """The server's handshake exception (``upgrade`` mode only: a native
        server reports it nowhere but the debug log)."""
        if self.mode != "upgrade":
            return None
        try:
            await self.server_handshakes
        except BaseException as exc:
            return exc
        return None

    async def close(self) -> None:
        """Close whatever is still open and wait until it is gone."""
        if self.client_transport is not None:
            self.client_transport.close()
        for app in [self.client, *self.server_apps]:
            if isinstance(app, Recorder) and app.transport is not None:
                app.transport.close()
                await app.lost
        for tls_protocol in self.server_tls:
            if tls_protocol._transport is not None:
                tls_protocol._transport.abort()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        for _ in range(3):
            await asyncio.sleep(0)


def underlying(app_transport: Any) -> Any:
    """The plain stream transport under a TLS transport (ours or asyncio's)."""
    return app_transport._ssl_protocol._transport


def shrink_socket_buffers(sender: Any, receiver: Any) -> None:
    """Small kernel buffers, so that a paused reader backs the writer up soon
    (loopback buffers otherwise absorb megabytes).

    Not below 64 KiB: loopback's MSS is 65483 bytes, and with a buffer smaller
    than one segment Linux's receiver cannot reopen a closed window, so the
    sender falls back to zero-window probes with exponential backoff. With
    16 KiB, 3 MiB of TLS stalled at 1 MiB for over 5 s on CPython 3.14 (plain
    TCP in 16 KiB writes stalls the same way on 3.11); the kernel, not the loop.
    """
    import socket

    size = 64 * 1024
    underlying(sender).get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_SNDBUF, size
    )
    underlying(receiver).get_extra_info("socket").setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVBUF, size
    )


def check_invariants(app_transport: Any) -> None:
    protocol = app_transport._ssl_protocol
    if isinstance(protocol, tls.TLSProtocol):
        protocol._check_invariants()


# ------------------------------------------------------------------ handshake


def test_handshake_and_echo(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        tr.write(b"ping")
        assert await server.wait_bytes(4) == b"ping"
        server.transport.write(b"pong")
        assert await client.wait_bytes(4) == b"pong"
        check_invariants(tr)
        check_invariants(server.transport)
        tr.close()
        assert tr.is_closing()
        assert await client.lost is None
        await server.eof
        assert await server.lost is None
        await pair.close()

    run(loop, main())


def test_extra_info(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        client_ctx = certs.client_context()
        pair = Pair(loop, mode, certs, client_ctx=client_ctx)
        tr, _ = await pair.connect()
        server = await pair.server_app()
        assert tr.get_extra_info("sslcontext") is client_ctx
        sslobj = tr.get_extra_info("ssl_object")
        assert isinstance(sslobj, ssl.SSLObject)
        assert not sslobj.server_side
        peercert = tr.get_extra_info("peercert")
        assert ("commonName", "localhost") not in peercert.get("subject", ())  # trustme: SAN only
        assert ("DNS", "localhost") in peercert["subjectAltName"]
        cipher = tr.get_extra_info("cipher")
        assert isinstance(cipher, tuple) and len(cipher) == 3
        assert tr.get_extra_info("compression") is None
        assert tr.get_extra_info("peername")[0] == "127.0.0.1"
        assert tr.get_extra_info("sockname")[0] == "127.0.0.1"
        assert tr.get_extra_info("socket") is not None
        assert tr.get_extra_info("no such key", "default") == "default"
        # The server did not ask for a client certificate.
        assert server.transport.get_extra_info("peercert") is None
        assert server.transport.get_extra_info("ssl_object").server_side
        await pair.close()
        if ours(loop, mode):  # asyncio's transport forgets everything on a second close()
            # After the connection is gone, the session and its context are
            # let go (see test_context_freed_while_app_keeps_transport); what
            # the handshake told remains.
            assert tr.get_extra_info("sslcontext") is None
            assert tr.get_extra_info("ssl_object") is None
            assert tr.get_extra_info("peercert") == peercert
            assert tr.get_extra_info("cipher") == cipher
            assert tr.get_extra_info("socket") is None

    run(loop, main())


def test_no_cycles_after_failed_handshake(loop: Any, certs: Certs, mode: str, errors: Any) -> None:
    """A failed handshake leaves no reference cycle: with the collector off,
    the client's context is freed once the connection is gone (gh-159049)."""

    async def main() -> weakref.ref[ssl.SSLContext]:
        pair = Pair(loop, mode, certs, client_ctx=certs.client_context(trusted=False))
        ref = weakref.ref(pair.client_ctx)
        with pytest.raises(ssl.SSLCertVerificationError):
            await pair.connect()
        pair.client_ctx = None  # type: ignore[assignment]
        await pair.close()
        if mode == "upgrade":
            await pair.server_handshake_error()  # the server's waiter, retrieved
        return ref

    gc.collect()
    gc.disable()
    try:
        ref = run(loop, main())
        if ours(loop, mode) or _create_connection_breaks_cycle():
            assert ref() is None, gc.get_referrers(ref())
        else:
            assert ref() is not None  # asyncio before gh-159049: freed by a collection
    finally:
        gc.enable()
    server_handshake_failed(loop, mode, errors)


def _create_connection_breaks_cycle() -> bool:
    """Whether asyncio's create_connection(ssl=) drops its waiter when the
    handshake fails (gh-159049: CPython 3.14.x and 3.15)."""
    source = inspect.getsource(asyncio.base_events.BaseEventLoop._create_connection_transport)
    return "waiter = None" in source


def test_context_freed_while_app_keeps_transport(loop: Any, certs: Certs, mode: str) -> None:
    """The application keeps its transport after connection_lost; the TLS
    session and its context are freed all the same, without a collection
    (CPython 3.14's test_create_connection_memory_leak)."""

    async def main() -> tuple[Any, weakref.ref[ssl.SSLContext]]:
        pair = Pair(loop, mode, certs)
        ref = weakref.ref(pair.client_ctx)
        tr, client = await pair.connect()
        server = await pair.server_app()
        server.transport.close()
        await client.eof
        tr.close()  # asyncio's transport lets go of its protocol on this second close
        assert await client.lost is None
        pair.client_ctx = None  # type: ignore[assignment]
        pair.client = pair.client_transport = None
        await pair.close()
        return client, ref

    gc.collect()
    gc.disable()
    try:
        client, ref = run(loop, main())
        assert client.transport is not None
        assert ref() is None, gc.get_referrers(ref())
    finally:
        gc.enable()


def test_client_rejects_untrusted_server(loop: Any, certs: Certs, mode: str, errors: Any) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs, client_ctx=certs.client_context(trusted=False))
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await pair.connect()
        # The client sent an alert, so the server learns why.
        if mode == "upgrade":
            exc = await pair.server_handshake_error()
            assert isinstance(exc, ssl.SSLError), exc
            assert "unknown ca" in str(exc)
        await pair.close()

    run(loop, main())
    server_handshake_failed(loop, mode, errors)


def test_hostname_mismatch(loop: Any, certs: Certs, mode: str, errors: Any) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs, server_hostname="example.com")
        with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
            await pair.connect()
        if mode == "upgrade":
            assert isinstance(await pair.server_handshake_error(), ssl.SSLError)
        await pair.close()

    run(loop, main())
    server_handshake_failed(loop, mode, errors)


def test_client_certificate(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(
            loop,
            mode,
            certs,
            client_ctx=certs.client_context(cert=certs.client_cert),
            server_ctx=certs.server_context(require_client_cert=True),
        )
        await pair.connect()
        server = await pair.server_app()
        peercert = server.transport.get_extra_info("peercert")
        assert ("email", "client@example.com") in peercert["subjectAltName"]
        await pair.close()

    run(loop, main())


def test_missing_client_certificate(loop: Any, certs: Certs, mode: str, errors: Any) -> None:
    # TLS 1.3: the client's handshake completes before the server has checked
    # the client's certificate; the rejection arrives later as an alert.
    async def main() -> None:
        pair = Pair(loop, mode, certs, server_ctx=certs.server_context(require_client_cert=True))
        _, client = await pair.connect()
        if mode == "upgrade":
            assert isinstance(await pair.server_handshake_error(), ssl.SSLError)
        exc = await client.lost
        if ours(loop, mode):
            # The server's alert ("certificate required") is reported.
            assert isinstance(exc, ssl.SSLError), exc
        else:
            assert exc is None or isinstance(exc, (ssl.SSLError, ConnectionError)), exc
        await pair.close()

    run(loop, main())
    server_handshake_failed(loop, mode, errors)


def test_handshake_timeout(loop: Any, certs: Certs, errors: Any) -> None:
    async def main() -> None:
        server = SilentServer(loop)
        port = await server.start()
        plain, _ = await loop.create_connection(BlackHole, "127.0.0.1", port)
        app = Recorder(loop)
        waiter = loop.create_future()
        protocol = tls.TLSProtocol(
            loop,
            app,
            certs.client_context(),
            waiter,
            server_hostname="localhost",
            ssl_handshake_timeout=0.1,
        )
        plain.set_protocol(protocol)
        # Before connection_made(), which arms the timer: a busy machine may
        # stop the thread between the two for tens of milliseconds.
        start = loop.time()
        protocol.connection_made(plain)
        with pytest.raises(ConnectionAbortedError) as info:
            await waiter
        assert 0.09 <= loop.time() - start < 2
        assert str(info.value) == (
            "SSL handshake is taking longer than 0.1 seconds: aborting the connection"
        )
        await asyncio.sleep(0.01)
        assert protocol._transport is None  # connection_lost ran
        assert app.state == "INIT"  # the application never heard of it
        await server.close()

    run(loop, main())
    assert not errors.contexts


def test_handshake_timeout_native(loop: Any, certs: Certs, errors: Any) -> None:
    async def main() -> None:
        server = SilentServer(loop)
        port = await server.start()
        with pytest.raises(ConnectionAbortedError, match=r"is taking longer than 0\.1 seconds"):
            await loop.create_connection(
                lambda: Recorder(loop),
                "127.0.0.1",
                port,
                ssl=certs.client_context(),
                server_hostname="localhost",
                ssl_handshake_timeout=0.1,
            )
        await server.close()
        await asyncio.sleep(0.01)

    run(loop, main())


def test_eof_during_handshake(loop: Any, certs: Certs, mode: str) -> None:
    class HangUp(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.close()

    async def main() -> None:
        server = await loop.create_server(HangUp, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pair = Pair(loop, mode, certs)
        pair.start_server = lambda: _port(port)  # type: ignore[method-assign]
        client = Recorder(loop)
        pair.client_factory = lambda: client
        with pytest.raises(ConnectionResetError):
            await pair.connect()
        await asyncio.sleep(0.01)
        assert client.state == "INIT"
        server.close()
        await server.wait_closed()

    async def _port(port: int) -> int:
        return port

    run(loop, main())


def test_cancel_during_handshake(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        server = SilentServer(loop)
        port = await server.start()
        if mode == "native":
            coro = loop.create_connection(
                lambda: Recorder(loop),
                "127.0.0.1",
                port,
                ssl=certs.client_context(),
                server_hostname="localhost",
            )
        else:
            plain, app = await loop.create_connection(lambda: Recorder(loop), "127.0.0.1", port)
            coro = tls.start_tls(
                loop, plain, app, certs.client_context(), server_hostname="localhost"
            )
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(coro, 0.05)
        if mode == "upgrade":
            # start_tls() closed the transport; the protocol it was given had
            # been connected by the plain transport, so it hears of it.
            assert plain.is_closing()
            assert await app.lost is None
        await asyncio.sleep(0.01)
        await server.close()

    run(loop, main())


def test_close_during_handshake(loop: Any, certs: Certs) -> None:
    async def main() -> None:
        server = SilentServer(loop)
        port = await server.start()
        plain, _ = await loop.create_connection(BlackHole, "127.0.0.1", port)
        app = Recorder(loop)
        waiter = loop.create_future()
        protocol = tls.TLSProtocol(
            loop, app, certs.client_context(), waiter, server_hostname="localhost"
        )
        plain.set_protocol(protocol)
        protocol.connection_made(plain)
        await asyncio.sleep(0.01)
        protocol._app_transport.close()
        assert plain.is_closing()  # aborted
        with pytest.raises(ConnectionAbortedError):
            await waiter
        await asyncio.sleep(0.01)
        assert app.state == "INIT"
        assert protocol._handshake_timeout_handle is None
        await server.close()

    run(loop, main())


# ------------------------------------------------------------------ bulk data and flow control


def _payload(n: int, seed: bytes) -> bytes:
    block = hashlib.sha256(seed).digest() * 2048  # 64 KiB
    return (block * (n // len(block) + 1))[:n]


@pytest.mark.parametrize("size", [5 * 1024 * 1024])
def test_large_bodies_both_ways(loop: Any, certs: Certs, mode: str, size: int) -> None:
    up = _payload(size, b"up")
    down = _payload(size, b"down")

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        # Both sides write everything at once, then read.
        tr.write(up)
        server.transport.write(down)
        if ours(loop, mode):
            # Plaintext waits until the socket takes ciphertext (asyncio
            # encrypts it all at once into the transport's buffer).
            assert tr.get_write_buffer_size() > 0
        got_up, got_down = await asyncio.gather(server.wait_bytes(size), client.wait_bytes(size))
        assert hashlib.sha256(got_up).digest() == hashlib.sha256(up).digest()
        assert hashlib.sha256(got_down).digest() == hashlib.sha256(down).digest()
        # The writers were paused (backlog over 512 KiB) and resumed.
        assert client.pauses == client.resumes
        assert server.pauses == server.resumes
        if ours(loop, mode):
            assert client.pauses >= 1 and server.pauses >= 1
        assert tr.get_write_buffer_size() == 0
        check_invariants(tr)
        check_invariants(server.transport)
        await pair.close()

    run(loop, main())


def test_reader_pauses(loop: Any, certs: Certs, mode: str) -> None:
    """A reader that pauses: the writer backs up and is paused, and nothing is lost."""
    size = 4 * 1024 * 1024
    body = _payload(size, b"paused")

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        shrink_socket_buffers(tr, server.transport)
        server.transport.pause_reading()
        assert not server.transport.is_reading()
        tr.write(body)
        for _ in range(20):
            await asyncio.sleep(0.005)
        assert len(server.data) == 0
        if ours(loop, mode):
            # Our pause_reading() reaches the socket at once.
            assert not underlying(server.transport).is_reading()
            # The plaintext waits, and the writer is paused. (asyncio encrypts
            # one big write() whole into the stream transport's buffer, and
            # does not pause the writer.)
            assert client.pauses == 1 and client.resumes == 0
            assert tr.get_write_buffer_size() > 512 * 1024
        # Read in steps, pausing again in between.
        while len(server.data) < size:
            server.transport.resume_reading()
            await asyncio.sleep(0.002)
            server.transport.pause_reading()
            await asyncio.sleep(0)
        assert bytes(server.data) == body
        assert client.resumes == client.pauses
        server.transport.resume_reading()
        check_invariants(tr)
        await pair.close()

    run(loop, main())


def test_write_buffer_limits(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        assert tr.get_write_buffer_limits() == (128 * 1024, 512 * 1024)
        tr.set_write_buffer_limits(high=1000)
        assert tr.get_write_buffer_limits() == (250, 1000)
        with pytest.raises(ValueError, match="must be >= low"):
            tr.set_write_buffer_limits(high=10, low=20)
        shrink_socket_buffers(tr, server.transport)
        server.transport.pause_reading()
        chunk = b"x" * 100_000
        for _ in range(200):
            tr.write(chunk)
            if client.pauses:
                break
            await asyncio.sleep(0.001)
        # Checked at once: once the loop runs, the socket may drain it.
        assert client.pauses == 1
        assert tr.get_write_buffer_size() > 1000
        server.transport.resume_reading()
        while client.resumes == 0:
            await asyncio.sleep(0.001)
        assert tr.get_write_buffer_size() <= 250
        await pair.close()

    run(loop, main())


@pytest.mark.parametrize("view", [False, True], ids=["bytearray", "memoryview"])
def test_buffered_protocol(loop: Any, certs: Certs, mode: str, view: bool) -> None:
    if not view:
        # asyncio's sslproto reads into buf[offset:], a copy of a bytearray.
        require_ours(loop, mode)
    size = 1024 * 1024
    body = _payload(size, b"buffered")

    async def main() -> None:
        pair = Pair(
            loop,
            mode,
            certs,
            client_factory=lambda: BufferedRecorder(loop, 1000, view=view),
            server_factory=lambda: BufferedRecorder(loop, 70_000, view=view),
        )
        tr, client = await pair.connect()
        server = await pair.server_app()
        tr.write(body)
        server.transport.write(body[: size // 2])
        assert await server.wait_bytes(size) == body
        assert await client.wait_bytes(size // 2) == body[: size // 2]
        if ours(loop, mode):
            assert all(h == -1 or h > 0 for h in client.hints)
        tr.close()
        await client.lost
        await server.eof
        await pair.close()

    run(loop, main())


def test_switch_protocol(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        server.transport.write(b"one")
        await client.wait_bytes(3)
        second = BufferedRecorder(loop, 10, view=True)
        second.connection_made(tr)
        tr.set_protocol(second)
        assert tr.get_protocol() is second
        server.transport.write(b"two" * 10)
        assert await second.wait_bytes(30) == b"two" * 10
        assert bytes(client.data) == b"one"
        pair.client = second
        tr.close()
        await second.lost
        await pair.close()

    run(loop, main())


def test_read_buffer_limits(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, _ = await pair.connect()
        assert tr.get_read_buffer_limits() == (64 * 1024, 256 * 1024)
        tr.set_read_buffer_limits(high=1000)
        assert tr.get_read_buffer_limits() == (250, 1000)
        with pytest.raises(ValueError, match="must be >= low"):
            tr.set_read_buffer_limits(high=1, low=2)
        assert tr.get_read_buffer_size() == 0
        assert tr._protocol_paused is False
        await pair.close()

    run(loop, main())


def test_close_with_backlog_while_peer_sends(loop: Any, certs: Certs, mode: str) -> None:
    """close() waits for the backlog (resume_writing) while the peer keeps sending."""
    require_ours(loop, mode)
    size = 2 * 1024 * 1024
    body = _payload(size, b"backlog")

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        shrink_socket_buffers(tr, server.transport)
        server.transport.pause_reading()
        tr.write(body)
        await asyncio.sleep(0.01)
        assert tr.get_write_buffer_size() > 0
        server.transport.write(b"z" * 300_000)  # arrives while the client flushes
        tr.close()
        protocol = tr._ssl_protocol
        await asyncio.sleep(0.01)
        assert protocol._state == tls.FLUSHING
        protocol._check_invariants()
        received_before = len(client.data)
        server.transport.resume_reading()
        assert await server.wait_bytes(size) == body
        assert await client.lost is None
        assert await server.lost is None
        assert len(client.data) == received_before  # nothing delivered after close()
        await pair.close()

    run(loop, main())


def test_peer_close_notify_while_paused(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        tr.pause_reading()
        server.transport.write(b"first")
        server.transport.close()
        await asyncio.sleep(0.02)
        assert client.state == "CONNECTED" and not client.data
        tr.resume_reading()
        await client.eof
        assert bytes(client.data) == b"first"
        assert await client.lost is None
        assert await server.lost is None
        await pair.close()

    run(loop, main())


# ------------------------------------------------------------------ writing


def test_write_types_and_writelines(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, _ = await pair.connect()
        server = await pair.server_app()
        with pytest.raises(TypeError, match="data: expecting a bytes-like instance, got str"):
            tr.write("text")
        buf = bytearray(b"abc")
        tr.write(buf)
        buf[:] = b"XYZ"  # too late to change what was written
        tr.write(memoryview(b"def"))
        tr.write(b"")
        tr.writelines([b"g", bytearray(b"h"), memoryview(b"i")])
        assert await server.wait_bytes(9) == b"abcdefghi"
        assert not tr.can_write_eof()
        with pytest.raises(NotImplementedError):
            tr.write_eof()
        await pair.close()

    run(loop, main())


def test_write_unusual_buffers(loop: Any, certs: Certs, mode: str) -> None:
    import array

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, _ = await pair.connect()
        server = await pair.server_app()
        ints = array.array("i", range(100_000))  # 400 000 bytes: more than one slice
        expected = ints.tobytes()
        tr.write(memoryview(ints))
        if ours(loop, mode):  # asyncio fails on it (BufferError in SSLObject.write)
            tr.write(memoryview(b"0123456789")[::2])  # not contiguous
            expected += b"02468"
        shrink_socket_buffers(tr, server.transport)
        server.transport.pause_reading()
        big = bytearray(_payload(1024 * 1024, b"mutable"))
        expected += bytes(big)
        tr.write(big)  # partly left in the backlog (a copy)
        big[:] = b"\0" * len(big)
        if ours(loop, mode):  # asyncio's writelines() fails later, fatally
            with pytest.raises(TypeError, match="got str"):
                tr.writelines([b"ok", "not ok"])
            expected += b"ok"
        server.transport.resume_reading()
        assert await server.wait_bytes(len(expected)) == expected
        check_invariants(tr)
        await pair.close()

    run(loop, main())


def test_write_after_close(loop: Any, certs: Certs, mode: str, caplog: Any) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        tr.close()
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            for _ in range(10):
                tr.write(b"lost")
        assert "SSL connection is closed" in caplog.text
        await client.lost
        await pair.close()

    run(loop, main())


def test_write_before_handshake_completes(loop: Any, certs: Certs) -> None:
    # The app transport exists before the handshake; what is written early
    # goes out once the session is up.
    async def main() -> None:
        pair = Pair(loop, "upgrade", certs)
        port = await pair.start_server()
        plain, _ = await loop.create_connection(BlackHole, "127.0.0.1", port)
        app = Recorder(loop)
        waiter = loop.create_future()
        protocol = tls.TLSProtocol(
            loop, app, certs.client_context(), waiter, server_hostname="localhost"
        )
        plain.set_protocol(protocol)
        protocol.connection_made(plain)
        assert protocol._state == tls.DO_HANDSHAKE
        protocol._app_transport.write(b"early")
        assert protocol._app_transport.get_write_buffer_size() == 5
        await waiter
        server = await pair.server_app()
        assert await server.wait_bytes(5) == b"early"
        pair.client, pair.client_transport = app, protocol._app_transport
        await pair.close()

    run(loop, main())


# ------------------------------------------------------------------ closing


def test_server_initiated_close(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        server.transport.write(b"bye")
        server.transport.close()
        await client.eof  # the peer's close_notify
        assert bytes(client.data) == b"bye"
        assert await client.lost is None
        assert await server.lost is None
        assert tr.is_closing()
        await pair.close()

    run(loop, main())


def test_close_flushes_backlog(loop: Any, certs: Certs, mode: str) -> None:
    size = 3 * 1024 * 1024
    body = _payload(size, b"flush")

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        shrink_socket_buffers(tr, server.transport)
        tr.write(body)
        tr.close()  # must still deliver everything, then close_notify
        assert await server.wait_bytes(size) == body
        await server.eof
        assert await server.lost is None
        assert await client.lost is None
        await pair.close()

    run(loop, main())


def test_close_while_peer_is_sending(loop: Any, certs: Certs, mode: str) -> None:
    # OpenSSL fails unwrap() with APPLICATION_DATA_AFTER_CLOSE_NOTIFY when
    # records are still unread; corun reads and discards them instead.
    require_ours(loop, mode)

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        server.transport.write(_payload(2 * 1024 * 1024, b"stream"))
        await client.wait_bytes(1)
        tr.close()
        assert await client.lost is None
        await server.lost
        await pair.close()

    run(loop, main())


def test_eof_received_return_value_warns(loop: Any, certs: Certs, mode: str, caplog: Any) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        _, client = await pair.connect()
        server = await pair.server_app()
        client.eof_result = True
        with caplog.at_level(logging.WARNING, logger="asyncio"):
            server.transport.close()
            await client.eof
            assert await client.lost is None
        assert "returning true from eof_received() has no effect when using ssl" in caplog.text
        await pair.close()

    run(loop, main())


def test_abort(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        server.transport.pause_reading()
        tr.write(b"x" * 2_000_000)
        tr.abort()
        assert tr.is_closing()
        assert await client.lost is None
        assert tr.get_write_buffer_size() == 0
        server.transport.resume_reading()
        exc = await server.lost  # an EOF without close_notify, or a reset
        assert exc is None or isinstance(exc, ConnectionError), exc
        await pair.close()

    run(loop, main())


def test_shutdown_timeout(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs, client_kwargs={"ssl_shutdown_timeout": 0.1})
        tr, client = await pair.connect()
        await pair.server_app()
        # The server's socket stays open but nobody answers close_notify.
        hole = BlackHole()
        plain = pair.server_tls[0]._transport if pair.server_tls else None
        if plain is None:
            plain = underlying(pair.server_apps[0].transport)
        plain.set_protocol(hole)
        start = loop.time()
        tr.close()
        exc = await client.lost
        assert isinstance(exc, TimeoutError) and str(exc) == "SSL shutdown timed out"
        assert 0.09 <= loop.time() - start < 2
        assert hole.received > 0  # our close_notify
        pair.server_apps[0].transport.abort()  # closes `plain`
        pair.server_apps.clear()
        await pair.close()

    run(loop, main())


def _sslproto_times_out_after_eof() -> bool:
    """Whether asyncio's sslproto keeps ssl_shutdown_timeout running until the
    stream transport is gone (CPython 3.14; 3.11 to 3.13 cancel it first)."""
    from asyncio import sslproto

    return "call_later" in inspect.getsource(sslproto.SSLProtocol._on_shutdown_complete)


@pytest.mark.parametrize("close_first", [True, False], ids=["close-then-eof", "eof-only"])
def test_shutdown_timeout_after_eof_from_peer_not_reading(
    loop: Any, certs: Certs, mode: str, close_first: bool
) -> None:
    """The peer sends EOF and never reads what we still have to send: the
    stream transport's close() cannot flush, and ssl_shutdown_timeout ends it."""

    async def main() -> None:
        pair = Pair(loop, mode, certs, client_kwargs={"ssl_shutdown_timeout": 0.1})
        tr, client = await pair.connect()
        server = await pair.server_app()
        shrink_socket_buffers(tr, server.transport)
        server.transport.pause_reading()
        chunk = b"x" * 256 * 1024
        for _ in range(64):
            if client.pauses:
                break
            tr.write(chunk)
            await asyncio.sleep(0.01)
        assert client.pauses, "the transport never paused writing"
        if close_first:
            tr.close()
        underlying(server.transport).write_eof()  # EOF without close_notify
        done, _ = await asyncio.wait([client.lost], timeout=1.0)
        if ours(loop, mode) or _sslproto_times_out_after_eof():
            assert done, "ssl_shutdown_timeout did not end the connection"
            exc = client.lost.result()
            assert isinstance(exc, TimeoutError) and str(exc) == "SSL shutdown timed out"
        else:
            assert not done  # asyncio before 3.14: open until aborted
            tr.abort()
            await client.lost
        server.transport.abort()
        await server.lost
        pair.client_transport = None
        pair.server_apps.clear()
        await pair.close()

    run(loop, main())


def _stdlib_loses_connection_once() -> bool:
    """Whether asyncio's socket transport survives a protocol that closes it
    from resume_writing() (gh-156512: CPython 3.14.x and later)."""
    from asyncio import selector_events

    return "gh-156512" in inspect.getsource(selector_events)


class AbortOnResume(Recorder):
    """Aborts its transport from resume_writing()."""

    def resume_writing(self) -> None:
        super().resume_writing()
        self.transport.abort()


def test_abort_from_resume_writing(loop: Any, certs: Certs, mode: str, errors: Any) -> None:
    """The application aborts from resume_writing(), which the stream
    transport calls as its buffer drains: connection_lost comes once."""
    stdlib_transport = mode == "upgrade" and isinstance(loop, asyncio.BaseEventLoop)
    if stdlib_transport and not _stdlib_loses_connection_once():
        pytest.skip("asyncio's socket transport before gh-156512 loses the connection twice")

    async def main() -> None:
        client = AbortOnResume(loop)
        pair = Pair(loop, mode, certs, client_factory=lambda: client)
        tr, _ = await pair.connect()
        server = await pair.server_app()
        shrink_socket_buffers(tr, server.transport)
        tr.set_write_buffer_limits(high=0)
        server.transport.pause_reading()
        for _ in range(64):
            if client.pauses:
                break
            tr.write(b"x" * 256 * 1024)
            await asyncio.sleep(0.01)
        assert client.pauses == 1
        server.transport.resume_reading()
        assert await client.lost is None
        assert client.resumes == 1
        for _ in range(5):
            await asyncio.sleep(0)
        pair.client_transport = None
        await pair.close()

    run(loop, main())
    assert not errors.contexts, errors.contexts


def test_unexpected_eof(loop: Any, certs: Certs, mode: str) -> None:
    """The peer closes TCP without close_notify, after sending data."""

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        _, client = await pair.connect()
        server = await pair.server_app()
        server.transport.write(b"last words")
        plain = underlying(server.transport)
        plain.close()  # flushes the record, then FIN; no close_notify
        await client.eof
        assert bytes(client.data) == b"last words"
        assert await client.lost is None
        pair.server_apps.clear()
        await pair.close()

    run(loop, main())


def test_unexpected_eof_while_paused(loop: Any, certs: Certs, mode: str) -> None:
    """Data that arrived before the EOF is delivered once the reader resumes."""

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        tr.pause_reading()
        server.transport.write(b"before eof")
        await asyncio.sleep(0.02)
        underlying(server.transport).close()
        await asyncio.sleep(0.02)
        assert client.state == "CONNECTED" and not client.data
        tr.resume_reading()
        await client.eof
        assert bytes(client.data) == b"before eof"
        assert await client.lost is None
        pair.server_apps.clear()
        await pair.close()

    run(loop, main())


def test_peer_reset(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        sock = underlying(server.transport).get_extra_info("socket")
        sock.setsockopt(
            __import__("socket").SOL_SOCKET, __import__("socket").SO_LINGER, b"\1\0\0\0\0\0\0\0"
        )
        tr.write(b"x")  # unread by the server: close() then sends RST
        await server.wait_bytes(1)
        underlying(server.transport).abort()
        exc = await client.lost
        assert exc is None or isinstance(exc, ConnectionResetError), exc
        pair.server_apps.clear()
        await pair.close()

    run(loop, main())


def test_corrupted_record(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        _, client = await pair.connect()
        server = await pair.server_app()
        underlying(server.transport).write(b"please corrupt the TLS connection")
        exc = await client.lost
        assert isinstance(exc, ssl.SSLError), exc
        await pair.close()

    run(loop, main())


class Faulty(Recorder):
    """Raises from the callback named ``fail``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fail: str) -> None:
        super().__init__(loop)
        self.fail = fail

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.fail == "data_received":
            raise ZeroDivisionError("data_received")

    def eof_received(self) -> bool | None:
        super().eof_received()
        if self.fail == "eof_received":
            raise ZeroDivisionError("eof_received")
        return None

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.fail == "pause_writing":
            raise ZeroDivisionError("pause_writing")

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.fail == "resume_writing":
            raise ZeroDivisionError("resume_writing")


@pytest.mark.parametrize(
    ("fail", "message"),
    [
        ("data_received", "Fatal error on SSL protocol"),
        ("eof_received", "Error calling eof_received()"),
        ("pause_writing", "protocol.pause_writing() failed"),
        ("resume_writing", "protocol.resume_writing() failed"),
    ],
)
def test_app_callback_raises(
    loop: Any, certs: Certs, mode: str, errors: Any, fail: str, message: str
) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs, client_factory=lambda: Faulty(loop, fail))
        tr, client = await pair.connect()
        server = await pair.server_app()
        if fail == "data_received":
            server.transport.write(b"boom")
            exc = await client.lost
            assert isinstance(exc, ZeroDivisionError)
        elif fail == "eof_received":
            server.transport.close()
            exc = await client.lost
            assert isinstance(exc, ZeroDivisionError)
        else:
            tr.set_write_buffer_limits(high=0)
            shrink_socket_buffers(tr, server.transport)
            server.transport.pause_reading()
            while not client.pauses:
                tr.write(b"x" * 100_000)
                await asyncio.sleep(0.001)
            server.transport.resume_reading()
            while not client.resumes:
                await asyncio.sleep(0.001)
            # Only reported: the connection goes on.
            assert not tr.is_closing()
        context = errors.pop(message)
        assert isinstance(context["exception"], ZeroDivisionError)
        await pair.close()

    run(loop, main())
    if not ours(loop, mode):
        # asyncio's ">= high" check with high=0 pauses and resumes on
        # alternate calls, so it reports more than once.
        while any(message == c["message"] for c in errors.contexts):
            errors.pop(message)


def test_empty_buffer_from_get_buffer(loop: Any, certs: Certs, mode: str, errors: Any) -> None:
    # asyncio's sslproto reads 0 bytes into it and takes that for close_notify.
    require_ours(loop, mode)

    async def main() -> None:
        pair = Pair(loop, mode, certs, client_factory=lambda: BufferedRecorder(loop, 0, view=True))
        _, client = await pair.connect()
        server = await pair.server_app()
        server.transport.write(b"data")
        exc = await client.lost
        assert isinstance(exc, RuntimeError) and "empty buffer" in str(exc)
        errors.pop("Fatal error on SSL protocol")
        await pair.close()

    run(loop, main())


def test_buffered_to_plain_mid_batch(loop: Any, certs: Certs, mode: str) -> None:

    class SwitchOnFirst(BufferedRecorder):
        def buffer_updated(self, nbytes: int) -> None:
            super().buffer_updated(nbytes)
            if self.next is not None:
                nxt, self.next = self.next, None
                nxt.connection_made(self.transport)
                self.transport.set_protocol(nxt)

    async def main() -> None:
        first = SwitchOnFirst(loop, 10, view=True)
        second = Recorder(loop)
        first.next = second  # type: ignore[attr-defined]
        pair = Pair(loop, mode, certs, client_factory=lambda: first)
        await pair.connect()
        server = await pair.server_app()
        server.transport.write(b"0123456789abcdefghij")  # one record
        assert await second.wait_bytes(10) == b"abcdefghij"
        assert bytes(first.data) == b"0123456789"
        pair.client = second
        await pair.close()

    SwitchOnFirst.next = None  # type: ignore[attr-defined]
    run(loop, main())


def test_garbage_during_shutdown(loop: Any, certs: Certs, mode: str) -> None:
    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        server = await pair.server_app()
        plain = underlying(server.transport)
        plain.set_protocol(BlackHole())
        tr.close()
        await asyncio.sleep(0.01)
        plain.write(b"not a TLS record at all")
        exc = await client.lost
        assert isinstance(exc, ssl.SSLError), exc
        server.transport.abort()
        pair.server_apps.clear()
        await pair.close()

    run(loop, main())


def test_force_close(loop: Any, certs: Certs, mode: str) -> None:
    # What a protocol stacked on the TLS transport (TLS in TLS) does on a fatal error.
    require_ours(loop, mode)

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        tr, client = await pair.connect()
        error = ConnectionAbortedError("stacked protocol failed")
        tr._force_close(error)
        assert tr.is_closing()
        assert await client.lost is error
        await pair.close()

    run(loop, main())


# ------------------------------------------------------------------ start_tls


class LineProtocol(asyncio.Protocol):
    """A STARTTLS-style line protocol; records lines and the transports it saw."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: Any = None
        self.made = 0
        self.lines: asyncio.Queue[bytes] = asyncio.Queue()
        self.buf = b""
        self.lost = loop.create_future()

    def connection_made(self, transport: Any) -> None:
        self.made += 1
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            self.lines.put_nowait(line)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


def _loop_start_tls(loop: Any, use_loop_method: bool) -> Any:
    if use_loop_method:
        return loop.start_tls
    return lambda *args, **kwargs: tls.start_tls(loop, *args, **kwargs)


@pytest.mark.parametrize("via", ["tls.start_tls", "loop.start_tls"])
def test_starttls_both_sides(loop: Any, certs: Certs, via: str) -> None:
    use_loop = via == "loop.start_tls"
    start_tls = _loop_start_tls(loop, use_loop)

    async def main() -> None:
        server_protos: list[LineProtocol] = []
        upgraded: asyncio.Future[Any] = loop.create_future()

        def factory() -> LineProtocol:
            proto = LineProtocol(loop)
            server_protos.append(proto)
            return proto

        async def serve(proto: LineProtocol) -> None:
            assert await proto.lines.get() == b"STARTTLS"
            proto.transport.write(b"GO\n")
            new = await start_tls(proto.transport, proto, certs.server_context(), server_side=True)
            proto.transport = new
            upgraded.set_result(new)
            line = await proto.lines.get()
            new.write(b"secret reply to " + line + b"\n")

        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, client = await loop.create_connection(lambda: LineProtocol(loop), "127.0.0.1", port)
        while not server_protos:
            await asyncio.sleep(0)
        task = loop.create_task(serve(server_protos[0]))
        tr.write(b"STARTTLS\n")
        assert await client.lines.get() == b"GO"
        new_tr = await start_tls(tr, client, certs.client_context(), server_hostname="localhost")
        assert new_tr is not tr
        if use_loop and not isinstance(loop, asyncio.BaseEventLoop):
            assert isinstance(new_tr, tls.SSLTransport)
        assert new_tr.get_protocol() is client
        assert new_tr.get_extra_info("peercert") is not None
        new_tr.write(b"hello\n")
        assert await client.lines.get() == b"secret reply to hello"
        await task
        assert client.made == 1 and server_protos[0].made == 1  # no second connection_made
        server_tr = await upgraded
        new_tr.close()
        assert await client.lost is None
        assert await server_protos[0].lost is None
        assert server_tr.is_closing()
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_starttls_plaintext_in_flight(loop: Any, certs: Certs) -> None:
    """Plaintext written before the upgrade is not mistaken for TLS."""

    async def main() -> None:
        pair_server: list[LineProtocol] = []

        def factory() -> LineProtocol:
            proto = LineProtocol(loop)
            pair_server.append(proto)
            return proto

        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, client = await loop.create_connection(lambda: LineProtocol(loop), "127.0.0.1", port)
        tr.write(b"x" * 100_000 + b"\n")  # still in flight while the server upgrades
        while not pair_server:
            await asyncio.sleep(0)
        sproto = pair_server[0]
        assert len(await sproto.lines.get()) == 100_000
        server_task = loop.create_task(
            tls.start_tls(loop, sproto.transport, sproto, certs.server_context(), server_side=True)
        )
        new_tr = await tls.start_tls(
            loop, tr, client, certs.client_context(), server_hostname="localhost"
        )
        server_tr = await server_task
        new_tr.write(b"after\n")
        assert await sproto.lines.get() == b"after"
        server_tr.close()
        assert await client.lost is None
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_starttls_handshake_failure_closes_transport(loop: Any, certs: Certs) -> None:
    async def main() -> None:
        server_protos: list[LineProtocol] = []

        def factory() -> LineProtocol:
            proto = LineProtocol(loop)
            server_protos.append(proto)
            return proto

        server = await loop.create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, client = await loop.create_connection(lambda: LineProtocol(loop), "127.0.0.1", port)
        while not server_protos:
            await asyncio.sleep(0)
        sproto = server_protos[0]
        server_task = loop.create_task(
            tls.start_tls(loop, sproto.transport, sproto, certs.server_context(), server_side=True)
        )
        with pytest.raises(ssl.SSLCertVerificationError):
            await tls.start_tls(
                loop, tr, client, certs.client_context(trusted=False), server_hostname="localhost"
            )
        assert tr.is_closing()
        with pytest.raises(ssl.SSLError):
            await server_task
        # Both application protocols were connected (by the plain transports),
        # so both hear connection_lost.
        assert isinstance(await client.lost, ssl.SSLError)
        assert isinstance(await sproto.lost, ssl.SSLError)
        server.close()
        await server.wait_closed()

    run(loop, main())


def _stdlib_start_tls_takes_reader_buffer() -> bool:
    """Whether asyncio's start_tls hands a StreamReader's buffered bytes to
    the TLS layer (gh-142352: CPython 3.13.x and later)."""
    return "_stream_reader" in inspect.getsource(asyncio.base_events.BaseEventLoop.start_tls)


def test_starttls_server_with_hello_already_read(loop: Any, certs: Certs) -> None:
    """The client's ClientHello arrives before the server's start_tls() and
    sits in its StreamReader: the handshake must still see it."""
    if not ours(loop, "native") and not _stdlib_start_tls_takes_reader_buffer():
        pytest.skip(
            "asyncio before gh-142352 (3.11, 3.12.1) never hands it over: the handshake hangs"
        )
    server_done: asyncio.Future[Any] = loop.create_future()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.sleep(0.2)  # the ClientHello is read meanwhile
            await writer.start_tls(certs.server_context(), ssl_handshake_timeout=1.0)
            assert await reader.readline() == b"ping\n"
            writer.write(b"pong\n")
            await writer.drain()
            server_done.set_result(None)
        except BaseException as exc:
            server_done.set_exception(exc)
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = loop.create_task(
            writer.start_tls(certs.client_context(), server_hostname="localhost")
        )
        await client
        writer.write(b"ping\n")
        assert await reader.readline() == b"pong\n"
        await server_done
        writer.close()
        server.close()
        await server.wait_closed()

    run(loop, main())


def _wrap_bio_needs_server_hostname() -> bool:
    """Whether this interpreter's ``wrap_bio`` refuses a client context that
    checks host names when no name is given (CPython 3.13.x and later do;
    3.11, 3.12.1 and 3.13.0 let the handshake run without the name check)."""
    try:
        ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO())
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("via", ["tls.start_tls", "loop.start_tls"])
def test_starttls_without_server_hostname(loop: Any, certs: Certs, via: str) -> None:
    """A context that checks host names, and no name: what the ssl module does.

    Where ``wrap_bio`` refuses, start_tls() raises its ValueError before it
    touches the transport, which stays the caller's, as in asyncio; elsewhere
    the handshake runs (without the name check) and succeeds.
    """
    start_tls = _loop_start_tls(loop, via == "loop.start_tls")
    refuses = _wrap_bio_needs_server_hostname()

    async def main() -> None:
        server = await loop.create_server(
            lambda: Recorder(loop), "127.0.0.1", 0, ssl=certs.server_context()
        )
        port = server.sockets[0].getsockname()[1]
        tr, client = await loop.create_connection(lambda: Recorder(loop), "127.0.0.1", port)
        ctx = certs.client_context()
        assert ctx.check_hostname
        if refuses:
            with pytest.raises(ValueError, match="check_hostname requires server_hostname"):
                await start_tls(tr, client, ctx)
            assert not tr.is_closing()
            assert tr.get_protocol() is client
            tr.close()
        else:
            new_tr = await start_tls(tr, client, ctx)
            assert new_tr.get_extra_info("peercert") is not None
            new_tr.close()
        assert await client.lost is None
        server.close()
        await server.wait_closed()

    run(loop, main())


def test_tls_in_tls(loop: Any, certs: Certs, mode: str) -> None:
    """start_tls over a TLS transport (a TLS proxy tunnel, say)."""

    async def main() -> None:
        pair = Pair(loop, mode, certs)
        outer, client = await pair.connect()
        server = await pair.server_app()
        inner_server: asyncio.Task[Any] = loop.create_task(
            tls.start_tls(loop, server.transport, server, certs.server_context(), server_side=True)
        )
        inner = await tls.start_tls(
            loop, outer, client, certs.client_context(), server_hostname="localhost"
        )
        inner_server_tr = await inner_server
        inner.write(b"deep")
        assert await server.wait_bytes(4) == b"deep"
        inner_server_tr.write(b"er")
        assert await client.wait_bytes(2) == b"er"
        inner.close()
        assert await client.lost is None
        assert await server.lost is None
        pair.client_transport = None
        await pair.close()

    run(loop, main())


# ------------------------------------------------------------------ arguments


def test_argument_checks(loop: Any, certs: Certs) -> None:
    ctx = certs.client_context()
    proto = asyncio.Protocol()
    with pytest.raises(
        ValueError, match=r"^ssl_handshake_timeout should be a positive number, got 0$"
    ):
        tls.TLSProtocol(loop, proto, ctx, None, ssl_handshake_timeout=0)
    with pytest.raises(
        ValueError, match=r"^ssl_handshake_timeout should be a positive number, got -1$"
    ):
        tls.TLSProtocol(loop, proto, ctx, None, ssl_handshake_timeout=-1)
    with pytest.raises(
        ValueError, match=r"^ssl_shutdown_timeout should be a positive number, got 0$"
    ):
        tls.TLSProtocol(loop, proto, ctx, None, ssl_shutdown_timeout=0)
    with pytest.raises(ValueError, match="Server side SSL needs a valid SSLContext"):
        tls.TLSProtocol(loop, proto, None, None, server_side=True)
    # ssl=True on a client: a default context, host name checks only with a name.
    p = tls.TLSProtocol(loop, proto, None, None)
    assert p._sslcontext.verify_mode == ssl.CERT_REQUIRED and not p._sslcontext.check_hostname
    p._app_transport.close()
    # server_hostname is ignored on the server side, as in asyncio.
    p = tls.TLSProtocol(loop, proto, certs.server_context(), None, True, "ignored")
    assert p._server_hostname is None
    p._app_transport.close()

    async def start(*args: Any) -> Any:
        return await tls.start_tls(loop, *args)

    with pytest.raises(
        TypeError, match=r"^sslcontext is expected to be an instance of ssl\.SSLContext, got None$"
    ):
        loop.run_until_complete(start(None, None, None))
    with pytest.raises(TypeError, match=r"^transport None is not supported by start_tls\(\)$"):
        loop.run_until_complete(start(None, None, ctx))


def test_repr(loop: Any, certs: Certs) -> None:
    p = tls.TLSProtocol(loop, asyncio.Protocol(), certs.client_context(), None, server_hostname="x")
    assert repr(p) == "<TLSProtocol client UNWRAPPED>"
    assert repr(p._app_transport) == "<SSLTransport open UNWRAPPED>"
    p._app_transport.close()
    assert repr(p._app_transport) == "<SSLTransport closed UNWRAPPED>"


def test_unclosed_transport_warns(loop: Any, certs: Certs) -> None:
    p = tls.TLSProtocol(loop, asyncio.Protocol(), certs.client_context(), None, server_hostname="x")
    with pytest.warns(ResourceWarning, match="unclosed transport <SSLTransport open"):
        p._app_transport.__del__()
