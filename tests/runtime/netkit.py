"""Helpers for the network tests in this folder: recording protocols, servers, ports."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

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


def run(loop: asyncio.AbstractEventLoop, coro: Awaitable[Any], timeout: float = 15.0) -> Any:
    """Run ``coro`` on ``loop`` with a deadline, so that a hang fails one test."""
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


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


async def tcp_pair(loop, server_proto=Recorder, client_proto=Recorder):
    """(server, client transport, client protocol, server protocol)."""
    factory = Factory(server_proto)
    server = await loop.create_server(factory, HOST, 0)
    tr, pr = await loop.create_connection(client_proto, *server.sockets[0].getsockname())
    srv = await factory.wait()
    return server, tr, pr, srv
