"""The network half of the loop, on real sockets: written once, run on both loops.

TCP on 127.0.0.1 (and ::1 where it matters), Unix sockets in a short temporary
directory, UDP, regular files for sendfile.  Every test closes its transports,
servers and sockets before the ``loop`` fixture's teardown, which fails the
test on a leaked fd or an exception-handler call the test did not consume.

A test whose loop lacks a network method (corun raises asyncio's
``NotImplementedError`` from ``AbstractEventLoop`` until the method lands) is
skipped with the method's name instead of failing: see :func:`run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import io
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(30)

HOST = "127.0.0.1"


def _has_ipv6() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


HAS_IPV6 = _has_ipv6()
needs_ipv6 = pytest.mark.skipif(not HAS_IPV6, reason="no IPv6 loopback")


# --------------------------------------------------------------------------- helpers


def _unimplemented_method(exc: NotImplementedError) -> str | None:
    """The AbstractEventLoop method that raised ``exc``, if it was one."""
    frames = traceback.extract_tb(exc.__traceback__)
    if frames and os.path.samefile(frames[-1].filename, asyncio.events.__file__):
        return frames[-1].name
    return None


def run(loop: asyncio.AbstractEventLoop, coro: Awaitable[Any], timeout: float = 15.0) -> Any:
    """Run ``coro`` on ``loop`` with a deadline.

    A loop that does not implement a method yet (``NotImplementedError`` from
    asyncio's ``AbstractEventLoop``) skips the test, naming the method.
    """
    try:
        return loop.run_until_complete(asyncio.wait_for(coro, timeout))
    except NotImplementedError as exc:
        name = _unimplemented_method(exc)
        if name is None:
            raise
        pytest.skip(f"{type(loop).__name__} does not implement {name}() yet")


async def until(pred: Callable[[], object], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``pred`` every millisecond of loop time until it is true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


def io_registrations(loop: asyncio.AbstractEventLoop) -> int:
    """fds the loop watches: corun's public statistics, the selector map for asyncio."""
    stats = getattr(loop, "statistics", None)
    if stats is not None:
        return int(stats().io_registrations)
    return len(loop._selector.get_map())  # type: ignore[attr-defined]


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port on HOST nobody listens on (kept bound, so nobody else takes it)."""
    s = socket.socket()
    s.bind((HOST, 0))
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a path short enough for AF_UNIX (108 bytes)."""
    d = tempfile.mkdtemp(prefix="corun-", dir="/tmp")
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def payload_file(tmp_path: Path) -> tuple[Path, bytes]:
    data = os.urandom(3 * 1024 * 1024 + 123)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    return path, data


class Recorder(asyncio.Protocol):
    """Records every protocol callback."""

    def __init__(self, *, keep_open_on_eof: bool = False, pause_on_made: bool = False) -> None:
        self.transport: Any = None
        self.data = bytearray()
        self.events: list[str] = []
        self.eof = False
        self.lost = False
        self.exc: BaseException | None = None
        self.paused = 0
        self.resumed = 0
        self.size_at_pause = -1
        self.size_at_resume = -1
        self.keep_open_on_eof = keep_open_on_eof
        self.pause_on_made = pause_on_made

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.events.append("made")
        if self.pause_on_made:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        assert not self.eof and not self.lost
        self.data += data

    def eof_received(self) -> bool:
        self.eof = True
        self.events.append("eof")
        return self.keep_open_on_eof

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True
        self.exc = exc
        self.events.append("lost")

    def pause_writing(self) -> None:
        self.paused += 1
        self.size_at_pause = self.transport.get_write_buffer_size()
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.resumed += 1
        self.size_at_resume = self.transport.get_write_buffer_size()
        self.events.append("resume")


class Factory:
    """A protocol factory that keeps the protocols it made."""

    def __init__(self, cls: Callable[[], asyncio.BaseProtocol] = Recorder) -> None:
        self.cls = cls
        self.protos: list[Any] = []

    def __call__(self) -> Any:
        proto = self.cls()
        self.protos.append(proto)
        return proto

    async def wait(self, n: int = 1) -> Any:
        await until(lambda: len(self.protos) >= n and self.protos[n - 1].transport, what="accept")
        return self.protos[n - 1]


async def closing(*transports: Any) -> None:
    """Close transports and wait for their connection_lost."""
    protos = [t.get_protocol() for t in transports]
    for t in transports:
        t.close()
    for proto in protos:
        if isinstance(proto, Recorder):
            await until(lambda p=proto: p.lost, what="connection_lost")
    await asyncio.sleep(0)


async def shut(server: asyncio.AbstractServer) -> None:
    server.close()
    await server.wait_closed()


def set_rst_on_close(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def nb_listener(
    family: int = socket.AF_INET, addr: Any = (HOST, 0), backlog: int = 16
) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind(addr)
    s.listen(backlog)
    s.setblocking(False)
    return s


# --------------------------------------------------------------------------- sock_* methods


def test_sock_sendall_and_recv_socketpair(loop, fds):
    a, b = fds.socketpair()

    async def main():
        reader = asyncio.ensure_future(loop.sock_recv(b, 100))
        await asyncio.sleep(0.01)
        assert not reader.done()  # waits for data
        await loop.sock_sendall(a, b"hello")
        assert await reader == b"hello"
        a.shutdown(socket.SHUT_WR)
        assert await loop.sock_recv(b, 100) == b""

    run(loop, main())


def test_sock_recv_into(loop, fds):
    a, b = fds.socketpair()

    async def main():
        buf = bytearray(8)
        task = asyncio.ensure_future(loop.sock_recv_into(b, buf))
        await asyncio.sleep(0.01)
        assert not task.done()
        await loop.sock_sendall(a, b"0123456789")
        n = await task
        assert n == 8 and buf == b"01234567"
        view = memoryview(bytearray(16))
        n = await loop.sock_recv_into(b, view[4:])
        assert n == 2 and bytes(view[4:6]) == b"89"

    run(loop, main())


def test_sock_sendall_large_payload_tcp(loop, fds):
    """sendall of more than the kernel buffers hold waits for the peer to read."""
    listener = nb_listener()
    fds.items.append(listener)
    payload = os.urandom(16 * 1024 * 1024)

    async def main():
        client = socket.socket()
        client.setblocking(False)
        fds.items.append(client)
        accept = asyncio.ensure_future(loop.sock_accept(listener))
        await loop.sock_connect(client, listener.getsockname())
        conn, addr = await accept
        fds.items.append(conn)
        assert addr == client.getsockname()
        assert conn.gettimeout() == 0.0  # accepted sockets are non-blocking
        send = asyncio.ensure_future(loop.sock_sendall(client, payload))
        got = bytearray()
        while len(got) < len(payload):
            chunk = await loop.sock_recv(conn, 1 << 20)
            assert chunk
            got += chunk
        assert await send is None
        assert got == payload

    run(loop, main())


def test_sock_connect_accept_unix(loop, fds, short_tmp):
    path = str(short_tmp / "s.sock")
    listener = nb_listener(socket.AF_UNIX, path)
    fds.items.append(listener)

    async def main():
        client = socket.socket(socket.AF_UNIX)
        client.setblocking(False)
        fds.items.append(client)
        accept = asyncio.ensure_future(loop.sock_accept(listener))
        await asyncio.sleep(0.01)
        assert not accept.done()
        await loop.sock_connect(client, path)
        conn, _ = await accept
        fds.items.append(conn)
        await loop.sock_sendall(conn, b"over unix")
        assert await loop.sock_recv(client, 100) == b"over unix"

    run(loop, main())


def test_sock_connect_resolves_host(loop, fds):
    listener = nb_listener()
    fds.items.append(listener)
    port = listener.getsockname()[1]

    async def main():
        client = socket.socket()
        client.setblocking(False)
        fds.items.append(client)
        await loop.sock_connect(client, ("localhost", port))
        assert client.getpeername() == (HOST, port)

    run(loop, main())


def test_sock_connect_refused(loop, fds):
    async def main():
        with refused_port() as port:
            client = socket.socket()
            client.setblocking(False)
            fds.items.append(client)
            with pytest.raises(ConnectionRefusedError):
                await loop.sock_connect(client, (HOST, port))

    run(loop, main())


def test_sock_udp_sendto_recvfrom(loop, fds):
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fds.items += [a, b]
    for s in (a, b):
        s.setblocking(False)
        s.bind((HOST, 0))

    async def main():
        recv = asyncio.ensure_future(loop.sock_recvfrom(b, 100))
        await asyncio.sleep(0.01)
        assert not recv.done()
        assert await loop.sock_sendto(a, b"dgram-1", b.getsockname()) == 7
        data, addr = await recv
        assert (data, addr) == (b"dgram-1", a.getsockname())

        buf = bytearray(5)
        recv_into = asyncio.ensure_future(loop.sock_recvfrom_into(b, buf))
        await asyncio.sleep(0.01)
        assert not recv_into.done()
        await loop.sock_sendto(a, b"dgram-2", b.getsockname())
        n, addr = await recv_into
        assert (n, bytes(buf), addr) == (5, b"dgram", a.getsockname())

        buf = bytearray(100)
        await loop.sock_sendto(a, b"abcdef", b.getsockname())
        n, addr = await loop.sock_recvfrom_into(b, buf, 3)
        assert (n, bytes(buf[:3])) == (3, b"abc")

    run(loop, main())


def test_sock_sendfile(loop, fds, payload_file):
    path, data = payload_file
    listener = nb_listener()
    fds.items.append(listener)

    async def main():
        client = socket.socket()
        client.setblocking(False)
        fds.items.append(client)
        accept = asyncio.ensure_future(loop.sock_accept(listener))
        await loop.sock_connect(client, listener.getsockname())
        conn, _ = await accept
        fds.items.append(conn)

        async def read_exactly(n):
            got = bytearray()
            while len(got) < n:
                chunk = await loop.sock_recv(conn, 1 << 20)
                assert chunk
                got += chunk
            return bytes(got)

        with open(path, "rb") as f:
            reader = asyncio.ensure_future(read_exactly(len(data)))
            assert await loop.sock_sendfile(client, f) == len(data)
            assert f.tell() == len(data)
            assert await reader == data

            # offset + count, native only
            reader = asyncio.ensure_future(read_exactly(1000))
            assert await loop.sock_sendfile(client, f, 5000, 1000, fallback=False) == 1000
            assert f.tell() == 6000
            assert await reader == data[5000:6000]

        # not a regular file: the fallback reads and sends it
        buf = io.BytesIO(data[:70000])
        reader = asyncio.ensure_future(read_exactly(70000))
        assert await loop.sock_sendfile(client, buf) == 70000
        assert await reader == data[:70000]
        with pytest.raises(asyncio.SendfileNotAvailableError):
            await loop.sock_sendfile(client, io.BytesIO(b"x"), fallback=False)

    run(loop, main())


def _filled_socketpair(fds) -> tuple[socket.socket, socket.socket]:
    a, b = fds.socketpair()
    with contextlib.suppress(BlockingIOError):
        while True:
            a.send(b"x" * 65536)
    return a, b


def test_cancelled_sock_ops_leave_no_registration(loop, loop_kind, fds):
    """A cancelled sock_* call removes the reader/writer it added."""
    a, b = fds.socketpair()
    full, _peer = _filled_socketpair(fds)
    listener = nb_listener()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.setblocking(False)
    udp.bind((HOST, 0))
    fds.items += [listener, udp]

    ops: list[tuple[str, Callable[[], Awaitable[Any]], socket.socket]] = [
        ("sock_recv", lambda: loop.sock_recv(b, 10), b),
        ("sock_recv_into", lambda: loop.sock_recv_into(b, bytearray(10)), b),
        ("sock_accept", lambda: loop.sock_accept(listener), listener),
        ("sock_recvfrom", lambda: loop.sock_recvfrom(udp, 10), udp),
        ("sock_recvfrom_into", lambda: loop.sock_recvfrom_into(udp, bytearray(10)), udp),
        ("sock_sendall", lambda: loop.sock_sendall(full, b"y" * 1024 * 1024), full),
    ]

    async def main():
        await asyncio.sleep(0)
        baseline = io_registrations(loop)
        for name, start, sock in ops:
            task = asyncio.ensure_future(start())
            await asyncio.sleep(0.02)
            assert not task.done(), name
            assert io_registrations(loop) == baseline + 1, name
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert io_registrations(loop) == baseline, f"{name} left a registration"
            assert loop.remove_reader(sock.fileno()) is False, name
            assert loop.remove_writer(sock.fileno()) is False, name
        # The cancelled reads consumed nothing: data sent now is all there.
        await loop.sock_sendall(a, b"after")
        assert await loop.sock_recv(b, 10) == b"after"

    run(loop, main())


def test_cancelled_sock_connect_leaves_no_registration(loop, fds):
    """A connect stuck in SYN_SENT (the listener's accept queue is full)."""
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen(0)
    fds.items.append(listener)
    addr = listener.getsockname()
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        fds.items.append(s)
        fillers.append(s)
        with contextlib.suppress(BlockingIOError):
            s.connect(addr)

    async def main():
        await asyncio.sleep(0.05)
        baseline = io_registrations(loop)
        client = socket.socket()
        client.setblocking(False)
        fds.items.append(client)
        task = asyncio.ensure_future(loop.sock_connect(client, addr))
        await asyncio.sleep(0.1)
        if task.done():
            task.result()
            pytest.skip("the kernel completed a connect to a full accept queue")
        assert io_registrations(loop) == baseline + 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert io_registrations(loop) == baseline
        assert loop.remove_writer(client.fileno()) is False

    run(loop, main())


# --------------------------------------------------------------------------- create_connection


def test_create_connection_host_port(loop):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(Recorder, HOST, port)
        assert pr.transport is tr and pr.events == ["made"]
        srv = await factory.wait()
        tr.write(b"ping")
        await until(lambda: srv.data == b"ping")
        srv.transport.write(b"pong")
        await until(lambda: pr.data == b"pong")

        assert tr.get_extra_info("peername") == (HOST, port)
        sockname = tr.get_extra_info("sockname")
        assert srv.transport.get_extra_info("peername") == sockname
        sock = tr.get_extra_info("socket")
        assert sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM
        assert sock.getsockname() == sockname and sock.fileno() >= 0
        assert tr.get_extra_info("no-such-key", "dflt") == "dflt"
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert not tr.is_closing()
        await closing(tr)
        assert tr.is_closing() and pr.exc is None
        await until(lambda: srv.lost)
        assert srv.events == ["made", "eof", "lost"]
        await shut(server)

    run(loop, main())


def test_create_connection_with_sock(loop, fds):
    listener = nb_listener()
    fds.items.append(listener)

    async def main():
        s = socket.socket()
        s.setblocking(False)
        await loop.sock_connect(s, listener.getsockname())
        conn, _ = await loop.sock_accept(listener)
        fds.items.append(conn)
        tr, _ = await loop.create_connection(Recorder, sock=s)
        assert tr.get_extra_info("peername") == listener.getsockname()
        tr.write(b"via sock")
        assert await loop.sock_recv(conn, 100) == b"via sock"
        await closing(tr)
        assert s.fileno() == -1  # the transport owned the socket

    run(loop, main())


def test_create_connection_local_addr(loop):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        local_port = free_port()
        tr, _ = await loop.create_connection(Recorder, HOST, port, local_addr=(HOST, local_port))
        assert tr.get_extra_info("sockname") == (HOST, local_port)
        srv = await factory.wait()
        assert srv.transport.get_extra_info("peername") == (HOST, local_port)
        await closing(tr)
        await shut(server)

    run(loop, main())


@pytest.mark.parametrize("host", [HOST, "localhost"])
def test_create_connection_happy_eyeballs_and_interleave(loop, host):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        tr1, _ = await loop.create_connection(Recorder, host, port, happy_eyeballs_delay=0.05)
        tr2, _ = await loop.create_connection(Recorder, host, port, interleave=1)
        tr3, _ = await loop.create_connection(
            Recorder, host, port, happy_eyeballs_delay=0.05, interleave=2
        )
        for tr in (tr1, tr2, tr3):
            assert tr.get_extra_info("peername") == (HOST, port)
        await factory.wait(3)
        await closing(tr1, tr2, tr3)
        await shut(server)

    run(loop, main())


def test_create_connection_refused(loop):
    async def main():
        with refused_port() as port:
            with pytest.raises(ConnectionRefusedError):
                await loop.create_connection(Recorder, HOST, port)
            with pytest.raises(OSError):
                await loop.create_connection(Recorder, HOST, port, happy_eyeballs_delay=0.05)

    run(loop, main())


def test_create_connection_all_errors(loop):
    if "all_errors" not in inspect.signature(loop.create_connection).parameters:
        pytest.skip(f"{type(loop).__name__}.create_connection has no all_errors (Python 3.12+)")

    async def main():
        with refused_port() as port:
            with pytest.raises(ConnectionRefusedError):
                await loop.create_connection(Recorder, HOST, port, all_errors=False)
            with pytest.raises(ExceptionGroup) as info:
                await loop.create_connection(Recorder, HOST, port, all_errors=True)
            assert info.value.exceptions
            assert all(isinstance(e, OSError) for e in info.value.exceptions)
            assert isinstance(info.value.exceptions[0], ConnectionRefusedError)
            with pytest.raises(ExceptionGroup):
                await loop.create_connection(
                    Recorder, HOST, port, all_errors=True, happy_eyeballs_delay=0.05
                )

    run(loop, main())


def test_create_connection_bad_arguments(loop):
    async def main():
        with pytest.raises(ValueError):
            await loop.create_connection(Recorder)  # neither host/port nor sock
        with socket.socket() as s, pytest.raises(ValueError):
            await loop.create_connection(Recorder, HOST, 1, sock=s)
        with (
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s,
            pytest.raises(ValueError),
        ):
            await loop.create_connection(Recorder, sock=s)

    run(loop, main())


# --------------------------------------------------------------------------- create_server


@needs_ipv6
def test_create_server_multiple_hosts(loop):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, [HOST, "::1"], 0)
        families = sorted(s.family for s in server.sockets)
        assert families == sorted([socket.AF_INET, socket.AF_INET6])
        transports = []
        for s in server.sockets:
            host, port = s.getsockname()[:2]
            tr, _ = await loop.create_connection(Recorder, host, port)
            transports.append(tr)
        await factory.wait(2)
        peers = {p.transport.get_extra_info("sockname")[0] for p in factory.protos}
        assert peers == {HOST, "::1"}
        await closing(*transports)
        await shut(server)

    run(loop, main())


def test_create_server_reuse_address_and_reuse_port(loop):
    async def main():
        s1 = await loop.create_server(Recorder, HOST, 0, reuse_address=True, reuse_port=True)
        sock = s1.sockets[0]
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) != 0
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) != 0
        port = sock.getsockname()[1]
        # A second listener on the same port: only allowed with SO_REUSEPORT.
        s2 = await loop.create_server(Recorder, HOST, port, reuse_port=True)
        assert s2.sockets[0].getsockname() == (HOST, port)
        with pytest.raises(OSError) as info:
            await loop.create_server(Recorder, HOST, port)
        assert info.value.errno == errno.EADDRINUSE
        await shut(s1)
        await shut(s2)

        s3 = await loop.create_server(Recorder, HOST, 0, reuse_address=False)
        assert s3.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 0
        await shut(s3)

    run(loop, main())


