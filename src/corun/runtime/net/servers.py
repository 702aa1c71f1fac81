"""Listening sockets: the accept loop and the ``Server`` object.

The accept loop runs on the listening socket's readiness and accepts up to
``backlog`` connections per event, so one busy listener cannot hold the loop
for long. A plain connection gets its transport at once, in the same
callback: no task per connection. A TLS connection needs its handshake, so
its waiter gets a done callback that closes it if the handshake fails.

When ``accept()`` fails for lack of resources (EMFILE, ENFILE, ENOBUFS,
ENOMEM), the pending connection stays in the kernel's queue and the socket
stays readable: retrying at once would spin at 100% CPU. Instead the loop
reports the error, stops watching the socket, and tries again after
``ACCEPT_RETRY_DELAY`` seconds, by when some fds have usually been freed.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import socket
import sys
import weakref
from asyncio import trsock
from collections.abc import Callable, Iterable
from typing import Any, Final

from corun.runtime._constants import logger
from corun.runtime.engine.futures import Future
from corun.runtime.engine.loop_core import LoopCore, as_asyncio_loop
from corun.runtime.net.connect import make_tls_transport, set_reuseport
from corun.runtime.net.dns import ensure_resolved
from corun.runtime.net.sockets import (
    check_not_ssl_socket,
    check_unix_stream_socket,
    remove_stale_unix_socket,
)
from corun.runtime.transports.stream import StreamTransport

# Python 3.12.1 made wait_closed() wait for the connections of a closed server.
_WAIT_FOR_CONNECTIONS: Final = sys.version_info >= (3, 12, 1)

# gh-123720: serve_forever(), when cancelled, closes the server's connections
# before waiting for them, or a silent client would hold wait_closed() forever.
# Measured: absent from 3.12.1 and 3.13.0, present in 3.13.18, 3.14 and 3.15.
_SERVE_FOREVER_CLOSES_CLIENTS: Final = sys.version_info >= (3, 13, 1)

# Python 3.13 removes a Unix server's socket file when the server closes
# (create_unix_server(cleanup_socket=True), the default there); earlier
# versions leave it, so that is corun's default on them too.
_UNIX_SOCKET_CLEANUP_DEFAULT: Final = sys.version_info >= (3, 13)

#: Seconds to wait before accepting again after running out of fds.
ACCEPT_RETRY_DELAY: Final = 1.0

_RESOURCE_ERRORS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class Server(asyncio.AbstractServer):
    """A listening server, returned by ``create_server`` and ``create_unix_server``."""

    def __init__(
        self,
        loop: LoopCore,
        sockets: list[socket.socket],
        protocol_factory: ProtocolFactory,
        ssl_context: Any,
        backlog: int,
        ssl_handshake_timeout: float | None,
        ssl_shutdown_timeout: float | None = None,
    ) -> None:
        # Invariant: _sockets is None once closed. _active_count is the
        # number of live transports attached to this server; _waiters is
        # None once the server is closed and every transport has gone.
        self._loop = loop
        self._sockets: list[socket.socket] | None = sockets
        self._active_count: int = 0
        self._waiters: list[Future] | None = []
        self._clients: weakref.WeakSet[Any] = weakref.WeakSet()
        self._protocol_factory = protocol_factory
        self._backlog = backlog
        self._ssl_context = ssl_context
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._ssl_shutdown_timeout = ssl_shutdown_timeout
        self._serving: bool = False
        self._serving_forever_fut: Future | None = None
        # (path, inode) of the socket file close() removes if it is still ours.
        self._unix_socket_file: tuple[str | bytes, int] | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} sockets={self.sockets!r}>"

    # The transport is optional as in asyncio up to 3.12, whose own tests
    # (TestServer2) count a connection in and out with _attach()/_detach().

    def _attach(self, transport: Any = None) -> None:
        assert self._sockets is not None
        self._active_count += 1
        if transport is not None:
            self._clients.add(transport)

    def _detach(self, transport: Any = None) -> None:
        assert self._active_count > 0
        self._active_count -= 1
        if transport is not None:
            self._clients.discard(transport)
        if self._active_count == 0 and self._sockets is None:
            self._wakeup()

    def _wakeup(self) -> None:
        waiters = self._waiters
        self._waiters = None
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _start_serving(self) -> None:
        if self._serving or self._sockets is None:
            return
        self._serving = True
        for sock in self._sockets:
            sock.listen(self._backlog)
            self._watch(sock)

    def _watch(self, sock: socket.socket) -> None:
        self._loop._add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        loop = self._loop
        for _ in range(self._backlog):
            try:
                conn, addr = sock.accept()
                conn.setblocking(False)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # nothing more to accept now
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRORS:
                    raise  # the loop reports it; the listener stays up
                loop.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": exc,
                        "socket": trsock.TransportSocket(sock),
                    }
                )
                loop._remove_reader(sock.fileno())
                loop.call_later(ACCEPT_RETRY_DELAY, self._resume_accepting, sock)
                return
            self._connection_accepted(conn, addr)

    def _resume_accepting(self, sock: socket.socket) -> None:
        if self._sockets is not None and self._serving:
            self._watch(sock)

    def _connection_accepted(self, conn: socket.socket, addr: Any) -> None:
        loop = self._loop
        extra = {"peername": addr}
        try:
            protocol = self._protocol_factory()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            conn.close()
            loop.call_exception_handler(
                {"message": "Error on transport creation for incoming connection", "exception": exc}
            )
            return
        if self._ssl_context is None:
            StreamTransport(loop, conn, protocol, None, extra, server=self)
            return
        waiter: Future = loop.create_future()
        transport = make_tls_transport(
            loop,
            conn,
            protocol,
            self._ssl_context,
            waiter,
            server_side=True,
            extra=extra,
            server=self,
            ssl_handshake_timeout=self._ssl_handshake_timeout,
            ssl_shutdown_timeout=self._ssl_shutdown_timeout,
        )
        waiter.add_done_callback(_TLSAcceptWatcher(loop, transport, protocol).done)

    # --- the asyncio.AbstractServer API ----------------------------------------

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the server runs on."""
        return as_asyncio_loop(self._loop)

    def is_serving(self) -> bool:
        """Whether the server accepts connections."""
        return self._serving

    @property
    def sockets(self) -> tuple[trsock.TransportSocket, ...]:
        """The listening sockets (empty once closed)."""
        if self._sockets is None:
            return ()
        return tuple(trsock.TransportSocket(sock) for sock in self._sockets)

    def close(self) -> None:
        """Stop listening and close the listening sockets; connections stay open."""
        sockets = self._sockets
        if sockets is None:
            return
        self._sockets = None
        for sock in sockets:
            self._loop._remove_reader(sock.fileno())
            sock.close()
        self._remove_unix_socket_file()
        self._serving = False
        fut = self._serving_forever_fut
        if fut is not None and not fut.done():
            fut.cancel()
            self._serving_forever_fut = None
        if self._active_count == 0:
            self._wakeup()

    def _remove_unix_socket_file(self) -> None:
        owned = self._unix_socket_file
        if owned is None:
            return
        self._unix_socket_file = None
        path, inode = owned
        # On the loop's thread, as asyncio does: close() is synchronous and the
        # file must be gone when it returns (one stat and one unlink, local).
        try:
            # Someone may have removed the file, or bound a new socket there.
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.error("Unable to clean up listening UNIX socket %r: %r", path, exc)

    def close_clients(self) -> None:
        """Close every connection this server accepted."""
        for transport in list(self._clients):
            transport.close()

    def abort_clients(self) -> None:
        """Abort every connection this server accepted."""
        for transport in list(self._clients):
            transport.abort()

    async def start_serving(self) -> None:
        """Start accepting connections (if ``start_serving=False`` was given)."""
        self._start_serving()
        # Let the registrations take effect before returning, as asyncio does.
        await asyncio.sleep(0)

    async def serve_forever(self) -> None:
        """Accept connections until cancelled; then close the server."""
        if self._serving_forever_fut is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._sockets is None:
            raise RuntimeError(f"server {self!r} is closed")
        self._start_serving()
        self._serving_forever_fut = self._loop.create_future()
        try:
            await self._serving_forever_fut
        except asyncio.CancelledError:
            try:
                self.close()
                if _SERVE_FOREVER_CLOSES_CLIENTS:
                    self.close_clients()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever_fut = None

    async def wait_closed(self) -> None:
        """Wait until the server is closed and all its connections are gone.

        On Python 3.11 and 3.12.0 it returns at once when the server is closed
        already, as asyncio did there; later versions wait for connections.
        """
        if self._waiters is None or (self._sockets is None and not _WAIT_FOR_CONNECTIONS):
            return
        waiter: Future = self._loop.create_future()
        self._waiters.append(waiter)
        await waiter


