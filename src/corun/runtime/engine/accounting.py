"""The loop's accounting: what ``corun.observe`` reads, kept by the compiled core.

Nothing here runs unless ``corun.observe`` attaches a ``LoopAccounting`` to a
loop (``LoopBase._corun_accounting``). Then the loop:

* stamps every handle with the time it was queued (``Handle._queued``), or
  with its deadline for a timer, and records the lateness of each one when it
  runs: a task's step (its wake-to-run latency) in ``schedule``, any other
  handle in ``lag``. The loop's lag is the two added up: one record per
  handle instead of two;
* reads the clock once between two handles: the end of one step is the start
  of the next;
* publishes the step that is running (``step_seq``, ``step_start``,
  ``step_handle``, ``step_task``) for the watchdog thread, which reads them
  without the loop's help;
* keeps per-task counters in the task's own ``_corun_*`` fields;
* keeps the time spent waiting for I/O (``io_wait_total``, and
  ``io_wait_since`` while a wait is in progress);
* pushes back the watchdog's alarm as it goes (``arm_alarm``), so that the
  watchdog wakes only for a step that may be a stall, or an idle loop;
* lists the steps that ran longer than ``stall_threshold`` in ``long_steps``;
* writes task spawns, exits and cancellations to the flight recorder
  (``EventRing``).

Python-level ``Instrument`` hooks cost 175 ns per step and more; this is the
same work compiled, at a fraction of that (``benchmarks/README.md``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Final

from librt.vecs import vec
from mypy_extensions import i64, u8

# --- the histogram -------------------------------------------------------------
#
# Log-linear, in nanoseconds, as HdrHistogram lays it out: bucket 0 holds
# everything under 2**9 ns (0.5 us); above that, each power of two is cut into
# 64 equal buckets, up to 2**36 ns (about 69 s); the last bucket holds the
# rest. A bucket is at most 1/64 of its lower bound wide, so its midpoint is
# within 0.8% of any value in it.
SUB_BITS: Final = 6
SUB_BUCKETS: Final = 1 << SUB_BITS
LOW_EXPONENT: Final = 9
HIGH_EXPONENT: Final = 36
BUCKETS: Final = 2 + (HIGH_EXPONENT - LOW_EXPONENT) * SUB_BUCKETS
_LOW: Final = 1 << LOW_EXPONENT
_HIGH: Final = 1 << HIGH_EXPONENT


def bucket_of(ns: i64) -> i64:
    """The bucket of a duration of ``ns`` nanoseconds."""
    if ns < _LOW:
        return 0
    if ns >= _HIGH:
        return BUCKETS - 1
    # exponent: the position of the leading one bit (ns is in [2**e, 2**(e+1))),
    # found by halving the range: native 64-bit shifts, a handful of them.
    exponent: i64 = LOW_EXPONENT
    rest: i64 = ns >> LOW_EXPONENT
    if rest >= 1 << 16:
        rest >>= 16
        exponent += 16
    if rest >= 1 << 8:
        rest >>= 8
        exponent += 8
    if rest >= 1 << 4:
        rest >>= 4
        exponent += 4
    if rest >= 1 << 2:
        rest >>= 2
        exponent += 2
    if rest >= 1 << 1:
        exponent += 1
    # The SUB_BITS bits after the leading one pick the bucket within the octave.
    sub: i64 = (ns >> (exponent - SUB_BITS)) & (SUB_BUCKETS - 1)
    return 1 + (exponent - LOW_EXPONENT) * SUB_BUCKETS + sub


def bucket_bounds(index: int) -> tuple[int, int]:
    """The range of nanoseconds ``[low, high)`` that bucket ``index`` holds."""
    if index <= 0:
        return 0, 1 << LOW_EXPONENT
    if index >= BUCKETS - 1:
        return 1 << HIGH_EXPONENT, 1 << 62
    exponent = LOW_EXPONENT + (index - 1) // SUB_BUCKETS
    sub = (index - 1) % SUB_BUCKETS
    width = 1 << (exponent - SUB_BITS)
    low = (SUB_BUCKETS + sub) * width
    return low, low + width


class Histogram:
    """Counts of durations in log-linear buckets (see ``bucket_of``), and their maximum.

    Written by the loop's thread; read by others through ``counts()``.
    """

    def __init__(self) -> None:
        # Native counters, not a list of ints: a list holds int objects, and
        # every count past 256 would make a new one.
        self.buckets: vec[i64] = vec[i64]([0] * BUCKETS)
        #: The sum of the durations, and the largest, in seconds.
        self.total: float = 0.0
        self.max: float = 0.0

    def record(self, seconds: float) -> None:
        """Count one duration (negative ones, from clock granularity, count as zero)."""
        index: i64 = 0
        if seconds > 0.0:
            self.total += seconds
            if seconds > self.max:
                self.max = seconds
            # Beyond i64 only after 292 years: clamped by bucket_of long before.
            ns: i64 = i64(seconds * 1e9) if seconds < 1e9 else i64(1 << 62)
            index = bucket_of(ns)
        self.buckets[index] += 1

    def counts(self) -> list[int]:
        """The count of each bucket (safe from any thread: each count is read whole)."""
        return [count for count in self.buckets]

    def nonzero(self) -> list[tuple[int, int]]:
        """``(bucket, count)`` of the buckets that count anything, in bucket order."""
        out: list[tuple[int, int]] = []
        buckets = self.buckets
        for index in range(BUCKETS):
            count = buckets[index]
            if count:
                out.append((index, count))
        return out


# --- the flight recorder ----------------------------------------------------------
#
# Fixed columns of native numbers, written round and round: their size is the
# recorder's whole memory. An event is one slot of each column: its wall-clock
# time, its kind, three numbers a, b and c, and a text in UTF-8 (cut at
# MAX_TEXT bytes) with its length. Writing one is a handful of native stores
# and a copy of the text's bytes, a quarter of what packing a struct cost
# (which parsed its arguments and boxed the numbers for every task's spawn and
# exit). A task with a default name is written as its number, in c, with no
# text at all: encoding the name made a bytes object for every spawn and exit.
#: The longest text an event keeps, in bytes; longer ones are cut.
MAX_TEXT: Final = 70
#: Bytes per event: the time (8), kind (1), text length (1), a, b and c (24), text.
SLOT: Final = 34 + MAX_TEXT
#: Slots in a recorder: 10,042 events in 1 MiB, headers included.
SLOTS: Final = ((1 << 20) - 4096) // SLOT
#: Slots of the incidents' recorder (cancellations, stalls, notes): their own
#: ring, so that a server's spawns and exits (10,000 in about a second under
#: load) never push them out. 104 KiB.
INCIDENT_SLOTS: Final = 1024

SPAWN: Final = 1  # a: task id, b: parent id, text: name
EXIT: Final = 2  # a: task id, b: steps, text: "name outcome"
CANCEL: Final = 3  # a: task id, b: 0, text: "name <- canceller frames"
SUMMARY: Final = 4  # a: steps in the second, b: tasks alive, text: figures
STALL: Final = 5  # a: task id or 0, b: duration in us, text: what stalled
NOTE: Final = 6  # a, b: 0, text: anything else (an observer that failed)
# What an exit is written as: its task's name under one of these kinds, which
# ``events()`` gives back as EXIT with "name outcome". Writing the outcome into
# the text would build a new string for every task.
_EXIT_FINISHED: Final = 7
_EXIT_CANCELLED: Final = 8
# Added to a kind: the event's text is the default task name "Task-{c}".
_NUMBERED: Final = 128

KIND_NAMES: Final = {
    SPAWN: "spawn",
    EXIT: "exit",
    CANCEL: "cancel",
    SUMMARY: "summary",
    STALL: "stall",
    NOTE: "note",
}

_wall: Final = time.time
# Above this, a or b is stored as 0 (it fits i64; and a compiled int below it
# compares without boxing).
_MAX_FIELD: Final = (1 << 62) - 1


class EventRing:
    """The flight recorder: the newest events, in a fixed number of bytes.

    Written by the loop's thread (and the watchdog's, under the GIL); read by
    any thread through ``events()``.
    """

    def __init__(self, slots: int = SLOTS) -> None:
        if slots < 16:
            raise ValueError("an event ring needs at least 16 slots")
        self.slots: i64 = slots
        self.stamps: vec[float] = vec[float]([0.0] * slots)
        self.kinds: vec[u8] = vec[u8](bytes(slots))
        self.sizes: vec[u8] = vec[u8](bytes(slots))
        self.a: vec[i64] = vec[i64]([0] * slots)
        self.b: vec[i64] = vec[i64]([0] * slots)
        self.c: vec[i64] = vec[i64]([0] * slots)
        self.text: vec[u8] = vec[u8](bytes(slots * MAX_TEXT))
        #: Events ever written; the next one goes to slot written % slots,
        #: which is kept as next_slot (a division per event costs more).
        self.written: i64 = 0
        self.next_slot: i64 = 0

    def add(self, kind: int, a: int, b: int, text: str, stamp: float = -1.0) -> None:
        """Write an event over the oldest one (``a`` and ``b`` count as 0 if negative or over 2**62).

        ``stamp`` is its ``time.time()``, read now when not given. It runs for
        every task's spawn and exit.
        """
        # Everything that allocates comes before the first store into a slot:
        # an allocation may run the collector, and a finaliser may let another
        # thread read the slot half written (``events()`` trusts a slot whose
        # number is still held).
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate
            data = text.encode("utf-8", "replace")
        if stamp < 0.0:
            stamp = _wall()
        size: i64 = len(data)
        if size > MAX_TEXT:
            size = MAX_TEXT
        slot = self._numbers(
            kind & 127, a if 0 <= a <= _MAX_FIELD else 0, b if 0 <= b <= _MAX_FIELD else 0, 0, stamp
        )
        self.sizes[slot] = u8(size)
        base: i64 = slot * MAX_TEXT
        out = self.text
        for offset in range(size):
            out[base + offset] = data[offset]
        self.written += 1

    def add_task(self, kind: i64, a: i64, b: i64, name: str | int, stamp: float = -1.0) -> None:
        """``add`` for an event about a task: ``name`` is its name, or the number of a default one.

        Task ids, step counts and name numbers are counters: they fit i64,
        whose arguments the compiled code takes without the checks of ``add``.
        """
        if isinstance(name, str):
            self.add(kind, a, b, name, stamp)
            return
        if stamp < 0.0:
            stamp = _wall()
        slot = self._numbers((kind & 127) | _NUMBERED, a, b, name, stamp)
        self.sizes[slot] = 0
        self.written += 1

    def _numbers(self, kind: i64, a: i64, b: i64, c: i64, stamp: float) -> i64:
        """Write an event's numbers into the next slot (not yet counted as written); the slot."""
        slot = self.next_slot
        self.next_slot = slot + 1 if slot + 1 < self.slots else 0
        self.stamps[slot] = stamp
        self.kinds[slot] = u8(kind)
        self.a[slot] = a
        self.b[slot] = b
        self.c[slot] = c
        return slot

    def held(self) -> tuple[int, int]:
        """The numbers of the oldest event held and of the next to be written."""
        written = self.written
        return (written - self.slots if written > self.slots else 0), written

    def events(self, first: int = -1, stop: int = -1) -> list[tuple[float, int, int, int, str]]:
        """The events numbered ``first`` to ``stop`` (default: all held), oldest first.

        Each is ``(time, kind, a, b, text)``. A reader in another thread takes
        them in slices (see ``held``): decoding all 10,042 in one call would
        hold the GIL for milliseconds. Events overwritten meanwhile are skipped.
        """
        oldest, written = self.held()
        first = oldest if first < oldest else first
        stop = written if stop < 0 or stop > written else stop
        slots = self.slots
        out: list[tuple[float, int, int, int, str]] = []
        for number in range(first, stop):
            slot: i64 = number % slots
            stamp = self.stamps[slot]
            kind: int = self.kinds[slot]
            a: int = self.a[slot]
            b: int = self.b[slot]
            c: int = self.c[slot]
            base: i64 = slot * MAX_TEXT
            size: i64 = i64(self.sizes[slot])
            data = bytes(self.text[base : base + size])
            # Read whole first, then checked: the loop may have written over
            # it while this thread let go of the GIL (at an allocation).
            if number < self.written - slots:
                continue
            if kind & _NUMBERED:
                kind &= 127
                text = f"Task-{c}"
            else:
                text = data.decode("utf-8", "replace")
            if kind in (_EXIT_FINISHED, _EXIT_CANCELLED):
                outcome = "FINISHED" if kind == _EXIT_FINISHED else "CANCELLED"
                kind, text = EXIT, f"{text} {outcome}"
            out.append((stamp, kind, a, b, text))
        return out


