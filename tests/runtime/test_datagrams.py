"""Datagram endpoints, UDP and Unix: written once, run on both loops."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from netkit import HOST, run, until

pytestmark = pytest.mark.timeout(30)


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
