"""``Observer``: the accounting of one loop, read into snapshots, and its stall watch.

``enable(loop)`` attaches the runtime's compiled accounting to a corun loop
and registers the loop with the process's watchdog thread (``monitor.py``).
Everything here that runs off the loop's thread reads what the loop
publishes; nothing asks the loop to do anything, so it all works while the
loop is blocked.
"""

from __future__ import annotations

import collections
import math
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Final, Protocol

from corun.observe import holds
from corun.observe.alarm import Alarm
from corun.observe.histogram import LatencyHistogram
from corun.observe.protocol import logger
from corun.observe.registry import pending_tasks
from corun.observe.snapshot import Event, LoopSummary, Snapshot, Stall, TaskSummary
from corun.observe.waits import task_view, thread_stack
from corun.runtime.engine.accounting import (
    KIND_NAMES,
    NOTE,
    STALL,
    SUMMARY,
    EventRing,
    LoopAccounting,
)
from corun.runtime.engine.task_core import (
    STATE_NAMES,
    TaskCore,
    live_groups,
    rank_busiest,
    task_counters,
)
from corun.runtime.loop import EventLoop

#: The default stall threshold, and the lowest one allowed, in seconds.
DEFAULT_STALL_THRESHOLD: Final = 0.1
MIN_STALL_THRESHOLD: Final = 0.01
#: Stalls kept with their stacks.
MAX_STALLS: Final = 128
#: Events read from a recorder between two looks at the clock (``Pauses``).
EVENT_SLICE: Final = 256
#: Off the loop's thread, a walk of the tasks holds the GIL at most about this
#: long, then sleeps this long, so that the loop's thread can take the GIL.
#: At 2 ms, a dump of a full recorder held the loop up for 3 to 6 ms at a time
#: (a garbage collection or the machine can lengthen a stretch); at 1 ms, for
#: 1.6 to 3.3; an answer took a median 58 ms against 49 (observe_dump.md).
CHUNK_SECONDS: Final = 0.001
CHUNK_PAUSE: Final = 0.0001
#: At a pause, a loop with ready handles runs them this long before it hands
#: the GIL back: a timer's callback and the task it wakes both run.
PAUSE_GRACE: Final = 0.0005
#: Tasks a walk reads between two looks at the clock (and whose counters
#: are read in one compiled call).
WALK_SLICE: Final = 64


class Watchdog(Protocol):
    """What an observer asks of the process's watchdog (``monitor.MONITOR``).

    Given to each observer as it is made, so that this module need not
    import the watchdog's, which knows the observers it watches.
    """

    def turn(self, wait: float = ..., grace: float = ...) -> None:
        """Have the observed loops hand over the GIL at their next poll (see ``pause``)."""

    def turns_done(self) -> None:
        """This thread needs no more turns."""

    def remove(self, observer: Observer) -> None:
        """Stop watching ``observer``."""

    def look_now(self) -> None:
        """Have the watchdog look at every observed loop now."""


class Pauses:
    """Sleeps now and then in a long walk off the loop's thread (a no-op on it).

    A thread that only yields the GIL takes it straight back; a short sleep
    lets the loop's thread have it, and the loop hands it back at its next
    poll (``pause``). Checked after each slice of the walk, by the clock, so
    that a slow machine pauses as often as a fast one. ``watchdog`` is None
    where nothing is to be paused for: on the loop's own thread.
    """

    __slots__ = ("_since", "_watchdog", "paused")

    def __init__(self, watchdog: Watchdog | None) -> None:
        self._watchdog = watchdog
        self._since = time.perf_counter()
        self.paused = False

    def tick(self) -> None:
        """Pause if this thread has held the GIL for ``CHUNK_SECONDS`` since the last pause."""
        if self._watchdog is not None:
            now = time.perf_counter()
            if now - self._since >= CHUNK_SECONDS:
                pause(self._watchdog)
                self.paused = True
                self._since = time.perf_counter()

    def done(self) -> None:
        """The long piece of work is over: the loop need wait for no more pauses."""
        if self.paused and self._watchdog is not None:
            self._watchdog.turns_done()