def test_create_server_backlog(loop, fds):
    """The listen backlog reaches the kernel: while the loop is not running
    (nothing accepts), at most backlog + 1 connects complete (Linux drops SYNs
    on a full accept queue)."""

    def completed_connects(backlog):
        factory = Factory()
        server = run(loop, loop.create_server(factory, HOST, 0, backlog=backlog))
        addr = server.sockets[0].getsockname()
        clients = []
        for _ in range(10):
            c = socket.socket()
            c.setblocking(False)
            fds.items.append(c)
            clients.append(c)
            with contextlib.suppress(BlockingIOError):
                c.connect(addr)
        time.sleep(0.3)  # the loop is not running: nobody accepts
        _, writable, _ = select.select([], clients, [], 0)
        done = [c for c in writable if c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0]
        for c in clients:
            fds.close(c)

        async def cleanup():
            await shut(server)
            await asyncio.sleep(0.05)
            # Connections accepted meanwhile see EOF and close.  (asyncio may
            # fail to make a transport for a connection reset before accept:
            # its protocol never hears connection_made.)
            await until(lambda: all(p.lost for p in factory.protos if p.transport))

        run(loop, cleanup())
        return len(done)

    assert completed_connects(20) == 10
    assert 1 <= completed_connects(2) <= 3


