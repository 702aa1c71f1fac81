"""Instructions per operation on corun's, asyncio's and uvloop's loops, side by side.

    .venv/bin/python -m benchmarks.instructions [--loops corun,asyncio,uvloop] [--only CASES]

The wall-clock tables of ``make bench`` move by 10 to 30% between identical
runs on this machine; the count of instructions a process runs, under
``valgrind --tool=callgrind``, moves by well under 1%. Each workload runs at
two sizes on each loop and the difference, divided by the difference in
operations, is the cost of one operation without the start-up (the method,
the workloads and the one-connection client are ``benchmarks.observe_instructions``'s).

What it does not count: the kernel. A network request's system calls (one
``epoll_wait``, one ``recv``, one ``send`` on every loop here) are most of its
CPU time, so a ratio of instructions is not a ratio of requests per second;
it is the part of the cost that belongs to the loop. Results go to
``benchmarks/results/instructions.{json,md}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.observe_instructions import per_operation, write_reports

ROOT = Path(__file__).resolve().parent.parent
LOOPS = ("corun", "asyncio", "uvloop")
#: workload -> (the two sizes, the unit of one operation)
WORKLOADS: dict[str, tuple[tuple[int, int], str]] = {
    "call_soon": ((100_000, 300_000), "callback"),
    "steps": ((20_000, 60_000), "step"),
    "tasks": ((5_000, 15_000), "task"),
    "ping_pong": ((20_000, 60_000), "round trip"),
    "echo/protocol": ((1_000, 3_000), "request"),
    "echo/streams": ((1_000, 3_000), "request"),
    "http": ((1_000, 3_000), "request"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Count each workload on each loop; write the reports."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    options = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("instructions: valgrind is not installed (Debian: valgrind)", file=sys.stderr)
        return 1
    loops = [
        name
        for name in options.loops.split(",")
        if name in LOOPS and (name != "uvloop" or importlib.util.find_spec("uvloop"))
    ]
    workloads = [w for w in options.only.split(",") if w in WORKLOADS]
    results: dict[str, dict[str, float]] = {}
    for workload in workloads:
        results[workload] = {}
        for loop in loops:
            figure = per_operation(
                sys.executable, workload, False, loop=loop, sizes=WORKLOADS[workload][0]
            )
            results[workload][loop] = figure
            print(f"{workload:14} {loop:8} {figure:12,.0f}", file=sys.stderr)
    document = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": sys.version.split()[0],
        "sizes": {w: WORKLOADS[w][0] for w in workloads},
        "results": results,
    }
    write_reports(options.out / "instructions", document, render(document))
    return 0


def _ratio(results: dict[str, float], other: str) -> str:
    # As in make bench: above 1 means corun runs fewer instructions.
    if "corun" not in results or other not in results:
        return ""
    return f"{results[other] / results['corun']:.2f}x"


def render(document: dict[str, Any]) -> str:
    """The Markdown table: instructions per operation by loop, and corun against each."""
    results: dict[str, dict[str, float]] = document["results"]
    loops = [name for name in LOOPS if any(name in row for row in results.values())]
    head = ["workload", "per", *loops, "corun vs asyncio", "corun vs uvloop"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "--:|" * (len(head) - 2)]
    for workload, row in results.items():
        cells = [workload, WORKLOADS[workload][1]]
        cells += [f"{row[name]:,.0f}" if name in row else "" for name in loops]
        cells += [_ratio(row, "asyncio"), _ratio(row, "uvloop")]
        lines.append("| " + " | ".join(cells) + " |")
    return (
        f"Instructions per operation (callgrind, two sizes subtracted; CPython "
        f"{document['python']}, {document['date']}). Above 1x: corun runs fewer.\n\n"
        + "\n".join(lines)
        + "\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