def pause(watchdog: Watchdog) -> None:
    """Let the loop run a batch of handles, then take the GIL back (off the loop's thread only).

    For any long piece of work off the loop's thread: a walk, sending a big
    answer. Releasing the GIL for a system call is not enough: the thread
    takes it straight back, and a loop waiting for it gets it only when the
    interpreter forces a switch, 5 ms later.
    """
    holds.mark()
    # The loop waits for the next pause at its next poll: waiting for the GIL
    # instead, it would get it only when the interpreter forces a switch.
    watchdog.turn(wait=CHUNK_SECONDS * 2, grace=PAUSE_GRACE)
    time.sleep(CHUNK_PAUSE)


def pauses_for(observers: Sequence[Observer]) -> Pauses:
    """Pauses for work on ``observers`` that may run off their loops' threads (none on one of them)."""
    off_loop = bool(observers) and all(observer._off_loop() for observer in observers)
    return Pauses(observers[0].watchdog if off_loop else None)


#: A task's fields, in ``TaskSummary``'s order.
TaskRow = tuple[
    int, str, int | None, str, int, float, float, float, float, float, str, tuple[str, ...]
]
PsRow = tuple[int, str, int | None, str, str, list[str]]


class ObserveError(Exception):
    """Observation could not be turned on (not a corun loop, or a bad setting)."""


class _Watch:
    """The watchdog's view of the step it saw running (one per observer)."""

    __slots__ = (
        "backstop",
        "cpu_first",
        "cpu_last",
        "detected_at",
        "first_seen",
        "last_seen",
        "owner",
        "seq",
        "stack",
    )

    def __init__(self, seq: int, first_seen: float, cpu_first: float) -> None:
        self.seq = seq
        # The first and the last time the step was seen running, with the
        # loop thread's CPU time then: the CPU share of the step.
        self.first_seen = first_seen
        self.cpu_first = cpu_first
        self.last_seen = first_seen
        self.cpu_last = cpu_first
        self.detected_at: float | None = None
        self.stack: tuple[str, ...] = ()
        self.owner: str = ""
        # The stack came from the faulthandler backstop.
        self.backstop = False


