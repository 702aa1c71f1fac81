"""The answers ``corun ps``, ``top`` and ``dump`` get: JSON documents with a stable schema.

They cover every observed loop of the process (usually one): the tasks of all
of them, and the loop figures merged (histograms add up).

``ps``: ``{"pid", "time", "blocked", "blocking", "loop", "tasks"}``, each task
``{"id", "name", "parent", "state", "waiting_on", "stack"}``.
``top``: ``{"pid", "time", "blocked", "blocking", "loop", "groups", "tasks"}``,
each group ``{"name", "live", "done", "steps", "busy", "lifetimes",
"lifetime_max"}`` (``Observer.groups``), each task ``{"id", "name", "state",
"steps", "busy", "longest", "wake_mean", "wake_max", "wake_p99"}``
(cumulative; ``corun top`` turns two answers into rates).
``dump``: ``{"pid", "stalls", "events"}``, each event ``{"t", "kind", "task",
"value", "text"}``; ``incidents``: the same with only the events of the
incidents' own ring (cancellations, stalls, notes), which spawns and exits
never push out.
``loop``: ``{"lag": {"p50", "p90", "p99", "max", "count"}, "schedule": {...},
"utilization", "cpu", "steps", "tasks": {state: count}}``. Durations in seconds
except where a name ends in ``_ms``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any, Final

from corun.observe.histogram import LatencyHistogram
from corun.observe.observer import Observer, pauses_for
from corun.observe.snapshot import Event, LoopSummary, Stall

#: Rows in a ``top`` answer.
TOP_ROWS: Final = 200


def loop_document(summaries: Sequence[LoopSummary]) -> dict[str, Any]:
    """The loop figures of ``summaries`` merged into one JSON object."""
    lag = LatencyHistogram.empty()
    schedule = LatencyHistogram.empty()
    tasks: dict[str, int] = {}
    for summary in summaries:
        lag = lag + summary.lag
        schedule = schedule + summary.schedule
        for state, count in summary.tasks.items():
            tasks[state] = tasks.get(state, 0) + count
    tasks["total"] = sum(tasks.values())
    running = [s for s in summaries if s.running] or list(summaries)
    return {
        "lag": lag.summary(),
        "schedule": schedule.summary(),
        "utilization": max((s.utilization for s in running), default=0.0),
        "cpu": sum(s.cpu for s in running),
        "steps": sum(s.steps for s in summaries),
        "longest_step": max((s.longest_step for s in summaries), default=0.0),
        "loops": len(summaries),
        "tasks": tasks,
    }


def stall_document(stall: Stall) -> dict[str, Any]:
    """A stall as JSON."""
    return {
        "task": stall.task,
        "task_id": stall.task_id,
        "duration_ms": stall.duration * 1e3,
        "cpu_ms": stall.cpu * 1e3,
        "gc_ms": stall.gc * 1e3,
        "computing": stall.computing,
        "stack": list(stall.stack),
        "t": stall.started,
        "detected_after_ms": None if stall.detected_after is None else stall.detected_after * 1e3,
        "backstop": stall.backstop,
    }


def ps_pieces(observers: Sequence[Observer]) -> list[bytes]:
    """The ``ps`` answer, as pieces of UTF-8 JSON that make one document in order.

    Each batch of tasks is encoded, to bytes and with the comma before it,
    as it is walked (the walk pauses for the loop), and the pieces are sent
    as they are, so that no single step holds the GIL for long: encoding a
    10,000-task document at once, joining its 2 MB, or even copying each
    piece once more after the walk, would stall the observed loop for
    milliseconds. A task's text is put together here, not
    by ``json``: its stack lines come encoded already (``waits.task_view``),
    and dicts for ``json`` to take apart again cost a third of the answer.
    """
    summaries = []
    encoded: list[bytes] = []
    # Blocked? Read it first: the answer is about the loop as it was asked.
    blocking = _blocking(observers)
    for observer in observers:
        states: dict[str, int] = {}
        batch: list[str] = []
        for ident, name, parent, state, waits, stack in observer.ps_rows():
            states[state] = states.get(state, 0) + 1
            batch.append(
                f'{{"id":{ident},"name":{_string(name)},'
                f'"parent":{"null" if parent is None else parent},"state":"{state}",'
                f'"waiting_on":{_string(waits)},"stack":[{",".join(stack)}]}}'
            )
            if len(batch) == 32:  # one piece per 32 tasks: a few KiB
                encoded.append(_piece(batch, first=not encoded))
                batch.clear()
        if batch:
            encoded.append(_piece(batch, first=not encoded))
        summaries.append(observer.summary(states=states))
    head = {
        "pid": os.getpid(),
        "time": time.time(),
        "blocked": blocking is not None,
        "blocking": blocking,
        "loop": loop_document(summaries),
    }
    return [(encode(head)[:-1] + ',"tasks":[').encode(), *encoded, b"]}"]


def _piece(tasks: list[str], *, first: bool) -> bytes:
    """Tasks' JSON objects as one piece of the ``tasks`` array (after a comma unless ``first``)."""
    text = ",".join(tasks)
    return (text if first else "," + text).encode()


