"""``make ecosystem``: run other libraries' own test suites on asyncio's loop and on corun's.

For each suite in ecosystem/suites.py: a cached venv with the pinned library, its
test dependencies and one corun wheel built from this checkout; the tests copied
from the library's source archive; a PostgreSQL or Redis server when the suite
needs one; then pytest once per loop with ecosystem/corun_plugin.py. The table
goes to stdout, ecosystem/results.md and ecosystem/results.json (on 3.11; on another
CPython, results-3.14.md and the like: `make ecosystem PY=3.14`).

Usage: python -m ecosystem.run [--suite NAME ...] [--jobs 1|2]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from ecosystem.report import LoopRun, SuiteResult, load_run, render_markdown, to_json
from ecosystem.suites import SUITES, Suite

REPO = Path(__file__).resolve().parent.parent
HERE = REPO / "ecosystem"
CACHE = REPO / ".ecosystem"
# Each CPython has its own wheel, venvs, run folders, logs and results; the downloaded
# sources are shared. 3.11, the first supported version, keeps the plain names.
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
VERSIONED = CACHE if PY == "3.11" else CACHE / f"py{PY}"
RESULTS_SUFFIX = "" if PY == "3.11" else f"-{PY}"
LOOPS = ("asyncio", "corun")
PIP = ("-m", "pip", "--disable-pip-version-check", "--quiet")
# Our plugin and the pytest options every run gets: no cache dir in the copied tests,
# and pytest-timeout's signal method (a hang fails that test, the run goes on).
PYTEST_BASE = ("-p", "corun_plugin", "-p", "no:cacheprovider", "--timeout-method=signal")


def log(message: str) -> None:
    """Progress on stderr, so stdout is only the table."""
    print(f"[ecosystem {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sh(*cmd: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
    """Run a command, raising on failure."""
    subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, check=True)


def pip_python() -> Path:
    """A python that has pip, for building corun's wheel and downloading sdists.

    The running python when it has pip (the machine's 3.11); otherwise (Debian's
    python3.14 has no pip outside a venv) a venv of it made for this, with ensurepip.
    """
    if importlib.util.find_spec("pip") is not None:
        return Path(sys.executable)
    venv = VERSIONED / "venvs" / "_pip"
    python = venv / "bin" / "python"
    if not python.exists():
        log(f"creating a venv with pip for {sys.executable} ({venv})")
        shutil.rmtree(venv, ignore_errors=True)
        sh(sys.executable, "-m", "venv", venv)
    return python


# --------------------------------------------------------------------------- corun wheel


def _corun_inputs() -> list[Path]:
    files = [REPO / "setup.py", REPO / "pyproject.toml", REPO / "README.md"]
    for path in sorted((REPO / "src").rglob("*")):
        if path.is_file() and path.suffix not in (".so", ".pyc") and "egg-info" not in str(path):
            files.append(path)
    return files


def build_corun_wheel() -> Path:
    """One compiled corun wheel for every venv, rebuilt only when the sources change.

    Built from a copy of the sources so that nothing (build/, in-place .so files)
    is added to, or picked up from, the checkout.
    """
    digest = hashlib.sha256()
    for path in _corun_inputs():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    key = digest.hexdigest()[:16]
    out = VERSIONED / "wheels" / key
    wheels = sorted(out.glob("corun-*.whl"))
    if wheels:
        return wheels[0]
    log(f"building the corun wheel ({key}; about two minutes)")
    with tempfile.TemporaryDirectory(prefix="corun-wheel-") as tmp:
        build = Path(tmp) / "corun"
        for path in _corun_inputs():
            target = build / path.relative_to(REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        sh(pip_python(), *PIP, "wheel", "--no-deps", "-w", out, build)
    return sorted(out.glob("corun-*.whl"))[0]


# --------------------------------------------------------------------------- venvs, tests


def ensure_venv(suite: Suite, wheel: Path) -> Path:
    """The suite's venv, (re)made when its pins change; corun reinstalled when the wheel does."""
    venv = VERSIONED / "venvs" / suite.name
    python = venv / "bin" / "python"
    deps_stamp = venv / "ecosystem-deps.json"
    wanted = json.dumps([*suite.packages(PY), "pytest-timeout==2.4.0"])
    if not python.exists() or not deps_stamp.exists() or deps_stamp.read_text() != wanted:
        log(f"{suite.name}: creating venv")
        shutil.rmtree(venv, ignore_errors=True)
        sh(sys.executable, "-m", "venv", venv)
        sh(python, *PIP, "install", *json.loads(wanted))
        deps_stamp.write_text(wanted)
    corun_stamp = venv / "ecosystem-corun.txt"
    if not corun_stamp.exists() or corun_stamp.read_text() != str(wheel):
        log(f"{suite.name}: installing {wheel.name}")
        sh(python, *PIP, "install", "--force-reinstall", "--no-deps", wheel)
        sh(python, *PIP, "install", wheel)  # corun's own dependencies, if missing
        corun_stamp.write_text(str(wheel))
    return python


