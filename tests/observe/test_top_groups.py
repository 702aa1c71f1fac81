"""``corun top``'s task groups: ended tasks add up by coroutine function or label, in the loop.

The in-process tests read ``Observer.groups()`` on a real loop; the last one
runs a real FastAPI app under uvicorn on corun, loads two of its routes, and
reads ``corun top --once`` from another process, as a user would.
"""

from __future__ import annotations

import asyncio
import http.client
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from observed_child import TIMEOUT, child_env, run_cli

import corun
import corun.observe
from corun.observe import MAX_GROUP_LABEL, Observer, set_group
from corun.observe.views import _lifetimes
from corun.runtime.engine.accounting import MAX_GROUPS, OTHER_GROUP


def _observed(main: Any) -> Any:
    """Run ``main(observer)`` on a corun loop observed without a socket."""

    async def run() -> Any:
        observer = corun.observe.enable(serve=False)
        try:
            return await main(observer)
        finally:
            observer.close()

    return corun.run(run())


async def handle() -> None:
    await asyncio.sleep(0)


async def linger(seconds: float) -> None:
    await asyncio.sleep(seconds)


def test_ended_tasks_add_up_in_their_coroutine_s_group() -> None:
    async def main(observer: Observer) -> dict[str, Any]:
        await asyncio.gather(*(asyncio.create_task(handle()) for _ in range(200)))
        return observer.groups()

    group = _observed(main)["handle"]
    assert (group["live"], group["done"], group["steps"]) == (0, 200, 400)
    assert group["busy"] > 0.0
    assert sum(count for _, count in group["lifetimes"]) == 200


def test_live_tasks_count_in_their_group_until_they_end() -> None:
    async def main(observer: Observer) -> tuple[dict[str, Any], dict[str, Any]]:
        tasks = [asyncio.create_task(linger(3600)) for _ in range(3)]
        await asyncio.sleep(0)
        live = observer.groups()["linger"]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return live, observer.groups()["linger"]

    live, ended = _observed(main)
    assert (live["live"], live["done"], live["steps"]) == (3, 0, 3)
    assert (ended["live"], ended["done"], ended["steps"]) == (0, 3, 6)


def test_a_group_s_lifetimes_are_its_tasks_spawn_to_end_times() -> None:
    async def main(observer: Observer) -> dict[str, Any]:
        await asyncio.gather(*(asyncio.create_task(linger(0.05)) for _ in range(20)))
        return observer.groups()["linger"]

    group = _observed(main)
    p50, p99 = _lifetimes({"name": "linger", **group}).quantiles((0.5, 0.99))
    assert 0.05 <= p50 <= p99 < 0.5, (p50, p99)


def test_set_group_labels_the_current_task_or_another() -> None:
    async def labelled() -> None:
        set_group("GET /items/{id}")
        await asyncio.sleep(0)

    async def main(observer: Observer) -> dict[str, Any]:
        await asyncio.gather(*(asyncio.create_task(labelled()) for _ in range(5)))
        other = asyncio.create_task(handle())
        set_group("relabelled", other)
        await other
        return observer.groups()

    groups = _observed(main)
    assert groups["GET /items/{id}"]["done"] == 5
    assert groups["relabelled"]["done"] == 1
    assert not [name for name in groups if name.endswith("labelled") and "<locals>" in name]
    assert "handle" not in groups


