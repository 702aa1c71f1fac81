"""The Prometheus text exposition of the observed loops (the ``metrics`` request).

Names: ``corun_eventloop_lag_seconds`` and ``corun_task_schedule_seconds``
(histograms), ``corun_eventloop_utilization`` (gauge, 0 to 1, last 1 s
window), ``corun_eventloop_cpu`` (gauge, cores), ``corun_tasks{state=...}``
(gauge), ``corun_eventloop_steps_total`` and ``corun_eventloop_stalls_total``
(counters).
"""

from __future__ import annotations

from collections.abc import Sequence

from corun.observe.histogram import PROMETHEUS_BOUNDS, LatencyHistogram
from corun.observe.metrics import merged
from corun.observe.observer import Observer


def _histogram(name: str, help_text: str, histogram: LatencyHistogram) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    counts = histogram.cumulative()
    for bound, count in zip(PROMETHEUS_BOUNDS, counts, strict=False):
        lines.append(f'{name}_bucket{{le="{bound:g}"}} {count}')
    lines.append(f'{name}_bucket{{le="+Inf"}} {counts[-1]}')
    lines.append(f"{name}_sum {histogram.total:.9g}")
    lines.append(f"{name}_count {histogram.count}")
    return lines


def exposition(observers: Sequence[Observer]) -> str:
    """The metrics of every observed loop, merged, in Prometheus text format 0.0.4."""
    figures = merged(observers)
    lines = _histogram(
        "corun_eventloop_lag_seconds",
        "Lateness of timers and ready callbacks: run time minus due or queued time.",
        figures.lag,
    )
    lines += _histogram(
        "corun_task_schedule_seconds",
        "Wake-to-run latency of task steps.",
        figures.schedule,
    )
    lines += [
        "# HELP corun_eventloop_utilization Busy fraction of the loop over the last second.",
        "# TYPE corun_eventloop_utilization gauge",
        f"corun_eventloop_utilization {figures.utilization:.6g}",
        "# HELP corun_eventloop_cpu CPU time of the loop thread over the last second, in cores.",
        "# TYPE corun_eventloop_cpu gauge",
        f"corun_eventloop_cpu {figures.cpu:.6g}",
        "# HELP corun_eventloop_steps_total Callbacks and task steps run while observed.",
        "# TYPE corun_eventloop_steps_total counter",
        f"corun_eventloop_steps_total {figures.steps}",
        "# HELP corun_eventloop_stalls_total Stalls kept (the most recent ones).",
        "# TYPE corun_eventloop_stalls_total counter",
        f"corun_eventloop_stalls_total {figures.stalls}",
        "# HELP corun_tasks Live tasks by state.",
        "# TYPE corun_tasks gauge",
    ]
    lines += [
        f'corun_tasks{{state="{state}"}} {count}' for state, count in sorted(figures.tasks.items())
    ]
    return "\n".join(lines) + "\n"