# --- task groups ---------------------------------------------------------------------
#
# ``corun top`` shows a server's thousand short request tasks as one row: the
# tasks that run the same coroutine function (or that the application labelled
# alike, ``corun.observe.set_group``) form a group, and a task's counters are
# added to its group's when it ends, with its lifetime (spawn to end) in the
# group's histogram. A live task's counters are read from the task itself.

#: Groups kept per loop; the tasks of any further ones count as ``OTHER_GROUP``.
MAX_GROUPS: Final = 128
OTHER_GROUP: Final = "(other groups)"


class GroupTotals:
    """The summed counters of a group's tasks that have ended."""

    def __init__(self) -> None:
        self.done: i64 = 0
        self.steps: i64 = 0
        self.busy: float = 0.0
        #: Spawn-to-end times of the tasks (of those spawned while observed).
        self.lifetimes: Histogram = Histogram()


# --- the loop's accounting ---------------------------------------------------------

#: Seconds the loop waits at a hand-over of the GIL before it goes on without
#: it (see ``LoopAccounting.hand_over``).
HANDOFF_TIMEOUT: Final = 0.001
#: Hand-overs the loop tries again, at its next polls, when the other thread
#: did not come in time (another took the GIL first): it still wants it.
HANDOFF_RETRIES: Final = 3
#: After those, the loop tries a look's hand-over again this long after, then
#: twice as long each time, up to ``LOOK_RETRY_MOST``: a watchdog that its
#: timer woke late (a busy machine) waits for the GIL meanwhile, and a loop
#: that only lets it go for a poll's moment would keep it from it for good.
LOOK_RETRY_FIRST: Final = 0.002
LOOK_RETRY_MOST: Final = 0.128
_NEVER: Final = float("inf")


