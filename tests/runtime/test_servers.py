"""``create_server``, ``connect_accepted_socket`` and the accept loop under EMFILE, on both loops."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import select
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from netkit import HOST, Factory, Recorder, closing, needs_ipv6, run, shut, until

pytestmark = pytest.mark.timeout(30)


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


# What cancelling serve_forever() does with the connections it accepted, by
# version (asyncio's behaviour, which corun follows): 3.11 leaves them open and
# returns at once; 3.12.1 (gh-109538) waits for them in wait_closed(); later
# (gh-123720; absent from 3.13.0, present from 3.13.18 on) it closes them first.
WAIT_FOR_CONNECTIONS = sys.version_info >= (3, 12, 1)
SERVE_FOREVER_CLOSES_CLIENTS = sys.version_info >= (3, 13, 1)


def test_server_serve_forever_cancel(loop):
    factory = Factory()

    async def main():
        server = await loop.create_server(factory, HOST, 0, start_serving=False)
        port = server.sockets[0].getsockname()[1]
        task = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0.01)
        assert server.is_serving()
        tr, client = await loop.create_connection(Recorder, HOST, port)
        srv = await factory.wait()
        try:
            with pytest.raises(RuntimeError):
                await server.serve_forever()  # already being awaited
            task.cancel()
            if WAIT_FOR_CONNECTIONS and not SERVE_FOREVER_CLOSES_CLIENTS:
                # It waits for the open connection, which still works.
                await asyncio.wait([task], timeout=0.2)
                assert not task.done(), "serve_forever() returned with a connection open"
                tr.write(b"still here")
                await until(lambda: srv.data == b"still here")
                tr.close()
            await asyncio.wait([task], timeout=5)
            assert task.done(), "serve_forever() still running 5 s after cancel()"
            assert task.cancelled()
            assert not server.is_serving()
            assert len(server.sockets) == 0
            with pytest.raises(ConnectionRefusedError):
                await loop.create_connection(Recorder, HOST, port)
            await asyncio.wait_for(server.wait_closed(), 5)
            if SERVE_FOREVER_CLOSES_CLIENTS:
                # The server closed its end: the client sees EOF.
                assert srv.transport.is_closing()
                await until(lambda: client.lost)
                assert client.eof
            elif not WAIT_FOR_CONNECTIONS:
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


# Python 3.13 added Server.close_clients()/abort_clients() and create_server's
# keep_alive; corun has them on every version, asyncio from 3.13 on.
STDLIB_HAS_313_SERVER_API = sys.version_info >= (3, 13)


def _has_313_server_api(loop_kind):
    return loop_kind == "corun" or STDLIB_HAS_313_SERVER_API


@pytest.mark.parametrize("how", ["close_clients", "abort_clients"])
def test_server_close_clients_and_abort_clients(loop, loop_kind, how):
    factory = Factory(lambda: Recorder(keep_open_on_eof=True))

    async def main():
        server = await loop.create_server(factory, HOST, 0)
        if not _has_313_server_api(loop_kind):
            assert not hasattr(server, how)
            await shut(server)
            return
        port = server.sockets[0].getsockname()[1]
        clients = [await loop.create_connection(Recorder, HOST, port) for _ in range(2)]
        await factory.wait(2)
        waiter = asyncio.ensure_future(server.wait_closed())
        await asyncio.sleep(0.05)
        assert not waiter.done()
        if how == "abort_clients":
            # Unsent data is dropped, not flushed: fill the server's buffer.
            factory.protos[0].transport.write(b"x" * 4_000_000)
            assert factory.protos[0].transport.get_write_buffer_size() > 0
        server.close()
        getattr(server, how)()
        # The server's ends close: its waiters wake, the clients see the end.
        await asyncio.wait_for(waiter, 5)
        assert all(p.lost for p in factory.protos)
        await until(lambda: all(pr.lost for _, pr in clients))
        if how == "abort_clients":
            assert len(clients[0][1].data) < 4_000_000
        else:
            assert all(pr.eof for _, pr in clients)
        await closing(*(tr for tr, _ in clients))

    run(loop, main())


def test_create_server_keep_alive(loop, loop_kind):
    factory = Factory()

    async def main():
        if not _has_313_server_api(loop_kind):
            with pytest.raises(TypeError):
                await loop.create_server(Recorder, HOST, 0, keep_alive=True)
            return
        plain = await loop.create_server(Recorder, HOST, 0)
        assert plain.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
        await shut(plain)
        server = await loop.create_server(factory, HOST, 0, keep_alive=True)
        assert server.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
        tr, _ = await loop.create_connection(Recorder, *server.sockets[0].getsockname())
        srv = await factory.wait()
        # Accepted connections inherit it from the listener.
        accepted = srv.transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0
        await closing(tr, srv.transport)
        await shut(server)

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
