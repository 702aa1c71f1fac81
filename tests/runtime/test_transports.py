"""Stream transports: flow control, half-close, abort, buffered protocols, on both loops."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from netkit import HOST, Factory, Recorder, closing, run, shut, tcp_pair, until

pytestmark = pytest.mark.timeout(30)


def test_write_flow_control_water_marks(loop):
    """Fill a socket whose peer doesn't read: pause_writing above the high-water
    mark, resume_writing at the low-water mark once the peer reads."""

    async def main():
        server, tr, pr, srv = await tcp_pair(loop, lambda: Recorder(pause_on_made=True))
        assert srv.transport.is_reading() is False
        tr.set_write_buffer_limits(high=64 * 1024, low=16 * 1024)
        assert tr.get_write_buffer_limits() == (16 * 1024, 64 * 1024)
        chunk = b"z" * (256 * 1024)
        sent = 0
        while not pr.paused:
            tr.write(chunk)
            sent += len(chunk)
            await asyncio.sleep(0)
            assert sent < 1 << 30, "pause_writing never called"
        assert pr.size_at_pause > 64 * 1024
        assert tr.get_write_buffer_size() > 64 * 1024
        await asyncio.sleep(0.05)
        assert pr.resumed == 0 and not srv.data  # the peer is still not reading
        srv.transport.resume_reading()
        await until(lambda: pr.resumed, what="resume_writing")
        assert pr.size_at_resume <= 16 * 1024
        await until(lambda: len(srv.data) == sent, timeout=20)
        assert tr.get_write_buffer_size() == 0
        assert pr.events.count("pause") == pr.events.count("resume") == pr.paused
        with pytest.raises(ValueError):
            tr.set_write_buffer_limits(high=10, low=20)
        tr.set_write_buffer_limits(high=0)  # low defaults to high // 4
        assert tr.get_write_buffer_limits() == (0, 0)
        await closing(tr, srv.transport)
        await shut(server)

    run(loop, main())


def test_set_write_buffer_limits_pauses_at_once(loop):
    async def main():
        server, tr, pr, srv = await tcp_pair(loop, lambda: Recorder(pause_on_made=True))
        tr.set_write_buffer_limits(high=1 << 30)
        while tr.get_write_buffer_size() < 200_000:
            tr.write(b"q" * 65536)
            await asyncio.sleep(0)
        assert pr.paused == 0
        tr.set_write_buffer_limits(high=100_000)
        assert pr.paused == 1  # above the new mark: paused right away
        tr.abort()
        srv.transport.close()
        await until(lambda: pr.lost and srv.lost)
        await shut(server)

    run(loop, main())


def test_pause_and_resume_reading(loop):
    async def main():
        server, tr, _pr, srv = await tcp_pair(loop)
        st = srv.transport
        assert st.is_reading()
        st.pause_reading()
        st.pause_reading()  # idempotent
        assert not st.is_reading()
        tr.write(b"abc")
        await asyncio.sleep(0.05)
        assert srv.data == b""
        st.resume_reading()
        st.resume_reading()
        assert st.is_reading()
        await until(lambda: srv.data == b"abc")
        await closing(tr, st)
        await shut(server)

    run(loop, main())


def test_half_close_eof_received_true_keeps_writing(loop):
    async def main():
        server, tr, pr, srv = await tcp_pair(loop, lambda: Recorder(keep_open_on_eof=True))
        assert tr.can_write_eof()
        tr.write(b"request")
        tr.write_eof()
        with pytest.raises(RuntimeError):
            tr.write(b"late")  # cannot write after write_eof
        await until(lambda: srv.eof)
        assert srv.data == b"request" and not srv.lost
        srv.transport.write(b"response after eof")
        await until(lambda: pr.data == b"response after eof")
        assert not pr.lost
        srv.transport.close()
        await until(lambda: pr.lost and srv.lost)
        assert pr.events == ["made", "eof", "lost"]
        assert srv.exc is None and pr.exc is None
        tr.close()
        await shut(server)

    run(loop, main())


def test_eof_received_false_closes(loop):
    async def main():
        server, tr, pr, srv = await tcp_pair(loop)
        tr.write_eof()
        await until(lambda: srv.lost)
        assert srv.events == ["made", "eof", "lost"]
        await until(lambda: pr.lost)  # the server closed: the client sees EOF
        assert pr.events == ["made", "eof", "lost"]
        await shut(server)

    run(loop, main())


def test_abort_discards_buffer(loop):
    async def main():
        server, tr, pr, srv = await tcp_pair(loop, lambda: Recorder(pause_on_made=True))
        while tr.get_write_buffer_size() == 0:
            tr.write(b"a" * (1 << 20))
            await asyncio.sleep(0)
        tr.abort()
        assert tr.is_closing()
        await until(lambda: pr.lost)
        assert pr.exc is None
        assert tr.get_write_buffer_size() == 0
        srv.transport.close()
        await until(lambda: srv.lost)
        await shut(server)

    run(loop, main())


def test_close_flushes_pending_writes(loop):
    payload = os.urandom(8 * 1024 * 1024)

    async def main():
        server, tr, pr, srv = await tcp_pair(loop)
        tr.write(payload)
        tr.write(b"THE END")
        assert tr.get_write_buffer_size() > 0
        tr.close()
        assert tr.is_closing()
        tr.close()
        await until(lambda: srv.lost, timeout=20)
        assert bytes(srv.data) == payload + b"THE END"
        assert srv.eof and srv.exc is None
        await until(lambda: pr.lost)
        assert pr.exc is None and "eof" not in pr.events
        await shut(server)

    run(loop, main())


def test_write_types_and_writelines_many_small_buffers(loop):
    async def main():
        server, tr, _pr, srv = await tcp_pair(loop)
        pieces = [b"%d," % i for i in range(20000)]
        mixed = [bytearray(b"ba"), memoryview(b"--mv--")[2:4], b""]
        tr.writelines(pieces)
        tr.writelines(mixed)
        tr.write(bytearray(b"[ba]"))
        tr.write(memoryview(b"[mv]"))
        with pytest.raises(TypeError):
            tr.write("str")
        expected = b"".join(pieces) + b"bamv[ba][mv]"
        await until(lambda: len(srv.data) >= len(expected))
        assert bytes(srv.data) == expected
        await closing(tr, srv.transport)
        await shut(server)

    run(loop, main())


def test_transport_basics(loop):
    async def main():
        server, tr, pr, srv = await tcp_pair(loop)
        assert tr.get_protocol() is pr
        other = Recorder()
        tr.set_protocol(other)
        assert tr.get_protocol() is other
        srv.transport.write(b"to other")
        await until(lambda: other.data == b"to other")
        assert pr.data == b""
        tr.set_protocol(pr)
        assert tr.get_write_buffer_size() == 0
        low, high = tr.get_write_buffer_limits()
        assert 0 <= low <= high
        assert tr.get_extra_info("peercert") is None
        assert tr.get_extra_info("sslcontext") is None
        await closing(tr, srv.transport)
        await shut(server)

    run(loop, main())


class BufferedRecorder(asyncio.BufferedProtocol):
    def __init__(self, size: int = 4096) -> None:
        self.buf = bytearray(size)
        self.data = bytearray()
        self.hints: list[int] = []
        self.transport: Any = None
        self.eof = False
        self.lost = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        self.hints.append(sizehint)
        return memoryview(self.buf)

    def buffer_updated(self, nbytes: int) -> None:
        assert 0 < nbytes <= len(self.buf)
        self.data += self.buf[:nbytes]

    def eof_received(self) -> None:
        self.eof = True

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True


def test_buffered_protocol(loop):
    payload = os.urandom(2 * 1024 * 1024)

    async def main():
        server, tr, pr, srv = await tcp_pair(loop, client_proto=BufferedRecorder)
        srv.transport.write(payload)
        srv.transport.close()
        await until(lambda: pr.lost, timeout=20)
        assert bytes(pr.data) == payload and pr.eof
        assert pr.hints and all(isinstance(h, int) for h in pr.hints)
        tr.close()
        await shut(server)

    run(loop, main())


def test_buffered_protocol_on_server_side(loop):
    factory = Factory(lambda: BufferedRecorder(100))

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        tr, _ = await loop.create_connection(Recorder, *server.sockets[0].getsockname())
        tr.write(b"0123456789" * 1000)
        tr.close()
        await until(lambda: factory.protos and factory.protos[0].lost)
        assert factory.protos[0].data == b"0123456789" * 1000
        await shut(server)

    run(loop, main())


def test_stream_transport_is_an_asyncio_transport_that_takes_patches(loop):
    """As asyncio's: a subclass of asyncio.Transport, and methods patched on the instance win.

    uvicorn's own tests replace ``transport.write`` on the instance, and
    websockets' patch ``asyncio.BaseTransport.get_extra_info`` on the class.
    """

    async def main() -> None:
        server = await loop.create_server(asyncio.Protocol, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        try:
            assert issubclass(type(transport), asyncio.Transport)
            assert transport.get_extra_info("peername") == ("127.0.0.1", port)
            written: list[bytes] = []
            transport.write = written.append  # type: ignore[method-assign]
            transport.write(b"x")
            assert written == [b"x"]
        finally:
            transport.close()
            server.close()
            await server.wait_closed()

    loop.run_until_complete(main())
