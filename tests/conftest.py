"""Shared fixtures for corun's own test suite.

Every behaviour is written once and runs on every loop (uvloop's
``_TestTCP`` -> ``Test_UV_TCP`` / ``Test_AIO_TCP`` pattern): a test that
asks for the ``loop`` fixture is parametrized over ``corun`` and
``asyncio`` (the stdlib selector loop, which serves as the reference).
Tests of corun-only features are marked ``@pytest.mark.corun_only`` and get
only the corun parametrization.

Teardown is an assertion.  The ``loop`` fixture installs a recording
exception handler, closes the loop after the test and fails the test if

* the exception handler received a context the test did not consume
  (``errors.pop(...)``),
* a loop is still registered as running in this thread,
* file descriptors leaked (``/proc/self/fd`` is compared before/after),
* signal handlers or the signal wakeup fd were not restored,
* the coroutine origin tracking depth or the asyncgen hooks (set while a
  loop runs) were not restored.

Select the loops with ``CORUN_TEST_LOOPS=corun,asyncio`` (default: both).
When ``import corun`` fails the corun parametrization is skipped, so the
suite can be validated against the stdlib loop alone.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stale_build import stale_compiled_modules

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

try:
    import corun
except ImportError:
    if SRC.is_dir() and str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    try:
        import corun
    except ImportError as exc:  # not written yet, or broken
        corun = None  # type: ignore[assignment]
        CORUN_IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
    else:
        CORUN_IMPORT_ERROR = None
else:
    CORUN_IMPORT_ERROR = None

if corun is not None and not hasattr(corun, "new_event_loop"):
    # e.g. src/corun exists but is still an empty namespace package
    CORUN_IMPORT_ERROR = f"corun ({getattr(corun, '__path__', '?')}) has no new_event_loop yet"
    corun = None  # type: ignore[assignment]

ALL_KINDS = ("corun", "asyncio")
_selected = os.environ.get("CORUN_TEST_LOOPS")
SELECTED_KINDS = (
    tuple(k.strip() for k in _selected.split(",") if k.strip()) if _selected else ALL_KINDS
)

# A run started in the background by a shell without job control inherits
# SIGINT ignored, and Python then leaves it so: every test of an interrupt
# would hang (asyncio.Runner installs its handler only over Python's own).
# Python's handler goes back, and the children the tests start inherit the
# default, as under a terminal or a CI runner.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Signals whose disposition must be unchanged after every loop test.
WATCHED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def corun_env() -> dict[str, str]:
    """Environment for subprocesses that must import the same corun."""
    env = dict(os.environ)
    paths = []
    if corun is not None:
        paths.append(str(Path(corun.__file__).resolve().parent.parent))
    elif SRC.is_dir():
        paths.append(str(SRC))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("PYTHONASYNCIODEBUG", None)
    env.pop("PYTHONDEVMODE", None)
    return env


def loop_factory_for(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if kind == "corun":
        if corun is None:
            pytest.skip(f"corun is not importable ({CORUN_IMPORT_ERROR})")
        return corun.new_event_loop
    if kind == "asyncio":
        return asyncio.new_event_loop
    raise AssertionError(kind)


# ---------------------------------------------------------------- plugins


def pytest_configure(config: pytest.Config) -> None:
    if corun is not None and corun.COMPILED:
        runtime = Path(corun.__file__).resolve().parent / "runtime"
        # Only an in-tree (editable) build: an installed wheel's files carry
        # install times, not build times.
        stale = (
            [
                name
                for part in ("engine", "transports")
                for name in stale_compiled_modules(runtime / part)
            ]
            if runtime.is_relative_to(SRC)
            else []
        )
        if stale:
            raise pytest.UsageError(
                f"compiled modules older than their sources: {', '.join(stale)}; "
                "rebuild with `make install` (or test the pure build: `make test-pure`)"
            )
    config.addinivalue_line("markers", "corun_only: run only on the corun loop")
    # Registered here, where every process has it: see conformance/summary.py.
    from conformance import summary

    if not config.pluginmanager.is_registered(summary):
        config.pluginmanager.register(summary, "corun-conformance-summary")
    config.addinivalue_line(
        "markers", "serial: measures timing or a thread's wakes; `make test` runs it alone"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "loop_kind" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("corun_only"):
        kinds = [k for k in SELECTED_KINDS if k == "corun"]
    else:
        kinds = list(SELECTED_KINDS)
    params = []
    for kind in kinds:
        marks = []
        if kind == "corun" and corun is None:
            marks.append(pytest.mark.skip(reason=f"corun not importable: {CORUN_IMPORT_ERROR}"))
        params.append(pytest.param(kind, id=kind, marks=marks))
    if not params:
        params = [
            pytest.param("corun", id="corun", marks=pytest.mark.skip(reason="loop not selected"))
        ]
    metafunc.parametrize("loop_kind", params)


# What `make test` runs after the rest, in one process with nothing beside it:
# tests that measure a loop's lag, a thread's context switches or a share of
# the CPU, which a second test process on this machine's two cores would be
# part of. The rest runs in two processes (pytest-xdist).
SERIAL_PARTS = ("observe", "test_benchmarks_smoke.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        path = Path(str(item.path)).resolve()
        if path.is_relative_to(here) and path.relative_to(here).parts[0] in SERIAL_PARTS:
            item.add_marker(pytest.mark.serial)
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        # Only our own tests/test_*.py; tests/conformance has its own rules.
        if Path(str(item.path)).resolve().parent != here:
            continue
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(30))


# ---------------------------------------------------------------- helpers


class ExceptionRecorder:
    """A loop exception handler that records every context it receives.

    Tests that expect the handler to fire consume the contexts with
    :meth:`pop`; anything left over fails the test at teardown.
    """

    def __init__(self) -> None:
        self.contexts: list[dict[str, Any]] = []
        self.loops: list[asyncio.AbstractEventLoop] = []

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        self.loops.append(loop)
        self.contexts.append(context)

    def pop(self, message: str) -> dict[str, Any]:
        """Remove and return the first context whose message contains ``message``."""
        for i, ctx in enumerate(self.contexts):
            if message in str(ctx.get("message", "")):
                del self.contexts[i]
                del self.loops[i]
                return ctx
        raise AssertionError(
            f"exception handler was not called with {message!r}; got {self.describe()}"
        )

    def pop_all(self) -> list[dict[str, Any]]:
        out, self.contexts, self.loops = self.contexts, [], []
        return out

    def describe(self) -> str:
        return repr([(c.get("message"), c.get("exception")) for c in self.contexts])


def open_fds() -> dict[int, str]:
    fds: dict[int, str] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass  # the fd of the listdir itself, already closed
    return fds


def _get_wakeup_fd() -> int:
    if threading.current_thread() is not threading.main_thread():
        return -1
    old = signal.set_wakeup_fd(-1)
    if old != -1:
        signal.set_wakeup_fd(old)
    return old


class LoopChecker:
    """Creates loops of one kind and verifies them at teardown."""

    def __init__(self, kind: str, errors: ExceptionRecorder) -> None:
        self.kind = kind
        self.factory = loop_factory_for(kind)
        self.errors = errors
        self.loops: list[asyncio.AbstractEventLoop] = []
        gc.collect()
        self.fds_before = open_fds()
        self.signals_before = {s: signal.getsignal(s) for s in WATCHED_SIGNALS}
        self.wakeup_before = _get_wakeup_fd()
        self.origin_depth_before = sys.get_coroutine_origin_tracking_depth()
        self.asyncgen_hooks_before = sys.get_asyncgen_hooks()

    def new_loop(self) -> asyncio.AbstractEventLoop:
        loop = self.factory()
        loop.set_exception_handler(self.errors)
        self.loops.append(loop)
        return loop

    def finish(self) -> None:
        problems = []
        for loop in self.loops:
            if loop.is_running():
                problems.append(f"{loop!r} is still running at teardown")
                continue
            if not loop.is_closed():
                loop.close()
        running = asyncio.events._get_running_loop()
        if running is not None:
            problems.append(f"a running loop is still set for this thread: {running!r}")
            asyncio.events._set_running_loop(None)
        gc.collect()
        gc.collect()
        if self.errors.contexts:
            problems.append(f"unexpected exception handler calls: {self.errors.describe()}")
        # Observation's fds first: one it closes meanwhile (a closed loop's
        # alarm, on the watchdog's thread) is then listed, or gone from /proc.
        observes = _observe_fds()
        leaked = {
            fd: path
            for fd, path in open_fds().items()
            if fd not in self.fds_before and fd not in observes
        }
        if leaked:
            problems.append(f"file descriptors leaked: {leaked}")
        for s, before in self.signals_before.items():
            after = signal.getsignal(s)
            if _is_observe_dump(after) and before == signal.SIG_DFL:
                continue  # installed once per process by CORUN_OBSERVE=1's first loop
            if _is_observe_dump(before) and after == signal.SIG_DFL:
                # corun.observe's SIGTERM dump, replaced by a loop's handler,
                # whose removal puts back the default, as asyncio's does.
                signal.signal(s, before)
                continue
            if after != before:
                signal.signal(s, before)
                problems.append(f"signal {s!r} handler not restored: {before!r} -> {after!r}")
        wakeup = _get_wakeup_fd()
        if wakeup != self.wakeup_before:
            signal.set_wakeup_fd(self.wakeup_before)
            problems.append(f"signal wakeup fd not restored: {self.wakeup_before} -> {wakeup}")
        depth = sys.get_coroutine_origin_tracking_depth()
        if depth != self.origin_depth_before:
            sys.set_coroutine_origin_tracking_depth(self.origin_depth_before)
            problems.append(
                f"coroutine origin tracking depth not restored: "
                f"{self.origin_depth_before} -> {depth}"
            )
        hooks = sys.get_asyncgen_hooks()
        if hooks != self.asyncgen_hooks_before:
            sys.set_asyncgen_hooks(*self.asyncgen_hooks_before)
            problems.append(f"asyncgen hooks not restored: {self.asyncgen_hooks_before} -> {hooks}")
        if problems:
            pytest.fail("teardown checks failed:\n  " + "\n  ".join(problems), pytrace=False)


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def errors() -> ExceptionRecorder:
    """Recorder installed as the exception handler of every test loop."""
    return ExceptionRecorder()


@pytest.fixture(scope="session")
def _fast_gc() -> Iterator[None]:
    """Moves everything alive before the first loop test to the permanent
    generation, so each teardown's full ``gc.collect()`` only scans objects
    made since (pytest's own heap made it ~20 ms per collection)."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
def loop_checker(
    loop_kind: str, errors: ExceptionRecorder, _fast_gc: None
) -> Iterator[LoopChecker]:
    checker = LoopChecker(loop_kind, errors)
    yield checker
    checker.finish()


@pytest.fixture
def loop(loop_checker: LoopChecker) -> asyncio.AbstractEventLoop:
    """A fresh loop of the parametrized kind (closed and checked at teardown)."""
    return loop_checker.new_loop()


@pytest.fixture
def make_loop(loop_checker: LoopChecker) -> Callable[[], asyncio.AbstractEventLoop]:
    """Factory for additional loops of the same kind (also checked)."""
    return loop_checker.new_loop


@pytest.fixture
def loop_factory(loop_kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The bare factory (for asyncio.Runner and friends); no checks."""
    return loop_factory_for(loop_kind)


@pytest.fixture
def future_cls(loop_kind: str) -> type:
    return corun.Future if loop_kind == "corun" else asyncio.Future


@pytest.fixture
def task_cls(loop_kind: str) -> type:
    return corun.Task if loop_kind == "corun" else asyncio.Task


@pytest.fixture
def fds(loop: asyncio.AbstractEventLoop) -> Iterator[Callable[..., Any]]:
    """Tracks pipes/sockets made by a test and closes them before the loop check.

    ``fds.pipe()`` returns ``(r, w)`` non-blocking fds; ``fds.socketpair()``
    returns two non-blocking sockets; ``fds.close(x)`` closes early.
    """
    import socket

    class _Fds:
        def __init__(self) -> None:
            self.items: list[Any] = []

        def pipe(self) -> tuple[int, int]:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self.items += [r, w]
            return r, w

        def socketpair(self) -> tuple[socket.socket, socket.socket]:
            a, b = socket.socketpair()
            a.setblocking(False)
            b.setblocking(False)
            self.items += [a, b]
            return a, b

        def close(self, x: Any) -> None:
            if isinstance(x, int):
                os.close(x)
            else:
                x.close()
            self.items.remove(x)

    tracker = _Fds()
    yield tracker
    for item in tracker.items:
        try:
            if isinstance(item, int):
                os.close(item)
            else:
                item.close()
        except OSError:
            pass


@pytest.fixture
def subprocess_env(loop_kind: str) -> dict[str, str]:
    """os.environ for a child Python that must import this same corun.

    Skips the corun parametrization when corun is not importable.
    """
    loop_factory_for(loop_kind)
    return corun_env()


@pytest.fixture
def child_env() -> dict[str, str]:
    """os.environ for a child Python that imports this same corun, observation off.

    (CORUN_OBSERVE=1, as CI's observed pass sets it, makes a child that runs
    a loop other than corun's say so on stderr: corun.runtime.foreign.)
    """
    env = corun_env()
    env.pop("CORUN_OBSERVE", None)
    return env


@pytest.fixture
def restore_policy() -> Iterator[None]:
    """Restores the global asyncio event loop policy after the test."""
    policy = asyncio.get_event_loop_policy()
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(policy)


def _is_observe_dump(handler: object) -> bool:
    """Whether ``handler`` is corun.observe's SIGTERM dump."""
    dumps = sys.modules.get("corun.observe.dumps")
    return dumps is not None and isinstance(handler, dumps.SigtermDump)


def _observe_fds() -> frozenset[int]:
    """The fds corun.observe keeps for the whole process (CORUN_OBSERVE=1): not a test's."""
    monitor = sys.modules.get("corun.observe.monitor")
    return monitor.MONITOR.own_fds() if monitor is not None else frozenset()
