"""``corun demo``: ``corun fetch`` against a local server that misbehaves on purpose.

The demo starts ``DemoServer`` (``demo_server.py``) on loopback, writes
``--requests`` of its URLs (with the default fault mix) to an input file,
and runs them through ``run_fetch``, the same code as ``corun fetch``, with
its progress bar and summary. Then it tells what the faults were and what
the policies did about each, from three sources that must agree: the
fetcher's ``Summary``, the output file (one record per request, with its
attempts and error kind) and the server's own counts (faults injected, and
how long clients waited after a ``Retry-After``).

Everything runs in one process on corun's loop: the server and the client
share it, which is also a test of the loop under a mixed load. No network
is used; every address is 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from corun import observe
from corun.fetch.demo_server import (
    DROP_ATTEMPTS,
    FLAKY_RETRY_AFTER,
    KINDS,
    SLOW_MAX,
    SLOW_MIN,
    DemoServer,
    DemoStats,
)
from corun.fetch.options import FetchOptions
from corun.fetch.runner import run_fetch
from corun.fetch.summary import Summary

DEFAULT_REQUESTS: Final = 20_000
DEFAULT_CONCURRENCY: Final = 64
#: Seconds between probes of the down host, and until it is given up.
DOWN_PROBE_EVERY: Final = 1.0
DOWN_GIVE_UP: Final = 5.0


@dataclass(slots=True)
class KindReport:
    """What the output file says about the requests of one fault kind.

    Attributes:
        requests: requests of this kind.
        ok: of those, the ones that ended with a 200.
        attempts: attempts over all of them (as the client counted).
        retries: attempts beyond the first, summed (as the summary counts them).
        retried: requests that took more than one attempt.
        unsent: requests that ended without any attempt (a policy refused them).
        errors: error kind -> requests that ended with it.
        statuses: final status -> requests (None statuses are left out).
    """

    requests: int = 0
    ok: int = 0
    attempts: int = 0
    retries: int = 0
    retried: int = 0
    unsent: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DemoReport:
    """The demo's result: the fetch summary, the output by kind, and the server's view."""

    summary: dict[str, Any]
    kinds: dict[str, dict[str, Any]]
    server: dict[str, Any]
    down_host: str
    output_lines: int
    elapsed_s: float
    live_hosts: list[str] = field(default_factory=list)
    ceiling: int = 0


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``demo`` on the ``corun`` command's subparsers."""
    demo = commands.add_parser(
        "demo",
        help="run corun fetch against a local server that injects faults (no network)",
        description=(
            "Start a fault-injecting HTTP server on 127.0.0.1 and fetch --requests URLs "
            "from it with corun fetch's machinery: 503 with Retry-After, 429, slow "
            "responses, dropped connections and one host that stays down."
        ),
    )
    demo.add_argument(
        "--requests", type=int, default=DEFAULT_REQUESTS, help=f"({DEFAULT_REQUESTS})"
    )
    demo.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"requests in flight ({DEFAULT_CONCURRENCY})",
    )
    demo.add_argument("--seed", type=int, default=1, help="the fault plan's seed (1)")
    demo.add_argument(
        "--workdir",
        default=None,
        metavar="DIR",
        help="keep the input, output and journal here (default: a temporary directory)",
    )
    demo.add_argument(
        "--json", default=None, metavar="PATH", help="also write the demo's report as JSON"
    )
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    """Run ``corun demo``; 0 when every request is in the output and the story holds."""
    import corun

    if not 1 <= args.requests <= 1_000_000:
        print("corun demo: --requests must be in [1, 1000000]", file=sys.stderr)
        return 2
    if not 1 <= args.concurrency <= 10_000:
        print("corun demo: --concurrency must be in [1, 10000]", file=sys.stderr)
        return 2
    if args.workdir is not None:
        os.makedirs(args.workdir, exist_ok=True)
        return corun.run(_demo(args, args.workdir))
    with tempfile.TemporaryDirectory(prefix="corun-demo-") as workdir:
        return corun.run(_demo(args, workdir))


