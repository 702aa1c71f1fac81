"""What ``Observer.snapshot()`` returns: frozen dataclasses, safe to keep and to share."""

from __future__ import annotations

from dataclasses import dataclass, field

from corun.observe.histogram import LatencyHistogram


@dataclass(frozen=True)
class LoopSummary:
    """The loop as a whole."""

    #: Lateness of every timer and ready handle: run time minus due or queued time.
    lag: LatencyHistogram
    #: Wake-to-run latency of task steps: run time minus the time the task was woken.
    schedule: LatencyHistogram
    #: Busy fraction of the last whole 1 s window: 1 minus the share spent waiting for I/O.
    utilization: float
    #: CPU time of the loop's thread over the last window, as a fraction of one core.
    cpu: float
    #: Handles run since observation started.
    steps: int
    #: Seconds spent running handles since observation started.
    busy: float
    #: The longest step or callback since observation started (seconds), and what ran it.
    longest_step: float
    longest_step_owner: str
    #: Live tasks of the loop, by state.
    tasks: dict[str, int]
    #: Tasks created and finished since observation started.
    tasks_spawned: int
    tasks_exited: int
    #: Whether the loop is running.
    running: bool


@dataclass(frozen=True)
class TaskSummary:
    """One live task."""

    #: A number unique within the process (corun numbers tasks created while observed).
    id: int
    name: str
    #: The id of the task that created it (a TaskGroup's tasks: the group's owner), or None.
    parent: int | None
    #: ``running``, ``ready``, ``waiting`` or ``cancelling``.
    state: str
    #: Steps run, seconds on the loop, and the longest step, since observation started.
    steps: int
    busy: float
    longest: float
    #: Wake-to-run latency, seconds: mean, max, and a running estimate of the 99th percentile.
    wake_mean: float
    wake_max: float
    wake_p99: float
    #: What it waits on ("" when ready to run): a sleep, lock, event, queue, fd, task...
    waiting_on: str
    #: Its await chain, ``file:line function``, innermost last.
    stack: tuple[str, ...]


@dataclass(frozen=True)
class Stall:
    """A task step or callback that held the loop longer than the stall threshold."""

    #: The task's name, or the callback's repr.
    task: str
    #: The task's id, or None for a plain callback.
    task_id: int | None
    #: Seconds the step ran (the final duration).
    duration: float
    #: CPU seconds of the loop's thread over the stall: near ``duration`` when computing,
    #: near zero when parked (sleeping or waiting in a blocking call).
    cpu: float
    #: Seconds of the stall spent in the garbage collector.
    gc: float
    #: The loop thread's stack while it was blocking, ``file:line function``, innermost last.
    stack: tuple[str, ...]
    #: When the stall started (Unix time).
    started: float
    #: How long after its start the watchdog saw it (None: it ended before the watchdog
    #: looked, or only the faulthandler backstop could see it).
    detected_after: float | None
    #: The stack came from the faulthandler backstop (a C call held the GIL).
    backstop: bool = False

    @property
    def computing(self) -> bool:
        """Whether the thread was computing rather than parked.

        Parked (``time.sleep``, a blocking read) uses next to no CPU; computing
        uses what the machine gives it, which on a loaded machine can be well
        under one core: hence a low bar, a tenth.
        """
        return self.cpu >= 0.1 * self.duration


@dataclass(frozen=True)
class Event:
    """One entry of the flight recorder."""

    #: Unix time.
    time: float
    #: ``spawn``, ``exit``, ``cancel``, ``summary``, ``stall`` or ``note``.
    kind: str
    task_id: int
    #: The parent's id (spawn), the steps run (exit), the duration in us (stall)...
    value: int
    text: str


@dataclass(frozen=True)
class Snapshot:
    """Everything observed on one loop, at one moment."""

    loop: LoopSummary
    tasks: tuple[TaskSummary, ...]
    stalls: tuple[Stall, ...]
    events: tuple[Event, ...] = field(repr=False)
    #: The stall in progress when the snapshot was taken (the loop is blocked), or None.
    blocked: Stall | None = None
