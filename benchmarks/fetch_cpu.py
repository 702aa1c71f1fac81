"""Client CPU per request of ``run_fetch`` (policies, journal, summary and output included).

    .venv/bin/python -m benchmarks.fetch_cpu [--requests 20000] [--concurrency 64]
        [--repeat 3] [--profile PATH] [--stub-wire] [--no-adaptive] [--verbose]

Against a local aiohttp server in a process of its own (uvloop when installed), it measures
the fetching process's CPU time (``os.times``: user + system, and user alone) over one
``run_fetch`` call, divided by the requests, after a warm-up run; it prints each run and the
median. ``--profile PATH`` adds a cProfile run, saves it, and prints the calls per request
and the top functions by own time.

``--stub-wire`` isolates the fetch side: ``corun.http.Client._attempt`` (one request on the
wire) is replaced by a coroutine that returns a canned 200 at once, so what is left is
``Client.request`` with its timeout, the fetcher's policies, the journal, the summary and the
output. It needs ``Client._attempt`` and ``connection.Reply`` (corun.http's own pool); no server is started.

To compare two versions of the code, run the script from the same checkout with
``PYTHONPATH`` pointing at the other version's ``src`` (the compiled runtime copied in),
alternating, and compare medians; on a shared machine expect run-to-run noise of 10-20 %.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import time

USER: list[float] = []
VERBOSE = False
ADAPTIVE = True

_SERVER = r"""
import sys
from aiohttp import web
body = b"x" * 1024
async def handle(request):
    return web.Response(body=body)
app = web.Application()
app.router.add_get("/{tail:.*}", handle)
try:
    import uvloop
    uvloop.install()
except ImportError:
    pass
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("server did not start")


def _stub_wire() -> None:
    """Replace the request on the wire by a canned 200 (see the module docstring)."""
    from multidict import CIMultiDict, CIMultiDictProxy

    from corun.http import client as http_client
    from corun.http import connection

    reply_type = getattr(connection, "Reply", None)
    if reply_type is None or not hasattr(http_client.Client, "_attempt"):
        raise SystemExit("--stub-wire needs corun.http.client.Client._attempt and connection.Reply")
    headers = CIMultiDictProxy(CIMultiDict({"Content-Type": "text/plain"}))
    body = b"x" * 1024

    async def attempt(self: object, call: object) -> object:
        call.attempts += 1  # type: ignore[attr-defined]
        return reply_type(status=200, headers=headers, body=body, url=call.raw_url)  # type: ignore[attr-defined]

    http_client.Client._attempt = attempt  # type: ignore[method-assign,assignment]


def _run_once(
    base: str, requests: int, concurrency: int, workdir: str, profile: str | None
) -> float:
    import corun
    from corun.fetch import FetchOptions, run_fetch

    src = os.path.join(workdir, "in.txt")
    out = os.path.join(workdir, "out.jsonl")
    for path in (out, out + ".journal", out + ".journal-wal", out + ".journal-shm"):
        if os.path.exists(path):
            os.unlink(path)
    with open(src, "w") as stream:
        stream.write("".join(f"{base}/r/{i}\n" for i in range(requests)))
    fields = FetchOptions.__dataclass_fields__
    extra: dict[str, object] = {"rate": None} if "rate" in fields else {}
    if "adaptive" in fields and not ADAPTIVE:
        extra["adaptive"] = False
    options = FetchOptions(
        input=src,
        output=out,
        concurrency=concurrency,
        per_host=concurrency,
        progress=False,
        **extra,
    )
    profiler = cProfile.Profile() if profile else None
    before = os.times()
    if profiler is not None:
        profiler.enable()
    summary = corun.run(run_fetch(options))
    if profiler is not None:
        profiler.disable()
    after = os.times()
    user = after.user - before.user
    cpu = user + after.system - before.system
    USER.append(user / requests * 1e6)
    assert summary.complete and summary.by_status == {"200": requests}, summary
    hosts = getattr(summary, "hosts", None)
    if hosts and VERBOSE:
        print(
            "  per-host limit:",
            {k: (v["peak"], v["limit"], v["decreases"]) for k, v in hosts.items()},
        )
    if profiler is not None and profile:
        profiler.dump_stats(profile)
    return cpu / requests * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--profile", default=None, metavar="PATH", help="also a cProfile run, saved here"
    )
    parser.add_argument(
        "--stub-wire", action="store_true", help="no server: a canned 200 per request"
    )
    parser.add_argument(
        "--no-adaptive",
        action="store_true",
        help="fixed per-host limit (FetchOptions(adaptive=False)), as the fetcher had before",
    )
    parser.add_argument("--verbose", action="store_true", help="print each run's per-host limit")
    args = parser.parse_args()
    global ADAPTIVE, VERBOSE
    ADAPTIVE = not args.no_adaptive
    VERBOSE = args.verbose
    port = _free_port()
    server = None
    if args.stub_wire:
        _stub_wire()
    else:
        server = subprocess.Popen([sys.executable, "-c", _SERVER, str(port)])
    try:
        if server is not None:
            _wait(port)
        base = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryDirectory() as workdir:
            _run_once(base, 500, args.concurrency, workdir, None)  # warm-up
            runs = [
                _run_once(base, args.requests, args.concurrency, workdir, None)
                for _ in range(args.repeat)
            ]
            user = USER[1:]
            print(
                "client CPU per request (us, user+sys):",
                ", ".join(f"{r:.1f}" for r in runs),
                f"median {statistics.median(runs):.1f}; user only:",
                ", ".join(f"{r:.1f}" for r in user),
                f"median {statistics.median(user):.1f}",
            )
            if args.profile:
                _run_once(base, args.requests, args.concurrency, workdir, args.profile)
                stats = pstats.Stats(args.profile)
                total = stats.total_tt  # type: ignore[attr-defined]
                calls = stats.total_calls  # type: ignore[attr-defined]
                print(
                    f"profiled: {total / args.requests * 1e6:.1f} us and "
                    f"{calls / args.requests:.0f} function calls per request under cProfile"
                )
                stats.sort_stats("tottime").print_stats(25)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
