"""``recv`` and ``send`` for the stream transport: the C versions, or these.

The stream transport reads and writes through these two functions on every
request. The compiled build has them in C (``_sockio.c``, built by setup.py):
no keyword parsing, no memoryview slice to copy the bytes out, and no
release of the GIL around a call that cannot block. Without a compiler (or
with ``CORUN_PURE=1``) the Python versions below do the same through the
socket object; tests/runtime/test_sockio.py runs both.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any


def recv_py(sock: socket.socket, fd: int, buffer: memoryview) -> bytes:
    """Read what ``sock`` has, up to ``len(buffer)``, through ``buffer``; a copy of it.

    ``b""`` at the end of the stream; BlockingIOError when nothing is there.
    """
    return buffer[: sock.recv_into(buffer)].tobytes()


def send_py(sock: socket.socket, fd: int, data: Any) -> int:
    """Send what ``sock`` takes of ``data`` at once; the number of bytes sent."""
    return sock.send(data)


_Recv = Callable[[socket.socket, int, memoryview], bytes]
_Send = Callable[[socket.socket, int, Any], int]


def _native() -> tuple[_Recv, _Send] | None:
    try:
        from corun.runtime.transports import _sockio
    except ImportError:  # the pure-Python build
        return None
    return _sockio.recv, _sockio.send


recv, send = _native() or (recv_py, send_py)

#: Whether the C versions are in use.
NATIVE: bool = recv is not recv_py
