"""corun.http through proxies named by the environment (proxy.py, in a child process).

``HTTP_PROXY`` carries http requests (absolute-form), ``HTTPS_PROXY`` a
``CONNECT`` tunnel with TLS to the target inside it; the proxy itself is
plain or TLS. ``NO_PROXY`` and ``trust_env=False`` bypass it. A proxy on a
dead port proves the client really goes through the proxy it was given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import subprocess
import sys
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from http_servers import serve

from corun.http import Client, ClientOptions, ConnectError
from corun.testing.servers import free_port, wait_listening

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module", params=["http", "https"])
def proxy(
    request: pytest.FixtureRequest, ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """proxy.py on loopback, plain or with TLS; yields its URL."""
    folder: Path = tmp_path_factory.mktemp("proxy")
    port = free_port()
    command = [sys.executable, "-m", "proxy", "--hostname", HOST, "--port", str(port)]
    command += ["--num-acceptors", "1", "--log-level", "e"]
    if request.param == "https":
        cert = ca.issue_cert(HOST)
        cert.private_key_pem.write_to_path(folder / "key.pem")
        cert.cert_chain_pems[0].write_to_path(folder / "cert.pem")
        command += ["--cert-file", str(folder / "cert.pem"), "--key-file", str(folder / "key.pem")]
    child = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder
    )
    try:
        if not wait_listening(HOST, port, child):
            raise RuntimeError("proxy.py did not start")
        yield f"{request.param}://{HOST}:{port}"
    finally:
        child.terminate()
        child.wait(timeout=10)


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, 45))


@pytest.mark.parametrize("target", ["http", "https"])
def test_requests_go_through_the_environment_proxy(
    loop: asyncio.AbstractEventLoop,
    ca: trustme.CA,
    proxy: str,
    no_proxy_env: pytest.MonkeyPatch,
    target: str,
) -> None:
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)  # the proxy's certificate and the target's
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(HOST).configure_cert(server_ctx)
    no_proxy_env.setenv(f"{target.upper()}_PROXY", proxy)
    options = ClientOptions(ssl_context=client_ctx, retry=None)

    async def main() -> None:
        server = serve(ssl_context=server_ctx if target == "https" else None)
        async with server as base, Client(options) as client:
            for n in range(3):  # later ones reuse the proxied connection
                response = await client.request("GET", f"{base}/ok?n={n}")
                assert (response.status, response.text()) == (200, f"ok {n}")
            big = await client.request("GET", f"{base}/big?size=3000000")
            assert big.body == b"x" * 3_000_000

    run(loop, main())


@pytest.mark.parametrize("target", ["http", "https"])
def test_a_dead_proxy_fails_and_no_proxy_bypasses_it(
    loop: asyncio.AbstractEventLoop,
    ca: trustme.CA,
    no_proxy_env: pytest.MonkeyPatch,
    target: str,
) -> None:
    dead = f"http://{HOST}:{free_port()}"
    no_proxy_env.setenv(f"{target.upper()}_PROXY", dead)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(HOST).configure_cert(server_ctx)
    options = ClientOptions(ssl_context=client_ctx, retry=None)

    async def main() -> None:
        async with serve(ssl_context=server_ctx if target == "https" else None) as base:
            async with Client(options) as client:
                with pytest.raises(ConnectError, match="connection failed"):
                    await client.request("GET", f"{base}/ok")
            async with Client(dataclasses.replace(options, trust_env=False)) as client:
                assert (await client.request("GET", f"{base}/ok")).status == 200
            no_proxy_env.setenv("NO_PROXY", HOST)
            async with Client(options) as client:
                assert (await client.request("GET", f"{base}/ok")).status == 200

    run(loop, main())
