"""``corun ps`` (or ``dump``) of 10,000 tasks: how long an answer takes, and how long it holds the loop up.

    .venv/bin/python -m benchmarks.observe_ps [--request ps|dump] [--children 6] [--asks 5]
        [--baseline-src DIR] [--out DIR]

Each child is ``tests/observe/many_tasks_child.py`` run with ``CORUN_OBSERVE=1``:
10,000 tasks waiting on sleeps, events, queues, locks, sockets, streams and
other tasks, and a 1 ms ticker. This process asks it for ``ps`` ``--asks``
times, 0.2 s apart, through ``corun.observe.client.request``, and the child
reports its ticker's worst gap beyond the 1 ms while it was asked, and over an
idle second before (the floor), and the longest its serving thread held the
loop up (``held_ms`` of its audit lines). With ``--baseline-src``, the ``src`` directory
of another checkout, built in place (its ``make install``), takes turns with
this one, child by child. Results go to ``benchmarks/results/observe_ps.{json,md}``
(``observe_dump.*`` for ``--request dump``: the child's recorder is full then,
its 10,042 slots holding the 10,000 tasks' spawns and more).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from corun.observe.client import request

ROOT = Path(__file__).resolve().parent.parent
CHILD = ROOT / "tests" / "observe" / "many_tasks_child.py"
#: Seconds a child has to get its tasks waiting, and to end.
CHILD_TIMEOUT = 60.0


def ask_child(src: Path, asks: int, what: str = "ps") -> dict[str, Any]:
    """One child on the corun in ``src``: its answers' times, its worst gap and floor (ms)."""
    with tempfile.TemporaryDirectory(prefix="corun-ps-bench-") as runtime_dir:
        env = {k: v for k, v in os.environ.items() if k != "CORUN_OBSERVE"}
        env.update(PYTHONPATH=str(src), XDG_RUNTIME_DIR=runtime_dir, CORUN_OBSERVE="1")
        child = subprocess.Popen(
            [sys.executable, str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        previous = os.environ.get("XDG_RUNTIME_DIR")
        os.environ["XDG_RUNTIME_DIR"] = runtime_dir  # where the client looks for the socket
        try:
            assert child.stdout is not None and child.stdin is not None
            ready, floor = child.stdout.readline().split()
            assert ready == "ready"
            times = []
            windows = []  # each answer's (start, end) on the monotonic clock, the child's too
            size = 0
            for _ in range(asks):
                started = time.monotonic()
                size = len(request(child.pid, what))
                ended = time.monotonic()
                times.append((ended - started) * 1e3)
                windows.append((started, ended))
                time.sleep(0.2)
            child.stdin.close()
            worst = float(child.stdout.readline())
            gaps = json.loads(child.stdout.readline())
            held = json.loads(child.stdout.readline())
            child.wait(CHILD_TIMEOUT)
        finally:
            if previous is None:
                os.environ.pop("XDG_RUNTIME_DIR", None)
            else:
                os.environ["XDG_RUNTIME_DIR"] = previous
            if child.poll() is None:
                child.kill()
                child.wait()
    during, outside = split_gaps(gaps, windows)
    return {
        "ps_ms": times,
        "worst_gap_ms": worst,
        "worst_during_ms": max(during, default=0.0),
        "worst_outside_ms": max(outside, default=0.0),
        "held_ms": held,
        "floor_ms": float(floor),
        "bytes": size,
    }


def split_gaps(
    gaps: list[list[float]], windows: list[tuple[float, float]]
) -> tuple[list[float], list[float]]:
    """The ticker's gaps (``[end, ms]``) that overlap an answer, and the others.

    The others are the same minutes' noise floor: a gap while nothing was
    asked is the machine's (or the child's own), not the answer's.
    """
    during: list[float] = []
    outside: list[float] = []
    for end, gap_ms in gaps:
        start = end - gap_ms / 1e3 - 0.001  # the tick before the gap
        overlaps = any(start < w_end and end > w_start for w_start, w_end in windows)
        (during if overlaps else outside).append(gap_ms)
    return during, outside


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The answers' median and range, and each child's worst gap and floor."""
    times = [t for run in runs for t in run["ps_ms"]]
    return {
        "answers": len(times),
        "ps_median_ms": statistics.median(times),
        "ps_min_ms": min(times),
        "ps_max_ms": max(times),
        "worst_gaps_ms": sorted(run["worst_gap_ms"] for run in runs),
        "worst_during_ms": sorted(run["worst_during_ms"] for run in runs),
        "worst_outside_ms": sorted(run["worst_outside_ms"] for run in runs),
        # Empty for a baseline whose audit line has no ``held_ms``.
        "worst_held_ms": sorted(max(run["held_ms"]) for run in runs if run["held_ms"]),
        "floors_ms": sorted(run["floor_ms"] for run in runs),
        "bytes": runs[-1]["bytes"],
    }


def markdown(
    rows: dict[str, dict[str, Any]], date: str, baseline: Path | None, what: str = "ps"
) -> str:
    command = "python -m benchmarks.observe_ps" + ("" if what == "ps" else f" --request {what}")
    lines = [f"`corun {what}` of 10,000 tasks ({date}; `{command}`):", ""]
    if baseline is not None:
        lines += [f"baseline: the corun in `{baseline}`, child by child with this one.", ""]
    lines += [
        "| code | answers | median ms | min | max | worst loop gap per child, ms "
        "| of which during answers | outside answers | idle floor per child, ms "
        "| longest hold per child, ms |",
        "|---|--:|--:|--:|--:|---|---|---|---|---|",
    ]

    def listed(values: list[float]) -> str:
        return ", ".join(f"{value:.1f}" for value in values)

    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['answers']} | {row['ps_median_ms']:.0f} | {row['ps_min_ms']:.0f} "
            f"| {row['ps_max_ms']:.0f} | {listed(row['worst_gaps_ms'])} "
            f"| {listed(row['worst_during_ms'])} | {listed(row['worst_outside_ms'])} "
            f"| {listed(row['floors_ms'])} | {listed(row['worst_held_ms']) or 'not measured'} |"
        )
    lines += [
        "",
        "Gaps are the child's 1 ms ticker's lateness. During answers: gaps that overlap "
        "an answer; outside: the others of the same minutes (the machine's noise), "
        "besides the idle floor, the worst gap of an idle second before the first answer. "
        "The longest hold is the most CPU time the serving thread ran between two of its "
        "pauses for the loop, over the child's answers (``held_ms`` in the audit line): "
        "how long an answer held the loop up. Time this virtual machine's host or other "
        "processes took from the loop is in the gaps but not in the holds.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.observe_ps")
    parser.add_argument("--request", choices=("ps", "dump"), default="ps")
    parser.add_argument("--children", type=int, default=6)
    parser.add_argument("--asks", type=int, default=5)
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.children < 1 or args.asks < 1:
        parser.error("--children and --asks must be at least 1")
    sources = {"this": ROOT / "src"}
    if args.baseline_src is not None:
        if not (args.baseline_src / "corun").is_dir():
            parser.error(f"--baseline-src {args.baseline_src}: no corun package there")
        sources["baseline"] = args.baseline_src
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sources}
    for child in range(args.children):
        for name, src in sources.items():  # interleaved: the host's mood is shared
            run = ask_child(src, args.asks, args.request)
            runs[name].append(run)
            print(
                f"child {child + 1} {name}: {args.request} {[round(t) for t in run['ps_ms']]} ms, "
                f"worst gap {run['worst_gap_ms']:.1f} ms, floor {run['floor_ms']:.1f} ms, "
                f"held {max(run['held_ms'], default=0.0):.1f} ms",
                flush=True,
            )
    rows = {name: summarise(found) for name, found in runs.items()}
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    table = markdown(rows, date, args.baseline_src, args.request)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"observe_{args.request}.json").write_text(
        json.dumps(
            {"date": date, "baseline_src": str(args.baseline_src), "rows": rows, "runs": runs},
            indent=2,
        )
        + "\n"
    )
    (args.out / f"observe_{args.request}.md").write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
