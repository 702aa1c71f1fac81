"""Client CPU per request of ``corun fetch`` and ``corun.http`` against a plain script.

All programs fetch the same input (``--requests`` distinct URLs, each a 1 KiB
static file) from one **nginx** (Debian's, started on a loopback port with a
configuration written into a temporary directory: ``corun.testing.Nginx``),
at the same concurrency, each in its own process:

* **the plain script** (``baseline`` below), what one writes without corun:
  one ``aiohttp.ClientSession`` (``TCPConnector(limit=concurrency)``), one
  task per URL gated by ``asyncio.Semaphore(concurrency)``, one JSONL line per
  result written as it comes; no retries, no breaker, no journal. On the
  **stdlib loop** for the comparison, and on corun's loop and uvloop as
  reference rows (what a faster loop alone gives it).
* **corun.http, bare** (``bare`` below): the same script on corun's loop with
  ``corun.http.Client`` instead of aiohttp, every policy off (no retry,
  breaker, budget or bulkhead): the engine's own cost.
* **corun fetch**: ``python -m corun fetch INPUT --output OUT.jsonl
  --concurrency C --per-host C --no-rate-limit --no-progress``: every policy
  on but the per-host rate limit (total timeout, retry with budget, breaker
  and bulkhead per host), the SQLite journal, and the output written
  atomically at the end.

The measure is **client CPU per request**: the process's user + system CPU
(``os.wait4``'s rusage of that child, interpreter start-up included) divided
by the requests. nginx runs in its own processes, which are not counted.
requests/s is the requests over the program's own elapsed time (the scripts
time themselves from before the session opens to after the output is
closed; ``corun fetch`` reports ``elapsed_s`` in ``--summary-json``). The
programs rotate order between repetitions, and the medians are compared.
Target: corun fetch's CPU per request at most 1/1.5 of the plain script's on
the stdlib loop (a ratio of at least 1.5x).

Run it from the repository root::

    .venv/bin/python -m benchmarks.fetch_throughput            # 30,000 requests x 3
    .venv/bin/python -m benchmarks.fetch_throughput --quick    # 3,000 requests x 3

It writes ``fetch_throughput.json`` and ``fetch_throughput.md`` into
``--out`` (default ``benchmarks/results/``). Exit status: 0 when every run
succeeded (target met or not), 1 when a run failed, 2 for bad options.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import json
import os
import signal
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
BODY_SIZE: Final = 1024
SCHEMA_VERSION: Final = 2
#: nginx answers every /item/N with the one static file, uncompressed.
LOCATIONS: Final = """
        location /item/ {
            types { }
            default_type application/octet-stream;
            try_files /1k.bin =404;
        }
"""
#: Row order and labels of the report.
LABELS: Final = {
    "baseline": "plain script: aiohttp + Semaphore, stdlib loop",
    "baseline_corun": "plain script on corun's loop (reference)",
    "baseline_uvloop": "plain script on uvloop (reference)",
    "corun_http": "corun.http bare (no policies), corun's loop",
    "corun": "corun fetch (policies on, journal, output)",
}


# --------------------------------------------------------------------------- the scripts


def _loop_factory(loop_name: str) -> Any:
    if loop_name == "corun":
        import corun

        return corun.new_event_loop
    if loop_name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None  # the stdlib loop


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
    with asyncio.Runner(loop_factory=_loop_factory(loop_name)) as runner:
        done, errors, elapsed = runner.run(main())
    print(json.dumps({"done": done, "errors": errors, "elapsed_s": elapsed, "loop": loop_name}))
    return 0


def bare(input_path: str, output_path: str, concurrency: int) -> int:
    """The plain script with ``corun.http.Client`` (no policies) on corun's loop; prints JSON."""
    import corun
    from corun.http import Client, ClientOptions, HttpError

    options = ClientOptions(
        limit=concurrency, limit_per_host=concurrency, retry=None, budget=None, breaker=None
    )

    async def main() -> tuple[int, int, float]:
        with open(input_path, encoding="utf-8") as stream:
            urls = stream.read().splitlines()
        started = time.perf_counter()
        semaphore = asyncio.Semaphore(concurrency)
        errors = 0
        with open(output_path, "w", encoding="utf-8") as out:
            async with Client(options) as client:

                async def fetch(line: int, url: str) -> None:
                    nonlocal errors
                    record: dict[str, Any] = {"line": line, "url": url}
                    async with semaphore:
                        try:
                            response = await client.request("GET", url)
                            record["status"] = response.status
                            record["body"] = response.body.decode("utf-8", "replace")
                        except HttpError as exc:
                            errors += 1
                            record["error"] = repr(exc)
                    out.write(json.dumps(record) + "\n")

                await asyncio.gather(*(fetch(i, u) for i, u in enumerate(urls, 1)))
        return len(urls), errors, time.perf_counter() - started

    done, errors, elapsed = corun.run(main())
    print(json.dumps({"done": done, "errors": errors, "elapsed_s": elapsed, "loop": "corun"}))
    return 0


