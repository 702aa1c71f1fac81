"""The exports of an observed loop: Prometheus text and OpenTelemetry instruments."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import corun
import corun.observe as observe
from corun.observe import otel, prometheus


def _work(loop: corun.EventLoop) -> asyncio.Event:
    """Run a known workload on ``loop``: 50 steps, one 30 ms block; leave 3 tasks waiting."""
    release = asyncio.Event()

    async def waiter() -> None:
        await release.wait()

    async def main() -> None:
        for _ in range(3):
            loop.create_task(waiter(), name="waiter")
        for _ in range(50):
            await asyncio.sleep(0)
        time.sleep(0.03)  # the loop's longest step: a task step 30 ms long
        await asyncio.sleep(0)

    loop.run_until_complete(loop.create_task(main(), name="blocker"))
    return release


def _finish(loop: corun.EventLoop, release: asyncio.Event) -> None:
    release.set()
    loop.run_until_complete(asyncio.sleep(0.01))


def test_prometheus_text_of_a_real_loop(loop: corun.EventLoop) -> None:
    observer = observe.enable(loop, serve=False)
    release = _work(loop)
    text = prometheus.exposition([observer])
    _finish(loop, release)

    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    steps = values["corun_eventloop_steps_total"]
    assert steps >= 52
    assert values['corun_tasks{state="waiting"}'] == 3
    # The lag histogram counts every handle: one sample per step.
    assert values["corun_eventloop_lag_seconds_count"] == steps
    buckets = []
    for name, value in values.items():
        match = re.fullmatch(r'corun_eventloop_lag_seconds_bucket\{le="([0-9.e+-]+)"\}', name)
        if match:
            buckets.append((float(match.group(1)), value))
    assert buckets == sorted(buckets), "cumulative counts rise with the bound"
    assert values['corun_eventloop_lag_seconds_bucket{le="+Inf"}'] == steps
    # The step after the 30 ms block was queued before it: at least 30 ms late.
    late = [count for bound, count in buckets if bound < 0.03]
    assert late and late[-1] < steps
    assert values["corun_task_schedule_seconds_count"] >= 52


def _points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "corun.observe"
            for metric in scope.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


def test_opentelemetry_instruments_read_the_observed_loop(loop: corun.EventLoop) -> None:
    observer = observe.enable(loop, serve=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel.instrument(provider, observers=lambda: [observer])
    try:
        release = _work(loop)
        points = _points(reader)
        # The loop is not running: nothing changes between the two reads.
        summary = observer.summary()
        _finish(loop, release)
    finally:
        provider.shutdown()

    assert set(points) == {
        "corun.eventloop.lag",
        "corun.task.schedule",
        "corun.eventloop.utilization",
        "corun.eventloop.cpu",
        "corun.eventloop.steps",
        "corun.eventloop.stalls",
        "corun.tasks",
    }
    lag = {point.attributes["quantile"]: point.value for point in points["corun.eventloop.lag"]}
    assert set(lag) == {"p50", "p90", "p99", "max"}
    assert 0.0 <= lag["p50"] <= lag["p90"] <= lag["p99"] <= lag["max"]
    assert lag["max"] >= 0.03, "the step queued behind the 30 ms block"
    assert lag["max"] == summary.lag.max
    assert summary.longest_step >= 0.03 and summary.longest_step_owner == "blocker"
    (steps,) = points["corun.eventloop.steps"]
    assert steps.value == summary.steps >= 52
    tasks = {point.attributes["state"]: point.value for point in points["corun.tasks"]}
    assert tasks == {"cancelling": 0, "ready": 0, "running": 0, "waiting": 3}
    (utilization,) = points["corun.eventloop.utilization"]
    assert 0.0 <= utilization.value <= 1.0


def test_a_closed_instrumentation_reports_nothing(loop: corun.EventLoop) -> None:
    observer = observe.enable(loop, serve=False)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    registered = otel.instrument(provider, observers=lambda: [observer])
    try:
        assert "corun.eventloop.steps" in _points(reader)
        registered.close()
        data = reader.get_metrics_data()
        names = {
            metric.name
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.data.data_points
        }
        assert names == set()
    finally:
        provider.shutdown()


def test_every_observed_loop_is_reported_by_default(loop: corun.EventLoop) -> None:
    observe.enable(loop, serve=False)
    other = corun.new_event_loop()
    try:
        observe.enable(other, serve=False)
        for each in (loop, other):
            each.run_until_complete(asyncio.sleep(0))
        observers = [observe.observer_of(each) for each in (loop, other)]
        # Steps only grow; other loops of this process may be observed too.
        least = sum(each.summary().steps for each in observers if each is not None)
        assert least >= 2
        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
        otel.instrument(provider)
        try:
            (steps,) = _points(reader)["corun.eventloop.steps"]
        finally:
            provider.shutdown()
        assert steps.value >= least
    finally:
        observer = observe.observer_of(other)
        if observer is not None:
            observer.close()
        other.close()
