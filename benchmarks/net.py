"""Network benchmarks, run inside a worker: a server on the loop under test.

The server runs on the loop under test in the worker process; the load
generator is a separate process that the worker starts once the server
listens. A thread waits for that process (blocked in ``read``, so it costs
nothing) and hands its output back with ``call_soon_threadsafe``. The worker
reports the client's numbers plus its own CPU use over the run, so that the
driver can tell which side was saturated.

Three echo servers, the same as uvloop's ``examples/bench/echoserver.py``:

* ``protocol``: ``loop.create_server`` with a ``data_received`` that writes back;
* ``streams``: ``asyncio.start_server`` with ``read``/``write``/``drain``;
* ``sock``: ``loop.sock_accept`` and a task per connection doing
  ``sock_recv``/``sock_sendall``.

HTTP: an aiohttp ``web.Application`` with one trivial handler, driven by
``wrk`` (or, without wrk, by the same load generator in HTTP mode).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import socket
import subprocess
import threading
import time
from typing import Any, cast

Metrics = dict[str, float]

_READ_SIZE = 65536  # per read on every server kind


# --------------------------------------------------------------------------- echo servers


class EchoProtocol(asyncio.Protocol):
    """Writes back whatever it receives."""

    transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # No isinstance check: uvloop's transports do not subclass asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def _stream_echo(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, served: list[int] | None = None
) -> None:
    """Writes back whatever it reads; counts the bytes in ``served[0]`` if given."""
    try:
        while True:
            data = await reader.read(_READ_SIZE)
            if not data:
                break
            if served is not None:
                served[0] += len(data)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _sock_echo(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    try:
        while True:
            data = await loop.sock_recv(conn, _READ_SIZE)
            if not data:
                break
            await loop.sock_sendall(conn, data)
    except (ConnectionError, OSError):
        pass
    finally:
        conn.close()


async def _sock_accept_loop(
    loop: asyncio.AbstractEventLoop, lsock: socket.socket, conns: set[asyncio.Task[None]]
) -> None:
    while True:
        conn, _ = await loop.sock_accept(lsock)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setblocking(False)
        task = loop.create_task(_sock_echo(loop, conn))
        conns.add(task)
        task.add_done_callback(conns.discard)


class _EchoServer:
    """One of the three echo servers, listening on 127.0.0.1 at an ephemeral port."""

    def __init__(self, loop: asyncio.AbstractEventLoop, kind: str) -> None:
        self.loop = loop
        self.kind = kind
        self.server: asyncio.AbstractServer | None = None
        self.lsock: socket.socket | None = None
        self.accept_task: asyncio.Task[None] | None = None
        self.conn_tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        if self.kind == "protocol":
            self.server = await self.loop.create_server(EchoProtocol, "127.0.0.1", 0, backlog=1024)
        elif self.kind == "streams":
            self.server = await asyncio.start_server(_stream_echo, "127.0.0.1", 0, backlog=1024)
        elif self.kind == "sock":
            lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind(("127.0.0.1", 0))
            lsock.listen(1024)
            lsock.setblocking(False)
            self.lsock = lsock
            self.accept_task = self.loop.create_task(
                _sock_accept_loop(self.loop, lsock, self.conn_tasks)
            )
            return int(lsock.getsockname()[1])
        else:
            raise ValueError(f"unknown echo server {self.kind!r}")
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await asyncio.wait_for(self.server.wait_closed(), 5)
        if self.accept_task is not None:
            self.accept_task.cancel()
            for t in list(self.conn_tasks):
                t.cancel()
            await asyncio.gather(self.accept_task, *self.conn_tasks, return_exceptions=True)
        if self.lsock is not None:
            self.lsock.close()


# --------------------------------------------------------------------------- client process


def _run_client(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Run one client process to completion; its rusage is in ``RUSAGE_CHILDREN``."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    return {
        "returncode": proc.returncode,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "wall_s": wall,
        "cpu_s": cpu,
    }


class _ClientThread:
    """Runs the client commands in a thread; ``wait()`` resolves when all ended."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cmds: list[list[str]], timeout: float):
        self.loop = loop
        self.cmds = cmds
        self.timeout = timeout
        self.future: asyncio.Future[list[dict[str, Any]]] = loop.create_future()
        self.thread = threading.Thread(target=self._main, name="bench-client", daemon=True)

    def _main(self) -> None:
        results: list[dict[str, Any]] = []
        error: BaseException | None = None
        try:
            for cmd in self.cmds:
                results.append(_run_client(cmd, self.timeout))
        except BaseException as exc:
            error = exc
        self.loop.call_soon_threadsafe(self._resolve, results, error)

    def _resolve(self, results: list[dict[str, Any]], error: BaseException | None) -> None:
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(results)

    async def wait(self) -> list[dict[str, Any]]:
        self.thread.start()
        return await self.future