class _TLSAcceptWatcher:
    """Closes an accepted TLS connection whose handshake failed."""

    __slots__ = ("loop", "protocol", "transport")

    def __init__(self, loop: LoopCore, transport: Any, protocol: Any) -> None:
        self.loop = loop
        self.transport = transport
        self.protocol = protocol

    def done(self, waiter: Future) -> None:
        if waiter.cancelled():
            self.transport.close()
            return
        exc = waiter.exception()
        if exc is None:
            return
        self.transport.close()
        if self.loop.get_debug():
            # A failed handshake is the client's doing; asyncio reports it
            # only in debug mode, and so do we.
            self.loop.call_exception_handler(
                {
                    "message": "Error on transport creation for incoming connection",
                    "exception": exc,
                    "protocol": self.protocol,
                    "transport": self.transport,
                }
            )
        else:
            logger.debug("TLS handshake failed for an incoming connection: %r", exc)


def _inode_of(path: str | bytes) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _check_server_ssl(
    ssl: Any, ssl_handshake_timeout: object, ssl_shutdown_timeout: object
) -> None:
    if isinstance(ssl, bool):
        raise TypeError("ssl argument must be an SSLContext or None")
    if ssl_handshake_timeout is not None and ssl is None:
        raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
    if ssl_shutdown_timeout is not None and ssl is None:
        raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")


