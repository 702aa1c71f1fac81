"""``EventLoop``: corun's complete event loop.

This module is interpreted, not compiled: ``EventLoop`` combines the
compiled ``LoopCore`` with ``asyncio.AbstractEventLoop``, a plain Python
class, which only an interpreted class may do (see ``LoopCore``). Its
methods are thin: the work happens in compiled modules.

``LoopCore`` (``core.py``) runs callbacks, timers and fd readiness. This class
adds the network and process half of ``asyncio.AbstractEventLoop``. Each
method here is a thin entry point; the work lives in one module per concept
(``sockets.py``, ``streams.py``, ``datagrams.py``, ``servers.py``, ``tls.py``,
``pipes.py``, ``subprocesses.py``, ``dns.py``), which use only ``LoopCore``'s API.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from corun.runtime import connections, dns, pipes, sendfile, servers, sockets, subprocesses, tls
from corun.runtime.core import LoopCore

_ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class EventLoop(LoopCore, asyncio.AbstractEventLoop):  # type: ignore[misc]
    """corun's event loop: a ready queue, a timer heap and epoll.

    Use it wherever an asyncio loop is expected: ``corun.run(main())``,
    ``asyncio.Runner(loop_factory=corun.new_event_loop)``, or ``corun.install()``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        # Futures and Tasks append to the ready queue directly while call_soon
        # is LoopCore's own, and call_later goes to the timer heap directly
        # while time and call_at are. A method replaced on the instance (as
        # tests and tracing tools do) must be called instead, as asyncio would.
        if name == "call_soon":
            object.__setattr__(self, "_plain_call_soon", False)
        elif name in ("time", "call_at"):
            object.__setattr__(self, "_plain_timers", False)
        object.__setattr__(self, name, value)

    # --- sockets, connections and servers ---

    async def sock_recv(self, sock: socket.socket, nbytes: int) -> bytes:
        """Receive up to ``nbytes`` from a non-blocking socket."""
        return await sockets.sock_recv(self, sock, nbytes)

    async def sock_recv_into(self, sock: socket.socket, buf: Any) -> int:
        """Receive into ``buf``; return the number of bytes received."""
        return await sockets.sock_recv_into(self, sock, buf)

    async def sock_recvfrom(self, sock: socket.socket, bufsize: int) -> tuple[bytes, Any]:
        """Receive a datagram; return ``(data, address)``."""
        return await sockets.sock_recvfrom(self, sock, bufsize)

    async def sock_recvfrom_into(
        self, sock: socket.socket, buf: Any, nbytes: int = 0
    ) -> tuple[int, Any]:
        """Receive a datagram into ``buf``; return ``(nbytes, address)``."""
        return await sockets.sock_recvfrom_into(self, sock, buf, nbytes)

    async def sock_sendall(self, sock: socket.socket, data: Any) -> None:
        """Send all of ``data``."""
        await sockets.sock_sendall(self, sock, data)

    async def sock_sendto(self, sock: socket.socket, data: Any, address: Any) -> int:
        """Send a datagram to ``address``."""
        return await sockets.sock_sendto(self, sock, data, address)

    async def sock_connect(self, sock: socket.socket, address: Any) -> None:
        """Connect ``sock`` to ``address`` (resolving a host name if needed)."""
        await sockets.sock_connect(self, sock, address)

    async def sock_accept(self, sock: socket.socket) -> tuple[socket.socket, Any]:
        """Accept a connection; return ``(conn, address)``."""
        return await sockets.sock_accept(self, sock)

    async def sock_sendfile(
        self,
        sock: socket.socket,
        file: Any,
        offset: int = 0,
        count: int | None = None,
        *,
        fallback: bool | None = True,
    ) -> int:
        """Send a file over ``sock``, zero-copy where the kernel allows it."""
        return await sockets.sock_sendfile(self, sock, file, offset, count, fallback=bool(fallback))

    async def getaddrinfo(
        self,
        host: Any,
        port: Any,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> list[Any]:
        """``socket.getaddrinfo``; numeric hosts are answered without a thread hop."""
        return await dns.getaddrinfo(
            self, host, port, family=family, type=type, proto=proto, flags=flags
        )

    async def getnameinfo(self, sockaddr: Any, flags: int = 0) -> tuple[str, str]:
        """``socket.getnameinfo`` in the executor (inline for numeric-only flags)."""
        return await dns.getnameinfo(self, sockaddr, flags)

    async def create_connection(  # type: ignore[override]
        self,
        protocol_factory: _ProtocolFactory,
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
        """Open a stream connection to ``host``:``port`` (or over ``sock``)."""
        return await connections.create_connection(
            self,
            protocol_factory,
            host,
            port,
            ssl=ssl,
            family=family,
            proto=proto,
            flags=flags,
            sock=sock,
            local_addr=local_addr,
            server_hostname=server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            happy_eyeballs_delay=happy_eyeballs_delay,
            interleave=interleave,
            all_errors=all_errors,
        )

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: _ProtocolFactory,
        host: str | Iterable[str] | None = None,
        port: int | None = None,
        *,
        family: int = socket.AF_UNSPEC,
        flags: int = socket.AI_PASSIVE,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        reuse_address: bool | None = None,
        reuse_port: bool | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        start_serving: bool = True,
    ) -> servers.Server:
        """Listen on ``host``:``port`` (every address it resolves to) or on ``sock``."""
        return await servers.create_server(
            self,
            protocol_factory,
            host,
            port,
            family=family,
            flags=flags,
            sock=sock,
            backlog=backlog,
            ssl=ssl,
            reuse_address=reuse_address,
            reuse_port=reuse_port,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            start_serving=start_serving,
        )

    async def create_unix_connection(  # type: ignore[override]
        self,
        protocol_factory: _ProtocolFactory,
        path: str | None = None,
        *,
        ssl: Any = None,
        sock: socket.socket | None = None,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """Open a Unix stream connection to ``path`` (or over ``sock``)."""
        return await connections.create_unix_connection(
            self,
            protocol_factory,
            path,
            ssl=ssl,
            sock=sock,
            server_hostname=server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )

    async def create_unix_server(  # type: ignore[override]
        self,
        protocol_factory: _ProtocolFactory,
        path: str | os.PathLike[str] | None = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
        start_serving: bool = True,
    ) -> servers.Server:
        """Listen on the Unix socket ``path`` (or on ``sock``)."""
        return await servers.create_unix_server(
            self,
            protocol_factory,
            path,
            sock=sock,
            backlog=backlog,
            ssl=ssl,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
            start_serving=start_serving,
        )

    async def connect_accepted_socket(  # type: ignore[override]
        self,
        protocol_factory: _ProtocolFactory,
        sock: socket.socket,
        *,
        ssl: Any = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        """Wrap a socket accepted outside the loop in a transport."""
        return await connections.connect_accepted_socket(
            self,
            protocol_factory,
            sock,
            ssl=ssl,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )

    async def create_datagram_endpoint(  # type: ignore[override]
        self,
        protocol_factory: _ProtocolFactory,
        local_addr: Any = None,
        remote_addr: Any = None,
        *,
        family: int = 0,
        proto: int = 0,
        flags: int = 0,
        reuse_address: Any = connections._unset,
        reuse_port: bool | None = None,
        allow_broadcast: bool | None = None,
        sock: socket.socket | None = None,
    ) -> tuple[asyncio.DatagramTransport, asyncio.BaseProtocol]:
        """Open a datagram (UDP or Unix) endpoint."""
        return await connections.create_datagram_endpoint(
            self,
            protocol_factory,
            local_addr,
            remote_addr,
            family=family,
            proto=proto,
            flags=flags,
            reuse_address=reuse_address,
            reuse_port=reuse_port,
            allow_broadcast=allow_broadcast,
            sock=sock,
        )

    async def sendfile(
        self,
        transport: asyncio.WriteTransport,
        file: Any,
        offset: int = 0,
        count: int | None = None,
        *,
        fallback: bool = True,
    ) -> int:
        """Send a file over ``transport``: zero-copy on plain sockets, else read-and-write."""
        return await sendfile.sendfile(self, transport, file, offset, count, fallback=fallback)

    # --- pipes and subprocesses ---

    async def connect_read_pipe(
        self, protocol_factory: Callable[[], pipes.ProtocolT], pipe: Any
    ) -> tuple[pipes.ReadPipeTransport, pipes.ProtocolT]:
        """Wrap the read end ``pipe`` (a file object) in a transport; see ``pipes.py``."""
        return await pipes.connect_read_pipe(self, protocol_factory, pipe)

    async def connect_write_pipe(
        self, protocol_factory: Callable[[], pipes.ProtocolT], pipe: Any
    ) -> tuple[pipes.WritePipeTransport, pipes.ProtocolT]:
        """Wrap the write end ``pipe`` (a file object) in a transport; see ``pipes.py``."""
        return await pipes.connect_write_pipe(self, protocol_factory, pipe)

    async def subprocess_exec(
        self,
        protocol_factory: Callable[[], pipes.ProtocolT],
        program: Any,
        *args: Any,
        stdin: subprocesses.StdioArg = subprocesses.PIPE,
        stdout: subprocesses.StdioArg = subprocesses.PIPE,
        stderr: subprocesses.StdioArg = subprocesses.PIPE,
        universal_newlines: bool = False,
        shell: bool = False,
        bufsize: int = 0,
        encoding: str | None = None,
        errors: str | None = None,
        text: bool | None = None,
        **kwargs: Any,
    ) -> tuple[subprocesses.SubprocessTransport, pipes.ProtocolT]:
        """Run ``program`` with ``args`` as a child process; see ``subprocesses.py``."""
        return await subprocesses.subprocess_exec(
            self,
            protocol_factory,
            program,
            *args,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            universal_newlines=universal_newlines,
            shell=shell,
            bufsize=bufsize,
            encoding=encoding,
            errors=errors,
            text=text,
            **kwargs,
        )

    async def subprocess_shell(
        self,
        protocol_factory: Callable[[], pipes.ProtocolT],
        cmd: bytes | str,
        *,
        stdin: subprocesses.StdioArg = subprocesses.PIPE,
        stdout: subprocesses.StdioArg = subprocesses.PIPE,
        stderr: subprocesses.StdioArg = subprocesses.PIPE,
        universal_newlines: bool = False,
        shell: bool = True,
        bufsize: int = 0,
        encoding: str | None = None,
        errors: str | None = None,
        text: bool | None = None,
        **kwargs: Any,
    ) -> tuple[subprocesses.SubprocessTransport, pipes.ProtocolT]:
        """Run ``cmd`` with the shell as a child process; see ``subprocesses.py``."""
        return await subprocesses.subprocess_shell(
            self,
            protocol_factory,
            cmd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            universal_newlines=universal_newlines,
            shell=shell,
            bufsize=bufsize,
            encoding=encoding,
            errors=errors,
            text=text,
            **kwargs,
        )

    # --- TLS ---

    async def start_tls(
        self,
        transport: asyncio.BaseTransport,
        protocol: asyncio.BaseProtocol,
        sslcontext: ssl.SSLContext,
        *,
        server_side: bool = False,
        server_hostname: str | None = None,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> asyncio.Transport:
        """Upgrade ``transport`` to TLS (STARTTLS); return the transport to use now.

        See ``tls.start_tls``: the handshake runs over the existing connection,
        ``protocol`` gets no second ``connection_made``, and ``transport`` is
        closed if the handshake fails or this call is cancelled.
        """
        return await tls.start_tls(
            self,
            transport,
            protocol,
            sslcontext,
            server_side=server_side,
            server_hostname=server_hostname,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=ssl_shutdown_timeout,
        )
