"""TLS for corun: ``TLSProtocol`` and ``SSLTransport``, on ``ssl.SSLObject`` over memory BIOs.

Where it sits
=============

TLS is a protocol stacked on a plain stream transport, and a transport for
the application's protocol::

    app protocol   <-- data_received / buffer_updated, eof_received, connection_lost
         |  write, close, pause_reading, ...
    SSLTransport   (what the application holds; every call goes to TLSProtocol)
         |
    TLSProtocol    (the stream transport's protocol: a BufferedProtocol)
         |  write(ciphertext), pause_reading, close, _force_close(exc)
    StreamTransport (bytes on a socket) -- or any transport with that API

``create_connection(ssl=...)``, ``create_server(ssl=...)`` and
``connect_accepted_socket`` build this stack around a new stream transport;
``start_tls`` builds it around a transport that is already carrying plaintext
(STARTTLS), by swapping the transport's protocol.

Some facts about ``ssl.SSLObject``
==================================

* ``context.wrap_bio(incoming, outgoing)`` runs OpenSSL against two
  ``ssl.MemoryBIO`` byte queues and never touches a socket. Whatever OpenSSL
  wants to send (handshake messages, records, alerts, close_notify) appears in
  ``outgoing``; whatever we write into ``incoming`` is what it reads.
* Every call may both consume ``incoming`` and produce ``outgoing``; any call
  may raise ``SSLWantReadError``, which means "feed me more ciphertext", never
  "the socket is not ready". ``SSLWantWriteError`` cannot happen: a memory BIO
  is never full. (asyncio and uvloop also treat ``SSLSyscallError`` as "want
  more"; so do we.)
* ``write()`` of n bytes encrypts all n at once into ``outgoing``.
* ``read(n)`` returns at most one record (16 KiB of plaintext), but first
  allocates n bytes and then shrinks them; ``read(n, buffer)`` decrypts into a
  buffer we own and allocates nothing.
* ``read()`` returns ``b""`` (or 0 into a buffer) once the peer's close_notify
  was read and we have not sent ours; after we sent ours it raises
  ``SSLZeroReturnError`` instead. Both mean "the peer closed".
* ``unwrap()`` sends our close_notify (``SSLWantReadError`` until the peer's
  arrives), but OpenSSL 3 fails it with ``APPLICATION_DATA_AFTER_CLOSE_NOTIFY``
  whenever an application record is still unread in ``incoming``, which is the
  normal case when we close while the peer is still sending.
* After a failed handshake, ``outgoing`` holds the alert that tells the peer why.

What follows for corun
======================

The state of the TLS session (``_state``)::

    UNWRAPPED --connection_made--> DO_HANDSHAKE --ok--> WRAPPED --close()/peer's
        ^                               |                  |      close_notify/EOF
        |                          error/timeout           v
        +------- connection_lost -------+--------------- FLUSHING
        |                                                  | backlog encrypted
        |                                                  v
        +--------- connection_lost ------ (transport.close) SHUTDOWN

and, separately, where the application protocol is in its own life cycle
(``_app_state``: INIT -> CON_MADE -> [EOF] -> CON_LOST). ``start_tls`` starts
in CON_MADE, since the plain transport already called ``connection_made``.

Outgoing. ``SSLTransport.write`` encrypts at once when the session is up and
the stream transport is not paused; otherwise the plaintext waits in
``_write_backlog`` (bytes by reference, mutable buffers copied). The backlog is
encrypted in slices of at most ``ENCRYPT_CHUNK`` bytes, and only while the
stream transport takes data: the transport calls our ``pause_writing``
synchronously from inside ``write`` when its buffer passes its high-water
mark, which stops the loop, and ``resume_writing`` restarts it. ``outgoing``
is drained into ``transport.write`` after every SSLObject call, so ciphertext
only ever waits in the stream transport's buffer, which its own flow control
bounds. The application is paused when the plaintext backlog passes our
high-water mark (512 KiB, asyncio's value), and resumed at the low-water mark.

Incoming. The stream transport ``recv_into``'s our buffer; ``buffer_updated``
copies the ciphertext into ``incoming`` and advances the state machine. In
WRAPPED, a batch of records is decrypted into that same receive buffer (its
ciphertext is in ``incoming`` by then) and handed to the application as one
``bytes`` in one ``data_received`` call, or decrypted straight into a
``BufferedProtocol``'s buffer. ``pause_reading`` on the TLS transport pauses
the stream transport at once (in WRAPPED), and ciphertext left in
``incoming`` pauses it too once it passes 256 KiB.

Closing. ``close()`` moves WRAPPED to FLUSHING and starts the shutdown timer
(``ssl_shutdown_timeout``, 30 s). FLUSHING encrypts the backlog as the stream
transport drains; then SHUTDOWN sends our close_notify. From then on
application records from the peer are read and discarded (the application
closed; a plain transport would drop them too) until the peer's close_notify
arrives, and only then is ``unwrap()`` called again: this avoids OpenSSL's
``APPLICATION_DATA_AFTER_CLOSE_NOTIFY``, which asyncio reports as a fatal
``SSLError`` when a peer was still sending. Then the stream transport is
closed (it flushes its buffer first) and the application gets
``eof_received()`` and ``connection_lost(None)``. The timer runs until the
stream transport is gone, since its close() flushes its buffer first, which
a peer that does not read holds up forever; it is started too when the peer
began the shutdown (close_notify or EOF). If it fires first, the stream
transport is force-closed and the application gets
``connection_lost(TimeoutError('SSL shutdown timed out'))`` (as asyncio does
since CPython 3.14). The peer's
close_notify in WRAPPED is an EOF: ``eof_received()``, then the same
shutdown; TLS has no half-close here, as in asyncio, so returning True from
``eof_received`` only logs a warning.

Unexpected EOF (TCP FIN without close_notify). During the handshake the
waiter fails with ``ConnectionResetError``. Afterwards we do what asyncio does
rather than report a truncation: the application first receives the data
still buffered (when it resumes reading, if it paused), the backlog is pushed
to the transport, and it gets ``eof_received()`` and ``connection_lost(None)``;
no close_notify is sent. Resets arrive as ``connection_lost(exc)`` from the
stream transport; corrupt records fail with ``ssl.SSLError`` and
force-close the connection with it.

Rejected alternatives
=====================

* ``ssl.SSLSocket`` on a non-blocking socket (asyncio's pre-3.7
  ``_SelectorSslTransport``): the TLS layer then owns the fd, so reading,
  writing, buffering and flow control exist twice, once per transport kind,
  and drift (asyncio removed it for exactly that). It cannot do STARTTLS on
  an existing transport, nor TLS inside TLS.
* Reusing or subclassing ``asyncio.sslproto.SSLProtocol``: private API that was
  rewritten in 3.11; and three of its behaviours are what we change above:
  it encrypts the whole backlog into ``outgoing`` even while the transport is
  paused (ciphertext and plaintext both in memory), it calls ``unwrap()`` on
  every record in SHUTDOWN (the error above), and its pause/resume check uses
  ``>= high`` so ``set_write_buffer_limits(0)`` flip-flops.
* ``read(256 KiB)`` per record, joined into one batch (asyncio): each call
  allocates 256 KiB for a 16 KiB record and shrinks it. glibc serves such
  requests with a fresh ``mmap`` (page faults on every record) unless something
  larger was freed earlier and raised its dynamic threshold; in a 64 MiB
  loopback benchmark that made the same code 30-40% slower depending on the
  allocation history. Decrypting into our own buffer costs one allocation per
  batch, whatever the history.
* One read buffer shared by all TLS protocols of a loop (the contents are dead
  once ``buffer_updated`` returns): it saves memory but needs a per-loop
  attribute or a thread-local on the hot path. ``bytearray(n)`` is
  ``calloc``'d, so an idle connection's untouched 256 KiB costs address space,
  not resident memory.

Deliberate differences from asyncio
===================================

Each is where asyncio's behaviour is a bug; ``tests/test_tls.py`` runs the
same tests against asyncio's ``sslproto`` and skips it on exactly these.

* A connection closed or lost during the handshake fails the waiter
  (``ConnectionAbortedError`` / ``ConnectionResetError``); asyncio resolves it
  with None and hands out a dead transport.
* A ``start_tls`` application protocol hears ``connection_lost`` on every
  failure (asyncio: only on some).
* Data arriving after ``close()`` is not delivered; records the peer still
  sends are not a fatal ``SSLError`` (see Closing).
* The alert of a failed handshake reaches the peer, which then reports why.
* One large ``write()`` pauses the writer; asyncio first moves all of it into
  the stream transport's buffer.
* ``set_write_buffer_limits(0)`` pauses once and resumes once.
* A ``BufferedProtocol`` may return a ``bytearray`` from ``get_buffer`` (asyncio
  reads into a copy of it); an empty buffer is an error, not an EOF.
* ``writelines`` checks its items' types; non-contiguous memoryviews are sent.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import warnings
from asyncio.constants import _SendfileMode
from typing import Any, Final, Protocol

from corun.runtime._constants import (
    LOG_THRESHOLD_FOR_CONNLOST_WRITES,
    READ_BUFFER_SIZE,
    SSL_HANDSHAKE_TIMEOUT,
    SSL_SHUTDOWN_TIMEOUT,
    logger,
)
from corun.runtime.transports.base import report_fatal_error, tell_writing, water_marks

#: Most plaintext one SSLObject.write() call encrypts.
ENCRYPT_CHUNK: Final = 256 * 1024
#: Default high-water marks in KiB (asyncio's): write = plaintext backlog,
#: read = ciphertext waiting in the incoming BIO.
FLOW_CONTROL_HIGH_WATER_SSL_WRITE: Final = 512
FLOW_CONTROL_HIGH_WATER_SSL_READ: Final = 256

#: "Feed me more ciphertext" (see the module docstring).
_SSL_AGAIN: Final = (ssl.SSLWantReadError, ssl.SSLSyscallError)

# Session states (see the diagram in the module docstring).
UNWRAPPED: Final = 0
DO_HANDSHAKE: Final = 1
WRAPPED: Final = 2
FLUSHING: Final = 3
SHUTDOWN: Final = 4
_STATE_NAMES: Final = ("UNWRAPPED", "DO_HANDSHAKE", "WRAPPED", "FLUSHING", "SHUTDOWN")
# (from, to) pairs allowed besides "anything -> UNWRAPPED".
_TRANSITIONS: Final = frozenset(
    ((UNWRAPPED, DO_HANDSHAKE), (DO_HANDSHAKE, WRAPPED), (WRAPPED, FLUSHING), (FLUSHING, SHUTDOWN))
)

# Application protocol states: INIT -cm-> CON_MADE [-er-> EOF] -cl-> CON_LOST.
APP_INIT: Final = 0
APP_CON_MADE: Final = 1
APP_EOF: Final = 2
APP_CON_LOST: Final = 3


class Waiter(Protocol):
    """What ``TLSProtocol`` needs of its waiter: an asyncio or a corun future."""

    def done(self) -> bool: ...

    def set_result(self, result: Any, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


def default_client_context(server_hostname: str | None) -> ssl.SSLContext:
    """The context for ``ssl=True``: verification on, host names checked only if given."""
    context = ssl.create_default_context()
    if not server_hostname:
        context.check_hostname = False
    return context


def _check_timeout(name: str, timeout: Any, default: float) -> Any:
    """``timeout``, or ``default`` for None; checked as asyncio does.

    The value is kept as given: the messages show what the caller passed
    ("got 0", "longer than 1 seconds").
    """
    if timeout is None:
        return default
    if timeout <= 0:
        raise ValueError(f"{name} should be a positive number, got {timeout}")
    return timeout


class TLSProtocol(asyncio.BufferedProtocol):
    """TLS over a stream transport: the transport's protocol, the app's transport.

    Contract (the same as asyncio's ``SSLProtocol``):

    * Install it as the protocol of a plain stream transport, which calls
      ``connection_made(transport)``, then ``get_buffer``/``buffer_updated``
      (or ``data_received``), ``eof_received``, ``pause_writing``/
      ``resume_writing`` and finally ``connection_lost(exc)``.
    * The transport must offer ``write``, ``pause_reading``,
      ``resume_reading``, ``close``, ``abort``, ``is_closing``,
      ``get_extra_info`` and, preferably, ``_force_close(exc)`` (close at once
      and report ``exc`` to ``connection_lost``; ``abort()`` is used without it).
      ``pause_writing`` must come synchronously from inside ``write``.
    * On connection_made the handshake starts, bounded by
      ``ssl_handshake_timeout``. On success ``app_protocol.connection_made``
      is called with ``_app_transport`` (unless ``call_connection_made`` is
      False, as for ``start_tls``), then ``waiter`` gets None. On failure
      ``waiter`` gets the exception (``ssl.SSLError``, ``ConnectionResetError``
      for an EOF, ``ConnectionAbortedError`` for the timeout) and the stream
      transport is force-closed; the application protocol hears nothing unless
      it was already connected (``start_tls``), in which case it gets
      ``connection_lost``.
    * Afterwards the application protocol sees the usual protocol calls, and
      ``connection_lost`` exactly once, after ``connection_made``.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app_protocol: asyncio.BaseProtocol,
        sslcontext: ssl.SSLContext | None,
        waiter: Waiter | None,
        server_side: bool = False,
        server_hostname: str | None = None,
        call_connection_made: bool = True,
        ssl_handshake_timeout: float | None = None,
        ssl_shutdown_timeout: float | None = None,
    ) -> None:
        """Set up the TLS session; nothing happens until ``connection_made``.

        Args:
            loop: the event loop.
            app_protocol: the application's protocol (plain or buffered).
            sslcontext: the TLS settings; None means ``ssl=True`` (clients only).
            waiter: completed once the handshake succeeded or failed; may be None.
            server_side: perform the server's side of the handshake.
            server_hostname: the name to send (SNI) and verify; clients only,
                ignored on the server side as in asyncio.
            call_connection_made: call ``app_protocol.connection_made`` after
                the handshake (False for ``start_tls``).
            ssl_handshake_timeout: seconds; default 60.
            ssl_shutdown_timeout: seconds; default 30.

        Raises:
            ValueError: a timeout is not positive, or a server has no context.
        """
        # Any: the caller's own objects (see _check_timeout).
        self._ssl_handshake_timeout: Any = _check_timeout(
            "ssl_handshake_timeout", ssl_handshake_timeout, SSL_HANDSHAKE_TIMEOUT
        )
        self._ssl_shutdown_timeout: Any = _check_timeout(
            "ssl_shutdown_timeout", ssl_shutdown_timeout, SSL_SHUTDOWN_TIMEOUT
        )
        if not sslcontext:
            if server_side:
                raise ValueError("Server side SSL needs a valid SSLContext")
            sslcontext = default_client_context(server_hostname)
        self._loop: asyncio.AbstractEventLoop = loop
        self._server_side: bool = server_side
        self._server_hostname: str | None = (
            server_hostname if server_hostname and not server_side else None
        )
        # Both None once the connection is lost: an application that keeps
        # its transport must not keep the TLS session and its context alive.
        self._sslcontext: ssl.SSLContext | None = sslcontext
        # TLS details for get_extra_info(); the rest arrive with the handshake.
        self._extra: dict[str, Any] = {"sslcontext": sslcontext}
        self._waiter: Waiter | None = waiter

        # Invariant: _transport is the stream transport from connection_made()
        # to connection_lost(), None before and after. _app_transport is the
        # SSLTransport until connection_lost() (then None, which breaks the
        # protocol <-> transport cycle); typed Any so factories can return it
        # as an asyncio.Transport.
        self._transport: asyncio.Transport | None = None
        self._app_transport: Any = None
        self._app_transport_created: bool = False
        self._app_protocol: Any = None
        self._app_protocol_is_buffer: bool = False
        self._set_app_protocol(app_protocol)

        self._incoming: ssl.MemoryBIO = ssl.MemoryBIO()
        self._outgoing: ssl.MemoryBIO = ssl.MemoryBIO()
        self._sslobj: ssl.SSLObject | None = sslcontext.wrap_bio(
            self._incoming,
            self._outgoing,
            server_side=server_side,
            server_hostname=self._server_hostname,
        )
        # Invariant: _state changes only through _set_state() (the diagram);
        # _app_state only moves forward. _closing_app is True once the
        # application closed or aborted, or the peer's close_notify started the
        # shutdown: nothing is delivered to the application after that.
        # _eof_received: the stream transport reported EOF.
        self._state: int = UNWRAPPED
        self._app_state: int = APP_INIT if call_connection_made else APP_CON_MADE
        self._closing_app: bool = False
        self._eof_received: bool = False
        self._shutdown_done: bool = False
        self._conn_lost: int = 0

        self._handshake_start_time: float | None = None
        self._handshake_timeout_handle: asyncio.TimerHandle | None = None
        self._shutdown_timeout_handle: asyncio.TimerHandle | None = None
        self._resume_reading_handle: asyncio.Handle | None = None

        # Invariant: _write_buffer_size == sum(len(d) for d in _write_backlog);
        # each entry is bytes or a memoryview of bytes (format "B"), never a
        # buffer the application may still mutate. Between calls, _outgoing is
        # empty: ciphertext waits only in the stream transport's buffer.
        self._write_backlog: collections.deque[bytes | memoryview] = collections.deque()
        self._write_buffer_size: int = 0

        # Flow control, four flags: the stream transport paused our writing
        # (_ssl_writing_paused), we paused its reading (_ssl_reading_paused),
        # we paused the application's writing (_app_writing_paused), the
        # application paused its reading (_app_reading_paused).
        self._ssl_writing_paused: bool = False
        self._ssl_reading_paused: bool = False
        self._app_writing_paused: bool = False
        self._app_reading_paused: bool = False
        self._incoming_high_water: int = 0
        self._incoming_low_water: int = 0
        self._set_read_buffer_limits()
        self._outgoing_high_water: int = 0
        self._outgoing_low_water: int = 0
        self._set_write_buffer_limits()

        self._read_buffer: bytearray = bytearray(READ_BUFFER_SIZE)
        self._read_view: memoryview = memoryview(self._read_buffer)
        self._get_app_transport()

    def __repr__(self) -> str:
        side = "server" if self._server_side else "client"
        return f"<{type(self).__name__} {side} {self._state_name()}>"

    def _state_name(self) -> str:
        return _STATE_NAMES[self._state]

    def _session(self) -> ssl.SSLObject:
        """The SSLObject; only called in states that have a connection."""
        sslobj = self._sslobj
        assert sslobj is not None, "the TLS session was released"
        return sslobj

    def _set_app_protocol(self, app_protocol: asyncio.BaseProtocol) -> None:
        self._app_protocol = app_protocol
        self._app_protocol_is_buffer = isinstance(app_protocol, asyncio.BufferedProtocol)

    def _get_app_transport(self) -> asyncio.Transport:
        """The transport the application protocol sees (created once)."""
        if self._app_transport is None:
            if self._app_transport_created:
                raise RuntimeError("Creating _SSLProtocolTransport twice")
            self._app_transport = SSLTransport(self._loop, self)
            self._app_transport_created = True
        return self._app_transport  # type: ignore[no-any-return]

    def _set_state(self, new_state: int) -> None:
        if new_state != UNWRAPPED and (self._state, new_state) not in _TRANSITIONS:
            raise RuntimeError(
                f"cannot switch state from {_STATE_NAMES[self._state]} to {_STATE_NAMES[new_state]}"
            )
        self._state = new_state

    def _check_invariants(self) -> None:
        """Assert the invariants written above the fields (tests, debugging)."""
        assert self._write_buffer_size == sum(len(d) for d in self._write_backlog)
        assert self._outgoing.pending == 0, self._outgoing.pending
        if self._state != UNWRAPPED:
            assert self._transport is not None
        if self._state == WRAPPED:
            assert not self._closing_app
        if self._app_transport is not None and not self._app_transport._closed:
            assert not self._closing_app

    def _wakeup_waiter(self, exc: BaseException | None = None) -> None:
        waiter = self._waiter
        if waiter is None:
            return
        self._waiter = None
        if not waiter.done():
            if exc is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(exc)

    def _get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in self._extra:
            return self._extra[name]
        transport = self._transport
        if transport is not None:
            return transport.get_extra_info(name, default)
        return default

    # --- the stream transport's calls ---------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the handshake over ``transport``."""
        self._transport = transport  # type: ignore[assignment]
        self._start_handshake()

    def connection_lost(self, exc: BaseException | None) -> None:
        """The stream transport is closed: tell the application, drop everything."""
        self._write_backlog.clear()
        self._write_buffer_size = 0
        self._outgoing.read()
        self._conn_lost += 1
        app_transport = self._app_transport
        if app_transport is not None:
            app_transport._closed = True
        if self._app_state == APP_CON_MADE or self._app_state == APP_EOF:
            self._app_state = APP_CON_LOST
            self._loop.call_soon(self._app_protocol.connection_lost, exc)
        self._set_state(UNWRAPPED)
        # Break the cycles through the transports and the application, and
        # let the TLS session go: the application may keep its transport
        # (CPython 3.14's test_create_connection_memory_leak expects the
        # context freed once the connection is closed, without a collection).
        self._transport = None
        self._app_transport = None
        self._app_protocol = None
        self._sslobj = None
        self._sslcontext = None
        self._extra.pop("sslcontext", None)
        self._extra.pop("ssl_object", None)
        if self._waiter is not None:
            # Lost before the handshake completed.
            self._wakeup_waiter(
                exc
                if exc is not None
                else ConnectionResetError("Connection lost during the TLS handshake")
            )
        self._cancel_timers()

    def _cancel_timers(self) -> None:
        handle: asyncio.Handle | None = self._handshake_timeout_handle
        if handle is not None:
            self._handshake_timeout_handle = None
            handle.cancel()
        handle = self._shutdown_timeout_handle
        if handle is not None:
            self._shutdown_timeout_handle = None
            handle.cancel()
        handle = self._resume_reading_handle
        if handle is not None:
            self._resume_reading_handle = None
            handle.cancel()

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the stream transport receives ciphertext (always the same buffer)."""
        return self._read_view

    def buffer_updated(self, nbytes: int) -> None:
        """``nbytes`` of ciphertext arrived in the buffer from ``get_buffer``."""
        self._incoming.write(self._read_view[:nbytes])
        self._process_incoming()

    def data_received(self, data: bytes) -> None:
        """Ciphertext arrived (from transports that ignore BufferedProtocol)."""
        self._incoming.write(data)
        self._process_incoming()

    def _process_incoming(self) -> None:
        state = self._state
        if state == DO_HANDSHAKE:
            self._do_handshake()
        elif state == WRAPPED:
            self._do_read()
        elif state == FLUSHING:
            # Closing: the application gets no more data, but records must
            # still be read (renegotiation, the peer's close_notify).
            try:
                self._discard_incoming()
                self._do_flush()
            except Exception as exc:
                self._fatal_error(exc, "Fatal error on SSL protocol")
        elif state == SHUTDOWN:
            self._do_shutdown()
            self._control_ssl_reading()
        # UNWRAPPED: aborted or failed; what still arrives is dropped.

    def eof_received(self) -> bool | None:
        """The peer closed its side of the TCP connection.

        Returns:
            True while the application has not yet read what arrived before
            the EOF (reading paused), so the transport stays open; None
            otherwise, and the transport closes itself.
        """
        self._eof_received = True
        try:
            if self._loop.get_debug():
                logger.debug("%r received EOF", self)
            state = self._state
            if state == DO_HANDSHAKE:
                self._on_handshake_complete(ConnectionResetError())
            elif state == WRAPPED:
                self._set_state(FLUSHING)
                if self._app_reading_paused:
                    return True  # _on_resume_reading continues
                self._do_flush()
            elif state == FLUSHING:
                self._do_flush()
            elif state == SHUTDOWN:
                self._do_shutdown()
        except Exception:
            transport = self._transport
            if transport is not None:
                transport.close()
            raise
        return None

    def pause_writing(self) -> None:
        """The stream transport's buffer is full: stop encrypting."""
        self._ssl_writing_paused = True

    def resume_writing(self) -> None:
        """The stream transport's buffer drained: encrypt the backlog."""
        if not self._ssl_writing_paused:
            return
        self._ssl_writing_paused = False
        try:
            state = self._state
            if state == WRAPPED:
                self._flush_backlog(False)
                self._control_app_writing()
            elif state == FLUSHING:
                self._do_flush()
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on SSL protocol")

    # --- handshake -----------------------------------------------------------

    def _start_handshake(self) -> None:
        if self._loop.get_debug():
            logger.debug("%r starts SSL handshake", self)
            self._handshake_start_time = self._loop.time()
        self._set_state(DO_HANDSHAKE)
        self._handshake_timeout_handle = self._loop.call_later(
            self._ssl_handshake_timeout, self._check_handshake_timeout
        )
        self._do_handshake()

    def _check_handshake_timeout(self) -> None:
        self._handshake_timeout_handle = None
        if self._state != DO_HANDSHAKE:
            return
        exc = ConnectionAbortedError(
            f"SSL handshake is taking longer than {self._ssl_handshake_timeout} "
            "seconds: aborting the connection"
        )
        self._set_state(UNWRAPPED)
        self._fatal_error(exc)
        self._wakeup_waiter(exc)

    def _do_handshake(self) -> None:
        try:
            self._session().do_handshake()
        except _SSL_AGAIN:
            self._send_outgoing()
            return
        except ssl.SSLError as exc:
            self._on_handshake_complete(exc)
            return
        self._on_handshake_complete(None)

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        handle = self._handshake_timeout_handle
        if handle is not None:
            self._handshake_timeout_handle = None
            handle.cancel()
        sslobj = self._session()
        exc = handshake_exc
        peercert: Any = None
        if exc is None:
            try:
                peercert = sslobj.getpeercert()
            except Exception as error:
                exc = error
        if exc is not None:
            self._set_state(UNWRAPPED)
            # The alert saying why (bad certificate...), if the socket takes it
            # before the force-close below; asyncio drops it.
            self._send_outgoing()
            if isinstance(exc, ssl.CertificateError):
                message = "SSL handshake failed on verifying the certificate"
            else:
                message = "SSL handshake failed"
            self._fatal_error(exc, message)
            self._wakeup_waiter(exc)
            return
        self._set_state(WRAPPED)
        # TLS 1.3 clients finish with a message of their own.
        self._send_outgoing()
        start = self._handshake_start_time
        if start is not None and self._loop.get_debug():
            logger.debug("%r: SSL handshake took %.1f ms", self, (self._loop.time() - start) * 1e3)
        self._extra.update(
            peercert=peercert,
            cipher=sslobj.cipher(),
            compression=sslobj.compression(),
            ssl_object=sslobj,
        )
        if self._app_state == APP_INIT:
            self._app_state = APP_CON_MADE
            self._app_protocol.connection_made(self._get_app_transport())
        self._wakeup_waiter()
        # Application data may have come with the last handshake message, and
        # the application may have written in connection_made().
        self._do_read()

    # --- shutdown ------------------------------------------------------------

    def _start_shutdown(self) -> None:
        state = self._state
        if state in (FLUSHING, SHUTDOWN, UNWRAPPED):
            return
        self._closing_app = True
        app_transport = self._app_transport
        if app_transport is not None:
            app_transport._closed = True
        if state == DO_HANDSHAKE:
            self._wakeup_waiter(
                ConnectionAbortedError("SSL connection closed during the handshake")
            )
            self._abort()
            return
        self._set_state(FLUSHING)
        self._shutdown_timeout_handle = self._loop.call_later(
            self._ssl_shutdown_timeout, self._check_shutdown_timeout
        )
        self._do_flush()
        # The application may have paused reading; the close_notify must get in.
        self._control_ssl_reading()

    def _check_shutdown_timeout(self) -> None:
        self._shutdown_timeout_handle = None
        if self._state == FLUSHING or self._state == SHUTDOWN:
            transport = self._transport
            if transport is not None:
                _force_close(transport, TimeoutError("SSL shutdown timed out"))

    def _do_flush(self) -> None:
        """In FLUSHING: encrypt the backlog, then go on to SHUTDOWN."""
        if self._eof_received:
            # The peer is gone. It may still read: hand the stream transport
            # everything (its close() flushes), deliver what arrived before
            # the EOF, and skip close_notify, as asyncio does.
            if not self._closing_app:
                try:
                    self._deliver()
                except Exception as exc:
                    self._fatal_error(exc, "Fatal error on SSL protocol")
                    return
            self._flush_backlog(True)
        else:
            self._flush_backlog(False)
            if self._write_backlog:
                return  # resume_writing() continues
        if self._state == FLUSHING:
            self._set_state(SHUTDOWN)
            self._do_shutdown()

    def _do_shutdown(self) -> None:
        """In SHUTDOWN: send close_notify, wait for the peer's, close the transport."""
        if self._shutdown_done:
            return
        if self._eof_received:
            self._call_eof_received()
            self._on_shutdown_complete(None)
            return
        try:
            # unwrap() fails on unread application records; drop them first.
            self._discard_incoming()
            self._session().unwrap()
        except _SSL_AGAIN:
            self._send_outgoing()  # our close_notify; wait for the peer's
            return
        except ssl.SSLError as exc:
            self._on_shutdown_complete(exc)
            return
        self._send_outgoing()
        self._call_eof_received()
        self._on_shutdown_complete(None)

    def _discard_incoming(self) -> bool:
        """Read and drop application data; True once the peer's close_notify was read."""
        read_into: Any = self._session().read
        view = self._read_view
        size = len(view)
        try:
            while True:
                if not read_into(size, view):
                    return True
        except _SSL_AGAIN:
            return False
        except ssl.SSLZeroReturnError:
            return True

    def _on_shutdown_complete(self, shutdown_exc: BaseException | None) -> None:
        self._shutdown_done = True
        if shutdown_exc is not None:
            handle = self._shutdown_timeout_handle
            if handle is not None:
                self._shutdown_timeout_handle = None
                handle.cancel()
            self._fatal_error(shutdown_exc)
            return
        if self._shutdown_timeout_handle is None:
            # The peer started the shutdown (close_notify or EOF): the
            # stream transport's close() below still has to flush.
            self._shutdown_timeout_handle = self._loop.call_later(
                self._ssl_shutdown_timeout, self._check_shutdown_timeout
            )
        transport = self._transport
        if transport is not None:
            # Not synchronously: we may be inside the transport's read callback.
            self._loop.call_soon(transport.close)

    def _abort(self, exc: BaseException | None = None) -> None:
        self._closing_app = True
        self._set_state(UNWRAPPED)
        transport = self._transport
        if transport is not None:
            if exc is None:
                transport.abort()
            else:
                _force_close(transport, exc)

    # --- outgoing: application -> peer ---------------------------------------

    def _write_appdata(self, list_of_data: Any) -> None:
        state = self._state
        if self._closing_app or state in (FLUSHING, SHUTDOWN, UNWRAPPED):
            if self._conn_lost >= LOG_THRESHOLD_FOR_CONNLOST_WRITES:
                logger.warning("SSL connection is closed")
            self._conn_lost += 1
            return
        try:
            for data in list_of_data:
                if not isinstance(data, (bytes, bytearray, memoryview)):
                    raise TypeError(
                        f"data: expecting a bytes-like instance, got {type(data).__name__}"
                    )
                if type(data) is memoryview and not data.c_contiguous:
                    data = data.tobytes()  # OpenSSL needs one contiguous buffer
                if self._state != WRAPPED or self._write_backlog or self._ssl_writing_paused:
                    self._append_backlog(data)
                else:
                    self._encrypt(data)
            self._control_app_writing()
        except TypeError:
            raise
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on SSL protocol")

    def _append_backlog(self, data: bytes | bytearray | memoryview) -> None:
        if type(data) is not bytes:
            # The caller may reuse a mutable buffer once write() returns.
            data = bytes(data)
        if data:
            self._write_backlog.append(data)
            self._write_buffer_size += len(data)

    def _encrypt(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` and send it; keep the rest if the transport pauses us."""
        size = data.nbytes if type(data) is memoryview else len(data)
        if size <= ENCRYPT_CHUNK:
            try:
                self._session().write(data)
            except _SSL_AGAIN:  # a renegotiation waits for the peer
                self._append_backlog(data)
            self._send_outgoing()
            return
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")  # contiguous: see _write_appdata
        offset = 0
        write = self._session().write
        try:
            while offset < size:
                if self._ssl_writing_paused:
                    break
                offset += write(view[offset : offset + ENCRYPT_CHUNK])
                self._send_outgoing()  # may pause us
        except _SSL_AGAIN:
            pass
        if offset < size:
            # A view of immutable bytes is kept as is; anything else is copied.
            rest: bytes | memoryview = view[offset:]
            if type(data) is not bytes:
                rest = bytes(rest)
            self._write_backlog.append(rest)
            self._write_buffer_size += len(rest)

    def _flush_backlog(self, force: bool) -> None:
        """Encrypt the backlog while the transport takes it (``force``: regardless)."""
        backlog = self._write_backlog
        write = self._session().write
        try:
            while backlog and (force or not self._ssl_writing_paused):
                data = backlog[0]
                size = len(data)
                if size > ENCRYPT_CHUNK:
                    count = write(memoryview(data)[:ENCRYPT_CHUNK])
                else:
                    count = write(data)
                if count >= size:
                    backlog.popleft()
                else:
                    backlog[0] = memoryview(data)[count:]
                self._write_buffer_size -= count
                self._send_outgoing()
        except _SSL_AGAIN:
            # A renegotiation waits for the peer; _do_read() retries.
            self._send_outgoing()

    def _send_outgoing(self) -> None:
        """Hand what OpenSSL produced to the stream transport."""
        if not self._outgoing.pending:
            return
        data = self._outgoing.read()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def _control_app_writing(self) -> None:
        size = self._write_buffer_size
        if size > self._outgoing_high_water and not self._app_writing_paused:
            self._app_writing_paused = True
            tell_writing(self._loop, self._app_protocol, True, self._app_transport, self)
        elif size <= self._outgoing_low_water and self._app_writing_paused:
            self._app_writing_paused = False
            tell_writing(self._loop, self._app_protocol, False, self._app_transport, self)

    def _get_write_buffer_size(self) -> int:
        return self._write_buffer_size + self._outgoing.pending

    def _set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._outgoing_high_water, self._outgoing_low_water = water_marks(
            high, low, FLOW_CONTROL_HIGH_WATER_SSL_WRITE
        )

    # --- incoming: peer -> application ---------------------------------------

    def _do_read(self) -> None:
        """In WRAPPED: deliver decrypted data, then send what waited."""
        try:
            self._deliver()
            if self._state == WRAPPED:
                if self._write_backlog:
                    self._flush_backlog(False)
                    self._control_app_writing()
                else:
                    # Records that reading produced (TLS 1.3 key updates).
                    self._send_outgoing()
            self._control_ssl_reading()
        except Exception as exc:
            self._fatal_error(exc, "Fatal error on SSL protocol")

    def _deliver(self) -> None:
        """Hand decrypted data to the application, unless it paused or closed."""
        if self._app_reading_paused or self._closing_app:
            return
        if self._app_protocol_is_buffer:
            self._deliver_buffered()
        else:
            self._deliver_copied()

    def _deliver_copied(self) -> None:
        # Decrypt a batch into our receive buffer (its ciphertext already went
        # into the incoming BIO) and make one bytes object of it: one
        # data_received() call and one allocation per batch. read(n) would
        # allocate n bytes per record and shrink them to the record's size,
        # which glibc serves with a fresh mmap each time.
        read_into: Any = self._session().read
        view = self._read_view
        size = len(view)
        closed = False
        while True:
            offset = 0
            more = True
            try:
                while offset < size:
                    count = read_into(size - offset, view[offset:])
                    if not count:
                        closed = True
                        break
                    offset += count
            except _SSL_AGAIN:
                more = False
            except ssl.SSLZeroReturnError:
                closed = True
            if offset:
                self._app_protocol.data_received(bytes(view[:offset]))
            if closed:
                self._on_close_notify()
                return
            if not more or self._app_reading_paused or self._closing_app:
                return
            if self._app_protocol_is_buffer:
                self._deliver_buffered()  # set_protocol() switched mid-batch
                return

    def _deliver_buffered(self) -> None:
        sslobj = self._session()
        # SSLObject.read(n, buffer) returns an int, which typeshed does not say.
        read_into: Any = sslobj.read
        closed = False
        while True:
            protocol = self._app_protocol
            if self._app_reading_paused or self._closing_app or protocol is None:
                return
            if not self._app_protocol_is_buffer:
                # set_protocol() switched to a plain protocol mid-batch.
                self._deliver_copied()
                return
            hint = self._incoming.pending + sslobj.pending()
            buf = protocol.get_buffer(hint if hint > 0 else -1)
            view = memoryview(buf).cast("B")
            wants = len(view)
            offset = 0
            more = True
            try:
                if not wants:
                    raise RuntimeError("get_buffer() returned an empty buffer")
                while offset < wants:
                    count = read_into(wants - offset, view[offset:])
                    if not count:
                        closed = True
                        break
                    offset += count
            except _SSL_AGAIN:
                more = False
            except ssl.SSLZeroReturnError:
                closed = True
            finally:
                # Released before buffer_updated(), which may resize the
                # buffer, and on errors, which would keep it exported.
                view.release()
            if offset:
                protocol.buffer_updated(offset)
            if closed:
                self._on_close_notify()
                return
            if not more:
                return

    def _on_close_notify(self) -> None:
        # The peer's close_notify: an EOF for the application, then our shutdown.
        self._call_eof_received()
        self._start_shutdown()

    def _call_eof_received(self) -> None:
        if self._app_state != APP_CON_MADE:
            return
        self._app_state = APP_EOF
        try:
            keep_open = self._app_protocol.eof_received()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            self._fatal_error(exc, "Error calling eof_received()")
            return
        if keep_open:
            logger.warning("returning true from eof_received() has no effect when using ssl")

    def _pause_reading(self) -> None:
        self._app_reading_paused = True
        self._control_ssl_reading()

    def _resume_reading(self) -> None:
        if not self._app_reading_paused:
            return
        self._app_reading_paused = False
        self._control_ssl_reading()
        if self._resume_reading_handle is None and self._state != UNWRAPPED:
            # Data may be waiting already; deliver it from the loop, not from
            # inside resume_reading(), as every transport does.
            self._resume_reading_handle = self._loop.call_soon(self._on_resume_reading)

    def _on_resume_reading(self) -> None:
        self._resume_reading_handle = None
        if self._app_reading_paused:
            return
        state = self._state
        if state == WRAPPED:
            self._do_read()
        elif state == FLUSHING and self._eof_received:
            # eof_received() kept the transport open for the application to
            # read first; the shutdown that follows closes it.
            try:
                self._do_flush()
            except Exception as exc:
                self._fatal_error(exc, "Fatal error on SSL protocol")

    def _control_ssl_reading(self) -> None:
        """Pause or resume the stream transport's reading."""
        transport = self._transport
        if transport is None:
            return
        pending = self._incoming.pending
        if pending >= self._incoming_high_water or (
            self._app_reading_paused and self._state == WRAPPED
        ):
            if not self._ssl_reading_paused:
                self._ssl_reading_paused = True
                transport.pause_reading()
        elif self._ssl_reading_paused and pending <= self._incoming_low_water:
            self._ssl_reading_paused = False
            transport.resume_reading()

    def _set_read_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._incoming_high_water, self._incoming_low_water = water_marks(
            high, low, FLOW_CONTROL_HIGH_WATER_SSL_READ
        )

    def _get_read_buffer_size(self) -> int:
        return self._incoming.pending

    # --- errors --------------------------------------------------------------

    def _fatal_error(self, exc: BaseException, message: str = "Fatal error on transport") -> None:
        transport = self._transport
        if transport is not None:
            _force_close(transport, exc)
        # ssl.SSLError is an OSError too: the peer's doing or the network's.
        report_fatal_error(
            self._loop, exc, message, transport, self, expected=isinstance(exc, OSError)
        )


class SSLTransport(asyncio.Transport):
    """The transport an application protocol sees on a TLS connection.

    Every call is forwarded to the ``TLSProtocol`` that owns it. Named like
    asyncio's ``_SSLProtocolTransport``: code (CPython's own tests among it)
    recognises TLS transports by "SSL" in the class name.
    """

    # start_tls() works on top of it (TLS in TLS).
    _start_tls_compatible: bool = True
    # loop.sendfile() reads the file and writes it through TLS.
    _sendfile_compatible: Any = _SendfileMode.FALLBACK

    def __init__(self, loop: asyncio.AbstractEventLoop, ssl_protocol: TLSProtocol) -> None:
        super().__init__(None)
        self._loop: asyncio.AbstractEventLoop = loop
        self._ssl_protocol: TLSProtocol = ssl_protocol
        # Invariant: True once close() or abort() was called or the
        # connection was lost; never goes back to False.
        self._closed: bool = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {state} {self._ssl_protocol._state_name()}>"

    def __del__(self) -> None:
        if not self._closed:
            message = f"unclosed transport {self!r}"
            self._closed = True
            warnings.warn(message, ResourceWarning, stacklevel=2)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """TLS details (``sslcontext``, ``ssl_object``, ``peercert``, ``cipher``,
        ``compression``), else whatever the stream transport knows
        (``socket``, ``peername``, ``sockname``...)."""
        return self._ssl_protocol._get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Deliver events to ``protocol`` from now on."""
        self._ssl_protocol._set_app_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The application protocol."""
        return self._ssl_protocol._app_protocol  # type: ignore[no-any-return]

    def is_closing(self) -> bool:
        """Whether the transport is closed or closing."""
        return self._closed

    def close(self) -> None:
        """Send what is buffered, exchange close_notify, then close the connection.

        ``connection_lost(None)`` follows, or ``connection_lost(TimeoutError)``
        when the peer does not answer within ``ssl_shutdown_timeout``.
        """
        if not self._closed:
            self._closed = True
            self._ssl_protocol._start_shutdown()

    def abort(self) -> None:
        """Close at once, dropping buffered data; ``connection_lost(None)`` follows."""
        self._closed = True
        self._ssl_protocol._abort()

    def _force_close(self, exc: BaseException | None) -> None:
        # A fatal error in a protocol stacked on us (TLS in TLS).
        self._closed = True
        self._ssl_protocol._abort(exc)

    # --- reading ---

    def is_reading(self) -> bool:
        """Whether data is being delivered (False between pause and resume)."""
        return not self._ssl_protocol._app_reading_paused

    def pause_reading(self) -> None:
        """Stop delivering data (and stop reading the socket) until resume_reading()."""
        self._ssl_protocol._pause_reading()

    def resume_reading(self) -> None:
        """Deliver data again; what arrived meanwhile comes on the next iteration."""
        self._ssl_protocol._resume_reading()

    def set_read_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Water marks for ciphertext waiting to be decrypted (default 256 KiB high)."""
        self._ssl_protocol._set_read_buffer_limits(high, low)
        self._ssl_protocol._control_ssl_reading()

    def get_read_buffer_limits(self) -> tuple[int, int]:
        """``(low, high)`` for the ciphertext waiting to be decrypted."""
        protocol = self._ssl_protocol
        return (protocol._incoming_low_water, protocol._incoming_high_water)

    def get_read_buffer_size(self) -> int:
        """Ciphertext bytes received and not yet decrypted."""
        return self._ssl_protocol._get_read_buffer_size()

    # --- writing ---

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Water marks for plaintext waiting to be encrypted (default 512 KiB high)."""
        self._ssl_protocol._set_write_buffer_limits(high, low)
        self._ssl_protocol._control_app_writing()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """``(low, high)`` for the plaintext waiting to be encrypted."""
        protocol = self._ssl_protocol
        return (protocol._outgoing_low_water, protocol._outgoing_high_water)

    def get_write_buffer_size(self) -> int:
        """Plaintext bytes written and not yet encrypted."""
        return self._ssl_protocol._get_write_buffer_size()

    @property
    def _protocol_paused(self) -> bool:
        # Read by asyncio's sendfile fallback.
        return self._ssl_protocol._app_writing_paused

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt and send ``data``; it is buffered while the connection cannot take it."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data: expecting a bytes-like instance, got {type(data).__name__}")
        if not data:
            return
        self._ssl_protocol._write_appdata((data,))

    def writelines(self, list_of_data: Any) -> None:
        """Write each buffer of ``list_of_data`` in turn."""
        self._ssl_protocol._write_appdata(list_of_data)

    def write_eof(self) -> None:
        """Not supported: TLS connections close in both directions at once.

        Raises:
            NotImplementedError: always, as in asyncio.
        """
        raise NotImplementedError

    def can_write_eof(self) -> bool:
        """False: see ``write_eof``."""
        return False

    def _test__append_write_backlog(self, data: bytes) -> None:
        # For CPython's test_ssl, which fills the backlog behind our back.
        protocol = self._ssl_protocol
        protocol._write_backlog.append(data)
        protocol._write_buffer_size += len(data)


def _force_close(transport: asyncio.BaseTransport, exc: BaseException) -> None:
    """Close ``transport`` at once so that its ``connection_lost`` gets ``exc``."""
    force = getattr(transport, "_force_close", None)
    if force is not None:
        force(exc)
    else:
        transport.abort()  # type: ignore[attr-defined]


def _take_stream_reader_buffer(protocol: asyncio.BaseProtocol, tls_protocol: TLSProtocol) -> None:
    """Hand the TLS layer what a StreamReader already read (gh-142352).

    A client may send its ClientHello before the server's ``start_tls``; an
    ``asyncio.StreamReaderProtocol`` has then put it in its reader's buffer,
    where the handshake would never see it. asyncio (3.13.x and later) moves
    it into the TLS session; so do we, on every version. The reader's buffer
    is private to asyncio and has no public accessor, hence ``getattr``.
    """
    if not isinstance(protocol, asyncio.StreamReaderProtocol):
        return
    reader = getattr(protocol, "_stream_reader", None)
    buffer = getattr(reader, "_buffer", None)
    if isinstance(buffer, bytearray) and buffer:
        tls_protocol._incoming.write(buffer)
        buffer.clear()


async def start_tls(
    loop: asyncio.AbstractEventLoop,
    transport: asyncio.BaseTransport,
    protocol: asyncio.BaseProtocol,
    sslcontext: ssl.SSLContext,
    *,
    server_side: bool = False,
    server_hostname: str | None = None,
    ssl_handshake_timeout: float | None = None,
    ssl_shutdown_timeout: float | None = None,
) -> asyncio.Transport:
    """Upgrade ``transport`` to TLS; return the transport ``protocol`` should use now.

    ``loop.start_tls`` is this. The transport keeps its socket and buffers;
    its protocol becomes a ``TLSProtocol`` whose application protocol is
    ``protocol`` (which gets no second ``connection_made``). Reading is paused
    while the protocols are swapped, so no plaintext reaches the TLS layer.

    Raises:
        TypeError: ``sslcontext`` is not an ``ssl.SSLContext``, or ``transport``
            does not support TLS (it must have ``_start_tls_compatible = True``).
        ValueError: a timeout is not positive.
        ssl.SSLError: the handshake failed (``SSLCertVerificationError`` for
            a certificate or host name that does not verify).
        ConnectionResetError: the peer closed the connection during the handshake.
        ConnectionAbortedError: the handshake took longer than ``ssl_handshake_timeout``.

    On any failure, cancellation included, ``transport`` is closed.
    """
    if not isinstance(sslcontext, ssl.SSLContext):
        raise TypeError(
            f"sslcontext is expected to be an instance of ssl.SSLContext, got {sslcontext!r}"
        )
    if not getattr(transport, "_start_tls_compatible", False):
        raise TypeError(f"transport {transport!r} is not supported by start_tls()")
    waiter: asyncio.Future[Any] = loop.create_future()
    tls_protocol = TLSProtocol(
        loop,
        protocol,
        sslcontext,
        waiter,
        server_side,
        server_hostname,
        ssl_handshake_timeout=ssl_handshake_timeout,
        ssl_shutdown_timeout=ssl_shutdown_timeout,
        call_connection_made=False,
    )
    app_transport = tls_protocol._get_app_transport()
    plain: Any = transport
    # Paused first, so no data reaches the TLS protocol before connection_made().
    plain.pause_reading()
    if server_side:
        _take_stream_reader_buffer(protocol, tls_protocol)
    transport.set_protocol(tls_protocol)
    conmade_handle = loop.call_soon(tls_protocol.connection_made, transport)
    resume_handle = loop.call_soon(plain.resume_reading)
    try:
        await waiter
    except BaseException:
        transport.close()
        conmade_handle.cancel()
        resume_handle.cancel()
        # The exception's traceback holds this frame, which would hold the
        # waiter holding the exception: a cycle that keeps the transport
        # alive until a collection (gh-159049).
        del waiter
        raise
    return app_transport
