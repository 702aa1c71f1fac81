"""``StreamTransport``: a connected TCP or Unix stream socket, driven by epoll.

Reading: while reading is not paused the socket's reader is registered, and
each readiness event does one ``recv`` (or ``recv_into`` the buffer of a
``BufferedProtocol``) and hands the bytes to the protocol.

Writing: ``write()`` first tries to send at once, and only buffers what the
kernel did not take; then the writer is registered until the buffer drains.
The buffer is a deque of byte chunks, sent with one ``sendmsg`` call for many
chunks, so ``writelines()`` and a backlog of small writes never concatenate
copies. ``bytes`` are kept by reference; mutable buffers are copied, because
the caller may reuse them after ``write()`` returns.

Closing: ``close()`` stops reading, lets the buffer drain, then calls
``connection_lost(None)``; ``abort()`` and fatal errors drop the buffer and
call ``connection_lost(exc)`` on the next iteration. The socket is closed
exactly once, after ``connection_lost`` returns.
"""

from __future__ import annotations

import asyncio
import socket
from asyncio.constants import _SendfileMode
from itertools import islice
from typing import Any, Final

from corun.runtime._constants import LOG_THRESHOLD_FOR_CONNLOST_WRITES, logger
from corun.runtime.engine.futures import Future
from corun.runtime.engine.loop_core import LoopCore
from corun.runtime.transports import sockio
from corun.runtime.transports.base import SocketTransport, connect_soon, read_buffer

#: sendmsg() takes at most this many buffers (IOV_MAX).
MAX_IOV: Final = 1024


def _set_nodelay(sock: socket.socket) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
        # Small writes (requests, replies) must not wait for Nagle's timer.
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass


