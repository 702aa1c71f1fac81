"""Ways in: asyncio.Runner(loop_factory=...), corun.run, corun.install and
the ``corun run script.py`` command (in real subprocesses)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest

# ---------------------------------------------------------------- Runner


def test_runner_runs_on_the_factory_loop(make_loop, loop_kind, task_cls):
    async def main():
        return asyncio.get_running_loop(), type(asyncio.current_task())

    with asyncio.Runner(loop_factory=make_loop) as runner:
        loop, ttype = runner.run(main())
        assert runner.get_loop() is loop
    assert ttype is task_cls
    assert loop.is_closed()
    if loop_kind == "corun":
        import corun

        assert isinstance(loop, corun.EventLoop)


def test_runner_application(make_loop):
    """One realistic main(): TaskGroup, timeout, wait_for, gather, executor, signals."""

    async def fetch(i):
        await asyncio.sleep(0.001 * i)
        return i

    async def main():
        loop = asyncio.get_running_loop()
        async with asyncio.TaskGroup() as tg:
            group = [tg.create_task(fetch(i)) for i in range(3)]
        gathered = await asyncio.gather(fetch(1), fetch(0))
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(60)
            timed_out = False
        except TimeoutError:
            timed_out = True
        waited = await asyncio.wait_for(fetch(2), timeout=1)
        in_thread = await loop.run_in_executor(None, lambda: threading.current_thread().name)
        got_signal = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, got_signal.set_result, "usr1")
        os.kill(os.getpid(), signal.SIGUSR1)
        sig = await asyncio.wait_for(got_signal, timeout=5)
        loop.remove_signal_handler(signal.SIGUSR1)
        return [t.result() for t in group], gathered, timed_out, waited, in_thread, sig

    with asyncio.Runner(loop_factory=make_loop) as runner:
        result = runner.run(main())
    group, gathered, timed_out, waited, in_thread, sig = result
    assert group == [0, 1, 2]
    assert gathered == [1, 0]
    assert timed_out is True
    assert waited == 2
    assert in_thread != threading.current_thread().name
    assert sig == "usr1"


def test_runner_close_cancels_leftovers_and_shuts_down_executor(make_loop):
    cleaned = []
    threads = []

    async def background():
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append("background")

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            cleaned.append("agen")

    async def main():
        asyncio.get_running_loop().create_task(background())
        g = agen()
        await g.__anext__()
        threads.append(
            await asyncio.get_running_loop().run_in_executor(None, threading.current_thread)
        )
        await asyncio.sleep(0)
        main.g = g  # keep the generator alive until shutdown_asyncgens

    with asyncio.Runner(loop_factory=make_loop) as runner:
        runner.run(main())
    assert sorted(cleaned) == ["agen", "background"]
    threads[0].join(5)
    assert not threads[0].is_alive(), "default executor was not shut down"
    del main.g


def test_runner_run_with_context(make_loop):
    var = contextvars.ContextVar("v", default="default")
    ctx = contextvars.copy_context()
    ctx.run(var.set, "ctx")

    async def main():
        return var.get()

    with asyncio.Runner(loop_factory=make_loop) as runner:
        assert runner.run(main(), context=ctx) == "ctx"
        assert runner.run(main()) == "default"


@pytest.mark.timeout(10)
def test_runner_sigint_cancels_main_and_raises_keyboard_interrupt(make_loop):
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not at its default handler in this process")
    reached = []

    async def main():
        asyncio.get_running_loop().call_later(0.01, os.kill, os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            reached.append("cancelled")
            raise

    with pytest.raises(KeyboardInterrupt), asyncio.Runner(loop_factory=make_loop) as runner:
        runner.run(main())
    assert reached == ["cancelled"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ---------------------------------------------------------------- corun.run / install


@pytest.mark.corun_only
def test_corun_run(loop_kind):
    import corun

    async def main(x):
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        return x + 1, loop, loop.get_debug(), type(asyncio.current_task())

    value, loop, debug, ttype = corun.run(main(1))
    assert debug is asyncio.coroutines._is_debug_mode()
    assert value == 2
    assert isinstance(loop, corun.EventLoop)
    assert ttype is corun.Task
    assert loop.is_closed()
    assert asyncio.events._get_running_loop() is None
    _, loop2, debug2, _ = corun.run(main(1), debug=True)
    assert debug2 is True
    assert loop2.is_closed()


@pytest.mark.corun_only
def test_corun_run_propagates_exception_and_cleans_up(loop_kind):
    import corun

    cleaned = []

    async def background():
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append(True)

    async def main():
        asyncio.get_running_loop().create_task(background())
        await asyncio.sleep(0)
        raise ValueError("from main")

    with pytest.raises(ValueError, match="from main"):
        corun.run(main())
    assert cleaned == [True]


@pytest.mark.corun_only
def test_corun_run_rejects_bad_calls(loop):
    import corun

    # Not a coroutine: rejected as asyncio.run rejects it, which raises
    # TypeError from 3.14 on (it takes any awaitable there), ValueError before.
    rejected = TypeError if sys.version_info >= (3, 14) else ValueError
    with pytest.raises(rejected):
        asyncio.run(lambda: None)
    with pytest.raises(rejected):
        corun.run(lambda: None)

    async def inner():
        pass

    async def main():
        c = inner()
        try:
            corun.run(c)
        finally:
            c.close()

    # Like asyncio.run: fail fast, before a second loop is even created.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="cannot be called from a running event loop"):
            loop.run_until_complete(main())
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


@pytest.mark.corun_only
def test_install_makes_asyncio_use_corun(loop_kind, restore_policy):
    import corun

    corun.install()
    assert isinstance(asyncio.get_event_loop_policy(), corun.EventLoopPolicy)

    async def main():
        return asyncio.get_running_loop(), type(asyncio.current_task())

    loop, ttype = asyncio.run(main())
    assert isinstance(loop, corun.EventLoop)
    assert ttype is corun.Task
    assert loop.is_closed()
    fresh = asyncio.new_event_loop()
    try:
        assert isinstance(fresh, corun.EventLoop)
    finally:
        fresh.close()


@pytest.mark.corun_only
def test_event_loop_policy_direct(loop_kind):
    import corun

    policy = corun.EventLoopPolicy()
    assert isinstance(policy, asyncio.AbstractEventLoopPolicy)
    lp = policy.new_event_loop()
    try:
        assert isinstance(lp, corun.EventLoop)
    finally:
        lp.close()


# ---------------------------------------------------------------- corun run script.py

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, pickle, sys

    import corun
    import sibling  # next to the script: sys.path[0] is the script's directory


    class Point:
        def __init__(self, x):
            self.x = x


    async def main():
        return {
            "loop_is_corun": isinstance(asyncio.get_running_loop(), corun.EventLoop),
            "task_type": type(asyncio.current_task()).__module__.split(".")[0]
                         + "." + type(asyncio.current_task()).__name__,
        }


    info = {"name": __name__, "argv": sys.argv, "file": __file__}
    if __name__ == "__main__":
        info.update(asyncio.run(main()))
        fresh = asyncio.new_event_loop()
        info["new_event_loop_is_corun"] = isinstance(fresh, corun.EventLoop)
        fresh.close()
        info["sibling"] = sibling.VALUE
        info["pickle"] = pickle.loads(pickle.dumps(Point(3))).x
        info["main_module_is_script"] = sys.modules["__main__"].__dict__ is globals()
        print(json.dumps(info))
        if len(sys.argv) > 1 and sys.argv[1] == "exit":
            raise SystemExit(int(sys.argv[2]))
        if len(sys.argv) > 1 and sys.argv[1] == "raise":
            raise LookupError("script failed")
        if len(sys.argv) > 1 and sys.argv[1] == "async-exit":
            async def bye():
                await asyncio.sleep(0)
                sys.exit(int(sys.argv[2]))
            asyncio.run(bye())
    """
)


