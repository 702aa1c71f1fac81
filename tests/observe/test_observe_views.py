"""What ``corun ps``, ``top`` and ``dump`` print, from given documents (corun.observe.views)."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from observe_docs import dump_doc, ps_doc, top_doc
from rich.console import Console

from corun.observe.views import (
    await_chain,
    duration,
    filter_dump,
    group_rows,
    render_dump,
    render_ps,
    render_top,
    task_tree,
    top_rows,
    wall_time,
)


def _task(task_id: int, parent: int | None, name: str = "") -> dict[str, Any]:
    return {
        "id": task_id,
        "name": name or f"t{task_id}",
        "parent": parent,
        "state": "waiting",
        "waiting_on": "",
        "stack": [],
    }


def _tree(tasks: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(prefix, task["id"]) for prefix, task in task_tree(tasks)]


def test_tree_puts_children_after_their_parent_in_id_order() -> None:
    assert _tree(ps_doc(1)["tasks"]) == [
        ("", 1),
        ("├─ ", 2),
        ("│  └─ ", 5),
        ("└─ ", 3),
        ("", 9),  # its parent 7 has exited: a root
    ]


def test_tree_draws_deeper_levels_under_a_last_child() -> None:
    tasks = [_task(1, None), _task(2, 1), _task(3, 2), _task(4, 2), _task(5, 1)]
    assert _tree(tasks) == [
        ("", 1),
        ("├─ ", 2),
        ("│  ├─ ", 3),
        ("│  └─ ", 4),
        ("└─ ", 5),
    ]
    tasks = [_task(1, None), _task(2, 1), _task(3, 2)]
    assert _tree(tasks) == [("", 1), ("└─ ", 2), ("   └─ ", 3)]


def test_tree_lists_every_task_once_even_on_a_cycle_of_parents() -> None:
    tasks = [_task(1, None), _task(4, 3), _task(3, 4), _task(6, 6)]
    order = _tree(tasks)
    assert sorted(task_id for _, task_id in order) == [1, 3, 4, 6]
    # A task that is its own parent is a root; the 3 <-> 4 cycle comes after the roots.
    assert order == [("", 1), ("", 6), ("", 3), ("└─ ", 4)]


def test_tree_of_a_long_chain_needs_no_recursion() -> None:
    tasks = [_task(1, None)] + [_task(i, i - 1) for i in range(2, 5001)]
    order = _tree(tasks)
    assert [task_id for _, task_id in order] == list(range(1, 5001))


def test_ps_lists_the_loop_then_a_row_per_task_in_tree_order() -> None:
    lines = render_ps(ps_doc(4242)).splitlines()
    assert lines[0] == "corun ps 4242: tasks 5 (running 1, waiting 4)"
    assert lines[1] == "lag p50 100 µs  p90 400 µs  p99 2.3 ms  max 5.0 ms  (1234 samples)"
    assert lines[2] == "utilisation 12.0%  cpu 3.0%"
    assert lines[3] == ""
    header, *rows = lines[4:]
    assert re.split(r"\s{2,}", header) == [
        "ID",
        "STATE",
        "TASK",
        "WAITING ON",
        "AWAIT CHAIN (innermost last)",
    ]
    columns = [header.index(title) for title in ("STATE", "TASK", "WAITING ON", "AWAIT CHAIN")]
    cells = [
        [row[a:b].strip() for a, b in zip([0, *columns], [*columns, None], strict=True)]
        for row in rows
    ]
    assert cells == [
        ["1", "waiting", "main", "Task worker-0", "main.py:40 main"],
        [
            "2",
            "waiting",
            "├─ worker-0",
            "sleep until +1.500 s",
            "… > work.py:30 fetch > work.py:12 worker > net.py:7 read_frame",
        ],
        ["5", "running", "│  └─ child", "-", "-"],
        ["3", "waiting", "└─ worker-1", "Event 0x7f01", "main.py:40 main > work.py:12 worker"],
        ["9", "waiting", "orphan", "Queue.get", "queue.py:3 drain"],
    ]


def test_ps_of_a_blocked_loop_names_the_culprit_and_its_stack() -> None:
    doc = ps_doc(7)
    doc["blocked"] = True
    doc["blocking"] = {"task": "worker-0", "for_ms": 230.5, "stack": ["a.py:1 f", "b.py:2 spin"]}
    lines = render_ps(doc).splitlines()
    assert lines[3:6] == [
        "LOOP BLOCKED for 230.5 ms by worker-0; the loop is answering from its watchdog:",
        "    a.py:1 f",
        "    b.py:2 spin",
    ]


def test_ps_cuts_long_names_and_waits() -> None:
    doc = ps_doc(7)
    doc["tasks"] = [{**_task(1, None, "n" * 100), "waiting_on": "w" * 100}]
    row = render_ps(doc).splitlines()[-1]
    assert "n" * 47 + "…" in row
    assert "n" * 48 not in row
    assert "w" * 39 + "…" in row


def test_await_chain_shows_the_innermost_frames() -> None:
    assert await_chain([]) == ""
    assert await_chain(["/a/b.py:1 f"]) == "b.py:1 f"
    assert await_chain(["x.py:1 a", "x.py:2 b", "x.py:3 c", "x.py:4 d"], frames=2) == (
        "… > x.py:3 c > x.py:4 d"
    )


def test_top_rows_are_rates_over_the_interval_busiest_first() -> None:
    rows = top_rows(top_doc(5, 1), top_doc(5, 2))
    assert [(r.id, r.name, r.state) for r in rows] == [
        (1, "busy", "running"),
        (4, "late", "waiting"),  # new: counted from zero, 0.1 s of the 1 s
        (2, "light", "waiting"),
        (3, "idle", "waiting"),
    ]
    by_name = {r.name: r for r in rows}
    assert by_name["busy"].cpu_share == pytest.approx(0.25)
    assert by_name["busy"].steps_per_s == pytest.approx(40)
    assert by_name["light"].cpu_share == pytest.approx(0.05)
    assert by_name["light"].steps_per_s == pytest.approx(200)
    assert by_name["late"].steps_per_s == pytest.approx(10)
    assert by_name["idle"].cpu_share == 0.0
    assert by_name["busy"].longest == 0.030
    assert by_name["light"].wake_p99 == pytest.approx(0.0018)


def test_top_rows_break_ties_by_steps_then_id() -> None:
    before = top_doc(5, 1)
    after = top_doc(5, 2)
    for task in after["tasks"]:
        task["busy"] = (
            next(t["busy"] for t in before["tasks"] if t["id"] == task["id"])
            if (task["id"] != 4)
            else 0.0
        )
    assert [r.id for r in top_rows(before, after)] == [2, 1, 4, 3]


def test_top_rows_refuse_samples_out_of_order_or_of_two_processes() -> None:
    with pytest.raises(ValueError, match="time order"):
        top_rows(top_doc(5, 2), top_doc(5, 1))
    with pytest.raises(ValueError, match="two processes"):
        top_rows(top_doc(5, 1), top_doc(6, 2))


def _text(renderable: object, width: int = 100) -> list[str]:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]  # type: ignore[attr-defined]


def test_top_view_has_the_loop_on_top_and_a_row_per_task() -> None:
    after = top_doc(5, 2)
    lines = _text(render_top(after, top_rows(top_doc(5, 1), after), limit=10))
    assert lines[:4] == [
        "corun top 5: tasks 5 (running 1, waiting 4)",
        "lag p50 100 µs  p90 400 µs  p99 2.3 ms  max 5.0 ms  (1234 samples)",
        "utilisation 12.0%  cpu 3.0%",
        "",
    ]
    assert lines[4].split() == ["ID", "TASK", "STATE", "CPU", "STEPS/S", "LONGEST", "WAKE", "P99"]
    assert [line.split() for line in lines[5:]] == [
        ["1", "busy", "running", "25.0%", "40.0", "30.0", "ms", "900", "µs"],
        ["4", "late", "waiting", "10.0%", "10.0", "4.0", "ms", "3.6", "ms"],
        ["2", "light", "waiting", "5.0%", "200.0", "2.0", "ms", "1.8", "ms"],
        ["3", "idle", "waiting", "0.0%", "0.0", "100", "µs", "2.7", "ms"],
    ]


def test_top_view_shows_the_first_rows_and_counts_the_rest() -> None:
    after = top_doc(5, 2)
    lines = _text(render_top(after, top_rows(top_doc(5, 1), after), limit=2))
    assert [line.split()[1] for line in lines[5:7]] == ["busy", "late"]
    assert lines[7] == "… and 2 more tasks"
    assert len(lines) == 8


def test_group_rows_are_rates_of_the_interval_busiest_first() -> None:
    rows = group_rows(top_doc(5, 1), top_doc(5, 2))
    # "idle" neither ran nor has a live task: left out. "late" is new in the
    # second sample: it counts from zero.
    assert [(r.name, r.live, r.ended_per_s, r.steps_per_s) for r in rows] == [
        ("handle", 3, 100.0, 300.0),
        ("worker", 2, 0.0, 50.0),
        ("late", 0, 5.0, 5.0),
    ]
    assert [r.cpu_share for r in rows] == pytest.approx([0.3, 0.1, 0.002])
    handle, worker, late = rows
    # Of the 100 that ended, 98 took 1 ms and 2 took 40 ms: p99 is the 99th.
    assert handle.p50 == pytest.approx(0.001, rel=0.01)
    assert handle.p99 == pytest.approx(0.04, rel=0.01)
    assert worker.p50 is None and worker.p99 is None
    assert late.p50 == pytest.approx(0.001, rel=0.01)


def test_group_rows_refuse_samples_out_of_order_or_of_two_processes() -> None:
    with pytest.raises(ValueError, match="time order"):
        group_rows(top_doc(5, 2), top_doc(5, 1))
    with pytest.raises(ValueError, match="two processes"):
        group_rows(top_doc(5, 1), top_doc(6, 2))


def test_group_rows_count_a_relabelled_groups_loss_as_zero() -> None:
    before, after = top_doc(5, 1), top_doc(5, 2)
    after["groups"][1]["busy"] = 0.0  # "worker"'s tasks moved to another group
    [worker] = [r for r in group_rows(before, after) if r.name == "worker"]
    assert worker.cpu_share == 0.0


def test_top_view_of_groups() -> None:
    after = top_doc(5, 2)
    lines = _text(render_top(after, [], limit=2, groups=group_rows(top_doc(5, 1), after)))
    assert lines[4].split() == [
        "GROUP",
        "LIVE",
        "ENDED/S",
        "CPU",
        "STEPS/S",
        "TIME",
        "P50",
        "TIME",
        "P99",
    ]
    assert [line.split() for line in lines[5:]] == [
        ["handle", "3", "100.0", "30.0%", "300.0", "1.0", "ms", "40.0", "ms"],
        ["worker", "2", "0.0", "10.0%", "50.0", "-", "-"],
        ["…", "and", "1", "more", "groups"],
    ]


def test_top_view_shows_a_blocked_loops_culprit() -> None:
    after = top_doc(5, 2)
    after["blocked"] = True
    after["blocking"] = {"task": "worker-0", "for_ms": 1500.0, "stack": ["/srv/app/w.py:9 crunch"]}
    lines = _text(render_top(after, [], limit=5, groups=group_rows(top_doc(5, 1), after)))
    assert lines[3:6] == [
        "LOOP BLOCKED for 1.50 s by worker-0; the loop is answering from its watchdog:",
        "    /srv/app/w.py:9 crunch",
        "",
    ]


def test_dump_lists_stalls_with_their_stacks_then_events() -> None:
    assert render_dump(dump_doc(9)).splitlines() == [
        "corun dump 9: 2 stalls, 2 events",
        "",
        "stalls:",
        "  2026-09-21T14:13:21.000Z  worker-0 blocked the loop for 230.0 ms "
        "(computing: cpu 229.1 ms, gc 1.5 ms)",
        "      /srv/app/work.py:12 worker",
        "      /srv/app/work.py:90 checksum",
        "  2026-09-21T14:13:22.000Z  <Handle Proto.data_received> blocked the loop for 120.0 ms "
        "(parked: cpu 400 µs, gc 0 µs)",
        "      /srv/app/proto.py:20 data_received",
        "      /usr/lib/python3.11/time.py:0 sleep",
        "",
        "events (oldest first):",
        "  2026-09-21T14:13:20.500Z  task_spawned  task=worker-0  id=2",
        '  2026-09-21T14:13:21.250Z  cancelled  task="worker 1"',
        "      stack:",
        "        /srv/app/main.py:50 shutdown",
        "        /srv/app/main.py:51 stop_all",
    ]


def test_dump_of_an_empty_recorder() -> None:
    assert render_dump({"pid": 3, "events": [], "stalls": []}).splitlines() == [
        "corun dump 3: 0 stalls, 0 events",
        "",
        "stalls: none",
        "",
        "events: none",
    ]


def test_dump_filters_keep_the_last_seconds_and_the_newest_events() -> None:
    doc = {
        "pid": 4,
        "stalls": [{"t": 100.0}, {"t": 195.0}],
        "events": [{"t": float(t), "kind": "spawn"} for t in (90, 150, 191, 192, 199)],
    }
    recent = filter_dump(doc, since=10.0, limit=None, now=200.0)
    assert [e["t"] for e in recent["events"]] == [191.0, 192.0, 199.0]
    assert recent["stalls"] == [{"t": 195.0}]
    newest = filter_dump(recent, since=None, limit=2, now=200.0)
    assert [e["t"] for e in newest["events"]] == [192.0, 199.0]
    assert newest["events_held"] == 5  # the header's "2 events of 5"
    assert render_dump({**newest, "stalls": []}).splitlines()[0] == (
        "corun dump 4: 0 stalls, 2 events of 5"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0 µs"), (0.0000004, "0 µs"), (0.00085, "850 µs"), (0.0123, "12.3 ms"), (1.5, "1.50 s")],
)
def test_durations_for_people(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_wall_time_is_utc_to_the_millisecond() -> None:
    assert wall_time(0.0) == "1970-01-01T00:00:00.000Z"
    assert wall_time(1790000000.9996) == "2026-09-21T14:13:20.999Z"
