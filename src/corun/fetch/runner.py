"""``run_fetch``: the batch fetcher behind ``corun fetch``.

Shape: the input is streamed (skipping the lines the journal holds) to a
``FetchBackend``, which runs it through a ``FetchEngine`` (``engine.py``):
here (``LocalBackend``), or on Ray actors, one engine per shard of hosts
(``ray_shards``). The engine runs every per-host policy and hands each
finished line (a response, an error, or bad input) back; this process alone
keeps the journal (``journal.py``), which commits in small batches, and the
``Tally`` the summary is made from. A ticker commits and redraws the
progress bar a few times a second. When every input line is in the
journal, the output is written from it atomically (``output.py``), copying
the records as the journal holds them.

``--retry-failed`` (``FetchOptions.retry_failed``) fetches again the lines
whose recorded result is an error or a retryable status; each new result
replaces the old row, so the output keeps one line per input line.

Stopping: SIGINT and SIGTERM (with ``handle_signals``), or the ``stop``
event, cancel the workers; what finished is committed, what was in flight
is fetched again by the next run. A SIGKILL loses at most the batch not yet
committed, which is likewise fetched again. Re-running the same command
skips every line the journal holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any, Final, Protocol, Self

from corun.fetch.engine import EngineStatistics, FetchEngine, HostCounts, HostReport, OnRecord
from corun.fetch.input import BadInput, FetchRequest, count_lines, read_requests
from corun.fetch.journal import FLUSH_SECONDS, Journal, fingerprint, journal_path, retryable
from corun.fetch.options import FetchOptions
from corun.fetch.output import write_output
from corun.fetch.progress import ProgressBar, ProgressState
from corun.fetch.summary import Summary, Tally, WorkerSummary
from corun.http import Client
from corun.resilience import Clock, LoopClock

#: Hosts listed in the summary at most (those with the most requests).
_SUMMARY_HOSTS: Final = 100


class _Run:
    """The mutable state of one ``run_fetch`` call."""

    def __init__(self, options: FetchOptions, journal: Journal, total: int, tally: Tally) -> None:
        self.options = options
        self.journal = journal
        self.total = total
        # Invariant: tally counts over the lines recorded in the journal
        # (committed or pending, earlier runs included) and not being fetched
        # again, exactly as the summary does.
        self.tally = tally
        self.fetched = 0

    def record(self, line: int, record: dict[str, Any]) -> None:
        self.fetched += 1
        self.tally.add(
            record["status"], record["error_kind"], record["attempts"], record.get("elapsed_ms")
        )
        if self.journal.record(line, record):
            self.journal.flush()


@dataclass(frozen=True, slots=True)
class BackendStatistics:
    """What a ``FetchBackend`` reports while it runs.

    Attributes:
        engine: its engines' counters in this run, summed.
        hosts: how its hosts are doing now (healthy, paused, unavailable).
        workers: one entry per worker when the requests are spread over
            workers (Ray); None on one machine.
    """

    engine: EngineStatistics
    hosts: HostCounts
    workers: tuple[WorkerSummary, ...] | None = None


#: The counters and host counts of an engine that has not run yet.
NO_ENGINE_STATISTICS: Final = EngineStatistics(0, 0, 0, 0, 0)
NO_HOSTS: Final = HostCounts(0, 0, None, 0)


class FetchBackend(Protocol):
    """Where a run's requests are made: here (``LocalBackend``) or on Ray actors
    (``corun.fetch.ray_shards.RayBackend``), by a ``FetchEngine`` either way.

    Contract: ``run_fetch`` enters the backend (``async with``) once, calls
    ``fetch`` once inside it, may call ``statistics`` at any time while
    inside, and ``host_reports`` once after ``fetch``. ``fetch`` takes every
    item of ``items`` and calls ``record(line, record)`` exactly once for
    each, on the calling loop's thread, with the record a ``FetchEngine``
    makes for it; it returns when every item is recorded, and raises only
    when the run cannot go on (the journal keeps what was recorded).
    Cancelled, it stops promptly: lines in flight are not recorded, so the
    next run fetches them again.
    """

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def fetch(self, items: Iterable[FetchRequest | BadInput], record: OnRecord) -> None: ...

    def statistics(self) -> BackendStatistics: ...

    async def host_reports(self) -> dict[str, HostReport]: ...


class LocalBackend:
    """The requests are made in this process, by one ``FetchEngine`` on one ``Client``."""

    def __init__(self, options: FetchOptions, *, clock: Clock | None = None) -> None:
        self._client = Client(options.client_options(), clock=clock)
        self._options = options
        self._clock = clock
        self._engine: FetchEngine | None = None

    async def __aenter__(self) -> Self:
        await self._client.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._client.__aexit__(exc_type, exc, tb)

    async def fetch(self, items: Iterable[FetchRequest | BadInput], record: OnRecord) -> None:
        self._engine = FetchEngine(self._options, self._client, record, clock=self._clock)
        await self._engine.run(items)

    def statistics(self) -> BackendStatistics:
        engine = self._engine
        if engine is None:
            return BackendStatistics(NO_ENGINE_STATISTICS, NO_HOSTS)
        return BackendStatistics(engine.statistics(), engine.hosts())

    async def host_reports(self) -> dict[str, HostReport]:
        return self._engine.host_reports() if self._engine is not None else {}


async def run_fetch(
    options: FetchOptions,
    *,
    clock: Clock | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = False,
    on_progress: Callable[[ProgressState], object] | None = None,
    backend: FetchBackend | None = None,
) -> Summary:
    """Fetch every input line not yet in the journal; write the output when all are.

    Args:
        options: the run's ``FetchOptions``.
        clock: the clock of the policies and timers (default: the running
            loop's, as a ``LoopClock``).
        stop: set it to stop the run gracefully (as SIGTERM does).
        handle_signals: stop gracefully on SIGINT and SIGTERM.
        on_progress: called with what the progress bar shows, a few times a
            second and once at the end (whether or not a bar is drawn).
        backend: where the requests are made (default: a ``LocalBackend``
            here; ``ray_shards.RayBackend`` spreads them over Ray actors).

    Returns:
        The ``Summary`` over every recorded line. ``complete`` is True when
        the output was written; ``interrupted`` when the run was stopped.

    Raises:
        JournalMismatch: the journal was made for other input.
        OSError: the input cannot be read or the output written.
    """
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    if clock is None:
        clock = LoopClock(loop)  # the loop, read once for the whole run
    input_path = options.input
    spool: str | None = None
    if input_path == "-":
        spool = input_path = _spool_stdin(options.output)
    total = count_lines(input_path)
    journal = Journal(journal_path(options.output), fingerprint(input_path), total)
    stop_event = stop if stop is not None else asyncio.Event()
    signals: list[signal.Signals] = []
    interrupted = False
    try:
        if handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop_event.set)
                signals.append(signum)
        # One pass over the journal: what is done, and its tally; lines that
        # --retry-failed fetches again are neither.
        done: set[int] = set()
        tally = Tally()
        for line, (status, kind, attempts, elapsed_ms) in journal.rows():
            if options.retry_failed and retryable(status, kind):
                continue
            done.add(line)
            tally.add(status, kind, attempts, elapsed_ms)
        run = _Run(options, journal, total, tally)
        if options.save_dir is not None:
            os.makedirs(options.save_dir, exist_ok=True)
        if backend is None:
            backend = LocalBackend(options, clock=clock)
        async with backend:
            interrupted = await _drive(
                run, backend, _pending(input_path, done), stop_event, started, on_progress
            )
            final = backend.statistics()
            reports = sorted((await backend.host_reports()).items(), key=lambda kv: -kv[1].requests)
        stats = final.engine
        journal.flush()
        previous_trips = int(journal.get_meta("breaker_trips") or 0)
        journal.set_meta("breaker_trips", str(previous_trips + stats.breaker_trips))
        complete = not interrupted and tally.done == total
        if complete:
            write_output(journal, options.output)
        summary = tally.summary(
            total=total,
            complete=complete,
            interrupted=interrupted,
            breaker_trips=previous_trips + stats.breaker_trips,
            elapsed_s=time.monotonic() - started,
            output=options.output,
            deferred=stats.deferred,
            host_pauses=stats.pauses,
            hosts={key: asdict(report) for key, report in reports[:_SUMMARY_HOSTS]},
            workers=final.workers,
        )
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
        journal.close()
    if summary.complete and spool is not None:
        with contextlib.suppress(OSError):
            os.unlink(spool)
    if options.summary_json is not None:
        with open(options.summary_json, "w", encoding="utf-8") as stream:
            stream.write(summary.to_json() + "\n")
    return summary


def _pending(path: str, done: set[int]) -> Iterator[FetchRequest | BadInput]:
    """The input's lines not yet done, streamed."""
    for item in read_requests(path):
        if item.line not in done:
            yield item


async def _drive(
    run: _Run,
    backend: FetchBackend,
    items: Iterator[FetchRequest | BadInput],
    stop: asyncio.Event,
    started: float,
    on_progress: Callable[[ProgressState], object] | None,
) -> bool:
    """Run the backend's fetch and the ticker until done or stopped; True when stopped early."""
    fetching = asyncio.ensure_future(backend.fetch(items, run.record))
    stopper = asyncio.ensure_future(stop.wait())
    with ProgressBar(enabled=run.options.progress) as bar:
        display = _Display(run, backend, bar, started, on_progress)
        ticker = asyncio.ensure_future(_tick(run, display))
        try:
            await asyncio.wait({fetching, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            interrupted = not fetching.done()
            for task in (fetching, stopper, ticker):
                task.cancel()
            await asyncio.gather(fetching, stopper, ticker, return_exceptions=True)
            display.draw()
    if not interrupted:
        fetching.result()  # re-raise a bug in the engine, or a backend's failure, if any
    return interrupted


async def _tick(run: _Run, display: _Display) -> None:
    while True:
        await asyncio.sleep(FLUSH_SECONDS)
        run.journal.flush()
        display.draw()


@dataclass(slots=True)
class _Display:
    """Shows the run's progress: the bar, and the ``on_progress`` callback."""

    run: _Run
    backend: FetchBackend
    bar: ProgressBar
    started: float
    on_progress: Callable[[ProgressState], object] | None

    def draw(self) -> None:
        """Show the current state (nothing to do without a bar or a callback)."""
        bar, on_progress, run = self.bar, self.on_progress, self.run
        if not bar.active and on_progress is None:
            return
        tally = run.tally
        hosts = self.backend.statistics().hosts
        state = ProgressState(
            done=tally.done,
            total=run.total,
            errors=tally.errors,
            retries=tally.retries,
            open_breakers=hosts.unavailable,
            healthy=hosts.healthy,
            paused=hosts.paused,
            paused_for=hosts.paused_until,
            unavailable=hosts.unavailable,
        )
        if on_progress is not None:
            on_progress(state)
        if bar.active:
            elapsed = max(1e-6, time.monotonic() - self.started)
            bar.update(state, run.fetched / elapsed)


def _spool_stdin(output: str) -> str:
    """Copy stdin to ``OUTPUT.stdin`` (atomically) and return that path."""
    path = output + ".stdin"
    tmp = path + ".tmp"
    with open(tmp, "wb") as stream:
        shutil.copyfileobj(sys.stdin.buffer, stream)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(tmp, path)
    return path
