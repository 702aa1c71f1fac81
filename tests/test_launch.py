"""``corun run`` behaves as ``python`` does (corun.launch), in real subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

RUN = [sys.executable, "-m", "corun", "run"]

FAILING = textwrap.dedent(
    """
    import asyncio

    async def inner():
        raise LookupError("boom")

    async def main():
        await inner()

    asyncio.run(main())
    """
)


def _run(
    args: list[str], cwd: Path, env: dict[str, str], **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env={**env, **extra}, capture_output=True, text=True, timeout=60
    )


def test_dash_m_finds_modules_in_the_current_directory_as_python_does(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "mymod.py").write_text(
        "import asyncio, json, sys\n"
        "async def kind():\n"
        "    return type(asyncio.get_running_loop()).__module__\n"
        "print(json.dumps({'path0': sys.path[0], 'argv': sys.argv, 'name': __name__,"
        " 'loop': asyncio.run(kind())}))\n"
    )
    corun = _run([*RUN, "-m", "mymod", "a", "b c"], tmp_path, child_env)
    python = _run([sys.executable, "-m", "mymod", "a", "b c"], tmp_path, child_env)
    assert corun.returncode == python.returncode == 0, corun.stderr
    seen, expected = json.loads(corun.stdout), json.loads(python.stdout)
    assert seen["loop"].startswith("corun.") and expected["loop"].startswith("asyncio.")
    for key in ("path0", "argv", "name"):
        assert seen[key] == expected[key], key


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["-m", "no_such_module"], "corun run: No module named no_such_module"),
        (
            ["-m", "no_such_package.child"],
            "corun run: Error while finding module specification for 'no_such_package.child' "
            "(ModuleNotFoundError: No module named 'no_such_package')",
        ),
        (
            ["-m", "pkg"],
            "corun run: No module named pkg.__main__; 'pkg' is a package and cannot be "
            "directly executed",
        ),
        (["pkg"], "corun run: can't find '__main__' module in 'pkg'"),
    ],
)
def test_what_python_cannot_run_is_one_line_and_status_1(
    child_env: dict[str, str], tmp_path: Path, args: list[str], line: str
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    result = _run([*RUN, *args], tmp_path, child_env)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [line]
    python = _run([sys.executable, *args], tmp_path, child_env)
    assert python.returncode == 1  # python says the same, in its own words


def test_a_directory_with_main_runs_with_itself_first_on_the_path(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text("import sys, helper\nprint(helper.VALUE, sys.argv[1:])\n")
    (app / "helper.py").write_text("VALUE = 'helper-ok'\n")
    result = _run([*RUN, "app", "x"], tmp_path, child_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "helper-ok ['x']"


def test_a_traceback_shows_the_users_frames_not_corun_run_or_the_loop(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "failing.py").write_text(FAILING)
    result = _run([*RUN, "failing.py"], tmp_path, child_env)
    python = _run([sys.executable, "failing.py"], tmp_path, child_env)
    assert result.returncode == python.returncode == 1
    frames = [
        line.strip() for line in result.stderr.splitlines() if line.strip().startswith("File")
    ]
    assert frames, result.stderr
    assert not [f for f in frames if "corun" in f or "runpy" in f], result.stderr
    user = [f.rsplit(", in ", 1)[1] for f in frames if "failing.py" in f]
    assert user == ["<module>", "main", "inner"]
    assert result.stderr.splitlines()[-1] == "LookupError: boom"
    # python shows asyncio's frames between the user's: so does corun run
    assert [f for f in frames if "failing.py" not in f], result.stderr


def test_an_exception_raised_by_corun_keeps_corun_s_frames(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    # Where corun itself raises, its frames say where: only frames that pass
    # the exception through are left out.
    (tmp_path / "closed.py").write_text(
        "import asyncio\nloop = asyncio.new_event_loop()\nloop.close()\nloop.call_soon(print)\n"
    )
    result = _run([*RUN, "closed.py"], tmp_path, child_env)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "RuntimeError: Event loop is closed"
    assert "closed.py" in result.stderr


def test_sys_excepthook_prints_the_uncaught_exception(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "hooked.py").write_text(
        "import sys\n"
        "sys.excepthook = lambda kind, exc, tb: print('HOOK', kind.__name__, exc, file=sys.stderr)\n"
        "raise KeyError('k')\n"
    )
    result = _run([*RUN, "hooked.py"], tmp_path, child_env)
    assert result.returncode == 1
    assert result.stderr == "HOOK KeyError 'k'\n"


def test_an_interrupted_program_ends_by_sigint_as_under_python(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "waits.py").write_text(
        "import asyncio\nprint('ready', flush=True)\nasyncio.run(asyncio.sleep(60))\n"
    )
    codes = []
    for command in (RUN, [sys.executable]):
        proc = subprocess.Popen(
            [*command, "waits.py"],
            cwd=tmp_path,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert "KeyboardInterrupt" in stderr
        codes.append(proc.returncode)
    assert codes == [-signal.SIGINT, -signal.SIGINT]


SPAWNS = textwrap.dedent(
    """
    import asyncio, multiprocessing, os

    async def kind():
        return type(asyncio.get_running_loop()).__module__.split(".")[0]

    def child(queue):
        queue.put((asyncio.run(kind()), os.environ.get("HIDDEN_SITECUSTOMIZE_RAN")))

    if __name__ == "__main__":
        context = multiprocessing.get_context("spawn")
        queue = context.Queue()
        process = context.Process(target=child, args=(queue,))
        process.start()
        print(asyncio.run(kind()), *queue.get())
        process.join()
    """
)


def test_spawned_python_workers_run_corun_and_the_sitecustomize_it_hides(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "spawns.py").write_text(SPAWNS)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nos.environ['HIDDEN_SITECUSTOMIZE_RAN'] = 'yes'\n"
    )
    pythonpath = os.pathsep.join([str(site), child_env["PYTHONPATH"]])
    result = _run([*RUN, "spawns.py"], tmp_path, child_env, PYTHONPATH=pythonpath)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["corun", "corun", "yes"]
    assert result.stderr == ""


FOREIGN = textwrap.dedent(
    """
    import asyncio

    async def kind():
        return type(asyncio.get_running_loop()).__name__

    print(asyncio.run(kind()))
    for _ in range(2):
        with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
            print(runner.run(kind()))
    """
)


def test_a_loop_that_is_not_corun_s_is_named_on_stderr_once(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "foreign.py").write_text(FOREIGN)
    result = _run([*RUN, "foreign.py"], tmp_path, child_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "EventLoop",
        "_UnixSelectorEventLoop",
        "_UnixSelectorEventLoop",
    ]
    [line] = result.stderr.splitlines()
    assert line.startswith(
        "corun: asyncio.unix_events._UnixSelectorEventLoop started running, not corun's loop, "
        "though `corun run` asked for corun"
    ), line
    assert "corun.new_event_loop" in line


def test_observation_asked_by_the_environment_names_a_foreign_loop_too(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "foreign.py").write_text("import corun\n" + FOREIGN)
    result = _run([sys.executable, "foreign.py"], tmp_path, child_env, CORUN_OBSERVE="1")
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.splitlines()
    assert "though CORUN_OBSERVE=1 asked for corun" in line
    quiet = _run([sys.executable, "foreign.py"], tmp_path, child_env)
    assert quiet.returncode == 0 and quiet.stderr == ""


STALLS = textwrap.dedent(
    """
    import asyncio, logging, sys, time

    if sys.argv[1] == "configured":
        logging.basicConfig(filename="app.log", level=logging.WARNING)

    async def handler():
        time.sleep(0.4)  # blocks the loop

    async def main():
        await asyncio.create_task(handler(), name="handler")
        await asyncio.sleep(0.3)

    asyncio.run(main())
    """
)


def test_a_stall_warning_reaches_stderr_when_no_logging_is_set_up(
    child_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "stalls.py").write_text(STALLS)
    bare = _run([*RUN, "--observe", "stalls.py", "bare"], tmp_path, child_env)
    assert bare.returncode == 0, bare.stderr
    stalls = [line for line in bare.stderr.splitlines() if "has blocked the event loop" in line]
    assert len(stalls) == 1, bare.stderr
    assert stalls[0].startswith("corun.observe: handler has blocked the event loop for ")
    assert "stalls.py:" in stalls[0]
    # A program that set logging up gets it through its handlers, not on stderr.
    configured = _run([*RUN, "--observe", "stalls.py", "configured"], tmp_path, child_env)
    assert configured.returncode == 0, configured.stderr
    assert "has blocked" not in configured.stderr
    assert "handler has blocked the event loop" in (tmp_path / "app.log").read_text()
