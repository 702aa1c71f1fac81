"""Recorders for tests: every resilience event, or every task hook of the loop.

* ``EventRecorder`` is a ``corun.resilience.Listener`` that keeps every
  event in order, so a test can assert on exactly what a policy reported.
* ``TaskRecorder`` is a ``corun.Instrument`` (Trio's ``TaskRecorder``) that
  keeps ``(hook, task)`` for every task hook of a corun loop.
"""

from __future__ import annotations

from typing import Any, TypeVar

from corun.resilience.events import Listener
from corun.runtime.engine.instruments import Instrument

E = TypeVar("E")


class EventRecorder(Listener):
    """Records every resilience event, in the order the policies emitted them."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def of_type(self, kind: type[E]) -> list[E]:
        """The recorded events of one payload class, in order."""
        return [e for e in self.events if isinstance(e, kind)]

    def clear(self) -> None:
        """Forget what was recorded."""
        self.events.clear()

    def _record(self, event: object) -> None:
        self.events.append(event)

    # Every hook records its event the same way.
    retry_scheduled = gave_up = breaker_state_changed = rejected = _record
    timed_out = hedge_launched = call_finished = _record


class TaskRecorder(Instrument):
    """Records ``(hook, task)`` for every task hook, as Trio's ``TaskRecorder``.

    Register it with ``loop.add_instrument(recorder)`` on a corun loop. The
    tasks themselves are kept (names may change after ``task_spawned``), so
    the recorder keeps every task it saw alive: use it in tests only.
    """

    def __init__(self) -> None:
        self.records: list[tuple[str, Any]] = []

    def task_spawned(self, task: Any) -> None:
        self.records.append(("task_spawned", task))

    def before_task_step(self, task: Any) -> None:
        self.records.append(("before_task_step", task))

    def after_task_step(self, task: Any) -> None:
        self.records.append(("after_task_step", task))

    def task_exited(self, task: Any) -> None:
        self.records.append(("task_exited", task))

    def filter(self, name: str) -> list[str]:
        """The hooks recorded for the task now called ``name``, in order."""
        return [hook for hook, task in self.records if task.get_name() == name]
