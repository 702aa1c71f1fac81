"""The driver: runs every (case, loop, repetition) in a fresh worker process.

Within each repetition of a case the loops alternate, rotating the order by
one each time (corun, asyncio, uvloop; then asyncio, uvloop, corun; ...), so
slow drift of the machine spreads over all loops instead of hitting one.
Each worker prints one JSON line; the driver keeps every run, takes medians
per loop and writes ``results.json`` and ``results.md``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.cases import BENCHMARKS, Case, build_cases, select
from benchmarks.tools import Client, choose_clients

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results"
ALL_LOOPS = ("corun", "asyncio", "uvloop")
SCHEMA_VERSION = 1


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="corun's benchmark suite: corun vs asyncio vs uvloop, "
        "each run in a fresh process.",
    )
    p.add_argument(
        "--loops",
        default=None,
        help="comma-separated loops among corun,asyncio,uvloop (default: all importable)",
    )
    p.add_argument(
        "--only",
        default=None,
        help=f"comma-separated benchmarks ({', '.join(BENCHMARKS)}) or case-id prefixes "
        "(e.g. echo/protocol)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="repetitions per case (default: 5 for micro benchmarks, 3 for network)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="measured seconds per network run (default: 3, or 1 with --quick)",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    p.add_argument(
        "--echo-client",
        choices=("auto", "c", "python"),
        default="auto",
        help="echo load generator (default: C if cc works, else Python)",
    )
    p.add_argument(
        "--http-client",
        choices=("auto", "wrk", "c", "python"),
        default="auto",
        help="HTTP load generator (default: wrk if installed, else ours)",
    )
    p.add_argument(
        "--no-readme",
        action="store_true",
        help="do not update benchmarks/README.md (it is updated only by full runs "
        "that write to the default --out)",
    )
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS_JSON",
        help="run nothing: recompute the report of an earlier results.json into --out",
    )
    return p.parse_args(argv)


def available_loops() -> tuple[list[str], dict[str, str]]:
    """The loops that can be imported here, and why the others cannot."""
    ok: list[str] = []
    skipped: dict[str, str] = {}
    for name in ALL_LOOPS:
        if importlib.util.find_spec(name) is None:
            skipped[name] = "not installed"
        else:
            ok.append(name)
    return ok, skipped


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    # The workers import `benchmarks` from this checkout whatever the cwd.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.pop("PYTHONASYNCIODEBUG", None)
    env.pop("PYTHONTRACEMALLOC", None)
    return env


def run_worker(case: Case, loop: str, client: Client | None, timeout: float) -> dict[str, Any]:
    """One worker process for (case, loop); its JSON object, or a failure record."""
    params = dict(case.params)
    if client is not None:
        params["client_cmd"] = list(client.cmd)
        params["client_tool"] = client.tool
    spec = json.dumps({"loop": loop, "params": params})
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.worker", spec],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_worker_env(),
            cwd=ROOT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"worker timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    try:
        out: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"ok": False, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}
    if not out.get("ok") and not out.get("error"):
        out["error"] = (
            f"exit {proc.returncode}: {' | '.join(proc.stderr.strip().splitlines()[-3:])}"
        )
    out["wall_s"] = wall
    return out


def _progress(i: int, total: int, case: Case, loop: str, rep: int, out: dict[str, Any]) -> None:
    if out.get("ok"):
        first = case.metrics[0]
        value = out["metrics"].get(first.key)
        shown = f"{first.label} {value:,.1f} {first.unit}" if value is not None else "?"
        extra = ""
        if "client" in out:
            extra = f"  (client cpu {out['client']['cpu_frac']:.0%})"
        msg = f"{shown}{extra}"
    else:
        msg = f"FAILED: {out.get('error')}"
    print(f"[{i}/{total}] {case.case_id} {loop} rep {rep}: {msg}", file=sys.stderr, flush=True)


def _corun_build(results: list[dict[str, Any]]) -> dict[str, Any]:
    compiled: set[Any] = set()
    files: set[str] = set()
    for res in results:
        for r in res["runs"].get("corun", []):
            info = r.get("info", {})
            if "corun_compiled" in info:
                compiled.add(info["corun_compiled"])
                files.add(str(info.get("corun_core_file")))
    if not compiled:
        text = "not run"
    elif len(compiled) > 1:
        text = f"**the build changed during the run** (COMPILED seen: {sorted(map(str, compiled))})"
    else:
        value = next(iter(compiled))
        kind = {True: "compiled (mypyc)", False: "pure Python", None: "unknown build"}[value]
        text = f"{kind}, corun.COMPILED = {value}"
    return {"compiled_seen": sorted(map(str, compiled)), "core_files": sorted(files), "build": text}


def _loop_versions(loops: list[str], results: list[dict[str, Any]]) -> list[str]:
    versions: dict[str, str] = {}
    for res in results:
        for name, runs in res["runs"].items():
            for r in runs:
                info = r.get("info", {})
                if name == "corun" and info.get("corun_version"):
                    versions[name] = f"corun {info['corun_version']}"
                elif name == "uvloop" and info.get("uvloop_version"):
                    versions[name] = f"uvloop {info['uvloop_version']}"
    py = sys.version.split()[0]
    return [versions.get(n, f"asyncio (CPython {py})" if n == "asyncio" else n) for n in loops]


def _write_outputs(doc: dict[str, Any], out_dir: Path, *, no_readme: bool) -> None:
    """Write results.json and results.md; a full run into the default --out updates README."""
    md = report.markdown(doc)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out_dir / "results.md").write_text("# corun benchmark results\n\n" + md)
    print(md)
    print(f"wrote {out_dir / 'results.json'} and {out_dir / 'results.md'}", file=sys.stderr)
    if (
        doc["options"].get("full_run")
        and not no_readme
        and out_dir.resolve() == DEFAULT_OUT.resolve()
        and report.update_readme(md)
    ):
        print(f"updated {report.README}", file=sys.stderr)


def _render(path: Path, out_dir: Path, *, no_readme: bool) -> int:
    """Recompute medians, ratios and warnings of a results.json and write the outputs again."""
    doc: dict[str, Any] = json.loads(path.read_text())
    opts = doc["options"]
    cases = {c.case_id: c for c in build_cases(quick=opts["quick"], duration=opts["duration"])}
    doc["results"] = [report.aggregate(cases[r["case"]], r["runs"]) for r in doc["results"]]
    _write_outputs(doc, out_dir, no_readme=no_readme)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the suite; the entry point of ``python -m benchmarks`` (``make bench``)."""
    args = _parse_args(argv)
    all_cases = build_cases(quick=args.quick, duration=args.duration)
    try:
        cases = select(all_cases, args.only.split(",") if args.only else None)
    except ValueError as exc:
        print(f"benchmarks: {exc}", file=sys.stderr)
        return 2
    if args.render is not None:
        return _render(args.render, args.out, no_readme=args.no_readme)
    if args.list:
        for c in cases:
            print(f"{c.case_id:32} {c.title}")
        return 0

    importable, skipped = available_loops()
    if args.loops:
        loops = [name.strip() for name in args.loops.split(",") if name.strip()]
        unknown = [n for n in loops if n not in ALL_LOOPS]
        if unknown:
            print(f"benchmarks: unknown loop(s) {unknown}; known: {ALL_LOOPS}", file=sys.stderr)
            return 2
        missing = [n for n in loops if n not in importable]
        for n in missing:
            print(f"benchmarks: skipping {n}: {skipped[n]}", file=sys.stderr)
        skipped = {n: skipped[n] for n in missing}
        loops = [n for n in loops if n in importable]
    else:
        loops = importable
        for n, why in skipped.items():
            print(f"benchmarks: skipping {n}: {why}", file=sys.stderr)
    if not loops:
        print("benchmarks: no loop to run", file=sys.stderr)
        return 2
    if args.repeat is not None and args.repeat < 1:
        print("benchmarks: --repeat must be at least 1", file=sys.stderr)
        return 2

    warnings: list[str] = []
    echo_client: Client | None = None
    http_client: Client | None = None
    if any(c.network for c in cases):
        try:
            echo_client, http_client = choose_clients(args.echo_client, args.http_client)
        except RuntimeError as exc:
            print(f"benchmarks: {exc}", file=sys.stderr)
            return 2
        for chosen in (echo_client, http_client):
            if chosen.note:
                print(f"benchmarks: {chosen.note}", file=sys.stderr)
                warnings.append(chosen.note)
    if (os.cpu_count() or 1) <= 2 and any(c.network for c in cases):
        warnings.append(
            f"{os.cpu_count()} CPU cores: the server and the load generator share them (one "
            "core each at best), and anything else running on the machine takes from one of "
            "the two; network numbers are comparable within this run, not across machines"
        )

    repeat_micro = args.repeat or 5
    repeat_net = args.repeat or 3
    total = sum((repeat_net if c.network else repeat_micro) * len(loops) for c in cases)
    started = datetime.datetime.now(datetime.UTC)
    load_start = os.getloadavg()[0]
    results: list[dict[str, Any]] = []
    failures = 0
    i = 0
    for case in cases:
        reps = repeat_net if case.network else repeat_micro
        client: Client | None = None
        if case.network:
            client = http_client if case.benchmark == "http" else echo_client
        timeout = (
            float(case.params.get("warmup", 0)) + float(case.params.get("duration", 0)) + 120
            if case.network
            else 900.0
        )
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in loops}
        for rep in range(reps):
            shift = rep % len(loops)
            for loop in loops[shift:] + loops[:shift]:
                i += 1
                load = os.getloadavg()[0]
                out = run_worker(case, loop, client, timeout)
                out["loadavg_before"] = load
                out["rep"] = rep + 1
                runs[loop].append(out)
                failures += not out.get("ok")
                _progress(i, total, case, loop, rep + 1, out)
        results.append(report.aggregate(case, runs))

    finished = datetime.datetime.now(datetime.UTC)
    corun_build = _corun_build(results)
    if corun_build["compiled_seen"] and len(corun_build["compiled_seen"]) > 1:
        warnings.append(f"corun's build changed during the run: {corun_build['compiled_seen']}")
    full_run = (
        not args.quick
        and args.only is None
        and args.loops is None
        and args.repeat is None
        and args.duration is None
    )
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "started": started.isoformat(),
        "finished": finished.isoformat(),
        "machine": report.machine_info(),
        "loadavg": {"start": load_start, "end": os.getloadavg()[0]},
        "corun": corun_build,
        "loops": loops,
        "loop_versions": _loop_versions(loops, results),
        "skipped_loops": skipped,
        "options": {
            "quick": args.quick,
            "only": args.only,
            "repeat_micro": repeat_micro,
            "repeat_network": repeat_net,
            "duration": args.duration,
            "full_run": full_run,
        },
        "clients": {
            "echo": echo_client.description if echo_client else None,
            "http": http_client.description if http_client else None,
        },
        "results": results,
        "warnings": warnings,
    }
    _write_outputs(doc, args.out, no_readme=args.no_readme)
    return 1 if failures else 0
