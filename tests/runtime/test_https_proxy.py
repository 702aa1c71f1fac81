"""aiohttp's client through an HTTPS proxy (proxy.py, as aiohttp's own tests use).

TLS to the proxy, then plain HTTP over it for an http target, or CONNECT and
TLS inside that TLS (``start_tls`` over a TLS transport) for an https one.
Reported as a hang on corun; both paths run here on both loops, with bodies
large enough to need several TLS records and flow control.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

aiohttp = pytest.importorskip("aiohttp")
trustme = pytest.importorskip("trustme")
pytest.importorskip("proxy")
from aiohttp import web  # noqa: E402
from netkit import HOST, free_port, run  # noqa: E402

from corun.testing.servers import wait_listening  # noqa: E402

pytestmark = pytest.mark.timeout(60)

BODY = os.urandom(3 * 1024 * 1024)


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


@pytest.fixture(scope="module")
def https_proxy(ca: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """proxy.py listening with TLS on loopback, in a child process."""
    folder: Path = tmp_path_factory.mktemp("proxy")
    cert = ca.issue_cert(HOST)
    cert.private_key_pem.write_to_path(folder / "key.pem")
    cert.cert_chain_pems[0].write_to_path(folder / "cert.pem")
    port = free_port()
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy",
            "--hostname",
            HOST,
            "--port",
            str(port),
            "--cert-file",
            str(folder / "cert.pem"),
            "--key-file",
            str(folder / "key.pem"),
            "--num-acceptors",
            "1",
            "--log-level",
            "e",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=folder,
    )
    try:
        if not wait_listening(HOST, port, proxy):
            raise RuntimeError("proxy.py did not start")
        yield f"https://{HOST}:{port}"
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


def _app() -> web.Application:
    async def small(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=BODY)

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    app = web.Application(client_max_size=len(BODY) + 1)
    app.router.add_get("/", small)
    app.router.add_get("/big", big)
    app.router.add_post("/echo", echo)
    return app


@pytest.mark.parametrize("target", ["http", "https"])
def test_requests_through_an_https_proxy(loop, ca, https_proxy, target):
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)  # trusts the proxy's certificate and the server's
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(HOST).configure_cert(server_ctx)

    async def main() -> list[Any]:
        runner = web.AppRunner(_app())
        await runner.setup()
        site = web.TCPSite(runner, HOST, 0, ssl_context=server_ctx if target == "https" else None)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        url = f"{target}://{HOST}:{port}"
        seen: list[Any] = []
        try:
            timeout = aiohttp.ClientTimeout(total=20)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                for _ in range(2):  # a second request reuses or reopens the tunnel
                    async with session.get(url + "/", proxy=https_proxy, ssl=client_ctx) as r:
                        seen.append((r.status, await r.text()))
                async with session.get(url + "/big", proxy=https_proxy, ssl=client_ctx) as r:
                    seen.append((r.status, await r.read() == BODY))
                async with session.post(
                    url + "/echo", data=BODY, proxy=https_proxy, ssl=client_ctx
                ) as r:
                    seen.append((r.status, await r.read() == BODY))
        finally:
            await runner.cleanup()
        return seen

    assert run(loop, main(), timeout=45) == [
        (200, "hello"),
        (200, "hello"),
        (200, True),
        (200, True),
    ]
