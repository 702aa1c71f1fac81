"""``corun fetch`` on one machine against ``corun fetch --ray`` at 1 and 2 workers.

What runs:

* **the server**: one aiohttp application returning ``Hello, World!`` on
  ``--hosts`` ports of 127.0.0.1 (one "host" each, so the hosts shard over
  the workers), in a process of its own, on uvloop when it is installed.
* **one Ray**, started here (``ray.init``: ``--ray-cpus`` CPUs, a small
  object store, no dashboard) before the first run and shared by every
  ``--ray`` run, which joins it by address: a cluster is started once, as
  in real use, and its start-up is not the fetcher's.
* per repetition, in turn: ``corun fetch`` without Ray, then with ``--ray
  ADDRESS --workers 1`` and ``--workers 2``; every policy on but the rate
  limit (``--no-rate-limit``), ``--concurrency``/``--per-host`` C.

Measured per run: requests/s over the run's ``elapsed_s`` (the summary's,
workers' start-up included); for Ray runs also over the fetch phase alone
(the sum of the workers' ``requests_per_s``); and the **client CPU per
request**: the driver's own CPU (its rusage, from ``wait4``) plus, for Ray,
the CPU of every other process under this one but the server, sampled from
``/proc`` every 50 ms (a process counts from its first sample of the run;
one that exits counts up to its last sample), split into the fetch workers
(``ray::FetchWorker``) and Ray's own processes (GCS, raylet, idle workers).
Each mode also runs a tenth of the input: the difference gives the CPU per
request beyond start-up (Ray's import and connection, the workers' start),
which is what the scaling model uses. Medians of ``--repeat`` runs.

**The driver's ceiling**: ``Journal`` alone, fed synthetic records of the
size these runs produce in batches of ``ray_shards.BATCH`` (what a worker
returns per call), with a flush when due, as ``run_fetch`` does, then a
final flush: records per second, median of ``--repeat``. It bounds a
cluster of any size; ``docs/fetch.md`` ("Scaling out") holds the model.

Run it from the repository root::

    .venv/bin/python -m benchmarks.fetch_ray            # 20,000 requests x 3
    .venv/bin/python -m benchmarks.fetch_ray --quick    # 2,000 requests x 1

It writes ``fetch_ray.json`` and ``fetch_ray.md`` into ``--out`` (default
``benchmarks/results/``). Exit status: 0 when every run succeeded, 1 when
one failed.
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
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from benchmarks.fetch_throughput import _corun_build, _env

HERE: Final = Path(__file__).resolve().parent
ROOT: Final = HERE.parent
DEFAULT_OUT: Final = HERE / "results"
_TICK: Final = os.sysconf("SC_CLK_TCK")
MODES: Final = (("one machine", None), ("--ray, 1 worker", 1), ("--ray, 2 workers", 2))


def serve(hosts: int) -> int:
    """Serve ``Hello, World!`` on ``hosts`` free ports (printed as JSON) until stdin closes."""
    import asyncio

    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="Hello, World!")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ports = []
        for _ in range(hosts):
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            server = site._server
            assert server is not None
            ports.append(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        print(json.dumps({"ports": ports, "loop": loop_name}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    try:
        import uvloop

        loop_name = "uvloop"
        uvloop.run(main())
    except ImportError:
        loop_name = "asyncio"
        asyncio.run(main())
    return 0


# --------------------------------------------------------------------------- CPU accounting


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as stream:
            fields = stream.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime + stime


def _is_worker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as stream:
            return stream.read().startswith(b"ray::FetchWorker")
    except OSError:
        return False


class CpuSampler:
    """The CPU of this process's descendants but ``excluded``, sampled from ``/proc``:
    the fetch workers' (their title is ``ray::FetchWorker``) and the rest's."""

    def __init__(self, excluded: set[int]) -> None:
        self._excluded = excluded
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._workers: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, first: bool) -> None:
        for pid in _descendants(os.getpid()) - self._excluded:
            cpu = _cpu_seconds(pid)
            if cpu is None:
                continue
            # A process seen first during the run started in it: it counts from zero.
            self._first.setdefault(pid, cpu if first else 0.0)
            self._last[pid] = cpu
            if pid not in self._workers and _is_worker(pid):
                self._workers.add(pid)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._sample(False)

    def __enter__(self) -> CpuSampler:
        self._sample(True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(False)

    def seconds(self) -> tuple[float, float]:
        """CPU seconds of the fetch workers, and of the other processes (Ray's own)."""
        used = {pid: self._last[pid] - self._first[pid] for pid in self._last}
        workers = sum(cpu for pid, cpu in used.items() if pid in self._workers)
        return workers, sum(used.values()) - workers


# --------------------------------------------------------------------------- runs


def _run_fetch(
    input_path: str,
    requests: int,
    workdir: str,
    args: argparse.Namespace,
    workers: int | None,
    address: str,
) -> dict[str, Any]:
    output = os.path.join(workdir, "out.jsonl")
    summary_path = os.path.join(workdir, "summary.json")
    cmd = [sys.executable, "-m", "corun", "fetch", input_path, "--output", output]
    cmd += ["--concurrency", str(args.concurrency), "--per-host", str(args.concurrency)]
    cmd += ["--no-rate-limit", "--no-progress", "--summary-json", summary_path]
    if workers is not None:
        cmd += ["--ray", address, "--workers", str(workers)]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=ROOT
    )
    # The driver is measured exactly, from its rusage; the rest by sampling.
    with CpuSampler({os.getpid(), proc.pid, *args.server_pids}) as sampler:
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stdout is not None:
        proc.stdout.close()
    if proc.stderr is not None:
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        return {"ok": False, "error": " | ".join(stderr.strip().splitlines()[-3:])}
    with open(summary_path, encoding="utf-8") as stream:
        summary = json.load(stream)
    with open(output, "rb") as stream:
        lines = sum(1 for _ in stream)
    for path in (output, output + ".journal", summary_path):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
    driver_cpu = usage.ru_utime + usage.ru_stime
    worker_cpu, ray_cpu = sampler.seconds() if workers is not None else (0.0, 0.0)
    result: dict[str, Any] = {
        "ok": lines == requests and summary["by_status"] == {"200": requests},
        "error": None if lines == requests else f"{lines} output lines",
        "requests": requests,
        "elapsed_s": summary["elapsed_s"],
        "wall_s": wall,
        "rps": requests / summary["elapsed_s"],
        "driver_cpu_s": driver_cpu,
        "worker_cpu_s": worker_cpu,
        "ray_cpu_s": ray_cpu,
        "cpu_us_per_request": (driver_cpu + worker_cpu + ray_cpu) / requests * 1e6,
    }
    if summary.get("workers") is not None:
        result["rps_fetch_phase"] = sum(w["requests_per_s"] for w in summary["workers"])
        result["workers"] = summary["workers"]
    return result


