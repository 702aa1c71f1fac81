"""``corun ps/top/dump``, Prometheus and OpenTelemetry against a real corun process.

The child (``versions_child.py``) and the commands run on the interpreter that
runs the tests (``sys.executable``): the suite run on each Python from 3.11 to
3.15 proves each there, against that Python's own registry of tasks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from observed_child import TIMEOUT, child_env, run_cli

HERE = Path(__file__).resolve().parent
#: The child's tasks that wait all along; ``ticker`` steps every 5 ms besides.
WAITING = {"main", "sleeper-0", "sleeper-1", "sleeper-2", "waiter-0", "waiter-1"}
ALL = WAITING | {"ticker"}


@dataclass
class Child:
    proc: subprocess.Popen[str]
    env: dict[str, str]

    @property
    def pid(self) -> str:
        return str(self.proc.pid)


@contextmanager
def start(tmp_path: Path, *args: str) -> Iterator[Child]:
    """``versions_child.py ARGS``, observed, until it is told to exit at the end."""
    env = child_env(tmp_path, CORUN_OBSERVE="1")
    with open(tmp_path / "child.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "versions_child.py"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "ready\n", (tmp_path / "child.log").read_text()
        yield Child(proc, env)
        proc.stdin.close()
        assert proc.wait(TIMEOUT) == 0, (tmp_path / "child.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def child(tmp_path: Path) -> Iterator[Child]:
    with start(tmp_path) as running:
        yield running


def _ok(child: Child, *args: str) -> str:
    result = run_cli(*args, child.pid, env=child.env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def test_ps_lists_every_task_of_a_real_process(child: Child) -> None:
    doc = json.loads(_ok(child, "ps", "--json"))
    tasks = {task["name"]: task for task in doc["tasks"]}
    assert set(tasks) == ALL
    assert {name for name in WAITING if tasks[name]["state"] == "waiting"} == WAITING
    assert tasks["sleeper-0"]["waiting_on"].startswith("sleep until +")
    assert tasks["waiter-0"]["waiting_on"].startswith("event at 0x")
    assert all(tasks[f"waiter-{n}"]["parent"] == tasks["main"]["id"] for n in range(2))
    assert doc["loop"]["tasks"]["total"] == len(ALL)
    text = _ok(child, "ps")
    assert text.startswith(f"corun ps {child.pid}: tasks {len(ALL)} (")
    assert all(name in text for name in ALL)


def test_top_shows_the_busy_task_of_a_real_process(child: Child) -> None:
    text = _ok(child, "top", "--once", "--tasks", "--interval", "0.3")
    assert f"corun top {child.pid}" in text
    # Only the ticker steps between the two samples: it is the first row.
    rows = [line for line in text.splitlines() if any(name in line for name in ALL)]
    assert rows and "ticker" in rows[0], text


def test_top_groups_the_tasks_of_a_real_process(child: Child) -> None:
    lines = _ok(child, "top", "--once", "--interval", "0.3").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("GROUP"))
    # The ticker's group, by its coroutine function, is the busiest.
    assert lines[header + 1].split()[:2] == ["main.<locals>.ticker", "1"], lines


def test_dump_shows_the_spawns_of_a_real_process(child: Child) -> None:
    ids = {task["name"]: task["id"] for task in json.loads(_ok(child, "ps", "--json"))["tasks"]}
    doc = json.loads(_ok(child, "dump", "--json"))
    # (Names are not compared: before 3.13, asyncio.create_task names a task after its spawn.)
    spawned = {event["task"] for event in doc["events"] if event["kind"] == "spawn"}
    assert {ids[name] for name in ALL} <= spawned, doc["events"][:10]
    text = _ok(child, "dump")
    assert text.startswith(f"corun dump {child.pid}: ")


def _prometheus(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_prometheus_counts_the_tasks_of_a_real_process(child: Child) -> None:
    values = _prometheus(_ok(child, "ps", "--prometheus"))
    states = {
        name.split('"')[1]: value
        for name, value in values.items()
        if name.startswith("corun_tasks{")
    }
    assert sum(states.values()) == len(ALL), states
    assert states["waiting"] >= len(WAITING)
    assert values["corun_eventloop_steps_total"] > 0


def test_opentelemetry_counts_the_tasks_of_a_real_process(child: Child) -> None:
    assert child.proc.stdin is not None and child.proc.stdout is not None
    child.proc.stdin.write("otel\n")
    child.proc.stdin.flush()
    points = json.loads(child.proc.stdout.readline())
    assert sum(points["tasks"].values()) == len(ALL), points
    assert points["tasks"]["waiting"] >= len(WAITING)
    assert points["steps"] > 0


def _asyncio_ps(pid: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asyncio", "ps", pid],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _asyncio_ps_names(stdout: str) -> set[str]:
    """The task names of ``python -m asyncio ps``'s table (after its header and rule)."""
    lines = stdout.splitlines()
    assert lines[0].split()[:5] == ["tid", "task", "id", "task", "name"], stdout
    assert set(lines[1]) == {"-"}, stdout
    return {line.split()[2] for line in lines[2:]}


def test_python_m_asyncio_ps_cannot_see_corun_s_tasks(tmp_path: Path) -> None:
    """3.14's ``python -m asyncio ps PID`` lists native tasks only: none of corun's.

    It reads the process's memory from outside, walking the lists the C
    ``_asyncio`` module keeps of its own ``Task`` objects. corun's tasks are
    not those: asyncio keeps them in a ``WeakSet`` that the tool never reads.
    The same child on asyncio's loop shows the tool works here.
    """
    import importlib.util

    if sys.version_info < (3, 14):
        # No such tool before 3.14.
        assert importlib.util.find_spec("asyncio.tools") is None
        return
    for each in ("a", "c"):
        (tmp_path / each).mkdir(mode=0o700)
    with start(tmp_path / "a", "--asyncio") as on_asyncio:
        result = _asyncio_ps(on_asyncio.pid)
        assert result.returncode == 0, result.stdout + result.stderr
        assert _asyncio_ps_names(result.stdout) == ALL
    with start(tmp_path / "c") as on_corun:
        result = _asyncio_ps(on_corun.pid)
        assert result.returncode == 0, result.stdout + result.stderr
        # The header, and not one task.
        assert _asyncio_ps_names(result.stdout) == set()
        doc = json.loads(_ok(on_corun, "ps", "--json"))
        assert {task["name"] for task in doc["tasks"]} == ALL