def debian_archive() -> str:
    """The Debian archive this machine's apt uses (its main one, not security's)."""
    for path in sorted(Path("/etc/apt").glob("sources.list.d/*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1].rstrip("/")
    sources = Path("/etc/apt/sources.list")
    if sources.exists():
        for line in sources.read_text().splitlines():
            words = line.split()
            if words[:1] == ["deb"] and "security" not in line:
                return words[1].rstrip("/")
    raise RuntimeError("no Debian archive in apt's sources: cannot fetch websockets' tests")


def fetch_source(suite: Suite) -> Path:
    """The suite's source archive, extracted under .ecosystem/sources/."""
    source = suite.source
    extracted = CACHE / "sources" / source.archive
    if extracted.exists():
        return extracted
    downloads = CACHE / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    if source.debian_pool is None:
        log(f"{suite.name}: downloading the sdist {suite.library}")
        sh(
            pip_python(),
            *PIP,
            "download",
            "--no-binary",
            ":all:",
            "--no-deps",
            "-d",
            downloads,
            suite.library,
        )
        archive = downloads / f"{source.archive}.tar.gz"
    else:
        archive = downloads / source.debian_pool.rsplit("/", 1)[1]
        if not archive.exists():
            url = f"{debian_archive()}/pool/{source.debian_pool}"
            log(f"{suite.name}: downloading {url}")
            with urllib.request.urlopen(url, timeout=120) as response:
                data = response.read()
            if hashlib.sha256(data).hexdigest() != source.sha256:
                raise RuntimeError(f"{url}: sha256 mismatch")
            archive.write_bytes(data)
    tmp = extracted.with_name(extracted.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    (top,) = tmp.iterdir()
    top.rename(extracted)
    tmp.rmdir()
    return extracted


def prepare_tests(suite: Suite, source: Path, loop: str) -> Path:
    """A fresh run folder per loop with only the tests and pytest config copied in
    (the two loops may run at once, and tests write files next to themselves)."""
    workdir = VERSIONED / "work" / suite.name / loop
    shutil.rmtree(workdir, ignore_errors=True)
    for src, dst in suite.copy.items():
        target = workdir / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        if (source / src).is_dir():
            shutil.copytree(source / src, target)
        else:
            shutil.copy2(source / src, target)
    if not (workdir / "pyproject.toml").exists():
        # Without a config of its own pytest would climb to corun's pyproject.toml.
        (workdir / "pytest.ini").write_text("[pytest]\n")
    return workdir


# --------------------------------------------------------------------------- servers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def postgres_server() -> Iterator[tuple[dict[str, str], list[str]]]:
    """A throwaway PostgreSQL cluster on a unix socket, run as the `postgres` user
    (initdb refuses root); yields the libpq environment for it."""
    bindirs = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))
    if not bindirs:
        raise RuntimeError("PostgreSQL is not installed (make ecosystem installs it)")
    bindir = bindirs[-1]
    tmp = Path(tempfile.mkdtemp(prefix="corun-eco-pg-"))
    shutil.chown(tmp, "postgres", "postgres")
    data = tmp / "data"
    as_postgres = ("runuser", "-u", "postgres", "--")
    try:
        sh(*as_postgres, bindir / "initdb", "-D", data, "-U", "postgres", "-A", "trust",
           "--no-sync", "-E", "UTF8", "--locale=C")  # fmt: skip
        options = f"-k {tmp} -c listen_addresses='' -c fsync=off -c max_connections=200"
        sh(
            *as_postgres,
            bindir / "pg_ctl",
            "-D",
            data,
            "-l",
            tmp / "log",
            "-w",
            "-o",
            options,
            "start",
        )
        try:
            yield {"PGHOST": str(tmp), "PGUSER": "postgres", "PGDATABASE": "postgres"}, []
        finally:
            sh(*as_postgres, bindir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def redis_server() -> Iterator[tuple[dict[str, str], list[str]]]:
    """A throwaway redis-server on a free loopback port, without persistence."""
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="corun-eco-redis-"))
    cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", "--dir", str(tmp)]  # fmt: skip
    with open(tmp / "log", "wb") as logfile:
        server = subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {(tmp / 'log').read_text()}")
            time.sleep(0.1)
        yield {}, [f"--redis-url=redis://127.0.0.1:{port}/0"]
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