def journal_ceiling(repeat: int, records: int, record_bytes: int) -> list[float]:
    """Records/s that ``Journal`` takes in batches of ``BATCH``, flushing when due."""
    from corun.fetch.journal import Journal
    from corun.fetch.ray_shards import BATCH

    template = {
        "line": 0,
        "id": None,
        "url": "http://127.0.0.1:40000/item/0",
        "method": "GET",
        "status": 200,
        "error": None,
        "error_kind": None,
        "attempts": 1,
        "elapsed_ms": 1.234,
        "body": "",
        "body_base64": False,
        "final_url": "http://127.0.0.1:40000/item/0",
        "content_type": "text/plain; charset=utf-8",
    }
    base = len(json.dumps(template, separators=(",", ":")))
    template["body"] = "x" * max(0, record_bytes - base)
    batches = [
        [(line, {**template, "line": line}) for line in range(start, start + BATCH)]
        for start in range(1, records + 1, BATCH)
    ]
    rates = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as workdir:
            journal = Journal(os.path.join(workdir, "j"), "0:x", records)
            started = time.perf_counter()
            for batch in batches:
                for line, record in batch:
                    if journal.record(line, record):
                        journal.flush()
            journal.flush()
            elapsed = time.perf_counter() - started
            journal.close()
        rates.append(len(batches) * BATCH / elapsed)
    return rates


# --------------------------------------------------------------------------- report


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [run[key] for run in runs if run.get("ok") and run.get(key) is not None]
    return statistics.median(values) if values else None


_PARTS: Final = ("driver", "worker", "ray")


def marginal(big: dict[str, Any], small: dict[str, Any]) -> dict[str, float]:
    """CPU µs per request beyond start-up, by part, from a long and a short run."""
    extra = big["requests"] - small["requests"]
    return {part: (big[f"{part}_cpu_s"] - small[f"{part}_cpu_s"]) / extra * 1e6 for part in _PARTS}


