"""Pipe transports: ``connect_read_pipe`` and ``connect_write_pipe``.

They behave as asyncio's Unix pipe transports do, callback for callback:

* the fd is made non-blocking; ``connection_made`` is scheduled with
  ``call_soon``, the fd is watched only after it ran, and the waiter of
  ``connect_*_pipe`` resolves after both;
* a read pipe reads at most ``READ_BUFFER_SIZE`` bytes per readiness event, so
  one busy pipe cannot starve the loop. On EOF the protocol hears
  ``eof_received()`` and then ``connection_lost(None)``;
* a write pipe writes at once when nothing is buffered and buffers the rest,
  with asyncio's high/low water marks (``FlowControlTransport``). ``close()``
  flushes the buffer first; ``abort()`` drops it.

Some facts about pipes that shape the write side:

* A write end learns that the reader went away only when it writes (EPIPE;
  Python ignores SIGPIPE). To notice earlier, asyncio also watches the
  *write* end for readability: a write end never has data, but epoll reports
  EPOLLERR on it as soon as the last read end closes, and the loop wakes
  the reader callback on EPOLLERR. So "readable" on a write pipe means "peer
  gone": ``connection_lost(None)`` when nothing was pending, or
  ``connection_lost(BrokenPipeError())`` when buffered data was lost. The
  trick is only used for FIFOs and sockets; character devices (ttys) do
  not report it.
* A pty read side fails with EIO once the other side closes: that is EOF by
  another name, so it is not reported to the exception handler.

corun differences, all where asyncio would misbehave: the transport
registers itself in ``loop._transports`` (so ``loop.add_reader`` on its fd
raises instead of silently stealing it), calls ``connection_lost`` and closes
the pipe exactly once even when ``abort()`` follows ``close()``, rejects
non-bytes data with ``TypeError`` rather than an ``assert``, and on a loop
that is already closed just releases the fd, since no callback can run.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from corun.runtime._constants import LOG_THRESHOLD_FOR_CONNLOST_WRITES, READ_BUFFER_SIZE, logger
from corun.runtime.engine.futures import Future
from corun.runtime.engine.loop_core import LoopCore
from corun.runtime.transports.base import (
    FlowControlTransport,
    connect_soon,
    read_buffer,
    report_fatal_error,
)

ProtocolT = TypeVar("ProtocolT", bound=asyncio.BaseProtocol)


def _unregister(loop: LoopCore, fd: int, transport: object) -> None:
    """Forget ``transport`` in the loop's fd registry, unless another took the fd since."""
    if loop._transports.get(fd) is transport:
        del loop._transports[fd]