def _client_json(result: dict[str, Any]) -> dict[str, Any]:
    if result["returncode"] != 0:
        raise RuntimeError(
            f"load generator exited with {result['returncode']}: {result['stderr'].strip()}"
        )
    lines = [ln for ln in result["stdout"].splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"load generator printed no JSON: {result['stdout']!r}")
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat; (0, 0) if unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


async def _serve_during(
    loop: asyncio.AbstractEventLoop, cmds: list[list[str]], timeout: float
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Run the client commands while serving; return their results and CPU use.

    The CPU figures are fractions of one core over the whole run: the server
    (this process), the clients (their rusage), the whole machine (from
    /proc/stat) and what is left for everything else. On a 2-core machine that
    last one says whether another job was competing with the benchmark.
    """
    cpu0 = time.process_time()
    busy0, total0 = _machine_cpu()
    t0 = time.perf_counter()
    results = await _ClientThread(loop, cmds, timeout).wait()
    wall = time.perf_counter() - t0
    busy1, total1 = _machine_cpu()
    server = (time.process_time() - cpu0) / wall if wall > 0 else 0.0
    clients = sum(r["cpu_s"] for r in results) / wall if wall > 0 else 0.0
    ncpu = os.cpu_count() or 1
    machine = (busy1 - busy0) / (total1 - total0) * ncpu if total1 > total0 else 0.0
    return results, {
        "server": server,
        "clients_total": clients,
        "machine": machine,
        "other": max(0.0, machine - server - clients),
    }


def _cpu_per_request_us(server_cpu_frac: float, rps: float) -> float:
    """Server CPU microseconds per request, from its share of a core and its req/s."""
    return server_cpu_frac / rps * 1e6 if rps > 0 else float("nan")


# --------------------------------------------------------------------------- echo


def _one_exchange(port: int, size: int) -> None:
    """Connect, send ``size`` bytes, read them back, close (blocking; run in a thread)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"x" * size)
        received = 0
        while received < size:
            chunk = sock.recv(size - received)
            if not chunk:
                raise ConnectionError("echo server closed the warm-up connection")
            received += len(chunk)


async def _settle(loop: asyncio.AbstractEventLoop, port: int, size: int) -> None:
    """Have the server serve, and see the end of, one connection before it is measured.

    A long-running server has seen clients come and go, and that changes how
    fast the stdlib loop is: its transports read with ``recv(256 KiB)``, and
    until the process frees one such buffer whole (which an EOF read does)
    glibc serves each one with ``mmap`` and ``munmap``, 4x slower. Measuring
    every loop after one closed connection compares their steady states.
    """
    await loop.run_in_executor(None, _one_exchange, port, size)
    await asyncio.sleep(0.1)  # the server reads the EOF and drops the connection


