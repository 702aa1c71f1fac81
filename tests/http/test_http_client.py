"""corun.http.Client against a real aiohttp server on 127.0.0.1, on corun's loop and asyncio's."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Coroutine
from typing import Any

import pytest
import trustme
from http_servers import Faults, serve
from yarl import URL

from corun.http import (
    BodyTooLarge,
    Client,
    ClientOptions,
    ConnectError,
    InvalidURL,
    RejectedError,
    RequestTimeout,
    TLSError,
    TooManyRedirects,
    UnsupportedScheme,
    parse_url,
)
from corun.resilience import BreakerOptions, RateLimiterOptions, RetryOptions

pytestmark = pytest.mark.timeout(60)

FAST_RETRY = RetryOptions(max_attempts=4, initial_delay=0.001, max_delay=0.01)


def run(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, 30))


def test_options_defaults_are_safe_and_validated() -> None:
    options = ClientOptions()
    assert options.verify_tls and not options.retry_non_idempotent
    assert options.max_redirects == 5 and options.max_body_bytes == 10 * 1024 * 1024
    assert options.retry is not None and options.breaker is not None
    with pytest.raises(ValueError, match="limit_per_host"):
        ClientOptions(limit_per_host=0)
    with pytest.raises(ValueError, match="total_timeout"):
        ClientOptions(total_timeout=1e9)
    with pytest.raises(TypeError, match="retry"):
        ClientOptions(retry=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ssl_context"):
        ClientOptions(verify_tls=False, ssl_context=ssl.create_default_context())


def test_get_ok(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with serve() as base, Client() as client:
            response = await client.request("GET", f"{base}/ok?n=1")
            assert (response.status, response.text(), response.attempts) == (200, "ok 1", 1)
            assert response.headers["content-type"].startswith("text/plain")
            assert client.statistics().attempts == 1

    run(loop, main())


def test_retries_503_and_429_honouring_retry_after(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        faults = Faults()
        async with serve(faults) as base, Client(ClientOptions(retry=FAST_RETRY)) as client:
            started = time.monotonic()
            response = await client.request("GET", f"{base}/flaky?fail=2&ra=0.15&tag=a")
            assert (response.status, response.attempts) == (200, 3)
            assert time.monotonic() - started >= 0.3  # two Retry-After waits, not the 1 ms backoff
            response = await client.request("GET", f"{base}/flaky?fail=1&status=429&tag=b")
            assert (response.status, response.attempts) == (200, 2)
            # Retries run out: the last response is returned, not raised.
            response = await client.request("GET", f"{base}/flaky?fail=99&tag=c")
            assert (response.status, response.attempts) == (503, 4)
            assert client.statistics().retries == 2 + 1 + 3

    run(loop, main())


def test_no_retry_on_404_or_post(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        faults = Faults()
        options = ClientOptions(retry=FAST_RETRY, breaker=None)
        async with serve(faults) as base, Client(options) as client:
            response = await client.request("GET", f"{base}/status/404")
            assert (response.status, response.attempts) == (404, 1)
            response = await client.request("POST", f"{base}/post", body=b"x")
            assert (response.status, response.attempts) == (503, 1)
            assert faults.hits == {"status": 1, "post": 1}
            # The caller may opt in.
            response = await client.request("POST", f"{base}/post", body=b"x", idempotent=True)
            assert response.attempts == 4

    run(loop, main())


def test_connection_refused_is_retried_then_raised(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with serve() as base:
            pass  # the port is closed now
        async with Client(ClientOptions(retry=FAST_RETRY, breaker=None)) as client:
            with pytest.raises(ConnectError) as info:
                await client.request("GET", f"{base}/ok")
            assert info.value.attempts == 4 and info.value.kind == "connect"
            assert base in str(info.value)

    run(loop, main())


def test_body_cap(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with serve() as base, Client(ClientOptions(max_body_bytes=100_000)) as client:
            assert len((await client.request("GET", f"{base}/big?size=100000")).body) == 100_000
            with pytest.raises(BodyTooLarge, match="cap of 100000"):
                await client.request("GET", f"{base}/big?size=100001")
            with pytest.raises(BodyTooLarge) as info:  # chunked: no Content-Length
                await client.request("GET", f"{base}/big-stream?chunks=4")
            assert info.value.attempts == 1

    run(loop, main())


def test_redirect_limit(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        async with serve() as base, Client(ClientOptions(max_redirects=3)) as client:
            response = await client.request("GET", f"{base}/redirect/3")
            assert response.text() == "landed" and response.url.endswith("/redirect/0")
            with pytest.raises(TooManyRedirects):
                await client.request("GET", f"{base}/redirect/4")

    run(loop, main())


def test_invalid_urls() -> None:
    async def main() -> None:
        async with Client() as client:
            with pytest.raises(UnsupportedScheme):
                await client.request("GET", "ftp://example.org/x")
            for bad in ("not a url", "http://", "/relative", ""):
                with pytest.raises(InvalidURL):
                    await client.request("GET", bad)

    asyncio.run(main())


def test_parse_url_checks_and_parsed_urls(loop: asyncio.AbstractEventLoop) -> None:
    for bad in ("http://a.example/x y", "http://a.example/\x01", "http://a.example/\t", " "):
        with pytest.raises(InvalidURL):
            parse_url(bad)
    assert str(parse_url("http://a.example:8080/x?q=1")) == "http://a.example:8080/x?q=1"

    async def main() -> None:
        async with serve() as base, Client() as client:
            # A URL parse_url returned is used as it is; the same checks apply to one built by hand.
            response = await client.request("GET", parse_url(f"{base}/ok?n=3"))
            assert (response.status, response.text()) == (200, "ok 3")
            with pytest.raises(UnsupportedScheme):
                await client.request("GET", URL("ftp://example.org/x"))
            with pytest.raises(InvalidURL):
                await client.request("GET", URL("/relative"))

    run(loop, main())


def test_read_timeout(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        options = ClientOptions(read_timeout=0.1, retry=None)
        async with serve() as base, Client(options) as client:
            with pytest.raises(RequestTimeout) as info:
                await client.request("GET", f"{base}/ok?delay=1")
            assert isinstance(info.value, TimeoutError) and "read timeout" in str(info.value)
        options = ClientOptions(total_timeout=0.2, retry=FAST_RETRY)
        async with serve() as base, Client(options) as client:
            with pytest.raises(RequestTimeout, match="total timeout"):
                await client.request("GET", f"{base}/ok?delay=1")

    run(loop, main())


def test_breaker_opens_per_host(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        faults = Faults()
        options = ClientOptions(
            retry=None, breaker=BreakerOptions(consecutive_failures=3, open_duration=60)
        )
        async with serve(faults) as bad, serve() as good, Client(options) as client:
            for _ in range(3):
                assert (await client.request("GET", f"{bad}/down")).status == 500
            with pytest.raises(RejectedError) as info:
                await client.request("GET", f"{bad}/down")
            assert info.value.kind == "breaker_open" and info.value.attempts == 0
            assert faults.hits["down"] == 3
            assert client.breaker_state(bad) == "open"
            assert (await client.request("GET", f"{good}/ok")).status == 200  # another host
            stats = client.statistics()
            assert (stats.breaker_trips, stats.open_breakers) == (1, 1)

    run(loop, main())


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_tls_verification_is_on(loop: asyncio.AbstractEventLoop, ca: trustme.CA) -> None:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)

    async def main() -> None:
        async with serve(ssl_context=server_ctx) as base:
            async with Client(ClientOptions(retry=FAST_RETRY)) as client:
                with pytest.raises(TLSError) as info:
                    await client.request("GET", f"{base}/ok")
                assert info.value.attempts == 1  # a bad certificate is not retried
            async with Client(ClientOptions(ssl_context=trusting)) as client:
                assert (await client.request("GET", f"{base}/ok")).status == 200

    run(loop, main())


def test_per_host_concurrency(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        options = ClientOptions(per_host_concurrency=2, retry=None)
        async with serve() as base, Client(options) as client:
            started = time.monotonic()
            results = await asyncio.gather(
                *(client.request("GET", f"{base}/ok?delay=0.1") for _ in range(4))
            )
            assert all(r.status == 200 for r in results)
            assert time.monotonic() - started >= 0.2  # two waves of two

    run(loop, main())


def test_metrics_time_the_total_and_the_retry_and_count_the_host_policies(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def main() -> None:
        faults = Faults()
        options = ClientOptions(
            retry=FAST_RETRY,
            breaker=BreakerOptions(consecutive_failures=2, open_duration=60),
            per_host_concurrency=2,
            rate=RateLimiterOptions(per_key_rate=1000),
        )
        async with serve(faults) as base, serve() as other, Client(options) as client:
            with pytest.raises(RejectedError):  # 503, 503 (the breaker opens), refused
                await client.request("GET", f"{base}/flaky?fail=99&tag=m")
            await client.request("POST", f"{other}/ok")  # not retried: no retry events
            metrics = client.statistics().metrics
            assert {policy for policy, name in metrics.counters if name.startswith("calls.")} == {
                "total",
                "retry",
            }
            assert metrics.count("total", "calls.rejected") == 1
            assert metrics.count("total", "calls.success") == 1
            assert metrics.count("retry", "calls.rejected") == 1
            assert metrics.count("retry", "retries") == 2
            assert metrics.count("breaker", "state.open") == 1
            assert metrics.count("breaker", "rejected.breaker_open") == 1
            assert set(metrics.latency) == {"total"}  # the retry ended rejected: no latency

    run(loop, main())


def test_redirects_drop_authorization_across_origins(loop: asyncio.AbstractEventLoop) -> None:
    async def main() -> None:
        auth = {"Authorization": "Bearer secret"}
        async with serve() as one, serve() as other, Client() as client:
            same = await client.request(
                "GET", f"{one}/redirect-to?url={one}/authorization", headers=auth
            )
            assert same.text() == "Bearer secret"
            # Another port is another origin: the credentials stay behind.
            moved = await client.request(
                "GET", f"{one}/redirect-to?url={other}/authorization", headers=auth
            )
            assert (moved.text(), moved.url) == ("none", f"{other}/authorization")

    run(loop, main())
