"""corun fetch never abandons work that can still succeed: real servers on 127.0.0.1.

The fault scenario of issue 14 (a host that answers 503 with ``Retry-After:
0`` twice to each of 200 URLs, 429s with ``Retry-After: 1``, healthy paths
on the same host), a dead host given up after ``--host-give-up``, and
``--retry-failed``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fetch_servers import AppThread, refused_port

import corun
from corun.fetch import FetchOptions, ProgressState, run_fetch

pytestmark = pytest.mark.timeout(120)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class Patience:
    """``/flaky/N``: 503 + ``Retry-After: 0`` on the first two attempts; ``/limited/N``: 429 +
    ``Retry-After: 1`` on the first; ``/ok/N``: 200. Records every arrival."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.arrivals: list[float] = []
        self.limited_at: list[float] = []

    def make_app(self) -> web.Application:
        async def handle(request: web.Request) -> web.Response:
            now = time.monotonic()
            self.arrivals.append(now)
            path = request.path
            n = self.hits[path] = self.hits.get(path, 0) + 1
            if path.startswith("/flaky/") and n <= 2:
                return web.Response(status=503, headers={"Retry-After": "0"})
            if path.startswith("/limited/") and n == 1:
                self.limited_at.append(now)
                return web.Response(status=429, headers={"Retry-After": "1"})
            return web.Response(text=f"ok {path}")

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        return app


def test_the_issue_fault_scenario_ends_with_every_line_a_success(tmp_path: Path) -> None:
    server = Patience()
    paths = [f"/flaky/{i}" for i in range(200)] + [f"/ok/{i}" for i in range(200)]
    # Ten 429s spread over the input (each pauses the whole host for 1 s).
    for i in range(10):
        paths.insert(i * 41, f"/limited/{i}")
    with AppThread(server.make_app) as app:
        src = tmp_path / "in.txt"
        src.write_text("".join(f"{app.base}{path}\n" for path in paths))
        out = tmp_path / "out.jsonl"
        states: list[ProgressState] = []
        # The defaults but the progress bar: the breaker's (50 % over 20 calls)
        # is the one that opened on this host's 503s before.
        options = FetchOptions(input=str(src), output=str(out), progress=False)
        summary = corun.run(run_fetch(options, on_progress=states.append))
    assert summary.complete and summary.by_error == {} and summary.breaker_trips == 0
    records = read_jsonl(out)
    assert len(records) == len(paths)
    expected_attempts = {"flaky": 3, "limited": 2, "ok": 1}
    for number, (path, record) in enumerate(zip(paths, records, strict=True), start=1):
        assert record["line"] == number
        assert record["url"].endswith(path)
        assert (record["status"], record["error"]) == (200, None), record
        assert record["attempts"] == expected_attempts[path.split("/")[1]], record
        assert server.hits[path] == record["attempts"], path  # nothing fetched twice
    assert summary.host_pauses >= 10 and summary.deferred > 0
    # Every 429 paused the whole host for its Retry-After: nothing arrived from
    # 0.2 s after it (what was sent before the client read the 429 arrives within
    # that: loopback) until 0.95 s (the pause is 1 s, less timer slack).
    for at in server.limited_at:
        early = [t - at for t in server.arrivals if at + 0.2 < t < at + 0.95]
        assert early == [], early
    # The bar saw the host paused at some point, never unavailable.
    assert any(s.paused == 1 and s.paused_for is not None for s in states)
    assert all(s.unavailable == 0 for s in states)


def test_a_dead_host_ends_as_host_unavailable_after_host_give_up(tmp_path: Path) -> None:
    sock, port = refused_port()
    server = Patience()
    try:
        with AppThread(server.make_app) as app:
            dead = [f"http://127.0.0.1:{port}/dead/{i}" for i in range(40)]
            live = [f"{app.base}/ok/{i}" for i in range(20)]
            src = tmp_path / "in.txt"
            src.write_text("".join(f"{url}\n" for url in dead + live))
            out = tmp_path / "out.jsonl"
            options = FetchOptions(
                input=str(src),
                output=str(out),
                progress=False,
                retry_delay=0.01,
                breaker_min_calls=5,
                breaker_open_duration=0.2,
                host_give_up=1.5,
            )
            started = time.monotonic()
            summary = corun.run(run_fetch(options))
            elapsed = time.monotonic() - started
    finally:
        sock.close()
    assert summary.complete and summary.breaker_trips >= 1
    records = read_jsonl(out)
    dead_records, live_records = records[: len(dead)], records[len(dead) :]
    assert all(r["status"] == 200 for r in live_records)
    kinds = [r["error_kind"] for r in dead_records]
    # Lines that spent their own retries before the breaker opened end as
    # connection errors; every other one waited for the host, then was given up.
    assert set(kinds) <= {"connect", "host_unavailable"}
    given_up = [r for r in dead_records if r["error_kind"] == "host_unavailable"]
    assert len(given_up) > len(dead) // 2
    for record in given_up:
        assert f"host 127.0.0.1:{port} unavailable for" in record["error"]
        assert "since " in record["error"] and "--host-give-up 1.5 s" in record["error"]
    # The host was probed again while its lines waited. Before its breaker
    # opened at most breaker_min_calls attempts failed, plus the ones in flight
    # (its limit starts at 2 and a refusal does not raise it); after it opened,
    # one probe per breaker_open_duration: 7 in 1.5 s, at least 3 of them
    # whatever the timer slack.
    attempts = sum(r["attempts"] for r in dead_records)
    assert attempts >= options.breaker_min_calls + 2 + 3, attempts
    assert elapsed >= options.host_give_up
    assert summary.hosts[f"127.0.0.1:{port}"]["unavailable"] is True


