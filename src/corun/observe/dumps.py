"""The flight recorder written to a file: on demand, on SIGTERM, and on a crash.

The file is ``<pid>.flight.json`` in the inspection directory (see
``server.py``), the same JSON as ``corun dump PID --json``. SIGTERM is only
taken over where nobody else handles it (its handler is the default, which
ends the process): the recorder is written, then the default handler runs
again, so the process still ends as it would have. A crash is an exception
that reaches ``sys.excepthook``; the previous hook runs after the dump.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from types import FrameType, TracebackType
from typing import Any, Final

from corun.observe import answers
from corun.observe.monitor import MONITOR

_installed: list[bool] = []
DUMP_SUFFIX: Final = ".flight.json"


def write_dump(directory: str, reason: str) -> str:
    """Write every observed loop's flight recorder to ``directory``; return the path."""
    document = answers.dump(MONITOR.observers())
    document["reason"] = reason
    path = os.path.join(directory, f"{os.getpid()}{DUMP_SUFFIX}")
    temporary = f"{path}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(document, file)
    os.replace(temporary, path)
    return path


def install(directory: str, socket_path: str) -> None:
    """Dump on SIGTERM (where it is unhandled) and on an uncaught exception; once per process.

    ``socket_path`` is removed on SIGTERM too: the process ends without running
    ``atexit``, and a socket left behind would point ``corun ps`` at a dead process.
    """
    if _installed:
        return
    _installed.append(True)
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, SigtermDump(directory, socket_path))
    previous = sys.excepthook

    def excepthook(
        kind: type[BaseException], value: BaseException, traceback: TracebackType | None
    ) -> Any:
        if MONITOR.observers() and not isinstance(value, KeyboardInterrupt):
            try:
                path = write_dump(directory, f"crash: {kind.__name__}")
                print(f"corun: flight recorder written to {path}", file=sys.stderr)
            except Exception as exc:  # never hide the crash itself
                print(f"corun: could not write the flight recorder: {exc}", file=sys.stderr)
        return previous(kind, value, traceback)

    sys.excepthook = excepthook


class SigtermDump:
    """The SIGTERM handler: write the flight recorder, remove the socket, then end as before.

    A program that later sets its own handler replaces this one (and
    asyncio's ``remove_signal_handler`` puts back the default, not this).
    """

    def __init__(self, directory: str, socket_path: str) -> None:
        self.directory = directory
        self.socket_path = socket_path

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        try:
            write_dump(self.directory, "SIGTERM")
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
