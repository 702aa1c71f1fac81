"""The ``sock_*`` methods on real sockets: written once, run on both loops."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from netkit import HOST, io_registrations, nb_listener, refused_port, run

pytestmark = pytest.mark.timeout(30)


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
