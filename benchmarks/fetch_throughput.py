"""Throughput of ``corun fetch`` against a plain aiohttp-and-semaphore script.

Three processes per measured run, so that none shares an interpreter (or a
core's worth of Python) with another:

* **the server**: an aiohttp ``web.Application`` with one handler returning
  ``Hello, World!`` over keep-alive, on uvloop when it is installed (else the
  stdlib loop), so that the server is not the bottleneck. It is started once
  and serves every run (``serve`` below).
* **the baseline** (``baseline`` below): what one writes without corun, on the
  **stdlib loop**: ``asyncio.run`` over one ``aiohttp.ClientSession``
  (``TCPConnector(limit=concurrency)``), one task per URL gated by
  ``asyncio.Semaphore(concurrency)``, and one JSONL line per result written
  as it comes. No retries, no breaker, no journal.
* **corun fetch**: ``python -m corun fetch INPUT --output OUT.jsonl
  --concurrency C --per-host C --no-rate-limit --no-progress``, i.e. every
  policy on but the per-host rate limit (total timeout, retry with budget,
  breaker and bulkhead per host), the
  SQLite journal, and the output written atomically at the end.

Both fetch the same input file (``--requests`` distinct URLs on the one
server) at the same concurrency. requests/s is requests divided by the
run's own elapsed time (the baseline times itself from before its session
opens to after its output is closed; ``corun fetch`` reports ``elapsed_s``
in ``--summary-json``, which also covers writing the output). The process
wall time, interpreter start-up included, is recorded as well. The two
programs alternate (baseline, corun; corun, baseline; ...) for ``--repeat``
repetitions and the medians are compared. Target: corun fetch at least 1.5x
the baseline's requests/s.

Reference rows (unless ``--no-reference``): the same plain script on corun's
loop and on uvloop. They are not part of the target; they show how much a
faster loop alone gives a program whose time is aiohttp's client.

Run it from the repository root::

    .venv/bin/python -m benchmarks.fetch_throughput            # 50,000 requests x 3
    .venv/bin/python -m benchmarks.fetch_throughput --quick    # 2,000 requests x 1

It writes ``fetch_throughput.json`` and ``fetch_throughput.md`` into
``--out`` (default ``benchmarks/results/``). Exit status: 0 when every run
succeeded (target met or not), 1 when a run failed, 2 for bad options.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import functools
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve().parent
ROOT: Final = HERE.parent
DEFAULT_OUT: Final = HERE / "results"
TARGET: Final = 1.5
# Loops the plain script also runs on, as reference rows (when installed).
REFERENCE_LOOPS: Final = ("corun", "uvloop")
BODY: Final = b"Hello, World!"
SCHEMA_VERSION: Final = 1


# --------------------------------------------------------------------------- the server


def serve() -> int:
    """Serve ``Hello, World!`` on 127.0.0.1 (a free port, printed), until stdin closes."""
    from aiohttp import web

    async def hello(request: web.Request) -> web.Response:
        return web.Response(body=BODY, content_type="text/plain")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", hello)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port = runner.addresses[0][1]
        print(json.dumps({"port": port, "loop": loop_name}), flush=True)
        # The parent closes our stdin to stop us.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    try:
        import uvloop

        loop_name = f"uvloop {uvloop.__version__}"
        uvloop.run(main())
    except ImportError:
        loop_name = "asyncio"
        asyncio.run(main())
    return 0


# --------------------------------------------------------------------------- the baseline


def baseline(
    input_path: str, output_path: str, concurrency: int, loop_name: str = "asyncio"
) -> int:
    """The plain script: aiohttp + ``asyncio.Semaphore``; prints JSON.

    On the stdlib loop for the comparison; on corun's loop or uvloop (``loop_name``)
    for the reference rows, which show what a faster loop alone gives the script.
    """
    import aiohttp

    async def main() -> tuple[int, int, float]:
        with open(input_path, encoding="utf-8") as stream:
            urls = stream.read().splitlines()
        started = time.perf_counter()
        semaphore = asyncio.Semaphore(concurrency)
        errors = 0
        connector = aiohttp.TCPConnector(limit=concurrency)
        with open(output_path, "w", encoding="utf-8") as out:
            async with aiohttp.ClientSession(connector=connector) as session:

                async def fetch(line: int, url: str) -> None:
                    nonlocal errors
                    record: dict[str, Any] = {"line": line, "url": url}
                    async with semaphore:
                        try:
                            async with session.get(url) as response:
                                body = await response.read()
                                record["status"] = response.status
                                record["body"] = body.decode("utf-8", "replace")
                        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                            errors += 1
                            record["error"] = repr(exc)
                    out.write(json.dumps(record) + "\n")

                await asyncio.gather(*(fetch(i, u) for i, u in enumerate(urls, 1)))
        return len(urls), errors, time.perf_counter() - started

    # The stdlib loop, whatever the environment says, unless another is asked for.
    asyncio.set_event_loop_policy(None)
    factory: Any = None
    if loop_name == "corun":
        import corun

        factory = corun.new_event_loop
    elif loop_name == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        done, errors, elapsed = runner.run(main())
    print(json.dumps({"done": done, "errors": errors, "elapsed_s": elapsed, "loop": loop_name}))
    return 0


# --------------------------------------------------------------------------- the driver


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.fetch_throughput",
        description="corun fetch vs a plain aiohttp + semaphore script on the stdlib loop.",
    )
    p.add_argument("--requests", type=int, default=None, help="URLs per run (50000)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight (64)")
    p.add_argument("--repeat", type=int, default=None, help="repetitions (3; 1 with --quick)")
    p.add_argument("--quick", action="store_true", help="2,000 requests, one repetition")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run (600)")
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the reference rows (the plain script on corun's loop and on uvloop)",
    )
    args = p.parse_args(argv)
    if args.requests is None:
        args.requests = 2_000 if args.quick else 50_000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.requests < 1 or args.concurrency < 1 or args.repeat < 1:
        p.error("--requests, --concurrency and --repeat must be at least 1")
    return args


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop("PYTHONASYNCIODEBUG", None)
    env.pop("PYTHONTRACEMALLOC", None)
    return env


def _start_server() -> tuple[subprocess.Popen[str], int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fetch_throughput", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise RuntimeError(f"the server did not start (exit {proc.returncode})")
    info = json.loads(line)
    return proc, int(info["port"]), str(info["loop"])


def _stop_server(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _count_lines(path: str) -> int:
    with open(path, "rb") as stream:
        return sum(1 for _ in stream)


def _run(cmd: list[str], timeout: float) -> tuple[subprocess.CompletedProcess[str] | None, float]:
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT, check=False
        )
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - started
    return proc, time.perf_counter() - started


def _failure(proc: subprocess.CompletedProcess[str] | None, timeout: float) -> dict[str, Any]:
    if proc is None:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"ok": False, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}


def run_baseline(
    input_path: str, workdir: str, args: argparse.Namespace, loop_name: str = "asyncio"
) -> dict[str, Any]:
    """One run of the plain script on ``loop_name``, in its own process; its measurements."""
    output = os.path.join(workdir, "baseline.jsonl")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.fetch_throughput",
        "baseline",
        input_path,
        output,
        str(args.concurrency),
        loop_name,
    ]
    proc, wall = _run(cmd, args.timeout)
    if proc is None or proc.returncode != 0:
        return _failure(proc, args.timeout)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = _count_lines(output)
    os.unlink(output)
    return {
        "ok": lines == args.requests,
        "error": None if lines == args.requests else f"{lines} output lines",
        "elapsed_s": result["elapsed_s"],
        "wall_s": wall,
        "errors": result["errors"],
        "output_lines": lines,
        "rps": args.requests / result["elapsed_s"],
        "rps_wall": args.requests / wall,
    }


def run_corun(input_path: str, workdir: str, args: argparse.Namespace) -> dict[str, Any]:
    """One ``corun fetch`` run in its own process; its measurements."""
    output = os.path.join(workdir, "corun.jsonl")
    summary_path = os.path.join(workdir, "corun.summary.json")
    cmd = [
        sys.executable,
        "-m",
        "corun",
        "fetch",
        input_path,
        "--output",
        output,
        "--concurrency",
        str(args.concurrency),
        "--per-host",
        str(args.concurrency),
        # The default polite rate limit would measure the limit, not the fetcher.
        "--no-rate-limit",
        "--no-progress",
        "--summary-json",
        summary_path,
    ]
    proc, wall = _run(cmd, args.timeout)
    if proc is None or proc.returncode != 0:
        return _failure(proc, args.timeout)
    with open(summary_path, encoding="utf-8") as stream:
        summary = json.load(stream)
    lines = _count_lines(output)
    for path in (output, output + ".journal", summary_path):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
    errors = sum(summary["by_error"].values())
    return {
        "ok": lines == args.requests,
        "error": None if lines == args.requests else f"{lines} output lines",
        "elapsed_s": summary["elapsed_s"],
        "wall_s": wall,
        "errors": errors,
        "output_lines": lines,
        "rps": args.requests / summary["elapsed_s"],
        "rps_wall": args.requests / wall,
    }


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get("ok")]
    return statistics.median(values) if values else None


def _corun_build() -> str:
    proc = subprocess.run(
        [sys.executable, "-c", "import corun; print(corun.__version__, corun.COMPILED)"],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    version, _, compiled = proc.stdout.strip().partition(" ")
    kind = {"True": "compiled (mypyc)", "False": "pure Python"}.get(compiled, "unknown build")
    return f"corun {version}, {kind}"


def markdown(doc: dict[str, Any]) -> str:
    """The report as Markdown."""
    m = doc["machine"]
    s = doc["settings"]
    med = doc["medians"]

    def num(value: float | None, fmt: str = ",.0f") -> str:
        return "-" if value is None else format(value, fmt)

    ratio = doc["ratio"]
    met = "—" if ratio is None else ("yes" if ratio >= TARGET else "**no**")
    lines = [
        f"Date: {doc['date']}. Machine: {m['cpu']}, {m['cores']} cores, {m['kernel']}, "
        f"CPython {m['python']}. {doc['corun_build']}.",
        "",
        f"{s['requests']:,} requests per run to one local aiohttp server ({doc['server_loop']}, "
        f"its own process), concurrency {s['concurrency']}, {s['repeat']} repetition(s), "
        "programs alternating; medians.",
        "",
        "| program | requests/s | elapsed (s) | wall incl. start-up (s) | requests/s (wall) |",
        "|---|--:|--:|--:|--:|",
        f"| corun fetch (policies on, journal, output) | {num(med['corun']['rps'])} | "
        f"{num(med['corun']['elapsed_s'], '.2f')} | {num(med['corun']['wall_s'], '.2f')} | "
        f"{num(med['corun']['rps_wall'])} |",
        f"| aiohttp + Semaphore, stdlib loop | {num(med['baseline']['rps'])} | "
        f"{num(med['baseline']['elapsed_s'], '.2f')} | {num(med['baseline']['wall_s'], '.2f')} | "
        f"{num(med['baseline']['rps_wall'])} |",
        "",
        f"Ratio corun fetch / baseline (requests/s): **{num(ratio, '.2f')}x** "
        f"(wall: {num(doc['ratio_wall'], '.2f')}x). Target ≥ {TARGET}x: {met}.",
    ]
    references = doc.get("reference_ratios") or {}
    if references:
        lines += [
            "",
            "The same plain script on a faster loop (reference rows, not part of the target): "
            "what the loop alone is worth to a program whose time is aiohttp's client.",
            "",
            "| program | requests/s | elapsed (s) | vs the stdlib loop |",
            "|---|--:|--:|--:|",
        ]
        for name, value in references.items():
            loop_label = name.removeprefix("baseline_")
            lines.append(
                f"| aiohttp + Semaphore, {loop_label} | {num(med[name]['rps'])} | "
                f"{num(med[name]['elapsed_s'], '.2f')} | {value:.2f}x |"
            )
    failures = [
        f"- {name} run {i + 1}: {r['error']}"
        for name in doc["runs"]
        for i, r in enumerate(doc["runs"][name])
        if not r.get("ok")
    ]
    if failures:
        lines += ["", "Failed runs:", "", *failures]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the comparison; write ``fetch_throughput.json`` and ``.md``; 0 when all runs passed."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        return serve()
    if argv[:1] == ["baseline"]:
        return baseline(argv[1], argv[2], int(argv[3]), *argv[4:5])
    args = _parse_args(argv)
    from benchmarks.report import machine_info

    load_start = os.getloadavg()[0]
    programs: list[tuple[str, Callable[..., dict[str, Any]]]] = [
        ("baseline", run_baseline),
        ("corun", run_corun),
    ]
    if not args.no_reference:
        # The same plain script on a faster loop: what the loop alone is worth.
        for name in REFERENCE_LOOPS:
            if importlib.util.find_spec(name) is not None:
                programs.append(
                    (f"baseline_{name}", functools.partial(run_baseline, loop_name=name))
                )
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in programs}
    server, port, server_loop = _start_server()
    try:
        with tempfile.TemporaryDirectory(prefix="corun-fetch-bench-") as workdir:
            input_path = os.path.join(workdir, "urls.txt")
            with open(input_path, "w", encoding="utf-8") as stream:
                for i in range(args.requests):
                    stream.write(f"http://127.0.0.1:{port}/item/{i}\n")
            for rep in range(args.repeat):
                order = programs if rep % 2 == 0 else programs[::-1]
                for name, fn in order:
                    result = fn(input_path, workdir, args)
                    runs[name].append(result)
                    shown = (
                        f"{result['rps']:,.0f} req/s ({result['elapsed_s']:.2f} s)"
                        if result.get("ok")
                        else f"FAILED: {result['error']}"
                    )
                    print(f"[rep {rep + 1}] {name}: {shown}", file=sys.stderr, flush=True)
    finally:
        _stop_server(server)
    medians = {
        name: {k: _median(rs, k) for k in ("rps", "elapsed_s", "wall_s", "rps_wall")}
        for name, rs in runs.items()
    }

    def ratio(key: str) -> float | None:
        a, b = medians["corun"][key], medians["baseline"][key]
        return a / b if a and b else None

    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "benchmark": "fetch",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": {
            **machine_info(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg()[0],
        },
        "corun_build": _corun_build(),
        "server_loop": server_loop,
        "settings": {
            "requests": args.requests,
            "concurrency": args.concurrency,
            "repeat": args.repeat,
            "quick": args.quick,
        },
        "runs": runs,
        "medians": medians,
        "reference_ratios": {
            name: medians[name]["rps"] / medians["baseline"]["rps"]
            for name in runs
            if name.startswith("baseline_") and medians[name]["rps"] and medians["baseline"]["rps"]
        },
        "ratio": ratio("rps"),
        "ratio_wall": ratio("rps_wall"),
        "target": TARGET,
        "target_met": (ratio("rps") or 0.0) >= TARGET,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fetch_throughput.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = markdown(doc)
    (args.out / "fetch_throughput.md").write_text(md)
    print(md)
    ok = all(r.get("ok") for rs in runs.values() for r in rs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
