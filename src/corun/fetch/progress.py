"""The live progress bar (rich) of ``corun fetch``; quiet when stderr is not a terminal."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


@dataclass(frozen=True, slots=True)
class ProgressState:
    """What the bar shows: lines done of total, errors, retries, and the hosts' health.

    ``done``, ``errors`` and ``retries`` count over every recorded line,
    earlier runs included, as the summary does; ``retries`` are attempts
    beyond the first. The hosts are ``healthy``, ``paused`` (by a
    ``Retry-After``, the last pause ending ``paused_for`` seconds
    from now, None when none is paused) or ``unavailable`` (breaker open or
    half-open, or given up); ``open_breakers`` counts the breakers not closed.
    """

    done: int
    total: int
    errors: int
    retries: int
    open_breakers: int
    healthy: int = 0
    paused: int = 0
    paused_for: float | None = None
    unavailable: int = 0

    def hosts_text(self) -> str:
        """The hosts' health in a few words: ``hosts 3 ok, 1 paused (2.0 s), 0 unavailable``."""
        paused = f"{self.paused} paused"
        if self.paused_for is not None:
            paused += f" (for {self.paused_for:.1f} s)"
        return f"hosts {self.healthy} ok, {paused}, {self.unavailable} unavailable"


class ProgressBar:
    """A rich ``Progress`` on stderr when it is a terminal (and enabled); otherwise nothing.

    Args:
        enabled: False (``--no-progress``) turns it off everywhere.
        stream: where to draw (default stderr).
    """

    def __init__(self, *, enabled: bool = True, stream: TextIO | None = None) -> None:
        stream = stream if stream is not None else sys.stderr
        self.active = enabled and stream.isatty()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if self.active:
            self._progress = Progress(
                TextColumn("[bold]fetch"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:.1f}/s"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn(
                    "errors {task.fields[errors]}  retries {task.fields[retries]}  "
                    "{task.fields[hosts]}"
                ),
                console=Console(file=stream),
                refresh_per_second=5,
            )

    def __enter__(self) -> ProgressBar:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(
                "fetch", total=None, rate=0.0, errors=0, retries=0, hosts=""
            )
        return self

    def update(self, state: ProgressState, rate: float) -> None:
        """Show ``state``; ``rate`` is lines per second in this run."""
        if self._progress is None or self._task is None:
            return
        self._progress.update(
            self._task,
            total=state.total,
            completed=state.done,
            rate=rate,
            errors=state.errors,
            retries=state.retries,
            hosts=state.hosts_text(),
        )

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
