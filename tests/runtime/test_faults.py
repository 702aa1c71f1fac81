"""Peer resets, refused connections and protocol callbacks that raise, on both loops."""

from __future__ import annotations

import asyncio
import socket

import pytest
from netkit import HOST, Factory, Recorder, refused_port, run, set_rst_on_close, shut, until

pytestmark = pytest.mark.timeout(30)


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
