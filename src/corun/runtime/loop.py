"""``EventLoop``: corun's complete event loop.

``LoopCore`` (``engine/loop_core.py``, compiled) runs callbacks, timers and fd
readiness. This class adds ``asyncio.AbstractEventLoop`` as a second base,
which only an interpreted class may do, and the network and process half of
its API. That half lives in one module per concept, as functions whose first
parameter is the loop; assigned in the class body, each becomes a method, so
nothing here forwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from corun.runtime._constants import logger
from corun.runtime.engine.loop_core import LoopCore
from corun.runtime.net import connect, dns, sendfile, servers, sockets
from corun.runtime.transports import pipe, subprocess, tls

# The methods whose replacement on an instance turns a direct path off.
_SEAMS = frozenset({"call_soon", "time", "call_at"})

#: Called with every new EventLoop. The ``corun`` package registers the
#: ``CORUN_OBSERVE`` switch here: the runtime does not import what observes it.
LOOP_CREATED: list[Callable[[EventLoop], object]] = []


class EventLoop(LoopCore, asyncio.AbstractEventLoop):  # type: ignore[misc]
    """corun's event loop: a ready queue, a timer heap and epoll.

    Use it wherever an asyncio loop is expected: ``corun.run(main())``, or as
    asyncio's loop factory, ``asyncio.run(main(), loop_factory=corun.new_event_loop)``
    (``asyncio.Runner(loop_factory=...)`` on 3.11); ``corun.install()`` sets an
    event loop policy, which asyncio deprecates from 3.14 on.
    """

    def __init__(self) -> None:
        super().__init__()
        for hook in LOOP_CREATED:
            try:
                hook(self)
            except Exception:
                logger.exception("a loop-creation hook failed: %r", hook)

    # A seam replaced on the instance turns its direct path off, and its
    # removal turns it back on (see LoopCore._check_seams).

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _SEAMS:
            self._check_seams()

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)
        if name in _SEAMS:
            self._check_seams()

    # Sockets (net/sockets.py) and name resolution (net/dns.py). Where mypy
    # flags an assignment, typeshed's stub has overloads or generics for the
    # same arguments that these functions take.
    sock_recv = sockets.sock_recv
    sock_recv_into = sockets.sock_recv_into
    sock_recvfrom = sockets.sock_recvfrom
    sock_recvfrom_into = sockets.sock_recvfrom_into
    sock_sendall = sockets.sock_sendall
    sock_sendto = sockets.sock_sendto
    sock_connect = sockets.sock_connect
    sock_accept = sockets.sock_accept
    sock_sendfile = sockets.sock_sendfile
    getaddrinfo = dns.getaddrinfo  # type: ignore[assignment]
    getnameinfo = dns.getnameinfo

    # Connections and servers (net/connect.py, net/servers.py, net/sendfile.py).
    create_connection = connect.create_connection  # type: ignore[assignment]
    create_unix_connection = connect.create_unix_connection  # type: ignore[assignment]
    connect_accepted_socket = connect.connect_accepted_socket  # type: ignore[assignment]
    create_datagram_endpoint = connect.create_datagram_endpoint  # type: ignore[assignment]
    create_server = servers.create_server  # type: ignore[assignment]
    create_unix_server = servers.create_unix_server  # type: ignore[assignment]
    sendfile = sendfile.sendfile

    # Pipes, subprocesses and TLS (transports/).
    connect_read_pipe = pipe.connect_read_pipe
    connect_write_pipe = pipe.connect_write_pipe
    subprocess_exec = subprocess.subprocess_exec
    subprocess_shell = subprocess.subprocess_shell
    start_tls = tls.start_tls
