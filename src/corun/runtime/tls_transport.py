"""``SSLTransport``: the transport an application protocol sees on a TLS connection.

It holds no state of its own beyond a closed flag: every call is forwarded to
the ``TLSProtocol`` (``tls.py``) that owns the session, which encrypts,
buffers and flow-controls. Keeping it thin means there is one place that
knows the TLS state machine.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corun.runtime.tls import TLSProtocol

try:
    from asyncio.constants import _SendfileMode

    _SENDFILE_FALLBACK: Any = _SendfileMode.FALLBACK
except ImportError:  # pragma: no cover - every supported Python has it
    _SENDFILE_FALLBACK = None


class SSLTransport(asyncio.Transport):
    """The transport an application protocol sees on a TLS connection.

    Every call is forwarded to the ``TLSProtocol`` that owns it. Named like
    asyncio's ``_SSLProtocolTransport``: code (CPython's own tests among it)
    recognises TLS transports by "SSL" in the class name.
    """

    # start_tls() works on top of it (TLS in TLS).
    _start_tls_compatible: bool = True

    def __init__(self, loop: asyncio.AbstractEventLoop, ssl_protocol: TLSProtocol) -> None:
        super().__init__(None)
        # loop.sendfile() reads the file and writes it through TLS. (Set here:
        # mypyc cannot compile a non-literal class attribute default.)
        self._sendfile_compatible: Any = _SENDFILE_FALLBACK
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
