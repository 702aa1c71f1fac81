"""Making connections: ``create_connection`` and the other transport factories.

``create_connection`` resolves the host, then tries the addresses in turn, or,
with ``happy_eyeballs_delay``, races them RFC 8305 style: the next attempt
starts when the previous one has not connected within the delay, and the
first to connect wins. ``interleave`` reorders the addresses so that address
families alternate.

Every factory creates the socket non-blocking and hands it to a transport
along with a waiter future; it returns once the protocol's
``connection_made`` has run (for TLS: once the handshake completed), and
closes the socket if anything fails before that.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import os
import socket
import ssl as ssl_module
from asyncio import staggered
from collections.abc import Callable, Iterable
from typing import Any, Final

from corun.runtime._constants import logger
from corun.runtime.engine.futures import Future
from corun.runtime.engine.loop_core import LoopCore, as_asyncio_loop
from corun.runtime.net.dns import AddrInfo, ensure_resolved
from corun.runtime.net.sockets import (
    check_not_ssl_socket,
    check_unix_stream_socket,
    remove_stale_unix_socket,
    sock_connect,
)
from corun.runtime.transports.datagram import DatagramTransport
from corun.runtime.transports.stream import StreamTransport
from corun.runtime.transports.tls import TLSProtocol, default_client_context

ProtocolFactory = Callable[[], asyncio.BaseProtocol]


def make_tls_transport(
    loop: LoopCore,
    rawsock: socket.socket,
    protocol: asyncio.BaseProtocol,
    sslcontext: ssl_module.SSLContext | None,
    waiter: Future,
    *,
    server_side: bool = False,
    server_hostname: str | None = None,
    extra: dict[str, Any] | None = None,
    server: Any = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
) -> asyncio.Transport:
    """A TLS transport over ``rawsock``; ``waiter`` completes after the handshake."""
    if sslcontext is None:
        sslcontext = default_client_context(server_hostname)
    tls_protocol = TLSProtocol(
        as_asyncio_loop(loop),
        protocol,
        sslcontext,
        waiter,
        server_side,
        server_hostname,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout,
    )
    StreamTransport(loop, rawsock, tls_protocol, extra=extra, server=server)
    return tls_protocol._app_transport  # type: ignore[no-any-return]


async def connect_transport(
    loop: LoopCore,
    sock: socket.socket,
    protocol_factory: ProtocolFactory,
    ssl: Any,
    server_hostname: str | None,
    *,
    server_side: bool = False,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
    """Wrap a connected socket in a (TLS) transport; wait for connection_made."""
    sock.setblocking(False)
    protocol = protocol_factory()
    waiter: Future = loop.create_future()
    transport: asyncio.Transport
    if ssl:
        sslcontext = None if isinstance(ssl, bool) else ssl
        transport = make_tls_transport(
            loop,
            sock,
            protocol,
            sslcontext,
            waiter,
            server_side=server_side,
            server_hostname=server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
    else:
        transport = StreamTransport(loop, sock, protocol, waiter)
    try:
        await waiter
    except BaseException:
        transport.close()
        raise
    finally:
        del waiter  # it holds the exception, whose traceback holds this frame
    return transport, protocol


def _check_ssl_args(
    ssl: Any,
    server_hostname: object,
    ssl_handshake_timeout: object,
    ssl_shutdown_timeout: object,
) -> None:
    if server_hostname is not None and not ssl:
        raise ValueError("server_hostname is only meaningful with ssl")
    if ssl_handshake_timeout is not None and not ssl:
        raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
    if ssl_shutdown_timeout is not None and not ssl:
        raise ValueError("ssl_shutdown_timeout is only meaningful with ssl")


def interleave_addrinfos(
    addrinfos: Iterable[AddrInfo], first_address_family_count: int = 1
) -> list[AddrInfo]:
    """Reorder addresses so families alternate, the first family first (RFC 8305)."""
    by_family: dict[int, list[AddrInfo]] = collections.OrderedDict()
    for info in addrinfos:
        by_family.setdefault(info[0], []).append(info)
    lists = list(by_family.values())
    reordered: list[AddrInfo] = []
    if first_address_family_count > 1:
        reordered.extend(lists[0][: first_address_family_count - 1])
        del lists[0][: first_address_family_count - 1]
    reordered.extend(
        info for info in itertools.chain.from_iterable(itertools.zip_longest(*lists)) if info
    )
    return reordered


async def _connect_sock(
    loop: LoopCore,
    exceptions: list[list[OSError]],
    addr_info: AddrInfo,
    local_addr_infos: list[AddrInfo] | None = None,
) -> socket.socket:
    """One connection attempt; its errors go to ``exceptions``."""
    mine: list[OSError] = []
    exceptions.append(mine)
    family, type_, proto, _, address = addr_info
    sock = None
    try:
        sock = socket.socket(family=family, type=type_, proto=proto)
        sock.setblocking(False)
        if local_addr_infos is not None:
            for lfamily, _, _, _, laddr in local_addr_infos:
                if lfamily != family:
                    continue
                try:
                    sock.bind(laddr)
                    break
                except OSError as exc:
                    strerror = (exc.strerror or str(exc)).lower()
                    msg = f"error while attempting to bind on address {laddr!r}: {strerror}"
                    mine.append(OSError(exc.errno, msg))
            else:
                if mine:
                    raise mine.pop()
                raise OSError(f"no matching local address with family={family} found")
        await sock_connect(loop, sock, address)
        return sock
    except OSError as exc:
        mine.append(exc)
        if sock is not None:
            sock.close()
        raise
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    finally:
        # The lists hold the exception, whose traceback holds this frame.
        del mine, exceptions


async def create_connection(
    loop: LoopCore,
    protocol_factory: ProtocolFactory,
    host: str | None = None,
    port: int | str | None = None,
    *,
    ssl: Any = None,
    family: int = 0,
    proto: int = 0,
    flags: int = 0,
    sock: socket.socket | None = None,
    local_addr: tuple[str, int] | None = None,
    server_hostname: str | None = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
    happy_eyeballs_delay: float | None = None,
    interleave: int | None = None,
    all_errors: bool = False,
) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
    """``loop.create_connection``: see asyncio's documentation, which it follows."""
    if server_hostname is None and ssl:
        if not host:
            raise ValueError("You must set server_hostname when using ssl without a host")
        server_hostname = host
    _check_ssl_args(ssl, server_hostname, ssl_handshake_timeout, ssl_shutdown_timeout)
    if sock is not None:
        check_not_ssl_socket(sock)
    if happy_eyeballs_delay is not None and interleave is None:
        interleave = 1  # RFC 8305: interleave families when racing
    if host is not None or port is not None:
        if sock is not None:
            raise ValueError("host/port and sock can not be specified at the same time")
        infos = await ensure_resolved(
            loop, (host, port), family=family, type=socket.SOCK_STREAM, proto=proto, flags=flags
        )
        if not infos:
            raise OSError("getaddrinfo() returned empty list")
        laddr_infos = None
        if local_addr is not None:
            laddr_infos = await ensure_resolved(
                loop, local_addr, family=family, type=socket.SOCK_STREAM, proto=proto, flags=flags
            )
            if not laddr_infos:
                raise OSError("getaddrinfo() returned empty list")
        if interleave:
            infos = interleave_addrinfos(infos, interleave)
        exceptions: list[list[OSError]] = []
        if happy_eyeballs_delay is None:
            for addr_info in infos:
                try:
                    sock = await _connect_sock(loop, exceptions, addr_info, laddr_infos)
                    break
                except OSError:
                    continue
        else:
            sock, _, raced = await staggered.staggered_race(
                (
                    functools.partial(_connect_sock, loop, exceptions, addr_info, laddr_infos)
                    for addr_info in infos
                ),
                happy_eyeballs_delay,
                loop=as_asyncio_loop(loop),
            )
            # asyncio's race keeps the errors in this list, which its frames
            # (in the errors' tracebacks) hold: a cycle. Ours are in exceptions.
            raced.clear()
        if sock is None:
            errors = [exc for attempt in exceptions for exc in attempt]
            try:
                if all_errors:
                    raise ExceptionGroup("create_connection failed", errors)
                if len(errors) == 1:
                    raise errors[0]
                model = str(errors[0])
                if all(str(exc) == model for exc in errors):
                    raise errors[0]
                raise OSError(
                    "Multiple exceptions: {}".format(", ".join(str(exc) for exc in errors))
                )
            finally:
                # The exceptions' tracebacks reference this frame, and the
                # attempts (which the race still holds) reference these lists.
                errors.clear()
                exceptions.clear()
    else:
        if sock is None:
            raise ValueError("host and port was not specified and no sock specified")
        if sock.type != socket.SOCK_STREAM:
            raise ValueError(f"A Stream Socket was expected, got {sock!r}")
    transport, protocol = await connect_transport(
        loop,
        sock,
        protocol_factory,
        ssl,
        server_hostname,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout,
    )
    if loop.get_debug():
        logger.debug("%r connected to %s:%r: (%r, %r)", sock, host, port, transport, protocol)
    return transport, protocol


