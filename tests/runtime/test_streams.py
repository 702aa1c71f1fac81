"""asyncio streams over corun's transports: written once, run on both loops."""

from __future__ import annotations

import asyncio
import os
import socket
import threading

import pytest
from netkit import HOST, run, shut

pytestmark = pytest.mark.timeout(30)


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