def test_create_server_start_serving_later(loop):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, HOST, 0, start_serving=False)
        assert not server.is_serving()
        assert server.get_loop() is loop
        port = server.sockets[0].getsockname()[1]
        await asyncio.sleep(0.01)
        await server.start_serving()
        assert server.is_serving()
        tr, _ = await loop.create_connection(Recorder, HOST, port)
        await factory.wait()
        await server.start_serving()  # idempotent
        await closing(tr)
        await shut(server)
        assert not server.is_serving()
        await until(lambda: factory.protos[0].lost)

    run(loop, main())


def test_server_serve_forever_cancel(loop):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, HOST, 0, start_serving=False)
        port = server.sockets[0].getsockname()[1]
        task = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0.01)
        assert server.is_serving()
        tr, _ = await loop.create_connection(Recorder, HOST, port)
        srv = await factory.wait()
        try:
            with pytest.raises(RuntimeError):
                await server.serve_forever()  # already being awaited
            task.cancel()
            # serve_forever() closes the server when cancelled; the connection
            # it accepted stays open (Python 3.11: wait_closed() does not wait
            # for connections).
            await asyncio.wait([task], timeout=5)
            assert task.done(), "serve_forever() still running 5 s after cancel()"
            assert task.cancelled()
            assert not server.is_serving()
            assert len(server.sockets) == 0
            with pytest.raises(ConnectionRefusedError):
                await loop.create_connection(Recorder, HOST, port)
            await asyncio.wait_for(server.wait_closed(), 5)
            # The accepted connection outlives the server.
            tr.write(b"still here")
            await until(lambda: srv.data == b"still here")
        finally:
            await closing(tr, srv.transport)
            if not task.done():
                task.cancel()
                await asyncio.wait([task], timeout=5)

    run(loop, main())


