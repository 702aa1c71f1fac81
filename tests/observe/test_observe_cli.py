"""``corun ps``, ``top`` and ``dump`` against a real observed process, through the real CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from observe_docs import METRICS, dump_doc, ps_doc
from observed_child import (
    Observed,
    child_env,
    nonexistent_pid,
    one_line_error,
    run_cli,
    start_child,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("xdg")
    path.chmod(0o700)
    return path


@pytest.fixture(scope="module")
def observed(xdg: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    child = start_child(tmp_path_factory.mktemp("log") / "child.log", xdg=xdg)
    yield child
    child.stop()


@pytest.fixture
def unobserved() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(30)


def test_the_socket_sits_in_the_runtime_dir(observed: Observed, xdg: Path) -> None:
    assert observed.path == str(xdg / "corun" / f"{observed.pid}.sock")


def test_ps_prints_the_task_tree(observed: Observed, xdg: Path) -> None:
    result = run_cli("ps", str(observed.pid), env=child_env(xdg))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == f"corun ps {observed.pid}: tasks 5 (running 1, waiting 4)"
    names = [line.split()[2:4] for line in lines[5:]]
    assert names == [
        ["main", "Task"],
        ["├─", "worker-0"],
        ["│", "└─"],
        ["└─", "worker-1"],
        ["orphan", "Queue.get"],
    ]


def test_ps_finds_the_socket_from_the_process_environment(observed: Observed) -> None:
    # This command has no XDG_RUNTIME_DIR: the observed process's environment says where.
    result = run_cli("ps", str(observed.pid), "--json", env=child_env(None))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ps_doc(observed.pid)


def test_ps_json_is_the_processes_document(observed: Observed, xdg: Path) -> None:
    result = run_cli("ps", str(observed.pid), "--json", env=child_env(xdg))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ps_doc(observed.pid)


def test_ps_prometheus_passes_the_text_through(observed: Observed, xdg: Path) -> None:
    result = run_cli("ps", str(observed.pid), "--prometheus", env=child_env(xdg))
    assert result.returncode == 0, result.stderr
    assert result.stdout == METRICS


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[tuple[Observed, Path]]:
    """A child of its own, whose ``top`` samples start from the first."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    child = start_child(tmp_path / "child.log", xdg=xdg)
    yield child, xdg
    child.stop()


def test_top_once_prints_groups_from_two_samples(fresh: tuple[Observed, Path]) -> None:
    child, xdg = fresh
    env = child_env(xdg, COLUMNS="100")
    result = run_cli("top", str(child.pid), "--once", "--interval", "0.1", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"corun top {child.pid}: tasks 5 (running 1, waiting 4)"
    assert lines[4].split()[:4] == ["GROUP", "LIVE", "ENDED/S", "CPU"]
    assert [line.split()[:4] for line in lines[5:]] == [
        ["handle", "3", "100.0", "30.0%"],
        ["worker", "2", "0.0", "10.0%"],
        ["late", "0", "5.0", "0.2%"],
    ]


def test_top_once_tasks_prints_a_row_per_task(fresh: tuple[Observed, Path]) -> None:
    child, xdg = fresh
    env = child_env(xdg, COLUMNS="100")
    result = run_cli("top", str(child.pid), "--once", "--tasks", "--interval", "0.1", env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"corun top {child.pid}: tasks 5 (running 1, waiting 4)"
    assert lines[1].startswith("lag p50 100 µs  p90 400 µs  p99 2.3 ms  max 5.0 ms")
    assert lines[2] == "utilisation 12.0%  cpu 3.0%"
    assert lines[4].split() == ["ID", "TASK", "STATE", "CPU", "STEPS/S", "LONGEST", "WAKE", "P99"]
    # The child's clock moves one second per sample, so the rates are exact;
    # "late" appears in the second sample and counts from zero.
    assert [line.split()[:5] for line in lines[5:]] == [
        ["1", "busy", "running", "25.0%", "40.0"],
        ["4", "late", "waiting", "10.0%", "10.0"],
        ["2", "light", "waiting", "5.0%", "200.0"],
        ["3", "idle", "waiting", "0.0%", "0.0"],
    ]


def test_top_rows_option_limits_the_table(fresh: tuple[Observed, Path]) -> None:
    child, xdg = fresh
    result = run_cli(
        "top",
        str(child.pid),
        "--once",
        "--tasks",
        "--interval",
        "0.05",
        "--rows",
        "1",
        env=child_env(xdg),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[5].split()[1] == "busy"
    assert lines[6:] == ["… and 3 more tasks"]


def test_dump_prints_events_and_stalls(observed: Observed, xdg: Path) -> None:
    result = run_cli("dump", str(observed.pid), env=child_env(xdg))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"corun dump {observed.pid}: 2 stalls, 2 events"
    assert "  2026-09-21T14:13:21.000Z  worker-0 blocked the loop for 230.0 ms" in result.stdout
    assert "      /srv/app/work.py:90 checksum" in lines


def test_dump_json_is_the_processes_document(observed: Observed, xdg: Path) -> None:
    result = run_cli("dump", str(observed.pid), "--json", env=child_env(xdg))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document == dump_doc(observed.pid)
    assert set(document) >= {"events", "stalls"}
    assert set(document["stalls"][0]) >= {"task", "duration_ms", "cpu_ms", "stack"}


@pytest.mark.parametrize("command", ["ps", "top", "dump"])
def test_a_pid_that_does_not_exist(command: str) -> None:
    pid = nonexistent_pid()
    line = one_line_error(
        run_cli(command, str(pid), "--once" if command == "top" else "--json"), command
    )
    assert line == f"corun {command}: no process {pid}"


@pytest.mark.parametrize("command", ["ps", "top", "dump"])
def test_a_live_pid_without_observation(
    command: str, unobserved: subprocess.Popen[bytes], xdg: Path
) -> None:
    line = one_line_error(run_cli(command, str(unobserved.pid), env=child_env(xdg)), command)
    assert line == (
        f"corun {command}: process {unobserved.pid} does not run with observation on; "
        "start it with `corun run --observe ...` or with CORUN_OBSERVE=1 "
        "(if it was, it runs a loop that is not corun's, and says so on its stderr)"
    )


@pytest.mark.parametrize("pid", ["0", "-3", "abc"])
def test_a_pid_that_is_no_pid_is_a_usage_error(pid: str) -> None:
    result = run_cli("ps", "--", pid)
    assert result.returncode == 2
    assert "PID must be a positive integer" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Observed, Path]]:
    xdg = tmp_path_factory.mktemp("xdg-broken")
    child = start_child(tmp_path_factory.mktemp("log") / "broken.log", "--broken", xdg=xdg)
    yield child, xdg
    child.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ps"], "answered 'ps' with bad JSON"),
        (["ps", "--json"], "answered 'ps' with bad JSON"),
        (["dump"], "answered 'dump' with no JSON object"),
        (
            ["top", "--once", "--interval", "0.05"],
            "answered a 'top' document this corun cannot read",
        ),
    ],
)
def test_a_malformed_document_is_a_one_line_error(
    broken: tuple[Observed, Path], args: list[str], message: str
) -> None:
    child, xdg = broken
    command, *options = args
    line = one_line_error(run_cli(command, str(child.pid), *options, env=child_env(xdg)), command)
    assert message in line
    assert child.proc.poll() is None


