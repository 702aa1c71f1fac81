"""What corun's transports share: write flow control and fatal-error reporting.

The subclasses (stream sockets, datagrams, pipes) keep their own buffers;
this class only decides, from ``get_write_buffer_size()``, when to call the
protocol's ``pause_writing()`` and ``resume_writing()``, as asyncio specifies:
pause once the buffer grows above the high-water mark, resume once it drains
to the low-water mark or below.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import warnings
from asyncio import trsock
from typing import Any, Final

from corun.runtime._constants import READ_BUFFER_SIZE, logger
from corun.runtime.engine.futures import Future, set_result_unless_cancelled
from corun.runtime.engine.loop_core import LoopCore


def read_buffer(loop: LoopCore) -> memoryview:
    """The loop's read buffer, which transports read into before copying out.

    Reading with ``recv(n)`` or ``os.read(fd, n)`` allocates ``n`` bytes
    first; for n = 256 KiB glibc maps fresh pages, remaps them down to the
    size read and unmaps them when the bytes are freed: three system calls
    per read, more than the read itself. Reading into this buffer and copying
    out the bytes read costs one small allocation. One buffer per loop is
    enough: its transports read one at a time, on the loop's thread.
    """
    view = loop._read_buffer
    if view is None:
        view = loop._read_buffer = memoryview(bytearray(READ_BUFFER_SIZE))
    return view


#: asyncio's default high-water mark for a transport's write buffer.
DEFAULT_HIGH_WATER: Final = 64 * 1024


def water_marks(high: int | None, low: int | None, default_kib: int) -> tuple[int, int]:
    """``(high, low)`` water marks, with asyncio's defaults and checks.

    Without arguments, ``high`` is ``default_kib`` KiB; a missing ``low`` is a
    quarter of ``high``, a missing ``high`` four times ``low``.
    """
    if high is None:
        high = default_kib * 1024 if low is None else 4 * low
    if low is None:
        low = high // 4
    if not high >= low >= 0:
        raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
    return high, low


def report_error(
    loop: Any, message: str, exc: BaseException, transport: Any, protocol: Any
) -> None:
    """Hand ``exc`` to the loop's exception handler, with asyncio's context keys."""
    loop.call_exception_handler(
        {"message": message, "exception": exc, "transport": transport, "protocol": protocol}
    )


def report_fatal_error(
    loop: Any, exc: BaseException, message: str, transport: Any, protocol: Any, *, expected: bool
) -> None:
    """Report the error a transport closes on, as asyncio's transports do.

    An ``expected`` one (a reset, a broken pipe: the peer's doing, which the
    protocol hears of through ``connection_lost(exc)``) is logged in debug
    mode only; a cancellation is not reported; anything else goes to the
    exception handler.
    """
    if expected:
        if loop.get_debug():
            logger.debug("%r: %s", transport, message, exc_info=True)
    elif not isinstance(exc, asyncio.CancelledError):
        report_error(loop, message, exc, transport, protocol)


def tell_writing(loop: Any, protocol: Any, paused: bool, transport: Any, context: Any) -> None:
    """Call ``protocol.pause_writing()`` (or ``resume_writing()``), reporting what it raises.

    ``context`` is the protocol named in the report: the transport's own,
    or for TLS, the TLS protocol that stands between.
    """
    try:
        if paused:
            protocol.pause_writing()
        else:
            protocol.resume_writing()
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        name = "pause_writing" if paused else "resume_writing"
        report_error(loop, f"protocol.{name}() failed", exc, transport, context)


def connect_soon(
    loop: LoopCore, transport: Any, protocol: Any, start: Any, waiter: Future | None
) -> None:
    """Schedule ``protocol.connection_made(transport)``, then ``start()``, then wake ``waiter``.

    In that order, as asyncio does: ``connection_made()`` may pause reading
    before the first read, and the caller of ``create_connection`` (or its
    like) resumes with a protocol that knows its transport.
    """
    loop.call_soon(protocol.connection_made, transport)
    if start is not None:
        loop.call_soon(start)
    if waiter is not None:
        loop.call_soon(set_result_unless_cancelled, waiter, None)


class FlowControlTransport(asyncio.Transport):
    """A transport with a write buffer and high/low water marks.

    Subclasses set ``_protocol`` and implement ``get_write_buffer_size()``
    and ``_force_close(exc)``.
    """

    _extra: dict[str, Any]  # set by asyncio.BaseTransport.__init__

    def __init__(self, loop: LoopCore, extra: dict[str, Any] | None = None) -> None:
        super().__init__(extra)
        self._loop: LoopCore = loop
        self._protocol: Any = None
        # Invariant: _protocol_paused is True between a pause_writing() call
        # and the matching resume_writing() call.
        self._protocol_paused: bool = False
        self._high_water: int = DEFAULT_HIGH_WATER
        self._low_water: int = DEFAULT_HIGH_WATER // 4
        self._set_write_buffer_limits()

    def _maybe_pause_protocol(self) -> None:
        if self.get_write_buffer_size() <= self._high_water or self._protocol_paused:
            return
        self._protocol_paused = True
        tell_writing(self._loop, self._protocol, True, self, self._protocol)

    def _maybe_resume_protocol(self) -> None:
        if self._protocol_paused and self.get_write_buffer_size() <= self._low_water:
            self._protocol_paused = False
            tell_writing(self._loop, self._protocol, False, self, self._protocol)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """``(low, high)``: the water marks of the write buffer."""
        return (self._low_water, self._high_water)

    def _set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high_water, self._low_water = water_marks(high, low, DEFAULT_HIGH_WATER // 1024)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Set the water marks (defaults: 64 KiB high, a quarter of it low)."""
        self._set_write_buffer_limits(high=high, low=low)
        self._maybe_pause_protocol()

    def get_write_buffer_size(self) -> int:
        """Bytes buffered and not yet written."""
        raise NotImplementedError  # every subclass defines it

    def _force_close(self, exc: BaseException | None) -> None:
        raise NotImplementedError  # every subclass defines it

    def _fatal_error(self, exc: BaseException, message: str = "Fatal error on transport") -> None:
        """Report ``exc`` (unless it is an ordinary connection error) and close at once."""
        report_fatal_error(
            self._loop, exc, message, self, self._protocol, expected=isinstance(exc, OSError)
        )
        self._force_close(exc)