# --------------------------------------------------------------------------- the driver


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.fetch_throughput",
        description="Client CPU per request: corun fetch and corun.http vs a plain aiohttp script.",
    )
    p.add_argument("--requests", type=int, default=None, help="URLs per run (30000)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight (64)")
    p.add_argument("--repeat", type=int, default=3, help="repetitions (3)")
    p.add_argument("--quick", action="store_true", help="3,000 requests per run")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run (600)")
    p.add_argument(
        "--no-reference",
        action="store_true",
        help="skip the reference rows (the plain script on corun's loop and on uvloop)",
    )
    args = p.parse_args(argv)
    if args.requests is None:
        args.requests = 3_000 if args.quick else 30_000
    if args.requests < 1 or args.concurrency < 1 or args.repeat < 1:
        p.error("--requests, --concurrency and --repeat must be at least 1")
    return args


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    for name in ("PYTHONASYNCIODEBUG", "PYTHONTRACEMALLOC", "PYTHONDEVMODE"):
        env.pop(name, None)
    return env


def _compile_sources() -> None:
    """Write the byte code of corun and of this package, as an installation has it.

    Without it, a machine with ``PYTHONDONTWRITEBYTECODE`` set compiles every
    corun module again in every run, which the CPU figures would count, while
    the plain script's libraries come with their byte code from pip.
    """
    import corun

    folders = [str(Path(corun.__file__).resolve().parent), str(HERE)]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *folders], check=True, stdout=subprocess.DEVNULL
    )


def _count_lines(path: str) -> int:
    with open(path, "rb") as stream:
        return sum(1 for _ in stream)


def _run(cmd: list[str], workdir: str, timeout: float) -> dict[str, Any]:
    """Run ``cmd``; its exit status, output, wall time and own CPU (``os.wait4``)."""
    out_path = os.path.join(workdir, "stdout.txt")
    err_path = os.path.join(workdir, "stderr.txt")
    started = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=_env(), cwd=ROOT)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = -9
                return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
            time.sleep(0.01)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    with open(out_path, encoding="utf-8", errors="replace") as stream:
        stdout = stream.read()
    with open(err_path, encoding="utf-8", errors="replace") as stream:
        stderr = stream.read()
    if proc.returncode != 0:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return {"ok": False, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}
    return {
        "ok": True,
        "stdout": stdout,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
    }


def _measured(
    run: dict[str, Any], output: str, elapsed: float, errors: int, requests: int
) -> dict[str, Any]:
    lines = _count_lines(output)
    ok = lines == requests and errors == 0
    return {
        "ok": ok,
        "error": None if ok else f"{lines} output lines, {errors} errors",
        "elapsed_s": elapsed,
        "wall_s": run["wall_s"],
        "cpu_s": run["cpu_s"],
        "user_s": run["user_s"],
        "sys_s": run["sys_s"],
        "cpu_us_per_request": run["cpu_s"] / requests * 1e6,
        "errors": errors,
        "output_lines": lines,
        "rps": requests / elapsed,
    }


def _run_script(
    kind: str, input_path: str, workdir: str, args: argparse.Namespace, *extra: str
) -> dict[str, Any]:
    """One run of a script (``baseline`` or ``bare``) in its own process; its measurements."""
    output = os.path.join(workdir, f"{kind}.jsonl")
    cmd = [sys.executable, "-m", "benchmarks.fetch_throughput", kind, input_path, output]
    run = _run([*cmd, str(args.concurrency), *extra], workdir, args.timeout)
    if not run["ok"]:
        return run
    result = json.loads(run["stdout"].strip().splitlines()[-1])
    measured = _measured(run, output, result["elapsed_s"], result["errors"], args.requests)
    os.unlink(output)
    return measured


def run_baseline(
    input_path: str, workdir: str, args: argparse.Namespace, loop_name: str = "asyncio"
) -> dict[str, Any]:
    """The plain script on ``loop_name``."""
    return _run_script("baseline", input_path, workdir, args, loop_name)


def run_bare(input_path: str, workdir: str, args: argparse.Namespace) -> dict[str, Any]:
    """The plain script on ``corun.http``."""
    return _run_script("bare", input_path, workdir, args)


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
    run = _run(cmd, workdir, args.timeout)
    if not run["ok"]:
        return run
    with open(summary_path, encoding="utf-8") as stream:
        summary = json.load(stream)
    measured = _measured(
        run, output, summary["elapsed_s"], sum(summary["by_error"].values()), args.requests
    )
    for path in (output, output + ".journal", summary_path):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.unlink(path + suffix)
    return measured


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


def _nginx_version() -> str:
    from corun.testing.nginx import find_nginx

    proc = subprocess.run([find_nginx(), "-v"], capture_output=True, text=True, check=False)
    return (proc.stderr or proc.stdout).strip().removeprefix("nginx version: ")