async def _demo(args: argparse.Namespace, workdir: str) -> int:
    started = time.monotonic()
    # The demo watches its own loop, and ends with what corun ps would show of it.
    observer = observe.enable(serve=False)
    input_path = os.path.join(workdir, "urls.txt")
    output_path = os.path.join(workdir, "out.jsonl")
    for stale in (output_path, output_path + ".journal"):
        # A demo always starts from scratch (a kept workdir must not resume).
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(stale + suffix):
                os.unlink(stale + suffix)
    async with DemoServer(seed=args.seed) as server:
        urls = server.urls(args.requests)
        with open(input_path, "w", encoding="utf-8") as stream:
            stream.write("\n".join(urls) + "\n")
        hosts = ", ".join(urlsplit(u).netloc for u in server.live)
        print(
            f"corun demo: {len(urls):,} requests to {len(server.live)} hosts on loopback "
            f"({hosts}) and one that is down ({urlsplit(server.down).netloc}); "
            f"concurrency {args.concurrency}, seed {args.seed}",
            flush=True,
        )
        options = FetchOptions(
            input=input_path,
            output=output_path,
            concurrency=args.concurrency,
            # Three live hosts share the load: let each take all of it.
            per_host=args.concurrency,
            progress=not args.no_progress,
            # The down host: probe it every second, give it up after DOWN_GIVE_UP s
            # (the default, 600 s, suits a real batch, not a demo).
            breaker_open_duration=DOWN_PROBE_EVERY,
            host_give_up=DOWN_GIVE_UP,
        )
        summary = await run_fetch(options, handle_signals=True)
        stats = server.stats()
    print(summary.render(), flush=True)
    if not summary.complete:
        return 130 if summary.interrupted else 1
    kinds, lines = _read_output(output_path)
    report = DemoReport(
        summary=asdict(summary),
        kinds={kind: asdict(kinds[kind]) for kind in KINDS},
        server=stats.to_dict(),
        down_host=urlsplit(server.down).netloc,
        output_lines=lines,
        elapsed_s=round(time.monotonic() - started, 3),
        live_hosts=[urlsplit(u).netloc for u in server.live],
        ceiling=options.per_host,
    )
    print(_story(summary, kinds, stats, report), flush=True)
    print(_loop_view(observer.summary()), flush=True)
    if args.json is not None:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(asdict(report), stream, indent=2, sort_keys=True)
            stream.write("\n")
    return 0


def _loop_view(loop: observe.LoopSummary) -> str:
    """The demo's own loop, as ``corun ps`` shows a loop: lag percentiles and the longest step."""
    lag = loop.lag
    return (
        f"The demo's own loop (corun.observe): {loop.steps:,} callbacks and task steps; "
        f"lag p50 {lag.p50 * 1e6:,.0f} us, p90 {lag.p90 * 1e6:,.0f} us, "
        f"p99 {lag.p99 * 1e3:,.1f} ms, max {lag.max * 1e3:,.1f} ms; "
        f"longest step {loop.longest_step * 1e3:,.1f} ms ({loop.longest_step_owner[:60]})."
    )


def _read_output(path: str) -> tuple[dict[str, KindReport], int]:
    """The output's records grouped by the fault kind in their URL path, and the line count."""
    kinds = {kind: KindReport() for kind in KINDS}
    lines = 0
    with open(path, encoding="utf-8") as stream:
        for text in stream:
            lines += 1
            record: dict[str, Any] = json.loads(text)
            kind = urlsplit(record["url"]).path.split("/")[1]
            entry = kinds[kind]
            entry.requests += 1
            attempts = int(record.get("attempts") or 0)
            entry.attempts += attempts
            if attempts > 1:
                entry.retried += 1
                entry.retries += attempts - 1
            elif attempts == 0:
                entry.unsent += 1
            status = record.get("status")
            if status is not None:
                entry.statuses[str(status)] = entry.statuses.get(str(status), 0) + 1
                if status == 200:
                    entry.ok += 1
            error = record.get("error_kind")
            if error:
                entry.errors[error] = entry.errors.get(error, 0) + 1
    return kinds, lines


