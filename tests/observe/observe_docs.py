"""Sample answers of an observed process, in the schemas of ``docs/observe.md``.

The inspection tests' child process serves them, and the view tests render
them, so both sides check the same documents.
"""

from __future__ import annotations

from typing import Any

from corun.runtime.engine.accounting import bucket_of

#: The histogram buckets of a 1 ms and a 40 ms task lifetime.
MS_1 = bucket_of(1_000_000)
MS_40 = bucket_of(40_000_000)

LOOP: dict[str, Any] = {
    "lag": {"p50": 0.0001, "p90": 0.0004, "p99": 0.0023, "max": 0.005, "count": 1234},
    "utilization": 0.12,
    "cpu": 0.03,
    "tasks": {"total": 5, "running": 1, "waiting": 4},
}


def ps_doc(pid: int) -> dict[str, Any]:
    """A task tree: main -> (worker-0 -> child, worker-1), and an orphan whose parent exited."""
    return {
        "pid": pid,
        "time": 1790000000.0,
        "blocked": False,
        "blocking": None,
        "loop": LOOP,
        "tasks": [
            {
                "id": 3,
                "name": "worker-1",
                "parent": 1,
                "state": "waiting",
                "waiting_on": "Event 0x7f01",
                "stack": ["/srv/app/main.py:40 main", "/srv/app/work.py:12 worker"],
            },
            {
                "id": 1,
                "name": "main",
                "parent": None,
                "state": "waiting",
                "waiting_on": "Task worker-0",
                "stack": ["/srv/app/main.py:40 main"],
            },
            {
                "id": 5,
                "name": "child",
                "parent": 2,
                "state": "running",
                "waiting_on": "",
                "stack": [],
            },
            {
                "id": 2,
                "name": "worker-0",
                "parent": 1,
                "state": "waiting",
                "waiting_on": "sleep until +1.500 s",
                "stack": [
                    "/srv/app/main.py:40 main",
                    "/srv/app/work.py:30 fetch",
                    "/srv/app/work.py:12 worker",
                    "/srv/app/net.py:7 read_frame",
                ],
            },
            {
                "id": 9,
                "name": "orphan",
                "parent": 7,
                "state": "waiting",
                "waiting_on": "Queue.get",
                "stack": ["/srv/app/queue.py:3 drain"],
            },
        ],
    }


def top_doc(pid: int, sample: int) -> dict[str, Any]:
    """The ``sample``-th ``top`` answer: one second after the previous one.

    Per second: ``busy`` runs 25% of the time at 40 steps/s, ``light`` 5% at
    200 steps/s, ``idle`` not at all; ``late`` exists from the second sample.
    """
    tasks = [
        _top_task(1, "busy", "running", steps=40 * sample, busy=0.25 * sample, longest=0.030),
        _top_task(2, "light", "waiting", steps=200 * sample, busy=0.05 * sample, longest=0.002),
        _top_task(3, "idle", "waiting", steps=1, busy=0.0001, longest=0.0001),
    ]
    if sample >= 2:
        tasks.append(_top_task(4, "late", "waiting", steps=10, busy=0.1, longest=0.004))
    return {
        "pid": pid,
        "time": 100.0 + sample,
        "blocked": False,
        "blocking": None,
        "loop": LOOP,
        "groups": top_groups(sample),
        "tasks": tasks,
    }


def top_groups(sample: int) -> list[dict[str, Any]]:
    """Per second: 100 ``handle`` tasks end (98 after 1 ms, two after 40 ms) with 30% CPU;
    ``worker``'s two live tasks take 10%; ``idle`` does nothing; ``late`` (from the second
    sample) ended 5 tasks of 1 ms in all."""
    groups = [
        _group(
            "handle",
            live=3,
            done=100 * sample,
            busy=0.3 * sample,
            steps=300 * sample,
            lifetimes=[[MS_1, 98 * sample], [MS_40, 2 * sample]],
            longest=0.04,
        ),
        _group("worker", live=2, done=0, busy=0.1 * sample, steps=50 * sample),
        _group("idle", live=0, done=7, busy=0.01, steps=14, lifetimes=[[MS_1, 7]]),
    ]
    if sample >= 2:
        groups.append(_group("late", live=0, done=5, busy=0.002, steps=5, lifetimes=[[MS_1, 5]]))
    return groups


def _group(
    name: str,
    *,
    live: int,
    done: int,
    busy: float,
    steps: int,
    lifetimes: list[list[int]] | None = None,
    longest: float = 0.001,
) -> dict[str, Any]:
    return {
        "name": name,
        "live": live,
        "done": done,
        "steps": steps,
        "busy": busy,
        "lifetimes": lifetimes or [],
        "lifetime_max": longest if lifetimes else 0.0,
    }


def _top_task(
    task_id: int, name: str, state: str, *, steps: int, busy: float, longest: float
) -> dict[str, Any]:
    return {
        "id": task_id,
        "name": name,
        "state": state,
        "steps": steps,
        "busy": busy,
        "longest": longest,
        "wake_mean": 0.0002,
        "wake_max": 0.003,
        "wake_p99": 0.0009 * task_id,
    }


def dump_doc(pid: int) -> dict[str, Any]:
    """Two events (one with the canceller's stack) and two stalls, one computing, one parked."""
    return {
        "pid": pid,
        "events": [
            {"t": 1790000000.5, "kind": "task_spawned", "task": "worker-0", "id": 2},
            {
                "t": 1790000001.25,
                "kind": "cancelled",
                "task": "worker 1",
                "stack": ["/srv/app/main.py:50 shutdown", "/srv/app/main.py:51 stop_all"],
            },
        ],
        "stalls": [
            {
                "task": "worker-0",
                "duration_ms": 230.0,
                "cpu_ms": 229.1,
                "gc_ms": 1.5,
                "stack": ["/srv/app/work.py:12 worker", "/srv/app/work.py:90 checksum"],
                "t": 1790000001.0,
            },
            {
                "task": "<Handle Proto.data_received>",
                "duration_ms": 120.0,
                "cpu_ms": 0.4,
                "gc_ms": 0.0,
                "stack": [
                    "/srv/app/proto.py:20 data_received",
                    "/usr/lib/python3.11/time.py:0 sleep",
                ],
                "t": 1790000002.0,
            },
        ],
    }


METRICS = (
    "# HELP corun_eventloop_utilization Busy share of the loop over the last second.\n"
    "# TYPE corun_eventloop_utilization gauge\n"
    "corun_eventloop_utilization 0.12\n"
    "# TYPE corun_tasks gauge\n"
    'corun_tasks{state="waiting"} 4\n'
    'corun_tasks{state="running"} 1\n'
)
