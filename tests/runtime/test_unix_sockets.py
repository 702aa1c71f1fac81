"""Unix stream sockets, servers and connections: written once, run on both loops."""

from __future__ import annotations

import socket

import pytest
from netkit import Factory, Recorder, closing, run, shut, until

pytestmark = pytest.mark.timeout(30)


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