def test_server_close_wait_closed_and_async_with(loop):
    async def main():
        server = await loop.create_server(Recorder, HOST, 0)
        assert server.is_serving()
        sock = server.sockets[0]
        port = sock.getsockname()[1]
        async with server as same:
            assert same is server
        assert not server.is_serving()
        assert len(server.sockets) == 0
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(Recorder, HOST, port)
        server.close()  # twice is fine
        await server.wait_closed()

    run(loop, main())


def test_server_close_with_live_connections(loop):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        clients = [(await loop.create_connection(Recorder, HOST, port))[0] for _ in range(3)]
        await factory.wait(3)
        server.close()
        assert not server.is_serving()
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(Recorder, HOST, port)
        # Live connections keep working after the listener closed.
        for i, tr in enumerate(clients):
            tr.write(b"n%d" % i)
        await until(lambda: [p.data for p in factory.protos] == [b"n0", b"n1", b"n2"])
        for p in factory.protos:
            p.transport.write(b"bye")
        await until(lambda: all(tr.get_protocol().data == b"bye" for tr in clients))
        await closing(*clients)
        await until(lambda: all(p.lost for p in factory.protos))
        await asyncio.wait_for(server.wait_closed(), 5)

    run(loop, main())


def test_connect_accepted_socket(loop, fds):
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen(1)
    fds.items.append(listener)

    async def main():
        client_tr, client = await loop.create_connection(Recorder, *listener.getsockname())
        conn, _ = listener.accept()
        tr, pr = await loop.connect_accepted_socket(Recorder, conn)
        assert pr.transport is tr
        assert tr.get_extra_info("peername") == client_tr.get_extra_info("sockname")
        client_tr.write(b"hello server")
        await until(lambda: pr.data == b"hello server")
        tr.write(b"hello client")
        await until(lambda: client.data == b"hello client")
        await closing(tr, client_tr)

    run(loop, main())