async def _server_addrinfos(
    loop: LoopCore, host: Any, port: Any, family: int, flags: int
) -> list[Any]:
    infos = await ensure_resolved(
        loop, (host, port), family=family, type=socket.SOCK_STREAM, flags=flags
    )
    if not infos:
        raise OSError(f"getaddrinfo({host!r}) returned empty list")
    return infos


async def create_server(
    loop: LoopCore,
    protocol_factory: ProtocolFactory,
    host: Any = None,
    port: Any = None,
    *,
    family: int = socket.AF_UNSPEC,
    flags: int = socket.AI_PASSIVE,
    sock: socket.socket | None = None,
    backlog: int = 100,
    ssl: Any = None,
    reuse_address: bool | None = None,
    reuse_port: bool | None = None,
    keep_alive: bool | None = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
    start_serving: bool = True,
) -> Server:
    """``loop.create_server``: listen on every address ``host`` resolves to.

    ``keep_alive`` (as in Python 3.13) sets ``SO_KEEPALIVE`` on the listening
    sockets, which their accepted connections inherit.
    """
    _check_server_ssl(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)
    if sock is not None:
        check_not_ssl_socket(sock)
    if host is not None or port is not None:
        if sock is not None:
            raise ValueError("host/port and sock can not be specified at the same time")
        if reuse_address is None:
            reuse_address = True  # POSIX: restarting servers must not hit TIME_WAIT
        if host == "":
            hosts: list[Any] = [None]
        elif isinstance(host, str) or not isinstance(host, Iterable):
            hosts = [host]
        else:
            hosts = list(host)
        resolved = await asyncio.gather(
            *[_server_addrinfos(loop, h, port, family, flags) for h in hosts]
        )
        infos = set(itertools.chain.from_iterable(resolved))
        sockets: list[socket.socket] = []
        completed = False
        try:
            for af, socktype, proto, _, sa in infos:
                try:
                    listener = socket.socket(af, socktype, proto)
                except OSError:
                    # An address family the kernel does not support.
                    if loop.get_debug():
                        logger.warning(
                            "create_server() failed to create socket.socket(%r, %r, %r)",
                            af,
                            socktype,
                            proto,
                            exc_info=True,
                        )
                    continue
                sockets.append(listener)
                if reuse_address:
                    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, True)
                if reuse_port:
                    set_reuseport(listener)
                if keep_alive:
                    listener.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, True)
                if af == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    # Each family gets its own socket; v6 must not grab v4 too.
                    listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, True)
                try:
                    listener.bind(sa)
                except OSError as err:
                    strerror = (err.strerror or str(err)).lower()
                    msg = f"error while attempting to bind on address {sa!r}: {strerror}"
                    if err.errno == errno.EADDRNOTAVAIL:
                        # The family is not enabled on this host (bpo-30945).
                        sockets.pop()
                        listener.close()
                        if loop.get_debug():
                            logger.warning(msg)
                        continue
                    raise OSError(err.errno, msg) from None
            if not sockets:
                addresses = [info[4] for info in infos]
                raise OSError(f"could not bind on any address out of {addresses!r}")
            completed = True
        finally:
            if not completed:
                for listener in sockets:
                    listener.close()
    else:
        if sock is None:
            raise ValueError("Neither host/port nor sock were specified")
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
        sockets = [sock]
    for listener in sockets:
        listener.setblocking(False)
    server = Server(
        loop,
        sockets,
        protocol_factory,
        ssl,
        backlog,
        ssl_handshake_timeout,
        ssl_shutdown_timeout,
    )
    if start_serving:
        await server.start_serving()
    if loop.get_debug():
        logger.info("%r is serving", server)
    return server


