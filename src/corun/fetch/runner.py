"""``run_fetch``: the batch fetcher behind ``corun fetch``.

Shape: one producer reads the input (streaming) into a bounded queue, and a
fixed pool of ``concurrency`` workers takes requests from it, so memory
stays bounded whatever the input's length. That engine is
``fetch_stream``; a ``FetchBackend`` runs it here (``LocalBackend``) or
on Ray actors, one per shard of hosts (``ray_shards``), while this
process alone keeps the journal. Every finished line (a response,
an error, or bad input) goes to the journal (``journal.py``), which commits
in small batches; a ticker commits and redraws the progress bar a few
times a second. When every input line is in the journal, the output is
written from it atomically (``output.py``).

Stopping: SIGINT and SIGTERM (with ``handle_signals``), or the ``stop``
event, cancel the workers; what finished is committed, what was in flight
is fetched again by the next run. A SIGKILL loses at most the batch not yet
committed, which is likewise fetched again. Re-running the same command
skips every line the journal holds.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Protocol, Self

from corun.fetch.input import BadInput, FetchRequest, count_lines, read_requests
from corun.fetch.journal import FLUSH_SECONDS, Journal, fingerprint, journal_path
from corun.fetch.output import output_record, write_output
from corun.fetch.progress import ProgressBar, ProgressState
from corun.fetch.summary import Summary, WorkerSummary, summarize
from corun.http import Client, ClientOptions, HttpError
from corun.resilience import (
    BreakerOptions,
    Clock,
    RateLimiterOptions,
    RetryOptions,
    _validate,
)

DEFAULT_USER_AGENT: Final = "corun-fetch/0.1 (+https://github.com/corun)"
#: Requests per second to one host by default: with ``per_host`` 4 in flight,
#: a server sees a steady trickle, not a burst it must absorb.
DEFAULT_RATE: Final = 10.0
_STOP: Final = None
#: The fetcher's timeouts and body cap default to the client's own.
_CLIENT_DEFAULTS: Final = ClientOptions()


@dataclass(frozen=True, slots=True)
class FetchOptions:
    """Options of a fetch run; the defaults suit a polite crawler.

    Attributes:
        input: the input file, or ``"-"`` for stdin (copied to
            ``OUT.stdin`` first, so that a re-run can resume).
        output: the output JSONL path; the journal is ``OUTPUT.journal``.
        concurrency: requests in flight at most, in [1, 10000].
        per_host: requests in flight to one host at most, in [1, 10000].
        rate: requests per second to one host at most (default
            ``DEFAULT_RATE``, a polite crawler's pace); None: no limit.
        retries: retries after the first attempt, in [0, 20].
        connect_timeout, read_timeout, total_timeout: seconds (total
            covers retries and backoff).
        breaker_failure_rate: a host's breaker opens at this failure rate.
        breaker_min_calls: ... once it has seen this many calls in the window.
        save_dir: write bodies to ``DIR/<line>.body`` instead of the output.
        summary_json: also write the summary as JSON here.
        progress: draw the progress bar (on a terminal only).
        max_body_bytes: the body cap.
        user_agent: the ``User-Agent`` header.
        client: full ``ClientOptions`` to use instead of the ones built from
            the fields above (tests use it for a private CA).
    """

    input: str
    output: str
    concurrency: int = 32
    per_host: int = 4
    rate: float | None = DEFAULT_RATE
    retries: int = 3
    connect_timeout: float = _CLIENT_DEFAULTS.connect_timeout
    read_timeout: float = _CLIENT_DEFAULTS.read_timeout
    total_timeout: float = _CLIENT_DEFAULTS.total_timeout
    breaker_failure_rate: float = 0.5
    breaker_min_calls: int = 20
    save_dir: str | None = None
    summary_json: str | None = None
    progress: bool = True
    max_body_bytes: int = _CLIENT_DEFAULTS.max_body_bytes
    user_agent: str = DEFAULT_USER_AGENT
    client: ClientOptions | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        owner = "FetchOptions"
        _validate.count(owner, "concurrency", self.concurrency, high=10_000)
        _validate.count(owner, "per_host", self.per_host, high=10_000)
        _validate.count(owner, "retries", self.retries, low=0, high=20)
        if self.rate is not None:
            _validate.number(owner, "rate", self.rate, low=0.001, high=1_000_000.0)
        self.client_options()  # validates the rest

    def client_options(self) -> ClientOptions:
        """The ``ClientOptions`` the run uses."""
        if self.client is not None:
            return self.client
        return ClientOptions(
            limit=max(self.concurrency, 1),
            limit_per_host=self.per_host,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            total_timeout=self.total_timeout,
            max_body_bytes=self.max_body_bytes,
            retry=RetryOptions(max_attempts=self.retries + 1, initial_delay=0.25, max_delay=10.0)
            if self.retries
            else None,
            breaker=BreakerOptions(
                failure_rate=self.breaker_failure_rate,
                minimum_calls=self.breaker_min_calls,
                consecutive_failures=None,
                open_duration=30.0,
            ),
            per_host_concurrency=self.per_host,
            rate=RateLimiterOptions(per_key_rate=self.rate, max_wait=3600.0)
            if self.rate is not None
            else None,
            user_agent=self.user_agent,
        )


class _Run:
    """The mutable state of one ``run_fetch`` call."""

    def __init__(self, options: FetchOptions, journal: Journal, total: int, done: int) -> None:
        self.options = options
        self.journal = journal
        self.total = total
        # Invariant: done, errors and retries count over the lines recorded in
        # the journal (committed or pending, earlier runs included), exactly as
        # the summary does: retries are attempts beyond the first, so a retry
        # that a policy refused (an open breaker) is not one.
        self.done = done
        self.errors, self.retries = journal.error_and_retry_counts()
        self.fetched = 0

    def record(self, line: int, record: dict[str, Any]) -> None:
        self.done += 1
        self.fetched += 1
        if record["error"] is not None:
            self.errors += 1
        attempts = record["attempts"]
        if attempts > 1:
            self.retries += attempts - 1
        if self.journal.record(line, record):
            self.journal.flush()


#: Receives each finished line: ``record(line, record)``.
RecordSink = Callable[[int, dict[str, Any]], object]


@dataclass(frozen=True, slots=True)
class BackendStatistics:
    """What a ``FetchBackend`` reports while it runs.

    Attributes:
        breaker_trips: breaker openings in this run.
        open_breakers: hosts whose breaker is open or half-open now.
        workers: one entry per worker when the requests are spread over
            workers (Ray); None on one machine.
    """

    breaker_trips: int
    open_breakers: int
    workers: tuple[WorkerSummary, ...] | None = None


class FetchBackend(Protocol):
    """Where a run's requests are made: here (``LocalBackend``) or on Ray actors
    (``corun.fetch.ray_shards.RayBackend``).

    Contract: ``run_fetch`` enters the backend (``async with``) once, calls
    ``fetch`` once inside it, and may call ``statistics`` at any time while
    inside. ``fetch`` takes every item of ``items`` and calls ``record(line,
    record)`` exactly once for each, on the calling loop's thread, with the
    record ``fetch_stream`` makes for it; it returns when every item is
    recorded, and raises only when the run cannot go on (the journal keeps
    what was recorded). Cancelled, it stops promptly: lines in flight are
    not recorded, so the next run fetches them again.
    """

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def fetch(
        self, items: AsyncIterator[FetchRequest | BadInput], record: RecordSink
    ) -> None: ...

    def statistics(self) -> BackendStatistics: ...


class LocalBackend:
    """The requests are made in this process, by one ``Client``."""

    def __init__(self, options: FetchOptions, *, clock: Clock | None = None) -> None:
        self._client = Client(options.client_options(), clock=clock)
        self._options = options

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

    async def fetch(
        self, items: AsyncIterator[FetchRequest | BadInput], record: RecordSink
    ) -> None:
        await fetch_stream(self._options, self._client, items, record)

    def statistics(self) -> BackendStatistics:
        stats = self._client.statistics()
        return BackendStatistics(stats.breaker_trips, stats.open_breakers)


async def fetch_stream(
    options: FetchOptions,
    client: Client,
    items: AsyncIterator[FetchRequest | BadInput],
    record: RecordSink,
) -> None:
    """The fetch engine: every item of ``items`` through ``client``, each record to ``record``.

    ``options.concurrency`` workers take items from a bounded queue, so
    memory stays bounded however long ``items`` is. A line never raises: a
    failed request, bad input or a bug becomes the line's record. Returns
    when ``items`` is exhausted and every item is recorded. Both
    ``run_fetch`` (through ``LocalBackend``) and each Ray actor
    (``ray_shards``) run it, so one machine and a cluster fetch alike.
    """
    queue: asyncio.Queue[FetchRequest | BadInput | None] = asyncio.Queue(
        maxsize=options.concurrency * 4
    )
    producer = asyncio.ensure_future(_produce(queue, items, options.concurrency))
    workers = [
        asyncio.ensure_future(_work(options, client, queue, record))
        for _ in range(options.concurrency)
    ]
    everything = asyncio.gather(producer, *workers)
    try:
        await everything
    finally:
        if not everything.done():
            everything.cancel()
            await asyncio.gather(everything, return_exceptions=True)


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
        clock: the clock for the client's policies.
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
    input_path = options.input
    spool: str | None = None
    if input_path == "-":
        spool = input_path = _spool_stdin(options.output)
    total = count_lines(input_path)
    journal = Journal(journal_path(options.output), fingerprint(input_path), total)
    stop_event = stop if stop is not None else asyncio.Event()
    signals: list[signal.Signals] = []
    interrupted = False
    trips = 0
    workers: tuple[WorkerSummary, ...] | None = None
    try:
        if handle_signals:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop_event.set)
                signals.append(signum)
        done = journal.done_lines()
        run = _Run(options, journal, total, len(done))
        if options.save_dir is not None:
            os.makedirs(options.save_dir, exist_ok=True)
        if backend is None:
            backend = LocalBackend(options, clock=clock)
        async with backend:
            try:
                interrupted = await _drive(
                    run, backend, input_path, done, stop_event, started, on_progress
                )
            finally:
                stats = backend.statistics()
                trips, workers = stats.breaker_trips, stats.workers
        journal.flush()
        previous_trips = int(journal.get_meta("breaker_trips") or 0)
        journal.set_meta("breaker_trips", str(previous_trips + trips))
        complete = not interrupted and journal.done_count() == total
        if complete:
            write_output(journal, options.output)
        summary = summarize(
            (record for _line, record in journal.records()),
            total=total,
            complete=complete,
            interrupted=interrupted,
            breaker_trips=previous_trips + trips,
            elapsed_s=time.monotonic() - started,
            output=options.output,
            workers=workers,
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


async def _drive(
    run: _Run,
    backend: FetchBackend,
    input_path: str,
    done: set[int],
    stop: asyncio.Event,
    started: float,
    on_progress: Callable[[ProgressState], object] | None,
) -> bool:
    """Run the backend's fetch and the ticker; True when stopped early."""
    options = run.options
    fetching = asyncio.ensure_future(
        backend.fetch(_pending(read_requests(input_path), done), run.record)
    )
    stopper = asyncio.ensure_future(stop.wait())
    waiters: set[asyncio.Future[Any]] = {fetching, stopper}
    with ProgressBar(enabled=options.progress) as bar:
        display = _Display(run, backend, bar, started, on_progress)
        ticker = asyncio.ensure_future(_tick(run, display))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            interrupted = not fetching.done()
            for task in (fetching, stopper, ticker):
                task.cancel()
            await asyncio.gather(fetching, stopper, ticker, return_exceptions=True)
            display.draw()
    if not interrupted:
        fetching.result()  # re-raise a bug, or a backend's failure, if any
    return interrupted


async def _pending(
    items: Iterable[FetchRequest | BadInput], done: set[int]
) -> AsyncIterator[FetchRequest | BadInput]:
    """The items whose line is not recorded yet."""
    for item in items:
        if item.line not in done:
            yield item


async def _produce(
    queue: asyncio.Queue[FetchRequest | BadInput | None],
    items: AsyncIterator[FetchRequest | BadInput],
    workers: int,
) -> None:
    async for item in items:
        await queue.put(item)
    for _ in range(workers):
        await queue.put(_STOP)


async def _work(
    options: FetchOptions,
    client: Client,
    queue: asyncio.Queue[FetchRequest | BadInput | None],
    record: RecordSink,
) -> None:
    while True:
        item = await queue.get()
        if item is None:
            return
        if isinstance(item, BadInput):
            result = output_record(item, error=item.error, kind=item.kind)
        else:
            result = await _fetch(options, client, item)
        record(item.line, result)


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
        state = ProgressState(
            done=run.done,
            total=run.total,
            errors=run.errors,
            retries=run.retries,
            open_breakers=self.backend.statistics().open_breakers,
        )
        if on_progress is not None:
            on_progress(state)
        if bar.active:
            elapsed = max(1e-6, time.monotonic() - self.started)
            bar.update(state, run.fetched / elapsed)


async def _fetch(options: FetchOptions, client: Client, item: FetchRequest) -> dict[str, Any]:
    started = time.monotonic()
    try:
        response = await client.request(
            item.method,
            item.parsed if item.parsed is not None else item.url,
            headers=item.headers or None,
            body=item.body,
        )
    except HttpError as exc:
        record = output_record(item, error=str(exc), kind=exc.kind, attempts=exc.attempts)
    except Exception as exc:  # a bug must not lose the line: it becomes its error
        record = output_record(item, error=f"internal error: {exc!r}", kind="internal")
    else:
        record = output_record(item, status=response.status, attempts=response.attempts)
        record["final_url"] = response.url
        record["content_type"] = response.headers.get("Content-Type")
        body = response.body
        if options.save_dir is not None:
            record["body_path"] = _save_body(options.save_dir, item.line, body)
        else:
            try:
                record["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                record["body"] = base64.b64encode(body).decode("ascii")
                record["body_base64"] = True
    record["elapsed_ms"] = round((time.monotonic() - started) * 1000.0, 3)
    return record


def _save_body(directory: str, line: int, body: bytes) -> str:
    path = os.path.join(directory, f"{line}.body")
    tmp = path + ".tmp"
    with open(tmp, "wb") as stream:
        stream.write(body)
    os.replace(tmp, path)
    return path


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
