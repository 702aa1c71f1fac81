"""Smoke test of ``benchmarks/fetch_throughput.py``: a tiny run, then its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(
        not (ROOT / "benchmarks" / "fetch_throughput.py").exists(),
        reason="benchmarks/ not present",
    ),
    pytest.mark.timeout(120),
]


def test_quick_fetch_benchmark(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fetch_throughput",
            "--quick",
            "--requests",
            "300",
            "--repeat",
            "1",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "fetch_throughput.json").read_text())
    assert doc["benchmark"] == "fetch"
    assert doc["settings"]["requests"] == 300
    assert doc["server"].startswith("nginx")
    # The comparison, corun.http bare, and the reference rows: the plain script
    # on corun's loop (and on uvloop when it is installed).
    assert {"corun", "corun_http", "baseline", "baseline_corun"} <= set(doc["runs"])
    for name in doc["runs"]:
        [run] = doc["runs"][name]
        assert run["ok"] and run["output_lines"] == 300 and run["errors"] == 0
        assert doc["medians"][name]["rps"] > 0
        assert doc["medians"][name]["cpu_us_per_request"] > 0
    assert doc["cpu_ratio"] > 0 and doc["rps_ratio"] > 0
    assert set(doc["reference_ratios"]) == {n for n in doc["runs"] if n.startswith("baseline_")}
    md = (tmp_path / "fetch_throughput.md").read_text()
    assert "CPU per request" in md and "corun.http bare" in md