def corun_commands():
    cmds = [pytest.param([sys.executable, "-m", "corun"], id="python-m-corun")]
    candidates = [
        Path(sys.executable).parent / "corun",
        Path(__file__).resolve().parent.parent / ".venv" / "bin" / "corun",
    ]
    found = next((str(c) for c in candidates if c.exists()), shutil.which("corun"))
    if found:
        cmds.append(pytest.param([found], id="console-script"))
    else:
        cmds.append(
            pytest.param(None, id="console-script", marks=pytest.mark.skip("no corun script"))
        )
    return cmds


@pytest.fixture(params=corun_commands())
def corun_cmd(request):
    return request.param


@pytest.fixture
def script(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    (tmp_path / "sibling.py").write_text("VALUE = 'sibling-ok'\n")
    return tmp_path / "script.py"


def run_script(cmd, script, *args, env):
    return subprocess.run(
        [*cmd, "run", script.name, *args],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.corun_only
def test_corun_run_script(corun_cmd, script, subprocess_env):
    proc = run_script(corun_cmd, script, "a", "--flag", "b c", env=subprocess_env)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["name"] == "__main__"
    assert info["argv"] == ["script.py", "a", "--flag", "b c"]
    assert Path(info["file"]).name == "script.py"
    assert info["loop_is_corun"] is True
    assert info["task_type"] == "corun.Task"
    assert info["new_event_loop_is_corun"] is True
    assert info["sibling"] == "sibling-ok"
    assert info["pickle"] == 3
    assert info["main_module_is_script"] is True


@pytest.mark.corun_only
@pytest.mark.parametrize("how", ["exit", "async-exit"])
def test_corun_run_script_exit_code(corun_cmd, script, subprocess_env, how):
    proc = run_script(corun_cmd, script, how, "3", env=subprocess_env)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["argv"] == ["script.py", how, "3"]


@pytest.mark.corun_only
def test_corun_run_script_unhandled_exception(corun_cmd, script, subprocess_env):
    proc = run_script(corun_cmd, script, "raise", env=subprocess_env)
    assert proc.returncode == 1
    assert "LookupError: script failed" in proc.stderr
    assert "Traceback" in proc.stderr


@pytest.mark.corun_only
def test_corun_run_missing_script(corun_cmd, tmp_path, subprocess_env):
    proc = subprocess.run(
        [*corun_cmd, "run", "does_not_exist.py"],
        cwd=tmp_path,
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "does_not_exist.py" in proc.stderr


@pytest.mark.corun_only
def test_corun_run_same_result_as_python(script, subprocess_env):
    """`corun run` and `python` agree on everything but the loop."""
    env = subprocess_env
    via_python = subprocess.run(
        [sys.executable, script.name, "x"],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    via_corun = run_script([sys.executable, "-m", "corun"], script, "x", env=env)
    assert via_python.returncode == via_corun.returncode == 0, (via_python.stderr, via_corun.stderr)
    p, c = json.loads(via_python.stdout), json.loads(via_corun.stdout)
    assert p["loop_is_corun"] is False and c["loop_is_corun"] is True
    for key in ("name", "argv", "sibling", "pickle", "main_module_is_script"):
        assert p[key] == c[key], key


TOP_LEVEL_SCRIPT = """\
import asyncio
import sys

import corun

loop = corun.new_event_loop() if sys.argv[1] == "corun" else asyncio.new_event_loop()


async def sleeper():
    await asyncio.sleep(3600)


async def boom():
    await asyncio.sleep(0)
    raise LookupError("failed")


async def main():
    task = asyncio.ensure_future(sleeper())
    failing = asyncio.ensure_future(boom())
    await asyncio.sleep(0.01)
    task.cancel()
    results = await asyncio.gather(task, failing, return_exceptions=True)
    return [type(r).__name__ for r in results]


# At the top level of a script: the interpreter's frame stack is one deep,
# which is what an entry point or a notebook cell may also give a loop.
print(loop.run_until_complete(main()))
loop.close()
"""


def test_cancel_and_fail_with_run_until_complete_at_a_scripts_top_level(
    loop_kind, tmp_path, subprocess_env
):
    (tmp_path / "top.py").write_text(TOP_LEVEL_SCRIPT)
    env = dict(subprocess_env)
    if loop_kind == "asyncio":
        # Observation asked for, the stdlib loop is named on stderr (corun.runtime.foreign).
        env.pop("CORUN_OBSERVE", None)
    proc = subprocess.run(
        [sys.executable, "top.py", loop_kind],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['CancelledError', 'LookupError']"
    assert proc.stderr == ""