class StreamTransport(SocketTransport):
    """The transport of a connected stream socket (TCP or Unix)."""

    # loop.start_tls() may wrap this transport.
    _start_tls_compatible: bool = True
    # loop.sendfile() may use os.sendfile on this transport's socket.
    _sendfile_compatible: Any = _SendfileMode.TRY_NATIVE

    def __init__(
        self,
        loop: LoopCore,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        waiter: Future | None = None,
        extra: dict[str, Any] | None = None,
        server: Any = None,
    ) -> None:
        super().__init__(loop, sock, extra)
        self._paused: bool = False  # reading paused by pause_reading()
        self._eof: bool = False  # write_eof() was called
        self._buffered_protocol: bool = False
        self._protocol_connected: bool = False
        self._empty_waiter: Future | None = None
        self._server = server
        # The C recv and send (sockio) work on the fd; a socket subclass's own
        # recv_into and send are called, as asyncio calls them.
        plain = type(sock) is socket.socket
        self._recv = sockio.recv if plain else sockio.recv_py
        self._send = sockio.send if plain else sockio.send_py
        self.set_protocol(protocol)
        if server is not None:
            server._attach(self)
        _set_nodelay(sock)
        connect_soon(loop, self, self._protocol, self._start_reading, waiter)

    def __repr__(self) -> str:
        info = [type(self).__name__]
        if self._sock is None:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._sock_fd}")
        if self._sock is not None:
            info.append("read=" + ("polling" if self.is_reading() else "idle"))
            state = "polling" if self._buffer else "idle"
            info.append(f"write=<{state}, bufsize={self._buffer_size}>")
        return "<{}>".format(" ".join(info))

    # --- protocol ------------------------------------------------------------

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Deliver events to ``protocol`` from now on."""
        self._buffered_protocol = isinstance(protocol, asyncio.BufferedProtocol)
        self._protocol = protocol
        self._protocol_connected = True

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The protocol events go to."""
        return self._protocol  # type: ignore[no-any-return]

    # --- reading -------------------------------------------------------------

    def is_reading(self) -> bool:
        """Whether the transport is receiving."""
        return not self._paused and not self._closing

    def pause_reading(self) -> None:
        """Stop receiving until resume_reading(); nothing is lost meanwhile."""
        if not self.is_reading():
            return
        self._paused = True
        self._loop._remove_reader(self._sock_fd)

    def resume_reading(self) -> None:
        """Receive again after pause_reading()."""
        if self._closing or not self._paused:
            return
        self._paused = False
        self._loop._add_reader(self._sock_fd, self._read_ready)

    def _start_reading(self) -> None:
        if self.is_reading():
            self._loop._add_reader(self._sock_fd, self._read_ready)

    def _read_ready(self) -> None:
        if self._conn_lost:
            return
        sock = self._sock
        assert sock is not None
        protocol = self._protocol
        if self._buffered_protocol:
            try:
                buf = protocol.get_buffer(-1)
                if not len(buf):
                    raise RuntimeError("get_buffer() returned an empty buffer")
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.get_buffer() call failed.")
                return
            try:
                nbytes = sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                return
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal read error on socket transport")
                return
            if not nbytes:
                self._read_eof()
                return
            try:
                protocol.buffer_updated(nbytes)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal error: protocol.buffer_updated() call failed.")
            return
        try:
            data = self._recv(sock, self._sock_fd, read_buffer(self._loop))
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            self._read_eof()
            return
        try:
            protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    def _read_eof(self) -> None:
        if self._loop.get_debug():
            logger.debug("%r received EOF", self)
        try:
            keep_open = self._protocol.eof_received()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal error: protocol.eof_received() call failed.")
            return
        if keep_open:
            # The protocol may still write; nothing more can be read.
            self._loop._remove_reader(self._sock_fd)
        else:
            self.close()

    # --- writing -------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Send ``data``, buffering what the socket does not take at once."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"data argument must be a bytes-like object, not {type(data).__name__!r}"
            )
        if self._eof:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._empty_waiter is not None:
            raise RuntimeError("unable to write; sendfile is in progress")
        if not data:
            return
        if self._conn_lost:
            if self._conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        sent = 0
        if not self._buffer:
            sock = self._sock
            assert sock is not None
            try:
                sent = self._send(sock, self._sock_fd, data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._fatal_error(exc, "Fatal write error on socket transport")
                return
            if sent == len(data):
                return
            self._loop._add_writer(self._sock_fd, self._write_ready)
        chunk: bytes | memoryview
        if type(data) is bytes:
            # Immutable: keep a reference (a view past what was sent), no copy.
            chunk = memoryview(data)[sent:] if sent else data
        else:
            # The caller may reuse a mutable buffer after write() returns.
            chunk = bytes(memoryview(data).cast("B")[sent:])
        self._buffer.append(chunk)
        self._buffer_size += len(chunk)
        self._maybe_pause_protocol()

    def writelines(self, list_of_data: Any) -> None:
        """Send several buffers with as few system calls as possible (sendmsg)."""
        if self._eof:
            raise RuntimeError("Cannot call writelines() after write_eof()")
        if self._empty_waiter is not None:
            raise RuntimeError("unable to writelines; sendfile is in progress")
        if self._conn_lost:
            if self._conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        was_idle = not self._buffer
        for data in list_of_data:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"data argument must be a bytes-like object, not {type(data).__name__!r}"
                )
            if not data:
                continue
            chunk = data if type(data) is bytes else bytes(data)
            self._buffer.append(chunk)
            self._buffer_size += len(chunk)
        if was_idle and self._buffer:
            self._write_ready()
            if self._buffer and not self._conn_lost:
                self._loop._add_writer(self._sock_fd, self._write_ready)
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        # "> 0", not truthiness: mypy would narrow _conn_lost to 0 for the
        # whole method, though resume_writing() below may change it.
        if self._conn_lost > 0:
            return
        sock = self._sock
        assert sock is not None
        buffer = self._buffer
        try:
            if len(buffer) == 1:
                sent = self._send(sock, self._sock_fd, buffer[0])
            else:
                sent = sock.sendmsg(islice(buffer, MAX_IOV))
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._loop._remove_writer(self._sock_fd)
            buffer.clear()
            self._buffer_size = 0
            self._fatal_error(exc, "Fatal write error on socket transport")
            if self._empty_waiter is not None:
                self._empty_waiter.set_exception(exc)
            return
        self._consume(sent)
        self._maybe_resume_protocol()  # may append to the buffer, or close
        if self._conn_lost:
            # resume_writing() aborted (or closed with nothing left to send):
            # connection_lost is scheduled already, and must come only once.
            return
        if self._buffer:
            return
        self._loop._remove_writer(self._sock_fd)
        if self._empty_waiter is not None:
            self._empty_waiter.set_result(None)
        if self._closing:
            self._conn_lost += 1
            self._call_connection_lost(None)
        elif self._eof:
            sock.shutdown(socket.SHUT_WR)

    def _consume(self, nbytes: int) -> None:
        """Drop ``nbytes`` sent bytes from the front of the buffer."""
        buffer = self._buffer
        self._buffer_size -= nbytes
        while nbytes:
            chunk = buffer[0]
            size = len(chunk)
            if size <= nbytes:
                nbytes -= size
                buffer.popleft()
            else:
                buffer[0] = memoryview(chunk)[nbytes:]
                break

    def write_eof(self) -> None:
        """Shut down the sending side once the buffer has drained."""
        if self._closing or self._eof:
            return
        self._eof = True
        if not self._buffer:
            assert self._sock is not None
            self._sock.shutdown(socket.SHUT_WR)

    def can_write_eof(self) -> bool:
        """True: stream sockets can half-close."""
        return True

    # --- sendfile support (used by loop.sendfile) -------------------------------

    def _make_empty_waiter(self) -> Future:
        if self._empty_waiter is not None:
            raise RuntimeError("Empty waiter is already set")
        waiter: Future = self._loop.create_future()
        self._empty_waiter = waiter
        if not self._buffer:
            waiter.set_result(None)
        return waiter

    def _reset_empty_waiter(self) -> None:
        self._empty_waiter = None

    # --- closing -------------------------------------------------------------

    def _protocol_wants_connection_lost(self) -> bool:
        return self._protocol_connected

    def _connection_lost_done(self) -> None:
        server = self._server
        if server is not None:
            self._server = None
            server._detach(self)
