"""The instrumentation seam: hooks the loop and Task call at fixed points.

Modelled on Trio's ``Instrument``. An instrument subclasses ``Instrument`` and
overrides the hooks it wants; the registry records, per hook, only the
instruments that override it. Each call site tests one tuple for emptiness
before calling anything, so with no instrument registered a hook costs one
attribute load and a truth test.

Contract for hook implementations:

* Hooks run synchronously inside the loop, on the loop's thread, between
  callbacks. They must be quick and must not block, await or re-enter the loop
  (``run_until_complete`` and friends).
* ``before_task_step(task)`` and ``after_task_step(task)`` bracket every step of
  a task, including its first and its last; ``task_exited(task)`` follows the
  last ``after_task_step``. ``task_spawned(task)`` runs when the task is
  created, before its first step is scheduled.
* ``task_scheduled(task)`` runs when a step of the task is queued to run: at
  its creation, and whenever it is woken (the future it waits on completed,
  or it yielded to the loop), as in Trio. The time between that and
  ``before_task_step`` is the task's wake-to-run latency.
* ``before_io_wait(timeout)`` and ``after_io_wait(timeout)`` bracket the
  loop's wait for I/O. ``timeout`` is the longest the loop will wait, in
  seconds: ``0.0`` when work is ready, ``None`` when nothing is scheduled.
  A loop that watches no fd but its own wakeup socket skips most zero-timeout
  polls (see ``handles.POLL_INTERVAL``), and these hooks with them.
* A hook that raises is reported through the ``corun`` logger and its
  instrument is removed from every hook; the loop carries on.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from mypy_extensions import mypyc_attr

logger: Final = logging.getLogger("corun")

HOOK_NAMES: Final = (
    "task_spawned",
    "task_scheduled",
    "before_task_step",
    "after_task_step",
    "task_exited",
    "before_io_wait",
    "after_io_wait",
)


@mypyc_attr(allow_interpreted_subclasses=True)  # users subclass it
class Instrument:
    """Base class for instruments. Every hook is a no-op; override the ones you need."""

    def task_spawned(self, task: Any) -> None:
        """A task was created."""

    def task_scheduled(self, task: Any) -> None:
        """A step of the task was queued to run (it was woken)."""

    def before_task_step(self, task: Any) -> None:
        """The task is about to run one step of its coroutine."""

    def after_task_step(self, task: Any) -> None:
        """The task finished one step of its coroutine."""

    def task_exited(self, task: Any) -> None:
        """The task finished: its coroutine returned, raised, or was cancelled."""

    def before_io_wait(self, timeout: float | None) -> None:
        """The loop is about to wait for I/O for at most ``timeout`` seconds."""

    def after_io_wait(self, timeout: float | None) -> None:
        """The loop's wait for I/O returned."""


class Instruments:
    """A registry of instruments, with one tuple of subscribers per hook.

    The tuples are public to the runtime's call sites, which test them for
    emptiness before calling ``call``.
    """

    __slots__ = (
        "_instruments",
        "after_io_wait",
        "after_task_step",
        "before_io_wait",
        "before_task_step",
        "task_exited",
        "task_scheduled",
        "task_spawned",
    )

    def __init__(self) -> None:
        self._instruments: list[Instrument] = []
        self.task_spawned: tuple[Instrument, ...] = ()
        self.task_scheduled: tuple[Instrument, ...] = ()
        self.before_task_step: tuple[Instrument, ...] = ()
        self.after_task_step: tuple[Instrument, ...] = ()
        self.task_exited: tuple[Instrument, ...] = ()
        self.before_io_wait: tuple[Instrument, ...] = ()
        self.after_io_wait: tuple[Instrument, ...] = ()

    def __len__(self) -> int:
        return len(self._instruments)

    def __contains__(self, instrument: object) -> bool:
        return instrument in self._instruments

    def add(self, instrument: Instrument) -> None:
        """Register ``instrument``; adding one that is registered already does nothing."""
        if not isinstance(instrument, Instrument):
            raise TypeError(f"instrument must be a corun.Instrument, not {instrument!r}")
        if instrument not in self._instruments:
            self._instruments.append(instrument)
            self._rebuild()

    def remove(self, instrument: Instrument) -> None:
        """Unregister ``instrument``.

        Raises:
            KeyError: it was not registered.
        """
        try:
            self._instruments.remove(instrument)
        except ValueError:
            raise KeyError(f"instrument {instrument!r} is not registered") from None
        self._rebuild()

    def _rebuild(self) -> None:
        subscribers: dict[str, list[Instrument]] = {name: [] for name in HOOK_NAMES}
        for instrument in self._instruments:
            cls = type(instrument)
            for name in HOOK_NAMES:
                # Only instruments that override a hook are called for it.
                if getattr(cls, name) is not getattr(Instrument, name):
                    subscribers[name].append(instrument)
        self.task_spawned = tuple(subscribers["task_spawned"])
        self.task_scheduled = tuple(subscribers["task_scheduled"])
        self.before_task_step = tuple(subscribers["before_task_step"])
        self.after_task_step = tuple(subscribers["after_task_step"])
        self.task_exited = tuple(subscribers["task_exited"])
        self.before_io_wait = tuple(subscribers["before_io_wait"])
        self.after_io_wait = tuple(subscribers["after_io_wait"])

    def call_task_hook(self, hook: str, subscribers: tuple[Instrument, ...], task: Any) -> None:
        """Call ``hook(task)`` on each subscriber; drop any that raises."""
        for instrument in subscribers:
            try:
                getattr(instrument, hook)(task)
            except Exception:
                self._failed(instrument, hook)

    def call_io_hook(
        self, hook: str, subscribers: tuple[Instrument, ...], timeout: float | None
    ) -> None:
        """Call ``hook(timeout)`` on each subscriber; drop any that raises."""
        for instrument in subscribers:
            try:
                getattr(instrument, hook)(timeout)
            except Exception:
                self._failed(instrument, hook)

    def _failed(self, instrument: Instrument, hook: str) -> None:
        logger.exception("instrument %r raised in %s(); it has been removed", instrument, hook)
        if instrument in self._instruments:
            self.remove(instrument)


#: Shared by tasks that run on loops without instruments (other asyncio loops).
#: Nothing ever registers here.
NO_INSTRUMENTS: Final = Instruments()
