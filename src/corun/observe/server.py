"""The inspection server: a daemon thread answering ``corun ps/top/dump`` on a Unix socket.

The observed process runs one ``InspectServer``. Its thread accepts one
connection at a time on ``<dir>/<pid>.sock`` and answers one request per
connection, with the wire format and socket location of
``corun.observe.protocol``. The answers come from handler functions given by
the caller (``corun.observe`` passes its snapshot producers); this module
knows nothing of what they say.

Threat model, and what answers each threat
------------------------------------------
The socket lets a local process read the observed program's task names,
stacks and timings: useful to its owner, and a leak to anyone else.

* *Remote peers*: there is no TCP port, only a Unix socket.
* *Other local users*: the directory is 0700 and the socket 0600, so the
  kernel keeps them from connecting; should the modes be loosened anyway,
  the server asks the kernel who the peer is (``SO_PEERCRED``) and answers
  only its own uid and root; anyone else gets one refusal line.
* *A directory planted by another user* (``/tmp/corun-<uid>`` created first
  by someone else, or a symlink to a directory they control): ``start()``
  refuses it (``UnsafeDirectoryError``) and the program runs unobserved.
* *A client that misbehaves* (garbage, nothing, a huge line, a half-closed
  connection, one byte a second): the request line is bounded in size and
  must arrive within ``request_timeout`` of connecting; the answer must be
  taken within ``answer_timeout``. So no client holds the single serving
  thread for more than those two, and the next connection waits at most
  that long in the listen backlog. The thread survives every error of a
  connection, and of a handler (logged, answered with an error line).
* *The protocol itself*: read-only. A request is a name from a fixed table;
  nothing is evaluated and nothing in the process changes.

Each connection leaves one audit line on the ``corun`` logger: the peer's
pid and uid, the request, the outcome, the bytes sent and the time taken
(INFO; WARNING for a refused peer).

Why one connection at a time: the answers are snapshots the handlers make
quickly, and a pool of threads would let a burst of connections take that
many threads' worth of the GIL from the observed loop.
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
import os
import select
import socket
import stat
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from corun.observe import holds
from corun.observe.protocol import (
    ANSWER_TIMEOUT,
    MAX_ANSWER,
    MAX_HEADER,
    MAX_REQUEST,
    REQUEST_TIMEOUT,
    default_directory,
    ensure_directory,
    logger,
    name_this_thread,
    socket_path,
)

#: ``struct ucred`` of ``SO_PEERCRED``: pid, uid, gid.
_UCRED: Final = struct.Struct("3i")
#: Connections that may wait while one is served; more are refused by the kernel.
_BACKLOG: Final = 16
#: Seconds to wait for a stale socket's listener before deciding there is none.
_PROBE_TIMEOUT: Final = 0.5
#: Pause after accept() fails for lack of fds, so that the thread does not spin.
_ACCEPT_BACKOFF: Final = 0.1
#: How much of a strange request the audit line repeats.
_AUDIT_REQUEST_CHARS: Final = 40
#: Seconds of sending between two pauses for the loop (``pause``).
_PAUSE_EVERY: Final = 0.001
#: Buffers given to one sendmsg(): an answer in pieces goes out without
#: being joined first (joining 2 MB holds the GIL for milliseconds).
_SEND_BUFFERS: Final = 64

#: A handler's answer: text, or text in pieces (or their UTF-8, encoded by
#: the handler as it went), sent one after the other.
Answer: TypeAlias = str | list[str] | list[bytes]


class _Closing(Exception):
    """close() was called: drop the connection being served and stop."""


class _Refused(Exception):
    """The request gets an error answer: ``outcome`` for the audit, ``message`` for the peer."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


class _TooSlow(Exception):
    """The peer did not take the answer within the answer timeout."""


@dataclass(slots=True)
class _Audit:
    """What the audit line of one connection says; filled in as the exchange goes."""

    started: float
    peer_pid: int = -1
    peer_uid: int = -1
    request: str = "-"
    outcome: str = "?"
    sent: int = 0
    level: int = logging.INFO
    extra: list[str] = field(default_factory=list)


