"""A corun process observed through ``CORUN_OBSERVE=1``, for ``test_every_python.py``.

Its tasks: ``main`` (waits for its stdin to close), ``sleeper-0`` to
``sleeper-2`` (``asyncio.sleep``), ``waiter-0`` and ``waiter-1`` (an
``Event``), all of them waiting, and ``ticker``, which steps every 5 ms. Prints
``ready`` once they all wait. Each line read on stdin is a request, answered on
one line of stdout from the thread that reads stdin (not the loop's):

- ``otel``: OpenTelemetry's SDK collects the instruments of ``otel.instrument``
  now, and the line is ``{"tasks": {state: n}, "steps": n}`` as JSON.

Exits when its stdin closes. ``--asyncio``: the same on asyncio's own loop.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import corun
from corun.observe import otel


def collect(reader: InMemoryMetricReader) -> dict[str, object]:
    data = reader.get_metrics_data()
    found: dict[str, object] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points = list(metric.data.data_points)
                if metric.name == "corun.tasks":
                    found["tasks"] = {p.attributes["state"]: p.value for p in points}
                elif metric.name == "corun.eventloop.steps":
                    found["steps"] = points[0].value
    return found


def serve_stdin(loop: asyncio.AbstractEventLoop, closed: asyncio.Event) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel.instrument(provider)
    for line in sys.stdin:
        if line.strip() == "otel":
            print(json.dumps(collect(reader)), flush=True)
    provider.shutdown()
    loop.call_soon_threadsafe(closed.set)


async def main() -> None:
    loop = asyncio.get_running_loop()
    asyncio.current_task().set_name("main")  # type: ignore[union-attr]
    closed = asyncio.Event()
    gate = asyncio.Event()
    tasks = [asyncio.create_task(asyncio.sleep(3600), name=f"sleeper-{n}") for n in range(3)]
    tasks += [asyncio.create_task(gate.wait(), name=f"waiter-{n}") for n in range(2)]

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.005)

    tasks.append(asyncio.create_task(ticker(), name="ticker"))
    await asyncio.sleep(0.05)
    threading.Thread(target=serve_stdin, args=(loop, closed), daemon=True).start()
    print("ready", flush=True)
    await closed.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--asyncio"]:
        asyncio.run(main())
    else:
        corun.run(main())