# --------------------------------------------------------------------------- Unix sockets


def test_unix_server_and_connection(loop, short_tmp):
    path = str(short_tmp / "srv.sock")
    factory = Factory(lambda: Recorder(keep_open_on_eof=True))

    async def main():
        server = await loop.create_unix_server(factory, path)
        assert server.sockets[0].getsockname() == path
        assert server.sockets[0].family == socket.AF_UNIX
        tr, pr = await loop.create_unix_connection(Recorder, path)
        assert tr.get_extra_info("peername") == path
        srv = await factory.wait()
        tr.write(b"x" * 100000)
        await until(lambda: len(srv.data) == 100000)
        assert tr.can_write_eof()
        tr.write_eof()
        await until(lambda: srv.eof)
        srv.transport.write(b"reply")
        srv.transport.close()
        await until(lambda: pr.lost)
        assert pr.data == b"reply" and pr.eof and pr.exc is None
        tr.close()
        await shut(server)

    run(loop, main())


def test_unix_server_with_sock_and_connection_with_sock(loop, short_tmp, fds):
    path = str(short_tmp / "srv2.sock")
    factory = Factory()
    lsock = socket.socket(socket.AF_UNIX)
    lsock.bind(path)
    fds.items.append(lsock)

    async def main():
        server = await loop.create_unix_server(factory, sock=lsock)
        c = socket.socket(socket.AF_UNIX)
        c.setblocking(False)
        await loop.sock_connect(c, path)
        tr, _ = await loop.create_unix_connection(Recorder, sock=c)
        tr.write(b"abc")
        srv = await factory.wait()
        await until(lambda: srv.data == b"abc")
        await closing(tr)
        await until(lambda: srv.lost)
        await shut(server)

    run(loop, main())


def test_unix_connection_refused(loop, short_tmp):
    async def main():
        with pytest.raises((ConnectionRefusedError, FileNotFoundError)):
            await loop.create_unix_connection(Recorder, str(short_tmp / "nobody"))

    run(loop, main())


# --------------------------------------------------------------------------- datagrams


