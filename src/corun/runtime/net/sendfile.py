"""``loop.sendfile(transport, file)``: send a file over a transport.

On a plain stream transport the file goes out with ``os.sendfile`` on the
transport's socket (zero-copy): the transport's buffer is drained first and
reading is paused meanwhile, so the bytes stay in order and the protocol sees
nothing. Where that cannot work (TLS, a file that is not a regular file), the
fallback reads the file in the executor and writes it through the transport,
respecting its flow control: it stands in as the transport's protocol for the
duration, to hear ``pause_writing``/``resume_writing``, then puts the real
protocol back.
"""

from __future__ import annotations

import asyncio
from asyncio import SendfileNotAvailableError
from asyncio.constants import _SendfileMode
from typing import Any, Final

from corun.runtime.engine.futures import Future
from corun.runtime.engine.loop_core import LoopCore
from corun.runtime.net.sockets import check_file_params, send_in_chunks, sock_sendfile

#: The fallback's read size.
FALLBACK_CHUNK: Final = 64 * 1024


class _FallbackProtocol(asyncio.Protocol):
    """Stands in as the transport's protocol while the fallback writes."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._protocol = transport.get_protocol()
        self._should_resume_reading = transport.is_reading()
        self._should_resume_writing = transport._protocol_paused
        transport.pause_reading()
        transport.set_protocol(self)
        self._write_ready_fut: Future | None = None
        if self._should_resume_writing:
            self._write_ready_fut = transport._loop.create_future()

    async def drain(self) -> None:
        if self._transport.is_closing():
            raise ConnectionError("Connection closed by peer")
        fut = self._write_ready_fut
        if fut is not None:
            await fut

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raise RuntimeError("Invalid state: connection should have been established already.")

    def connection_lost(self, exc: Exception | None) -> None:
        fut = self._write_ready_fut
        if fut is not None and not fut.done():
            if exc is None:
                fut.set_exception(ConnectionError("Connection is closed by peer"))
            else:
                fut.set_exception(exc)
        self._protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._write_ready_fut is None:
            self._write_ready_fut = self._transport._loop.create_future()

    def resume_writing(self) -> None:
        fut = self._write_ready_fut
        if fut is not None:
            if not fut.done():
                fut.set_result(None)
            self._write_ready_fut = None

    def data_received(self, data: bytes) -> None:
        raise RuntimeError("Invalid state: reading should be paused")

    def eof_received(self) -> bool:
        raise RuntimeError("Invalid state: reading should be paused")

    async def restore(self) -> None:
        self._transport.set_protocol(self._protocol)
        if self._should_resume_reading:
            self._transport.resume_reading()
        fut = self._write_ready_fut
        if fut is not None:
            # The transport was paused when we took over and still is: the
            # real protocol hears of it when writing resumes, not now.
            fut.cancel()
        if self._should_resume_writing:
            self._protocol.resume_writing()


async def _sendfile_native(
    loop: LoopCore, transport: Any, file: Any, offset: int, count: int | None
) -> int:
    fd = transport._sock_fd
    del loop._transports[fd]  # sock_sendfile must be allowed on this fd
    resume_reading = transport.is_reading()
    transport.pause_reading()
    await transport._make_empty_waiter()
    try:
        return await sock_sendfile(loop, transport._sock, file, offset, count, fallback=False)
    finally:
        transport._reset_empty_waiter()
        if resume_reading:
            transport.resume_reading()
        loop._transports[fd] = transport


async def _sendfile_fallback(
    loop: LoopCore, transport: Any, file: Any, offset: int, count: int | None
) -> int:
    proto = _FallbackProtocol(transport)

    async def write(piece: memoryview) -> None:
        await proto.drain()
        transport.write(bytes(piece))

    try:
        return await send_in_chunks(loop, file, offset, count, FALLBACK_CHUNK, write)
    finally:
        await proto.restore()


async def sendfile(
    loop: LoopCore,
    transport: Any,
    file: Any,
    offset: int = 0,
    count: int | None = None,
    *,
    fallback: bool = True,
) -> int:
    """``loop.sendfile``: see the module docstring."""
    if transport.is_closing():
        raise RuntimeError("Transport is closing")
    mode = getattr(transport, "_sendfile_compatible", _SendfileMode.UNSUPPORTED)
    if mode is _SendfileMode.UNSUPPORTED:
        raise RuntimeError(f"sendfile is not supported for transport {transport!r}")
    check_file_params(file, offset, count)
    if mode is _SendfileMode.TRY_NATIVE:
        try:
            return await _sendfile_native(loop, transport, file, offset, count)
        except SendfileNotAvailableError:
            if not fallback:
                raise
    if not fallback:
        raise RuntimeError(
            f"fallback is disabled and native sendfile is not supported for transport {transport!r}"
        )
    return await _sendfile_fallback(loop, transport, file, offset, count)