def _story(
    summary: Summary, kinds: dict[str, KindReport], stats: DemoStats, report: DemoReport
) -> str:
    """What the faults were and how the policies handled each, in a few lines."""

    def n(value: int) -> str:
        return f"{value:,}"

    def retries(kind: str) -> int:
        return kinds[kind].retries

    flaky, limited, slow, drop, down, ok = (
        kinds[k] for k in ("flaky", "limited", "slow", "drop", "down", "ok")
    )
    wait = stats.retry_after_wait_ms
    lines = ["", "What happened:"]
    lines.append(
        f"  ok       {n(ok.requests):>7}  answered at once: {n(ok.ok)} x 200, "
        f"{n(retries('ok'))} retries"
    )
    lines.append(
        f"  flaky    {n(flaky.requests):>7}  503 with Retry-After: {FLAKY_RETRY_AFTER:g} on the "
        f"first attempt ({n(stats.faults['flaky'])} sent): each paused its whole host for "
        f"{FLAKY_RETRY_AFTER:g} s ({n(summary.host_pauses)} pauses), then went again without "
        f"spending a retry; {n(flaky.ok)} got 200. The server saw the retry come "
        + (f"{wait / 1000.0:.2f} s later on average" if wait is not None else "never")
        + f", never before Retry-After in {n(stats.retry_after_honoured)} of "
        f"{n(stats.retry_after_honoured + stats.retry_after_early)}"
    )
    lines.append(
        f"  limited  {n(limited.requests):>7}  429 without Retry-After on the first attempt "
        f"({n(stats.faults['limited'])} sent); retried after the client's own jittered "
        f"backoff: {n(limited.retried)} retried, {n(limited.ok)} got 200"
    )
    lines.append(
        f"  slow     {n(slow.requests):>7}  {SLOW_MIN * 1000:.0f}-{SLOW_MAX * 1000:.0f} ms each "
        f"({stats.slow_delay_ms / 1000.0:,.1f} s of waiting in all), inside the read timeout: "
        f"{n(slow.ok)} x 200, {n(retries('slow'))} retries"
    )
    lines.append(
        f"  drop     {n(drop.requests):>7}  connection closed without a response, "
        f"{DROP_ATTEMPTS} times each ({n(stats.faults['drop'])} drops): corun.http resent "
        f"a request itself only when the dropped connection was a reused keep-alive one "
        f"(RFC 9112), the fetcher retried the others; "
        f"{n(drop.retried)} retried, {n(drop.ok)} got 200"
    )
    given_up = down.errors.get("host_unavailable", 0)
    refused = down.errors.get("connect", 0)
    lines.append(
        f"  down     {n(down.requests):>7}  {report.down_host} refused every connection "
        f"({n(down.attempts)} attempts) until its circuit breaker opened (breaker trips: "
        f"{n(summary.breaker_trips)}, the first and one per failed probe). Its lines were deferred, not failed: the breaker let a "
        f"probe through every {DOWN_PROBE_EVERY:g} s, and after --host-give-up "
        f"{DOWN_GIVE_UP:g} s {n(given_up)} ended as host_unavailable ({n(down.unsent)} never "
        f"sent), {n(refused)} as connect errors (their own retries spent first)"
    )
    live = [(host, report.summary["hosts"][host]) for host in report.live_hosts]
    lines.append(
        "Adaptive limits (requests in flight per host, from 2 up to the ceiling of "
        f"{report.ceiling}; halved on 429/503, cut when latency doubles): "
        + "; ".join(
            f"{host} peaked at {h['peak']}, ended at {h['limit']} ({n(h['decreases'])} cuts)"
            for host, h in live
        )
    )
    lines.append(
        f"Deferred: {n(summary.deferred)} lines waited for their host (paused by Retry-After, "
        f"or its breaker open) instead of ending as errors; every line of a live host got 200."
    )
    rate = report.output_lines / report.elapsed_s if report.elapsed_s > 0 else 0.0
    lines.append(
        f"Retries: {n(summary.retries)} in all (503: {n(retries('flaky'))}, "
        f"429: {n(retries('limited'))}, dropped connection: {n(retries('drop'))}, "
        f"refused connection and probes: {n(retries('down'))}). Output: "
        f"{n(report.output_lines)} lines, one per request."
    )
    lines.append(
        f"Elapsed: {report.elapsed_s:.1f} s ({rate:,.0f} requests/s, server included), "
        f"no network used."
    )
    return "\n".join(lines)


def run(argv: Sequence[str]) -> int:
    """``corun demo`` with ``argv`` as its arguments (for tests and scripts)."""
    parser = argparse.ArgumentParser(prog="corun")
    commands = parser.add_subparsers(dest="command")
    add_parser(commands)
    return main(parser.parse_args(["demo", *argv]))


__all__ = ["DemoReport", "KindReport", "add_parser", "main", "run"]
