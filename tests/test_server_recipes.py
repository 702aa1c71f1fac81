"""Each recipe of docs/servers.md: the real server, started on corun, asked from inside a request.

Every test starts the server as a user would (a subprocess, its command
line), asks it over HTTP which loop runs the request, and stops it. The
wrong flag's test shows the one line that ``corun run`` prints instead of
running another loop silently.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ASGI_APP = textwrap.dedent(
    """
    import asyncio

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        loop = type(asyncio.get_running_loop())
        body = f"{loop.__module__}.{loop.__qualname__}".encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
    """
)

AIOHTTP_APP = textwrap.dedent(
    """
    import asyncio, sys
    from aiohttp import web

    async def handle(request):
        loop = type(asyncio.get_running_loop())
        return web.Response(text=f"{loop.__module__}.{loop.__qualname__}")

    app = web.Application()
    app.router.add_get("/", handle)
    loop = None
    if sys.argv[2] == "factory":
        import corun
        loop = corun.new_event_loop()
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), loop=loop, print=None)
    """
)

RUN = [sys.executable, "-m", "corun", "run"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _server(
    command: list[str], cwd: Path, port: int, env: dict[str, str]
) -> Iterator[tuple[str, Path]]:
    """Start ``command``; yield the loop a request runs on, and the server's stderr file."""
    errors = cwd / "server.err"
    with errors.open("w") as err:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                    yield answer.read().decode(), errors
                    return
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"{command} did not serve: {errors.read_text()[-3000:]}")
                time.sleep(0.1)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def asgi(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(ASGI_APP)
    return tmp_path


def _foreign_lines(errors: Path) -> list[str]:
    return [line for line in errors.read_text().splitlines() if "not corun's loop" in line]


CORUN_LOOP = "corun.runtime.loop.EventLoop"


def test_uvicorn_with_corun_s_loop_factory(child_env: dict[str, str], asgi: Path) -> None:
    port = _free_port()
    command = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    with _server([*command, "--loop", "corun:new_event_loop"], asgi, port, child_env) as (
        loop,
        errors,
    ):
        assert loop == CORUN_LOOP
        assert _foreign_lines(errors) == []


def test_uvicorn_under_corun_run_with_loop_none(child_env: dict[str, str], asgi: Path) -> None:
    port = _free_port()
    command = [*RUN, "-m", "uvicorn", "app:app", "--port", str(port), "--loop", "none"]
    with _server(command, asgi, port, child_env) as (loop, errors):
        assert loop == CORUN_LOOP
        assert _foreign_lines(errors) == []


def test_uvicorn_workers_each_run_corun(child_env: dict[str, str], asgi: Path) -> None:
    port = _free_port()
    command = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--workers", "2"]
    with _server([*command, "--loop", "corun:new_event_loop"], asgi, port, child_env) as (loop, _):
        assert loop == CORUN_LOOP


def test_uvicorn_s_own_loop_under_corun_run_is_named_with_the_fix(
    child_env: dict[str, str], asgi: Path
) -> None:
    port = _free_port()
    command = [*RUN, "-m", "uvicorn", "app:app", "--port", str(port), "--loop", "asyncio"]
    with _server(command, asgi, port, child_env) as (loop, errors):
        assert loop.startswith("asyncio.")
        [line] = _foreign_lines(errors)
        assert f"corun: {loop} started running" in line
        assert "uvicorn: pass --loop corun:new_event_loop" in line


def test_hypercorn_under_corun_run_and_its_spawned_worker(
    child_env: dict[str, str], asgi: Path
) -> None:
    # hypercorn runs the app in a worker process it spawns (--workers 1).
    port = _free_port()
    command = [*RUN, "-m", "hypercorn", "app:app", "--bind", f"127.0.0.1:{port}"]
    with _server(command, asgi, port, child_env) as (loop, errors):
        assert loop == CORUN_LOOP
        assert _foreign_lines(errors) == []


def test_gunicorn_with_corun_s_uvicorn_worker(child_env: dict[str, str], asgi: Path) -> None:
    port = _free_port()
    command = [sys.executable, "-m", "gunicorn", "app:app", "-b", f"127.0.0.1:{port}"]
    with _server([*command, "-k", "corun.servers.UvicornWorker"], asgi, port, child_env) as (
        loop,
        _,
    ):
        assert loop == CORUN_LOOP


def test_gunicorn_with_uvicorn_s_worker_under_corun_run_is_named_with_the_fix(
    child_env: dict[str, str], asgi: Path
) -> None:
    port = _free_port()
    command = [*RUN, "-m", "gunicorn", "app:app", "-b", f"127.0.0.1:{port}"]
    with _server([*command, "-k", "uvicorn_worker.UvicornWorker"], asgi, port, child_env) as (
        loop,
        errors,
    ):
        assert not loop.startswith("corun.")
        [line] = _foreign_lines(errors)
        assert "gunicorn: use corun's worker, -k corun.servers.UvicornWorker" in line


@pytest.mark.parametrize("how", ["corun-run", "factory"])
def test_aiohttp_run_app(child_env: dict[str, str], tmp_path: Path, how: str) -> None:
    (tmp_path / "web_app.py").write_text(AIOHTTP_APP)
    port = _free_port()
    python = RUN if how == "corun-run" else [sys.executable]
    with _server([*python, "web_app.py", str(port), how], tmp_path, port, child_env) as (
        loop,
        errors,
    ):
        assert loop == CORUN_LOOP
        assert _foreign_lines(errors) == []
