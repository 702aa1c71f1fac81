"""Where observation's per-step cost comes from: its parts, interleaved in one process.

    .venv/bin/python -m benchmarks.observe_modes [--steps N] [--repeat R] [--out DIR]
    .venv/bin/python -m benchmarks.observe_modes --network CASE [--repeat R] [--out DIR]

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

With ``--network CASE`` (``echo/protocol/1KiB/c10``, ``echo/streams/1KiB/c10``,
``http/c100``), the modes ``off``, ``accounting`` and ``on`` take turns serving
that workload of ``make bench`` under the C load generator, each on a new loop
in this process, and the figure is the server's CPU time per request (all its
threads: the watchdog and the serving thread count). Requests per second move
with whatever else the host runs; CPU per request much less, and the modes'
turns of a few seconds each share the host's state. Each round's ``on`` and
``accounting`` are also divided by the same round's ``off``, and the median of
those ratios is reported. Results go to
``benchmarks/results/observe_modes_network.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import corun
import corun.observe as observe
from benchmarks import net
from benchmarks.tools import choose_clients
from corun.observe.monitor import MONITOR
from corun.runtime.engine.accounting import LoopAccounting

ROOT = Path(__file__).resolve().parent.parent
TASKS = 10
MODES = ("off", "accounting", "on", "on, no hand-over")
NETWORK_MODES = ("off", "accounting", "on")
NETWORK_CASES = ("echo/protocol/1KiB/c10", "echo/streams/1KiB/c10", "http/c100")
#: Seconds of each mode's window in --network, and before it (a mode's start-up).
WINDOW = 0.5
#: Bytes of each echo message (the cases' 1 KiB).
ECHO_SIZE = 1024
SETTLE = 0.05


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


class _Modes:
    """Turns a loop's observation on as a mode says, and off again (``off``: nothing)."""

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.observer: Any = None

    def set(self, mode: str) -> None:
        if mode == "accounting":
            self.loop._set_accounting(LoopAccounting(self.loop._clock, 0.1))
        elif mode.startswith("on"):
            self.observer = observe.enable(self.loop)

    def unset(self, mode: str) -> None:
        if mode == "accounting":
            self.loop._set_accounting(None)
        elif self.observer is not None:
            self.observer.close()
            self.observer = None


@contextmanager
def _loop_in(mode: str) -> Iterator[Any]:
    """A new corun loop observed as ``mode`` says; closed (and its observer) on exit."""
    loop = corun.new_event_loop()
    from_environment = observe.observer_of(loop)  # CORUN_OBSERVE=1: each mode sets its own
    if from_environment is not None:
        from_environment.close()
    modes = _Modes(loop)
    try:
        modes.set(mode)
        yield loop
    finally:
        modes.unset(mode)
        loop.close()


def _run(mode: str, steps: int) -> tuple[float, float, float]:
    """ns per step, other threads' wakes a second, and the share of time spent handing over."""
    with _loop_in(mode) as loop:
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


class _CountingEcho(net.EchoProtocol):
    """``make bench``'s echo protocol, counting the bytes it echoes."""

    def data_received(self, data: bytes) -> None:
        _SERVED[0] += len(data)
        super().data_received(data)


async def _counting_hello(request: Any) -> Any:
    """``make bench``'s HTTP handler, counting the requests."""
    _SERVED[0] += 1
    return await net._hello(request)


#: What the server under test has served so far: bytes echoed, or HTTP requests.
_SERVED = [0]


