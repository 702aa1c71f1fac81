"""connect_read_pipe / connect_write_pipe on real pipes, on every loop.

Both ends of each pipe are file objects (``pipe_files``), so closing one
twice -- once by the transport, once at teardown -- never closes a reused fd
number. The loop fixture's teardown checks for leaked fds and unexpected
exception-handler calls.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import tempfile
import warnings

import pytest

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: far more than a pipe holds (64 KiB)


def run(loop, coro, timeout=10.0):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


def spin(loop, iterations=10):
    async def go():
        for _ in range(iterations):
            await asyncio.sleep(0)

    loop.run_until_complete(go())


async def read_until_eof(fileobj, limit=None):
    """Read a non-blocking pipe end until EOF (or ``limit`` bytes), yielding to the loop."""
    fd = fileobj.fileno()
    os.set_blocking(fd, False)
    data = bytearray()
    while limit is None or len(data) < limit:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            await asyncio.sleep(0.001)
            continue
        if not chunk:
            break
        data += chunk
    return bytes(data)


@pytest.fixture
def pipe_files(loop):
    """``make()`` -> (read file, write file) of a new pipe; closed at teardown."""
    files = []

    def make():
        r, w = os.pipe()
        rf = open(r, "rb", buffering=0)  # noqa: SIM115  # closed at teardown
        wf = open(w, "wb", buffering=0)  # noqa: SIM115
        files.extend([rf, wf])
        return rf, wf

    yield make
    for f in files:
        f.close()


class ReadProto(asyncio.Protocol):
    def __init__(self, loop):
        self.events = []
        self.data = bytearray()
        self.transport = None
        self.done = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def data_received(self, data):
        if not self.events or self.events[-1] != "data":
            self.events.append("data")
        self.data += data

    def eof_received(self):
        self.events.append("eof")

    def connection_lost(self, exc):
        self.events.append(("lost", exc))
        self.done.set_result(exc)


class WriteProto(asyncio.BaseProtocol):
    def __init__(self, loop):
        self.events = []
        self.transport = None
        self.done = loop.create_future()

    def connection_made(self, transport):
        self.transport = transport
        self.events.append("made")

    def pause_writing(self):
        self.events.append("pause")

    def resume_writing(self):
        self.events.append("resume")

    def connection_lost(self, exc):
        self.events.append(("lost", exc))
        self.done.set_result(exc)


class CountingPipe:
    """A pipe object that counts ``close()`` calls."""

    def __init__(self, fileobj):
        self.fileobj = fileobj
        self.closes = 0

    def fileno(self):
        return self.fileobj.fileno()

    def close(self):
        self.closes += 1
        self.fileobj.close()


# ---------------------------------------------------------------- read pipes


def test_read_pipe_data_then_eof(loop, pipe_files):
    rf, wf = pipe_files()
    proto = ReadProto(loop)

    async def connect():
        transport, p = await loop.connect_read_pipe(lambda: proto, rf)
        # connection_made ran before connect_read_pipe returned.
        assert p is proto and proto.transport is transport
        assert proto.events == ["made"]
        return transport

    transport = run(loop, connect())
    assert not os.get_blocking(rf.fileno())
    assert transport.get_extra_info("pipe") is rf
    assert transport.is_reading()
    os.write(wf.fileno(), b"hello ")
    os.write(wf.fileno(), b"world")
    wf.close()
    assert run(loop, proto.done) is None
    assert proto.data == b"hello world"
    assert proto.events == ["made", "data", "eof", ("lost", None)]
    assert transport.is_closing()
    assert rf.closed  # the transport closed the pipe


def test_read_pipe_large_data(loop, pipe_files):
    rf, wf = pipe_files()
    proto = ReadProto(loop)
    run(loop, loop.connect_read_pipe(lambda: proto, rf))

    async def feed():
        fd = wf.fileno()
        os.set_blocking(fd, False)
        view = memoryview(PAYLOAD)
        while view:
            try:
                n = os.write(fd, view)
            except BlockingIOError:
                await asyncio.sleep(0.001)
                continue
            view = view[n:]
        wf.close()
        await proto.done

    run(loop, feed())
    assert proto.data == PAYLOAD
    assert proto.events[-2:] == ["eof", ("lost", None)]


def test_read_pipe_pause_resume(loop, pipe_files):
    rf, wf = pipe_files()
    proto = ReadProto(loop)
    transport, _ = run(loop, loop.connect_read_pipe(lambda: proto, rf))

    transport.pause_reading()
    assert not transport.is_reading()
    transport.pause_reading()  # no-op
    os.write(wf.fileno(), b"abc")
    spin(loop)
    assert proto.data == b""

    transport.resume_reading()
    assert transport.is_reading()
    transport.resume_reading()  # no-op

    async def wait_data():
        while not proto.data:
            await asyncio.sleep(0.001)

    run(loop, wait_data())
    assert proto.data == b"abc"
    transport.close()
    assert not transport.is_reading()
    run(loop, proto.done)


def test_read_pipe_close(loop, pipe_files):
    rf, _wf = pipe_files()
    proto = ReadProto(loop)
    transport, _ = run(loop, loop.connect_read_pipe(lambda: proto, rf))
    transport.close()
    assert transport.is_closing()
    transport.close()  # no-op
    transport.resume_reading()  # no-op once closing
    assert run(loop, proto.done) is None
    spin(loop)
    assert proto.events == ["made", ("lost", None)]  # no eof_received
    assert rf.closed


def test_read_pipe_over_socket(loop):
    a, b = socket.socketpair()
    try:
        proto = ReadProto(loop)
        run(loop, loop.connect_read_pipe(lambda: proto, a))
        b.sendall(b"via socket")
        b.close()
        run(loop, proto.done)
        assert proto.data == b"via socket"
        assert proto.events == ["made", "data", "eof", ("lost", None)]
    finally:
        a.close()
        b.close()


def test_read_pipe_rejects_regular_file(loop):
    with tempfile.TemporaryFile() as f:
        with pytest.raises(ValueError, match=r"Pipe transport is for pipes/sockets only\."):
            run(loop, loop.connect_read_pipe(asyncio.Protocol, f))
        assert not f.closed


def test_write_pipe_rejects_regular_file(loop):
    with tempfile.TemporaryFile() as f:
        with pytest.raises(
            ValueError, match="Pipe transport is only for pipes, sockets and character devices"
        ):
            run(loop, loop.connect_write_pipe(asyncio.BaseProtocol, f))
        assert not f.closed


def test_cancelled_connect_closes_transport(loop, pipe_files):
    rf, _wf = pipe_files()
    proto = ReadProto(loop)

    async def main():
        task = asyncio.ensure_future(loop.connect_read_pipe(lambda: proto, rf))
        await asyncio.sleep(0)  # the transport exists, connection_made is pending
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await proto.done

    assert run(loop, main()) is None
    assert proto.events == ["made", ("lost", None)]
    assert rf.closed


def test_unclosed_read_pipe_warns(loop, pipe_files):
    rf, _wf = pipe_files()
    proto = ReadProto(loop)
    transport, _ = run(loop, loop.connect_read_pipe(lambda: proto, rf))
    loop.close()
    assert "open" in repr(transport)
    proto.transport = None
    with pytest.warns(ResourceWarning, match="unclosed transport"):
        transport = proto = None
        gc.collect()
    assert rf.closed


# ---------------------------------------------------------------- write pipes


def test_write_pipe_write_and_writelines(loop, pipe_files):
    rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, p = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    assert p is proto and proto.events == ["made"]
    assert transport.get_extra_info("pipe") is wf
    assert not os.get_blocking(wf.fileno())
    assert transport.can_write_eof()
    transport.write(b"one ")
    transport.write(bytearray(b"two "))
    transport.write(memoryview(b"three "))
    transport.write(b"")
    transport.writelines([b"four ", b"five"])
    assert transport.get_write_buffer_size() == 0
    transport.write_eof()
    assert transport.is_closing()
    assert run(loop, read_until_eof(rf)) == b"one two three four five"
    assert run(loop, proto.done) is None
    assert proto.events == ["made", ("lost", None)]
    assert wf.closed


def test_write_pipe_flow_control(loop, pipe_files):
    rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    transport.set_write_buffer_limits(high=16 * 1024)
    assert transport.get_write_buffer_limits() == (4 * 1024, 16 * 1024)

    transport.write(PAYLOAD)
    # The pipe took what it holds; the rest is buffered, above the high mark.
    assert 0 < transport.get_write_buffer_size() < len(PAYLOAD)
    assert proto.events == ["made", "pause"]
    transport.write(b"!")  # still paused: no second pause_writing
    assert proto.events == ["made", "pause"]

    received = run(loop, read_until_eof(rf, limit=len(PAYLOAD) + 1))
    assert received == PAYLOAD + b"!"
    assert transport.get_write_buffer_size() == 0
    assert proto.events == ["made", "pause", "resume"]
    transport.close()
    assert run(loop, proto.done) is None


def test_close_flushes_pending_writes(loop, pipe_files):
    rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    transport.write(PAYLOAD)
    assert transport.get_write_buffer_size() > 0
    transport.close()
    assert transport.is_closing()
    transport.write(b"dropped")  # after close(): silently dropped
    spin(loop)
    assert ("lost", None) not in proto.events  # still flushing
    assert run(loop, read_until_eof(rf)) == PAYLOAD
    assert run(loop, proto.done) is None
    assert proto.events == ["made", "pause", "resume", ("lost", None)]
    assert wf.closed


def test_abort_drops_pending_writes(loop, pipe_files):
    rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    transport.write(PAYLOAD)
    buffered = transport.get_write_buffer_size()
    assert buffered > 0
    transport.abort()
    assert transport.get_write_buffer_size() == 0
    assert run(loop, proto.done) is None
    received = run(loop, read_until_eof(rf))
    assert received == PAYLOAD[: len(PAYLOAD) - buffered]  # only what the pipe held
    assert proto.events == ["made", "pause", ("lost", None)]


def test_peer_closed_with_pending_data(loop, pipe_files):
    rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    transport.write(PAYLOAD)
    rf.close()
    exc = run(loop, proto.done)
    assert isinstance(exc, BrokenPipeError)
    assert transport.is_closing()
    assert transport.get_write_buffer_size() == 0
    transport.write(b"more")  # dropped, no error
    assert wf.closed


def test_peer_closed_while_idle(loop, pipe_files):
    rf, wf = pipe_files()
    proto = WriteProto(loop)
    run(loop, loop.connect_write_pipe(lambda: proto, wf))
    rf.close()
    # Noticed through the read-readiness trick, with nothing lost.
    assert run(loop, proto.done) is None
    assert wf.closed


def test_write_after_peer_closed_is_broken_pipe(loop, pipe_files):
    rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    rf.close()
    transport.write(b"x")  # before the loop noticed: os.write() fails with EPIPE
    exc = run(loop, proto.done)
    assert isinstance(exc, BrokenPipeError)


def test_write_pipe_over_socket_peer_closes(loop):
    a, b = socket.socketpair()
    try:
        proto = WriteProto(loop)
        transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, a))
        transport.write(b"ping")
        assert b.recv(10) == b"ping"
        b.close()
        assert run(loop, proto.done) is None
    finally:
        a.close()
        b.close()


def test_read_and_write_transports_end_to_end(loop, pipe_files):
    rf, wf = pipe_files()
    rproto = ReadProto(loop)
    wproto = WriteProto(loop)
    run(loop, loop.connect_read_pipe(lambda: rproto, rf))
    wtransport, _ = run(loop, loop.connect_write_pipe(lambda: wproto, wf))
    wtransport.write(PAYLOAD)
    wtransport.close()
    run(loop, rproto.done)
    run(loop, wproto.done)
    assert rproto.data == PAYLOAD
    assert rproto.events[-2:] == ["eof", ("lost", None)]


def test_unclosed_write_pipe_warns(loop, pipe_files):
    _rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    loop.close()
    assert "open" in repr(transport)
    proto.transport = None
    with pytest.warns(ResourceWarning, match="unclosed transport"):
        transport = proto = None
        gc.collect()
    assert wf.closed


# ---------------------------------------------------------------- corun only


@pytest.mark.corun_only
def test_connection_lost_and_close_exactly_once(loop, pipe_files):
    # asyncio schedules connection_lost twice here (close() then abort()).
    rf, wf = pipe_files()
    pipe = CountingPipe(wf)
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, pipe))
    transport.write(PAYLOAD)
    transport.close()
    transport.abort()
    transport.abort()
    transport.close()
    run(loop, proto.done)
    spin(loop)
    assert proto.events.count(("lost", None)) == 1
    assert pipe.closes == 1
    rf.close()


@pytest.mark.corun_only
def test_transport_owns_its_fd(loop, pipe_files):
    rf, _wf = pipe_files()
    proto = ReadProto(loop)
    transport, _ = run(loop, loop.connect_read_pipe(lambda: proto, rf))
    with pytest.raises(RuntimeError, match="is used by transport"):
        loop.add_reader(rf.fileno(), print)
    assert "polling" in repr(transport)
    transport.pause_reading()
    assert "idle" in repr(transport)
    transport.close()
    run(loop, proto.done)
    assert "closed" in repr(transport)


@pytest.mark.corun_only
def test_write_rejects_non_bytes(loop, pipe_files):
    _rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    with pytest.raises(TypeError, match="bytes-like object, not 'str'"):
        transport.write("text")
    transport.close()
    run(loop, proto.done)


@pytest.mark.corun_only
def test_write_pipe_on_a_closed_loop_releases_the_fd(loop, pipe_files):
    _rf, wf = pipe_files()
    proto = WriteProto(loop)
    transport, _ = run(loop, loop.connect_write_pipe(lambda: proto, wf))
    loop.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        transport.close()  # no callback can run; the fd is still released
    assert wf.closed
    assert "closed" in repr(transport)
