"""Where observation's per-step cost comes from: its parts, interleaved in one process.

    .venv/bin/python -m benchmarks.observe_modes [--steps N] [--repeat R] [--out DIR]

``observe_overhead`` compares fresh processes, whose wall clock differs by
10 to 30% from one to the next on a shared machine. Here the modes take turns
in one process, each on a new loop, ``--repeat`` times, on the empty-step
workload (10 tasks x ``await asyncio.sleep(0)``):

* ``off``: no observation;
* ``accounting``: the loop's compiled accounting attached, nothing else (no
  watchdog, no serving thread);
* ``on``: ``corun.observe.enable(loop)``: the accounting, the watchdog thread,
  the inspection socket;
* ``on, no hand-over``: the same with the GIL hand-over switched off (the
  watchdog and the serving thread then wait for the GIL as any thread does;
  see ``LoopAccounting.hand_over``).

For each: ns per step (median and fastest) and the voluntary context
switches per second of the process's other threads. Results go to
``benchmarks/results/observe_modes.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import corun
import corun.observe as observe
from corun.observe.monitor import MONITOR
from corun.runtime.engine.accounting import LoopAccounting

ROOT = Path(__file__).resolve().parent.parent
TASKS = 10
MODES = ("off", "accounting", "on", "on, no hand-over")


async def _steps(n: int) -> None:
    async def worker(count: int) -> None:
        for _ in range(count):
            await asyncio.sleep(0)

    await asyncio.gather(*(worker(n // TASKS) for _ in range(TASKS)))


def _other_threads_switches() -> int:
    """Voluntary context switches of every thread but this one, so far."""
    total = 0
    me = str(threading.get_native_id())
    for tid in os.listdir("/proc/self/task"):
        if tid == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/status") as status:
                for line in status:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return total


@contextmanager
def _no_hand_over() -> Iterator[None]:
    """The monitor without its hand-overs: the loop is never asked to wait."""
    names = ("_publish_look", "turn", "turns_done")
    noop: Callable[..., None] = lambda *args: None  # noqa: E731
    for name in names:
        setattr(MONITOR, name, noop)
    try:
        yield
    finally:
        for name in names:
            delattr(MONITOR, name)


def _run(mode: str, steps: int) -> tuple[float, float, float]:
    """ns per step, other threads' wakes a second, and the share of time spent handing over."""
    loop = corun.new_event_loop()
    from_environment = observe.observer_of(loop)  # CORUN_OBSERVE=1: each mode sets its own
    if from_environment is not None:
        from_environment.close()
    observer = None
    try:
        if mode == "accounting":
            loop._set_accounting(LoopAccounting(loop._clock, 0.1))
        elif mode.startswith("on"):
            observer = observe.enable(loop)
        loop.run_until_complete(_steps(steps // 10))  # warm up, and the threads start
        accounting = loop._corun_accounting
        waited = accounting.hand_over_seconds if accounting is not None else 0.0
        switches = _other_threads_switches()
        started = time.perf_counter()
        loop.run_until_complete(_steps(steps))
        elapsed = time.perf_counter() - started
        rate = (_other_threads_switches() - switches) / elapsed
        if accounting is not None:
            waited = accounting.hand_over_seconds - waited
        return elapsed / steps * 1e9, rate, waited / elapsed
    finally:
        if observer is not None:
            observer.close()
        loop.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    ns: dict[str, list[float]] = {mode: [] for mode in MODES}
    wakes: dict[str, list[float]] = {mode: [] for mode in MODES}
    handing: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.repeat):
        for mode in MODES:
            if mode == "on, no hand-over":
                with _no_hand_over():
                    per_step, rate, share = _run(mode, args.steps)
            else:
                per_step, rate, share = _run(mode, args.steps)
            ns[mode].append(per_step)
            wakes[mode].append(rate)
            handing[mode].append(share)
    off = statistics.median(ns["off"])
    rows: list[dict[str, Any]] = []
    for mode in MODES:
        median = statistics.median(ns[mode])
        rows.append(
            {
                "mode": mode,
                "ns_per_step_median": median,
                "ns_per_step_fastest": min(ns[mode]),
                "vs_off_ns": median - off,
                "other_threads_wakes_per_s": statistics.median(wakes[mode]),
                "handing_over_share": statistics.median(handing[mode]),
                "runs": ns[mode],
            }
        )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"Empty steps ({TASKS} tasks x sleep(0), {args.steps:,} per run), modes interleaved in one "
        f"process, {args.repeat} runs each ({stamp}; load average {os.getloadavg()[0]:.1f}):",
        "",
        "| mode | ns per step (median) | fastest | vs off (median) | other threads' wakes/s "
        "| time handing the GIL over |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['mode']} | {row['ns_per_step_median']:,.0f} | "
            f"{row['ns_per_step_fastest']:,.0f} | {row['vs_off_ns']:+,.0f} ns | "
            f"{row['other_threads_wakes_per_s']:,.0f} | {row['handing_over_share']:.2%} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "observe_modes.md").write_text(text)
    (args.out / "observe_modes.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
