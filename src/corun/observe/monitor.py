"""The process's watchdog thread: stalls, 1 s windows, the faulthandler backstop.

One daemon thread serves every observed loop of the process. It sleeps until
a loop's alarm rings (``alarm.py``: the loop ran one step, or waited, for
half a stall threshold), or its own timer for a step it saw, then reads the
loop's published step and, if it still runs, the loop thread's stack from
``sys._current_frames()``. It needs the GIL for that: a step that holds it
gives it up every switch interval (5 ms). Its other duties, a 1 s window and
the backstop's re-arming, wake it twice a second; for those, a loop of short
steps hands it the GIL at a poll just after its timer. Without an alarm, it
looks by its timer, at most half a threshold apart (and for looks due sooner
than ``BELL_BELOW``, the loop wakes it at a poll just before).

A C call that holds the GIL stops the watchdog too. For that case
``faulthandler`` is set to dump every thread's stack after ``BACKSTOP``
seconds (``backstop.py``: a timer's signal), and re-armed from here every
``REARM`` (half of it): while the watchdog runs, it never fires; once the GIL
is stuck, it fires within ``BACKSTOP``. The dump is read back when the GIL is
free again and attached to the stall.

A part that fails is logged on the ``corun`` logger and switched off; the
loop itself never sees the failure.
"""

from __future__ import annotations

import gc
import math
import os
import re
import select
import threading
import time
from typing import TYPE_CHECKING, Any, Final

from corun.observe.alarm import Alarm, read_count
from corun.observe.backstop import Backstop, dump_file_made, prepare
from corun.observe.protocol import logger, name_this_thread
from corun.runtime.engine.accounting import HANDOFF_TIMEOUT, LOOK_RETRY_FIRST

if TYPE_CHECKING:
    from corun.observe.observer import Observer
    from corun.runtime.engine.accounting import LoopAccounting


#: Seconds a C call may hold the GIL before faulthandler dumps every stack.
BACKSTOP: Final = 1.0
#: How often the watchdog re-arms it while a loop runs, and so the longest it
#: sleeps: the other half second is the margin for a late wake.
REARM: Final = BACKSTOP / 2
#: Seconds between two windows of utilisation and CPU.
WINDOW: Final = 1.0
#: Below this wait between looks, a loop wakes the watchdog for its look
#: (``LoopAccounting.look_bell``), at its first poll ``LOOK_EARLY`` before the
#: watchdog's timer (at most a quarter of the wait), and hands it the GIL: it
#: wakes with the GIL free. Woken by its timer instead, it waits for the GIL
#: while the loop runs, and every poll's release of the GIL wakes it in vain:
#: at a 10 ms threshold, 456 us of the loop's time a look, against 75 with the
#: bell (empty steps). At the default threshold's 90 ms the bell measured 0.3
#: to 0.9 points more server CPU on streams and HTTP, so there the timer wakes
#: the watchdog, and the loop hands over ``LOOK_LATE`` after it.
BELL_BELOW: Final = 0.03
LOOK_EARLY: Final = 0.005
#: How long after the watchdog's timer the loop hands it the GIL, without a
#: bell: by then the watchdog waits for it, and takes it at once. Handed over
#: at the timer itself, the loop would also wait out the timer's slack (50 us).
LOOK_LATE: Final = 0.0002

_THREAD_LINE: Final = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
_FRAME_LINE: Final = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