async def create_unix_connection(
    loop: LoopCore,
    protocol_factory: ProtocolFactory,
    path: str | bytes | os.PathLike[str] | None = None,
    *,
    ssl: Any = None,
    sock: socket.socket | None = None,
    server_hostname: str | None = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
    """``loop.create_unix_connection``."""
    if ssl:
        if server_hostname is None:
            raise ValueError("you have to pass server_hostname when using ssl")
    else:
        _check_ssl_args(ssl, server_hostname, ssl_handshake_timeout, ssl_shutdown_timeout)
    if path is not None:
        if sock is not None:
            raise ValueError("path and sock can not be specified at the same time")
        path = os.fspath(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
        try:
            sock.setblocking(False)
            await sock_connect(loop, sock, path)
        except BaseException:
            sock.close()
            raise
    else:
        if sock is None:
            raise ValueError("no path and sock were specified")
        check_unix_stream_socket(sock)
        sock.setblocking(False)
    return await connect_transport(
        loop,
        sock,
        protocol_factory,
        ssl,
        server_hostname,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout,
    )


async def connect_accepted_socket(
    loop: LoopCore,
    protocol_factory: ProtocolFactory,
    sock: socket.socket,
    *,
    ssl: Any = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
    """``loop.connect_accepted_socket``: a transport for a socket accepted elsewhere."""
    if sock.type != socket.SOCK_STREAM:
        raise ValueError(f"A Stream Socket was expected, got {sock!r}")
    _check_ssl_args(ssl, None, ssl_handshake_timeout, ssl_shutdown_timeout)
    check_not_ssl_socket(sock)
    return await connect_transport(
        loop,
        sock,
        protocol_factory,
        ssl,
        "",
        server_side=True,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout,
    )


def set_reuseport(sock: socket.socket) -> None:
    if not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("reuse_port not supported by socket module")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    except OSError:
        raise ValueError(
            "reuse_port not supported by socket module, SO_REUSEPORT defined but not implemented."
        ) from None


_unset: Final = object()


async def create_datagram_endpoint(
    loop: LoopCore,
    protocol_factory: ProtocolFactory,
    local_addr: Any = None,
    remote_addr: Any = None,
    *,
    family: int = 0,
    proto: int = 0,
    flags: int = 0,
    reuse_address: Any = _unset,
    reuse_port: bool | None = None,
    allow_broadcast: bool | None = None,
    sock: socket.socket | None = None,
) -> tuple[asyncio.DatagramTransport, asyncio.BaseProtocol]:
    """``loop.create_datagram_endpoint``."""
    if sock is not None:
        if sock.type == socket.SOCK_STREAM:
            raise ValueError(f"A datagram socket was expected, got {sock!r}")
        if local_addr or remote_addr or family or proto or flags or reuse_port or allow_broadcast:
            opts = {
                "local_addr": local_addr,
                "remote_addr": remote_addr,
                "family": family,
                "proto": proto,
                "flags": flags,
                "reuse_address": reuse_address,
                "reuse_port": reuse_port,
                "allow_broadcast": allow_broadcast,
            }
            problems = ", ".join(f"{k}={v}" for k, v in opts.items() if v)
            raise ValueError(
                f"socket modifier keyword arguments can not be used when sock is specified. "
                f"({problems})"
            )
        sock.setblocking(False)
        r_addr = None
    else:
        if not (local_addr or remote_addr):
            if family == 0:
                raise ValueError("unexpected address family")
            addr_pairs_info: list[tuple[tuple[int, int], tuple[Any, Any]]] = [
                ((family, proto), (None, None))
            ]
        elif hasattr(socket, "AF_UNIX") and family == socket.AF_UNIX:
            for addr in (local_addr, remote_addr):
                if addr is not None and not isinstance(addr, (str, bytes)):
                    raise TypeError("string is expected")
            if local_addr and local_addr[0] not in (0, "\x00"):
                await remove_stale_unix_socket(loop, local_addr)
            addr_pairs_info = [((family, proto), (local_addr, remote_addr))]
        else:
            # Join local and remote addresses into pairs by (family, proto).
            addr_infos: dict[tuple[int, int], list[Any]] = collections.OrderedDict()
            for idx, addr in ((0, local_addr), (1, remote_addr)):
                if addr is None:
                    continue
                if not (isinstance(addr, tuple) and len(addr) == 2):
                    raise TypeError("2-tuple is expected")
                infos = await ensure_resolved(
                    loop, addr, family=family, type=socket.SOCK_DGRAM, proto=proto, flags=flags
                )
                if not infos:
                    raise OSError("getaddrinfo() returned empty list")
                for info_family, _, info_proto, _, address in infos:
                    key = (info_family, info_proto)
                    if key not in addr_infos:
                        addr_infos[key] = [None, None]
                    addr_infos[key][idx] = address
            addr_pairs_info = [
                (key, (pair[0], pair[1]))
                for key, pair in addr_infos.items()
                if not ((local_addr and pair[0] is None) or (remote_addr and pair[1] is None))
            ]
            if not addr_pairs_info:
                raise ValueError("can not get address information")
        if reuse_address is not _unset and reuse_address:
            raise ValueError(
                "Passing `reuse_address=True` is no longer supported, as the usage of "
                "SO_REUSEPORT in UDP poses a significant security concern."
            )
        exceptions: list[OSError] = []
        r_addr = None
        for (fam, pro), (l_addr, remote_address) in addr_pairs_info:
            sock = None
            r_addr = None
            try:
                sock = socket.socket(family=fam, type=socket.SOCK_DGRAM, proto=pro)
                if reuse_port:
                    set_reuseport(sock)
                if allow_broadcast:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.setblocking(False)
                if local_addr:
                    sock.bind(l_addr)
                if remote_addr:
                    if not allow_broadcast:
                        await sock_connect(loop, sock, remote_address)
                    r_addr = remote_address
            except OSError as exc:
                if sock is not None:
                    sock.close()
                exceptions.append(exc)
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
            else:
                break
        else:
            raise exceptions[0]
    protocol = protocol_factory()
    waiter: Future = loop.create_future()
    assert sock is not None
    transport = DatagramTransport(loop, sock, protocol, r_addr, waiter)
    try:
        await waiter
    except BaseException:
        transport.close()
        raise
    return transport, protocol