def test_set_group_refuses_bad_labels_and_a_missing_task() -> None:
    with pytest.raises(TypeError, match="must be a string, not int"):
        set_group(7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 to 200 characters, not 0"):
        set_group("")
    with pytest.raises(ValueError, match="not 201"):
        set_group("x" * (MAX_GROUP_LABEL + 1))
    with pytest.raises(RuntimeError, match="no running event loop"):
        set_group("label")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        outside: asyncio.Future[BaseException] = loop.create_future()

        def callback() -> None:  # on the loop, in no task
            try:
                set_group("label")
            except RuntimeError as exc:
                outside.set_result(exc)

        loop.call_soon(callback)
        assert "none is running" in str(await outside)

    corun.run(main())


def test_groups_beyond_the_bound_count_as_other_groups() -> None:
    async def labelled(index: int) -> None:
        set_group(f"group {index}")

    async def main(observer: Observer) -> dict[str, Any]:
        await asyncio.gather(*(asyncio.create_task(labelled(i)) for i in range(MAX_GROUPS + 50)))
        return observer.groups()

    groups = _observed(main)
    assert len(groups) <= MAX_GROUPS + 2  # the bound, "(other groups)", and main's own
    assert groups[OTHER_GROUP]["done"] >= 50
    assert (
        sum(g["done"] for name, g in groups.items() if name.startswith("group "))
        + groups[OTHER_GROUP]["done"]
        == MAX_GROUPS + 50
    )


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager tasks are new in Python 3.12")
def test_eager_tasks_that_end_in_their_first_step_count() -> None:
    async def done_at_once() -> int:
        return 1

    async def main(observer: Observer) -> dict[str, Any]:
        factory = asyncio.create_eager_task_factory(corun.Task)  # type: ignore[attr-defined]
        asyncio.get_running_loop().set_task_factory(factory)
        assert sum(await asyncio.gather(*(done_at_once() for _ in range(10)))) == 10
        return observer.groups()

    [group] = [g for name, g in _observed(main).items() if name.endswith(".done_at_once")]
    assert (group["done"], group["live"]) == (10, 0)
    assert sum(count for _, count in group["lifetimes"]) == 10


# --------------------------------------------------------------------------- FastAPI

FASTAPI_APP = textwrap.dedent(
    """
    from fastapi import FastAPI
    from corun.observe.asgi import RouteGroups

    app = FastAPI()
    app.add_middleware(RouteGroups)

    @app.get("/items/{item_id}")
    async def item(item_id: int):
        return {"item": item_id, "sum": sum(range(20_000))}

    @app.get("/health")
    async def health():
        return {"ok": True}
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _load(port: int, paths: list[str], stop: threading.Event, answered: list[int]) -> None:
    """Ask for ``paths`` in turn on one keep-alive connection until ``stop``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        while not stop.is_set():
            for path in paths:
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                assert response.status == 200
                answered.append(1)
    finally:
        connection.close()


@pytest.fixture
def fastapi_server(tmp_path: Path) -> Iterator[tuple[int, int, dict[str, str]]]:
    """uvicorn serving ``FASTAPI_APP`` on corun, observed: its pid, port and environment."""
    (tmp_path / "app.py").write_text(FASTAPI_APP)
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    env = child_env(xdg, CORUN_OBSERVE="1")
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    port = _free_port()
    command = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    errors = tmp_path / "server.err"
    with errors.open("w") as err:
        proc = subprocess.Popen(
            [*command, "--loop", "corun:new_event_loop", "--no-access-log"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"uvicorn did not serve: {errors.read_text()[-3000:]}")
                time.sleep(0.1)
        yield proc.pid, port, env
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_top_on_fastapi_under_load_shows_its_routes(
    fastapi_server: tuple[int, int, dict[str, str]],
) -> None:
    pid, port, env = fastapi_server
    stop = threading.Event()
    answered: list[int] = []
    loaders = [
        threading.Thread(target=_load, args=(port, ["/items/1", "/items/22"], stop, answered)),
        threading.Thread(target=_load, args=(port, ["/health"], stop, answered)),
    ]
    for loader in loaders:
        loader.start()
    try:
        while len(answered) < 50:  # the server is warm
            time.sleep(0.05)
        result = run_cli(
            "top", str(pid), "--once", "--interval", "1", env={**env, "COLUMNS": "120"}
        )
    finally:
        stop.set()
        for loader in loaders:
            loader.join(TIMEOUT)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("GROUP"))
    # Columns are two spaces apart or more; a group's name has single spaces.
    cells = [re.split(r"\s{2,}", line.strip()) for line in lines[header + 1 :]]
    rows = {row[0]: row[1:] for row in cells}
    for route in ("GET /items/{item_id}", "GET /health"):
        assert route in rows, result.stdout
        _live, ended, cpu = rows[route][:3]
        assert float(ended) > 0, result.stdout
        assert float(cpu.rstrip("%")) > 0, result.stdout

    # The items route does the work: more of the loop per request than health.
    def cpu_per_request(row: list[str]) -> float:
        return float(row[2].rstrip("%")) / float(row[1])

    assert cpu_per_request(rows["GET /items/{item_id}"]) > cpu_per_request(rows["GET /health"])