def parse_faulthandler(text: str) -> dict[int, list[str]]:
    """Stacks from a faulthandler dump, by thread id: ``file:line function``, innermost last."""
    stacks: dict[int, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _THREAD_LINE.match(line)
        if header:
            current = []
            stacks[int(header.group(1), 16)] = current
            continue
        frame = _FRAME_LINE.match(line)
        if frame and current is not None:
            current.append(f"{frame.group(1)}:{frame.group(2)} {frame.group(3)}")
    for stack in stacks.values():
        stack.reverse()  # faulthandler prints the most recent call first
    return stacks


class Monitor:
    """The watchdog thread and what it watches (one per process: ``MONITOR``)."""

    def __init__(self) -> None:
        self._observers: list[Observer] = []
        self._lock = threading.Lock()
        self._wake = _Waker()
        # The watchdog's own timer (see _sleep), made on its first sleep.
        self._timer: Alarm | None = None
        self._no_timer = False
        # Alarms of loops no longer observed, closed by the watchdog's thread:
        # it may be reading one (see remove).
        self._retired_alarms: list[Alarm] = []
        self._thread: threading.Thread | None = None
        # Made on the watchdog's thread (its timer signals that thread), closed as it ends.
        self._backstop: Backstop | None = None
        self._backstop_armed_at = 0.0
        self._gc_started: dict[int, float] = {}
        self._gc_installed = False
        self._failed: set[str] = set()
        # The locks the loops wait on for the watchdog's next look, and for
        # the serving thread's next turn (see _publish_look).
        self._look_gates: list[threading.Lock] = []
        self._turn_gates: list[threading.Lock] = []
        self._gates_lock = threading.Lock()
        self.server: Any = None
        #: The watchdog's rounds so far: each looks at every observed loop.
        self.rounds = 0
        # Set by ``look_now``, cleared as a round begins.
        self._look_asked = False

    def own_fds(self) -> frozenset[int]:
        """The file descriptors observation holds for the whole process.

        The inspection socket and its wake pipe, and the faulthandler
        backstop's file: opened once, by the first observed loop, and kept.
        """
        fds = set(self.server.fds()) if self.server else set()
        file = dump_file_made()
        if file is not None:
            fds.add(file.fileno())
        fds.add(self._wake.fd)
        if self._timer is not None:
            fds.add(self._timer.fd)
        # A loop's alarm is closed when the watchdog sees the loop closed.
        fds.update(o.alarm.fd for o in self.observers() if o.alarm is not None)
        with self._lock:
            fds.update(alarm.fd for alarm in self._retired_alarms)
        return frozenset(fds)

    def observers(self) -> list[Observer]:
        """The observers watched now."""
        with self._lock:
            return list(self._observers)

    def add(self, observer: Observer) -> None:
        """Watch ``observer``'s loop; start the thread and the server if needed."""
        try:
            prepare()  # here, where giving up the GIL costs no loop a wait
        except OSError as exc:  # the watchdog's backstop part fails and is switched off
            logger.debug("corun.observe: the backstop's file: %s", exc)
        with self._lock:
            self._observers.append(observer)
            self.watch_arrivals(observer)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="corun-observe-watchdog", daemon=True
                )
                self._thread.start()
        if not self._gc_installed:
            gc.callbacks.append(self._gc_callback)
            self._gc_installed = True
        self.look_now()

    def look_now(self) -> None:
        """Wake the watchdog for a look now (a loop added, a threshold changed)."""
        # Asked during a round, the look is that round's next: its own
        # publication must not put off this one's hand-over (see ``_run``).
        self._look_asked = True
        self._wake.set()
        # Handed over too: the thread may be new, or asleep for a look far off,
        # and without a hand-over it would wait long for the GIL.
        self._publish_look(0.0)

    def _close_retired_alarms(self) -> None:
        # Closed under the lock: ``own_fds`` then finds each alarm listed or
        # closed, never between the two.
        with self._lock:
            for alarm in self._retired_alarms:
                alarm.close()
            self._retired_alarms = []

    def remove(self, observer: Observer) -> None:
        """Stop watching ``observer``'s loop, and close its alarm once the watchdog cannot be reading it.

        The watchdog reads the alarms it slept on after it wakes: closed by
        another thread meanwhile, the number could be a new file's, and the
        watchdog would read from it. So its own thread closes them.
        """
        with self._lock:
            if observer in self._observers:
                self._observers.remove(observer)
                # Retired in the same hold of the lock: ``own_fds`` finds the
                # alarm with its observer or retired, never between the two
                # (the tests' fd check took it for a leak when the watchdog
                # closed an observer).
                if observer.alarm is not None:
                    self._retired_alarms.append(observer.alarm)
            elif observer.alarm is not None:
                observer.alarm.close()  # never watched: the watchdog never read it
            watching = self._thread is not None and self._thread.is_alive()
            empty = not self._observers
        if not watching:
            self._close_retired_alarms()
        self._wake.set()
        _watch_arrivals(observer, -1)
        if empty:
            self._disarm()
            if self._gc_installed:
                try:
                    gc.callbacks.remove(self._gc_callback)
                except ValueError:
                    pass
                self._gc_installed = False
        self._wake.set()

    # --- the thread --------------------------------------------------------------

    def _run(self) -> None:
        name_this_thread("corun-watchdog")
        next_window = time.monotonic() + WINDOW
        while True:
            # The wakes asked for so far are served by this round. Left set,
            # one would end the next sleep at once, in a round that no loop
            # hands the GIL over for (they went on at this round's look).
            self._look_asked = False
            self._wake.clear()
            observers = self.observers()
            if not observers:
                with self._lock:
                    done = not self._observers
                    if done:
                        # Before a new thread can start, and make its own.
                        self._guarded("backstop", None, self._close_backstop)
                        self._thread = None
                if done:
                    # Retired from now on, they are closed where they are retired.
                    self._close_retired_alarms()
                    self._release_gates()
                    return
                continue
            self.rounds += 1
            now = time.monotonic()
            sleep = math.inf
            running = [o for o in observers if not self._retired(o) and o.running()]
            # A dump that fired is the stack of the stall that the watchdog is
            # about to see: read first. Re-arming comes after the looks, as it
            # gives up the GIL, which a step holding it returns only after a
            # switch interval (5 ms): the looks would be that much later.
            self._guarded("backstop", None, self._take_backstop_dump, now)
            for observer in observers:
                if not observer.closed:
                    sleep = min(sleep, self._guarded("watch", observer, observer.watch, now))
            self._guarded("backstop", None, self._arm_backstop, now, bool(running))
            # Awake often enough to re-arm the backstop long before it can fire.
            armed_at = self._backstop_armed_at
            sleep = min(sleep, armed_at + REARM - now if armed_at else REARM)
            # Woken by a loop's bell up to LOOK_EARLY before a timed duty: done
            # now, as a wait shorter than that would be cut short by the bell again.
            if now >= next_window - LOOK_EARLY:
                for observer in observers:
                    self._guarded("window", observer, observer.window, now)
                next_window = now + WINDOW
            # After the looks: closing an fd lets go of the GIL, which a step
            # holding it gives back only after a switch interval.
            self._close_retired_alarms()
            wait = max(0.001, min(sleep, next_window - now))
            # A look asked for since this round began (its wake is still set,
            # and ends the sleep at once) is due now, not in ``wait``: put
            # off, it left the woken watchdog waiting for the GIL beside a
            # loop of short steps until the next look (3.15: 7 starts in 30).
            self._publish_look(0.0 if self._look_asked else wait)
            self._sleep(wait, observers)

    def _sleep(self, wait: float, observers: list[Observer]) -> None:
        """Sleep ``wait`` seconds, or until woken (``_wake``) or a loop's alarm rings."""
        alarms = [o.alarm for o in observers if o.alarm is not None and not o.closed]
        poller = select.poll()
        poller.register(self._wake.fd, select.POLLIN)
        for alarm in alarms:
            poller.register(alarm.fd, select.POLLIN)
        # Its own timer too, to the microsecond: poll's timeout is rounded up to
        # a millisecond, and a loop waits at most that long for a look it hands
        # the GIL over for (HANDOFF_TIMEOUT) from 0.2 ms past the time published.
        timer = self._own_timer()
        if timer is not None:
            timer.set_seconds(wait)
            timer.arm()
            poller.register(timer.fd, select.POLLIN)
            poller.poll()
            timer.drain()
        else:
            poller.poll(math.ceil(wait * 1000))
        self._wake.clear()
        for alarm in alarms:
            alarm.drain()

    def _own_timer(self) -> Alarm | None:
        if self._timer is None and not self._no_timer:
            try:
                self._timer = Alarm(REARM)
            except OSError:
                self._no_timer = True
        return self._timer

    # --- handing the GIL over ------------------------------------------------------
    #
    # A thread that wakes must take the GIL back, and a loop that lets go of it
    # only for the moment of each poll takes it back first nearly every time:
    # the thread waits for hundreds of milliseconds, woken in vain by every
    # poll. So each thread of observation tells the loops when it will want the
    # GIL back, with a lock it holds until it has had it: a loop that polls
    # past that time waits on the lock (``LoopAccounting.hand_over``). The
    # watchdog's looks and the serving thread's turns have a lock each.

    def _publish_look(self, wait: float) -> None:
        """Release the loops waiting for the look just taken; have them wait for the next, in ``wait`` s."""
        with self._gates_lock:
            old = self._look_gates
            armed = self._held_gates()
            for accounting, gate in armed:
                accounting.look_gate = gate
                accounting.look_misses = 0
                accounting.look_retry = LOOK_RETRY_FIRST
                if wait < BELL_BELOW:
                    accounting.look_bell = self._wake
                    accounting.look_due = accounting.clock() + wait - min(LOOK_EARLY, wait / 4)
                else:
                    accounting.look_bell = None
                    accounting.look_due = accounting.clock() + wait + LOOK_LATE
            self._look_gates = [gate for _, gate in armed]
            _release(old)

    def turn(self, wait: float = HANDOFF_TIMEOUT, grace: float = 0.0) -> None:
        """Have the observed loops wait at their next poll: this thread is about to give up the GIL briefly.

        For the serving thread and long walks, before a call that releases the
        GIL and returns soon (a system call on a ready socket, a short sleep).
        The loops waiting since the last turn go on. ``wait``: how long a loop
        waits for this thread's next turn (a walk's pause: longer than a slice);
        ``grace``: how long a loop with ready handles runs on first (a walk's
        pause gives it time for a timer and the task it wakes; a system call's
        turn, none, for the answer's sake).
        """
        self._publish_turn(wait, grace, due_now=True)

    def wait_for_client(self) -> None:
        """Have the observed loops hand over the GIL when a client connects: this thread waits for one.

        For the serving thread, before it waits for its next client. The
        loops watch the server's socket in their own polls, and make this
        turn due when a client comes (``LoopAccounting.client_arrived``).
        """
        self._publish_turn(HANDOFF_TIMEOUT, 0.0, due_now=False)

    def _publish_turn(self, wait: float, grace: float, *, due_now: bool) -> None:
        """Release the loops waiting for the last turn; have them wait for the next (due now, or at a client)."""
        with self._gates_lock:
            old = self._turn_gates
            armed = self._held_gates()
            for accounting, gate in armed:
                accounting.turn_gate = gate
                accounting.turn_misses = 0
                accounting.turn_wait = wait
                accounting.turn_grace = grace
                accounting.turn_due = accounting.clock() if due_now else math.inf
            self._turn_gates = [gate for _, gate in armed]
            _release(old)

    def watch_arrivals(self, observer: Observer | None = None) -> None:
        """Have ``observer``'s loop (default: every observed loop) watch the server's socket."""
        server = self.server
        fd = server.listener_fd() if server else -1
        for watched in [observer] if observer is not None else self.observers():
            _watch_arrivals(watched, fd)

    def turns_done(self) -> None:
        """This thread needs no more turns: the loops waiting for it go on."""
        with self._gates_lock:
            old = self._turn_gates
            self._turn_gates = []
            for observer in self.observers():
                observer.accounting.turn_due = math.inf
                observer.accounting.turn_gate = None
            _release(old)

    def _release_gates(self) -> None:
        """Let every waiting loop go on (the watchdog's thread ends)."""
        with self._gates_lock:
            _release(self._look_gates + self._turn_gates)
            self._look_gates = []
            self._turn_gates = []

    def _held_gates(self) -> list[tuple[LoopAccounting, threading.Lock]]:
        """A new lock, held by this thread, for each observed loop still open."""
        armed = []
        for observer in self.observers():
            if not observer.closed:
                gate = threading.Lock()
                gate.acquire()
                armed.append((observer.accounting, gate))
        return armed

    def _retired(self, observer: Observer) -> bool:
        loop = observer.loop
        if loop is None or loop.is_closed():
            observer.close()
            return True
        return False

    def _guarded(self, part: str, observer: Observer | None, function: Any, *args: Any) -> Any:
        if part in self._failed:
            return 0.05
        try:
            return function(*args)
        except Exception:
            # Switch the part off for good: a part that failed once would fail again.
            self._failed.add(part)
            logger.exception("corun.observe: the %s part failed and is switched off", part)
            if observer is not None:
                observer.note(f"observer part {part} failed; switched off")
            return 0.05

    # --- the faulthandler backstop -----------------------------------------------

    def _take_backstop_dump(self, now: float) -> None:
        """Read the faulthandler's dump, if it can have fired since it was armed."""
        file = dump_file_made()
        # It fires BACKSTOP after being armed: before then, the file needs no
        # look (os.fstat gives up the GIL).
        if file is None or not self._backstop_armed_at or now < self._backstop_armed_at + BACKSTOP:
            return
        status = os.fstat(file.fileno())
        if status.st_size:
            file.seek(0)
            text = file.read().decode("utf-8", "replace")
            file.seek(0)
            file.truncate()
            # When it fired: the file's modification time, on the monotonic clock.
            fired = time.monotonic() - max(0.0, time.time() - status.st_mtime)
            self._backstop_fired(text, fired)
            self._backstop_armed_at = 0.0

    def _arm_backstop(self, now: float, any_running: bool) -> None:
        """Re-arm the faulthandler every REARM seconds while a loop runs; disarm it otherwise."""
        if not any_running:
            self._disarm()
            return
        if now - self._backstop_armed_at >= REARM - LOOK_EARLY:
            if self._backstop is None:
                self._backstop = Backstop(BACKSTOP)
            self._backstop.arm()
            self._backstop_armed_at = now

    def _disarm(self) -> None:
        if self._backstop_armed_at and self._backstop is not None:
            self._backstop.disarm()
        self._backstop_armed_at = 0.0

    def _close_backstop(self) -> None:
        backstop, self._backstop = self._backstop, None
        self._backstop_armed_at = 0.0
        if backstop is not None:
            backstop.close()

    def _backstop_fired(self, text: str, fired: float) -> None:
        stacks = parse_faulthandler(text)
        for observer in self.observers():
            thread_id = observer._thread_id
            if thread_id is not None and thread_id in stacks:
                observer.backstop_stack = tuple(stacks[thread_id])
                observer.backstop_fired = fired
                logger.warning(
                    "corun.observe: a C call held the GIL for over %.1f s; faulthandler "
                    "dumped the stacks (loop thread at %s)",
                    BACKSTOP,
                    stacks[thread_id][-1] if stacks[thread_id] else "?",
                )

    # --- the collector's share of a stall -------------------------------------------

    def _gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        thread_id = threading.get_ident()
        if phase == "start":
            self._gc_started[thread_id] = time.perf_counter()
            return
        started = self._gc_started.pop(thread_id, None)
        if started is None:
            return
        elapsed = time.perf_counter() - started
        for observer in self._observers:
            if observer._thread_id == thread_id:
                observer.accounting.gc_total += elapsed


class _Waker:
    """What wakes the watchdog from its sleep: an eventfd, beside the loops' alarms."""

    def __init__(self) -> None:
        self.fd: int = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)

    def set(self) -> None:
        """Wake the watchdog (from any thread)."""
        os.eventfd_write(self.fd, 1)

    def clear(self) -> None:
        """Take the wakes so far."""
        read_count(self.fd)


MONITOR: Final = Monitor()


def _watch_arrivals(observer: Observer, fd: int) -> None:
    loop = observer.loop
    if loop is None:
        return
    try:
        loop._watch_arrivals(fd)
    except (OSError, ValueError) as exc:  # the loop closed meanwhile, or its fd was reused
        logger.debug("corun.observe: the loop cannot watch the inspection socket: %s", exc)


def _release(gates: list[threading.Lock]) -> None:
    """Let the loops waiting on ``gates`` go on."""
    for gate in gates:
        gate.release()