SERVERS = {"postgres": postgres_server, "redis": redis_server}


# --------------------------------------------------------------------------- running


def run_pytest(suite: Suite, python: Path, source: Path, loop: str) -> LoopRun:
    """One pytest run of the suite on one loop, with its own server if it needs one."""
    workdir = prepare_tests(suite, source, loop)
    report = VERSIONED / "results" / f"{suite.name}-{loop}.jsonl"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    logfile = VERSIONED / "logs" / f"{suite.name}-{loop}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    server = SERVERS[suite.server]() if suite.server else contextlib.nullcontext(({}, []))
    started = time.monotonic()
    timed_out = False
    with server as (server_env, server_args):
        env = {
            **os.environ,
            **suite.env,
            **server_env,
            "PYTHONPATH": str(HERE),
            "CORUN_ECOSYSTEM_LOOP": loop,
            "CORUN_ECOSYSTEM_REPORT": str(report),
        }
        env.pop("PYTHONASYNCIODEBUG", None)
        cmd = [str(python), "-m", "pytest", *PYTEST_BASE, f"--rootdir={workdir}", "-o", f"addopts={suite.addopts}",
               f"--timeout={suite.timeout}", *suite.pytest_args, *server_args]  # fmt: skip
        with open(logfile, "wb") as out:
            # Its own session, so a run past its deadline is killed with its children.
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
            try:
                proc.wait(timeout=suite.deadline * 60)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    run = load_run(report, loop)
    run.exit_code = proc.returncode
    run.seconds = time.monotonic() - started
    run.timed_out = timed_out
    counts = run.counts()
    log(
        f"{suite.name} on {loop}: {counts} exit {proc.returncode} in {run.seconds:.0f}s (log: {logfile})"
    )
    return run


def run_suite(suite: Suite, wheel: Path, jobs: int) -> SuiteResult:
    """Both loops of one suite; with jobs=2 at the same time (two cores)."""
    python = ensure_venv(suite, wheel)
    source = fetch_source(suite)
    runs: dict[str, LoopRun] = {}

    def one(loop: str) -> None:
        runs[loop] = run_pytest(suite, python, source, loop)

    if jobs > 1 and suite.parallel:
        threads = [threading.Thread(target=one, args=(loop,)) for loop in LOOPS]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for loop in LOOPS:
            one(loop)
    return SuiteResult(
        suite.name,
        suite.version,
        runs["asyncio"],
        runs["corun"],
        suite.own_loop_tests,
        dict(suite.differences_by_design),
    )


def main(argv: list[str] | None = None) -> int:
    """Run the selected suites, print and write the table; 1 if corun fails anything."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--suite", action="append", choices=[s.name for s in SUITES],
                        help="run only this suite (repeatable); default: all")  # fmt: skip
    parser.add_argument("--jobs", type=int, choices=(1, 2), default=2,
                        help="2: run a suite's asyncio and corun passes at once (default)")  # fmt: skip
    args = parser.parse_args(argv)
    selected = [s for s in SUITES if not args.suite or s.name in args.suite]
    for suite in selected:
        if suite.server == "postgres" and not list(
            Path("/usr/lib/postgresql").glob("*/bin/initdb")
        ):
            parser.error(
                "PostgreSQL is missing: `make ecosystem` installs it (apt-get install postgresql)"
            )
        if suite.server == "redis" and shutil.which("redis-server") is None:
            parser.error(
                "redis-server is missing: `make ecosystem` installs it (apt-get install redis-server)"
            )

    # On SIGTERM, unwind so the servers' `finally` stops them.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    wheel = build_corun_wheel()
    results = [run_suite(suite, wheel, args.jobs) for suite in selected]
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    build = wheel.name
    markdown = render_markdown(results, date, build)
    minutes = (time.monotonic() - started) / 60
    print(markdown)
    print(f"Whole run: {minutes:.1f} minutes.")
    if not args.suite:
        # Only a full run replaces the published results.
        (HERE / f"results{RESULTS_SUFFIX}.md").write_text(markdown)
        data = to_json(results, date, build)
        data["minutes"] = round(minutes, 1)
        (HERE / f"results{RESULTS_SUFFIX}.json").write_text(json.dumps(data, indent=2) + "\n")
    else:
        out = VERSIONED / "results"
        (out / "partial.md").write_text(markdown)
        (out / "partial.json").write_text(
            json.dumps(to_json(results, date, build), indent=2) + "\n"
        )
    bad = [r.name for r in results if not r.ok()]
    if bad:
        log(
            f"FAILED: {', '.join(bad)} (corun-only failures, a loop other than corun's, or a broken run)"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
