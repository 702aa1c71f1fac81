"""The inspection client: ask an observed process for ``ps``, ``top``, ``dump`` or ``metrics``.

``request(pid, name)`` finds the process's socket (``corun.observe.protocol``
says where), checks that the directory and the socket belong to the
process's user, sends the request and returns the answer's body. Every
failure is an ``InspectError`` with a one-line message meant for a terminal,
and a ``reason`` for programs.

Finding the socket of another process: its directory depends on that
process's ``XDG_RUNTIME_DIR`` and effective uid, both read from ``/proc``
(its environment is readable by its own user and root, who are the only
ones the server answers anyway). The candidates, first found wins: the
directory its own environment gives, the one ours gives (same user only),
and ``/tmp/corun-<uid>``. A socket made before the process started is
skipped: an earlier process with the same pid left it when it was killed.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from typing import Final, Literal

from corun.observe.protocol import (
    MAX_ANSWER,
    MAX_HEADER,
    UnsafeDirectoryError,
    check_directory,
    default_directory,
    socket_path,
)

#: Seconds for one whole request: connect, send, and the answer.
DEFAULT_TIMEOUT: Final = 10.0

Reason = Literal[
    "no-process",
    "not-observed",
    "permission",
    "unsafe",
    "timeout",
    "connection",
    "malformed",
    "server",
]

#: Seconds of doubt in a process's start time from ``/proc`` (the boot time there
#: is whole seconds): a socket older than the start by more is not the process's.
_START_SLACK: Final = 1.0

_ENABLE_HINT: Final = (
    "start it with `corun run --observe ...` or with CORUN_OBSERVE=1 "
    "(if it was, it runs a loop that is not corun's, and says so on its stderr)"
)


class InspectError(Exception):
    """An inspection request failed; ``str()`` is one line for the user.

    Attributes:
        reason: what failed: ``"no-process"`` (no such pid), ``"not-observed"``
            (the process serves no socket), ``"permission"`` (the system or
            the server refused us), ``"unsafe"`` (the socket's directory or
            file is not the process user's alone), ``"timeout"``,
            ``"connection"`` (the connection failed midway), ``"malformed"``
            (the answer breaks the wire format) or
            ``"server"`` (the server answered an error line).
    """

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason


def request(pid: int, name: str, *, timeout: float = DEFAULT_TIMEOUT) -> str:
    """Send request ``name`` to process ``pid`` and return the answer's body.

    Args:
        pid: the observed process.
        name: one of ``protocol.REQUESTS``.
        timeout: seconds for the whole exchange.

    Raises:
        InspectError: with a one-line message; see its ``reason``.
    """
    deadline = time.monotonic() + timeout
    path = find_socket(pid)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            _set_timeout(sock, deadline)
            sock.connect(path)
            _set_timeout(sock, deadline)
            try:
                sock.sendall(name.encode("ascii") + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed at once, as for a refused peer: its answer may be waiting
            header = _read_header(sock, deadline)
            length = _parse_header(header)
            body = _read_exactly(sock, length, deadline)
        except TimeoutError:
            raise InspectError(
                "timeout", f"process {pid} did not answer {name!r} within {timeout:g} s"
            ) from None
        except (ConnectionRefusedError, FileNotFoundError):
            raise InspectError(
                "not-observed",
                f"process {pid} does not serve its socket {path} (left stale); " + _ENABLE_HINT,
            ) from None
        except PermissionError:
            raise _permission_error(pid) from None
        except OSError as exc:
            raise InspectError(
                "connection", f"talking to process {pid} failed: {exc.strerror or exc}"
            ) from None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InspectError("malformed", f"process {pid} answered text that is not UTF-8") from None


def find_socket(pid: int) -> str:
    """The path of process ``pid``'s inspection socket, checked to be its user's.

    Raises:
        InspectError: no such process, no socket (observation is off), no
            permission to look, or a directory or socket not the user's alone.
    """
    if pid <= 0:
        raise InspectError("no-process", f"no process {pid}")
    uid = _process_uid(pid)
    if os.geteuid() not in (uid, 0):
        # The server would refuse us, and its directory is closed to us anyway.
        raise _permission_error(pid, uid)
    denied = False
    started = _process_start(pid)
    for directory in _candidate_directories(pid, uid):
        path = socket_path(directory, pid)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        except PermissionError:
            denied = True
            continue
        except OSError:
            continue
        if started is not None and info.st_mtime < started - _START_SLACK:
            # Left by an earlier process that had this pid and was killed before
            # it could unlink it: not this process's socket.
            continue
        try:
            check_directory(directory, owner=uid)
        except UnsafeDirectoryError as exc:
            raise InspectError("unsafe", str(exc)) from None
        except OSError:
            continue
        if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid:
            raise InspectError(
                "unsafe", f"{path} is not a socket of uid {uid}; refusing to talk to it"
            )
        return path
    if denied:
        raise _permission_error(pid, uid)
    raise InspectError(
        "not-observed", f"process {pid} does not run with observation on; " + _ENABLE_HINT
    )


def _process_uid(pid: int) -> int:
    """The effective uid of ``pid`` (``InspectError`` if there is no such process)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Uid:"):
                    return int(line.split()[2])
    except (FileNotFoundError, ProcessLookupError):
        pass
    except OSError as exc:
        raise InspectError("permission", f"cannot read process {pid}: {exc.strerror}") from None
    raise InspectError("no-process", f"no process {pid}")


def _process_start(pid: int) -> float | None:
    """When ``pid`` started, in ``time.time()`` seconds; None if ``/proc`` will not say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read(4096).rpartition(b")")[2].split()
        with open("/proc/stat", "rb") as file:
            boot = next(int(line.split()[1]) for line in file if line.startswith(b"btime "))
        # starttime is field 22 of stat(5); fields[0] is field 3, the state.
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _candidate_directories(pid: int, uid: int) -> list[str]:
    found: list[str] = []
    environ = _process_environ(pid)
    if environ is not None:
        found.append(default_directory(environ, uid))
    if uid == os.geteuid():
        found.append(default_directory(os.environ, uid))
    found.append(default_directory({}, uid))
    return list(dict.fromkeys(found))


def _process_environ(pid: int) -> dict[str, str] | None:
    """The environment ``pid`` started with, or None when we may not read it."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            raw = file.read(1 << 20)
    except OSError:
        return None
    environ: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            environ[os.fsdecode(key)] = os.fsdecode(value)
    return environ


def _permission_error(pid: int, uid: int | None = None) -> InspectError:
    owner = f" (it runs as uid {uid})" if uid is not None else ""
    return InspectError(
        "permission",
        f"permission denied: process {pid}{owner} may be inspected only by its own user or root",
    )


def _set_timeout(sock: socket.socket, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    sock.settimeout(remaining)


def _read_header(sock: socket.socket, deadline: float) -> bytes:
    """The answer's first line, without its newline; the body's first bytes stay unread."""
    header = bytearray()
    while not header.endswith(b"\n"):
        if len(header) >= MAX_HEADER:
            raise InspectError("malformed", f"answer header longer than {MAX_HEADER} bytes")
        _set_timeout(sock, deadline)
        # Peek, then take no more than the header: the body is read by size.
        peeked = sock.recv(MAX_HEADER - len(header), socket.MSG_PEEK)
        if not peeked:
            raise InspectError("malformed", "the connection closed before an answer")
        end = peeked.find(b"\n")
        header += sock.recv(len(peeked) if end < 0 else end + 1)
    return bytes(header[:-1])


def _parse_header(header: bytes) -> int:
    """The body length of an ``ok <n>`` header; ``InspectError`` for an error or garbage."""
    text = header.decode("utf-8", "replace")
    kind, _, rest = text.partition(" ")
    if kind == "error":
        if rest.startswith("permission denied"):
            raise InspectError("permission", rest)
        raise InspectError("server", rest or "unspecified error")
    if kind == "ok" and rest.isdigit() and rest.isascii():
        length = int(rest)
        if length <= MAX_ANSWER:
            return length
        raise InspectError("malformed", f"answer of {length} bytes, over the {MAX_ANSWER} limit")
    raise InspectError("malformed", f"unexpected answer header {text[:60]!r}")


def _read_exactly(sock: socket.socket, length: int, deadline: float) -> bytes:
    body = bytearray()
    while len(body) < length:
        _set_timeout(sock, deadline)
        chunk = sock.recv(min(length - len(body), 1 << 20))
        if not chunk:
            raise InspectError(
                "malformed", f"answer truncated: {len(body)} of {length} bytes arrived"
            )
        body += chunk
    _set_timeout(sock, deadline)
    if sock.recv(1):
        raise InspectError("malformed", f"answer longer than its header's {length} bytes")
    return bytes(body)
