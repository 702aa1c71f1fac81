"""TLS echo: the loop under test as the server, and separately as the client.

``tls_server``: an echo server (``EchoProtocol`` over TLS) on the loop under
test, loaded by a client process that always runs the same loop (uvloop when
installed, else asyncio's), so only the server changes between runs; the
figure is the server's CPU per request. ``tls_client``: the same client code
runs in the worker, on the loop under test, against an echo server process
that is always the same; the figure is the client's CPU per request.

Certificates come from ``trustme`` (a throwaway CA), written to a temporary
directory that both processes read. TLS 1.3, the defaults of ``ssl``; one
request in flight per connection, as in the plain echo cases.

    python -m benchmarks.tls --load PORT CA CONNS SIZE WARMUP DURATION
    python -m benchmarks.tls --serve CERT KEY     (prints the port, serves until stdin closes)
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.net import EchoProtocol, _client_json, _cpu_per_request_us, _serve_during, served


def write_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """(CA, server certificate chain, server key) as PEM files for 127.0.0.1."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = (directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    ca.cert_pem.write_to_path(str(paths[0]))
    cert.cert_chain_pems[0].write_to_path(str(paths[1]))
    for blob in cert.cert_chain_pems[1:]:
        with open(paths[1], "ab") as f:
            f.write(blob.bytes())
    cert.private_key_pem.write_to_path(str(paths[2]))
    return paths


def _server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


class _Client(asyncio.Protocol):
    """Sends ``size`` bytes, waits for all of them back, and again, until told to stop."""

    def __init__(self, load: _Load) -> None:
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.got = 0
        self.sent_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self.got = 0
        self.sent_at = time.perf_counter()
        self.transport.write(self.load.message)

    def data_received(self, data: bytes) -> None:
        self.got += len(data)
        if self.got < len(self.load.message):
            return
        self.load.done(time.perf_counter() - self.sent_at)
        if self.load.running:
            self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        self.load.lost(self)


class _Load:
    """``conns`` TLS connections doing echo round trips; counts those in the window."""

    def __init__(self, size: int) -> None:
        self.message = b"x" * size
        self.running = True
        self.measuring = False
        self.latencies: list[float] = []
        self.closed: asyncio.Future[None] | None = None
        self.open = 0

    def done(self, latency: float) -> None:
        if self.measuring:
            self.latencies.append(latency)

    def lost(self, client: _Client) -> None:
        self.open -= 1
        if self.open == 0 and self.closed is not None and not self.closed.done():
            self.closed.set_result(None)


async def run_load(
    port: int, ca: Path, conns: int, size: int, warmup: float, duration: float
) -> dict[str, Any]:
    """The client side on the running loop: req/s, latencies, and this process's CPU."""
    loop = asyncio.get_running_loop()
    context = ssl.create_default_context(cafile=str(ca))
    load = _Load(size)
    load.closed = loop.create_future()
    clients = []
    for _ in range(conns):
        transport, client = await loop.create_connection(
            lambda: _Client(load), "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
        )
        load.open += 1
        clients.append((transport, client))
    await asyncio.sleep(warmup)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    load.measuring = True
    await asyncio.sleep(duration)
    load.measuring = False
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    load.running = False
    for transport, _client in clients:
        transport.close()
    await asyncio.wait_for(load.closed, 10)
    latencies = sorted(load.latencies)
    count = len(latencies)
    return {
        "rps": count / elapsed,
        "p50_ms": latencies[count // 2] * 1e3 if count else float("nan"),
        "p99_ms": latencies[min(count - 1, int(count * 0.99))] * 1e3 if count else float("nan"),
        "requests": count,
        "errors": 0,
        "cpu_frac": cpu / elapsed,
    }


def _fixed_loop() -> asyncio.AbstractEventLoop:
    """The loop of the side that does not change: uvloop if installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _fixed_loop_name() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"


async def _server_main(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        ca, cert, key = write_certificates(Path(tmp))
        server = await loop.create_server(
            EchoProtocol, "127.0.0.1", 0, ssl=_server_context(cert, key), backlog=1024
        )
        port = server.sockets[0].getsockname()[1]
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.tls",
            "--load",
            str(port),
            str(ca),
            str(params["conns"]),
            str(params["size"]),
            str(params["warmup"]),
            str(params["duration"]),
        ]
        timeout = float(params["warmup"]) + float(params["duration"]) + 60
        try:
            (result,), cpu = await _serve_during(loop, [cmd], timeout)
        finally:
            server.close()
            await server.wait_closed()
    return served(_client_json(result), cpu)


def tls_server(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> dict[str, Any]:
    """TLS echo server on ``loop`` under a fixed client process."""
    result = loop.run_until_complete(_server_main(loop, params))
    assert isinstance(result, dict)
    return result


def tls_client(loop: asyncio.AbstractEventLoop, params: dict[str, Any]) -> dict[str, Any]:
    """TLS echo client on ``loop`` against a fixed server process; client CPU per request."""
    with tempfile.TemporaryDirectory() as tmp:
        ca, cert, key = write_certificates(Path(tmp))
        server = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.tls", "--serve", str(cert), str(key)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            data = loop.run_until_complete(
                run_load(
                    port,
                    ca,
                    int(params["conns"]),
                    int(params["size"]),
                    float(params["warmup"]),
                    float(params["duration"]),
                )
            )
        finally:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(30)
    return {
        "metrics": {
            "rps": data["rps"],
            "p50_ms": data["p50_ms"],
            "p99_ms": data["p99_ms"],
            "client_cpu_us": _cpu_per_request_us(data["cpu_frac"], data["rps"]),
        },
        "peer": {"tool": f"benchmarks.tls --serve on {_fixed_loop_name()}"},
    }


async def _serve_until_stdin_closes(cert: Path, key: Path) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        EchoProtocol, "127.0.0.1", 0, ssl=_server_context(cert, key), backlog=1024
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


def main(argv: list[str]) -> int:
    """The fixed side, in its own process (see the module docstring)."""
    loop = _fixed_loop()
    if argv[:1] == ["--load"]:
        port, ca, conns, size, warmup, duration = argv[1:7]
        data = loop.run_until_complete(
            run_load(int(port), Path(ca), int(conns), int(size), float(warmup), float(duration))
        )
        data["client"] = f"benchmarks.tls on {_fixed_loop_name()}"
        print(json.dumps(data))
        return 0
    if argv[:1] == ["--serve"]:
        loop.run_until_complete(_serve_until_stdin_closes(Path(argv[1]), Path(argv[2])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