async def _echo_main(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> dict[str, Any]:
    server = _EchoServer(loop, str(params["server"]))
    port = await server.start()
    await _settle(loop, port, int(params["size"]))
    client: list[str] = list(params["client_cmd"])
    cmd = [
        *client,
        "--mode",
        "echo",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--conns",
        str(params["conns"]),
        "--size",
        str(params["size"]),
        "--warmup",
        str(params["warmup"]),
        "--duration",
        str(params["duration"]),
    ]
    timeout = float(params["warmup"]) + float(params["duration"]) + 60
    try:
        (result,), cpu = await _serve_during(loop, [cmd], timeout)
    finally:
        await server.stop()
    return served(_client_json(result), cpu)


def served(data: dict[str, Any], cpu: dict[str, float]) -> dict[str, Any]:
    """A server case's result: the client's figures (``data``) and the CPU shares."""
    return {
        "metrics": {
            "rps": data["rps"],
            "p50_ms": data["p50_ms"],
            "p99_ms": data["p99_ms"],
            "server_cpu_us": _cpu_per_request_us(cpu["server"], data["rps"]),
        },
        "client": {
            "tool": data.get("client"),
            "requests": data["requests"],
            "errors": data["errors"],
            # The client's own CPU over its measured window, as a fraction of one core.
            "cpu_frac": data["cpu_frac"],
        },
        "server": {"cpu_frac": cpu["server"]},
        "machine": {"busy_cores": cpu["machine"], "other_cores": cpu["other"]},
    }


def echo(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> dict[str, Any]:
    """Echo server of kind ``server`` under a closed-loop client; req/s, p50, p99."""
    result = loop.run_until_complete(_echo_main(loop, params))
    assert isinstance(result, dict)
    return result


# --------------------------------------------------------------------------- HTTP


async def _hello(request: Any) -> Any:
    from aiohttp import web

    return web.Response(text="Hello, World!")


_WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def _wrk_ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text.strip())
    if m is None:
        raise ValueError(f"unparsable wrk latency {text!r}")
    return float(m.group(1)) * _WRK_UNITS[m.group(2)]


def parse_wrk(output: str) -> dict[str, Any]:
    """Requests/s, p50/p99 (ms), request count and errors from ``wrk --latency`` output."""
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    count = re.search(r"^\s+(\d+) requests in ([\d.]+)(\w+)", output, re.M)
    if rps is None or p50 is None or p99 is None or count is None:
        raise ValueError(f"unparsable wrk output:\n{output}")
    errors = 0
    sock_err = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    if sock_err is not None:
        errors += sum(int(g) for g in sock_err.groups())
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if non2xx is not None:
        errors += int(non2xx.group(1))
    return {
        "rps": float(rps.group(1)),
        "p50_ms": _wrk_ms(p50.group(1)),
        "p99_ms": _wrk_ms(p99.group(1)),
        "requests": int(count.group(1)),
        "errors": errors,
    }


async def start_http_server(handler: Any = None) -> tuple[Any, int]:
    """An aiohttp app answering ``GET /`` with ``handler`` (default: hello world); its runner and port."""
    from aiohttp import web

    app = web.Application()
    app.router.add_get("/", handler or _hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    return runner, int(runner.addresses[0][1])


async def _asgi_hello(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI hello world: what uvicorn serves in the ``uvicorn`` case."""
    assert scope["type"] == "http"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", b"13")],
        }
    )
    await send({"type": "http.response.body", "body": b"Hello, World!"})


class _UvicornRunner:
    """uvicorn (httptools, no lifespan, no access log) serving on the running loop."""

    def __init__(self) -> None:
        import uvicorn

        config = uvicorn.Config(
            _asgi_hello,
            loop="none",
            http="httptools",
            lifespan="off",
            access_log=False,
            log_level="warning",
            backlog=1024,
        )
        self.server = uvicorn.Server(config)
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        self.task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            if self.task.done():
                self.task.result()
            await asyncio.sleep(0.01)
        return int(self.sock.getsockname()[1])

    async def cleanup(self) -> None:
        self.server.should_exit = True
        if self.task is not None:
            await self.task
        self.sock.close()


async def _http_main(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> dict[str, Any]:
    runner: Any
    if params.get("server", "aiohttp") == "uvicorn":
        runner = _UvicornRunner()
        port = await runner.start()
    else:
        runner, port = await start_http_server()
    conns, duration, warmup = int(params["conns"]), int(params["duration"]), int(params["warmup"])
    client: list[str] = list(params["client_cmd"])
    tool = str(params["client_tool"])
    url = f"http://127.0.0.1:{port}/"
    if tool == "wrk":
        # wrk has no warmup option: a first, unrecorded run warms the server up.
        base = [*client, "-t1", f"-c{conns}", "--latency", "--timeout", "10s"]
        cmds = [[*base, f"-d{warmup}s", url], [*base, f"-d{duration}s", url]]
    else:
        cmds = [
            [
                *client,
                "--mode",
                "http",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--conns",
                str(conns),
                "--size",
                "1",
                "--warmup",
                str(warmup),
                "--duration",
                str(duration),
            ]
        ]
    try:
        results, cpu = await _serve_during(loop, cmds, warmup + duration + 60)
    finally:
        await runner.cleanup()
    last = results[-1]
    if tool == "wrk":
        if last["returncode"] != 0:
            raise RuntimeError(f"wrk exited with {last['returncode']}: {last['stderr'].strip()}")
        data = parse_wrk(last["stdout"])
        # wrk's CPU over its whole measured run (rusage of the reaped child).
        client_cpu = last["cpu_s"] / last["wall_s"] if last["wall_s"] > 0 else 0.0
    else:
        data = _client_json(last)
        client_cpu = data["cpu_frac"]
    return {
        "metrics": {
            "rps": data["rps"],
            "p50_ms": data["p50_ms"],
            "p99_ms": data["p99_ms"],
            # The server's CPU share is over warmup and measured run alike;
            # both run at full load, so it holds for the measured run.
            "server_cpu_us": _cpu_per_request_us(cpu["server"], data["rps"]),
        },
        "client": {
            "tool": tool,
            "requests": data["requests"],
            "errors": data["errors"],
            "cpu_frac": client_cpu,
        },
        "server": {"cpu_frac": cpu["server"]},
        "machine": {"busy_cores": cpu["machine"], "other_cores": cpu["other"]},
    }


def http(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> dict[str, Any]:
    """aiohttp (or uvicorn) server under wrk (or our HTTP load generator); req/s, p50, p99."""
    result = loop.run_until_complete(_http_main(loop, params))
    assert isinstance(result, dict)
    return result