def _blocking(observers: Sequence[Observer]) -> dict[str, Any] | None:
    """What blocks a loop of ``observers`` now, for an answer's banner; None if none is blocked."""
    for observer in observers:
        stall = observer.blocked()
        if stall is not None:
            return {"task": stall.task, "for_ms": stall.duration * 1e3, "stack": list(stall.stack)}
    return None


def _merge_group(into: dict[str, Any], group: dict[str, Any]) -> None:
    """Add the counters of ``group`` (of another loop) to those of ``into``."""
    for key in ("live", "done", "steps", "busy"):
        into[key] += group[key]
    counts = dict(into["lifetimes"])
    for bucket, count in group["lifetimes"]:
        counts[bucket] = counts.get(bucket, 0) + count
    into["lifetimes"] = [list(pair) for pair in sorted(counts.items())]
    into["lifetime_max"] = max(into["lifetime_max"], group["lifetime_max"])


def top(observers: Sequence[Observer], rows: int = TOP_ROWS) -> dict[str, Any]:
    """The ``top`` answer: cumulative counters of the task groups and of the busiest tasks.

    The busiest tasks since the previous ``top`` answer, at most ``rows`` of
    them: a screen shows no more, and 10,000 rows a second would cost the loop
    more than the 1% ``corun top`` may. No stacks, but a blocked loop's.
    """
    blocking = _blocking(observers)
    summaries = []
    listed: list[dict[str, Any]] = []
    groups: dict[str, dict[str, Any]] = {}
    for observer in observers:
        states: dict[str, int] = {}
        live = observer.live_tasks()
        listed.extend(observer.busiest(rows, states, live))
        for name, group in observer.groups(live).items():
            if name in groups:
                _merge_group(groups[name], group)
            else:
                groups[name] = group
        summaries.append(observer.summary(states=states))
    listed.sort(key=lambda row: row["recent"], reverse=True)
    for row in listed:
        del row["recent"]
    return {
        "pid": os.getpid(),
        "time": time.monotonic(),
        "blocked": blocking is not None,
        "blocking": blocking,
        "loop": loop_document(summaries),
        "groups": [{"name": name, **group} for name, group in groups.items()],
        "tasks": listed[:rows],
    }


def dump(observers: Sequence[Observer], *, incidents_only: bool = False) -> dict[str, Any]:
    """The ``dump`` answer as a document (for the file written on SIGTERM or a crash)."""
    return json.loads(b"".join(dump_pieces(observers, incidents_only=incidents_only)))  # type: ignore[no-any-return]


def dump_pieces(observers: Sequence[Observer], *, incidents_only: bool = False) -> list[bytes]:
    """The ``dump`` answer (``incidents`` with ``incidents_only``), as pieces of UTF-8 JSON.

    ``{"pid", "stalls", "events"}``, made as ``ps_pieces`` makes its own: the
    events are read a slice at a time and each slice is encoded at once, so
    that no Python object stays per event (a full recorder's 10,000 would
    bring on a full collection); off the loop's thread the work pauses every
    ``CHUNK_SECONDS`` for the loop.
    """
    pauses = pauses_for(observers)
    try:
        stalls = [stall_document(stall) for o in observers for stall in o.stall_list()]
        pieces = [f'{{"pid":{os.getpid()},"stalls":{encode(stalls)},"events":['.encode()]
        slices: Iterable[list[Event]]
        if len(observers) == 1:
            slices = observers[0].event_slices(incidents_only=incidents_only, pauses=pauses)
        else:  # loops' events interleaved in time: rare enough to sort whole
            every = [
                event
                for observer in observers
                for events in observer.event_slices(incidents_only=incidents_only, pauses=pauses)
                for event in events
            ]
            every.sort(key=lambda event: event.time)
            slices = [every]
        for events in slices:
            for first in range(0, len(events), 64):
                if first:
                    pauses.tick()
                batch = [
                    f'{{"t":{e.time!r},"kind":{_string(e.kind)},"task":{e.task_id},'
                    f'"value":{e.value},"text":{_string(e.text)}}}'
                    for e in events[first : first + 64]
                ]
                pieces.append(_piece(batch, first=len(pieces) == 1))
        pieces.append(b"]}")
        return pieces
    finally:
        pauses.done()


def encode(document: dict[str, Any] | list[Any]) -> str:
    """Compact JSON text."""
    return json.dumps(document, separators=(",", ":"))


#: ``text`` as a JSON string, as ``encode`` writes it (ASCII only).
_string: Final = encode_basestring_ascii
