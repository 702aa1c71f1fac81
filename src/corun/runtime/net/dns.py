"""Name resolution: ``getaddrinfo`` and ``getnameinfo`` without blocking the loop.

The C library's resolver blocks, so real lookups run in the loop's default
executor. But most addresses a server or a client sees are numeric already
(``127.0.0.1``, ``::1``, an address from ``accept()``), and a thread hop for
those costs far more than the answer. For a numeric host and port we call
``getaddrinfo`` with ``AI_NUMERICHOST | AI_NUMERICSERV`` right on the loop:
the C library then never touches the network or ``/etc/hosts``, and the
answer is exactly the one the executor would have produced.
"""

from __future__ import annotations

import socket
from typing import Any, Final

from corun.runtime.engine.loop_core import LoopCore, as_asyncio_loop

#: One entry of getaddrinfo's answer: (family, type, proto, canonname, sockaddr).
AddrInfo = tuple[int, int, int, str, Any]

_NUMERIC_FLAGS: Final = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
_NUMERIC_NAME_FLAGS: Final = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV


def is_numeric_host(host: object) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 literal (an IPv6 scope id allowed)."""
    if isinstance(host, bytes):
        try:
            host = host.decode("ascii")
        except UnicodeDecodeError:
            return False
    if not isinstance(host, str) or not host:
        return False
    try:
        socket.inet_pton(socket.AF_INET, host)
        return True
    except OSError:
        pass
    try:
        socket.inet_pton(socket.AF_INET6, host.partition("%")[0])
        return True
    except OSError:
        return False


def is_numeric_port(port: object) -> bool:
    """Whether ``port`` needs no service lookup (None, an int, or digits)."""
    if port is None or isinstance(port, int):
        return True
    if isinstance(port, bytes):
        return port.isdigit() or port == b""
    if isinstance(port, str):
        return port.isdigit() or port == ""
    return False


def numeric_getaddrinfo(
    host: Any, port: Any, family: int, type: int, proto: int, flags: int
) -> list[AddrInfo] | None:
    """The answer for a numeric host and port, computed at once; None if a lookup is needed."""
    if not is_numeric_host(host) or not is_numeric_port(port):
        return None
    if port == "" or port == b"":
        port = None
    infos: list[AddrInfo] = socket.getaddrinfo(  # type: ignore[assignment]
        host, port, family, type, proto, flags | _NUMERIC_FLAGS
    )
    return infos


async def getaddrinfo(
    loop: LoopCore,
    host: Any,
    port: Any,
    *,
    family: int = 0,
    type: int = 0,
    proto: int = 0,
    flags: int = 0,
) -> list[AddrInfo]:
    """``socket.getaddrinfo``, numeric answers inline, the rest in the executor."""
    infos = numeric_getaddrinfo(host, port, family, type, proto, flags)
    if infos is not None:
        return infos
    resolved: list[AddrInfo] = await loop.run_in_executor(
        None,
        socket.getaddrinfo,  # type: ignore[arg-type]
        host,
        port,
        family,
        type,
        proto,
        flags,
    )
    return resolved


async def getnameinfo(
    loop: LoopCore, sockaddr: tuple[str, int] | tuple[str, int, int, int], flags: int = 0
) -> tuple[str, str]:
    """``socket.getnameinfo``; when only numeric output is asked for, inline."""
    if flags & _NUMERIC_NAME_FLAGS == _NUMERIC_NAME_FLAGS:
        return socket.getnameinfo(sockaddr, flags)
    return await loop.run_in_executor(None, socket.getnameinfo, sockaddr, flags)


async def ensure_resolved(
    loop: LoopCore,
    address: Any,
    *,
    family: int = 0,
    type: int = socket.SOCK_STREAM,
    proto: int = 0,
    flags: int = 0,
) -> list[AddrInfo]:
    """Resolve a ``(host, port, ...)`` address through ``loop.getaddrinfo``.

    The loop's method is called (not this module's function) so that a
    subclass or a test can override resolution, as asyncio allows.
    """
    host, port = address[:2]
    infos = numeric_getaddrinfo(host, port, family, type, proto, flags)
    if infos is not None:
        if len(address) > 2 and infos and infos[0][0] == socket.AF_INET6:
            # Keep the caller's flowinfo and scope id.
            flowinfo_scope = tuple(address[2:4])
            infos = [(*info[:4], (*info[4][:2], *flowinfo_scope)) for info in infos]
        return infos
    return list(
        await as_asyncio_loop(loop).getaddrinfo(
            host, port, family=family, type=type, proto=proto, flags=flags
        )
    )
