"""ASGI middleware that labels each request's task with its route, for ``corun top``.

uvicorn runs every request in a task of its own, and all of them run the same
coroutine function, so ``corun top`` would show them as one group. Wrapped in
``RouteGroups``, each request task counts under ``"GET /items/{item_id}"``:
the route template the framework matched, read from the ASGI scope after the
application has handled the request (Starlette and FastAPI put the matched
route in ``scope["route"]``, Starlette's endpoint in ``scope["endpoint"]``).
A request that matched no route keeps its task's group.

    app = FastAPI()
    app.add_middleware(RouteGroups)     # or: app = RouteGroups(app)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from corun.observe import MAX_GROUP_LABEL, set_group

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def route_label(scope: Scope) -> str | None:
    """``"METHOD /route/{template}"`` for a handled request's scope; None if no route is known."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if not isinstance(template, str):
        endpoint = scope.get("endpoint")
        template = getattr(endpoint, "__qualname__", None)
        if not isinstance(template, str):
            return None
    elif scope.get("root_path"):
        # A mounted app's route is relative to the mount point.
        template = str(scope["root_path"]) + template
    method = scope.get("method") if scope["type"] == "http" else "WEBSOCKET"
    return f"{method} {template}"[:MAX_GROUP_LABEL]


class RouteGroups:
    """Count each HTTP and WebSocket request's task under its route in ``corun top``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            label = route_label(scope)
            if label is not None:
                set_group(label)
