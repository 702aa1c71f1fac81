"""What the suite runs: benchmarks, their cases, metrics and targets.

A *benchmark* is what ``--only`` selects (``echo``); a *case* is one
configuration of it that the worker runs (``echo/protocol/1KiB/c10``). Every
case reports one or more metrics, each with the direction that is better and,
where the issue sets one, a target against asyncio and an aim against uvloop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

# The --only names, in the order the suite runs them.
BENCHMARKS: Final = (
    "call_soon",
    "tasks",
    "ping_pong",
    "gather",
    "loops",
    "timers",
    "idle_tasks",
    "getaddrinfo",
    "spawn",
    "echo",
    "tls",
    "http",
)

# Kept in sync with README.md's table. Issue 32: corun at least 1.05x uvloop on
# every case, time or CPU per operation or request.
MICRO_AIM_VS_UVLOOP: Final = 1.05
ECHO_AIM_VS_UVLOOP: Final = 1.05


@dataclass(frozen=True)
class Metric:
    """One number a case reports.

    Attributes:
        key: the key in the worker's ``metrics`` JSON object.
        label: the name shown in the table.
        unit: shown next to the label.
        higher_is_better: True for throughput, False for time, latency, memory.
        target: the minimum "corun vs asyncio" ratio the issue asks for, if any.
        aim: the "corun vs uvloop" ratio the issue aims at, if any.
    """

    key: str
    label: str
    unit: str
    higher_is_better: bool
    target: float | None = None
    aim: float | None = None


@dataclass(frozen=True)
class Case:
    """One configuration the worker runs, once per (loop, repetition)."""

    benchmark: str
    case_id: str
    title: str
    params: dict[str, Any]
    metrics: tuple[Metric, ...]
    network: bool = False
    notes: tuple[str, ...] = field(default=())


def _time_metric(target: float | None, aim: float | None = MICRO_AIM_VS_UVLOOP) -> Metric:
    return Metric("time_ms", "time", "ms", False, target, aim)


# The server's CPU time per request served: what the loop costs, whether or
# not the load generator (on the other core) is the limit on req/s.
_SERVER_CPU = Metric(
    "server_cpu_us", "server CPU per request", "µs", False, None, ECHO_AIM_VS_UVLOOP
)
# The client's, when the loop under test is the client (TLS).
_CLIENT_CPU = Metric(
    "client_cpu_us", "client CPU per request", "µs", False, None, ECHO_AIM_VS_UVLOOP
)


def _echo_metrics(target: float | None) -> tuple[Metric, ...]:
    return (
        Metric("rps", "throughput", "req/s", True, target, ECHO_AIM_VS_UVLOOP),
        Metric("p50_ms", "p50 latency", "ms", False),
        Metric("p99_ms", "p99 latency", "ms", False),
        _SERVER_CPU,
    )


def build_cases(*, quick: bool, duration: float | None = None) -> list[Case]:
    """All cases, in run order; ``quick`` shrinks sizes and the network matrix."""
    scale = 10 if quick else 1
    net_duration = duration if duration is not None else (1.0 if quick else 3.0)
    net_warmup = 0.25 if quick else 0.5
    cases: list[Case] = [
        Case(
            "call_soon",
            "call_soon",
            f"call_soon ({1_000_000 // scale:,} callbacks)",
            {"kind": "call_soon", "n": 1_000_000 // scale, "chains": 100},
            (_time_metric(1.8),),
        ),
        Case(
            "tasks",
            "tasks",
            f"tasks ({100_000 // scale:,} tasks x 10 sleep(0))",
            {"kind": "tasks", "n": 100_000 // scale, "steps": 10},
            (_time_metric(1.8),),
        ),
        Case(
            "steps",
            "steps",
            f"empty steps ({1_000_000 // scale:,}: 10 tasks x sleep(0))",
            {"kind": "steps", "n": 1_000_000 // scale, "tasks": 10},
            (
                _time_metric(None),
                Metric("ns_per_step", "per step", "ns", False),
            ),
        ),
        Case(
            "ping_pong",
            "ping_pong",
            f"future ping-pong ({200_000 // scale:,} round trips)",
            {"kind": "ping_pong", "n": 200_000 // scale},
            (_time_metric(1.8),),
        ),
        Case(
            "gather",
            "gather",
            f"gather of 1,000 tasks ({200 // scale} rounds)",
            {"kind": "gather", "rounds": 200 // scale, "width": 1000},
            (_time_metric(None),),
        ),
        Case(
            "loops",
            "loops",
            f"loops created, run once and closed ({2_000 // scale:,})",
            {"kind": "loops", "n": 2_000 // scale},
            (_time_metric(None),),
        ),
        Case(
            "timers",
            "timers",
            f"timers ({100_000 // scale:,} call_later, half cancelled)",
            {"kind": "timers", "n": 100_000 // scale, "max_delay": 0.001},
            (_time_metric(1.8),),
        ),
        Case(
            "idle_tasks",
            "idle_tasks",
            f"idle tasks ({100_000 // scale:,})",
            {"kind": "idle_tasks", "n": 100_000 // scale, "tracemalloc": False},
            (
                Metric("create_ms", "create + park", "ms", False, None, MICRO_AIM_VS_UVLOOP),
                Metric("rss_per_task", "RSS per task", "B", False, 1.0),
            ),
        ),
        Case(
            "idle_tasks",
            "idle_tasks/tracemalloc",
            f"idle tasks ({100_000 // scale:,}), tracemalloc",
            {"kind": "idle_tasks", "n": 100_000 // scale, "tracemalloc": True},
            (Metric("traced_per_task", "traced per task", "B", False, 1.0),),
        ),
        Case(
            "getaddrinfo",
            "getaddrinfo",
            f"getaddrinfo 127.0.0.1 ({10_000 // scale:,} calls)",
            {"kind": "getaddrinfo", "n": 10_000 // scale, "host": "127.0.0.1", "port": 80},
            (_time_metric(None),),
        ),
        Case(
            "spawn",
            "spawn",
            f"subprocess_exec /bin/true ({200 // scale} spawns, 512 MiB heap)",
            {"kind": "spawn", "n": 200 // scale, "heap_mib": 512},
            (
                Metric("spawn_ms", "median spawn", "ms", False),
                Metric("loop_blocked_ms", "longest loop stall", "ms", False),
            ),
        ),
    ]
    sizes = [(1024, "1KiB")] if quick else [(1024, "1KiB"), (10240, "10KiB"), (102400, "100KiB")]
    conn_counts = [10] if quick else [10, 100]
    matrix = [
        (server, size, size_label, conns)
        for server in ("protocol", "streams", "sock")
        for size, size_label in sizes
        for conns in conn_counts
    ]
    if not quick:  # issue 32's cases: one connection, and 64 KiB messages
        matrix[1:1] = [("protocol", 1024, "1KiB", 1)]
        matrix += [("protocol", 65536, "64KiB", 10), ("streams", 65536, "64KiB", 10)]
    for server, size, size_label, conns in matrix:
        if server == "protocol" and size == 1024:
            target: float | None = 2.0
        elif server == "streams":
            target = 1.6
        else:
            target = None
        server_label = "sock_*" if server == "sock" else server
        cases.append(
            Case(
                "echo",
                f"echo/{server}/{size_label}/c{conns}",
                f"echo {server_label} {size_label} x{conns} conns",
                {
                    "kind": "echo",
                    "server": server,
                    "size": size,
                    "conns": conns,
                    "duration": net_duration,
                    "warmup": net_warmup,
                },
                _echo_metrics(target),
                network=True,
            )
        )
    tls_sizes = [(1024, "1KiB")] if quick else [(1024, "1KiB"), (65536, "64KiB")]
    for side in ("server", "client"):
        for size, size_label in tls_sizes:
            cpu = _SERVER_CPU if side == "server" else _CLIENT_CPU
            cases.append(
                Case(
                    "tls",
                    f"tls/{side}/{size_label}/c10",
                    f"TLS echo {size_label} x10 conns, the loop as {side}",
                    {
                        "kind": f"tls_{side}",
                        "size": size,
                        "conns": 10,
                        "duration": net_duration,
                        "warmup": net_warmup,
                    },
                    (
                        Metric("rps", "throughput", "req/s", True, None, ECHO_AIM_VS_UVLOOP),
                        Metric("p50_ms", "p50 latency", "ms", False),
                        cpu,
                    ),
                    network=True,
                )
            )
    http_conns = 10 if quick else 100
    for http_server in ("aiohttp", "uvicorn"):
        cases.append(
            Case(
                "http",
                # The aiohttp case keeps its id (http/c100) for comparison with earlier runs.
                f"http/c{http_conns}"
                if http_server == "aiohttp"
                else f"http/uvicorn/c{http_conns}",
                f"HTTP {http_server} x{http_conns} conns",
                {
                    "kind": "http",
                    "server": http_server,
                    "conns": http_conns,
                    # wrk takes whole seconds.
                    "duration": max(1, round(net_duration)),
                    "warmup": 1,
                },
                (
                    Metric("rps", "throughput", "req/s", True, 1.5, ECHO_AIM_VS_UVLOOP),
                    Metric("p50_ms", "p50 latency", "ms", False),
                    Metric("p99_ms", "p99 latency", "ms", False),
                    _SERVER_CPU,
                ),
                network=True,
            )
        )
    return cases


def select(cases: list[Case], only: list[str] | None) -> list[Case]:
    """The cases whose benchmark name, or case-id prefix, is in ``only``.

    Raises:
        ValueError: a name matches no case.
    """
    if not only:
        return cases
    chosen: list[Case] = []
    for name in only:
        matched = [c for c in cases if c.benchmark == name or c.case_id.startswith(name)]
        if not matched:
            known = ", ".join(BENCHMARKS)
            raise ValueError(f"unknown benchmark {name!r} (known: {known}, or a case-id prefix)")
        chosen.extend(c for c in matched if c not in chosen)
    order = {c.case_id: i for i, c in enumerate(cases)}
    return sorted(chosen, key=lambda c: order[c.case_id])
