"""Unix stream sockets, servers and connections: written once, run on both loops."""

from __future__ import annotations

import os
import socket
import sys

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


# Python 3.13: closing a Unix server removes its socket file (cleanup_socket,
# default True) if the file is still the server's. Earlier versions leave it
# and have no such parameter; corun has it on every version, with the default
# of the version it runs on.
CLEANUP_DEFAULT = sys.version_info >= (3, 13)


def _has_cleanup_socket(loop_kind):
    return loop_kind == "corun" or CLEANUP_DEFAULT


def test_unix_server_close_and_its_socket_file(loop, short_tmp):
    path = str(short_tmp / "default.sock")

    async def main():
        server = await loop.create_unix_server(Recorder, path)
        assert os.path.exists(path)
        await shut(server)
        assert os.path.exists(path) is not CLEANUP_DEFAULT
        # A new server takes over the stale file either way.
        again = await loop.create_unix_server(Recorder, path)
        await shut(again)

    run(loop, main())


@pytest.mark.parametrize("cleanup", [True, False])
@pytest.mark.parametrize("given", ["path", "sock"])
def test_unix_server_cleanup_socket(loop, loop_kind, short_tmp, fds, cleanup, given):
    path = str(short_tmp / "srv.sock")
    if given == "sock":
        lsock = socket.socket(socket.AF_UNIX)
        lsock.bind(path)
        fds.items.append(lsock)
        where = {"sock": lsock}
    else:
        where = {"path": path}

    async def main():
        if not _has_cleanup_socket(loop_kind):
            with pytest.raises(TypeError):
                await loop.create_unix_server(Recorder, cleanup_socket=cleanup, **where)
            return
        server = await loop.create_unix_server(Recorder, cleanup_socket=cleanup, **where)
        tr, _ = await loop.create_unix_connection(Recorder, path)
        server.close()
        assert os.path.exists(path) is not cleanup
        await closing(tr)
        await shut(server)

    run(loop, main())


@pytest.mark.parametrize("change", ["removed", "replaced"])
def test_unix_server_cleanup_leaves_what_is_not_its_own(loop, loop_kind, short_tmp, change):
    path = str(short_tmp / "srv.sock")

    async def main():
        if not _has_cleanup_socket(loop_kind):
            with pytest.raises(TypeError):
                await loop.create_unix_server(Recorder, path, cleanup_socket=True)
            return
        server = await loop.create_unix_server(Recorder, path, cleanup_socket=True)
        os.unlink(path)
        if change == "removed":
            server.close()  # no error: someone else cleaned up
            assert not os.path.exists(path)
        else:
            with socket.socket(socket.AF_UNIX) as other:
                other.bind(path)
                server.close()
                # Another socket's file now: not the server's to remove.
                assert os.path.exists(path)
        await shut(server)

    run(loop, main())


def test_unix_server_cleanup_abstract_socket(loop, loop_kind):
    name = f"\0corun-test-{os.getpid()}-{id(loop)}"

    async def main():
        server = await loop.create_unix_server(Recorder, name)
        tr, _ = await loop.create_unix_connection(Recorder, name)
        await closing(tr)
        await shut(server)  # no file to remove, and no error

    run(loop, main())
