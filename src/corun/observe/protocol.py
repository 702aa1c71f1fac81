"""The inspection protocol: where an observed process's socket lives, and what goes over it.

The observed process serves ``corun ps``, ``corun top`` and ``corun dump`` from
a daemon thread (``corun.observe.server``); the commands connect with
``corun.observe.client``. This module is the contract between the two.

Where the socket lives
----------------------
One Unix stream socket per process, named ``<pid>.sock``, in a directory of
the process's effective user:

* ``$XDG_RUNTIME_DIR/corun`` when ``XDG_RUNTIME_DIR`` is set, absolute, and a
  directory owned by that user (systemd makes it ``/run/user/<uid>``, mode
  0700, removed at logout);
* otherwise ``/tmp/corun-<uid>``. The literal ``/tmp`` rather than
  ``$TMPDIR``: the client computes the path of *another* process, whose
  ``TMPDIR`` it cannot know.

The directory must be a real directory (not a symlink), owned by the user,
with no group or other permission bits (0700); the server creates it so and
refuses to use one that is not (``UnsafeDirectoryError``), since whoever
controls the directory can swap the socket. The socket itself has mode 0600.
The client checks the same things before it connects, so that nobody but the
observed process's user can plant a socket that the client would believe.

Wire format (version 1)
-----------------------
One request, one answer, then the server closes the connection.

* Request: one line of ASCII, a request name ended by ``\\n`` (a final
  ``\\r`` and surrounding blanks are ignored; the end of the stream also ends
  the line). At most ``MAX_REQUEST`` bytes, newline included, sent within
  ``REQUEST_TIMEOUT`` seconds of connecting; otherwise the server answers an
  error and closes.
* Answer, success: the line ``ok <n>\\n``, where ``<n>`` is the body's length
  in bytes, then the body: ``<n>`` bytes of UTF-8, at most ``MAX_ANSWER``.
* Answer, failure: the line ``error <message>\\n`` and no body. A peer of
  another user (checked with ``SO_PEERCRED``: only the same uid, or root, may
  ask) gets ``error permission denied: ...`` before the server reads anything.

The requests, each answered with a body the observed process produces:

* ``ps``: JSON, the task tree and the loop's lag, utilisation and task counts;
* ``top``: JSON, cumulative per-task counters (``corun top`` takes deltas);
* ``dump``: JSON, the flight recorder's events and stalls;
* ``incidents``: the same, with only the cancellations, stalls and notes
  (``corun dump --stalls``);
* ``metrics``: the Prometheus text exposition format (version 0.0.4).

There is nothing else: no request takes arguments, none changes the process,
and nothing is evaluated. By hand::

    printf 'metrics\\n' | socat - UNIX-CONNECT:/run/user/1000/corun/4242.sock
    printf 'ps\\n' | nc -U /tmp/corun-1000/4242.sock

(the first line of the output is the ``ok <n>`` header).
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
from collections.abc import Mapping
from typing import Final

#: What observation logs (stalls, audit lines, parts switched off): a child of
#: the ``corun`` logger, with no handler of its own. A program that configured
#: logging gets these through its handlers; in one that configured none (or
#: only for its own loggers, as uvicorn does), Python's last-resort handler
#: prints the warnings, a stall among them, on stderr: a stall nobody sees is
#: no use. ``logging.getLogger("corun.observe").propagate = False`` silences them.
logger: Final = logging.getLogger("corun.observe")

#: The request names the observed process serves.
REQUESTS: Final = ("ps", "top", "dump", "incidents", "metrics")
#: Longest request line, in bytes, its newline included.
MAX_REQUEST: Final = 256
#: Largest answer body, in bytes; the server answers an error instead of a bigger one.
MAX_ANSWER: Final = 64 * 1024 * 1024
#: Longest answer header line (``ok <n>`` or ``error <message>``), newline included.
MAX_HEADER: Final = 1024
#: Seconds a client has, from connecting, to send its request line.
REQUEST_TIMEOUT: Final = 2.0
#: Seconds a client has to take the whole answer, once the server starts sending it.
ANSWER_TIMEOUT: Final = 5.0
#: Where the per-user directory goes when ``XDG_RUNTIME_DIR`` is of no use.
FALLBACK_PARENT: Final = "/tmp"

#: Permission bits that nobody but the owner may have on the socket's directory.
_NOT_OWNER_BITS: Final = 0o077


class UnsafeDirectoryError(OSError):
    """The socket directory is a symlink, not a directory, someone else's, or open to others."""


def default_directory(environ: Mapping[str, str] | None = None, uid: int | None = None) -> str:
    """The socket directory of a process of user ``uid`` with environment ``environ``.

    Args:
        environ: the process's environment (default: this process's).
        uid: the process's effective uid (default: this process's).

    Returns:
        ``$XDG_RUNTIME_DIR/corun`` if that variable names a directory owned by
        ``uid``, else ``/tmp/corun-<uid>``. Nothing is created.
    """
    environ = os.environ if environ is None else environ
    uid = os.geteuid() if uid is None else uid
    runtime_dir = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime_dir):
        try:
            info = os.lstat(runtime_dir)
        except OSError:
            pass
        else:
            if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
                return os.path.join(runtime_dir, "corun")
    return os.path.join(FALLBACK_PARENT, f"corun-{uid}")


def socket_path(directory: str, pid: int) -> str:
    """The socket of process ``pid`` in ``directory``."""
    return os.path.join(directory, f"{pid}.sock")


def check_directory(path: str, *, owner: int) -> None:
    """Raise ``UnsafeDirectoryError`` unless ``path`` is a private directory of ``owner``.

    Private: not a symlink, a directory, owned by ``owner``, and without any
    group or other permission bit.

    Raises:
        UnsafeDirectoryError: the directory is not private, with the reason.
        OSError: ``path`` cannot be examined (``FileNotFoundError`` among others).
    """
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafeDirectoryError(f"socket directory {path} is a symlink; refusing it")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeDirectoryError(f"socket directory {path} is not a directory; refusing it")
    if info.st_uid != owner:
        raise UnsafeDirectoryError(
            f"socket directory {path} is owned by uid {info.st_uid}, not {owner}; refusing it"
        )
    if info.st_mode & _NOT_OWNER_BITS:
        raise UnsafeDirectoryError(
            f"socket directory {path} has mode {stat.S_IMODE(info.st_mode):04o}, "
            "open to group or others (it must be 0700); refusing it"
        )


def ensure_directory(path: str) -> None:
    """Create ``path`` as a private directory of this process's user if missing, then check it.

    Only the last component is created: a missing parent is an error, so that
    a mistyped ``XDG_RUNTIME_DIR`` does not grow a tree.

    Raises:
        UnsafeDirectoryError: it exists but is not private (see ``check_directory``).
        OSError: it cannot be created.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_directory(path, owner=os.geteuid())


def name_this_thread(name: str) -> None:
    """Give the calling thread ``name`` in the OS too (``top -H``, ``ps -L``, ``/proc``).

    Python 3.11 names threads for itself only. On Linux, ``prctl(PR_SET_NAME)``
    names the calling thread (15 bytes at most), without opening a file: a
    thread that starts while the program opens its own fds must not take
    one. Elsewhere this does nothing.
    """
    try:
        # PyDLL: keeps the GIL (CDLL lets it go, and a loop of short steps would
        # keep the starting thread from it). The process itself: no file is opened.
        libc = ctypes.PyDLL(None)
        libc.prctl(_PR_SET_NAME, name.encode("ascii", "replace")[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


#: prctl's option that sets the calling thread's name (linux/prctl.h).
_PR_SET_NAME: Final = 15
