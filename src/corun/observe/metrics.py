"""The process's loop metrics, merged over every observed loop.

What both exports report: the Prometheus text (``prometheus.py``) and the
OpenTelemetry instruments (``otel.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from corun.observe.histogram import LatencyHistogram
from corun.observe.observer import Observer

#: The task states always reported, with 0 when there are none.
STATES: Final = ("cancelling", "ready", "running", "waiting")


@dataclass(frozen=True)
class Metrics:
    """The figures of the observed loops, added up (utilisation: the busiest loop's)."""

    lag: LatencyHistogram
    schedule: LatencyHistogram
    utilization: float
    cpu: float
    steps: int
    stalls: int
    tasks: dict[str, int]


def merged(observers: Sequence[Observer]) -> Metrics:
    """The figures of ``observers``, read now and merged."""
    lag = LatencyHistogram.empty()
    schedule = LatencyHistogram.empty()
    utilization = cpu = 0.0
    steps = stalls = 0
    tasks = dict.fromkeys(STATES, 0)
    for observer in observers:
        summary = observer.summary()
        lag = lag + summary.lag
        schedule = schedule + summary.schedule
        utilization = max(utilization, summary.utilization)
        cpu += summary.cpu
        steps += summary.steps
        stalls += len(observer.stall_list())
        for state, count in summary.tasks.items():
            tasks[state] = tasks.get(state, 0) + count
    return Metrics(lag, schedule, utilization, cpu, steps, stalls, tasks)
