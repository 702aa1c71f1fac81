"""The ``corun ps``, ``corun top`` and ``corun dump`` subcommands: arguments and entry point.

``corun.cli`` registers them (``add_parsers``) and hands them the parsed
arguments (``main``). They ask the process through ``corun.observe.client``
and print with ``corun.observe.views``. Every failure is one line on stderr
and exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from corun.observe.client import InspectError, request

#: The subcommands this module serves.
COMMANDS: Final = ("ps", "top", "dump")
#: Rows ``corun top`` shows by default (the busiest groups, or tasks).
DEFAULT_ROWS: Final = 40

_T = TypeVar("_T")


def _positive(what: str) -> Callable[[str], int]:
    """An argparse type: a positive integer, called ``what`` in the error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{what} must be a positive integer, not {text!r}")
        return value

    return parse


def _interval(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0.05 <= seconds <= 3600:
        raise argparse.ArgumentTypeError(f"interval must be seconds in [0.05, 3600], not {text!r}")
    return seconds


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= 30 * 86400:
        raise argparse.ArgumentTypeError(f"since must be seconds in (0, 2592000], not {text!r}")
    return seconds


#: Each command's help line and description.
_ABOUT: Final = {
    "ps": (
        "print the task tree of a process that runs with observation on",
        "Print a process's tasks as a tree: state, what each waits on, where.",
    ),
    "top": (
        "a live view of what keeps a process's loop busy, and its lag",
        "Show a process's tasks grouped by what they run (the coroutine function, "
        "or a label the application set), by CPU share, with the rate and time "
        "of those that ended; refreshed every interval.",
    ),
    "dump": (
        "print a process's flight recorder: recent events and stalls",
        "Print the flight recorder: the last events, and each stall with its stack.",
    ),
}


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``ps``, ``top`` and ``dump`` on the ``corun`` command's subparsers."""
    parsers = {}
    for name, (summary, description) in _ABOUT.items():
        parsers[name] = commands.add_parser(
            name,
            help=summary,
            description=description,
            epilog="The process must run with observation on: `corun run --observe script.py`, "
            "or CORUN_OBSERVE=1 in its environment.",
        )
        parsers[name].add_argument("pid", type=_positive("PID"), metavar="PID")
    form = parsers["ps"].add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print the answer's JSON document")
    form.add_argument(
        "--prometheus", action="store_true", help="print the metrics in Prometheus text format"
    )
    top = parsers["top"]
    top.add_argument("--interval", type=_interval, default=1.0, help="seconds per refresh (1.0)")
    top.add_argument(
        "--once", action="store_true", help="print one frame (two samples an interval apart)"
    )
    top.add_argument(
        "--rows", type=_positive("rows"), default=DEFAULT_ROWS, help=f"rows shown ({DEFAULT_ROWS})"
    )
    top.add_argument(
        "--tasks", action="store_true", help="one row per live task instead of per group"
    )
    dump = parsers["dump"]
    dump.add_argument("--json", action="store_true", help="print the answer's JSON document")
    dump.add_argument(
        "--stalls",
        action="store_true",
        help="only the stalls, cancellations and notes (kept apart from spawns and exits)",
    )
    dump.add_argument(
        "--since",
        type=_seconds,
        metavar="SECONDS",
        help="only what happened in the last SECONDS",
    )
    dump.add_argument(
        "--limit", type=_positive("limit"), metavar="N", help="only the newest N events"
    )


def main(args: argparse.Namespace) -> int:
    """Run ``corun ps``, ``top`` or ``dump``: 0 on success, 1 with a one-line error."""
    command: Callable[[argparse.Namespace], None] = {"ps": _ps, "top": _top, "dump": _dump}[
        args.command
    ]
    try:
        command(args)
    except InspectError as exc:
        print(f"corun {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # `corun ps PID | head`: the reader left. Quietly, and without the
        # interpreter's own complaint when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 0 if args.command == "top" else 130
    return 0


def _document(pid: int, name: str) -> tuple[str, dict[str, Any]]:
    """The answer to ``name``, as text and parsed; ``InspectError`` if it is not a JSON object."""
    body = request(pid, name)
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise InspectError(
            "malformed", f"process {pid} answered {name!r} with bad JSON: {exc}"
        ) from None
    if not isinstance(doc, dict):
        raise InspectError("malformed", f"process {pid} answered {name!r} with no JSON object")
    return body, doc


def _render(pid: int, name: str, render: Callable[[], _T]) -> _T:
    """``render()``, with a document missing a field reported as a malformed answer."""
    try:
        return render()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InspectError(
            "malformed",
            f"process {pid} answered a {name!r} document this corun cannot read "
            f"({type(exc).__name__}: {exc})",
        ) from None


def _write(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def _ps(args: argparse.Namespace) -> None:
    from corun.observe.views import render_ps

    if args.prometheus:
        _write(request(args.pid, "metrics"))
        return
    body, doc = _document(args.pid, "ps")
    _write(body if args.json else _render(args.pid, "ps", lambda: render_ps(doc)))


def _dump(args: argparse.Namespace) -> None:
    from corun.observe.views import filter_dump, render_dump

    body, doc = _document(args.pid, "incidents" if args.stalls else "dump")
    if args.since is not None or args.limit is not None:
        doc = _render(
            args.pid,
            "dump",
            lambda: filter_dump(doc, since=args.since, limit=args.limit, now=time.time()),
        )
        body = json.dumps(doc)
    _write(body if args.json else _render(args.pid, "dump", lambda: render_dump(doc)))


def _top(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    from corun.observe.views import group_rows, render_top, top_rows

    def frame(before: dict[str, Any], after: dict[str, Any]) -> Any:
        def draw() -> Any:
            if args.tasks:
                return render_top(after, top_rows(before, after), limit=args.rows)
            return render_top(after, [], limit=args.rows, groups=group_rows(before, after))

        return _render(args.pid, "top", draw)

    console = Console()
    _, before = _document(args.pid, "top")
    next_sample = time.monotonic() + args.interval
    if args.once:
        time.sleep(max(0.0, next_sample - time.monotonic()))
        _, after = _document(args.pid, "top")
        console.print(frame(before, after))
        return
    waiting = Text(f"corun top {args.pid}: sampling for {args.interval:g} s…")
    with Live(waiting, console=console, auto_refresh=False) as live:
        while True:
            time.sleep(max(0.0, next_sample - time.monotonic()))
            next_sample += args.interval
            _, after = _document(args.pid, "top")
            live.update(frame(before, after), refresh=True)
            before = after
