"""The load generators: build ``loadgen.c``, find ``wrk``, choose the fallbacks.

Echo: the C load generator (built here with ``cc`` on first use), else the
Python one. HTTP: ``wrk`` (the Makefile's bench target installs Debian's
package), else the C load generator in HTTP mode, else the Python one. Each
choice comes with a note that the report prints.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOADGEN_C = HERE / "loadgen.c"
BUILD_DIR = HERE / ".build"


@dataclass(frozen=True)
class Client:
    """A load generator command line, its kind and what to tell the reader."""

    tool: str  # "c", "python" or "wrk"
    cmd: tuple[str, ...]
    description: str
    note: str | None = None


PYTHON_CLIENT = Client(
    "python",
    (sys.executable, "-m", "benchmarks.loadgen"),
    "benchmarks/loadgen.py (Python, selectors/epoll, one process)",
)


def build_loadgen() -> tuple[Path | None, str | None]:
    """Compile ``loadgen.c`` if needed; return the binary (or None) and an error."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    for build_dir in (BUILD_DIR, Path(tempfile.gettempdir()) / "corun-bench-build"):
        binary = build_dir / "loadgen"
        if binary.exists() and binary.stat().st_mtime >= LOADGEN_C.stat().st_mtime:
            return binary, None
        if cc is None:
            return None, "no C compiler (cc) found"
        try:
            build_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if not os.access(build_dir, os.W_OK):
            continue
        tmp = build_dir / f"loadgen.{os.getpid()}.tmp"
        proc = subprocess.run(
            [cc, "-O2", "-Wall", "-o", str(tmp), str(LOADGEN_C)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            return None, f"cc failed: {proc.stderr.strip()[:500]}"
        os.replace(tmp, binary)
        return binary, None
    return None, "no writable build directory"


def wrk_version(path: str) -> str:
    """The first line wrk prints about itself (it has no --version that exits 0)."""
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    first = (proc.stdout or proc.stderr).strip().splitlines()
    return first[0] if first else "wrk"


def choose_clients(echo_choice: str, http_choice: str) -> tuple[Client, Client]:
    """The echo and HTTP clients for ``auto``/``c``/``python``/``wrk`` choices.

    Raises:
        RuntimeError: an explicitly requested client is unavailable.
    """
    binary: Path | None = None
    build_error: str | None = None
    if "c" in (echo_choice, http_choice) or "auto" in (echo_choice, http_choice):
        binary, build_error = build_loadgen()
    c_client = (
        Client(
            "c",
            (str(binary),),
            "benchmarks/loadgen.c (C, epoll, one thread, one request in flight per connection)",
        )
        if binary is not None
        else None
    )

    if echo_choice == "python":
        echo = PYTHON_CLIENT
    elif c_client is not None:
        echo = c_client
    elif echo_choice == "c":
        raise RuntimeError(f"the C load generator is unavailable: {build_error}")
    else:
        echo = Client(
            PYTHON_CLIENT.tool,
            PYTHON_CLIENT.cmd,
            PYTHON_CLIENT.description,
            f"the C load generator could not be built ({build_error}); the Python one "
            "may be the bottleneck",
        )

    wrk = shutil.which("wrk")
    if http_choice == "wrk" and wrk is None:
        raise RuntimeError("wrk is not installed (apt-get install wrk)")
    if http_choice in ("auto", "wrk") and wrk is not None:
        http = Client("wrk", (wrk,), f"{wrk_version(wrk)} (-t1, --latency)")
    elif http_choice == "python":
        http = PYTHON_CLIENT
    else:
        note = "wrk is not installed: HTTP load comes from our own keep-alive client instead"
        if http_choice == "c" and c_client is None:
            raise RuntimeError(f"the C load generator is unavailable: {build_error}")
        base = c_client or PYTHON_CLIENT
        http = Client(
            base.tool, base.cmd, base.description, note if http_choice == "auto" else None
        )
    return echo, http
