"""A fault-injecting aiohttp server on 127.0.0.1 for the http and fetch tests (no mocks)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


class Faults:
    """Counters the handlers update, so tests can assert on what the server saw."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}

    def hit(self, name: str) -> int:
        self.hits[name] = self.hits.get(name, 0) + 1
        return self.hits[name]


def make_app(faults: Faults) -> web.Application:
    async def ok(request: web.Request) -> web.Response:
        faults.hit("ok")
        delay = float(request.query.get("delay", 0))
        if delay:
            await asyncio.sleep(delay)
        return web.Response(text=f"ok {request.query.get('n', '')}")

    async def flaky(request: web.Request) -> web.Response:
        """503 (or the ?status=) with Retry-After for the first ?fail= calls, then 200."""
        n = faults.hit("flaky" + request.query.get("tag", ""))
        if n <= int(request.query.get("fail", 2)):
            status = int(request.query.get("status", 503))
            return web.Response(
                status=status, headers={"Retry-After": request.query.get("ra", "0")}
            )
        return web.Response(text="recovered")

    async def status(request: web.Request) -> web.Response:
        faults.hit("status")
        return web.Response(status=int(request.match_info["code"]), text="status")

    async def post(request: web.Request) -> web.Response:
        faults.hit("post")
        await request.read()
        return web.Response(status=503)

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * int(request.query["size"]))

    async def big_stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(int(request.query["chunks"])):
            await response.write(b"y" * 65536)
        await response.write_eof()
        return response

    async def redirect(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n == 0:
            return web.Response(text="landed")
        raise web.HTTPFound(f"/redirect/{n - 1}")

    async def redirect_to(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["url"])

    async def authorization(request: web.Request) -> web.Response:
        return web.Response(text=request.headers.get("Authorization", "none"))

    async def binary(request: web.Request) -> web.Response:
        return web.Response(body=bytes(range(256)))

    async def down(request: web.Request) -> web.Response:
        faults.hit("down")
        return web.Response(status=500)

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/flaky", flaky)
    app.router.add_route("*", "/status/{code}", status)
    app.router.add_post("/post", post)
    app.router.add_get("/big", big)
    app.router.add_get("/big-stream", big_stream)
    app.router.add_get("/redirect/{n}", redirect)
    app.router.add_get("/redirect-to", redirect_to)
    app.router.add_get("/authorization", authorization)
    app.router.add_get("/binary", binary)
    app.router.add_get("/down", down)
    return app


@asynccontextmanager
async def serve(
    faults: Faults | None = None, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """Serve the app on an ephemeral port; yields the base URL."""
    app = make_app(faults if faults is not None else Faults())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    scheme = "https" if ssl_context is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