class DatagramRecorder(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.received: list[tuple[bytes, Any]] = []
        self.errors: list[BaseException] = []
        self.lost = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.received.append((data, addr))

    def error_received(self, exc: Exception) -> None:
        self.errors.append(exc)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost = True


async def close_datagram(*transports: Any) -> None:
    protos = [t.get_protocol() for t in transports]
    for t in transports:
        t.close()
    await until(lambda: all(p.lost for p in protos))


def test_datagram_local_and_remote_addr(loop):
    async def main():
        srv_tr, srv = await loop.create_datagram_endpoint(DatagramRecorder, local_addr=(HOST, 0))
        srv_addr = srv_tr.get_extra_info("sockname")
        cli_tr, cli = await loop.create_datagram_endpoint(DatagramRecorder, remote_addr=srv_addr)
        assert cli_tr.get_extra_info("peername") == srv_addr
        cli_addr = cli_tr.get_extra_info("sockname")
        cli_tr.sendto(b"one")
        cli_tr.sendto(b"two", None)
        with pytest.raises(ValueError):
            cli_tr.sendto(b"x", (HOST, 9))  # connected: only the peer
        await until(lambda: len(srv.received) == 2)
        assert srv.received == [(b"one", cli_addr), (b"two", cli_addr)]
        srv_tr.sendto(b"back", cli_addr)
        await until(lambda: cli.received)
        assert cli.received == [(b"back", srv_addr)]
        sock = srv_tr.get_extra_info("socket")
        assert sock.type == socket.SOCK_DGRAM and sock.getsockname() == srv_addr
        assert srv_tr.get_write_buffer_size() == 0
        await close_datagram(srv_tr, cli_tr)

    run(loop, main())


def test_datagram_reuse_port_and_allow_broadcast(loop):
    async def main():
        t1, _ = await loop.create_datagram_endpoint(
            DatagramRecorder, local_addr=(HOST, 0), reuse_port=True, allow_broadcast=True
        )
        sock = t1.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) != 0
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) != 0
        addr = t1.get_extra_info("sockname")
        t2, _ = await loop.create_datagram_endpoint(
            DatagramRecorder, local_addr=addr, reuse_port=True
        )
        assert t2.get_extra_info("sockname") == addr
        assert t2.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST) == 0
        await close_datagram(t1, t2)

    run(loop, main())