class InspectServer:
    """Serves the inspection requests of ``corun ps/top/dump`` from a daemon thread.

    ``start()`` creates (or checks) the socket directory, binds
    ``<directory>/<pid>.sock`` with mode 0600 and starts the thread;
    ``close()`` stops it and removes the socket. Call both from one thread.

    Args:
        handlers: request name -> a function returning the answer's text
            (JSON, or the Prometheus text for ``"metrics"``), whole or as a
            list of pieces, which are sent in order. They run on the
            server's thread, so they must be thread-safe, and should be quick:
            the next client waits meanwhile. One that raises, or returns an
            answer over ``max_answer`` bytes, makes an error answer and a log
            record; the server carries on. Names not in the map get an error.
        directory: the socket directory (default: ``protocol.default_directory()``).
        request_timeout: seconds a client has, from connecting, to send its request.
        answer_timeout: seconds a client has to take the answer.
        max_answer: largest answer body in bytes.
        turn: called before each call that gives up the GIL for a moment while
            a connection is served; ``turns_done`` when it is served;
            ``waiting`` before the thread waits for its next client. corun's
            observation passes ``Monitor.turn``, ``Monitor.turns_done`` and
            ``Monitor.wait_for_client``, so that a busy loop hands the GIL
            back at once (monitor.py).
        pause: called every millisecond of sending a big answer, to let the
            loop run meanwhile (corun's observation passes ``observer.pause``).
    """

    # Invariant: _thread is None until start(), then the serving thread for
    # good; _wake_w is the write end of the pipe that wakes that thread, -1
    # before start() and after close(). The thread owns the listener and the
    # pipe's read end and closes them as it ends. _bound is the (device,
    # inode) of the socket file this process bound, so that close() removes
    # that file and never one that another process put in its place.
    def __init__(
        self,
        handlers: Mapping[str, Callable[[], Answer]],
        *,
        directory: str | None = None,
        request_timeout: float = REQUEST_TIMEOUT,
        answer_timeout: float = ANSWER_TIMEOUT,
        max_answer: int = MAX_ANSWER,
        turn: Callable[[], None] = lambda: None,
        turns_done: Callable[[], None] = lambda: None,
        waiting: Callable[[], None] = lambda: None,
        pause: Callable[[], None] = lambda: None,
    ) -> None:
        if not request_timeout > 0 or not answer_timeout > 0:
            raise ValueError("request_timeout and answer_timeout must be > 0")
        if max_answer < 0:
            raise ValueError("max_answer must be >= 0")
        self._handlers: dict[str, Callable[[], Answer]] = dict(handlers)
        self._directory = directory
        self._request_timeout = request_timeout
        self._answer_timeout = answer_timeout
        self._max_answer = max_answer
        self._turn = turn
        self._turns_done = turns_done
        self._waiting = waiting
        self._pause = pause
        self._uid = os.geteuid()
        self._thread: threading.Thread | None = None
        self._wake_w = -1
        self._fds: frozenset[int] = frozenset()
        self._listener_fd = -1
        self._path: str | None = None
        self._bound: tuple[int, int] | None = None
        self._owner_pid = -1
        self._closed = False

    @property
    def path(self) -> str | None:
        """The socket's path once started, else None."""
        return self._path

    def start(self) -> str:
        """Bind the socket and start serving; returns the socket's path.

        A socket of the same name left by a dead process (one whose pid this
        process now has) is replaced.

        Raises:
            UnsafeDirectoryError: the directory is a symlink, someone else's,
                or open to group or others; nothing was created in it.
            OSError: the directory or socket could not be made, or a live
                process already serves the same path.
            RuntimeError: start() was called before.
        """
        if self._thread is not None or self._closed:
            raise RuntimeError("an InspectServer starts once")
        directory = self._directory if self._directory is not None else default_directory()
        ensure_directory(directory)
        path = socket_path(directory, os.getpid())
        _remove_stale(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._bound = _bind_private(listener, path, self._uid)
            listener.setblocking(False)
            listener.listen(_BACKLOG)
            wake_r, self._wake_w = os.pipe()
        except BaseException:
            listener.close()
            if self._bound is not None:
                _unlink_if_same(path, self._bound)
            raise
        self._path = path
        self._owner_pid = os.getpid()
        self._listener_fd = listener.fileno()
        self._fds = frozenset({self._listener_fd, wake_r, self._wake_w})
        self._thread = threading.Thread(
            target=self._serve, args=(listener, wake_r), name="corun-inspect", daemon=True
        )
        self._thread.start()
        return path

    def listener_fd(self) -> int:
        """The listening socket's fd while the server serves, else -1."""
        return -1 if self._closed else self._listener_fd

    def fds(self) -> frozenset[int]:
        """The file descriptors the server holds while it serves (its socket, its wake pipe)."""
        return frozenset() if self._closed else self._fds

    def close(self) -> None:
        """Stop serving and remove the socket file. Idempotent.

        A connection being served is dropped. Waits for the thread unless
        called from it (from a handler); a handler stuck for longer than the
        answer timeout is left behind (and logged), with the socket removed.
        In a forked child this only lets go of the inherited pipe: the socket
        is the parent's.
        """
        self._closed = True
        ours = os.getpid() == self._owner_pid
        if self._wake_w >= 0:
            if ours:
                # A byte, not only the close: a child forked meanwhile holds a
                # copy of this end, so the read end would not hang up. A child
                # writes nothing, lest it stop its parent's server.
                try:
                    os.write(self._wake_w, b"\0")
                except OSError:
                    pass
            os.close(self._wake_w)
            self._wake_w = -1
        thread = self._thread
        if not ours:
            return
        if thread is not None and thread is not threading.current_thread():
            thread.join(self._answer_timeout + 1.0)
            if thread.is_alive():
                logger.warning("inspect: the server thread did not stop (a handler is stuck)")
        if self._path is not None and self._bound is not None:
            _unlink_if_same(self._path, self._bound)
            self._bound = None

    def __enter__(self) -> InspectServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the thread

    def _serve(self, listener: socket.socket, wake_r: int) -> None:
        name_this_thread("corun-inspect")
        poller = select.poll()
        poller.register(listener, select.POLLIN)
        poller.register(wake_r, select.POLLIN)
        try:
            while True:
                self._waiting()
                ready = {fd for fd, _ in poller.poll()}
                if wake_r in ready:
                    return
                try:
                    self._serve_next(listener, wake_r)
                finally:
                    self._turns_done()
        except _Closing:
            return
        except Exception:
            # A bug here would otherwise end inspection silently.
            logger.exception("inspect: the server thread failed; inspection is off")
        finally:
            self._turns_done()  # the loops stop waiting for clients
            listener.close()
            os.close(wake_r)

    def _serve_next(self, listener: socket.socket, wake_r: int) -> None:
        """Accept a connection and answer it; ``_Closing`` if the server closes meanwhile."""
        try:
            self._turn()
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError as exc:
            # Out of fds (EMFILE, ENFILE) or buffers: the listener stays
            # readable, so back off instead of spinning on it.
            logger.warning("inspect: accept failed: %s", exc)
            if _wait_readable(wake_r, _ACCEPT_BACKOFF):
                raise _Closing from None
            return
        with conn:
            self._serve_connection(conn, wake_r)
            self._turn()  # for the close

    def _serve_connection(self, conn: socket.socket, wake_r: int) -> None:
        """Answer one connection and write its audit line; only ``_Closing`` escapes."""
        audit = _Audit(started=time.monotonic())
        holds.start()
        try:
            conn.setblocking(False)
            audit.peer_pid, audit.peer_uid, _ = _UCRED.unpack(
                conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            )
            self._exchange(conn, wake_r, audit)
        except _Closing:
            audit.extra.append("server closing")
            raise
        except _TooSlow:
            audit.extra.append("client too slow to take the answer")
        except OSError as exc:
            audit.extra.append(f"connection error: {exc.strerror or exc}")
        except Exception:
            logger.exception("inspect: serving a connection failed")
            audit.extra.append("server error")
        finally:
            outcome = ", ".join([audit.outcome, *audit.extra])
            measured = holds.stop()
            self._turn()  # a log handler may write
            logger.log(
                audit.level,
                "inspect: peer pid=%d uid=%d request=%s outcome=%s bytes=%d ms=%.1f held_ms=%.1f",
                audit.peer_pid,
                audit.peer_uid,
                audit.request,
                outcome,
                audit.sent,
                (time.monotonic() - audit.started) * 1000.0,
                measured.longest * 1000.0 if measured is not None else 0.0,
            )

    def _exchange(self, conn: socket.socket, wake_r: int, audit: _Audit) -> None:
        if audit.peer_uid not in (self._uid, 0):
            audit.level = logging.WARNING
            audit.outcome = "refused"
            message = f"permission denied: uid {audit.peer_uid} may not inspect this process"
            self._send(conn, wake_r, audit, [_error_line(message)])
            return
        try:
            name = self._read_request(conn, wake_r, audit)
            handler = self._handlers.get(name)
            if handler is None:
                known = ", ".join(sorted(self._handlers))
                raise _Refused("unknown request", f"unknown request {name!r}; known: {known}")
            # The loop has waited since the client came; it runs before the answer is made.
            self._pause()
            body = self._call(name, handler)
        except _Refused as refusal:
            audit.outcome = refusal.outcome
            self._send(conn, wake_r, audit, [_error_line(refusal.message)])
            return
        audit.outcome = "ok"
        self._send(conn, wake_r, audit, [b"ok %d\n" % sum(map(len, body)), *body])

    def _read_request(self, conn: socket.socket, wake_r: int, audit: _Audit) -> str:
        """The request name, read within the request timeout; ``_Refused`` otherwise."""
        deadline = audit.started + self._request_timeout
        line = bytearray()
        while b"\n" not in line and len(line) <= MAX_REQUEST:
            self._turn()
            if not _wait(conn, select.POLLIN, wake_r, deadline):
                audit.request = _shown(bytes(line))
                raise _Refused(
                    "timeout", f"no request line within {self._request_timeout:g} s; closing"
                )
            try:
                self._turn()
                # Never more than the limit allows: a flood stays in the kernel.
                chunk = conn.recv(MAX_REQUEST + 1 - len(line))
            except (BlockingIOError, InterruptedError):
                continue
            if not chunk:
                break  # the end of the stream ends the line
            line += chunk
        raw = bytes(line).split(b"\n", 1)[0]
        audit.request = _shown(raw)
        if len(raw) + 1 > MAX_REQUEST:
            raise _Refused("request too long", f"request line over {MAX_REQUEST} bytes")
        if not line:
            raise _Refused("empty request", "empty request")
        name = raw.strip()
        if not name or not name.isascii() or not name.decode("ascii").isprintable():
            raise _Refused("malformed request", "malformed request: expected a name and a newline")
        return name.decode("ascii")

    def _call(self, name: str, handler: Callable[[], Answer]) -> list[bytes]:
        try:
            answer = handler()
            pieces: list[str] | list[bytes]
            if isinstance(answer, str):
                pieces = [answer]
            elif isinstance(answer, list):
                pieces = answer
            else:
                raise TypeError(f"returned {type(answer).__name__}, not str")
            body: list[bytes] = []
            for piece in pieces:
                if isinstance(piece, str):
                    body.append(piece.encode("utf-8"))
                elif isinstance(piece, bytes):
                    body.append(piece)
                else:
                    raise TypeError(f"returned a piece of {type(piece).__name__}, not str or bytes")
        except Exception as exc:
            logger.exception("inspect: the %r handler failed", name)
            raise _Refused(
                "handler failed", f"the {name} handler failed: {type(exc).__name__}: {exc}"
            ) from None
        size = sum(map(len, body))
        if size > self._max_answer:
            raise _Refused(
                "answer too large",
                f"the {name} answer is {size} bytes, over the limit of {self._max_answer}",
            )
        return body

    def _send(self, conn: socket.socket, wake_r: int, audit: _Audit, parts: list[bytes]) -> None:
        """Send ``parts`` in order within the answer timeout; ``_TooSlow`` if the peer lags."""
        deadline = time.monotonic() + self._answer_timeout
        pending = deque(memoryview(part) for part in parts if part)
        since = time.monotonic()
        while pending:
            if time.monotonic() - since >= _PAUSE_EVERY:
                # A big answer goes out in many sends, each one a brief
                # release of the GIL that the loop cannot use: it gets the
                # GIL at a pause.
                self._pause()
                since = time.monotonic()
            self._turn()
            if not _wait(conn, select.POLLOUT, wake_r, deadline):
                raise _TooSlow
            buffers = list(itertools.islice(pending, _SEND_BUFFERS))
            try:
                self._turn()
                # MSG_NOSIGNAL: a peer gone must be an error, not SIGPIPE,
                # even in a program that restored SIGPIPE's default action.
                sent = conn.sendmsg(buffers, [], socket.MSG_NOSIGNAL)
            except (BlockingIOError, InterruptedError):
                continue
            audit.sent += sent
            while sent:
                first = pending[0]
                if len(first) > sent:
                    pending[0] = first[sent:]
                    break
                sent -= len(first)
                pending.popleft()


def _wait(conn: socket.socket, events: int, wake_r: int, deadline: float) -> bool:
    """Wait until ``conn`` is ready for ``events``: False at the deadline, ``_Closing`` on close()."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    poller = select.poll()
    poller.register(conn, events)
    poller.register(wake_r, select.POLLIN)
    ready = poller.poll(math.ceil(remaining * 1000))
    if any(fd == wake_r for fd, _ in ready):
        raise _Closing
    return bool(ready)


def _wait_readable(fd: int, timeout: float) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(math.ceil(timeout * 1000)))


def _error_line(message: str) -> bytes:
    """``error <message>\\n``: one line of ASCII, within ``MAX_HEADER``."""
    flat = " ".join(message.split())
    encoded = flat.encode("ascii", "backslashreplace")[: MAX_HEADER - len("error \n")]
    return b"error " + encoded + b"\n"


def _shown(raw: bytes) -> str:
    """A request as the audit line shows it: printable, and short."""
    text = repr(raw[:_AUDIT_REQUEST_CHARS])[2:-1]
    return text + "..." if len(raw) > _AUDIT_REQUEST_CHARS else text or "''"


def _remove_stale(path: str) -> None:
    """Remove the socket at ``path`` if no process listens on it any more.

    A socket named after this process's pid was left by a dead process that
    had the same pid. A live listener (another ``InspectServer`` in this
    process, or a process with this pid in another pid namespace sharing the
    directory) is left alone, and so is anything that is not a socket.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise FileExistsError(errno.EEXIST, "exists and is not a socket; not replacing it", path)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_TIMEOUT)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        pass
    except FileNotFoundError:
        return
    else:
        raise OSError(errno.EADDRINUSE, "a live process serves this socket", path)
    finally:
        probe.close()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _bind_private(listener: socket.socket, path: str, uid: int) -> tuple[int, int]:
    """Bind ``listener`` at ``path`` with mode 0600; returns the file's (device, inode)."""
    # The umask is process-wide: for the instant of bind() a file another
    # thread creates loses its group and other bits. 077 rather than 177
    # keeps the owner's, so a directory made meanwhile stays usable. With it
    # the socket is private from its first instant, before chmod() makes it
    # 0600, whatever the directory's state.
    previous = os.umask(0o077)
    try:
        listener.bind(path)
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    info = os.lstat(path)
    bound = (info.st_dev, info.st_ino)
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid or stat.S_IMODE(info.st_mode) != 0o600:
        _unlink_if_same(path, bound)
        raise PermissionError(
            errno.EPERM,
            f"the socket is not a 0600 socket of uid {uid} after bind "
            f"(mode {stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid})",
            path,
        )
    return bound


def _unlink_if_same(path: str, bound: tuple[int, int]) -> None:
    try:
        info = os.lstat(path)
        if (info.st_dev, info.st_ino) == bound:
            os.unlink(path)
    except FileNotFoundError:
        pass
