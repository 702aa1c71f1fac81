"""What observation costs, in instructions: the steadiest measure on a shared machine.

    .venv/bin/python -m benchmarks.observe_instructions [--baseline-root DIR] [--only CASES] [--out DIR]

Wall-clock figures here move by 10 to 30% between identical runs, so the
observation budgets of a few percent are also measured by counting the
instructions the observed process runs, under ``valgrind --tool=callgrind``.
Each workload runs at two sizes; the difference, divided by the difference in
operations, is the cost of one operation without the start-up. Modes:

* ``off``: this code, observation off;
* ``on``: this code with the loop's accounting attached (what ``CORUN_OBSERVE=1``
  attaches), without the watchdog thread: under valgrind's slowed clock its
  wake-ups would be counted many times over;
* ``main`` (with ``--baseline-root``): a build of the code before observation
  existed, in its own venv, run the same way.

Workloads: ``steps`` (10 tasks x ``await asyncio.sleep(0)``, per step);
``tasks`` (a task created, run for two steps and ended, per task: the spawn
and exit records, and the task's group at its end);
``echo/protocol`` and ``echo/streams`` (1 KiB round trips, per request) and
``http`` (aiohttp's hello world over a keep-alive connection, per request).
One connection, one request at a time: each request is then one wait and one
batch of handles, the same every time, where with many connections the
batching (and so the count) would follow valgrind's timing. It is also the
accounting's worst case: its per-batch work is not shared. Only the server
runs under valgrind; the client is a plain Python process with a blocking
socket. Results go to
``benchmarks/results/observe_instructions.{json,md}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: workload -> (the two sizes, the unit of one operation)
WORKLOADS: dict[str, tuple[tuple[int, int], str]] = {
    "steps": ((20_000, 60_000), "step"),
    "tasks": ((5_000, 15_000), "task"),
    "echo/protocol": ((1_000, 3_000), "request"),
    "echo/streams": ((1_000, 3_000), "request"),
    "http": ((1_000, 3_000), "request"),
}
CONNECTIONS = 1
MESSAGE = 1024
_COLLECTED = re.compile(r"Collected : (\d+)")


# --------------------------------------------------------------------------- the measured child


def _serve(workload: str, operations: int) -> None:
    """Run ``operations`` of ``workload`` on a corun loop (accounting on if ``on`` was asked)."""
    from benchmarks.worker import make_loop

    # benchmarks.instructions runs the same workloads on asyncio's and uvloop's loops.
    loop, _info = make_loop(os.environ.get("CORUN_BENCH_LOOP", "corun"))
    if os.environ.get("CORUN_BENCH_ACCOUNTING") == "1":
        from corun.runtime.engine.accounting import LoopAccounting

        loop._set_accounting(LoopAccounting(time.monotonic, 0.1))  # type: ignore[attr-defined]
    if workload == "steps":
        from benchmarks import micro

        micro.steps(loop, {"n": operations, "tasks": 10})
        return
    if workload == "tasks":
        from benchmarks import micro

        micro.tasks(loop, {"n": operations, "steps": 1})
        return
    if workload in ("call_soon", "ping_pong"):
        from benchmarks import micro

        if workload == "call_soon":
            micro.call_soon(loop, {"n": operations, "chains": 100})
        else:
            micro.ping_pong(loop, {"n": operations})
        return
    loop.run_until_complete(_serve_network(loop, workload, operations))


async def _serve_network(loop: asyncio.AbstractEventLoop, workload: str, operations: int) -> None:
    from benchmarks.net import EchoProtocol, _hello, _stream_echo

    runner = None
    if workload == "echo/protocol":
        server = await loop.create_server(EchoProtocol, "127.0.0.1", 0)
    elif workload == "echo/streams":
        server = await asyncio.start_server(_stream_echo, "127.0.0.1", 0)
    else:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/", _hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server  # type: ignore[assignment]
    assert server is not None
    port = server.sockets[0].getsockname()[1]
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.observe_instructions",
        "--client",
        workload,
        str(port),
        str(operations),
    )
    if await client.wait() != 0:
        raise SystemExit("the client failed")
    server.close()
    if runner is not None:
        await runner.cleanup()


def _client(workload: str, port: int, operations: int) -> None:
    """``operations`` round trips over ``CONNECTIONS`` connections, with blocking sockets."""
    failures: list[BaseException] = []

    def connection(count: int) -> None:
        try:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for _i in range(count):
                    if workload == "http":
                        _http_round_trip(sock)
                    else:
                        sock.sendall(b"x" * MESSAGE)
                        got = 0
                        while got < MESSAGE:
                            chunk = sock.recv(65536)
                            if not chunk:
                                raise ConnectionError("the server closed")
                            got += len(chunk)
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=connection, args=(operations // CONNECTIONS,))
        for _i in range(CONNECTIONS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"client: {failures[0]!r}")


def _http_round_trip(sock: socket.socket) -> None:
    sock.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    match = re.search(rb"(?i)content-length:\s*(\d+)", head)
    length = int(match.group(1)) if match else 0
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed")
        body += chunk


# --------------------------------------------------------------------------- the driver


def count(
    python: str, workload: str, operations: int, accounting: bool, loop: str = "corun"
) -> int:
    """Instructions the server process ran for ``operations`` of ``workload`` on ``loop``."""
    env = dict(os.environ, CORUN_BENCH_ACCOUNTING="1" if accounting else "0", CORUN_BENCH_LOOP=loop)
    env.pop("CORUN_OBSERVE", None)
    env["PYTHONPATH"] = str(ROOT)  # this checkout's benchmark code; corun from the venv
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            python,
            "-m",
            "benchmarks.observe_instructions",
            "--serve",
            workload,
            str(operations),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
        cwd=ROOT,
        check=False,
    )
    found = _COLLECTED.findall(proc.stderr)
    if proc.returncode != 0 or not found:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"{workload} x{operations} failed ({proc.returncode}): {tail}")
    return int(found[-1])


def operations_run(workload: str, size: int) -> int:
    """The operations a run of ``size`` makes: the micro benchmarks run a tenth more first."""
    if workload == "steps":
        tasks = 10
        return tasks * (size // tasks // 10) + tasks * (size // tasks)
    if workload in ("tasks", "call_soon", "ping_pong"):
        return max(1, size // 10) + size
    return size


def per_operation(
    python: str,
    workload: str,
    accounting: bool,
    loop: str = "corun",
    sizes: tuple[int, int] | None = None,
) -> float:
    """Instructions per operation: the two sizes subtracted."""
    small, large = sizes or WORKLOADS[workload][0]
    low = count(python, workload, small, accounting, loop)
    high = count(python, workload, large, accounting, loop)
    return (high - low) / (operations_run(workload, large) - operations_run(workload, small))


def main(argv: Sequence[str] | None = None) -> int:
    """Count each workload's instructions per operation, off and on (and main); write the reports."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["--serve"]:
        _serve(args[1], int(args[2]))
        return 0
    if args[:1] == ["--client"]:
        _client(args[1], int(args[2]), int(args[3]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.observe_instructions")
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    options = parser.parse_args(args)
    if shutil.which("valgrind") is None:
        print("observe_instructions: valgrind is not installed (Debian: valgrind)", file=sys.stderr)
        return 1
    workloads = [w for w in options.only.split(",") if w in WORKLOADS]
    modes: dict[str, tuple[str, bool]] = {
        "off": (sys.executable, False),
        "on": (sys.executable, True),
    }
    if options.baseline_root is not None:
        modes["main"] = (str(options.baseline_root / ".venv" / "bin" / "python"), False)
    results: dict[str, dict[str, float]] = {}
    for workload in workloads:
        results[workload] = {}
        for mode, (python, accounting) in modes.items():
            figure = per_operation(python, workload, accounting)
            results[workload][mode] = figure
            print(f"{workload:14} {mode:4} {figure:12,.0f}", file=sys.stderr)
    document = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "connections": CONNECTIONS,
        "sizes": {w: WORKLOADS[w][0] for w in workloads},
        "results": results,
    }
    write_reports(options.out / "observe_instructions", document, render(document))
    return 0


def write_reports(stem: Path, document: dict[str, Any], markdown: str) -> None:
    """``stem``.json and ``stem``.md; the table to standard output too."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(document, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown)
    print(markdown)


def render(document: dict[str, Any]) -> str:
    """The Markdown table: instructions per operation by mode, and on against off."""
    results: dict[str, dict[str, float]] = document["results"]
    has_main = any("main" in row for row in results.values())
    head = ["workload", "per", "off", "on", "on vs off"]
    if has_main:
        head += ["main", "off vs main"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "--:|" * (len(head) - 2)]
    for workload, row in results.items():
        off, on = row["off"], row["on"]
        cells = [
            workload,
            WORKLOADS[workload][1],
            f"{off:,.0f}",
            f"{on:,.0f}",
            f"{on - off:+,.0f} ({(on - off) / off:+.1%})",
        ]
        if has_main:
            main_figure = row.get("main")
            cells += (
                [f"{main_figure:,.0f}", f"{(off - main_figure) / main_figure:+.1%}"]
                if main_figure
                else ["", ""]
            )
        lines.append("| " + " | ".join(cells) + " |")
    return (
        f"Instructions per operation (callgrind, two sizes subtracted; {document['date']}):\n\n"
        + "\n".join(lines)
        + "\n"
    )


if __name__ == "__main__":
    raise SystemExit(main())
