"""corun.http's engine against a real nginx (Debian's), on corun's loop and asyncio's.

nginx is started by the module fixture on a loopback port, with a
configuration written into a temporary directory (``corun.testing.Nginx``).
When nginx is missing the tests fail (``make install`` installs it): they
never skip.
"""

from __future__ import annotations

import asyncio
import gzip
import os
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

from corun.http import BodyTooLarge, Client, ClientOptions, TooManyRedirects
from corun.testing import Nginx, NginxMissing

pytestmark = pytest.mark.timeout(60)

TEXT = b"".join(b"line %d of a text that compresses well\n" % i for i in range(400))
BINARY = os.urandom(1024)
HEADERS = {"Accept-Encoding": "identity"}

#: Every location echoes what the test needs to see from the server's side:
#: the requests served on this connection (keep-alive).
LOCATIONS = """
        add_header X-Connection-Requests $connection_requests always;
        add_header X-Connection $connection always;
        location = /moved { return 301 /text.txt; }
        location = /loop { return 302 /loop; }
        location /bin/ {
            types { }
            default_type application/octet-stream;
            try_files /bin.dat =404;
        }
"""


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    root = tmp_path_factory.mktemp("www")
    (root / "text.txt").write_bytes(TEXT)
    (root / "bin.dat").write_bytes(BINARY)
    try:
        server = Nginx(tmp_path_factory.mktemp("nginx"), root=root, locations=LOCATIONS)
        server.start()
    except NginxMissing as exc:
        pytest.fail(str(exc))  # a missing server is a failure, not a skip
    try:
        yield server
    finally:
        server.stop()


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, 30))


def test_keep_alive_reuses_one_connection(loop: asyncio.AbstractEventLoop, nginx: Nginx) -> None:
    async def main() -> list[str]:
        async with Client(ClientOptions(limit_per_host=1)) as client:
            seen = []
            for i in range(5):
                response = await client.request("GET", f"{nginx.url}/bin/{i}", headers=HEADERS)
                assert (response.status, response.body) == (200, BINARY)
                assert response.headers["Content-Length"] == "1024"
                seen.append(response.headers["X-Connection-Requests"])
            return seen

    assert run(loop, main()) == ["1", "2", "3", "4", "5"]


def test_gzip_comes_chunked_and_is_decoded(loop: asyncio.AbstractEventLoop, nginx: Nginx) -> None:
    async def main() -> None:
        async with Client() as client:
            response = await client.request("GET", f"{nginx.url}/text.txt")
            assert response.status == 200
            # nginx compresses on the fly, so it cannot send a length.
            assert response.headers["Content-Encoding"] == "gzip"
            assert response.headers["Transfer-Encoding"] == "chunked"
            assert "Content-Length" not in response.headers
            assert response.body == TEXT
            # The same file unencoded, when asked so, has its length.
            plain = await client.request("GET", f"{nginx.url}/text.txt", headers=HEADERS)
            assert "Content-Encoding" not in plain.headers
            assert (plain.headers["Content-Length"], plain.body) == (str(len(TEXT)), TEXT)

    run(loop, main())


def test_the_body_cap_holds_for_the_decoded_body(
    loop: asyncio.AbstractEventLoop, nginx: Nginx
) -> None:
    assert len(gzip.compress(TEXT)) < len(TEXT) // 4

    async def main() -> None:
        options = ClientOptions(max_body_bytes=len(TEXT) - 1, retry=None)
        async with Client(options) as client:
            with pytest.raises(BodyTooLarge, match="decoded body"):
                await client.request("GET", f"{nginx.url}/text.txt")

    run(loop, main())


def test_conditional_get_gets_304_without_a_body(
    loop: asyncio.AbstractEventLoop, nginx: Nginx
) -> None:
    async def main() -> list[str]:
        async with Client(ClientOptions(limit_per_host=1)) as client:
            first = await client.request("GET", f"{nginx.url}/bin/x", headers=HEADERS)
            etag = first.headers["ETag"]
            again = await client.request(
                "GET", f"{nginx.url}/bin/x", headers={**HEADERS, "If-None-Match": etag}
            )
            assert (again.status, again.body) == (304, b"")
            # The connection is still in step: the next response is whole.
            after = await client.request("GET", f"{nginx.url}/bin/y", headers=HEADERS)
            assert (after.status, after.body) == (200, BINARY)
            return [r.headers["X-Connection-Requests"] for r in (first, again, after)]

    assert run(loop, main()) == ["1", "2", "3"]


def test_head_has_a_length_but_no_body(loop: asyncio.AbstractEventLoop, nginx: Nginx) -> None:
    async def main() -> list[str]:
        async with Client(ClientOptions(limit_per_host=1)) as client:
            head = await client.request("HEAD", f"{nginx.url}/bin/x", headers=HEADERS)
            assert (head.status, head.body, head.headers["Content-Length"]) == (200, b"", "1024")
            get = await client.request("GET", f"{nginx.url}/bin/x", headers=HEADERS)
            assert get.body == BINARY
            return [r.headers["X-Connection-Requests"] for r in (head, get)]

    # Kept alive across the HEAD: the GET went on the same connection.
    assert run(loop, main()) == ["1", "2"]


def test_redirects_are_followed_and_limited(loop: asyncio.AbstractEventLoop, nginx: Nginx) -> None:
    async def main() -> None:
        async with Client(ClientOptions(retry=None)) as client:
            response = await client.request("GET", f"{nginx.url}/moved", headers=HEADERS)
            assert (response.status, response.body) == (200, TEXT)
            assert response.url == f"{nginx.url}/text.txt"
            with pytest.raises(TooManyRedirects, match="more than 5 redirects"):
                await client.request("GET", f"{nginx.url}/loop")
        async with Client(ClientOptions(max_redirects=0)) as client:
            response = await client.request("GET", f"{nginx.url}/moved")
            assert response.status == 301
            assert response.headers["Location"].endswith("/text.txt")

    run(loop, main())


def test_many_concurrent_requests_stay_within_the_pool(
    loop: asyncio.AbstractEventLoop, nginx: Nginx
) -> None:
    async def main() -> list[tuple[str, str]]:
        async with Client(ClientOptions(limit=10, limit_per_host=4)) as client:

            async def one(i: int) -> tuple[str, str]:
                response = await client.request("GET", f"{nginx.url}/bin/{i}", headers=HEADERS)
                assert response.body == BINARY
                return response.headers["X-Connection"], response.headers["X-Connection-Requests"]

            return await asyncio.gather(*(one(i) for i in range(200)))

    seen = run(loop, main())
    # 200 concurrent requests on at most 4 connections (nginx numbers them).
    assert len({connection for connection, _ in seen}) <= 4
    assert max(int(count) for _, count in seen) >= 50


def test_idle_connections_close_after_the_keepalive_timeout(
    loop: asyncio.AbstractEventLoop, nginx: Nginx
) -> None:
    async def main() -> list[str]:
        options = ClientOptions(keepalive_timeout=0.2, limit_per_host=1)
        async with Client(options) as client:
            seen = []
            for pause in (0.0, 0.05, 0.6):
                await asyncio.sleep(pause)
                response = await client.request("GET", f"{nginx.url}/bin/x", headers=HEADERS)
                seen.append(response.headers["X-Connection-Requests"])
            return seen

    # Kept for a short pause, closed by the client after a long one: a new connection.
    assert run(loop, main()) == ["1", "2", "1"]
