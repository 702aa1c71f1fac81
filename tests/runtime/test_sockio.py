"""The stream transport's recv and send: the C versions and the pure-Python ones, alike.

Each test runs both implementations on a real connected socket pair (TCP on
loopback, and a Unix socket pair), so the fallback a build without a
compiler uses is proven by the same assertions as the C module.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import corun
from corun.runtime.transports import sockio

IMPLEMENTATIONS: dict[str, tuple[Callable[..., bytes], Callable[..., int]]] = {
    "python": (sockio.recv_py, sockio.send_py)
}
try:
    from corun.runtime.transports import _sockio

    IMPLEMENTATIONS["c"] = (_sockio.recv, _sockio.send)
except ImportError:
    pass


def test_the_compiled_build_uses_the_c_versions() -> None:
    assert sockio.NATIVE == corun.COMPILED
    assert ("c" in IMPLEMENTATIONS) == corun.COMPILED


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def io(request: pytest.FixtureRequest) -> tuple[Callable[..., bytes], Callable[..., int]]:
    return IMPLEMENTATIONS[request.param]


@pytest.fixture(params=["tcp", "unix"])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[socket.socket, socket.socket]]:
    if request.param == "unix":
        a, b = socket.socketpair()
    else:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            a = socket.create_connection(listener.getsockname())
            b, _ = listener.accept()
    for sock in (a, b):
        sock.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _wait_readable(sock: socket.socket) -> None:
    import select

    assert select.select([sock], [], [], 5)[0], "nothing arrived"


def test_send_then_recv_copies_the_bytes_out_of_the_buffer(io: Any, pair: Any) -> None:
    recv, send = io
    a, b = pair
    buffer = memoryview(bytearray(64))
    assert send(a, a.fileno(), b"hello") == 5
    assert send(a, a.fileno(), memoryview(b"--world--")[2:7]) == 5
    _wait_readable(b)
    got = b""
    while len(got) < 10:
        got += recv(b, b.fileno(), buffer)
    assert got == b"helloworld"
    assert type(got) is bytes
    buffer[:5] = b"XXXXX"  # the result is a copy, not a view of the buffer
    assert got == b"helloworld"


def test_recv_reads_at_most_the_buffer(io: Any, pair: Any) -> None:
    recv, send = io
    a, b = pair
    send(a, a.fileno(), b"0123456789")
    _wait_readable(b)
    assert recv(b, b.fileno(), memoryview(bytearray(4))) == b"0123"
    assert recv(b, b.fileno(), memoryview(bytearray(64))) == b"456789"


def test_recv_with_nothing_there_raises_blocking_io_error(io: Any, pair: Any) -> None:
    recv, _send = io
    _a, b = pair
    with pytest.raises(BlockingIOError):
        recv(b, b.fileno(), memoryview(bytearray(16)))


def test_recv_after_the_peer_closed_returns_empty_bytes(io: Any, pair: Any) -> None:
    recv, _send = io
    a, b = pair
    a.close()
    _wait_readable(b)
    assert recv(b, b.fileno(), memoryview(bytearray(16))) == b""


def test_send_until_full_raises_blocking_io_error(io: Any, pair: Any) -> None:
    _recv, send = io
    a, _b = pair
    chunk = b"x" * 65536
    sent = 0
    with pytest.raises(BlockingIOError):
        for _ in range(10_000):  # far more than any socket buffer
            sent += send(a, a.fileno(), chunk)
    assert sent > 0


def test_send_to_a_closed_peer_raises_an_os_error_not_sigpipe(io: Any, pair: Any) -> None:
    _recv, send = io
    a, b = pair
    b.close()
    with pytest.raises(OSError) as raised:
        for _ in range(100):  # the first send may still be taken, then the reset comes
            send(a, a.fileno(), b"x" * 1024)
    assert raised.value.errno in (errno.EPIPE, errno.ECONNRESET)
    assert isinstance(raised.value, (BrokenPipeError, ConnectionResetError))


@pytest.mark.skipif("c" not in IMPLEMENTATIONS, reason="the pure-Python build has no C module")
def test_c_versions_check_their_arguments() -> None:
    recv, send = IMPLEMENTATIONS["c"]
    with socket.socket() as sock:
        with pytest.raises(TypeError, match="3 arguments"):
            recv(sock, sock.fileno())
        with pytest.raises(TypeError, match="3 arguments"):
            send(sock, sock.fileno(), b"x", 0)
        with pytest.raises(BufferError):
            recv(sock, sock.fileno(), memoryview(b"read-only"))
        with pytest.raises(TypeError):
            send(sock, "3", b"x")
        with pytest.raises(ValueError, match="out of range"):
            send(sock, -1, b"x")
    with pytest.raises(OSError) as raised:
        send(None, 10_000, b"x")  # no such fd
    assert raised.value.errno == errno.EBADF


class _TrackedSocket(socket.socket):
    """A socket subclass with its own recv, recv_into and send, which must be called."""

    calls: list[str]

    def recv(self, *args: Any, **kwargs: Any) -> bytes:
        self.calls.append("recv")
        return super().recv(*args, **kwargs)

    def recv_into(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append("recv_into")
        return super().recv_into(*args, **kwargs)

    def send(self, *args: Any, **kwargs: Any) -> int:
        self.calls.append("send")
        return super().send(*args, **kwargs)


def test_a_socket_subclass_is_read_and_written_through_its_own_methods(loop):
    """As asyncio does (websockets' test_explicit_socket checks it): no C shortcut for it."""

    async def main() -> list[str]:
        server = await asyncio.start_server(_echo, "127.0.0.1", 0)
        sock = _TrackedSocket(socket.AF_INET, socket.SOCK_STREAM)
        sock.calls = []
        sock.connect(server.sockets[0].getsockname())
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()
        return sock.calls

    calls = loop.run_until_complete(main())
    assert "send" in calls
    assert "recv_into" in calls or "recv" in calls  # asyncio's loop reads with recv


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(await reader.read(100))
    await writer.drain()
    writer.close()