def test_retry_failed_fetches_only_failed_lines_and_keeps_one_line_each(tmp_path: Path) -> None:
    healthy = False
    hits: dict[str, int] = {}

    def make_app() -> web.Application:
        async def handle(request: web.Request) -> web.Response:
            hits[request.path] = hits.get(request.path, 0) + 1
            if request.path.startswith("/gone/"):
                return web.Response(status=404)
            if request.path.startswith("/sick/") and not healthy:
                return web.Response(status=502)
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        return app

    with AppThread(make_app) as app:
        lines = []
        for i in range(30):
            lines += [f"{app.base}/ok/{i}", f"{app.base}/sick/{i}", f"{app.base}/gone/{i}"]
        lines.append("not a url")
        src = tmp_path / "in.txt"
        src.write_text("\n".join(lines) + "\n")
        out = tmp_path / "out.jsonl"
        options = FetchOptions(
            input=str(src),
            output=str(out),
            progress=False,
            retries=1,
            retry_delay=0.001,
            breaker_min_calls=10_000,
        )
        first = corun.run(run_fetch(options))
        assert first.complete and first.by_status == {"200": 30, "502": 30, "404": 30, "none": 1}
        before = dict(hits)
        healthy = True
        retry = FetchOptions(**{**_fields(options), "retry_failed": True})
        again = corun.run(run_fetch(retry))
    assert again.complete and again.by_status == {"200": 60, "404": 30, "none": 1}
    records = read_jsonl(out)
    assert [r["line"] for r in records] == list(range(1, len(lines) + 1))
    for path, count in hits.items():
        # Only the 502s were fetched again (once each: now healthy).
        assert count == before[path] + (1 if path.startswith("/sick/") else 0), path
    assert again.by_error == {"invalid_url": 1}


def _fields(options: FetchOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in FetchOptions.__dataclass_fields__}


def test_host_counts_show_a_pause_and_when_it_ends(tmp_path: Path) -> None:
    hits: dict[str, int] = {}

    def make_app() -> web.Application:
        async def handle(request: web.Request) -> web.Response:
            n = hits[request.path] = hits.get(request.path, 0) + 1
            if n == 1 and request.path == "/busy":
                return web.Response(status=503, headers={"Retry-After": "2"})
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        return app

    states: list[ProgressState] = []
    with AppThread(make_app) as app:
        src = tmp_path / "in.txt"
        src.write_text(f"{app.base}/busy\n" + "".join(f"{app.base}/x/{i}\n" for i in range(5)))
        options = FetchOptions(input=str(src), output=str(tmp_path / "o.jsonl"), progress=False)
        started = time.monotonic()
        corun.run(run_fetch(options, on_progress=states.append))
        elapsed = time.monotonic() - started
    paused = [s for s in states if s.paused == 1]
    assert paused, states
    assert all(s.paused_for is not None and 0.0 <= s.paused_for <= 2.0 for s in paused)
    assert "1 paused (for " in paused[0].hosts_text()
    assert elapsed >= 1.9  # the pause held every request to the host
    assert hits["/busy"] == 2


def test_the_engine_forgets_idle_hosts_beyond_max_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corun.fetch import FetchEngine, engine, parse_line
    from corun.http import Client

    monkeypatch.setattr(engine, "MAX_HOSTS", 1)
    server = Patience()
    records: dict[int, dict[str, Any]] = {}
    with (
        AppThread(server.make_app) as one,
        AppThread(server.make_app) as two,
        AppThread(server.make_app) as three,
    ):
        urls = [f"{app.base}/ok/{i}" for app in (one, two, three) for i in range(5)]
        items = [parse_line(n, url.encode()) for n, url in enumerate(urls, start=1)]
        options = FetchOptions(input="-", output=str(tmp_path / "o"), concurrency=1)

        async def main() -> tuple[int, int]:
            async with Client(options.client_options()) as client:
                fetcher = FetchEngine(options, client, records.__setitem__)
                await fetcher.run(items)
                return len(fetcher.host_reports()), fetcher.statistics().attempts

        hosts, attempts = corun.run(main())
    assert sorted(records) == list(range(1, 16))
    assert all(r["status"] == 200 for r in records.values())
    # Each host was forgotten when its last line was recorded, but the last
    # one (the engine then knew no more than MAX_HOSTS).
    assert (hosts, attempts) == (1, 15)