def markdown(doc: dict[str, Any]) -> str:
    def num(value: float | None, digits: int = 0) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    lines = [
        f"Date: {doc['date']}. Machine: {doc['cpus']} cores, CPython {doc['python']}, "
        f"{doc['corun_build']}, Ray {doc['ray']}.",
        "",
        f"{doc['requests']:,} requests per run over {doc['hosts']} hosts (ports of one local "
        f"aiohttp server on {doc['server_loop']}, its own process), concurrency "
        f"{doc['concurrency']} per process, {doc['repeat']} repetition(s), modes in turn; "
        f"medians. Ray: one local cluster ({doc['ray_cpus']} CPUs) shared by the runs. "
        f"Load average (1 min) {doc['load_average'][0]} before, {doc['load_average'][1]} after.",
        "",
        "| mode | requests/s | requests/s, fetch phase | elapsed (s) | client CPU per "
        "request (µs) |",
        "|---|--:|--:|--:|--:|",
    ]
    for mode in doc["modes"]:
        runs = mode["runs"]
        lines.append(
            f"| {mode['name']} | {num(_median(runs, 'rps'))} | "
            f"{num(_median(runs, 'rps_fetch_phase'))} | {num(_median(runs, 'elapsed_s'), 2)} | "
            f"{num(_median(runs, 'cpu_us_per_request'))} |"
        )
    lines += [
        "",
        f"CPU per request beyond start-up (µs): the runs above less runs of "
        f"{doc['short_requests']:,} requests, per request in between (medians). Workers: "
        "the `ray::FetchWorker` processes; Ray: its GCS, raylet and idle workers.",
        "",
        "| mode | driver | workers | Ray | total | start-up CPU (s) |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for mode in doc["modes"]:
        parts = {
            part: statistics.median(each[part] for each in mode["marginal"])
            if mode["marginal"]
            else None
            for part in _PARTS
        }
        total = sum(v for v in parts.values() if v is not None)
        lines.append(
            f"| {mode['name']} | {num(parts['driver'])} | {num(parts['worker'])} | "
            f"{num(parts['ray'])} | {num(total)} | {num(_median(mode['short'], 'startup_cpu_s'), 2)} |"
        )
    ceiling = doc["journal_ceiling"]
    lines += [
        "",
        f"The driver's journal ceiling: **{num(statistics.median(ceiling['rates']))} records/s** "
        f"(`Journal` alone, {ceiling['records']:,} records of {ceiling['record_bytes']} B in "
        f"batches of {ceiling['batch']}, median of {len(ceiling['rates'])}).",
        "",
    ]
    return "\n".join(lines)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fetch_ray")
    parser.add_argument("--serve", type=int, metavar="HOSTS", help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ray-cpus", type=int, default=2)
    parser.add_argument("--journal-records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="2,000 requests, once")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.repeat, args.journal_records = 2_000, 1, 20_000
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.serve is not None:
        return serve(args.serve)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only; before import
    import ray

    server = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fetch_ray", "--serve", str(args.hosts)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    assert server.stdout is not None and server.stdin is not None
    info = json.loads(server.stdout.readline())
    args.server_pids = {server.pid}
    ray.init(
        num_cpus=args.ray_cpus,
        object_store_memory=100 * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    address = ray.get_runtime_context().gcs_address
    modes: list[dict[str, Any]] = [
        {"name": name, "runs": [], "short": [], "marginal": []} for name, _ in MODES
    ]
    short = max(1, args.requests // 10)
    load_before = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory() as workdir:
            inputs = {}
            for size in (args.requests, short):
                inputs[size] = os.path.join(workdir, f"in-{size}.txt")
                with open(inputs[size], "w") as stream:
                    for n in range(size):
                        port = info["ports"][n % args.hosts]
                        stream.write(f"http://127.0.0.1:{port}/item/{n}\n")
            for repetition in range(args.repeat):
                for mode, (name, workers) in zip(modes, MODES, strict=True):
                    big = _run_fetch(
                        inputs[args.requests], args.requests, workdir, args, workers, address
                    )
                    small = _run_fetch(inputs[short], short, workdir, args, workers, address)
                    mode["runs"].append(big)
                    mode["short"].append(small)
                    if big["ok"] and small["ok"]:
                        each = marginal(big, small)
                        small["startup_cpu_s"] = sum(
                            small[f"{part}_cpu_s"] - each[part] * short / 1e6 for part in _PARTS
                        )
                        mode["marginal"].append(each)
                    shown = {k: v for k, v in big.items() if k != "workers"}
                    print(f"[{repetition + 1}/{args.repeat}] {name}: {shown}", flush=True)
        rates = journal_ceiling(args.repeat, args.journal_records, args.record_bytes)
        print(f"journal ceiling: {[round(r) for r in rates]} records/s", flush=True)
    finally:
        ray.shutdown()
        server.stdin.close()
        server.wait(10)
    from corun.fetch.ray_shards import BATCH

    doc = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "corun_build": _corun_build(),
        "ray": ray.__version__,
        "ray_cpus": args.ray_cpus,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "server_loop": info["loop"],
        "requests": args.requests,
        "short_requests": short,
        "hosts": args.hosts,
        "concurrency": args.concurrency,
        "repeat": args.repeat,
        "modes": modes,
        "journal_ceiling": {
            "rates": rates,
            "records": args.journal_records,
            "record_bytes": args.record_bytes,
            "batch": BATCH,
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fetch_ray.json").write_text(json.dumps(doc, indent=2) + "\n")
    text = markdown(doc)
    (args.out / "fetch_ray.md").write_text(text)
    print(text)
    runs = [run for mode in modes for run in mode["runs"] + mode["short"]]
    return 0 if all(run["ok"] for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