class Observer:
    """Observation of one corun loop. Made by ``corun.observe.enable``.

    ``snapshot()`` gives everything measured so far; ``close()`` turns it off.
    """

    def __init__(self, loop: EventLoop, stall_threshold: float, watchdog: Watchdog) -> None:
        self.watchdog = watchdog
        self._loop_ref: weakref.ReferenceType[EventLoop] = weakref.ref(loop)
        self.stall_threshold: float = stall_threshold
        self.accounting: LoopAccounting = LoopAccounting(loop._clock, stall_threshold)
        self.stalls: collections.deque[Stall] = collections.deque(maxlen=MAX_STALLS)
        self.closed: bool = False
        self._lock = threading.Lock()  # guards stalls against the reader threads
        self._watch: _Watch | None = None
        # The watch of the last step seen to stall, until its long step is taken.
        self._finished: _Watch | None = None
        # The loop thread's stack from a faulthandler dump (monitor.py), for
        # the stall that the watchdog could not see (a C call held the GIL).
        self.backstop_stack: tuple[str, ...] = ()
        self.backstop_fired: float = 0.0
        # Seconds on the loop per task id at the last ``busiest`` call.
        self._top_last: dict[int, float] = {}
        # The last whole 1 s window.
        self.utilization: float = 0.0
        self.cpu: float = 0.0
        self._window_start: float = time.monotonic()
        self._window_wait: float = 0.0
        self._window_cpu: float | None = None
        self._window_steps: int = 0
        self._window_lag: LatencyHistogram = LatencyHistogram.empty()
        self._thread_id: int | None = None
        self._cpu_clock: int | None = None
        #: The watchdog's alarm for this loop (alarm.py); None: looks by timer.
        self.alarm: Alarm | None = None
        try:
            self.alarm = Alarm(stall_threshold)
        except OSError as exc:
            logger.info("corun.observe: no alarm (%s); the watchdog looks by its timer", exc)
        else:
            self.accounting.alarm = self.alarm.arm
            self.accounting.alarm_every = stall_threshold / 2
            self.accounting.alarm_at = 0.0  # set at the loop's next step or wait
        loop._set_accounting(self.accounting)

    # --- the public side ------------------------------------------------------

    @property
    def loop(self) -> EventLoop | None:
        """The observed loop (None once it was collected)."""
        return self._loop_ref()

    def close(self) -> None:
        """Turn observation of this loop off."""
        if self.closed:
            return
        self.closed = True
        loop = self._loop_ref()
        if loop is not None and loop._corun_accounting is self.accounting:
            loop._set_accounting(None)
        # The loop sets the alarm under the GIL, and reads it first: once it
        # is None, no setting is in flight, and the fd can go.
        self.accounting.alarm = None
        self.accounting.alarm_at = math.inf
        self.watchdog.remove(self)

    def snapshot(self, *, stacks: bool = True) -> Snapshot:
        """Everything measured so far, frozen. Safe from any thread.

        ``stacks=False`` leaves out each task's await chain and wait, which is
        the costly part with many tasks.
        """
        tasks = tuple(self.tasks(stacks=stacks))
        return Snapshot(
            loop=self.summary(tasks),
            tasks=tasks,
            stalls=self.stall_list(),
            events=tuple(self.events()),
            blocked=self.blocked(),
        )

    def summary(
        self,
        tasks: tuple[TaskSummary, ...] | None = None,
        *,
        states: dict[str, int] | None = None,
    ) -> LoopSummary:
        """The loop-wide figures (``tasks``, or their ``states`` counted, save a walk)."""
        accounting = self.accounting
        if states is None:
            states = {}
            listed = tasks if tasks is not None else self.walk(stacks=False)
            for task in listed:
                state = task.state if isinstance(task, TaskSummary) else task[3]
                states[state] = states.get(state, 0) + 1
        loop = self._loop_ref()
        return LoopSummary(
            lag=self.lag(),
            schedule=LatencyHistogram.copy_of(accounting.schedule),
            utilization=self.utilization,
            cpu=self.cpu,
            steps=accounting.steps,
            busy=accounting.busy,
            longest_step=accounting.longest,
            longest_step_owner=accounting.longest_owner,
            tasks=states,
            tasks_spawned=accounting.tasks_spawned,
            tasks_exited=accounting.tasks_exited,
            running=loop is not None and loop.is_running(),
        )

    def lag(self) -> LatencyHistogram:
        """The loop's lag: every handle's lateness, task steps included."""
        accounting = self.accounting
        return LatencyHistogram.copy_of(accounting.lag) + LatencyHistogram.copy_of(
            accounting.schedule
        )

    def live_tasks(self) -> list[Any]:
        """The loop's pending tasks, read without the loop's help."""
        loop = self._loop_ref()
        if loop is None:
            return []
        return pending_tasks(loop)

    def tasks(self, *, stacks: bool = True) -> list[TaskSummary]:
        """A summary of each live task (``stacks=False``: without await chains and waits)."""
        return [TaskSummary(*row) for row in self.walk(stacks=stacks)]

    def _paced(self) -> Iterator[list[Any]]:
        """The live tasks, ``WALK_SLICE`` at a time.

        Off the loop's thread, the walk pauses every couple of milliseconds
        (see ``Pauses``), so that the loop of a process with 10,000 tasks is
        never held up for long. Whatever reads the tasks reads them a slice at
        a time, as the walk gets there: 10,000 tuples read at once would
        outlive the young generations and bring on a full collection, which
        holds every thread up for tens of milliseconds with this many tasks.
        """
        pauses = pauses_for([self])
        live = self.live_tasks()
        try:
            for first in range(0, len(live), WALK_SLICE):
                pauses.tick()  # the first time too: reading the registry counts
                yield live[first : first + WALK_SLICE]
        finally:
            if pauses.paused:
                # The caller assembles its answer next (the JSON of a ps of
                # 10,000 tasks): the loop runs first.
                pause(self.watchdog)
                pauses.done()

    def _loop_time(self) -> float:
        loop = self._loop_ref()
        return loop.time() if loop is not None else 0.0

    def walk(self, *, stacks: bool = True) -> Iterator[TaskRow]:
        """Each live task as the fields of a ``TaskSummary``, in order (paced: see ``_paced``)."""
        step_task = self.accounting.step_task
        now = self._loop_time()
        for tasks in self._paced():
            for task, counters in zip(tasks, task_counters(tasks), strict=True):
                ident, parent, steps, busy, longest, wake_total, wake_max, wake_p99 = counters
                waiter = task._fut_waiter if isinstance(task, TaskCore) else None
                stack: tuple[str, ...] = ()
                waits = ""
                if stacks:
                    waits, lines = task_view(task, waiter, now)
                    stack = tuple(lines)
                yield (
                    ident or id(task),
                    task.get_name(),
                    parent or None,
                    _state(task, step_task, waiter),
                    steps,
                    busy,
                    longest,
                    wake_total / steps if steps else 0.0,
                    wake_max,
                    wake_p99,
                    waits,
                    stack,
                )

    def ps_rows(self) -> Iterator[PsRow]:
        """Each live task as ``corun ps`` lists it, paced as ``walk`` is.

        ``(id, name, parent, state, waiting_on, stack)``, each line of the
        stack as JSON text (``waits.task_view``). No counters: ``ps`` shows none.
        """
        step_task = self.accounting.step_task
        now = self._loop_time()
        for tasks in self._paced():
            for task in tasks:
                if isinstance(task, TaskCore):
                    ident, parent, waiter = task._corun_id, task._corun_parent, task._fut_waiter
                else:
                    ident, parent, waiter = 0, 0, None
                waits, stack = task_view(task, waiter, now, as_json=True)
                yield (
                    ident or id(task),
                    task.get_name(),
                    parent or None,
                    _state(task, step_task, waiter),
                    waits,
                    stack,
                )

    def groups(self, live: list[Any] | None = None) -> dict[str, dict[str, Any]]:
        """The tasks by group, as ``corun top`` shows them: cumulative counters, by group name.

        Each group is ``{"live", "done", "steps", "busy", "lifetimes",
        "lifetime_max"}``: its live tasks, its ended ones, and the steps and
        seconds on the loop of both; ``lifetimes`` is the histogram of the
        ended tasks' spawn-to-end times, as ``[bucket, count]`` pairs of the
        buckets that count any. ``live``: the live tasks, if read already.
        """
        if live is None:
            live = self.live_tasks()
        out: dict[str, dict[str, Any]] = {}
        for name, totals in list(self.accounting.groups.items()):
            out[name] = {
                "live": 0,
                "done": totals.done,
                "steps": totals.steps,
                "busy": totals.busy,
                "lifetimes": [list(pair) for pair in totals.lifetimes.nonzero()],
                "lifetime_max": totals.lifetimes.max,
            }
        for name, (count, steps, busy) in live_groups(live).items():
            group = out.get(name)
            if group is None:
                group = out[name] = {
                    "live": 0,
                    "done": 0,
                    "steps": 0,
                    "busy": 0.0,
                    "lifetimes": [],
                    "lifetime_max": 0.0,
                }
            group["live"] = count
            group["steps"] += steps
            group["busy"] += busy
        return out

    def busiest(
        self, rows: int, states: dict[str, int] | None = None, live: list[Any] | None = None
    ) -> list[dict[str, Any]]:
        """The ``rows`` tasks most busy since the last call, with their cumulative counters.

        Each row has ``recent``, the seconds on the loop since the last call,
        which ranks them. For ``corun top``: no stacks, no dataclasses.
        ``live``: the live tasks, if read already.
        """
        if live is None:
            live = self.live_tasks()
        step_task = self.accounting.step_task
        # One compiled pass ranks and counts them all; only the chosen rows
        # are read further.
        chosen, recents, self._top_last, counts = rank_busiest(
            live, step_task, self._top_last, rows
        )
        if states is not None:
            for name, count in zip(STATE_NAMES, counts, strict=True):
                if count:
                    states[name] = states.get(name, 0) + count
        picked = [live[index] for index in chosen]
        counters = task_counters(picked)
        out: list[dict[str, Any]] = []
        for task, recent, row in zip(picked, recents, counters, strict=True):
            ident, _parent, steps, busy, longest, wake_total, wake_max, wake_p99 = row
            waiter = task._fut_waiter if isinstance(task, TaskCore) else None
            out.append(
                {
                    "id": ident or id(task),
                    "name": task.get_name(),
                    "state": _state(task, step_task, waiter),
                    "steps": steps,
                    "busy": busy,
                    "longest": longest,
                    "wake_mean": wake_total / steps if steps else 0.0,
                    "wake_max": wake_max,
                    "wake_p99": wake_p99,
                    "recent": recent,
                }
            )
        return out

    def stall_list(self) -> tuple[Stall, ...]:
        """The stalls kept, oldest first."""
        with self._lock:
            return tuple(self.stalls)

    def events(self, *, incidents_only: bool = False) -> list[Event]:
        """The flight recorder's events, oldest first: spawns, exits and windows, and the incidents.

        The incidents (cancellations, stalls, notes) have a ring of their own,
        which spawns and exits cannot overwrite; ``incidents_only`` gives those.
        """
        pauses = pauses_for([self])
        try:
            return [
                event
                for events in self.event_slices(incidents_only=incidents_only, pauses=pauses)
                for event in events
            ]
        finally:
            pauses.done()

    def event_slices(self, *, incidents_only: bool, pauses: Pauses) -> Iterator[list[Event]]:
        """``events()``, a slice at a time, for a reader that turns each into its answer at once.

        Between two slices the reading may pause for the loop (``pauses``).
        Kept whole, 10,000 events outlive the young generations and bring on
        a full collection, which holds the loop up for tens of milliseconds
        in a process with many tasks.
        """
        incidents: list[Event] = []
        for events in self._ring_slices(self.accounting.incidents, pauses):
            incidents.extend(events)
        if incidents_only:
            yield incidents
            return
        taken = 0
        for events in self._ring_slices(self.accounting.recorder, pauses):
            merged: list[Event] = []
            for event in events:  # both rings are in time order
                while taken < len(incidents) and incidents[taken].time <= event.time:
                    merged.append(incidents[taken])
                    taken += 1
                merged.append(event)
            yield merged
        if taken < len(incidents):
            yield incidents[taken:]

    def _ring_slices(self, recorder: EventRing, pauses: Pauses) -> Iterator[list[Event]]:
        oldest, written = recorder.held()
        for first in range(oldest, written, EVENT_SLICE):
            pauses.tick()
            yield [
                Event(stamp, KIND_NAMES.get(kind, str(kind)), a, b, text)
                for stamp, kind, a, b, text in recorder.events(first, first + EVENT_SLICE)
            ]

    def blocked(self) -> Stall | None:
        """The step holding the loop now, if it has run past the stall threshold."""
        accounting = self.accounting
        handle = accounting.step_handle
        if handle is None:
            return None
        start = accounting.step_start
        seq = accounting.step_seq
        running = self._clock() - start
        if running < self.stall_threshold:
            return None
        watch = self._watch
        stack = watch.stack if watch is not None and watch.seq == seq else ()
        if not stack:
            stack = self._loop_stack()
        return Stall(
            task=self._owner_name(accounting.step_task, handle),
            task_id=_task_id(accounting.step_task),
            duration=running,
            cpu=0.0,
            gc=accounting.gc_total - accounting.step_gc,
            stack=stack,
            started=time.time() - running,
            detected_after=None,
        )

    # --- the watchdog's side (monitor.py calls these on its thread) ------------

    def set_stall_threshold(self, seconds: float) -> None:
        """Change the stall threshold (seconds, checked by ``enable``)."""
        self.stall_threshold = seconds
        self.accounting.stall_threshold = seconds
        if self.alarm is not None:
            self.alarm.set_seconds(seconds)
            self.accounting.alarm_every = seconds / 2
            self.accounting.alarm_at = 0.0
            self.accounting.alarm_due = 0.0  # as set, it rings for the old threshold
        self.watchdog.look_now()  # it may sleep for the old threshold

    def _off_loop(self) -> bool:
        """Whether this thread is not the loop's (a walk must then leave it the GIL now and then)."""
        loop = self._loop_ref()
        return loop is None or threading.get_ident() != loop._thread_id

    def running(self) -> bool:
        """Whether the observed loop is running."""
        loop = self._loop_ref()
        return loop is not None and loop.is_running()

    def _clock(self) -> float:
        return self.accounting.clock()

    def _loop_thread(self) -> int | None:
        loop = self._loop_ref()
        thread_id = loop._thread_id if loop is not None else None
        if thread_id != self._thread_id:
            self._thread_id = thread_id
            self._cpu_clock = None
            if thread_id is not None:
                try:
                    self._cpu_clock = time.pthread_getcpuclockid(thread_id)
                except OSError:
                    self._cpu_clock = None
        return thread_id

    def _thread_cpu(self) -> float:
        clock = self._cpu_clock
        if clock is None:
            return 0.0
        try:
            return time.clock_gettime(clock)
        except OSError:
            return 0.0

    def _loop_stack(self) -> tuple[str, ...]:
        thread_id = self._thread_id
        if thread_id is None:
            return ()
        import sys

        frame = sys._current_frames().get(thread_id)
        return tuple(thread_stack(frame))

    def _owner_name(self, task: Any, handle: object) -> str:
        if task is not None:
            try:
                return str(task.get_name())
            except Exception:
                return "<task>"
        try:
            return repr(handle)
        except Exception:
            return "<callback>"

    def watch(self, now: float) -> float:
        """Look at the running step once; return how long the watchdog may sleep."""
        accounting = self.accounting
        self._loop_thread()
        handle = accounting.step_handle
        seq = accounting.step_seq
        start = accounting.step_start
        watch = self._watch
        # Without an alarm, while the loop waits or runs short steps, look
        # this often: a step that starts right after a look is seen by the
        # next one, in time to wake at its threshold. Not a whole threshold: a
        # look may wait for the GIL (up to the 5 ms switch interval while a
        # step computes), and a late first look makes a late detection: two
        # switch intervals sooner. Each look takes the GIL from the loop: 11
        # a second at the default threshold.
        threshold = self.stall_threshold
        idle = max(threshold / 2, threshold - 2 * sys.getswitchinterval())
        # With one, the loop has set it to ring by the threshold of any step
        # that starts, unless it rang already and was not set again since.
        rung_in_time = accounting.alarm is not None and accounting.alarm_due > now
        if handle is None or watch is None or watch.seq != seq:
            if watch is not None:
                # Its long step is taken below, or on a later look.
                self._finished = watch
            self._watch = None if handle is None else _Watch(seq, now, self._thread_cpu())
            self._take_long_steps(now)
            if handle is None:
                # A loop that waits sets the alarm again when it wakes, before its next step.
                return math.inf if accounting.alarm is not None else idle
            if rung_in_time:
                return math.inf
            # Wake when the step would become a stall: a step that ends before
            # then is followed by one that started later, so none is missed.
            return max(0.0, start + self.stall_threshold - now)
        watch.last_seen = now
        watch.cpu_last = self._thread_cpu()
        self._take_long_steps(now)
        # Read it while it blocks: the point of the watchdog.
        if watch.detected_at is None:
            if now - start < self.stall_threshold:
                return max(0.0, start + self.stall_threshold - now)
            if accounting.step_seq == seq:
                watch.owner = self._owner_name(accounting.step_task, handle)
                if self.backstop_stack and self.backstop_fired >= start:
                    # The GIL was held until now: faulthandler read the stack.
                    watch.stack, watch.backstop = self.backstop_stack, True
                    watch.detected_at = self.backstop_fired
                    self.backstop_stack = ()
                else:
                    watch.stack = self._loop_stack()
                    watch.detected_at = now
                _warn(watch.owner, now - start, watch.stack)
        return idle

    def _take_long_steps(self, now: float) -> None:
        accounting = self.accounting
        if not accounting.long_steps:
            return
        taken = accounting.long_steps[:]
        del accounting.long_steps[: len(taken)]
        watch = self._watch
        cpu_now = self._thread_cpu()
        for seq, owner, start, duration, gc_seconds in taken:
            task = owner if isinstance(owner, TaskCore) else None
            seen = watch if watch is not None and watch.seq == seq else self._last_watch(seq)
            stack: tuple[str, ...] = ()
            detected_after: float | None = None
            cpu = 0.0
            if seen is not None:
                # The CPU share over what the watchdog saw of the step (or, seen
                # once only, up to now), applied to all of it.
                if seen.last_seen > seen.first_seen:
                    share = (seen.cpu_last - seen.cpu_first) / (seen.last_seen - seen.first_seen)
                else:
                    share = (cpu_now - seen.cpu_first) / max(now - seen.first_seen, 1e-9)
                cpu = duration * min(1.0, share)
                if seen.detected_at is not None:
                    stack = seen.stack
                    detected_after = seen.detected_at - start
            backstop = seen is not None and seen.backstop
            if not stack and self.backstop_stack and self.backstop_fired >= start:
                stack, backstop = self.backstop_stack, True
                detected_after = self.backstop_fired - start
                self.backstop_stack = ()
            stall = Stall(
                task=self._owner_name(task, owner),
                task_id=_task_id(task),
                duration=duration,
                cpu=max(0.0, cpu),
                gc=gc_seconds,
                stack=stack,
                started=time.time() - (self._clock() - start),
                detected_after=detected_after,
                backstop=backstop,
            )
            self.add_stall(stall)

    def _last_watch(self, seq: int) -> _Watch | None:
        # The watch of a step that ended is replaced when the next step is
        # seen; keep the one that detected it until its long step is taken.
        finished = self._finished
        return finished if finished is not None and finished.seq == seq else None

    def add_stall(self, stall: Stall) -> None:
        """Keep a stall, and write it to the flight recorder."""
        with self._lock:
            self.stalls.append(stall)
        where = stall.stack[-1] if stall.stack else "(no stack)"
        self.accounting.incidents.add(
            STALL,
            stall.task_id or 0,
            int(stall.duration * 1e6),
            f"{stall.task[:30]} @ {where.rsplit('/', 1)[-1]}",
        )

    def window(self, now: float) -> None:
        """Close a 1 s window: utilisation, CPU, and a summary in the flight recorder."""
        accounting = self.accounting
        accounting.sync_wall()
        elapsed = now - self._window_start
        if elapsed <= 0.0:
            return
        waited = accounting.io_wait_total
        since = accounting.io_wait_since
        in_progress = self._clock() - since if since else 0.0
        total_wait = waited + in_progress
        loop = self._loop_ref()
        running = loop is not None and loop.is_running()
        wait = total_wait - self._window_wait
        self.utilization = max(0.0, min(1.0, 1.0 - wait / elapsed)) if running else 0.0
        cpu_now = self._thread_cpu()
        if self._window_cpu is not None and running:
            self.cpu = max(0.0, (cpu_now - self._window_cpu) / elapsed)
        else:
            self.cpu = 0.0
        lag = self.lag()
        window_lag = lag - self._window_lag
        steps = accounting.steps - self._window_steps
        if running and steps:
            alive = accounting.tasks_spawned - accounting.tasks_exited
            accounting.recorder.add(
                SUMMARY,
                steps,
                max(0, alive),
                f"busy {self.utilization:.0%} cpu {self.cpu:.0%} "
                f"lag p50 {window_lag.p50 * 1e3:.2f}ms p99 {window_lag.p99 * 1e3:.2f}ms",
            )
        self._window_start = now
        self._window_wait = total_wait
        self._window_cpu = cpu_now
        self._window_steps = accounting.steps
        self._window_lag = lag

    def note(self, text: str) -> None:
        """Write a note to the flight recorder (an observer part that failed, say)."""
        self.accounting.incidents.add(NOTE, 0, 0, text)


def _state(task: Any, step_task: Any, waiter: Any) -> str:
    if task is step_task:
        return "running"
    if task.cancelling():
        return "cancelling"
    return "ready" if waiter is None else "waiting"


def _task_id(task: Any) -> int | None:
    if task is None:
        return None
    ident = getattr(task, "_corun_id", 0)
    return int(ident) if ident else id(task)


def _warn(owner: str, running: float, stack: tuple[str, ...]) -> None:
    where = stack[-1] if stack else "an unknown place"
    logger.warning(
        "corun.observe: %s has blocked the event loop for %.0f ms, at %s",
        owner,
        running * 1e3,
        where,
    )
