"""``corun run``: run a script or a module as ``python`` would, on corun.

What ``python script.py`` and ``python -m module`` give a program, this
gives it too: ``sys.path[0]`` (the script's directory, or the current one
for ``-m``), ``sys.argv``, ``__main__``, the exit status of ``SystemExit``
and of an uncaught exception (1), and an interrupted run's ``SIGINT``
status. A script that is missing, or a module that cannot be found, is a
one-line error, as from ``python``. An uncaught exception's traceback
starts at the user's code: the frames of ``corun run`` and ``runpy`` before
it are left out, and so are corun's own frames that only pass it through
(``run_until_complete``, a task's step) between two frames of the user's.

Python programs that the program starts (multiprocessing's spawned
workers, as uvicorn's and hypercorn's ``--workers``) run on corun too:
``corun run`` puts a ``sitecustomize`` of its own first on ``PYTHONPATH``
(``corun/_bootstrap``), which installs corun in each of them and then runs
the ``sitecustomize`` it hides, if there is one.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

from corun.runtime import foreign
from corun.runtime.runner import install

#: Set by ``corun run`` for the programs it starts (read by ``_bootstrap``).
ENV_RUN: Final = "CORUN_RUN"
_BOOTSTRAP: Final = str(Path(__file__).resolve().parent / "_bootstrap")
#: Frames left out of a user's traceback: ``corun run``'s, runpy's, and the loop's.
_HERE: Final = Path(__file__).resolve().parent
_MACHINERY_FILES: Final = frozenset(
    {runpy.__file__, "<frozen runpy>", str(_HERE / "cli.py"), str(_HERE / "launch.py")}
)
_RUNTIME_DIR: Final = str(_HERE / "runtime") + os.sep


class LaunchError(Exception):
    """The script or module cannot be run (a one-line message, as ``python`` gives)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def run(module: str | None, target: Sequence[str], *, observe: bool = False) -> int:
    """Run ``module`` (``-m``) or the script ``target[0]`` with ``target``'s arguments; the exit status."""
    if observe:
        # Before the target's first loop, which reads it; children inherit it.
        os.environ["CORUN_OBSERVE"] = "1"
    os.environ[ENV_RUN] = "1"
    _bootstrap_children()
    install()
    foreign.watch("`corun run`")
    if module is not None:
        _set_path0(os.getcwd())
        _check_module(module)
        sys.argv = [module, *target]
        return _run_user_code(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
    if not target:
        raise LaunchError("a script path (or -m MODULE) is required", 2)
    path, *args = target
    if not os.path.exists(path):
        raise LaunchError(f"can't open file {os.path.abspath(path)!r}: no such file", 2)
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "__main__.py")):
        raise LaunchError(f"can't find '__main__' module in {path!r}", 1)
    sys.argv = [path, *args]
    # As `python script.py`: the script's directory, or the directory run, comes first.
    _set_path0(path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path)))
    return _run_user_code(lambda: runpy.run_path(path, run_name="__main__"))


def _set_path0(entry: str) -> None:
    """Make ``entry`` the first entry of ``sys.path``, where ``python`` puts the script's."""
    if sys.flags.safe_path:  # python -P: no such entry
        return
    # The console script's own directory (a venv's bin/), or `python -m corun`'s
    # current directory, holds that place: the program's takes it.
    if sys.path:
        sys.path[0] = entry
    else:
        sys.path.insert(0, entry)


def _check_module(name: str) -> None:
    """Raise LaunchError as ``python -m`` would for a module it cannot run."""
    if name.startswith("."):
        raise LaunchError("Relative module names not supported", 1)
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:  # a parent package is missing
        raise LaunchError(
            f"Error while finding module specification for {name!r} (ModuleNotFoundError: {exc})",
            1,
        ) from None
    if spec is None:
        raise LaunchError(f"No module named {name}", 1)
    if spec.submodule_search_locations is not None:  # a package: its __main__ runs
        try:
            main = importlib.util.find_spec(f"{name}.__main__")
        except ModuleNotFoundError:
            main = None
        if main is None:
            raise LaunchError(
                f"No module named {name}.__main__; {name!r} is a package and cannot be "
                "directly executed",
                1,
            )


def child_started() -> None:
    """In a Python program that ``corun run``'s program started: corun as its loop too."""
    install()
    foreign.watch("`corun run`")


def _bootstrap_children() -> None:
    """Put corun's ``sitecustomize`` first on the ``PYTHONPATH`` that child interpreters inherit."""
    current = os.environ.get("PYTHONPATH", "")
    parts = [part for part in current.split(os.pathsep) if part and part != _BOOTSTRAP]
    os.environ["PYTHONPATH"] = os.pathsep.join([_BOOTSTRAP, *parts])


def _run_user_code(code: Callable[[], object]) -> int:
    try:
        code()
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        _report(exc)
        # As python does: end by the signal, so the parent sees an interrupt.
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException as exc:
        _report(exc)
        return 1
    return 0


def _report(exc: BaseException) -> None:
    """Print ``exc`` through ``sys.excepthook`` with the user's frames only."""
    _trim_chain(exc, set())
    sys.excepthook(type(exc), exc, exc.__traceback__)


def _trim_chain(exc: BaseException, seen: set[int]) -> None:
    if id(exc) in seen:
        return
    seen.add(id(exc))
    exc.__traceback__ = user_frames(exc.__traceback__)
    for linked in (exc.__cause__, exc.__context__):
        if linked is not None:
            _trim_chain(linked, seen)


def user_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without corun's and runpy's frames that only pass the exception through.

    corun's frames after the user's last one stay: there the exception was
    raised by corun, and they say where.
    """
    entries: list[TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    last_user = max((i for i, entry in enumerate(entries) if not _is_machinery(entry)), default=-1)
    if last_user < 0:
        return entries[0] if entries else None  # nothing of the user's: keep it all
    kept = [entry for i, entry in enumerate(entries) if i > last_user or not _is_machinery(entry)]
    rebuilt: TracebackType | None = None
    for entry in reversed(kept):
        rebuilt = TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def _is_machinery(entry: TracebackType) -> bool:
    filename = entry.tb_frame.f_code.co_filename
    # mypyc's frames name the source as built: src/corun/runtime/...
    return (
        filename in _MACHINERY_FILES
        or filename.startswith(_RUNTIME_DIR)
        or filename.startswith("src/corun/runtime/")
    )
