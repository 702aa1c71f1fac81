"""aiohttp's server and client, both on the loop under test (corun and asyncio).

Real HTTP over 127.0.0.1: bodies of several MB both ways, keep-alive reuse,
500 concurrent requests through a connection-limited connector, HTTPS with a
trustme CA and certificate verification on, streaming in both directions, and
a handler that raises.  The ``loop`` fixture's teardown fails a test that
leaked an fd or made the loop's exception handler fire.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import ssl
from collections.abc import AsyncIterator
from typing import Any

import pytest

aiohttp = pytest.importorskip("aiohttp")
trustme = pytest.importorskip("trustme")
from aiohttp import web  # noqa: E402
from netkit import run  # noqa: E402

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"
MB = 1024 * 1024


# --------------------------------------------------------------------------- the app


def _blob(size: int) -> bytes:
    """Deterministic, incompressible-enough bytes of ``size``."""
    seed = hashlib.sha256(str(size).encode()).digest()
    reps = size // len(seed) + 1
    return (seed * reps)[:size]


async def echo_digest(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response({"size": len(body), "sha256": hashlib.sha256(body).hexdigest()})


async def blob(request: web.Request) -> web.Response:
    return web.Response(body=_blob(int(request.query["size"])))


async def peer(request: web.Request) -> web.Response:
    """The client's (host, port): the same port means the same connection."""
    transport = request.transport
    assert transport is not None
    host, port = transport.get_extra_info("peername")[:2]
    # The transport itself, not its id(): a closed one is freed, and a new one may reuse the id.
    request.app[CONNECTIONS].add(transport)
    await asyncio.sleep(float(request.query.get("delay", 0)))
    return web.json_response({"host": host, "port": port})


async def stream(request: web.Request) -> web.StreamResponse:
    chunks, size = int(request.query["chunks"]), int(request.query["size"])
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for i in range(chunks):
        await resp.write(bytes([65 + i % 26]) * size)
        await asyncio.sleep(0)
    await resp.write_eof()
    return resp


async def upload_stream(request: web.Request) -> web.Response:
    digest = hashlib.sha256()
    total = chunks = 0
    async for chunk in request.content.iter_any():
        digest.update(chunk)
        total += len(chunk)
        chunks += 1
    return web.json_response({"size": total, "sha256": digest.hexdigest(), "chunks": chunks})


async def boom(request: web.Request) -> web.Response:
    raise RuntimeError("handler failed on purpose")


CONNECTIONS = web.AppKey("connections", set)


def make_app() -> web.Application:
    app = web.Application(client_max_size=64 * MB)
    app[CONNECTIONS] = set()
    app.add_routes(
        [
            web.post("/echo", echo_digest),
            web.get("/blob", blob),
            web.get("/peer", peer),
            web.get("/stream", stream),
            web.post("/upload", upload_stream),
            web.get("/boom", boom),
        ]
    )
    return app


@contextlib.asynccontextmanager
async def serving(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 and yield its base URL."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, HOST, 0, ssl_context=ssl_context)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"{'https' if ssl_context else 'http'}://{host}:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def client(**connector_kw: Any) -> AsyncIterator[Any]:
    connector = aiohttp.TCPConnector(**connector_kw)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session
    # Let closed transports finish (TLS close_notify included) before the
    # loop fixture counts fds.
    await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("size", [0, 11, 64 * 1024 + 1, 5 * MB])
def test_bodies_both_directions(loop, size):
    async def main():
        async with serving(make_app()) as url, client() as session:
            payload = os.urandom(size)
            async with session.post(f"{url}/echo", data=payload) as resp:
                assert resp.status == 200
                assert await resp.json() == {
                    "size": size,
                    "sha256": hashlib.sha256(payload).hexdigest(),
                }
            async with session.get(f"{url}/blob", params={"size": str(size)}) as resp:
                assert resp.status == 200
                assert resp.content_length == size
                assert await resp.read() == _blob(size)

    run(loop, main(), timeout=45)


def test_keep_alive_reuses_the_connection(loop):
    async def main():
        app = make_app()
        async with serving(app) as url, client(limit=1) as session:
            peers = []
            for _ in range(20):
                async with session.get(f"{url}/peer") as resp:
                    peers.append(tuple((await resp.json()).values()))
            assert len(set(peers)) == 1, peers
            assert len(app[CONNECTIONS]) == 1
            # A fresh connector means a fresh connection.
            async with client(force_close=True) as other:
                for _ in range(3):
                    async with other.get(f"{url}/peer") as resp:
                        peers.append(tuple((await resp.json()).values()))
            assert len(set(peers)) == 4
            assert len(app[CONNECTIONS]) == 4

    run(loop, main(), timeout=30)


def test_many_concurrent_requests_with_connector_limit(loop):
    n, limit = 500, 20

    async def main():
        app = make_app()
        async with serving(app) as url, client(limit=limit) as session:

            async def one(i: int) -> tuple[int, int]:
                async with session.get(f"{url}/peer", params={"delay": "0.001"}) as resp:
                    assert resp.status == 200
                    return i, (await resp.json())["port"]

            results = await asyncio.gather(*(one(i) for i in range(n)))
            assert sorted(i for i, _ in results) == list(range(n))
            ports = {port for _, port in results}
            assert 1 < len(ports) <= limit
            assert len(app[CONNECTIONS]) <= limit

    run(loop, main(), timeout=50)


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


def _tls_contexts(ca: Any) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client_ctx)
    assert client_ctx.verify_mode == ssl.CERT_REQUIRED and client_ctx.check_hostname
    return server_ctx, client_ctx


