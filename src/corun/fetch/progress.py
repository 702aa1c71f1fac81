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
    """What the bar shows: lines done of total, errors, retries and open breakers.

    ``done``, ``errors`` and ``retries`` count over every recorded line,
    earlier runs included, as the summary does; ``retries`` are attempts
    beyond the first (a retry an open breaker refused made no attempt).
    """

    done: int
    total: int
    errors: int
    retries: int
    open_breakers: int


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
                    "open breakers {task.fields[breakers]}"
                ),
                console=Console(file=stream),
                refresh_per_second=5,
            )

    def __enter__(self) -> ProgressBar:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(
                "fetch", total=None, rate=0.0, errors=0, retries=0, breakers=0
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
            breakers=state.open_breakers,
        )

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
