"""``create_connection`` on real TCP sockets: written once, run on both loops."""

from __future__ import annotations

import inspect
import socket

import pytest
from netkit import (
    HOST,
    Factory,
    Recorder,
    closing,
    free_port,
    nb_listener,
    refused_port,
    run,
    shut,
    until,
)

pytestmark = pytest.mark.timeout(30)


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