def test_tls_server_verified_by_client(loop, ca):
    server_ctx, client_ctx = _tls_contexts(ca)

    async def main():
        app = make_app()
        async with serving(app, server_ctx) as url:
            port = url.rsplit(":", 1)[1]
            async with client(ssl=client_ctx, limit=2) as session:
                for base in (url, f"https://localhost:{port}"):
                    async with session.get(f"{base}/blob", params={"size": str(3 * MB)}) as resp:
                        assert resp.status == 200
                        assert resp.connection is not None
                        ssl_obj = resp.connection.transport.get_extra_info("ssl_object")
                        assert await resp.read() == _blob(3 * MB)
                        assert ssl_obj is not None and ssl_obj.version().startswith("TLS")
                        assert ssl_obj.getpeercert()["subjectAltName"]
                payload = os.urandom(2 * MB)
                async with session.post(f"{url}/echo", data=payload) as resp:
                    assert (await resp.json())["sha256"] == hashlib.sha256(payload).hexdigest()
            # Without the CA the certificate must be rejected.
            async with client() as session:
                with pytest.raises(aiohttp.ClientConnectorCertificateError):
                    async with session.get(f"{url}/blob", params={"size": "1"}):
                        pass
        await asyncio.sleep(0.05)

    run(loop, main(), timeout=45)


def test_streaming_response_and_upload(loop):
    chunks, size = 200, 16 * 1024

    async def main():
        async with serving(make_app()) as url, client() as session:
            params = {"chunks": str(chunks), "size": str(size)}
            async with session.get(f"{url}/stream", params=params) as resp:
                assert resp.status == 200
                assert resp.headers.get("Transfer-Encoding") == "chunked"
                got = bytearray()
                pieces = 0
                async for piece in resp.content.iter_chunked(4096):
                    got += piece
                    pieces += 1
            assert len(got) == chunks * size and pieces > 1
            assert got[:size] == b"A" * size and got[-size:] == bytes([65 + 199 % 26]) * size

            sent = hashlib.sha256()

            async def body() -> AsyncIterator[bytes]:
                for i in range(64):
                    piece = bytes([i]) * (64 * 1024)
                    sent.update(piece)
                    yield piece
                    await asyncio.sleep(0)

            async with session.post(f"{url}/upload", data=body()) as resp:
                result = await resp.json()
            assert result["size"] == 64 * 64 * 1024
            assert result["sha256"] == sent.hexdigest()

    run(loop, main(), timeout=45)


def test_handler_that_raises_gives_500(loop, caplog):
    async def main():
        async with serving(make_app()) as url, client(limit=1) as session:
            with caplog.at_level("ERROR", logger="aiohttp.server"):
                async with session.get(f"{url}/boom") as resp:
                    assert resp.status == 500
                    await resp.read()
            assert any(
                "handler failed on purpose" in r.getMessage()
                or (r.exc_info and "handler failed on purpose" in str(r.exc_info[1]))
                for r in caplog.records
            )
            # The loop and the server carry on.
            for _ in range(3):
                async with session.get(f"{url}/blob", params={"size": "100"}) as resp:
                    assert resp.status == 200
                    assert await resp.read() == _blob(100)

    run(loop, main(), timeout=30)
