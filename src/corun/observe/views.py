"""What ``corun ps``, ``corun top`` and ``corun dump`` print, made from the observed process's JSON.

Pure functions of the documents the inspection server answers (their schemas
are in ``docs/observe.md``): ``render_ps`` and ``render_dump`` return plain
text, for terminals and pipes alike; ``group_rows`` and ``top_rows`` turn two
consecutive ``top`` documents into rates per task group and per task, and
``render_top`` lays them out as a ``rich`` view. A document that lacks a field raises ``KeyError`` or
``TypeError``; the command reports it as a malformed answer.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rich.console import Group
from rich.table import Table
from rich.text import Text

from corun.observe.histogram import LatencyHistogram
from corun.runtime.engine.accounting import BUCKETS

#: A JSON object as ``json.loads`` gives it.
Doc = Mapping[str, Any]

#: Frames of the await chain that ``corun ps`` shows per task (the innermost).
PS_FRAMES: Final = 3
#: Widest task name and "waiting on" cell in ``corun ps``; longer ones are cut.
_NAME_WIDTH: Final = 48
_WAITING_WIDTH: Final = 40
#: A stall whose thread had the CPU for at least this share of it was computing
#: (the same bar as ``Stall.computing``; used when an answer does not say).
_COMPUTING_SHARE: Final = 0.1


def duration(seconds: float) -> str:
    """A duration for people: ``850 µs``, ``12.3 ms``, ``1.50 s``."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def wall_time(t: float) -> str:
    """A Unix time as UTC ISO 8601 to the millisecond: ``2026-11-24T01:52:24.123Z``."""
    whole = int(t)
    millis = min(999, round((t - whole) * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def loop_summary(loop: Doc) -> list[str]:
    """Three lines on the loop: its task counts; its lag; its utilisation and CPU."""
    counts = dict(loop["tasks"])
    total = counts.pop("total")
    states = ", ".join(f"{state} {n}" for state, n in sorted(counts.items()) if n)
    lag = loop["lag"]
    return [
        f"tasks {total}" + (f" ({states})" if states else ""),
        f"lag p50 {duration(lag['p50'])}  p90 {duration(lag['p90'])}  "
        f"p99 {duration(lag['p99'])}  max {duration(lag['max'])}  ({lag['count']} samples)",
        f"utilisation {loop['utilization']:.1%}  cpu {loop['cpu']:.1%}",
    ]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


# --------------------------------------------------------------------------- ps


def task_tree(tasks: Sequence[Doc]) -> list[tuple[str, Doc]]:
    """The tasks in tree order, each with the prefix that draws its branch.

    A task comes right after its parent, and siblings in id order. A task
    whose parent is not listed (it has exited) is a root. A cycle of parents,
    which a sane process never reports, is broken at its lowest id.
    """
    by_id = {task["id"]: task for task in tasks}
    children: dict[int | None, list[Doc]] = defaultdict(list)
    for task in tasks:
        parent = task["parent"]
        children[parent if parent in by_id and parent != task["id"] else None].append(task)
    for siblings in children.values():
        siblings.sort(key=lambda task: task["id"])
    order: list[tuple[str, Doc]] = []
    seen: set[int] = set()
    for root in children[None]:
        order.extend(_walk(root, children, seen))
    # Tasks on a cycle of parents are reachable from no root.
    for task_id in sorted(by_id):
        if task_id not in seen:
            order.extend(_walk(by_id[task_id], children, seen))
    return order


def _walk(
    root: Doc, children: Mapping[int | None, list[Doc]], seen: set[int]
) -> Iterator[tuple[str, Doc]]:
    # Iterative: a chain of 10,000 nested tasks would overflow recursion.
    stack: list[tuple[Doc, str, str]] = [(root, "", "")]
    while stack:
        task, prefix, lead = stack.pop()
        if task["id"] in seen:
            continue
        seen.add(task["id"])
        yield prefix, task
        kids = [kid for kid in children.get(task["id"], []) if kid["id"] not in seen]
        for index in range(len(kids) - 1, -1, -1):
            last = index == len(kids) - 1
            stack.append(
                (kids[index], lead + ("└─ " if last else "├─ "), lead + ("   " if last else "│  "))
            )


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _frame(frame: str) -> str:
    """``/long/path/app.py:12 worker`` -> ``app.py:12 worker``."""
    location, space, function = frame.partition(" ")
    return location.rsplit("/", 1)[-1] + space + function


def await_chain(stack: Sequence[str], frames: int = PS_FRAMES) -> str:
    """The innermost ``frames`` frames of a stack (innermost last), outermost first."""
    shown = [_frame(frame) for frame in stack[-frames:]]
    return ("… > " if len(stack) > frames else "") + " > ".join(shown)


def blocked_banner(doc: Doc) -> list[str]:
    """The lines on a blocked loop's culprit and its stack (none if the loop is not blocked)."""
    if not doc.get("blocked"):
        return []
    blocking = doc.get("blocking")
    if not blocking:
        return ["LOOP BLOCKED; the loop is answering from its watchdog"]
    return [
        f"LOOP BLOCKED for {duration(blocking['for_ms'] / 1000.0)} "
        f"by {blocking['task']}; the loop is answering from its watchdog:",
        *(f"    {frame}" for frame in blocking["stack"]),
    ]


def render_ps(doc: Doc) -> str:
    """The text of ``corun ps``: the loop, a blocked loop's culprit, then the task tree."""
    lines = [f"corun ps {doc['pid']}: " + "\n".join(loop_summary(doc["loop"]))]
    lines.extend(blocked_banner(doc))
    lines.append("")
    rows = [
        (
            str(task["id"]),
            task["state"],
            _cut(prefix + task["name"], _NAME_WIDTH),
            _cut(task["waiting_on"] or "-", _WAITING_WIDTH),
            await_chain(task["stack"]) or "-",
        )
        for prefix, task in task_tree(doc["tasks"])
    ]
    header = ("ID", "STATE", "TASK", "WAITING ON", "AWAIT CHAIN (innermost last)")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [row[0].rjust(widths[0]), *(row[i].ljust(widths[i]) for i in (1, 2, 3)), row[4]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- top


@dataclass(frozen=True, slots=True)
class TopRow:
    """One task's line in ``corun top``, over the interval between two samples.

    Attributes:
        cpu_share: the share of the interval the task ran on the loop (0..1).
        steps_per_s: its steps per second over the interval.
        longest: its longest step so far, in seconds.
        wake_p99: its 99th percentile wake-to-run latency, in seconds.
    """

    id: int
    name: str
    state: str
    cpu_share: float
    steps_per_s: float
    longest: float
    wake_p99: float


def top_rows(before: Doc, after: Doc) -> list[TopRow]:
    """Per-task rates from two consecutive ``top`` documents, busiest first.

    The deltas of the cumulative ``busy`` and ``steps`` counters are taken by
    task id; a task new in ``after`` counts from zero, and one gone since
    ``before`` is left out. Ties go to more steps per second, then to the
    lower id.

    Raises:
        ValueError: the documents are of different processes, or ``after``
            is not later than ``before``.
    """
    interval = _interval(before, after)
    earlier = {task["id"]: task for task in before["tasks"]}
    rows = []
    for task in after["tasks"]:
        prev = earlier.get(task["id"])
        if prev is None or task["steps"] < prev["steps"]:
            prev = {"busy": 0.0, "steps": 0}
        rows.append(
            TopRow(
                id=task["id"],
                name=task["name"],
                state=task["state"],
                cpu_share=max(0.0, task["busy"] - prev["busy"]) / interval,
                steps_per_s=(task["steps"] - prev["steps"]) / interval,
                longest=task["longest"],
                wake_p99=task["wake_p99"],
            )
        )
    rows.sort(key=lambda row: (-row.cpu_share, -row.steps_per_s, row.id))
    return rows


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One task group's line in ``corun top``, over the interval between two samples.

    Attributes:
        name: the group: the coroutine function's qualified name, or a label.
        live: its tasks alive at the second sample.
        ended_per_s: its tasks that ended, per second.
        cpu_share: the share of the interval its tasks ran on the loop (0..1).
        steps_per_s: its tasks' steps per second.
        p50, p99: the spawn-to-end time of the tasks that ended in the
            interval, in seconds (None: none ended).
    """

    name: str
    live: int
    ended_per_s: float
    cpu_share: float
    steps_per_s: float
    p50: float | None
    p99: float | None


def _lifetimes(group: Doc | None) -> LatencyHistogram:
    if group is None:
        return LatencyHistogram.empty()
    counts = [0] * BUCKETS
    for bucket, count in group["lifetimes"]:
        counts[bucket] = count
    return LatencyHistogram(tuple(counts), sum(counts), 0.0, group["lifetime_max"])


def _interval(before: Doc, after: Doc) -> float:
    if before["pid"] != after["pid"]:
        raise ValueError(f"top samples of two processes ({before['pid']}, {after['pid']})")
    interval: float = after["time"] - before["time"]
    if not interval > 0:
        raise ValueError("top samples out of time order")
    return interval


def group_rows(before: Doc, after: Doc) -> list[GroupRow]:
    """Per-group rates from two consecutive ``top`` documents, busiest first.

    The counters are cumulative (ended tasks' and live tasks' together), so
    the deltas count what the group's tasks did in the interval. A task that
    the application labelled mid-way moves its past work to its new group,
    so a delta below zero counts as zero. Groups idle in the interval and
    with no live task are left out. Ties go to more ended tasks, then to name.

    Raises:
        ValueError: the documents are of different processes, or ``after``
            is not later than ``before``.
    """
    interval = _interval(before, after)
    earlier = {group["name"]: group for group in before.get("groups", ())}
    rows = []
    for group in after.get("groups", ()):
        prev = earlier.get(group["name"])
        ended = group["done"] - (prev["done"] if prev else 0)
        busy = group["busy"] - (prev["busy"] if prev else 0.0)
        steps = group["steps"] - (prev["steps"] if prev else 0)
        if ended <= 0 and busy <= 0 and steps <= 0 and not group["live"]:
            continue
        p50 = p99 = None
        if ended > 0:
            delta = _lifetimes(group) - _lifetimes(prev)
            if delta.count > 0:
                p50, p99 = delta.quantiles((0.5, 0.99))
        rows.append(
            GroupRow(
                name=group["name"],
                live=group["live"],
                ended_per_s=max(0, ended) / interval,
                cpu_share=max(0.0, busy) / interval,
                steps_per_s=max(0, steps) / interval,
                p50=p50,
                p99=p99,
            )
        )
    rows.sort(key=lambda row: (-row.cpu_share, -row.ended_per_s, row.name))
    return rows


def _group_table(rows: Sequence[GroupRow]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("GROUP", overflow="ellipsis", no_wrap=True, max_width=_NAME_WIDTH)
    table.add_column("LIVE", justify="right")
    table.add_column("ENDED/S", justify="right")
    table.add_column("CPU", justify="right")
    table.add_column("STEPS/S", justify="right")
    table.add_column("TIME P50", justify="right")
    table.add_column("TIME P99", justify="right")
    for row in rows:
        table.add_row(
            row.name,
            str(row.live),
            f"{row.ended_per_s:.1f}",
            f"{row.cpu_share:.1%}",
            f"{row.steps_per_s:.1f}",
            "-" if row.p50 is None else duration(row.p50),
            "-" if row.p99 is None else duration(row.p99),
        )
    return table


def render_top(
    after: Doc,
    rows: Sequence[TopRow],
    *,
    limit: int,
    groups: Sequence[GroupRow] | None = None,
) -> Group:
    """The ``corun top`` view: the loop's lines, a blocked loop's culprit, then the rows.

    With ``groups``, the first ``limit`` groups; otherwise the first ``limit`` tasks.
    """
    title = Text(f"corun top {after['pid']}: ", style="bold")
    summary = loop_summary(after["loop"])
    head: list[Any] = [title + Text(summary[0]), *map(Text, summary[1:])]
    head.extend(Text(line, style="bold red") for line in blocked_banner(after))
    head.append(Text(""))
    if groups is not None:
        more = len(groups) - limit
        tail = [Text(f"… and {more} more groups", style="dim")] if more > 0 else []
        return Group(*head, _group_table(groups[:limit]), *tail)
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("ID", justify="right")
    table.add_column("TASK", overflow="ellipsis", no_wrap=True, max_width=_NAME_WIDTH)
    table.add_column("STATE")
    table.add_column("CPU", justify="right")
    table.add_column("STEPS/S", justify="right")
    table.add_column("LONGEST", justify="right")
    table.add_column("WAKE P99", justify="right")
    for row in rows[:limit]:
        table.add_row(
            str(row.id),
            row.name,
            row.state,
            f"{row.cpu_share:.1%}",
            f"{row.steps_per_s:.1f}",
            duration(row.longest),
            duration(row.wake_p99),
        )
    parts: list[Any] = [*head, table]
    if len(rows) > limit:
        parts.append(Text(f"… and {len(rows) - limit} more tasks", style="dim"))
    return Group(*parts)


# --------------------------------------------------------------------------- dump


def _value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c.isspace() for c in value):
        return value
    return json.dumps(value, ensure_ascii=False)


def filter_dump(doc: Doc, *, since: float | None, limit: int | None, now: float) -> dict[str, Any]:
    """``doc`` with only the events and stalls of the last ``since`` seconds, and the newest ``limit`` events.

    ``now``: the current Unix time. The result says how many events the
    answer held (``events_held``), for the view's first line.
    """
    events = list(doc["events"])
    stalls = list(doc["stalls"])
    held = doc.get("events_held", len(events))
    if since is not None:
        events = [event for event in events if event["t"] >= now - since]
        stalls = [stall for stall in stalls if stall["t"] >= now - since]
    if limit is not None:
        events = events[-limit:]
    return {**doc, "events": events, "stalls": stalls, "events_held": held}


def render_dump(doc: Doc) -> str:
    """The text of ``corun dump``: the stalls with their stacks, then the flight recorder's events."""
    events = doc["events"]
    stalls = doc["stalls"]
    held = doc.get("events_held", len(events))
    shown = _count(len(events), "event") + (f" of {held}" if held != len(events) else "")
    lines = [f"corun dump {doc['pid']}: {_count(len(stalls), 'stall')}, {shown}", ""]
    lines.append("stalls:" if stalls else "stalls: none")
    for stall in stalls:
        total = stall["duration_ms"]
        cpu = stall["cpu_ms"]
        computing = stall.get("computing")
        if computing is None:  # an answer without the producer's verdict
            computing = total > 0 and cpu >= _COMPUTING_SHARE * total
        doing = "computing" if computing else "parked"
        lines.append(
            f"  {wall_time(stall['t'])}  {stall['task']} blocked the loop for "
            f"{duration(total / 1000.0)} ({doing}: cpu {duration(cpu / 1000.0)}, "
            f"gc {duration(stall['gc_ms'] / 1000.0)})"
        )
        lines.extend(f"      {frame}" for frame in stall["stack"])
    lines.append("")
    lines.append("events (oldest first):" if events else "events: none")
    for event in events:
        scalars = []
        blocks = []
        for key, value in event.items():
            if key in ("t", "kind"):
                continue
            if isinstance(value, list):
                blocks.append((key, value))
            else:
                scalars.append(f"{key}={_value(value)}")
        lines.append("  ".join([f"  {wall_time(event['t'])}", event["kind"], *scalars]).rstrip())
        for key, items in blocks:
            lines.append(f"      {key}:")
            lines.extend(
                f"        {item if isinstance(item, str) else _value(item)}" for item in items
            )
    return "\n".join(lines) + "\n"
