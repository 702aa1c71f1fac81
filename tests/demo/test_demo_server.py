"""The demo's fault-injection server, driven by a plain aiohttp client.

Each fault the issue lists is checked as the server injects it, attempt by
attempt, on both loops (the ``loop`` fixture: corun and asyncio; its
teardown fails a test that leaked an fd or fired the exception handler).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import pytest

aiohttp = pytest.importorskip("aiohttp")

from corun.fetch.demo_server import (  # noqa: E402
    DEFAULT_MIX,
    DROP_ATTEMPTS,
    FLAKY_RETRY_AFTER,
    KINDS,
    SLOW_MAX,
    SLOW_MIN,
    DemoServer,
)

pytestmark = pytest.mark.timeout(60)


def run(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    return loop.run_until_complete(asyncio.wait_for(coro, 30))


def first(urls: list[str], kind: str) -> str:
    return next(u for u in urls if urlsplit(u).path.split("/")[1] == kind)


async def get(session: Any, url: str) -> tuple[int, dict[str, str], str]:
    async with session.get(url) as response:
        return response.status, dict(response.headers), await response.text()


def test_urls_follow_the_mix_and_the_seed(loop):
    async def main() -> tuple[list[str], list[str], list[str]]:
        async with DemoServer(seed=7) as a, DemoServer(seed=7) as b, DemoServer(seed=8) as c:
            return a.urls(1000), b.urls(1000), c.urls(1000)

    one, two, other = run(loop, main())
    paths = [urlsplit(u).path for u in one]
    assert paths == [urlsplit(u).path for u in two]  # same seed, same plan
    assert paths != [urlsplit(u).path for u in other]
    assert len(set(paths)) == 1000  # one path per request
    counts = Counter(p.split("/")[1] for p in paths)
    assert counts == {k: round(1000 * share) for k, share in DEFAULT_MIX.items()}
    down_hosts = {urlsplit(u).netloc for u in one if "/down/" in u}
    live_hosts = {urlsplit(u).netloc for u in one if "/down/" not in u}
    assert len(down_hosts) == 1 and len(live_hosts) == 3
    assert down_hosts.isdisjoint(live_hosts)
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in one)


def test_urls_rejects_bad_mixes(loop):
    async def main() -> None:
        async with DemoServer() as server:
            with pytest.raises(ValueError, match="unknown kind"):
                server.urls(10, {"teapot": 1.0})
            with pytest.raises(ValueError, match=">= 0"):
                server.urls(10, {"ok": -1.0})
            assert len(server.urls(10, {"ok": 0.5, "flaky": 0.5})) == 10
            assert server.urls(0) == []

    run(loop, main())


def test_every_fault_as_specified(loop):
    async def main() -> None:
        async with DemoServer(seed=3) as server:
            urls = server.urls(1000)  # at least one path of each kind
            async with aiohttp.ClientSession() as session:
                # ok: 200 at once
                url = first(urls, "ok")
                assert (await get(session, url))[0] == 200
                assert server.attempts(urlsplit(url).path) == 1

                # flaky: 503 with Retry-After, then 200
                url = first(urls, "flaky")
                status, headers, _ = await get(session, url)
                assert status == 503
                assert headers["Retry-After"] == f"{FLAKY_RETRY_AFTER:g}"
                assert (await get(session, url))[0] == 200
                assert (await get(session, url))[0] == 200

                # limited: 429 (no Retry-After), then 200
                url = first(urls, "limited")
                status, headers, _ = await get(session, url)
                assert status == 429 and "Retry-After" not in headers
                assert (await get(session, url))[0] == 200

                # slow: 200 after its seeded delay, within [50, 300) ms
                url = first(urls, "slow")
                n = int(urlsplit(url).path.split("/")[2])
                delay = server.slow_delay(n)
                assert SLOW_MIN <= delay < SLOW_MAX
                assert delay == DemoServer(seed=3).slow_delay(n)
                started = time.monotonic()
                assert (await get(session, url))[0] == 200
                assert time.monotonic() - started >= delay - 0.005

                # drop: the connection is closed with no response, DROP_ATTEMPTS
                # times (aiohttp resends once by itself), then 200
                url = first(urls, "drop")
                path = urlsplit(url).path
                with pytest.raises(aiohttp.ServerDisconnectedError):
                    await get(session, url)
                assert server.attempts(path) == DROP_ATTEMPTS
                assert (await get(session, url))[0] == 200
                assert server.attempts(path) == DROP_ATTEMPTS + 1

                # down: refused, every time
                url = first(urls, "down")
                for _ in range(3):
                    with pytest.raises(aiohttp.ClientConnectorError) as info:
                        await get(session, url)
                    assert isinstance(info.value.os_error, ConnectionRefusedError)

                # the statistics, in process and over HTTP
                stats = server.stats()
                assert stats.faults == {
                    "ok": 0,
                    "flaky": 1,
                    "limited": 1,
                    "slow": 0,
                    "drop": DROP_ATTEMPTS,
                    "down": 0,
                }
                assert stats.recovered["flaky"] == 1
                assert stats.recovered["limited"] == 1
                assert stats.recovered["drop"] == 1
                assert stats.requests["flaky"] == 3
                assert stats.slow_delay_ms == pytest.approx(delay * 1000, abs=0.1)
                status, _, body = await get(session, server.live[0] + "/_stats")
                assert status == 200 and '"faults"' in body

                # unknown paths
                assert (await get(session, server.live[0] + "/teapot/1"))[0] == 404
                assert (await get(session, server.live[0] + "/ok/x"))[0] == 404

    run(loop, main())


def test_retry_after_is_judged_from_the_servers_side(loop):
    async def main() -> None:
        async with DemoServer() as server:
            flaky = server.urls(200, {"flaky": 1.0})[:2]
            async with aiohttp.ClientSession() as session:
                # Retried at once: too early.
                assert (await get(session, flaky[0]))[0] == 503
                assert (await get(session, flaky[0]))[0] == 200
                # Retried after Retry-After: honoured.
                assert (await get(session, flaky[1]))[0] == 503
                await asyncio.sleep(FLAKY_RETRY_AFTER)
                assert (await get(session, flaky[1]))[0] == 200
            stats = server.stats()
            assert stats.retry_after_early == 1
            assert stats.retry_after_honoured == 1
            assert stats.retry_after_wait_ms is not None
            assert stats.retry_after_wait_ms >= FLAKY_RETRY_AFTER * 1000 / 2

    run(loop, main())


def test_close_releases_every_port(loop):
    async def main() -> list[str]:
        server = DemoServer(live_hosts=2)
        await server.start()
        assert len(server.live) == 2 and server.down
        bases = [*server.live, server.down]
        await server.close()
        await server.close()  # idempotent
        return bases

    bases = run(loop, main())
    assert len(set(bases)) == 3
    assert set(KINDS) >= {"ok", "down"}
    with pytest.raises(ValueError):
        DemoServer(live_hosts=0)
