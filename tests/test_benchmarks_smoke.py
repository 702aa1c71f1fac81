"""Smoke test of the benchmark suite: a tiny run, then the JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not (ROOT / "benchmarks" / "__main__.py").exists(), reason="benchmarks/ not present"
)


def test_quick_run_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _run_module(
        "benchmarks",
        "--quick",
        "--only",
        "call_soon,timers",
        "--repeat",
        "1",
        "--loops",
        "corun,asyncio",
        "--out",
        str(out),
        timeout=60,
    )
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == 1
    assert doc["loops"] == ["corun", "asyncio"]
    for key in ("cpu", "cores", "python", "kernel"):
        assert key in doc["machine"]
    assert doc["corun"]["compiled_seen"], doc["corun"]
    assert [r["case"] for r in doc["results"]] == ["call_soon", "timers"]
    for res in doc["results"]:
        assert set(res["runs"]) == {"corun", "asyncio"}
        for runs in res["runs"].values():
            assert len(runs) == 1 and runs[0]["ok"], runs
        (metric,) = res["metrics"]
        assert metric["key"] == "time_ms" and metric["unit"] == "ms"
        assert metric["median"]["corun"] > 0 and metric["median"]["asyncio"] > 0
        assert metric["vs_asyncio"] == pytest.approx(
            metric["median"]["asyncio"] / metric["median"]["corun"]
        )
        assert metric["target_vs_asyncio"] == 1.8
        assert metric["met"] in (True, False)
    md = (out / "results.md").read_text()
    assert "| benchmark | metric | corun | asyncio | uvloop |" in md
    assert "call_soon" in md and "timers" in md


def test_quick_run_of_gather_loops_and_tls_on_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "results"
    _run_module(
        "benchmarks",
        "--quick",
        "--only",
        "gather,loops,tls",
        "--repeat",
        "1",
        "--loops",
        "corun,asyncio",
        "--out",
        str(out),
        timeout=120,
    )
    doc = json.loads((out / "results.json").read_text())
    assert [r["case"] for r in doc["results"]] == [
        "gather",
        "loops",
        "tls/server/1KiB/c10",
        "tls/client/1KiB/c10",
    ]
    for res in doc["results"]:
        for runs in res["runs"].values():
            assert len(runs) == 1 and runs[0]["ok"], runs
        for metric in res["metrics"]:
            assert metric["median"]["corun"] > 0 and metric["median"]["asyncio"] > 0, metric
    tls_server, tls_client = doc["results"][2:]
    assert [m["key"] for m in tls_server["metrics"]][-1] == "server_cpu_us"
    assert [m["key"] for m in tls_client["metrics"]][-1] == "client_cpu_us"


def test_observe_modes_writes_its_table(tmp_path: Path) -> None:
    _run_module(
        "benchmarks.observe_modes",
        "--steps",
        "20000",
        "--repeat",
        "1",
        "--out",
        str(tmp_path),
        timeout=120,
    )
    rows = json.loads((tmp_path / "observe_modes.json").read_text())
    assert [row["mode"] for row in rows] == ["off", "accounting", "on", "on, no hand-over"]
    assert all(row["ns_per_step_median"] > 0 for row in rows)
    assert rows[0]["vs_off_ns"] == 0
    assert "| on, no hand-over |" in (tmp_path / "observe_modes.md").read_text()


def test_observe_modes_network_switches_the_modes_under_one_load(tmp_path: Path) -> None:
    _run_module(
        "benchmarks.observe_modes",
        "--network",
        "echo/protocol/1KiB/c10",
        "--repeat",
        "2",
        "--out",
        str(tmp_path),
        timeout=120,
    )
    data = json.loads((tmp_path / "observe_modes_network.json").read_text())
    rows = data["echo/protocol/1KiB/c10"]["rows"]
    assert [row["mode"] for row in rows] == ["off", "accounting", "on"]
    for row in rows:
        # One window per round, each a real count of requests served.
        assert len(row["server_cpu_us"]) == 2 and all(v > 0 for v in row["server_cpu_us"])
        low, high = row["vs_off_paired_95"]
        assert low <= row["vs_off_paired"] <= high
    assert rows[0]["vs_off_paired"] == 0
    assert "| on |" in (tmp_path / "observe_modes_network.md").read_text()


def test_observe_ps_writes_its_table(tmp_path: Path) -> None:
    _run_module(
        "benchmarks.observe_ps",
        "--children",
        "1",
        "--asks",
        "1",
        "--out",
        str(tmp_path),
        timeout=120,
    )
    data = json.loads((tmp_path / "observe_ps.json").read_text())
    row = data["rows"]["this"]
    assert row["answers"] == 1 and row["ps_median_ms"] > 0
    assert row["bytes"] > 1_000_000  # 10,000 tasks, each with its stack
    assert len(row["worst_gaps_ms"]) == len(row["floors_ms"]) == 1
    # Every gap is either during the answer or outside it, and the worst is one of them.
    assert row["worst_gaps_ms"][0] >= max(row["worst_during_ms"][0], row["worst_outside_ms"][0])
    assert "| this | 1 |" in (tmp_path / "observe_ps.md").read_text()


def _run_module(module: str, *args: str, timeout: float) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_instructions_table_puts_corun_against_each_loop() -> None:
    from benchmarks import instructions
    from benchmarks.observe_instructions import operations_run

    document = {
        "date": "now",
        "python": "3.11.7",
        "results": {
            "echo/protocol": {"corun": 5_000.0, "asyncio": 20_000.0, "uvloop": 4_000.0},
            "ping_pong": {"corun": 10_000.0, "asyncio": 15_000.0},
        },
    }
    lines = instructions.render(document).splitlines()
    assert (
        lines[2]
        == "| workload | per | corun | asyncio | uvloop | corun vs asyncio | corun vs uvloop |"
    )
    assert lines[4] == "| echo/protocol | request | 5,000 | 20,000 | 4,000 | 4.00x | 0.80x |"
    assert lines[5] == "| ping_pong | round trip | 10,000 | 15,000 |  | 1.50x |  |"
    # The micro benchmarks run a tenth of their size first, to warm up.
    assert operations_run("ping_pong", 20_000) == 22_000
    assert operations_run("echo/streams", 1_000) == 1_000