def test_a_killed_process_leaves_a_socket_that_no_one_serves(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    child = start_child(tmp_path / "child.log", xdg=xdg)
    child.proc.kill()
    child.proc.wait(30)
    assert Path(child.path).exists()
    line = one_line_error(run_cli("ps", str(child.pid), env=child_env(xdg)), "ps")
    assert line == f"corun ps: no process {child.pid}"


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "show_env.py"
    script.write_text("import os, sys\nprint(os.environ.get('CORUN_OBSERVE'), sys.argv[1:])\n")
    return script


def test_run_observe_turns_observation_on_for_the_script(tmp_path: Path) -> None:
    result = run_cli("run", "--observe", str(_script(tmp_path)), "a", "--observe")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1 ['a', '--observe']\n"


def test_run_without_observe_leaves_it_off(tmp_path: Path) -> None:
    result = run_cli("run", str(_script(tmp_path)), "--observe")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "None ['--observe']\n"


def _live_top(child: Observed, xdg: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "corun", "top", str(child.pid), "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(xdg, COLUMNS="100"),
    )


def test_live_top_refreshes_until_interrupted(fresh: tuple[Observed, Path]) -> None:
    child, xdg = fresh
    top = _live_top(child, xdg)
    # Samples are counted by the child: wait for a few refreshes' worth.
    wait_for(lambda: child.log.read_text().count("request=top outcome=ok") >= 4)
    top.send_signal(signal.SIGINT)
    out, err = top.communicate(timeout=30)
    assert top.returncode == 0, err
    assert err == ""
    assert f"corun top {child.pid}: tasks 5" in out
    assert "handle" in out


def test_live_top_stops_with_one_line_when_the_process_goes(fresh: tuple[Observed, Path]) -> None:
    child, xdg = fresh
    top = _live_top(child, xdg)
    wait_for(lambda: child.log.read_text().count("request=top outcome=ok") >= 2)
    child.stop()
    _, err = top.communicate(timeout=30)
    assert top.returncode == 1
    assert err.splitlines() in (
        [f"corun top: no process {child.pid}"],
        [
            f"corun top: process {child.pid} does not run with observation on; "
            "start it with `corun run --observe ...` or with CORUN_OBSERVE=1 "
            "(if it was, it runs a loop that is not corun's, and says so on its stderr)"
        ],
    )
