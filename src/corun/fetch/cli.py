"""The ``corun fetch`` subcommand: its arguments and its entry point.

``corun.cli`` only registers it (``add_parser`` and ``main``), so the
command's options live here, next to the code they configure.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Final

from corun.fetch import ray_shards
from corun.fetch.journal import JournalMismatch
from corun.fetch.options import FetchOptions
from corun.fetch.runner import run_fetch

#: The flags that set a ``FetchOptions`` field of the same name one for one,
#: with their help. Each flag's type and default are the field's default's,
#: so the command and the options cannot disagree.
_TUNING: Final = {
    "concurrency": "requests in flight",
    "per_host": "ceiling of each host's adaptive limit on requests in flight",
    "retries": "retries per request",
    "connect_timeout": "seconds",
    "read_timeout": "seconds",
    "total_timeout": "seconds per request",
    "breaker_failure_rate": "",
    "breaker_min_calls": "",
    "host_give_up": "seconds a host may stay unavailable before its lines end as host_unavailable",
}
_DEFAULTS: Final = {f.name: f.default for f in dataclasses.fields(FetchOptions)}


def _add_tuning(parser: argparse.ArgumentParser, *names: str) -> None:
    for name in names:
        default = _DEFAULTS[name]
        assert isinstance(default, int | float)
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=type(default),
            default=default,
            help=" ".join(filter(None, (_TUNING[name], f"({default:g})"))),
        )


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``fetch`` on the ``corun`` command's subparsers."""
    fetch = commands.add_parser(
        "fetch",
        help="fetch every URL of a file (crash-safe, resumable), writing JSONL",
        description=(
            "Fetch one URL per line (or JSONL requests) into OUT.jsonl. Interrupted runs "
            "resume: re-run the same command. The journal is OUT.jsonl.journal."
        ),
    )
    fetch.add_argument("input", metavar="INPUT", help="input file, or - for stdin")
    fetch.add_argument("--output", "-o", required=True, metavar="OUT.jsonl")
    _add_tuning(fetch, "concurrency", "per_host")
    rate = fetch.add_mutually_exclusive_group()
    rate.add_argument(
        "--rate",
        type=float,
        default=None,
        help="a hard limit on requests/s per host (default: none, the adaptive limit paces)",
    )
    rate.add_argument(
        "--no-rate-limit",
        dest="rate",
        action="store_const",
        const=None,
        help="no hard rate limit (the default; kept for scripts that pass it)",
    )
    # After --rate, as the help has always listed them.
    _add_tuning(fetch, *list(_TUNING)[2:])
    fetch.add_argument("--max-body", type=int, default=None, help="body cap in bytes (10 MiB)")
    fetch.add_argument("--save-dir", default=None, help="write bodies here, not in the output")
    fetch.add_argument("--summary-json", default=None, metavar="PATH")
    fetch.add_argument("--no-progress", action="store_true", help="no progress bar")
    fetch.add_argument(
        "--no-adaptive",
        action="store_true",
        help="keep --per-host in flight to each host from the start (for servers you own)",
    )
    fetch.add_argument(
        "--retry-failed",
        action="store_true",
        help="fetch again the journalled lines that ended with an error or 429/502/503/504",
    )
    ray_shards.add_arguments(fetch)


def main(args: argparse.Namespace) -> int:
    """Run ``corun fetch``; 0 when the output is complete, 1 on error, 130 when interrupted."""
    import corun

    try:
        extra = {} if args.max_body is None else {"max_body_bytes": args.max_body}
        options = FetchOptions(
            input=args.input,
            output=args.output,
            rate=args.rate,
            save_dir=args.save_dir,
            summary_json=args.summary_json,
            progress=not args.no_progress,
            retry_failed=args.retry_failed,
            adaptive=not args.no_adaptive,
            **{name: getattr(args, name) for name in _TUNING},
            **extra,
        )
        backend = ray_shards.backend_from_args(args, options)
    except (TypeError, ValueError) as exc:
        print(f"corun fetch: {exc}", file=sys.stderr)
        return 2
    try:
        summary = corun.run(run_fetch(options, handle_signals=True, backend=backend))
    except (JournalMismatch, OSError, ray_shards.ClusterError) as exc:
        print(f"corun fetch: {exc}", file=sys.stderr)
        return 1
    print(summary.render(), file=sys.stderr)
    if summary.interrupted:
        return 130
    return 0 if summary.complete else 1