def test_datagram_with_sock(loop, fds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((HOST, 0))
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind((HOST, 0))
    peer.setblocking(False)
    fds.items += [s, peer]

    async def main():
        tr, pr = await loop.create_datagram_endpoint(DatagramRecorder, sock=s)
        assert tr.get_extra_info("sockname") == s.getsockname()
        await loop.sock_sendto(peer, b"to sock", s.getsockname())
        await until(lambda: pr.received)
        assert pr.received == [(b"to sock", peer.getsockname())]
        tr.sendto(b"from sock", peer.getsockname())
        assert await loop.sock_recv(peer, 100) == b"from sock"
        await close_datagram(tr)
        assert s.fileno() == -1

    run(loop, main())


def test_datagram_unix(loop, short_tmp):
    a_path, b_path = str(short_tmp / "a.dg"), str(short_tmp / "b.dg")

    async def main():
        ta, pa = await loop.create_datagram_endpoint(
            DatagramRecorder, local_addr=a_path, family=socket.AF_UNIX
        )
        tb, _ = await loop.create_datagram_endpoint(
            DatagramRecorder, local_addr=b_path, remote_addr=a_path, family=socket.AF_UNIX
        )
        tb.sendto(b"unix dgram")
        await until(lambda: pa.received)
        assert pa.received == [(b"unix dgram", b_path)]
        await close_datagram(ta, tb)

    run(loop, main())


# --------------------------------------------------------------------------- transports


async def tcp_pair(loop, server_proto=Recorder, client_proto=Recorder):
    """(server, client transport, client protocol, server protocol)."""
    factory = Factory(server_proto)
    server = await loop.create_server(factory, HOST, 0)
    tr, pr = await loop.create_connection(client_proto, *server.sockets[0].getsockname())
    srv = await factory.wait()
    return server, tr, pr, srv


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


# --------------------------------------------------------------------------- sendfile


def test_loop_sendfile_native_and_fallback(loop, payload_file):
    path, data = payload_file

    async def main():
        server, tr, _pr, srv = await tcp_pair(loop)
        tr.write(b"HEAD")
        with open(path, "rb") as f:
            # fallback=False: succeeds only through the zero-copy path
            assert await loop.sendfile(tr, f, fallback=False) == len(data)
            assert f.tell() == len(data)
            assert await loop.sendfile(tr, f, offset=10, count=20, fallback=False) == 20
            assert f.tell() == 30
        buf = io.BytesIO(data[:100_000])
        with pytest.raises(asyncio.SendfileNotAvailableError):
            await loop.sendfile(tr, buf, fallback=False)
        assert await loop.sendfile(tr, buf) == 100_000  # the fallback reads and writes
        tr.write(b"TAIL")
        expected = b"HEAD" + data + data[10:30] + data[:100_000] + b"TAIL"
        await until(lambda: len(srv.data) >= len(expected), timeout=20)
        assert bytes(srv.data) == expected
        await closing(tr, srv.transport)
        await shut(server)

    run(loop, main())


def test_loop_sendfile_rejects_bad_arguments(loop, payload_file, tmp_path):
    path, _ = payload_file

    async def main():
        server, tr, _pr, srv = await tcp_pair(loop)
        with open(path) as text, pytest.raises(ValueError):
            await loop.sendfile(tr, text)
        with open(path, "rb") as f:
            with pytest.raises(ValueError):
                await loop.sendfile(tr, f, offset=-1)
            with pytest.raises(ValueError):
                await loop.sendfile(tr, f, count=0)
        await closing(tr, srv.transport)
        await shut(server)

    run(loop, main())


# --------------------------------------------------------------------------- DNS


def _same_addrinfo(got: list[Any], expected: list[Any]) -> None:
    assert sorted(got) == sorted(expected)


@pytest.mark.parametrize(
    "host",
    [HOST, pytest.param("::1", marks=needs_ipv6), "localhost"],
)
def test_getaddrinfo(loop, host):
    async def main():
        got = await loop.getaddrinfo(host, 80, type=socket.SOCK_STREAM)
        _same_addrinfo(got, socket.getaddrinfo(host, 80, type=socket.SOCK_STREAM))
        got = await loop.getaddrinfo(host, "443", proto=socket.IPPROTO_UDP)
        _same_addrinfo(got, socket.getaddrinfo(host, "443", proto=socket.IPPROTO_UDP))
        got = await loop.getaddrinfo(host, None, flags=socket.AI_NUMERICSERV)
        _same_addrinfo(got, socket.getaddrinfo(host, None, flags=socket.AI_NUMERICSERV))

    run(loop, main())


def test_getaddrinfo_errors(loop):
    async def main():
        with pytest.raises(socket.gaierror):
            await loop.getaddrinfo(HOST, "no-such-service-name")
        with pytest.raises(socket.gaierror):
            await loop.getaddrinfo("not-numeric", 80, flags=socket.AI_NUMERICHOST)

    run(loop, main())


def test_getnameinfo(loop):
    async def main():
        flags = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
        assert await loop.getnameinfo((HOST, 80), flags) == (HOST, "80")
        if HAS_IPV6:
            assert await loop.getnameinfo(("::1", 8080, 0, 0), flags) == ("::1", "8080")
        assert await loop.getnameinfo((HOST, 80)) == socket.getnameinfo((HOST, 80), 0)

    run(loop, main())


# --------------------------------------------------------------------------- faults


def test_peer_reset_during_read(loop, fds):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        c = socket.socket()
        c.setblocking(False)
        fds.items.append(c)
        await loop.sock_connect(c, server.sockets[0].getsockname())
        srv = await factory.wait()
        await loop.sock_sendall(c, b"partial")
        await until(lambda: srv.data == b"partial")
        set_rst_on_close(c)
        fds.close(c)
        await until(lambda: srv.lost)
        assert isinstance(srv.exc, ConnectionResetError), srv.exc
        assert srv.transport.is_closing()
        await shut(server)

    run(loop, main())


def test_peer_reset_during_write(loop, fds):
    factory = Factory(lambda: Recorder(pause_on_made=True))

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        c = socket.socket()
        c.setblocking(False)
        fds.items.append(c)
        await loop.sock_connect(c, server.sockets[0].getsockname())
        srv = await factory.wait()
        st = srv.transport
        while st.get_write_buffer_size() == 0:  # the client reads nothing
            st.write(b"w" * (1 << 20))
            await asyncio.sleep(0)
        set_rst_on_close(c)
        fds.close(c)
        await until(lambda: srv.lost)
        assert isinstance(srv.exc, ConnectionResetError), srv.exc
        assert st.get_write_buffer_size() == 0
        await shut(server)

    run(loop, main())


def test_connection_refused(loop):
    async def main():
        with refused_port() as port:
            with pytest.raises(ConnectionRefusedError):
                await loop.create_connection(Recorder, HOST, port)
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection(HOST, port)

    run(loop, main())


class Exploding(Recorder):
    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        raise RuntimeError("boom in data_received")


def test_protocol_callback_raises(loop, errors):
    factory = Factory(Exploding)

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        tr, pr = await loop.create_connection(Recorder, *server.sockets[0].getsockname())
        srv = await factory.wait()
        tr.write(b"trigger")
        await until(lambda: srv.lost)
        assert srv.transport.is_closing()
        assert isinstance(srv.exc, RuntimeError)
        await until(lambda: pr.lost)  # the client sees the connection go
        tr.close()
        await shut(server)

    run(loop, main())
    ctx = errors.pop("data_received")
    assert isinstance(ctx["exception"], RuntimeError)
    assert str(ctx["exception"]) == "boom in data_received"
    assert ctx.get("protocol") is factory.protos[0]


# --------------------------------------------------------------------------- EMFILE

EMFILE_SERVER = textwrap.dedent(
    """
    import asyncio, os, resource, sys

    kind, slots = sys.argv[1], int(sys.argv[2])
    if kind == "corun":
        import corun
        loop = corun.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda loop, ctx: None)  # EMFILE is reported: keep quiet

    class Hello(asyncio.Protocol):
        def connection_made(self, transport):
            transport.write(b"hi")

        def data_received(self, data):
            pass

    async def main():
        server = await loop.create_server(Hello, "127.0.0.1", 0, backlog=200)
        highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1 + slots, hard))
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    loop.run_until_complete(main())
    """
)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def _greeted(clients: list[socket.socket], timeout: float) -> list[socket.socket]:
    """The clients that receive the server's b"hi" within ``timeout``."""
    got: list[socket.socket] = []
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        waiting = [c for c in clients if c not in got]
        if not waiting:
            break
        readable, _, _ = select.select(waiting, [], [], remaining)
        for c in readable:
            assert c.recv(2) == b"hi"
            got.append(c)
    return got


@pytest.mark.timeout(60)
def test_accept_emfile_does_not_spin_and_recovers(loop_kind, subprocess_env):
    """With fds exhausted the accept loop backs off instead of spinning, and
    accepts again once connections are closed and fds are free."""
    slots, total = 10, 30
    proc = subprocess.Popen(
        [sys.executable, "-c", EMFILE_SERVER, loop_kind, str(slots)],
        env=subprocess_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    clients: list[socket.socket] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"server did not start: {proc.communicate(timeout=10)[1].decode()}")
        port = int(line)
        for _ in range(total):
            clients.append(socket.create_connection((HOST, port), timeout=5))

        accepted = _greeted(clients, 1.0)
        pending = [c for c in clients if c not in accepted]
        assert 0 < len(accepted) < total
        assert pending, "the fd limit did not bite"

        # Out of fds with connections waiting: the server must not spin.
        before, t0 = _cpu_seconds(proc.pid), time.monotonic()
        time.sleep(1.0)
        cpu = _cpu_seconds(proc.pid) - before
        wall = time.monotonic() - t0
        assert proc.poll() is None, proc.communicate(timeout=5)[1].decode()
        assert cpu < 0.3 * wall, f"server burnt {cpu:.2f}s CPU in {wall:.2f}s while out of fds"

        # Free the fds: every waiting connection is accepted in the end.
        deadline = time.monotonic() + 20
        while pending and time.monotonic() < deadline:
            for c in accepted:
                clients.remove(c)
                c.close()
            accepted = _greeted(pending, 1.5)
            pending = [c for c in pending if c not in accepted]
        assert not pending, f"{len(pending)} connections never accepted after fds were freed"
    finally:
        for c in clients:
            c.close()
        proc.kill()
        proc.communicate(timeout=10)


# --------------------------------------------------------------------------- streams


def test_streams_roundtrip_readline_readexactly(loop):
    async def handle(reader, writer):
        line = await reader.readline()
        size = int(line)
        body = await reader.readexactly(size)
        writer.write(b"%d\n" % len(body))
        writer.write(body[::-1])
        await writer.drain()
        assert await reader.read() == b""  # client's EOF
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_server(handle, HOST, 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        assert writer.get_extra_info("peername") == server.sockets[0].getsockname()
        body = os.urandom(5 * 1024 * 1024)
        writer.write(b"%d\n" % len(body))
        writer.write(body)
        await writer.drain()
        writer.write_eof()
        assert int(await reader.readline()) == len(body)
        assert await reader.readexactly(len(body)) == body[::-1]
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await reader.readexactly(1)
        assert info.value.partial == b""
        assert reader.at_eof()
        writer.close()
        await writer.wait_closed()
        await shut(server)

    run(loop, main(), timeout=30)


def test_streams_readuntil_and_limit(loop):
    async def handle(reader, writer):
        writer.write(b"alpha|beta|" + b"x" * 200 + b"|")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_server(handle, HOST, 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname(), limit=100)
        assert await reader.readuntil(b"|") == b"alpha|"
        assert await reader.readuntil(b"|") == b"beta|"
        with pytest.raises(asyncio.LimitOverrunError):
            await reader.readuntil(b"|")
        writer.close()
        await writer.wait_closed()
        await shut(server)

    run(loop, main())


def test_streams_drain_waits_for_slow_reader(loop):
    """drain() blocks while the peer is not reading and returns once it does."""
    release = None

    async def handle(reader, writer):
        await release.wait()
        total = 0
        while chunk := await reader.read(1 << 20):
            total += len(chunk)
        writer.write(b"%d" % total)
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        nonlocal release
        release = asyncio.Event()
        server = await asyncio.start_server(handle, HOST, 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        chunk = b"d" * (1 << 20)
        sent = 0
        while True:
            writer.write(chunk)
            sent += len(chunk)
            drain = asyncio.ensure_future(writer.drain())
            await asyncio.sleep(0.01)
            if not drain.done():
                break
            assert sent < 1 << 30
        assert writer.transport.get_write_buffer_size() > 0
        release.set()
        await drain
        writer.write_eof()
        assert int(await reader.read()) == sent
        writer.close()
        await writer.wait_closed()
        await shut(server)

    run(loop, main(), timeout=30)


def test_unix_streams(loop, short_tmp):
    path = str(short_tmp / "stream.sock")

    async def handle(reader, writer):
        writer.write((await reader.readline()).upper())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    async def main():
        server = await asyncio.start_unix_server(handle, path)
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"shout\n")
        assert await reader.readline() == b"SHOUT\n"
        assert await reader.read() == b""
        writer.close()
        await writer.wait_closed()
        await shut(server)

    run(loop, main())


class _KeepChunks(asyncio.Protocol):
    def __init__(self, loop, expected):
        self.chunks = []
        self.expected = expected
        self.done = loop.create_future()

    def data_received(self, data):
        self.chunks.append(data)
        if sum(map(len, self.chunks)) >= self.expected and not self.done.done():
            self.done.set_result(None)


def _read_chunks_kept(loop, pattern_seed):
    # Each chunk is a different byte value, written one at a time, so each
    # read gets fresh bytes; the protocol keeps every `data` it was given.
    # A transport handing out views of a reused buffer would see the kept
    # chunks overwritten by later reads.
    chunks = [bytes([(pattern_seed + i) % 256]) * (1000 + 37 * i) for i in range(40)]
    a, b = socket.socketpair()

    async def main():
        proto = _KeepChunks(loop, sum(map(len, chunks)))
        transport, _ = await loop.create_connection(lambda: proto, sock=a)
        try:
            for chunk in chunks:
                b.sendall(chunk)
                await asyncio.sleep(0.001)
            await asyncio.wait_for(proto.done, 10)
        finally:
            transport.close()
            b.close()
        return proto.chunks

    got = loop.run_until_complete(main())
    assert all(type(c) is bytes for c in got)
    assert b"".join(got) == b"".join(chunks)
    return got


def test_received_chunks_stay_intact_after_later_reads(loop):
    _read_chunks_kept(loop, 1)


def test_two_loops_in_two_threads_read_intact_data(loop, make_loop):
    other = make_loop()
    failures = []

    def run_other():
        try:
            for seed in range(0, 60, 20):
                _read_chunks_kept(other, seed)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run_other)
    thread.start()
    for seed in range(100, 160, 20):
        _read_chunks_kept(loop, seed)
    thread.join(30)
    assert not thread.is_alive()
    assert failures == []
