"""Aggregation and output: medians, ratios, targets, results.json, results.md.

Ratios are oriented so that **> 1 means corun is better**: for throughput it
is corun / other, for time, latency and memory it is other / corun. "1.8x
faster" is then a ratio of 1.8 whichever way the metric runs.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
from pathlib import Path
from typing import Any

from benchmarks.cases import Case, Metric

README = Path(__file__).resolve().parent / "README.md"
README_START = "<!-- bench:results:start -->"
README_END = "<!-- bench:results:end -->"

# A client above this fraction of one core is (nearly) saturated.
CLIENT_SATURATED = 0.90
# Cores used by everything but the server and its client above which a run was disturbed.
OTHER_LOAD = 0.25


def machine_info() -> dict[str, Any]:
    """CPU model, cores, Python, kernel and load average of this machine."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "system": platform.system(),
    }


def ratio(metric: Metric, corun: float | None, other: float | None) -> float | None:
    """corun's advantage over ``other`` (> 1 = corun better), or None."""
    if corun is None or other is None or corun <= 0 or other <= 0:
        return None
    return corun / other if metric.higher_is_better else other / corun


def aggregate(case: Case, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The JSON entry for one case: per-loop runs, medians, ratios and target checks."""
    metrics: list[dict[str, Any]] = []
    for m in case.metrics:
        medians: dict[str, float | None] = {}
        values: dict[str, list[float]] = {}
        for loop_name, loop_runs in runs.items():
            vals = [
                float(r["metrics"][m.key])
                for r in loop_runs
                if r.get("ok") and m.key in r.get("metrics", {})
            ]
            values[loop_name] = vals
            medians[loop_name] = statistics.median(vals) if vals else None
        vs_asyncio = ratio(m, medians.get("corun"), medians.get("asyncio"))
        vs_uvloop = ratio(m, medians.get("corun"), medians.get("uvloop"))
        metrics.append(
            {
                "key": m.key,
                "label": m.label,
                "unit": m.unit,
                "higher_is_better": m.higher_is_better,
                "values": values,
                "median": medians,
                "vs_asyncio": vs_asyncio,
                "vs_uvloop": vs_uvloop,
                "target_vs_asyncio": m.target,
                "met": None if m.target is None or vs_asyncio is None else vs_asyncio >= m.target,
                "aim_vs_uvloop": m.aim,
                "aim_met": None if m.aim is None or vs_uvloop is None else vs_uvloop >= m.aim,
            }
        )
    warnings: list[str] = []
    cpu: dict[str, dict[str, float | None]] = {}
    others: list[float] = []
    if case.network:
        for loop_name, loop_runs in runs.items():
            ok = [r for r in loop_runs if r.get("ok")]
            client = [float(r["client"]["cpu_frac"]) for r in ok if "client" in r]
            server = [float(r["server"]["cpu_frac"]) for r in ok if "server" in r]
            other = [float(r["machine"]["other_cores"]) for r in ok if "machine" in r]
            cpu[loop_name] = {
                "client": statistics.median(client) if client else None,
                "server": statistics.median(server) if server else None,
                "other": statistics.median(other) if other else None,
            }
            others.extend(other)
            saturated = [c for c in client if c >= CLIENT_SATURATED]
            if saturated:
                warnings.append(
                    f"{case.case_id} on {loop_name}: the load generator used "
                    f"{max(saturated):.0%} of a core in {len(saturated)} of {len(client)} runs; "
                    "its req/s may be the client's limit, not the server's"
                )
            errors = sum(int(r["client"].get("errors", 0)) for r in ok if "client" in r)
            if errors:
                warnings.append(f"{case.case_id} on {loop_name}: {errors} client errors")
        disturbed = [o for o in others if o >= OTHER_LOAD]
        if disturbed:
            warnings.append(
                f"{case.case_id}: other processes used {OTHER_LOAD:g} cores or more in "
                f"{len(disturbed)} of {len(others)} runs (up to {max(disturbed):.2f})"
            )
    for loop_name, loop_runs in runs.items():
        failed = [r for r in loop_runs if not r.get("ok")]
        if failed:
            warnings.append(
                f"{case.case_id} on {loop_name}: {len(failed)} of {len(loop_runs)} runs failed "
                f"({failed[0].get('error', '?')})"
            )
    return {
        "benchmark": case.benchmark,
        "case": case.case_id,
        "title": case.title,
        "params": {k: v for k, v in case.params.items() if k != "client_cmd"},
        "network": case.network,
        "runs": runs,
        "metrics": metrics,
        "cpu": cpu,
        "warnings": warnings,
        "disturbed_runs": len([o for o in others if o >= OTHER_LOAD]),
        "network_runs": len(others),
    }


# --------------------------------------------------------------------------- Markdown


def _fmt_value(unit: str, v: float | None) -> str:
    if v is None:
        return "—"
    if unit in ("req/s", "B"):
        return f"{v:,.0f}"
    if v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def _fmt_ratio(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}x"


def _target_cells(m: dict[str, Any]) -> tuple[str, str]:
    parts: list[str] = []
    met: list[str] = []
    if m["target_vs_asyncio"] is not None:
        parts.append(f"≥ {m['target_vs_asyncio']:g}x asyncio")
        met.append({True: "yes", False: "**no**", None: "—"}[m["met"]])
    if m["aim_vs_uvloop"] is not None:
        parts.append(f"aim ≥ {m['aim_vs_uvloop']:g}x uvloop")
        met.append("aim " + {True: "yes", False: "no", None: "—"}[m["aim_met"]])
    return "; ".join(parts) or "—", "; ".join(met) or "—"


def markdown(doc: dict[str, Any]) -> str:
    """results.md: the header (machine, date, build), the table, CPU use, warnings."""
    mach = doc["machine"]
    loops = doc["loops"]
    lines = [
        f"Date: {doc['date']}. Machine: {mach['cpu']}, {mach['cores']} cores, "
        f"Linux {mach['kernel']}, {mach['implementation']} {mach['python']}. "
        f"Load average (1 min) at start/end: {doc['loadavg']['start']:.2f} / "
        f"{doc['loadavg']['end']:.2f}.",
        "",
        f"corun: {doc['corun']['build']}. Loops: {', '.join(doc['loop_versions'])}."
        + (
            " Skipped: " + "; ".join(f"{k} ({v})" for k, v in doc["skipped_loops"].items()) + "."
            if doc["skipped_loops"]
            else ""
        ),
        "",
        f"Repetitions: {doc['options']['repeat_micro']} per micro benchmark, "
        f"{doc['options']['repeat_network']} per network case"
        f"{' (--quick sizes)' if doc['options']['quick'] else ''}; every run a fresh process, "
        "loops alternating within each repetition; the table shows medians."
        + "".join(
            f" {label} client: {doc['clients'][key]}."
            for key, label in (("echo", "Echo"), ("http", "HTTP"))
            if doc["clients"][key]
        ),
        "",
        "Ratios: **> 1 means corun is better** (faster, more req/s, lower latency, less memory).",
        "",
        "| benchmark | metric | corun | asyncio | uvloop | corun vs asyncio "
        "| corun vs uvloop | target | met? |",
        "|---|---|--:|--:|--:|--:|--:|---|---|",
    ]
    for res in doc["results"]:
        for m in res["metrics"]:
            med = m["median"]
            target, met = _target_cells(m)
            cells = [
                res["title"],
                f"{m['label']} ({m['unit']})",
                _fmt_value(m["unit"], med.get("corun")),
                _fmt_value(m["unit"], med.get("asyncio")),
                _fmt_value(m["unit"], med.get("uvloop")),
                _fmt_ratio(m["vs_asyncio"]),
                _fmt_ratio(m["vs_uvloop"]),
                target,
                met,
            ]
            lines.append("| " + " | ".join(cells) + " |")
    net = [r for r in doc["results"] if r["network"]]
    if net:
        lines += [
            "",
            "CPU use during the network runs, medians in % of one core: the load generator "
            "over its measured window / the server over the whole run / everything else on "
            "the machine (other jobs, and kernel time not charged to either process).",
            "",
            "| case | " + " | ".join(f"{lp} client / server / other" for lp in loops) + " |",
            "|---|" + "--:|" * len(loops),
        ]
        for r in net:
            cells = []
            for lp in loops:
                c = r["cpu"].get(lp, {})
                cells.append(
                    " / ".join(
                        "—" if c.get(k) is None else f"{c[k]:.0%}"
                        for k in ("client", "server", "other")
                    )
                )
            lines.append(f"| {r['case']} | " + " | ".join(cells) + " |")
        disturbed = sum(r.get("disturbed_runs", 0) for r in net)
        runs = sum(r.get("network_runs", 0) for r in net)
        if disturbed:
            lines += [
                "",
                f"**{disturbed} of {runs} network runs were disturbed**: other processes used "
                f"{OTHER_LOAD:g} cores or more of the machine's {doc['machine']['cores']} during "
                "them, so those numbers reflect the contention as much as the loops.",
            ]
    warnings = list(doc["warnings"])
    for r in doc["results"]:
        warnings.extend(r["warnings"])
    if warnings:
        lines += ["", "Warnings:", ""]
        lines += [f"- {w}" for w in warnings]
    return "\n".join(lines) + "\n"


def update_readme(md: str, readme: Path = README) -> bool:
    """Replace the results section of benchmarks/README.md; False if it has no markers."""
    try:
        text = readme.read_text()
    except OSError:
        return False
    pattern = re.compile(re.escape(README_START) + ".*?" + re.escape(README_END), re.S)
    if not pattern.search(text):
        return False
    new = pattern.sub(lambda _: f"{README_START}\n{md}{README_END}", text, count=1)
    readme.write_text(new)
    return True