class SocketTransport(FlowControlTransport):
    """What the stream and datagram transports share: a socket, a write buffer, closing.

    Subclasses keep their buffer's items in ``_buffer`` (any deque) and its
    byte count in ``_buffer_size``; ``_connection_lost_done()`` is their hook
    for work after the protocol heard ``connection_lost``.
    """

    def __init__(
        self, loop: LoopCore, sock: socket.socket, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(loop, extra)
        self._extra["socket"] = trsock.TransportSocket(sock)
        try:
            self._extra["sockname"] = sock.getsockname()
        except OSError:
            self._extra["sockname"] = None
        if "peername" not in self._extra:
            try:
                self._extra["peername"] = sock.getpeername()
            except OSError:
                self._extra["peername"] = None
        # Invariant: _sock is None once connection_lost was called (and the
        # socket closed). _conn_lost counts calls after the connection is
        # lost. _buffer_size is the byte count of _buffer, and the writer is
        # registered exactly when _buffer is not empty.
        self._sock: socket.socket | None = sock
        self._sock_fd: int = sock.fileno()
        self._buffer: collections.deque[Any] = collections.deque()
        self._buffer_size: int = 0
        self._conn_lost: int = 0
        self._closing: bool = False
        loop._transports[self._sock_fd] = self

    def __del__(self) -> None:
        sock = self._sock
        if sock is not None:
            warnings.warn(f"unclosed transport {self!r}", ResourceWarning, stacklevel=2)
            sock.close()

    def is_closing(self) -> bool:
        """Whether close() or abort() was called, or the connection was lost."""
        return self._closing

    def get_write_buffer_size(self) -> int:
        """Bytes buffered and not yet sent."""
        return self._buffer_size

    def close(self) -> None:
        """Stop reading, send what is buffered, then close."""
        if self._closing:
            return
        self._closing = True
        self._loop._remove_reader(self._sock_fd)
        if not self._buffer:
            self._conn_lost += 1
            self._loop._remove_writer(self._sock_fd)
            self._loop.call_soon(self._call_connection_lost, None)

    def abort(self) -> None:
        """Close at once, dropping what is buffered."""
        self._force_close(None)

    def _force_close(self, exc: BaseException | None) -> None:
        if self._conn_lost:
            return
        if self._buffer:
            self._buffer.clear()
            self._buffer_size = 0
            self._loop._remove_writer(self._sock_fd)
        if not self._closing:
            self._closing = True
            self._loop._remove_reader(self._sock_fd)
        self._conn_lost += 1
        self._loop.call_soon(self._call_connection_lost, exc)

    def _protocol_wants_connection_lost(self) -> bool:
        return True

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            if self._protocol_wants_connection_lost():
                self._protocol.connection_lost(exc)
        finally:
            sock = self._sock
            if sock is not None:
                self._sock = None
                sock.close()
            self._protocol = None
            self._connection_lost_done()

    def _connection_lost_done(self) -> None:
        """Called once the protocol heard connection_lost and the socket is closed."""
