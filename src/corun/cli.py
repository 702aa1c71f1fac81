"""The ``corun`` command.

``corun run script.py [args...]`` runs a script the way ``python script.py``
would, with corun as asyncio's loop: ``asyncio.run()``, ``asyncio.Runner()``
and ``asyncio.new_event_loop()`` inside it create corun loops.
``corun run -m module [args...]`` does the same for ``python -m module``.
``corun fetch INPUT --output OUT.jsonl`` fetches URLs, crash-safe (``corun.fetch.cli``).
``corun demo`` runs ``corun fetch`` against a local fault-injecting server.
``corun run --observe ...`` runs with observation on (``CORUN_OBSERVE=1``), and
``corun ps/top/dump PID`` look inside such a process (``corun.observe.commands``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from corun.observe import commands as observe_commands


def _build_parser(*, with_fetch: bool = True, with_demo: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="corun", description="corun: an asyncio-compatible coroutine runtime."
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a Python script (or -m module) with corun as the asyncio loop",
        description="Run a script as `python script.py` would, with corun as the asyncio loop.",
    )
    run.add_argument(
        "--observe",
        action="store_true",
        help="turn observation on (CORUN_OBSERVE=1), for corun ps/top/dump",
    )
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a library module as a script")
    run.add_argument("target", nargs=argparse.REMAINDER, help="script path and its arguments")
    if with_fetch:
        # Imports aiohttp and rich: only when fetch, demo (or the help) is asked for,
        # so `corun run script.py` starts without them.
        from corun.fetch import cli as fetch_cli

        fetch_cli.add_parser(commands)
    if with_demo:
        # The demo's server is aiohttp's: `corun fetch` starts without it.
        from corun.fetch import demo

        demo.add_parser(commands)
    observe_commands.add_parsers(commands)
    return parser


def _version() -> str:
    from corun import __version__

    return f"corun {__version__}"


def _run(module: str | None, target: Sequence[str], *, observe: bool = False) -> int:
    from corun import launch

    try:
        return launch.run(module, target, observe=observe)
    except launch.LaunchError as exc:
        print(f"corun run: {exc}", file=sys.stderr)
        return exc.status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``corun`` console script; returns the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = arguments[0] if arguments else ""
    parser = _build_parser(
        with_fetch=command in ("", "fetch", "demo", "-h", "--help"),
        with_demo=command in ("", "demo", "-h", "--help"),
    )
    args = parser.parse_args(arguments)
    if args.command == "run":
        return _run(args.module, args.target, observe=args.observe)
    if args.command == "fetch":
        from corun.fetch import cli as fetch_cli

        return fetch_cli.main(args)
    if args.command == "demo":
        from corun.fetch import demo

        return demo.main(args)
    if args.command in observe_commands.COMMANDS:
        return observe_commands.main(args)
    parser.print_help()
    return 2