async def _serve_toggled(
    loop: Any, case_id: str, client_cmd: list[str], rounds: int, window: float
) -> dict[str, list[float]]:
    """Serve ``case_id`` under one load generator run; its modes take turns, a window each."""
    # What one request is in _SERVED: a request, or the bytes of an echoed message.
    per_request = 1 if case_id.startswith("http") else ECHO_SIZE
    runner: Any = None
    server: Any = None
    if case_id.startswith("http"):
        runner, port = await net.start_http_server(_counting_hello)
        mode_args, conns = ["--mode", "http", "--size", "1"], "100"
    else:
        if "protocol" in case_id:
            server = await loop.create_server(_CountingEcho, "127.0.0.1", 0, backlog=1024)
        else:
            echo = functools.partial(net._stream_echo, served=_SERVED)
            server = await asyncio.start_server(echo, "127.0.0.1", 0, backlog=1024)
        port = int(server.sockets[0].getsockname()[1])
        await net._settle(loop, port, ECHO_SIZE)
        mode_args, conns = ["--mode", "echo", "--size", str(ECHO_SIZE)], "10"
    cmd = [*client_cmd, *mode_args, "--host", "127.0.0.1", "--port", str(port)]
    # Longer than the rounds take: it is stopped when they are done.
    cmd += ["--conns", conns, "--warmup", "0", "--duration", "3600"]
    client = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.DEVNULL)
    cpu: dict[str, list[float]] = {mode: [] for mode in NETWORK_MODES}
    modes = _Modes(loop)
    try:
        await asyncio.sleep(1.0)  # the connections made, the server warm
        for round_ in range(rounds):
            # Each mode goes first in turn: a drift of the host falls on all of them.
            turn = round_ % len(NETWORK_MODES)
            for mode in NETWORK_MODES[turn:] + NETWORK_MODES[:turn]:
                modes.set(mode)
                try:
                    # Every window starts from a full collection: a mode's set-up
                    # makes thousands of objects (the histograms' counters), and
                    # the collections they bring on would fall in its windows.
                    gc.collect()
                    await asyncio.sleep(SETTLE)  # a thread started, a first look taken
                    served, used = _SERVED[0], time.process_time()
                    await asyncio.sleep(window)
                    requests = (_SERVED[0] - served) / per_request
                    if not requests:
                        raise RuntimeError("no request served in a window: the client stopped")
                    cpu[mode].append((time.process_time() - used) / requests * 1e6)
                finally:
                    modes.unset(mode)
    finally:
        if client.returncode is None:
            client.terminate()
        await client.wait()
        if runner is not None:
            await runner.cleanup()
        if server is not None:
            server.close()
    return cpu


def _median_interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """A 95% bootstrap interval of the median of ``values`` (seeded: the same every run)."""
    pick = random.Random(1)
    medians = sorted(
        statistics.median(pick.choices(values, k=len(values))) for _ in range(resamples)
    )
    return medians[int(resamples * 0.025)], medians[int(resamples * 0.975) - 1]


def network(case_id: str, rounds: int, out: Path) -> int:
    """Interleave the modes serving ``case_id``; write the network report."""
    if case_id not in NETWORK_CASES:
        raise SystemExit(f"--network: one of {', '.join(NETWORK_CASES)}")
    # The C load generator for HTTP too (not wrk): one client, stopped when the rounds end.
    client, _ = choose_clients("c", "c")
    with _loop_in("off") as loop:
        cpu = loop.run_until_complete(
            _serve_toggled(loop, case_id, list(client.cmd), rounds, WINDOW)
        )
    rows: list[dict[str, Any]] = []
    off = statistics.median(cpu["off"])
    for mode in NETWORK_MODES:
        ratios = [a / b for a, b in zip(cpu[mode], cpu["off"], strict=True)]
        low, high = _median_interval(ratios)
        rows.append(
            {
                "mode": mode,
                "server_cpu_us_median": statistics.median(cpu[mode]),
                "vs_off_medians": statistics.median(cpu[mode]) / off - 1,
                "vs_off_paired": statistics.median(ratios) - 1,
                "vs_off_paired_95": [low - 1, high - 1],
                "server_cpu_us": cpu[mode],
            }
        )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"{case_id}: one server under one run of the C load generator; its observation "
        f"switched between the modes every {WINDOW:g} s, {rounds} rounds ({stamp}; load "
        f"average {os.getloadavg()[0]:.1f}):",
        "",
        "| mode | server CPU per request (median) | vs off (medians) | vs off (median of "
        "rounds) | its 95% interval |",
        "|---|--:|--:|--:|--:|",
    ]
    for row in rows:
        low, high = row["vs_off_paired_95"]
        lines.append(
            f"| {row['mode']} | {row['server_cpu_us_median']:.2f} µs | "
            f"{row['vs_off_medians']:+.1%} | {row['vs_off_paired']:+.1%} | "
            f"{low:+.1%} to {high:+.1%} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    name = "observe_modes_network"
    document: dict[str, Any] = {}
    if (out / f"{name}.json").exists():
        document = json.loads((out / f"{name}.json").read_text())
    document[case_id] = {"date": stamp, "rounds": rounds, "rows": rows, "table": text}
    (out / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")
    (out / f"{name}.md").write_text("\n".join(document[c]["table"] for c in sorted(document)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--network", metavar="CASE", default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.network:
        return network(args.network, args.repeat, args.out)
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
