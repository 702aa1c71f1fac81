"""``DatagramTransport``: a UDP or Unix datagram socket, driven by epoll.

Datagrams are never merged or split: each ``sendto()`` is one datagram, each
``recvfrom()`` hands one to ``datagram_received``. Errors on a datagram
socket (ICMP port unreachable shows up as ECONNREFUSED on the next call) are
not fatal: they go to the protocol's ``error_received`` and the transport
stays open, as asyncio specifies.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from corun.runtime._constants import LOG_THRESHOLD_FOR_CONNLOST_WRITES, logger
from corun.runtime.engine.futures import Future
from corun.runtime.engine.loop_core import LoopCore
from corun.runtime.transports.base import SocketTransport, connect_soon, read_buffer


class DatagramTransport(SocketTransport, asyncio.DatagramTransport):
    """The transport of a datagram socket."""

    def __init__(
        self,
        loop: LoopCore,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        address: Any = None,
        waiter: Future | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(loop, sock, extra)
        self._address = address  # the connected peer, if any
        self._protocol = protocol
        connect_soon(loop, self, protocol, self._start_reading, waiter)

    def __repr__(self) -> str:
        state = "closed" if self._sock is None else "closing" if self._closing else "open"
        return f"<{type(self).__name__} {state} fd={self._sock_fd} bufsize={self._buffer_size}>"

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Deliver events to ``protocol`` from now on."""
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The protocol events go to."""
        return self._protocol  # type: ignore[no-any-return]

    def _start_reading(self) -> None:
        if not self._closing:
            self._loop._add_reader(self._sock_fd, self._read_ready)

    def _read_ready(self) -> None:
        if self._conn_lost:
            return
        sock = self._sock
        assert sock is not None
        view = read_buffer(self._loop)  # see there why
        try:
            nbytes, addr = sock.recvfrom_into(view)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._protocol.error_received(exc)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal read error on datagram transport")
        else:
            self._protocol.datagram_received(view[:nbytes].tobytes(), addr)

    def sendto(self, data: Any, addr: Any = None) -> None:
        """Send one datagram to ``addr`` (or to the connected peer)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"data argument must be a bytes-like object, not {type(data).__name__!r}"
            )
        if self._address:
            if addr not in (None, self._address):
                raise ValueError(f"Invalid address: must be None or {self._address}")
            addr = self._address
        if self._conn_lost and self._address:
            if self._conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("socket.send() raised exception.")
            self._conn_lost += 1
            return
        if not self._buffer:
            sock = self._sock
            assert sock is not None
            sent = self._send_now(sock, data, addr)
            if sent is not False:
                return  # sent, or failed and reported
            self._loop._add_writer(self._sock_fd, self._sendto_ready)
        chunk = bytes(data)  # the caller may reuse its buffer
        self._buffer.append((chunk, addr))
        self._buffer_size += len(chunk)
        self._maybe_pause_protocol()

    def _send_now(self, sock: socket.socket, data: Any, addr: Any) -> bool | None:
        """Send one datagram: True if sent, False if it would block, None if it failed.

        An OSError goes to the protocol's ``error_received`` and the transport
        stays open, as asyncio's does; anything else is fatal.
        """
        try:
            if self._extra["peername"]:
                sock.send(data)
            else:
                sock.sendto(data, addr)
            return True
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as exc:
            self._protocol.error_received(exc)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Fatal write error on datagram transport")
        return None

    def _sendto_ready(self) -> None:
        sock = self._sock
        assert sock is not None
        while self._buffer:
            data, addr = self._buffer.popleft()
            self._buffer_size -= len(data)
            sent = self._send_now(sock, data, addr)
            if sent is None:
                return
            if not sent:
                self._buffer.appendleft((data, addr))  # try again later
                self._buffer_size += len(data)
                break
        self._maybe_resume_protocol()
        if not self._buffer:
            self._loop._remove_writer(self._sock_fd)
            if self._closing:
                self._call_connection_lost(None)