class _PipeEnd:
    """The end of a pipe transport's life, shared by both directions."""

    _loop: LoopCore
    _protocol: Any
    _pipe: Any
    _fileno: int
    _closing: bool

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Deliver further events to ``protocol``."""
        self._protocol = protocol

    def get_protocol(self) -> Any:
        """The protocol receiving the events."""
        return self._protocol

    def is_closing(self) -> bool:
        """Whether the transport is closing or closed."""
        return self._closing

    def __del__(self) -> None:
        if self._pipe is not None:
            warnings.warn(
                f"unclosed transport {self!r}", ResourceWarning, stacklevel=2, source=self
            )
            self._pipe.close()
            self._pipe = None

    def _adopt(self, pipe: Any, protocol: Any, not_a_pipe: str) -> int:
        """Take ``pipe``'s fd over (non-blocking, in the loop's registry); return its mode.

        Raises:
            ValueError: with ``not_a_pipe`` (asyncio's message for each
                direction), if the fd is not a pipe, socket or character device.
        """
        fileno = pipe.fileno()
        mode = os.fstat(fileno).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            raise ValueError(not_a_pipe)
        os.set_blocking(fileno, False)
        self._pipe = pipe
        self._fileno = fileno
        self._protocol = protocol
        self._loop._transports[fileno] = self
        return mode

    def _call_connection_lost(self, exc: BaseException | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._release()

    def _release(self) -> None:
        pipe = self._pipe
        if pipe is None:
            return
        self._pipe = None
        self._protocol = None  # breaks the transport <-> protocol cycle
        _unregister(self._loop, self._fileno, self)
        pipe.close()


class ReadPipeTransport(_PipeEnd, asyncio.ReadTransport):
    """The read end of a pipe, socket or character device, as a transport.

    Made by ``loop.connect_read_pipe()``; the protocol gets ``data_received``,
    then ``eof_received`` and ``connection_lost(None)`` at EOF.
    """

    max_size: int = READ_BUFFER_SIZE

    def __init__(
        self,
        loop: LoopCore,
        pipe: Any,
        protocol: Any,
        waiter: Future | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        extra = {} if extra is None else extra
        extra["pipe"] = pipe
        super().__init__(extra)
        # Invariant: _pipe is None once the fd was closed (by connection_lost,
        # or by __del__). The reader is registered only while
        # is_reading() and connection_made() has run. _closing never goes back
        # to False; connection_lost is scheduled when it becomes True.
        self._loop: LoopCore = loop
        # Set first: __del__ runs even when the checks below raise.
        self._pipe: Any = None
        self._fileno: int = -1
        self._protocol: Any = None
        self._closing: bool = False
        self._paused: bool = False

        self._adopt(pipe, protocol, "Pipe transport is for pipes/sockets only.")
        connect_soon(loop, self, protocol, self._start_reading, waiter)

    def __repr__(self) -> str:
        info = [type(self).__name__]
        if self._pipe is None:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._fileno}")
        if self._pipe is not None:
            if self._loop.is_closed():
                info.append("open")
            elif self._loop._io.get_reader(self._fileno) is not None:
                info.append("polling")
            else:
                info.append("idle")
        else:
            info.append("closed")
        return "<{}>".format(" ".join(info))

    def _start_reading(self) -> None:
        if self.is_reading():
            self._loop._add_reader(self._fileno, self._read_ready)

    def _read_ready(self) -> None:
        view = read_buffer(self._loop)  # see there why
        if self.max_size < len(view):
            view = view[: self.max_size]
        try:
            nbytes = os.readv(self._fileno, (view,))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal_error(exc, "Fatal read error on pipe transport")
            return
        if nbytes:
            self._protocol.data_received(view[:nbytes].tobytes())
            return
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        self._closing = True
        self._loop._remove_reader(self._fileno)
        self._loop.call_soon(self._protocol.eof_received)
        self._loop.call_soon(self._call_connection_lost, None)

    def is_reading(self) -> bool:
        """Whether the transport is receiving (not paused, not closing)."""
        return not self._paused and not self._closing

    def pause_reading(self) -> None:
        """Stop calling ``data_received`` until ``resume_reading()``; no-op if not reading."""
        if not self.is_reading():
            return
        self._paused = True
        self._loop._remove_reader(self._fileno)
        if self._loop.get_debug():
            logger.debug("%r pauses reading", self)

    def resume_reading(self) -> None:
        """Receive again after ``pause_reading()``; no-op if not paused or closing."""
        if self._closing or not self._paused:
            return
        self._paused = False
        self._loop._add_reader(self._fileno, self._read_ready)
        if self._loop.get_debug():
            logger.debug("%r resumes reading", self)

    def close(self) -> None:
        """Stop reading and close the pipe; ``connection_lost(None)`` follows."""
        if not self._closing:
            self._close(None)

    def _fatal_error(self, exc: BaseException, message: str) -> None:
        # Unlike a socket's, a pipe's OSErrors are reported, as asyncio does,
        # but for EIO: a pty whose other side closed, which is EOF.
        eio = isinstance(exc, OSError) and exc.errno == errno.EIO
        report_fatal_error(self._loop, exc, message, self, self._protocol, expected=eio)
        self._close(exc)

    def _close(self, exc: BaseException | None) -> None:
        self._closing = True
        if self._loop.is_closed():
            # No callback can run any more; at least give the fd back.
            self._release()
            return
        self._loop._remove_reader(self._fileno)
        self._loop.call_soon(self._call_connection_lost, exc)


class WritePipeTransport(_PipeEnd, FlowControlTransport):
    """The write end of a pipe, socket or character device, as a transport.

    Made by ``loop.connect_write_pipe()``. ``write()`` never blocks: what the
    pipe does not take is buffered, and the protocol's ``pause_writing()`` /
    ``resume_writing()`` follow the buffer's water marks.
    """

    def __init__(
        self,
        loop: LoopCore,
        pipe: Any,
        protocol: Any,
        waiter: Future | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        extra = {} if extra is None else extra
        extra["pipe"] = pipe
        super().__init__(loop, extra)
        # Invariant: _buffer is non-empty exactly while a writer is
        # registered. _closing is set by close(), write_eof(), abort() or an
        # error and never cleared. _lost is set once connection_lost has been
        # scheduled or called, at most once; from then on no reader or writer
        # is registered and _buffer is empty. _pipe is None once the fd was closed.
        # Set first: __del__ runs even when the checks below raise.
        self._pipe: Any = None
        self._fileno: int = -1
        self._buffer: bytearray = bytearray()
        self._conn_lost: int = 0
        self._closing: bool = False
        self._lost: bool = False

        mode = self._adopt(
            pipe, protocol, "Pipe transport is only for pipes, sockets and character devices"
        )
        # "Readable" means the peer closed (see the module docstring).
        watch = None if stat.S_ISCHR(mode) else self._start_watching_peer
        connect_soon(loop, self, protocol, watch, waiter)

    def __repr__(self) -> str:
        info = [type(self).__name__]
        if self._pipe is None:
            info.append("closed")
        elif self._closing:
            info.append("closing")
        info.append(f"fd={self._fileno}")
        if self._pipe is not None:
            if self._loop.is_closed():
                info.append("open")
            else:
                polling = self._loop._io.get_writer(self._fileno) is not None
                info.append("polling" if polling else "idle")
                info.append(f"bufsize={self.get_write_buffer_size()}")
        else:
            info.append("closed")
        return "<{}>".format(" ".join(info))

    def _start_watching_peer(self) -> None:
        if not self._lost:
            self._loop._add_reader(self._fileno, self._read_ready)

    def get_write_buffer_size(self) -> int:
        """Bytes buffered and not yet written to the pipe."""
        return len(self._buffer)

    def _read_ready(self) -> None:
        # The peer closed its end (see the module docstring).
        if self._loop.get_debug():
            logger.info("%r was closed by peer", self)
        if self._buffer:
            self._close(BrokenPipeError())
        else:
            self._close(None)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data``: at once if the pipe takes it, else buffered.

        After the connection was lost or the transport closed, data is
        dropped (and logged after a few attempts), as asyncio does.

        Raises:
            TypeError: ``data`` is not bytes, bytearray or memoryview.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"data argument must be a bytes-like object, not {type(data).__name__!r}"
            )
        if isinstance(data, bytearray):
            data = memoryview(data)
        if not data:
            return
        if self._conn_lost or self._closing:
            if self._conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("pipe closed by peer or os.write(pipe, data) raised exception.")
            self._conn_lost += 1
            return

        if not self._buffer:
            # Nothing queued: try to write right away.
            try:
                n = os.write(self._fileno, data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as exc:
                self._conn_lost += 1
                self._fatal_error(exc, "Fatal write error on pipe transport")
                return
            if n == len(data):
                return
            if n > 0:
                data = memoryview(data)[n:]
            self._loop._add_writer(self._fileno, self._write_ready)

        self._buffer += data
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        buffer = self._buffer
        try:
            n = os.write(self._fileno, buffer)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            buffer.clear()
            self._conn_lost += 1
            self._loop._remove_writer(self._fileno)
            self._fatal_error(exc, "Fatal write error on pipe transport")
            return
        if n == len(buffer):
            buffer.clear()
            self._loop._remove_writer(self._fileno)
            self._maybe_resume_protocol()  # may write, and so refill the buffer
            if self._closing and not self._buffer and not self._lost:
                # close() or write_eof() was waiting for the flush.
                self._lost = True
                self._loop._remove_reader(self._fileno)
                self._call_connection_lost(None)
            return
        if n > 0:
            del buffer[:n]

    def can_write_eof(self) -> bool:
        """True: closing a write pipe is its EOF."""
        return True

    def write_eof(self) -> None:
        """Close the pipe once the buffer is flushed; the reader sees EOF."""
        if self._closing:
            return
        self._closing = True
        if not self._buffer:
            self._schedule_connection_lost(None)

    def close(self) -> None:
        """Flush the buffer, then close the pipe; ``connection_lost(None)`` follows."""
        if self._pipe is not None and not self._closing:
            self.write_eof()

    def abort(self) -> None:
        """Close at once, dropping buffered data; ``connection_lost(None)`` follows."""
        self._close(None)

    def _force_close(self, exc: BaseException | None) -> None:
        self._close(exc)

    def _close(self, exc: BaseException | None) -> None:
        self._closing = True
        if self._buffer:
            self._loop._remove_writer(self._fileno)
            self._buffer.clear()
        self._schedule_connection_lost(exc)

    def _schedule_connection_lost(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._lost = True
        if self._loop.is_closed():
            # No callback can run any more; at least give the fd back.
            self._release()
            return
        self._loop._remove_reader(self._fileno)
        self._loop.call_soon(self._call_connection_lost, exc)


_PipeTransportT = TypeVar("_PipeTransportT", "ReadPipeTransport", "WritePipeTransport")


async def _connect_pipe(
    loop: LoopCore,
    transport_class: type[_PipeTransportT],
    protocol_factory: Callable[[], ProtocolT],
    pipe: Any,
) -> tuple[_PipeTransportT, ProtocolT]:
    """Wrap ``pipe`` (a file object) in a transport; return once ``connection_made`` ran.

    If this is cancelled first, the transport is closed.

    Raises:
        ValueError: ``pipe`` is not a pipe, socket or character device.
    """
    protocol = protocol_factory()
    waiter: Future = loop.create_future()
    transport = transport_class(loop, pipe, protocol, waiter)
    try:
        await waiter
    except BaseException:
        transport.close()
        raise
    if loop.get_debug():
        what = "Read" if transport_class is ReadPipeTransport else "Write"
        logger.debug("%s pipe %r connected: (%r, %r)", what, pipe.fileno(), transport, protocol)
    return transport, protocol


async def connect_read_pipe(
    loop: LoopCore, protocol_factory: Callable[[], ProtocolT], pipe: Any
) -> tuple[ReadPipeTransport, ProtocolT]:
    """``loop.connect_read_pipe``: the read end ``pipe`` as a transport (see ``_connect_pipe``)."""
    return await _connect_pipe(loop, ReadPipeTransport, protocol_factory, pipe)


async def connect_write_pipe(
    loop: LoopCore, protocol_factory: Callable[[], ProtocolT], pipe: Any
) -> tuple[WritePipeTransport, ProtocolT]:
    """``loop.connect_write_pipe``: the write end ``pipe`` as a transport (see ``_connect_pipe``)."""
    return await _connect_pipe(loop, WritePipeTransport, protocol_factory, pipe)