def markdown(doc: dict[str, Any]) -> str:
    """The report as Markdown."""
    m = doc["machine"]
    s = doc["settings"]
    med = doc["medians"]

    def num(value: float | None, fmt: str = ",.0f") -> str:
        return "-" if value is None else format(value, fmt)

    ratio = doc["cpu_ratio"]
    met = "—" if ratio is None else ("yes" if ratio >= TARGET else "**no**")
    base_cpu = med["baseline"]["cpu_us_per_request"]
    lines = [
        f"Date: {doc['date']}. Machine: {m['cpu']}, {m['cores']} cores, {m['kernel']}, "
        f"CPython {m['python']}. {doc['corun_build']}.",
        "",
        f"{s['requests']:,} GETs of {BODY_SIZE} B per run from one local nginx "
        f"({doc['server']}, its own processes), concurrency {s['concurrency']}, "
        f"{s['repeat']} repetition(s), programs rotating; medians. CPU is the client process's "
        "user + system time (rusage), start-up included, per request.",
        "",
        "| program | CPU per request (µs) | vs the plain script (CPU) | requests/s | elapsed (s) |",
        "|---|--:|--:|--:|--:|",
    ]
    for name, label in LABELS.items():
        if name not in med:
            continue
        cpu = med[name]["cpu_us_per_request"]
        versus = f"{base_cpu / cpu:.2f}x" if cpu and base_cpu else "-"
        lines.append(
            f"| {label} | {num(cpu, '.0f')} | {versus} | {num(med[name]['rps'])} | "
            f"{num(med[name]['elapsed_s'], '.2f')} |"
        )
    lines += [
        "",
        f"corun fetch's CPU per request is **1/{num(ratio, '.2f')}** of the plain script's "
        f"(requests/s: {num(doc['rps_ratio'], '.2f')}x). Target ≤ 1/{TARGET}: {met}. "
        "Ratios > 1 mean corun costs less CPU per request.",
    ]
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
    if argv[:1] == ["baseline"]:
        return baseline(argv[1], argv[2], int(argv[3]), *argv[4:5])
    if argv[:1] == ["bare"]:
        return bare(argv[1], argv[2], int(argv[3]))
    args = _parse_args(argv)
    # On SIGTERM, unwind, so that nginx and the temporary directory go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from benchmarks.report import machine_info
    from corun.testing.nginx import Nginx

    load_start = os.getloadavg()[0]
    programs: list[tuple[str, Callable[..., dict[str, Any]]]] = [
        ("baseline", run_baseline),
        ("corun_http", run_bare),
        ("corun", run_corun),
    ]
    if not args.no_reference:
        for name in REFERENCE_LOOPS:
            if importlib.util.find_spec(name) is not None:

                def reference(*a: Any, _loop: str = name) -> dict[str, Any]:
                    return run_baseline(*a, loop_name=_loop)

                programs.append((f"baseline_{name}", reference))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in programs}
    _compile_sources()
    with tempfile.TemporaryDirectory(prefix="corun-fetch-bench-") as workdir:
        www = Path(workdir, "www")
        www.mkdir()
        (www / "1k.bin").write_bytes(b"x" * BODY_SIZE)
        with Nginx(Path(workdir, "nginx"), root=www, locations=LOCATIONS) as server:
            input_path = os.path.join(workdir, "urls.txt")
            with open(input_path, "w", encoding="utf-8") as stream:
                for i in range(args.requests):
                    stream.write(f"{server.url}/item/{i}\n")
            for rep in range(args.repeat):
                shift = rep % len(programs)
                for name, fn in programs[shift:] + programs[:shift]:
                    result = fn(input_path, workdir, args)
                    runs[name].append(result)
                    shown = (
                        f"{result['cpu_us_per_request']:.0f} us CPU/request, "
                        f"{result['rps']:,.0f} req/s"
                        if result.get("ok")
                        else f"FAILED: {result['error']}"
                    )
                    print(f"[rep {rep + 1}] {name}: {shown}", file=sys.stderr, flush=True)
    keys = ("cpu_us_per_request", "rps", "elapsed_s", "wall_s", "user_s", "sys_s")
    medians = {name: {k: _median(rs, k) for k in keys} for name, rs in runs.items()}

    def ratio(key: str, invert: bool) -> float | None:
        a, b = medians["corun"][key], medians["baseline"][key]
        if not a or not b:
            return None
        return b / a if invert else a / b

    cpu_ratio = ratio("cpu_us_per_request", True)
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
        "server": f"nginx {_nginx_version()}",
        "settings": {
            "requests": args.requests,
            "concurrency": args.concurrency,
            "repeat": args.repeat,
            "quick": args.quick,
        },
        "runs": runs,
        "medians": medians,
        "reference_ratios": {
            name: medians["baseline"]["cpu_us_per_request"] / medians[name]["cpu_us_per_request"]
            for name in runs
            if name.startswith("baseline_")
            and medians[name]["cpu_us_per_request"]
            and medians["baseline"]["cpu_us_per_request"]
        },
        "cpu_ratio": cpu_ratio,
        "rps_ratio": ratio("rps", False),
        "target": TARGET,
        "target_met": (cpu_ratio or 0.0) >= TARGET,
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
