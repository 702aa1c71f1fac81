"""Start the inspection tests' child process (``inspect_child.py``) and run the real CLI.

Every child and command runs in a real process, with a timeout; the child's
stderr (its audit lines) goes to a file, so that a test that makes many
connections cannot fill a pipe and stall the server.
"""

from __future__ import annotations

import os
import pwd
import select
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import corun

HERE = Path(__file__).resolve().parent
CHILD = HERE / "inspect_child.py"
#: The directory holding the corun package these tests import, for children.
CORUN_PARENT = str(Path(corun.__file__).resolve().parent.parent)
#: Seconds any child or command of these tests may take.
TIMEOUT = 30.0


def child_env(xdg: Path | str | None, **extra: str) -> dict[str, str]:
    """An environment that imports this corun, with ``XDG_RUNTIME_DIR`` as given.

    Without ``CORUN_OBSERVE``: the suite also runs with it set, and the tests
    of ``corun run --observe`` need it unset.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "CORUN_OBSERVE")}
    paths = [CORUN_PARENT, str(HERE), sysconfig.get_paths()["purelib"]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    if xdg is not None:
        env["XDG_RUNTIME_DIR"] = str(xdg)
    env.update(extra)
    return env


@dataclass
class Observed:
    """A running child: its process, socket path and audit log."""

    proc: subprocess.Popen[str]
    path: str
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> str:
        """Close its stdin (the child closes its server and exits); return its log."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        return self.log.read_text()


def start_child(
    log: Path,
    *args: str,
    xdg: Path | str | None = None,
    user: str | None = None,
    python: str = sys.executable,
) -> Observed:
    """Start ``inspect_child.py`` with ``args`` and wait for its socket's path."""
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            [python, str(CHILD), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=child_env(xdg),
            user=user,
            cwd="/",
        )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], TIMEOUT)
    line = proc.stdout.readline().strip() if ready else ""
    if not line:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the child did not start: {log.read_text()}")
    return Observed(proc=proc, path=line, log=log)


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    user: str | None = None,
    python: str = sys.executable,
) -> subprocess.CompletedProcess[str]:
    """``python -m corun ARGS`` in a process of its own."""
    return subprocess.run(
        [python, "-m", "corun", *args],
        capture_output=True,
        text=True,
        env=env if env is not None else child_env(None),
        user=user,
        cwd="/",
        timeout=TIMEOUT,
    )


def one_line_error(result: subprocess.CompletedProcess[str], command: str) -> str:
    """Assert a failed command printed exactly one line, on stderr, and no traceback."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"corun {command}: ")
    return lines[0]


def nonexistent_pid() -> int:
    """A pid no process can have: above the kernel's ``pid_max``."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def wait_for(predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@cache
def python_for(user: str) -> str | None:
    """An interpreter that ``user`` may run and that imports this corun, or None.

    The venv's interpreter may sit under a home directory closed to others
    (``/root`` is 0700), so the interpreter it was made from, or the system's
    of the same version, may have to do.
    """
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        sys.executable,
        os.path.realpath(sys.executable),
        getattr(sys, "_base_executable", sys.executable),
        shutil.which(version, path="/usr/local/bin:/usr/bin:/bin"),
    ]
    pwd.getpwnam(user)
    for python in dict.fromkeys(c for c in candidates if c):
        try:
            probe = subprocess.run(
                [python, "-c", "import corun.observe.server, observe_docs"],
                env=child_env(None),
                user=user,
                cwd="/",
                capture_output=True,
                timeout=TIMEOUT,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return python
    return None
