"""``corun demo`` end to end, in a subprocess: the real fetcher against the demo server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")

from corun.fetch.demo_server import DEFAULT_MIX

pytestmark = pytest.mark.timeout(120)

REQUESTS = 2000


def test_corun_demo_end_to_end(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    workdir = tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONASYNCIODEBUG"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "corun",
            "demo",
            "--requests",
            str(REQUESTS),
            "--no-progress",
            "--workdir",
            str(workdir),
            "--json",
            str(report_path),
        ],
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(report_path.read_text())
    summary = report["summary"]
    kinds = report["kinds"]
    server = report["server"]

    # One output line per request, in input order.
    lines = (workdir / "out.jsonl").read_text().splitlines()
    assert len(lines) == REQUESTS == report["output_lines"] == summary["total"] == summary["done"]
    assert [json.loads(line)["line"] for line in lines] == list(range(1, REQUESTS + 1))
    assert summary["complete"] is True

    expected = {k: round(REQUESTS * share) for k, share in DEFAULT_MIX.items()}
    assert {k: v["requests"] for k, v in kinds.items()} == expected

    # Every line of a live host ended with a 200, whatever its fault.
    for kind in ("ok", "flaky", "limited", "slow", "drop"):
        assert kinds[kind]["ok"] == expected[kind], (kind, kinds[kind])
    for kind in ("flaky", "limited", "drop"):
        assert kinds[kind]["retried"] == expected[kind], (kind, kinds[kind])
    assert kinds["ok"]["retries"] == 0
    assert summary["retries"] >= expected["flaky"] + expected["limited"] + expected["drop"]

    # Retry-After was honoured, as the server measured it, and each one paused its host.
    assert server["retry_after_early"] == 0
    assert server["retry_after_honoured"] == expected["flaky"]
    assert summary["host_pauses"] == expected["flaky"]

    # Each live host's limit adapted: it grew from 2, and was cut on the 429s.
    live = report["live_hosts"]
    assert len(live) == 3
    for host in live:
        stats = summary["hosts"][host]
        assert stats["peak"] > 2 and stats["decreases"] > 0, (host, stats)

    # The down host tripped its breaker; its lines were deferred, then given up.
    assert summary["breaker_trips"] >= 1
    down = kinds["down"]
    assert down["ok"] == 0
    assert sum(down["errors"].values()) == expected["down"]
    assert down["errors"].get("host_unavailable", 0) > expected["down"] // 2
    assert down["unsent"] > 0
    assert summary["by_error"].keys() <= {"host_unavailable", "connect"}
    assert summary["deferred"] >= down["errors"]["host_unavailable"]
    assert summary["hosts"][report["down_host"]]["unavailable"] is True

    # The story is printed.
    assert "What happened:" in proc.stdout
    assert "breaker trips: " in proc.stdout
    assert "Adaptive limits" in proc.stdout and "Deferred: " in proc.stdout
    assert "Elapsed:" in proc.stdout
    # Its own loop, read through corun.observe (on 3.12+ it once crashed here).
    assert "The demo's own loop (corun.observe): " in proc.stdout


def test_corun_demo_rejects_bad_options() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "corun", "demo", "--requests", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "--requests" in proc.stderr
