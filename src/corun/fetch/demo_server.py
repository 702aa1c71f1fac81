"""The embedded fault-injection HTTP server behind ``corun demo``.

One aiohttp ``web.Application`` served on several loopback ports, each port
being one "host" to ``corun.http`` (whose per-host policies are keyed by
``host:port``). What a request gets is decided by its path alone, so a run
is deterministic: the same ``seed`` gives the same URLs, the same delays and
the same faults, attempt by attempt.

========================  ==================================================
path                      behaviour
========================  ==================================================
``/ok/{n}``               200 at once
``/flaky/{n}``            503 with ``Retry-After: <FLAKY_RETRY_AFTER>`` on the
                          first attempt, 200 afterwards
``/limited/{n}``          429 (no ``Retry-After``: the client backs off) on the
                          first attempt, 200 afterwards
``/slow/{n}``             200 after a delay in [50, 300) ms drawn from the seed
``/drop/{n}``             the connection is closed without a response on the
                          first ``DROP_ATTEMPTS`` attempts, 200 afterwards
``/_stats``               the server's ``DemoStats`` as JSON
========================  ==================================================

The "down" host is a port that is bound but never listens: connecting to
it is refused at once (``ECONNREFUSED``), every time, for as long as the
server runs, which is what trips its circuit breaker. Binding the port
(rather than picking a free one and closing it) keeps anything else from
taking it while the demo runs.

Attempts are counted per path in memory, and for ``/flaky`` the server
records how long the client waited before its second attempt, so that the
demo can show that ``Retry-After`` was honoured from the server's side.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Final

from aiohttp import web

#: The fault kinds, in the order the demo reports them.
KINDS: Final = ("ok", "flaky", "limited", "slow", "drop", "down")
#: The share of each kind in ``DemoServer.urls`` by default (sums to 1).
#: Few flaky and limited paths: each 503 with ``Retry-After`` pauses its whole
#: host, and each 429 or 503 halves the host's adaptive limit, as an
#: overloaded server asks; a tenth of the requests doing so would keep every
#: host paused, and the demo would mostly wait.
DEFAULT_MIX: Final[Mapping[str, float]] = {
    "ok": 0.858,
    "flaky": 0.002,
    "limited": 0.01,
    "slow": 0.06,
    "drop": 0.03,
    "down": 0.04,
}
#: The ``Retry-After`` (seconds) of a flaky 503.
FLAKY_RETRY_AFTER: Final = 0.25
#: Attempts of a ``/drop`` path whose connection is closed. Two, so that at
#: least one drop reaches the fetcher's retries whatever the connection:
#: ``corun.http`` resends an idempotent request once by itself, but only when
#: a *reused* keep-alive connection closed without answering (RFC 9112
#: §9.3.1); a drop on a fresh connection is the fetcher's to retry.
DROP_ATTEMPTS: Final = 2
#: The slow responses' delay range, seconds.
SLOW_MIN: Final = 0.05
SLOW_MAX: Final = 0.3
#: Live hosts (ports) the requests are spread over; one more is down.
LIVE_HOSTS: Final = 3
#: A waiting time this close under ``Retry-After`` still counts as honoured
#: (the server's and the client's clocks read at slightly different moments).
_TOLERANCE: Final = 0.01
_BODY: Final = b"ok\n"


@dataclass(frozen=True, slots=True)
class DemoStats:
    """What the server saw.

    Attributes:
        requests: requests received, by kind (every attempt counts).
        faults: faults injected, by kind (503, 429, dropped connection);
            a ``/drop`` path is dropped ``DROP_ATTEMPTS`` times.
        recovered: paths whose fault was followed by a successful attempt.
        retry_after_honoured: flaky paths whose second attempt came at least
            ``Retry-After`` seconds after the 503.
        retry_after_early: flaky paths retried sooner than ``Retry-After``.
        retry_after_wait_ms: the mean wait before a flaky path's retry, ms
            (None when none was retried).
        slow_delay_ms: the slow responses' total delay, ms.
    """

    requests: dict[str, int]
    faults: dict[str, int]
    recovered: dict[str, int]
    retry_after_honoured: int
    retry_after_early: int
    retry_after_wait_ms: float | None
    slow_delay_ms: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class DemoServer:
    """The fault-injection server; use it as an async context manager.

    Example::

        async with DemoServer(seed=1) as server:
            urls = server.urls(1000)  # shuffled, with the default fault mix
            ...
            print(server.stats())

    Args:
        seed: seeds the slow delays and the order of ``urls``.
        live_hosts: how many ports serve the application (at least 1).
        host: the loopback address to bind.
    """

    def __init__(
        self, *, seed: int = 1, live_hosts: int = LIVE_HOSTS, host: str = "127.0.0.1"
    ) -> None:
        if live_hosts < 1:
            raise ValueError(f"live_hosts must be at least 1, got {live_hosts!r}")
        self.seed = seed
        self.host = host
        self._live_hosts = live_hosts
        self._runner: web.AppRunner | None = None
        self._down: socket.socket | None = None
        #: The base URLs (``http://host:port``) of the live hosts.
        self.live: list[str] = []
        #: The base URL of the host that is down.
        self.down = ""
        # Invariant: _attempts[path] counts the requests received for path;
        # _fault_at[path] is the monotonic time of a flaky path's 503 until
        # its next attempt consumes it.
        self._attempts: dict[str, int] = {}
        self._fault_at: dict[str, float] = {}
        self._requests = dict.fromkeys(KINDS, 0)
        self._faults = dict.fromkeys(KINDS, 0)
        self._recovered = dict.fromkeys(KINDS, 0)
        self._honoured = 0
        self._early = 0
        self._waits: list[float] = []
        self._slow_total = 0.0

    # ---- lifecycle

    async def __aenter__(self) -> DemoServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Bind the live ports and the down one, and start serving."""
        if self._runner is not None:
            raise RuntimeError("the DemoServer is already started")
        app = web.Application()
        app.router.add_get("/_stats", self._stats)
        app.router.add_get("/{kind}/{n}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        self._runner = runner
        try:
            for _ in range(self._live_hosts):
                sock = _bound(self.host)
                sock.listen(1024)
                site = web.SockSite(runner, sock)
                await site.start()
                self.live.append(f"http://{self.host}:{sock.getsockname()[1]}")
            # Bound, never listening: connecting is refused.
            self._down = _bound(self.host)
            self.down = f"http://{self.host}:{self._down.getsockname()[1]}"
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop serving and release every port."""
        runner, self._runner = self._runner, None
        if self._down is not None:
            self._down.close()
            self._down = None
        if runner is not None:
            await runner.cleanup()

    # ---- the request list

    def urls(self, count: int, mix: Mapping[str, float] | None = None) -> list[str]:
        """``count`` URLs with the fault ``mix`` (kind -> share), shuffled by the seed.

        Each kind gets ``round(share * count)`` URLs (the rounding error goes
        to ``ok``). Live kinds are spread round-robin over the live hosts;
        ``down`` URLs all go to the down host. Every path is unique, so the
        server's per-path attempt counts are per request.

        Raises:
            ValueError: an unknown kind, a negative share, or a negative count.
        """
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count!r}")
        if not self.live:
            raise RuntimeError("start the DemoServer first")
        shares = dict(DEFAULT_MIX if mix is None else mix)
        for kind, share in shares.items():
            if kind not in KINDS:
                raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
            if share < 0:
                raise ValueError(f"the share of {kind!r} must be >= 0, got {share!r}")
        total = sum(shares.values()) or 1.0
        counts = {kind: round(count * share / total) for kind, share in shares.items()}
        counts["ok"] = counts.get("ok", 0) + count - sum(counts.values())
        while counts["ok"] < 0:  # rounding overshoot: take it back from the largest kind
            largest = max((k for k in counts if k != "ok"), key=lambda k: counts[k])
            counts[largest] -= 1
            counts["ok"] += 1
        urls: list[str] = []
        n = 0
        for kind in KINDS:
            for _ in range(counts.get(kind, 0)):
                base = self.down if kind == "down" else self.live[n % len(self.live)]
                urls.append(f"{base}/{kind}/{n}")
                n += 1
        random.Random(self.seed).shuffle(urls)
        return urls

    # ---- statistics

    def stats(self) -> DemoStats:
        """A snapshot of what the server saw so far."""
        waits = self._waits
        return DemoStats(
            requests=dict(self._requests),
            faults=dict(self._faults),
            recovered=dict(self._recovered),
            retry_after_honoured=self._honoured,
            retry_after_early=self._early,
            retry_after_wait_ms=round(1000.0 * sum(waits) / len(waits), 1) if waits else None,
            slow_delay_ms=round(1000.0 * self._slow_total, 1),
        )

    def attempts(self, path: str) -> int:
        """Requests received for ``path`` (such as ``"/flaky/7"``)."""
        return self._attempts.get(path, 0)

    def slow_delay(self, n: int) -> float:
        """The delay of ``/slow/{n}``, seconds: a pure function of the seed and ``n``."""
        return random.Random(self.seed * 1_000_003 + n).uniform(SLOW_MIN, SLOW_MAX)

    # ---- handlers

    async def _stats(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.stats().to_dict())

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        kind = request.match_info["kind"]
        try:
            n = int(request.match_info["n"])
        except ValueError:
            raise web.HTTPNotFound() from None
        if kind not in KINDS or kind == "down":
            raise web.HTTPNotFound()
        path = request.path
        attempt = self._attempts.get(path, 0) + 1
        self._attempts[path] = attempt
        self._requests[kind] += 1
        if kind == "flaky":
            if attempt == 1:
                self._faults[kind] += 1
                self._fault_at[path] = time.monotonic()
                return web.Response(
                    status=503,
                    text="try again later\n",
                    headers={"Retry-After": f"{FLAKY_RETRY_AFTER:g}"},
                )
            failed_at = self._fault_at.pop(path, None)
            if failed_at is not None:
                waited = time.monotonic() - failed_at
                self._waits.append(waited)
                if waited + _TOLERANCE >= FLAKY_RETRY_AFTER:
                    self._honoured += 1
                else:
                    self._early += 1
                self._recovered[kind] += 1
        elif kind == "limited":
            if attempt == 1:
                self._faults[kind] += 1
                return web.Response(status=429, text="slow down\n")
            if attempt == 2:
                self._recovered[kind] += 1
        elif kind == "drop":
            if attempt <= DROP_ATTEMPTS:
                self._faults[kind] += 1
                _drop(request)
                # The client is gone; this tells aiohttp to stop handling.
                raise asyncio.CancelledError
            if attempt == DROP_ATTEMPTS + 1:
                self._recovered[kind] += 1
        elif kind == "slow":
            delay = self.slow_delay(n)
            self._slow_total += delay
            await asyncio.sleep(delay)
        return web.Response(body=_BODY, content_type="text/plain")


def _bound(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _drop(request: web.Request) -> None:
    """Close the request's connection at once, without a response."""
    transport = request.transport
    if transport is not None:
        transport.abort()


__all__ = ["DEFAULT_MIX", "DROP_ATTEMPTS", "FLAKY_RETRY_AFTER", "KINDS", "DemoServer", "DemoStats"]
