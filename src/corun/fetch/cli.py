"""The ``corun fetch`` subcommand: its arguments and its entry point.

``corun.cli`` only registers it (``add_parser`` and ``main``), so the
command's options live here, next to the code they configure.
"""

from __future__ import annotations

import argparse
import sys

from corun.fetch.journal import JournalMismatch
from corun.fetch.runner import DEFAULT_RATE, FetchOptions, run_fetch


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
    fetch.add_argument("--concurrency", type=int, default=32, help="requests in flight (32)")
    fetch.add_argument("--per-host", type=int, default=4, help="requests in flight per host (4)")
    rate = fetch.add_mutually_exclusive_group()
    rate.add_argument(
        "--rate", type=float, default=DEFAULT_RATE, help=f"requests/s per host ({DEFAULT_RATE:g})"
    )
    rate.add_argument(
        "--no-rate-limit",
        dest="rate",
        action="store_const",
        const=None,
        help="no per-host rate limit (for servers you own)",
    )
    fetch.add_argument("--retries", type=int, default=3, help="retries per request (3)")
    fetch.add_argument("--connect-timeout", type=float, default=10.0, help="seconds (10)")
    fetch.add_argument("--read-timeout", type=float, default=30.0, help="seconds (30)")
    fetch.add_argument("--total-timeout", type=float, default=60.0, help="seconds per request (60)")
    fetch.add_argument("--breaker-failure-rate", type=float, default=0.5, help="(0.5)")
    fetch.add_argument("--breaker-min-calls", type=int, default=20, help="(20)")
    fetch.add_argument("--max-body", type=int, default=None, help="body cap in bytes (10 MiB)")
    fetch.add_argument("--save-dir", default=None, help="write bodies here, not in the output")
    fetch.add_argument("--summary-json", default=None, metavar="PATH")
    fetch.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    """Run ``corun fetch``; 0 when the output is complete, 1 on error, 130 when interrupted."""
    import corun

    try:
        extra = {} if args.max_body is None else {"max_body_bytes": args.max_body}
        options = FetchOptions(
            input=args.input,
            output=args.output,
            concurrency=args.concurrency,
            per_host=args.per_host,
            rate=args.rate,
            retries=args.retries,
            connect_timeout=args.connect_timeout,
            read_timeout=args.read_timeout,
            total_timeout=args.total_timeout,
            breaker_failure_rate=args.breaker_failure_rate,
            breaker_min_calls=args.breaker_min_calls,
            save_dir=args.save_dir,
            summary_json=args.summary_json,
            progress=not args.no_progress,
            **extra,
        )
    except (TypeError, ValueError) as exc:
        print(f"corun fetch: {exc}", file=sys.stderr)
        return 2
    try:
        summary = corun.run(run_fetch(options, handle_signals=True))
    except (JournalMismatch, OSError) as exc:
        print(f"corun fetch: {exc}", file=sys.stderr)
        return 1
    print(summary.render(), file=sys.stderr)
    if summary.interrupted:
        return 130
    return 0 if summary.complete else 1
