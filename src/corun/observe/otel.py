"""The observed loops as OpenTelemetry metrics (optional: ``pip install 'corun[otel]'``).

``instrument()`` registers observable instruments on a meter; the SDK's reader
calls them when it collects, on its own thread, so nothing runs on the loop.
The figures are those of the Prometheus exposition (``prometheus.py``), merged
over every observed loop of the process, under OpenTelemetry's dotted names:

* ``corun.eventloop.lag`` and ``corun.task.schedule`` (gauges, seconds, one
  point per ``quantile`` attribute: ``p50``, ``p90``, ``p99``, ``max``).
  The API has no asynchronous histogram, so the percentiles are exported
  rather than the buckets; Prometheus's ``metrics`` request has the buckets;
* ``corun.eventloop.utilization`` (gauge, 0 to 1, last 1 s window) and
  ``corun.eventloop.cpu`` (gauge, cores);
* ``corun.eventloop.steps`` and ``corun.eventloop.stalls`` (counters);
* ``corun.tasks`` (up-down counter, one point per ``state`` attribute).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from corun.observe.histogram import LatencyHistogram
from corun.observe.metrics import Metrics, merged
from corun.observe.monitor import MONITOR
from corun.observe.observer import Observer

#: The instrumentation scope's name.
SCOPE: Final = "corun.observe"


class Instrumentation:
    """The instruments ``instrument()`` registered. ``close()`` stops their reports.

    OpenTelemetry cannot unregister an instrument, so after ``close()`` its
    callbacks report nothing.
    """

    def __init__(self, observers: Callable[[], Sequence[Observer]]) -> None:
        self._observers = observers
        self._closed = False
        # One read of the observers serves every instrument of one collection:
        # the reader calls the callbacks one after another.
        self._metrics: Metrics | None = None
        self._served: set[str] = set()

    def close(self) -> None:
        """Report nothing from now on."""
        self._closed = True

    def _read(self, instrument: str) -> Metrics | None:
        if self._closed:
            return None
        if self._metrics is None or instrument in self._served:
            self._metrics = merged(self._observers())
            self._served = set()
        self._served.add(instrument)
        return self._metrics


def instrument(
    meter_provider: Any = None,
    *,
    observers: Callable[[], Sequence[Observer]] | None = None,
) -> Instrumentation:
    """Register corun's loop metrics on ``meter_provider`` (default: the global one).

    ``observers``: whose figures to report (default: every loop observed in
    this process, as ``corun.observe.enable`` adds them).

    Raises:
        ImportError: ``opentelemetry-api`` is not installed (``corun[otel]``).
    """
    try:
        from opentelemetry import metrics
    except ImportError as exc:
        raise ImportError(
            "corun.observe.otel needs opentelemetry-api: pip install 'corun[otel]'"
        ) from exc
    from corun._version import __version__

    meter = metrics.get_meter(SCOPE, __version__, meter_provider=meter_provider)
    result = Instrumentation(observers if observers is not None else MONITOR.observers)
    Observation = metrics.Observation

    def quantiles(name: str, pick: Callable[[Metrics], LatencyHistogram]) -> Callable[..., Any]:
        def callback(_options: Any) -> Iterable[Any]:
            figures = result._read(name)
            if figures is None:
                return []
            histogram = pick(figures)
            return [
                Observation(histogram.p50, {"quantile": "p50"}),
                Observation(histogram.p90, {"quantile": "p90"}),
                Observation(histogram.p99, {"quantile": "p99"}),
                Observation(histogram.max, {"quantile": "max"}),
            ]

        return callback

    def single(name: str, pick: Callable[[Metrics], float]) -> Callable[..., Any]:
        def callback(_options: Any) -> Iterable[Any]:
            figures = result._read(name)
            return [] if figures is None else [Observation(pick(figures))]

        return callback

    def tasks(_options: Any) -> Iterable[Any]:
        figures = result._read("corun.tasks")
        if figures is None:
            return []
        return [Observation(count, {"state": state}) for state, count in figures.tasks.items()]

    # name, instrument kind, callback, unit, description
    instruments: list[tuple[str, str, Callable[..., Any], str, str]] = [
        (
            "corun.eventloop.lag",
            "gauge",
            quantiles("corun.eventloop.lag", lambda m: m.lag),
            "s",
            "Lateness of timers and ready callbacks: run time minus due or queued time.",
        ),
        (
            "corun.task.schedule",
            "gauge",
            quantiles("corun.task.schedule", lambda m: m.schedule),
            "s",
            "Wake-to-run latency of task steps.",
        ),
        (
            "corun.eventloop.utilization",
            "gauge",
            single("corun.eventloop.utilization", lambda m: m.utilization),
            "1",
            "Busy fraction of the loop over the last second.",
        ),
        (
            "corun.eventloop.cpu",
            "gauge",
            single("corun.eventloop.cpu", lambda m: m.cpu),
            "{cpu}",
            "CPU time of the loop thread over the last second, in cores.",
        ),
        (
            "corun.eventloop.steps",
            "counter",
            single("corun.eventloop.steps", lambda m: m.steps),
            "{step}",
            "Callbacks and task steps run while observed.",
        ),
        (
            "corun.eventloop.stalls",
            "counter",
            single("corun.eventloop.stalls", lambda m: m.stalls),
            "{stall}",
            "Stalls kept (the most recent ones).",
        ),
        ("corun.tasks", "up_down_counter", tasks, "{task}", "Live tasks by state."),
    ]
    for name, kind, callback, unit, description in instruments:
        create = getattr(meter, f"create_observable_{kind}")
        create(name, [callback], unit=unit, description=description)
    return result