def _nothing_ready() -> Any:
    raise RuntimeError("this accounting is not attached to a loop")


class LoopAccounting:
    """What the loop keeps for ``corun.observe`` (see the module docstring)."""

    def __init__(self, clock: Callable[[], float], stall_threshold: float) -> None:
        self.clock: Callable[[], float] = clock
        self.lag: Histogram = Histogram()
        self.schedule: Histogram = Histogram()
        self.recorder: EventRing = EventRing()
        # Cancellations, stalls and notes (see INCIDENT_SLOTS).
        self.incidents: EventRing = EventRing(INCIDENT_SLOTS)
        self.stall_threshold: float = stall_threshold
        # The loop's ready queue's popleft, bound when the loop attaches this:
        # taking it per batch of handles made a method object each time (and
        # one the collector tracks, which brings its collections on sooner).
        self.popleft: Callable[[], Any] = _nothing_ready
        # The running step. step_seq changes when a step starts; step_handle
        # is None between batches of handles (the loop waits or does its own
        # bookkeeping).
        self.step_seq: i64 = 0
        self.step_start: float = 0.0
        self.step_handle: object = None
        self.step_task: Any = None
        # What step_handle and step_task held before: the loop moves the old
        # value here before it overwrites a step slot (see ``retire_step``).
        self.retired_handle: object = None
        self.retired_task: Any = None
        # Seconds the collector ran, kept by corun.observe's gc callback;
        # step_gc is its value when the running step started.
        self.gc_total: float = 0.0
        self.step_gc: float = 0.0
        self.steps: i64 = 0
        self.busy: float = 0.0
        # The longest step seen, and the name of its task or callback.
        self.longest: float = 0.0
        self.longest_owner: str = ""
        # time.time() minus the clock: an event in a step is stamped from the
        # step's start, without a clock read of its own (see ``sync_wall``).
        self.wall_offset: float = _wall() - clock()
        # The loop's last clock reading, at the end of a wait or of a batch of
        # handles: the start of whichever comes next (0.0: none, read the clock).
        self.last_read: float = 0.0
        self.io_wait_total: float = 0.0
        self.io_wait_since: float = 0.0
        # When a thread of corun.observe wants the GIL next (on the clock),
        # and a lock it holds until it has had it (see ``hand_over``): the
        # watchdog's next look, and a turn of the serving thread.
        self.look_due: float = _NEVER
        self.look_gate: Any = None
        # What the loop sets to wake the watchdog for its look, when the
        # watchdog gave one (a threading.Event, for looks close together):
        # then it wakes with the GIL free rather than by its timer, to wait
        # for the GIL while the loop runs. look_bells counts the rings.
        self.look_bell: Any = None
        self.look_bells: i64 = 0
        # The watchdog's alarm (see ``arm_alarm``): what sets it to ring a
        # stall threshold from now (None: no alarm, the watchdog looks by its
        # own timer), when the loop sets it next, and when it rings as set.
        self.alarm: Any = None
        self.alarm_at: float = _NEVER
        self.alarm_every: float = _NEVER
        self.alarm_due: float = 0.0
        self.alarms: i64 = 0
        self.look_misses: i64 = 0
        self.look_retry: float = LOOK_RETRY_FIRST
        self.turn_due: float = _NEVER
        self.turn_gate: Any = None
        self.turn_misses: i64 = 0
        # How long the loop waits at a turn's gate: a walk's slice is longer
        # than a system call, and a loop that gives up waiting mid-slice waits
        # for the GIL instead, until the slice ends or the interpreter forces
        # a switch (5 ms).
        self.turn_wait: float = HANDOFF_TIMEOUT
        # How long past turn_due the loop goes on running ready handles before
        # it hands over at a poll that does not wait: 0 for a system call's
        # turn; a walk's pause lets a timer and the task it wakes both run.
        self.turn_grace: float = 0.0
        # Hand-overs, those that the other thread did not take in time, and
        # the seconds the loop waited in them.
        self.hand_overs: i64 = 0
        self.hand_overs_missed: i64 = 0
        self.hand_over_seconds: float = 0.0
        self.tasks_spawned: int = 0
        self.tasks_exited: int = 0
        # Ended tasks' counters by group (see GroupTotals), read by corun top.
        self.groups: dict[str, GroupTotals] = {}
        self._next_task_id: int = 0
        # (seq, owner, start, duration, gc seconds): steps over stall_threshold,
        # taken by the watchdog; bounded in case nobody takes them.
        self.long_steps: list[tuple[int, object, float, float, float]] = []

    def retire_step(self) -> None:
        """Clear the step slots without freeing what they held while a slot points at it.

        Compiled code releases an attribute's old value *before* it stores the
        new one. If that was the last reference, the object is freed while the
        slot still points at it, and its finaliser (a coroutine's ``close``)
        may run Python code, where the watchdog thread can take the GIL, read
        the slot and use a freed object. So the old values move to slots that
        no other thread reads, and are released from there.
        """
        self.retired_handle = self.step_handle
        self.retired_task = self.step_task
        self.step_handle = None
        self.step_task = None
        self.retired_handle = None
        self.retired_task = None

    def hand_over(self, now: float) -> float:
        """Wait, without the GIL, for the thread of observation that wants it now; the clock after.

        A thread that wakes must take the GIL back, and a loop that lets go of
        it only for the moment of each poll takes it back first nearly every
        time: the watchdog waited for it for hundreds of milliseconds at each
        look, and meanwhile every poll woke it in vain (10,000 context switches
        a second, a third more per step on the empty-step benchmark). So the
        thread publishes when it wants the GIL and a lock it holds until it
        has had it, and the loop waits on the lock: for a turn of the serving
        thread, before a poll that would wait (or after one that does not,
        ``turn_grace`` past the turn), for at most ``turn_wait``; for a look of
        the watchdog, after a poll, for at most ``HANDOFF_TIMEOUT``, having
        rung its ``look_bell`` if it set one. If the thread did not come (another took
        the GIL first), the loop tries again at its next polls,
        ``HANDOFF_RETRIES`` times; for a look, then again ``look_retry`` later.
        """
        # The thread may publish its next gate while the loop waits on this
        # one: a slot is cleared only if it still holds the gate waited on.
        if now >= self.turn_due:
            gate = self.turn_gate
            if self._handed_over(gate, self.turn_misses, self.turn_wait):
                if self.turn_gate is gate:
                    self.turn_due = _NEVER
                    self.turn_gate = None
            elif self.turn_gate is gate:
                self.turn_misses += 1
        else:
            gate = self.look_gate
            bell = self.look_bell
            if bell is not None:
                self.look_bells += 1
                bell.set()
            taken = gate is None or self._taken(gate, HANDOFF_TIMEOUT)
            if self.look_gate is gate:
                if taken:
                    self.look_due = _NEVER
                    self.look_gate = None
                    self.look_retry = LOOK_RETRY_FIRST
                elif self.look_misses < HANDOFF_RETRIES:
                    self.look_misses += 1
                else:
                    self.look_misses = 0
                    self.look_due = self.clock() + self.look_retry
                    self.look_retry = min(2.0 * self.look_retry, LOOK_RETRY_MOST)
        end = self.clock()
        self.hand_over_seconds += end - now
        self.last_read = 0.0  # the wait is the other thread's, not the next step's
        return end

    def arm_alarm(self, now: float) -> None:
        """Set the watchdog's alarm to ring a stall threshold from ``now``; at most every ``alarm_every``.

        The watchdog needs the GIL for a look, and a loop of short steps keeps
        it: each look cost the loop a hand-over, 12 a second at the default
        threshold, though none could find a stall. So the watchdog
        sleeps on a kernel timer, and the loop, at the end of a step or a
        wait, sets it again every half threshold (a system call of about a
        microsecond). It rings only when no step ended for half a threshold:
        a step that may become a stall, or a loop that waits. A step starts
        after the last setting, so a stall is rung by its threshold.
        """
        alarm = self.alarm
        if alarm is None:
            self.alarm_at = _NEVER
            return
        self.alarm_at = now + self.alarm_every
        self.alarm_due = now + self.stall_threshold
        self.alarms += 1
        try:
            alarm()
        except Exception:
            # The watchdog looks by its timer again (it reads alarm as None).
            self.alarm = None
            self.alarm_at = _NEVER

    def client_arrived(self, now: float) -> None:
        """A client connected to corun.observe's server (the loop's poll saw it): its turn is due.

        The serving thread waits for clients without the GIL, and wakes
        wanting it back, with no turn published: a loop of short steps would
        keep it waiting for tens of milliseconds (see ``hand_over``). So while
        it waits, it holds a turn's gate that is not yet due, and the loop
        makes it due when it sees the client itself.
        """
        if self.turn_gate is not None and self.turn_due == _NEVER:
            self.turn_due = now

    def _handed_over(self, gate: Any, misses: i64, wait: float) -> bool:
        """Wait on ``gate``: False if it did not open and the hand-over is to be tried again."""
        if gate is None:
            return True
        return self._taken(gate, wait) or misses >= HANDOFF_RETRIES

    def _taken(self, gate: Any, wait: float) -> bool:
        """Wait on ``gate`` for at most ``wait`` seconds: whether it opened."""
        self.hand_overs += 1
        if gate.acquire(True, wait):
            return True
        self.hand_overs_missed += 1
        return False

    def sync_wall(self) -> None:
        """Measure ``wall_offset`` again (the watchdog does, every second), after clock steps."""
        self.wall_offset = _wall() - self.clock()

    def _step_stamp(self) -> float:
        """The wall-clock time of an event in the running step (-1: none runs, read the clock)."""
        return self.step_start + self.wall_offset if self.step_handle is not None else -1.0

    def new_task_id(self) -> int:
        """A number for a new task, unique for this loop."""
        self._next_task_id += 1
        return self._next_task_id

    def long_step(self, owner: object, start: float, duration: float) -> None:
        """Note a step that ran longer than ``stall_threshold``."""
        if len(self.long_steps) < 1024:
            self.long_steps.append(
                (self.step_seq, owner, start, duration, self.gc_total - self.step_gc)
            )

    def task_spawned(self, task_id: int, parent_id: int, name: str | int) -> None:
        """Record a new task (``name``: its name, or the number of a default one)."""
        self.tasks_spawned += 1
        self.recorder.add_task(SPAWN, task_id, parent_id, name, self._step_stamp())

    def task_exited(self, task_id: int, steps: int, name: str | int, outcome: str) -> None:
        """Record a task that finished."""
        self.tasks_exited += 1
        kind = _EXIT_CANCELLED if outcome == "CANCELLED" else _EXIT_FINISHED
        self.recorder.add_task(kind, task_id, steps, name, self._step_stamp())

    def task_ended(self, group: str, steps: i64, busy: float, lifetime: float) -> None:
        """Add an ended task's counters to its group's (``lifetime`` < 0: not known)."""
        totals = self.groups.get(group)
        if totals is None:
            if len(self.groups) >= MAX_GROUPS:
                group = OTHER_GROUP
                totals = self.groups.get(group)
            if totals is None:
                totals = GroupTotals()
                self.groups[group] = totals
        totals.done += 1
        totals.steps += steps
        totals.busy += busy
        if lifetime >= 0.0:
            totals.lifetimes.record(lifetime)

    def task_cancelled(self, task_id: int, name: str) -> None:
        """Record a cancellation request, with where it came from."""
        self.incidents.add(CANCEL, task_id, 0, f"{name} <- {canceller()}")


def canceller() -> str:
    """The innermost Python frames of whoever is running now: ``file:line function``, newest first.

    Compiled code has no frames, so the innermost one is the caller's.
    """
    frame = sys._getframe(0)
    parts: list[str] = []
    while frame is not None and len(parts) < 3:
        code = frame.f_code
        filename = code.co_filename
        slash = filename.rfind("/")
        parts.append(f"{filename[slash + 1 :]}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back  # type: ignore[assignment]
    return " < ".join(parts)
