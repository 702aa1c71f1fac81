"""``Pool``: keep-alive connections per origin, with limits, idle timeouts and a watchdog.

Every connection belongs to one origin (``scheme://host:port``, the pool's
key). The pool counts the connections it has open (idle, busy or still
connecting) in all and per origin, against ``ClientOptions.limit`` and
``limit_per_host``. A request takes an idle connection when there is one
(``take``, synchronous: the common case costs no await); otherwise
``acquire`` opens one when the limits allow, closes the longest-idle
connection of another origin when only the total limit is in the way, and
else waits until a connection is released or closed.

The watchdog is one timer per pool, not one per request. Every tick it adds
one to each connection's ``stall`` count, which a read, a send and a release
reset to 0. A busy connection whose count passes the read timeout's number
of ticks fails with ``RequestTimeout``; an idle one past the keep-alive
timeout's is closed. A tick is an eighth of the shorter of the two, so the
read timeout fires between 1 and 1.125 times its value after the last read.
The timer runs only while the pool has connections. (The rejected
alternative: a ``call_later`` per request, moved on every read, is a timer
handle and a heap push and pop per request.)

Connections: a TCP connection (TLS for https, verified by the client's
context), or through a proxy from the environment (``HTTP_PROXY``,
``HTTPS_PROXY``, ``NO_PROXY``, via ``urllib.request``): plain requests in
absolute form for http targets, and a ``CONNECT`` tunnel upgraded to TLS
(``loop.start_tls``) for https ones. A proxy may itself be https.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
from collections import deque
from typing import Final, final
from urllib.parse import unquote, urlsplit

from yarl import URL

from corun.http import errors
from corun.http.connection import MAX_HEADER_BYTES, Connection, WireError
from corun.http.options import ClientOptions

#: Ticks per (shorter) timeout: the watchdog's precision is 1/8 of it.
_TICKS: Final = 8


@final
class Proxy:
    """A proxy from the environment: where to connect, and its credentials."""

    __slots__ = ("auth", "host", "port", "tls", "url")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise errors.InvalidURL(f"unsupported proxy URL {url!r} (expected http or https)")
        self.url = url
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.auth: str | None = None
        if parts.username is not None:
            user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            self.auth = "Basic " + base64.b64encode(user_pass.encode()).decode("ascii")


def tls_context(verify: bool) -> ssl.SSLContext:
    """The default TLS context: the system's CAs and host name checks (unless not ``verify``)."""
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["http/1.1"])
    return context


def proxies_from_environment() -> dict[str, str]:
    """``{"http": url, "https": url, "no": hosts}`` from the environment (upper or lower case).

    Read as ``urllib.request`` reads it, which is imported only when some
    ``*_proxy`` variable is set: it costs tens of milliseconds of start-up.
    """
    if not any(name[-6:].lower() == "_proxy" for name in os.environ):
        return {}
    import urllib.request

    return urllib.request.getproxies_environment()


@final
class Route:
    """How to reach an origin: directly, or through a proxy (and then how).

    Also what every request to the origin repeats: its ``Host`` header, and
    (``plain``, filled by the client) the header block of a request with no
    headers or body of the caller's.
    """

    __slots__ = ("absolute_form", "host", "plain", "proxy", "proxy_auth", "tunnel")

    def __init__(self, proxy: Proxy | None, url: URL) -> None:
        https = url.scheme == "https"
        self.proxy = proxy
        self.tunnel = proxy is not None and https
        #: http through a proxy: the request line carries the whole URL.
        self.absolute_form = proxy is not None and not https
        self.proxy_auth = proxy.auth if proxy is not None and not https else None
        host = url.raw_host or ""
        if ":" in host:
            host = f"[{host}]"  # an IPv6 literal
        if not url.is_default_port():
            host = f"{host}:{url.port}"
        self.host = host
        self.plain: bytes | None = None


