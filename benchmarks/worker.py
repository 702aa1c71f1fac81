"""One (case, loop, repetition) in a fresh process; prints one JSON line.

    python -m benchmarks.worker '{"loop": "corun", "params": {"kind": "tasks", ...}}'

The loop is created here, before any measured section: ``corun`` ->
``corun.new_event_loop()``, ``asyncio`` -> ``asyncio.new_event_loop()`` with
the default policy explicitly reset, ``uvloop`` -> ``uvloop.new_event_loop()``.
Nothing installs a policy, so every ``asyncio.*`` helper the benchmarks call
finds the loop under test as the running loop.

The output is ``{"ok": true, "metrics": {...}, "info": {...}}`` (plus
``client`` and ``server`` for network cases), or ``{"ok": false, "error": ...}``
with exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import platform
import resource
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any


def make_loop(name: str) -> tuple[asyncio.AbstractEventLoop, dict[str, Any]]:
    """A new loop of kind ``name`` and a description of what was loaded."""
    asyncio.set_event_loop_policy(None)  # the stdlib default, whatever imported us
    info: dict[str, Any] = {"loop": name}
    loop: asyncio.AbstractEventLoop
    if name == "corun":
        import corun
        import corun.runtime.engine.loop_core

        loop = corun.new_event_loop()
        info["corun_compiled"] = getattr(corun, "COMPILED", None)
        info["corun_version"] = getattr(corun, "__version__", None)
        info["corun_core_file"] = corun.runtime.engine.loop_core.__file__
    elif name == "asyncio":
        loop = asyncio.new_event_loop()
    elif name == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
        info["uvloop_version"] = getattr(uvloop, "__version__", None)
    else:
        raise ValueError(f"unknown loop {name!r}")
    info["loop_class"] = f"{type(loop).__module__}.{type(loop).__qualname__}"
    asyncio.set_event_loop(loop)
    return loop, info


def _close(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _runner(kind: str) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], Any]:
    from benchmarks import micro, net, tls

    runners: dict[str, Callable[[asyncio.AbstractEventLoop, dict[str, Any]], Any]] = {
        "call_soon": micro.call_soon,
        "tasks": micro.tasks,
        "ping_pong": micro.ping_pong,
        "gather": micro.gather,
        "loops": micro.loops,
        "steps": micro.steps,
        "timers": micro.timers,
        "idle_tasks": micro.idle_tasks,
        "getaddrinfo": micro.getaddrinfo,
        "spawn": micro.spawn,
        "echo": net.echo,
        "http": net.http,
        "tls_server": tls.tls_server,
        "tls_client": tls.tls_client,
    }
    return runners[kind]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one spec (``loop`` and ``params``) and return the worker's JSON object."""
    params: dict[str, Any] = spec["params"]
    run_case = _runner(str(params["kind"]))
    loop, info = make_loop(str(spec["loop"]))
    try:
        result = run_case(loop, params)
    finally:
        _close(loop)
    out: dict[str, Any] = {"ok": True}
    if "metrics" in result:
        out.update(result)
    else:
        out["metrics"] = result
    info["python"] = platform.python_version()
    info["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["info"] = info
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the single argument is the JSON spec."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m benchmarks.worker SPEC_JSON", file=sys.stderr)
        return 2
    try:
        out = run(json.loads(args[0]))
    except Exception as exc:
        traceback.print_exc()
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
