"""What observation costs: the same workloads with ``corun.observe`` off, on, and watched by ``top``.

    .venv/bin/python -m benchmarks.observe_overhead [--repeat 5] [--baseline-root DIR] [--out DIR]

Modes, each a fresh worker process per repetition, interleaved:

* ``off``: no ``CORUN_OBSERVE``; what every program pays for the hooks;
* ``on``: ``CORUN_OBSERVE=1``: the always-on tier (lag histograms, utilisation,
  per-task accounting, the stall watchdog, the inspection socket);
* ``top``: on, with a client asking for the ``top`` answer once a second, as
  ``corun top`` does;
* ``main`` (with ``--baseline-root``): a checkout of the code before
  observation existed, built in its own venv, run the same way: the "off vs
  main" budget.

Workloads: ``steps`` (empty task steps, ns per step), the same beside
10,000 idle tasks (``steps/idle10k``: what ``top`` looks through), echo over protocols
and over streams (1 KiB, 10 connections) and HTTP (aiohttp, 100
connections). The report gives medians side by side and each mode's change
against ``off``. Results go to ``benchmarks/results/observe_overhead.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.cases import Case, Metric, build_cases
from benchmarks.driver import _worker_env
from benchmarks.tools import Client, choose_clients

ROOT = Path(__file__).resolve().parent.parent
CASES = ("steps", "steps/idle10k", "echo/protocol/1KiB/c10", "echo/streams/1KiB/c10", "http/c100")
# Only here, not in `make bench`: the empty steps beside 10,000 idle tasks,
# which `corun top` has to look through once a second (its 1% budget).
IDLE_STEPS = Case(
    "steps",
    "steps/idle10k",
    "empty steps (5,000,000: 10 tasks x sleep(0)) beside 10,000 idle tasks",
    {"kind": "steps", "n": 5_000_000, "tasks": 10, "idle": 10_000},
    (Metric("ns_per_step", "per step", "ns", False),),
)
# The figure each workload is judged by, and whether higher is better.
FIGURES = {
    "steps": ("ns_per_step", False),
    "echo": ("rps", True),
    "http": ("rps", True),
}


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def serving_cpu_ns(pid: int) -> int | None:
    """The CPU time so far of ``pid``'s inspection thread (``corun-inspect``), in ns.

    From ``/proc/PID/task/TID/schedstat``, which counts in nanoseconds. That
    thread holds the GIL while it answers, so its CPU time is the time the
    loop could not run: what ``top`` costs the loop, measured directly.
    """
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                if comm.read().strip() != "corun-inspect":
                    continue
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                return int(stat.read().split()[0])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


@contextlib.contextmanager
def _top_poller(stop: threading.Event, asked: list[int], cpu: list[int]) -> Iterator[None]:
    """Ask every observed child of this process for ``top`` once a second.

    ``asked[0]`` counts the answers; ``cpu[0]`` is the answering thread's CPU
    time (ns) after the last answer, summed over the children.
    """
    from corun.observe import client

    seen: dict[int, int] = {}

    def poll() -> None:
        while not stop.is_set():
            for pid in _children(os.getpid()):
                with contextlib.suppress(client.InspectError):
                    client.request(pid, "top", timeout=2.0)
                    asked[0] += 1
                    used = serving_cpu_ns(pid)
                    if used is not None:
                        seen[pid] = used
                        cpu[0] = sum(seen.values())
            stop.wait(1.0)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def run_once(case: Case, client: Client | None, mode: str, baseline: Path | None) -> dict[str, Any]:
    """One worker for ``case`` in ``mode``; its JSON output."""
    params = dict(case.params)
    if client is not None:
        params["client_cmd"] = list(client.cmd)
        params["client_tool"] = client.tool
    env = _worker_env()
    env.pop("CORUN_OBSERVE", None)
    python = sys.executable
    if mode in ("on", "top"):
        env["CORUN_OBSERVE"] = "1"
    if mode == "main":
        # The baseline's own build of corun (its venv), driven by this
        # checkout's benchmark code (on PYTHONPATH, which holds no corun).
        assert baseline is not None
        python = str(baseline / ".venv" / "bin" / "python")
    spec = json.dumps({"loop": "corun", "params": params})
    stop = threading.Event()
    asked = [0]
    cpu = [0]
    poller = _top_poller(stop, asked, cpu) if mode == "top" else contextlib.nullcontext()
    with poller:
        proc = subprocess.run(
            [python, "-m", "benchmarks.worker", spec],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
            cwd=ROOT,
            check=False,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"ok": False, "error": proc.stderr.strip().splitlines()[-3:]}
    out: dict[str, Any] = json.loads(lines[-1])
    out["top_requests"] = asked[0]
    out["top_cpu_ns"] = cpu[0]
    return out


def _figure(case: Case, out: dict[str, Any]) -> float | None:
    key, _ = FIGURES[case.benchmark]
    value = out.get("metrics", {}).get(key)
    return float(value) if value is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the overhead benchmark; write its JSON and Markdown reports."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.observe_overhead")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    wanted = args.only.split(",")
    cases = [c for c in [*build_cases(quick=False), IDLE_STEPS] if c.case_id in wanted]
    modes = ["off", "on", "top"] + (["main"] if args.baseline_root else [])
    echo_client, http_client = choose_clients("auto", "auto")
    rows: dict[str, dict[str, list[float]]] = {}
    top_requests: dict[str, int] = {}
    # Per workload: the answering thread's CPU per top answer, ms, one per run.
    top_cpu: dict[str, list[float]] = {}
    for case in cases:
        client = None
        if case.network:
            client = http_client if case.benchmark == "http" else echo_client
        figures: dict[str, list[float]] = {mode: [] for mode in modes}
        for rep in range(args.repeat):
            for mode in modes[rep % len(modes) :] + modes[: rep % len(modes)]:
                out = run_once(case, client, mode, args.baseline_root)
                value = _figure(case, out) if out.get("ok") else None
                print(f"{case.case_id:24} {mode:5} rep {rep + 1}: {value}", file=sys.stderr)
                if value is not None:
                    figures[mode].append(value)
                if mode == "top":
                    answered = int(out.get("top_requests", 0))
                    top_requests[case.case_id] = top_requests.get(case.case_id, 0) + answered
                    if answered and out.get("top_cpu_ns"):
                        # Its CPU includes the socket's setup and the idle
                        # wakes, counted against the answers: an upper bound.
                        top_cpu.setdefault(case.case_id, []).append(
                            out["top_cpu_ns"] / answered / 1e6
                        )
        rows[case.case_id] = figures
    document = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "repeat": args.repeat,
        "loadavg": os.getloadavg()[0],
        "results": rows,
        "top_requests": top_requests,
        "top_cpu_ms_per_answer": top_cpu,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "observe_overhead.json").write_text(json.dumps(document, indent=1) + "\n")
    markdown = render(document, cases, modes)
    (args.out / "observe_overhead.md").write_text(markdown)
    print(markdown)
    return 0


def render(document: dict[str, Any], cases: Sequence[Case], modes: Sequence[str]) -> str:
    """The Markdown table: medians per mode, and each mode against ``off``."""
    head = ["workload", "figure"] + [f"{m} (median)" for m in modes]
    head += [f"{m} vs off" for m in modes if m != "off"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in cases:
        figures = document["results"][case.case_id]
        key, higher = FIGURES[case.benchmark]
        medians = {m: statistics.median(v) if v else None for m, v in figures.items()}
        cells = [case.case_id, key + (" (higher is better)" if higher else "")]
        cells += [f"{medians[m]:,.1f}" if medians[m] is not None else "-" for m in modes]
        base = medians["off"]
        for mode in modes:
            if mode == "off":
                continue
            value = medians[mode]
            if base is None or value is None:
                cells.append("-")
            elif case.benchmark == "steps":
                cells.append(f"{value - base:+.0f} ns/step ({(value / base - 1) * 100:+.1f}%)")
            else:
                # Throughput: the change in time per request.
                cells.append(f"{(base / value - 1) * 100:+.1f}% time")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        f"{document['repeat']} repetitions per mode, interleaved; load average "
        f"{document['loadavg']:.1f} at the end; `top` answered "
        f"{sum(document['top_requests'].values())} requests."
    )
    cpu = document.get("top_cpu_ms_per_answer", {})
    if cpu:
        lines += [
            "",
            "What `top` costs the loop, measured directly: the CPU time of the observed "
            "process's answering thread (`corun-inspect`, from `/proc/.../schedstat`), "
            "which holds the GIL while it answers, per answer. At 1 Hz, 10 ms is 1%.",
            "",
            "| workload | CPU per top answer, ms (median) | runs | at 1 Hz |",
            "|---|--:|--:|--:|",
        ]
        for case_id, values in cpu.items():
            median = statistics.median(values)
            lines.append(f"| {case_id} | {median:.2f} | {len(values)} | {median / 10:.2f}% |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