async def create_unix_server(
    loop: LoopCore,
    protocol_factory: ProtocolFactory,
    path: Any = None,
    *,
    sock: socket.socket | None = None,
    backlog: int = 100,
    ssl: Any = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
    start_serving: bool = True,
    cleanup_socket: bool = _UNIX_SOCKET_CLEANUP_DEFAULT,
) -> Server:
    """``loop.create_unix_server``; a stale socket file at ``path`` is replaced.

    With ``cleanup_socket`` (Python 3.13's parameter, and its default from
    3.13 on) closing the server removes the socket file, ``path``'s or
    ``sock``'s, unless it was removed or replaced by another in the meantime.
    """
    _check_server_ssl(ssl, ssl_handshake_timeout, ssl_shutdown_timeout)
    if path is not None:
        if sock is not None:
            raise ValueError("path and sock can not be specified at the same time")
        path = os.fspath(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if path[0] not in (0, "\x00"):  # not an abstract socket
            await remove_stale_unix_socket(loop, path)
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise OSError(errno.EADDRINUSE, f"Address {path!r} is already in use") from None
            raise
        except BaseException:
            sock.close()
            raise
    else:
        if sock is None:
            raise ValueError("path was not specified, and no sock specified")
        check_unix_stream_socket(sock)
    owned: tuple[str | bytes, int] | None = None
    if cleanup_socket:
        name = sock.getsockname()
        if name and name[0] not in (0, "\x00"):  # a file, not an abstract name
            inode = await as_asyncio_loop(loop).run_in_executor(None, _inode_of, name)
            if inode is not None:
                owned = (name, inode)
    sock.setblocking(False)
    server = Server(
        loop, [sock], protocol_factory, ssl, backlog, ssl_handshake_timeout, ssl_shutdown_timeout
    )
    server._unix_socket_file = owned
    if start_serving:
        await server.start_serving()
    return server