class Pool:
    """Keep-alive connections per origin (see the module docstring).

    Args:
        loop: the loop every connection runs on (read once, here).
        options: the client's options (limits, timeouts, TLS).
        proxies: ``proxies_from_environment()``, or ``{}`` for none.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, options: ClientOptions, proxies: dict[str, str]
    ) -> None:
        self._loop = loop
        self._options = options
        self._ssl: ssl.SSLContext | None = options.ssl_context
        self._proxies = proxies
        self._routes: dict[str, Route] = {}
        # Invariant: _total == len(_conns) + connections being opened, and
        # _open[key] counts the same per origin; every idle connection is in
        # _idle[key] and in _conns, and its waiter is None.
        self._idle: dict[str, list[Connection]] = {}
        self._open: dict[str, int] = {}
        self._total = 0
        self._conns: set[Connection] = set()
        self._waiters: deque[tuple[str, asyncio.Future[Connection | None]]] = deque()
        self._closed = False
        tick = min(options.read_timeout, options.keepalive_timeout, options.total_timeout) / _TICKS
        self._tick = tick
        self._read_ticks = round(options.read_timeout / tick)
        self._idle_ticks = round(options.keepalive_timeout / tick)
        self._watchdog: asyncio.TimerHandle | None = None
        self._drained: asyncio.Future[None] | None = None
        #: The loop's clock (bound method cached): deadlines are in its time.
        self.now = loop.time

    def _context(self) -> ssl.SSLContext:
        """The TLS context, made on first use (loading the CA store takes milliseconds)."""
        context = self._ssl
        if context is None:
            context = self._ssl = tls_context(self._options.verify_tls)
        return context

    # ---- routes

    def route(self, key: str, url: URL) -> Route:
        """How to reach ``url``'s origin ``key`` (decided once per origin)."""
        route = self._routes.get(key)
        if route is None:
            proxy = None
            proxy_url = self._proxies.get(url.scheme)
            host = url.raw_host or ""
            if proxy_url and not _bypass(host, self._proxies):
                proxy = Proxy(proxy_url)
            route = self._routes[key] = Route(proxy, url)
        return route

    # ---- taking and giving back

    def take(self, key: str) -> Connection | None:
        """An idle connection to ``key``, or None (never waits)."""
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to be stale
            if not conn.closed:
                return conn
        return None

    async def acquire(self, key: str, url: URL, deadline: float = 0.0) -> Connection:
        """A connection to ``key``: an idle one, a new one, or one that frees up.

        Args:
            key: the origin.
            url: a URL of the origin (to connect to).
            deadline: the loop time to give up at (0.0: none).

        Raises:
            WireError: connecting failed or timed out, or the deadline passed.
            RuntimeError: the pool is closed.
        """
        if not deadline:
            return await self._acquire(key, url)
        try:
            async with asyncio.timeout_at(deadline):
                return await self._acquire(key, url)
        except TimeoutError:
            raise WireError(errors.RequestTimeout, "total timeout", total=True) from None

    async def _acquire(self, key: str, url: URL) -> Connection:
        options = self._options
        while True:
            if self._closed:
                raise RuntimeError("the Client is closed")
            conn = self.take(key)
            if conn is not None:
                return conn
            if self._open.get(key, 0) < options.limit_per_host:
                if self._total >= options.limit:
                    self._evict_idle()
                if self._total < options.limit:
                    return await self._connect(key, url)
            waiter: asyncio.Future[Connection | None] = self._loop.create_future()
            entry = (key, waiter)
            self._waiters.append(entry)
            try:
                conn = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    given = waiter.result()
                    if given is not None:
                        self.release(given)  # handed over just as we were cancelled
                else:
                    try:
                        self._waiters.remove(entry)
                    except ValueError:
                        pass
                raise
            if conn is not None:
                return conn

    def release(self, conn: Connection) -> None:
        """``conn`` finished a response and may be reused."""
        conn.stall = 0
        key = conn.key
        if self._waiters:
            for entry in self._waiters:
                if entry[0] == key and not entry[1].done():
                    self._waiters.remove(entry)
                    entry[1].set_result(conn)
                    return
        idle = self._idle.get(key)
        if idle is None:
            idle = self._idle[key] = []
        idle.append(conn)
        if self._waiters:
            self._wake()  # another origin may close it to make room

    def discard(self, conn: Connection) -> None:
        """``conn`` closed: forget it, and let a waiter use the free slot."""
        if conn not in self._conns:
            return
        self._conns.discard(conn)
        idle = self._idle.get(conn.key)
        if idle is not None and conn in idle:
            idle.remove(conn)
        self._unreserve(conn.key)
        drained = self._drained
        if drained is not None and not self._conns and not drained.done():
            drained.set_result(None)

    def _unreserve(self, key: str) -> None:
        self._total -= 1
        left = self._open[key] - 1
        if left:
            self._open[key] = left
        else:
            del self._open[key]
            self._idle.pop(key, None)
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        """Wake the first waiter that could open a connection now."""
        per_host = self._options.limit_per_host
        for entry in self._waiters:
            key, waiter = entry
            if waiter.done():
                continue
            if self._open.get(key, 0) < per_host or self._idle.get(key):
                self._waiters.remove(entry)
                waiter.set_result(None)
                return

    def _evict_idle(self) -> None:
        """Close the longest-idle connection of any origin, to make room under the total limit."""
        oldest: Connection | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].stall > oldest.stall):
                oldest = idle[0]
        if oldest is not None:
            self.discard(oldest)
            oldest.abort()

    # ---- connecting

    async def _connect(self, key: str, url: URL) -> Connection:
        self._total += 1
        self._open[key] = self._open.get(key, 0) + 1
        conn = Connection(self, key, self._loop)
        options = self._options
        try:
            try:
                async with asyncio.timeout(options.connect_timeout):
                    await self._open_transport(conn, url)
            except TimeoutError as exc:
                raise WireError(
                    errors.RequestTimeout, f"connect timeout of {options.connect_timeout:g} s"
                ) from exc
            except (ssl.SSLError, ssl.CertificateError) as exc:
                raise WireError(errors.TLSError, f"TLS failed: {_reason(exc)}") from exc
            except OSError as exc:
                raise WireError(errors.ConnectError, f"connection failed: {_reason(exc)}") from exc
        except BaseException:
            if conn.transport is not None:
                conn.transport.abort()
            self._unreserve(key)
            raise
        if conn.closed:  # closed by the peer before we got here
            self._unreserve(key)
            raise WireError(errors.ConnectError, "connection failed: closed by the server at once")
        self._conns.add(conn)
        if self._watchdog is None:
            self._watchdog = self._loop.call_later(self._tick, self._watch)
        return conn

    async def _open_transport(self, conn: Connection, url: URL) -> None:
        loop = self._loop
        host = url.raw_host or ""
        port = url.port or 0
        https = url.scheme == "https"
        route = self.route(conn.key, url)
        proxy = route.proxy
        if proxy is None:
            await loop.create_connection(
                lambda: conn,
                host,
                port,
                ssl=self._context() if https else None,
                server_hostname=host if https else None,
            )
            return
        tls = self._context() if proxy.tls else None
        if not route.tunnel:
            await loop.create_connection(
                lambda: conn,
                proxy.host,
                proxy.port,
                ssl=tls,
                server_hostname=proxy.host if tls is not None else None,
            )
            return
        tunnel = _Tunnel(loop)
        transport, _ = await loop.create_connection(
            lambda: tunnel,
            proxy.host,
            proxy.port,
            ssl=tls,
            server_hostname=proxy.host if tls is not None else None,
        )
        try:
            authority = f"{host}:{port}"
            lines = [f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"]
            if proxy.auth is not None:
                lines.append(f"Proxy-Authorization: {proxy.auth}\r\n")
            lines.append("\r\n")
            transport.write("".join(lines).encode("latin-1"))
            status_line = await tunnel.answer
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[1].isdigit() or not 200 <= int(parts[1]) < 300:
                raise WireError(
                    errors.ConnectError,
                    f"connection failed: proxy {proxy.host}:{proxy.port} refused the tunnel: "
                    f"{status_line!r}",
                )
            tls_transport = await loop.start_tls(
                transport, conn, self._context(), server_hostname=host
            )
        except BaseException:
            transport.abort()
            raise
        if tls_transport is None:
            raise WireError(errors.ConnectError, "connection failed: TLS was not started")
        conn.connection_made(tls_transport)

    # ---- the watchdog

    def _watch(self) -> None:
        self._watchdog = None
        read_ticks, idle_ticks = self._read_ticks, self._idle_ticks
        now = self.now()
        for conn in list(self._conns):
            stall = conn.stall = conn.stall + 1
            if conn.waiter is not None:
                if stall > read_ticks:
                    conn.fail_timeout(self._options.read_timeout)
                elif conn.deadline and now >= conn.deadline:
                    conn.fail_deadline()
            elif stall > idle_ticks:
                self.discard(conn)
                conn.abort()
        if self._conns and not self._closed:
            self._watchdog = self._loop.call_later(self._tick, self._watch)

    # ---- closing

    async def close(self) -> None:
        """Close every connection and wait (briefly) until their sockets are closed."""
        self._closed = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)  # they see the pool closed
        self._waiters.clear()
        conns = list(self._conns)
        if not conns:
            return
        self._drained = self._loop.create_future()
        for conn in conns:
            conn.abort()
        try:
            async with asyncio.timeout(5.0):
                await self._drained
        except TimeoutError:
            pass


@final
class _Tunnel(asyncio.Protocol):
    """Reads a proxy's answer to CONNECT: its status line, once the headers end."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.answer: asyncio.Future[str] = loop.create_future()
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_HEADER_BYTES and not self.answer.done():
                self.answer.set_exception(
                    WireError(errors.ConnectError, "connection failed: proxy answer too long")
                )
            return
        if not self.answer.done():
            self.answer.set_result(self._buffer[: self._buffer.find(b"\r\n")].decode("latin-1"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_exception(
                WireError(errors.ConnectError, "connection failed: the proxy closed the connection")
            )


def _bypass(host: str, proxies: dict[str, str]) -> bool:
    """Whether ``NO_PROXY`` (``proxies["no"]``) names ``host``, as urllib reads it."""
    import urllib.request  # loaded already: only called when a proxy is set

    # Public in urllib.request since Python 3.0, absent from typeshed.
    bypass: bool = urllib.request.proxy_bypass_environment(host, proxies)  # type: ignore[attr-defined]
    return bypass


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["Pool", "Proxy", "Route", "proxies_from_environment", "tls_context"]
