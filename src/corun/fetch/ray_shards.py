"""``corun fetch --ray``: the run's hosts sharded over Ray actors; this process keeps the journal.

corun builds no cluster layer of its own: it runs on Ray, which users already
operate. The shape:

* **Shards by host.** A line goes to worker ``shard_of(host_key(url),
  workers)``, a stable hash (BLAKE2b, the same in every process, run and machine) of
  the key the engine's policies use (``host:port``). Every line of a host
  then meets the same ``FetchEngine``, so its adaptive limit, rate limit,
  Retry-After pauses, breaker, deferral and give-up stay right with no
  coordination.
* **Each worker is a Ray actor running a corun loop** (``FetchWorker``). In
  a thread of its own, the loop runs a ``FetchEngine``, the very engine of
  a run on one machine, fed by what the driver sends.
* **Only the driver journals.** Workers on other machines cannot write the
  driver's files, so they return finished records, and the driver hands
  them to ``run_fetch``'s journal. Crash safety is then one machine's: a
  SIGKILL of the driver loses at most the uncommitted batch and what was in
  flight, which the next run fetches again.
* **Backpressure, and no head-of-line blocking.** Each shard has at most
  ``window`` lines in flight or queued; one call is in flight per actor,
  and it brings back what finished. A line whose shard is full goes to that
  shard's backlog rather than stopping the reader, so a slow host slows its
  own shard only. Backlogs hold ``BACKLOG_MEMORY_LINES`` lines in memory
  and the rest in FIFO files on disk, so driver memory stays bounded for
  any input. The reader waits only when every shard is full.
* **Worker failure.** An actor that dies is restarted by Ray
  (``max_restarts``); the driver sends its unreturned lines again. A record
  is taken only for a line the driver has in flight on that shard, so a
  line is never recorded twice. A worker that dies more than
  ``max_restarts`` times fails the run with ``ClusterError``; the journal
  keeps every recorded line.

Rejected alternatives: a journal per worker, merged at the end (workers on
other machines cannot reach the driver's disk, and a merge is a second
source of truth); returning records per batch sent (one slow host's line
would hold back its whole batch, and with it the shard); Ray's async actors
(they run coroutines on Ray's own asyncio loop, not on corun's, and would
need a second engine).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import importlib
import logging
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, Final, Self

from corun.fetch.engine import EngineStatistics, FetchEngine, HostCounts, HostReport, OnRecord
from corun.fetch.input import BadInput, FetchRequest
from corun.fetch.options import FetchOptions
from corun.fetch.runner import NO_ENGINE_STATISTICS, NO_HOSTS, BackendStatistics
from corun.fetch.summary import WorkerSummary
from corun.http import Client, host_key
from corun.resilience import LoopClock
from corun.runtime.runner import new_event_loop

INSTALL_HINT: Final = "--ray needs Ray: pip install 'corun[ray]'"
#: Ray publishes wheels up to this Python (pyproject's ray extra installs
#: nothing on a newer one); ``--ray`` there says so rather than how to install.
RAY_BUILT: Final = sys.version_info < (3, 15)
NO_BUILD: Final = (
    f"--ray needs Ray, which has no build for Python "
    f"{sys.version_info.major}.{sys.version_info.minor}"
)
#: Records a worker gathers before it answers, at most (it answers sooner
#: when fewer are in flight, or when ``_LINGER`` has passed).
BATCH: Final = 256
#: Lines that the shards' backlogs hold in memory, together, before they
#: spill to disk (a few hundred bytes each).
BACKLOG_MEMORY_LINES: Final = 50_000
#: Seconds a worker waits for a full batch once it has a record.
_LINGER: Final = 0.1
#: Seconds a worker with lines in flight waits for the first record.
_PATIENCE: Final = 1.0
#: Seconds to connect to a cluster, and for the workers to start.
CONNECT_TIMEOUT: Final = 5.0
START_TIMEOUT: Final = 120.0
_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
#: A worker whose every call fails this many times in a row (0.1 s apart)
#: is dead for good.
_DEAD_AFTER: Final = 20
#: The reader yields to the loop this often, so that replies are journalled
#: while it spills a long run of lines for full shards.
_YIELD_EVERY: Final = 256


class ClusterError(Exception):
    """The cluster cannot be used, or a worker kept dying; the message is one line."""


def shard_of(host: str, workers: int) -> int:
    """The worker that serves ``host``: stable across processes, runs and machines.

    BLAKE2b, not ``hash()`` (salted per process) nor CRC-32 (linear: keys
    that differ in one digit, such as ports, fall into patterns).
    """
    digest = hashlib.blake2b(host.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % workers


def _host(item: FetchRequest | BadInput) -> str:
    if isinstance(item, BadInput):
        return ""
    if item.parsed is not None:
        return host_key(item.parsed)
    return item.url


#: An item as sent to a worker: the fields of a ``FetchRequest`` (6) or of a
#: ``BadInput`` (5), line first. A tuple pickles several times faster than a
#: slotted dataclass, and the parsed URL stays behind (the client parses it).
_Wire = tuple[Any, ...]


def _to_wire(item: FetchRequest | BadInput) -> _Wire:
    if isinstance(item, FetchRequest):
        return (item.line, item.id, item.url, item.method, item.headers, item.body)
    return (item.line, item.error, item.kind, item.id, item.url)


def _from_wire(wire: _Wire) -> FetchRequest | BadInput:
    return FetchRequest(*wire) if len(wire) == 6 else BadInput(*wire)


def _import_ray() -> Any:
    # Typed as Any: Ray is an optional extra, and mypy must pass without it.
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ClusterError(INSTALL_HINT if RAY_BUILT else NO_BUILD) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


# --------------------------------------------------------------------------- the worker


@dataclass(frozen=True, slots=True)
class WorkerReply:
    """What a worker returns for one ``exchange`` call.

    Attributes:
        records: ``(line, record)`` of every line finished since the last call.
        pid: the worker's process id (it changes when Ray restarts it).
        statistics: its engine's counters since the worker (re)started.
        hosts: how its hosts are doing now.
    """

    records: list[tuple[int, dict[str, Any]]]
    pid: int
    statistics: EngineStatistics
    hosts: HostCounts


class FetchWorker:
    """The body of one Ray actor: a corun loop, in a thread of its own, running a ``FetchEngine``.

    Ray calls its methods on another thread, one at a time; they talk to the
    loop only through ``call_soon_threadsafe`` and the ``_ready`` condition.

    Args:
        options: the run's options; its ``concurrency`` is this worker's.
    """

    def __init__(self, options: FetchOptions) -> None:
        self._options = options
        self._ready = threading.Condition()
        # Invariant (under _ready): _outbox holds the records finished and not
        # yet returned; _pending counts lines received and not yet returned,
        # so len(_outbox) <= _pending.
        self._outbox: list[tuple[int, dict[str, Any]]] = []
        self._pending = 0
        self._failure: BaseException | None = None
        self._loop = new_event_loop()
        self._queue: asyncio.Queue[FetchRequest | BadInput] | None = None
        self._engine: FetchEngine | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="corun-fetch-worker", daemon=True)
        self._thread.start()
        if not self._started.wait(60):
            raise RuntimeError("the worker's loop did not start")

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported by the next exchange
            with self._ready:
                self._failure = exc
                self._ready.notify_all()
            self._started.set()

    async def _serve(self) -> None:
        self._queue = asyncio.Queue()
        clock = LoopClock(asyncio.get_running_loop())
        async with Client(self._options.client_options(), clock=clock) as client:
            self._engine = FetchEngine(self._options, client, self._record, clock=clock)
            self._started.set()
            await self._engine.run(self._incoming())

    async def _incoming(self) -> AsyncIterator[FetchRequest | BadInput]:
        assert self._queue is not None
        while True:  # the actor lives until the driver kills it
            yield await self._queue.get()

    def _enqueue(self, items: list[_Wire]) -> None:
        assert self._queue is not None
        for wire in items:
            self._queue.put_nowait(_from_wire(wire))

    def _record(self, line: int, record: dict[str, Any]) -> None:
        with self._ready:
            self._outbox.append((line, record))
            self._ready.notify()

    def _has_batch(self, want: int) -> bool:
        return len(self._outbox) >= want or self._failure is not None

    def _has_any(self) -> bool:
        return bool(self._outbox) or self._failure is not None

    def ready(self) -> int:
        """The worker's pid, once its loop runs."""
        return os.getpid()

    def exchange(self, items: list[_Wire]) -> WorkerReply:
        """Take ``items`` to fetch, and return the records finished so far.

        Waits up to ``_LINGER`` s for a batch (``BATCH`` records, or every
        line in flight), and otherwise up to ``_PATIENCE`` s for the first
        record; returns at once when nothing is in flight.

        Raises:
            RuntimeError: the worker's engine failed (a bug).
        """
        with self._ready:
            self._pending += len(items)
        if items:
            self._loop.call_soon_threadsafe(self._enqueue, items)
        with self._ready:
            if self._pending:
                want = min(BATCH, self._pending)
                if not self._ready.wait_for(lambda: self._has_batch(want), _LINGER):
                    self._ready.wait_for(self._has_any, _PATIENCE)
            if self._failure is not None:
                raise RuntimeError(f"the worker's engine failed: {self._failure!r}")
            records, self._outbox = self._outbox, []
            self._pending -= len(records)
        statistics, hosts = asyncio.run_coroutine_threadsafe(self._statistics(), self._loop).result(
            _PATIENCE * 10
        )
        return WorkerReply(records, os.getpid(), statistics, hosts)

    async def _statistics(self) -> tuple[EngineStatistics, HostCounts]:
        engine = self._engine
        assert engine is not None
        return engine.statistics(), engine.hosts()

    def host_reports(self) -> dict[str, HostReport]:
        """Every host of this worker's engine: its limit, pauses and requests."""
        return asyncio.run_coroutine_threadsafe(self._host_reports(), self._loop).result(
            _PATIENCE * 10
        )

    async def _host_reports(self) -> dict[str, HostReport]:
        assert self._engine is not None
        return self._engine.host_reports()


# --------------------------------------------------------------------------- the driver


class _Budget:
    """Lines that the backlogs of a run may still hold in memory."""

    def __init__(self, lines: int) -> None:
        self.left = lines


class _Backlog:
    """A shard's lines that do not fit its window, in order: in memory while the run's
    ``_Budget`` lasts, then in a file on disk.

    The file is unnamed, next to the output, so a killed driver leaves nothing
    behind; emptied, it is truncated.
    """

    def __init__(self, directory: str, budget: _Budget) -> None:
        self._directory = directory
        self._budget = budget
        # Invariant: every line in _memory is older than every line on disk,
        # which are pickled back to back in [_read, _write) of _file.
        self._memory: collections.deque[_Wire] = collections.deque()
        self._file: IO[bytes] | None = None
        self._read = self._write = 0
        self._on_disk = 0

    def __len__(self) -> int:
        return len(self._memory) + self._on_disk

    def push(self, wire: _Wire) -> None:
        if not self._on_disk and self._budget.left > 0:
            self._memory.append(wire)
            self._budget.left -= 1
            return
        if self._file is None:
            # Closed by close(), when the run ends.
            self._file = tempfile.TemporaryFile(dir=self._directory)  # noqa: SIM115
        self._file.seek(self._write)
        pickle.dump(wire, self._file, protocol=pickle.HIGHEST_PROTOCOL)
        self._write = self._file.tell()
        self._on_disk += 1

    def pop(self, most: int) -> list[_Wire]:
        """Up to ``most`` lines, oldest first."""
        memory = self._memory
        taken = [memory.popleft() for _ in range(min(most, len(memory)))]
        self._budget.left += len(taken)
        most -= len(taken)
        if most <= 0 or not self._on_disk or self._file is None:
            return taken
        self._file.seek(self._read)
        for _ in range(min(most, self._on_disk)):
            taken.append(pickle.load(self._file))
            self._on_disk -= 1
        self._read = self._file.tell()
        if not self._on_disk:
            self._file.truncate(0)
            self._read = self._write = 0
        return taken

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class _Shard:
    """The driver's side of one worker: its lines in flight, queued and backlogged, and counts."""

    def __init__(self, index: int, actor: Any, window: int, backlog: _Backlog) -> None:
        self.index = index
        self.actor = actor
        self.window = window
        # Invariant: a line is in at most one of inflight (sent, not returned),
        # queued (next to send) and backlog (beyond the window), and
        # len(inflight) + len(queued) <= window.
        self.inflight: dict[int, _Wire] = {}
        self.queued: collections.deque[_Wire] = collections.deque()
        self.backlog = backlog
        self.wake = asyncio.Event()
        self.hosts: set[str] = set()
        self.lines = self.requests = self.deaths = 0
        self.pid = 0
        # The engine counters of earlier incarnations, and of this one (a
        # restarted worker counts from zero).
        self.before = self.current = NO_ENGINE_STATISTICS
        self.hosts_now = NO_HOSTS

    def room(self) -> int:
        return self.window - len(self.inflight) - len(self.queued)

    def saturated(self) -> bool:
        return len(self.backlog) > 0 or self.room() <= 0

    def take(self) -> list[_Wire]:
        """The next lines to send (the backlog moves up first, in order), now in flight."""
        if self.backlog:
            self.queued.extend(self.backlog.pop(self.room()))
        batch = [self.queued.popleft() for _ in range(min(BATCH, len(self.queued)))]
        for wire in batch:
            self.inflight[wire[0]] = wire
        return batch

    def requeue(self) -> None:
        """A call failed: what the worker had in flight goes out again, first."""
        self.queued.extendleft(reversed(list(self.inflight.values())))
        self.inflight.clear()

    def restarted(self, pid: int) -> None:
        """Ray restarted the worker (as process ``pid``): it counts from zero again."""
        self.deaths += 1
        self.pid = pid
        self.before = _add(self.before, self.current)
        self.current = NO_ENGINE_STATISTICS
        self.hosts_now = NO_HOSTS


class RayBackend:
    """A ``FetchBackend`` that shards the run's hosts over Ray actors (``corun fetch --ray``).

    Entering it connects to Ray (or starts a local Ray with this machine's
    cores), and starts the workers; leaving it stops them (and the local
    Ray). In a process already connected to Ray (``ray.init``), it uses that
    connection and leaves it open.

    Args:
        options: the run's options; each worker gets ``options.concurrency``.
        address: a cluster to join (``auto``, ``HOST:PORT``, ``ray://...``);
            None: start a local Ray, or use the open connection.
        workers: how many workers; None: one per CPU that Ray reports, on
            each node.
        max_restarts: a worker that dies more often fails the run.
        window: lines in flight or queued per worker, in memory (default
            ``4 * options.concurrency``, at least ``BATCH``).
        backlog_memory: lines the backlogs hold in memory before they
            spill to disk.

    Raises (on entering):
        ClusterError: Ray is not installed, the cluster cannot be reached, or
            the workers do not start.
    """

    def __init__(
        self,
        options: FetchOptions,
        *,
        address: str | None = None,
        workers: int | None = None,
        max_restarts: int = 3,
        window: int | None = None,
        backlog_memory: int = BACKLOG_MEMORY_LINES,
    ) -> None:
        if workers is not None and not 1 <= workers <= 10_000:
            raise ValueError(f"workers must be in [1, 10000], got {workers}")
        self._options = options
        self._address = address
        self._workers = workers
        self._max_restarts = max_restarts
        self._window = window if window is not None else max(BATCH, 4 * options.concurrency)
        self._backlog_memory = backlog_memory
        self._ray: Any = None
        self._owns_connection = False
        self._shards: list[_Shard] = []
        self._reading = False
        self._room = asyncio.Event()
        self._started = time.monotonic()

    # ------------------------------------------------------------------ lifetime

    async def __aenter__(self) -> Self:
        if self._address is None and "ray" not in sys.modules:
            # A Ray started for this run alone listens on loopback only (read
            # when ray is imported; the workers inherit it).
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        # Off the loop's thread: importing Ray takes 0.1 to 0.5 s, and starting
        # or reaching a cluster seconds, which would stall the loop (and be
        # reported as a stall, with corun.observe on). Ray sets its signal
        # handlers from the main thread only; its C++ failure handler is put
        # back here, on the main thread, by _KeepSignals.
        with _KeepSignals():
            self._ray = ray = await asyncio.to_thread(self._import_and_connect)
        try:
            actors = self._start_workers(ray)
            directory = os.path.dirname(os.path.abspath(self._options.output))
            budget = _Budget(self._backlog_memory)
            self._shards = [
                _Shard(index, actor, self._window, _Backlog(directory, budget))
                for index, actor in enumerate(actors)
            ]
            await self._wait_ready()
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ray = self._ray
        for shard in self._shards:
            shard.backlog.close()
            try:
                ray.kill(shard.actor, no_restart=True)
            except Exception:  # already gone with its node: nothing to stop
                pass
        if self._owns_connection:
            ray.shutdown()
            self._owns_connection = False

    def _import_and_connect(self) -> Any:
        ray = _import_ray()
        self._connect(ray)
        return ray

    def _connect(self, ray: Any) -> None:
        if ray.is_initialized():
            return
        quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
        try:
            if self._address is None:
                ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, **quiet)
            else:
                _probe(self._address)
                ray.init(address=self._address, **quiet)
        except ClusterError:
            raise
        except Exception as exc:
            where = "start a local Ray" if self._address is None else f"reach {self._address}"
            raise ClusterError(f"cannot {where}: {_first_line(exc)}") from None
        self._owns_connection = True

    def _start_workers(self, ray: Any) -> list[Any]:
        """One actor per CPU of each alive node, or ``workers`` spread over the nodes."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        cpus = {
            node["NodeID"]: int(node["Resources"].get("CPU", 0))
            for node in ray.nodes()
            if node.get("Alive")
        }
        total = sum(cpus.values())
        if total < 1:
            raise ClusterError("the Ray cluster reports no CPU to run workers on")
        remote = ray.remote(FetchWorker)
        common: dict[str, Any] = {"max_restarts": self._max_restarts, "max_task_retries": 0}
        if self._workers is None:
            return [
                remote.options(
                    num_cpus=1,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
                    **common,
                ).remote(self._options)
                for node, count in cpus.items()
                for _ in range(count)
            ]
        # More workers than CPUs share them, rather than wait for CPUs that never free.
        share = min(1.0, total / self._workers)
        return [
            remote.options(num_cpus=share, scheduling_strategy="SPREAD", **common).remote(
                self._options
            )
            for _ in range(self._workers)
        ]

    async def _wait_ready(self) -> None:
        calls = [_result(shard.actor.ready.remote()) for shard in self._shards]
        try:
            pids = await asyncio.wait_for(asyncio.gather(*calls), START_TIMEOUT)
        except TimeoutError:
            raise ClusterError(
                f"{len(self._shards)} workers did not start within {START_TIMEOUT:g} s "
                "(are the cluster's CPUs busy?)"
            ) from None
        except Exception as exc:
            raise ClusterError(f"the workers failed to start: {_first_line(exc)}") from None
        for shard, pid in zip(self._shards, pids, strict=True):
            shard.pid = pid

    def actor(self, index: int) -> Any:
        """The Ray actor handle of worker ``index`` (tests kill it)."""
        return self._shards[index].actor

    # ------------------------------------------------------------------ fetching

    async def fetch(self, items: Iterable[FetchRequest | BadInput], record: OnRecord) -> None:
        """Send each item to its host's worker; record what comes back (see the module doc)."""
        self._started = time.monotonic()
        self._reading = True
        tasks = [asyncio.ensure_future(self._serve(shard, record)) for shard in self._shards]
        reader = asyncio.ensure_future(self._distribute(items))
        everything = asyncio.gather(reader, *tasks)
        try:
            await everything
        finally:
            if not everything.done():
                everything.cancel()
                await asyncio.gather(everything, return_exceptions=True)

    async def _distribute(self, items: Iterable[FetchRequest | BadInput]) -> None:
        shards = self._shards
        count = len(shards)
        seen = 0
        try:
            for item in items:
                host = _host(item)
                shard = shards[shard_of(host, count)]
                if host:  # bad input has none
                    shard.hosts.add(host)
                if shard.saturated():
                    shard.backlog.push(_to_wire(item))
                    while all(other.saturated() for other in shards):
                        self._room.clear()
                        await self._room.wait()
                else:
                    shard.queued.append(_to_wire(item))
                shard.wake.set()
                seen += 1
                if seen % _YIELD_EVERY == 0:
                    await asyncio.sleep(0)
        finally:
            self._reading = False
            for shard in shards:
                shard.wake.set()

    async def _serve(self, shard: _Shard, record: OnRecord) -> None:
        """Keep ``shard``'s worker fed, and record what it returns, until all is done."""
        actor_died = self._ray.exceptions.RayActorError
        while True:
            batch = shard.take()
            if not shard.inflight:
                if not self._reading and not shard.queued and not shard.backlog:
                    return
                shard.wake.clear()
                await shard.wake.wait()
                continue
            try:
                reply: WorkerReply = await _result(shard.actor.exchange.remote(batch))
            except actor_died as exc:
                shard.requeue()
                await self._recover(shard, exc)
                continue
            for line, result in reply.records:
                # Only a line in flight here: a record is never taken twice.
                if shard.inflight.pop(line, None) is not None:
                    record(line, result)
                    shard.lines += 1
                    shard.requests += result["attempts"]
            if shard.pid and reply.pid != shard.pid:
                # Killed and restarted between two calls, when none was in
                # flight to fail: nothing to send again, but a restart all the same.
                shard.restarted(reply.pid)
            shard.pid = reply.pid
            shard.current, shard.hosts_now = reply.statistics, reply.hosts
            self._room.set()

    async def _recover(self, shard: _Shard, exc: BaseException) -> None:
        """After a failed call, wait until the worker answers again (restarted, or back).

        A worker that answers with a new pid died and was restarted. Ray
        restarts one ``max_restarts`` times; a death after that, or a worker
        that keeps failing every call, fails the run.

        Raises:
            ClusterError: the worker is dead for good, or did not come back
                within ``START_TIMEOUT``.
        """
        died = self._ray.exceptions.ActorDiedError
        if isinstance(exc, died) and shard.deaths >= self._max_restarts:
            raise _kept_dying(shard, exc)
        deadline = time.monotonic() + START_TIMEOUT
        refused = 0
        while True:
            try:
                pid = await asyncio.wait_for(
                    _result(shard.actor.ready.remote()), deadline - time.monotonic()
                )
            except TimeoutError:
                raise _lost(shard, f"did not come back within {START_TIMEOUT:g} s") from None
            except self._ray.exceptions.RayActorError as again:
                # A call that raced with the death fails too, and so does one
                # while the worker is unreachable; a dead worker fails them all.
                refused = refused + 1 if isinstance(again, died) else 0
                if refused >= _DEAD_AFTER:
                    raise _kept_dying(shard, again) from None
                if time.monotonic() >= deadline:
                    raise _lost(shard, f"did not come back within {START_TIMEOUT:g} s") from None
                await asyncio.sleep(0.1)
                continue
            if pid != shard.pid:
                shard.restarted(pid)
            return

    def statistics(self) -> BackendStatistics:
        elapsed = max(1e-6, time.monotonic() - self._started)
        workers = tuple(
            WorkerSummary(
                id=shard.index,
                hosts=len(shard.hosts),
                lines=shard.lines,
                requests_per_s=round(shard.requests / elapsed, 1),
                restarts=shard.deaths,
            )
            for shard in self._shards
        )
        engine = NO_ENGINE_STATISTICS
        hosts = NO_HOSTS
        for shard in self._shards:
            engine = _add(_add(engine, shard.before), shard.current)
            hosts = _add_hosts(hosts, shard.hosts_now)
        return BackendStatistics(engine=engine, hosts=hosts, workers=workers)

    async def host_reports(self) -> dict[str, HostReport]:
        """Every worker's hosts (disjoint: a host has one shard); a worker that
        died, or does not answer in time, reports none."""
        replies = await asyncio.gather(
            *(
                asyncio.wait_for(_result(shard.actor.host_reports.remote()), _PATIENCE * 10)
                for shard in self._shards
            ),
            return_exceptions=True,
        )
        reports: dict[str, HostReport] = {}
        for reply in replies:
            if isinstance(reply, dict):
                reports.update(reply)
        return reports


def _add(one: EngineStatistics, other: EngineStatistics) -> EngineStatistics:
    return EngineStatistics(
        attempts=one.attempts + other.attempts,
        deferred=one.deferred + other.deferred,
        pauses=one.pauses + other.pauses,
        breaker_trips=one.breaker_trips + other.breaker_trips,
        given_up=one.given_up + other.given_up,
    )


def _add_hosts(one: HostCounts, other: HostCounts) -> HostCounts:
    until = [x for x in (one.paused_until, other.paused_until) if x is not None]
    return HostCounts(
        healthy=one.healthy + other.healthy,
        paused=one.paused + other.paused,
        paused_until=max(until) if until else None,
        unavailable=one.unavailable + other.unavailable,
    )


class _KeepSignals:
    """Puts SIGINT's and SIGTERM's handlers back as they were (``run_fetch``'s graceful stop).

    ``ray.init`` sets its own: a Python SIGTERM handler that exits 15, and
    Ray's C++ failure handler, which dumps a stack. Either would end the run
    without committing the journal's pending batch.
    """

    def __enter__(self) -> None:
        self._main = threading.current_thread() is threading.main_thread()
        self._saved = {signum: signal.getsignal(signum) for signum in _SIGNALS}

    def __exit__(self, *exc_info: object) -> None:
        if not self._main:
            return  # only the main thread sets handlers (and Ray sets none from others)
        for signum, handler in self._saved.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _kept_dying(shard: _Shard, exc: BaseException) -> ClusterError:
    return _lost(
        shard,
        f"kept dying: Ray restarted it {shard.deaths} times and it died again ({_first_line(exc)})",
    )


def _lost(shard: _Shard, what: str) -> ClusterError:
    return ClusterError(
        f"worker {shard.index} {what}; the journal keeps every recorded line, re-run to resume"
    )


async def _result(ref: Any) -> Any:
    """Await a Ray object ref on the running (corun) loop."""
    return await asyncio.wrap_future(ref.future())


def _probe(address: str) -> None:
    """Fail fast, with one line, when nothing answers at ``address``.

    Ray's own connect retries for minutes against a closed port, and never
    returns against a port that is not Ray's; a TCP connect and a gRPC
    handshake (Ray's GCS and client server both speak gRPC) are bounded.
    """
    if address == "auto":
        return
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise ClusterError(
            f"bad Ray address {address!r}: expected auto, HOST:PORT or ray://HOST:PORT"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT).close()
    except OSError as exc:
        raise ClusterError(f"cannot reach the Ray cluster at {address}: {exc}") from None
    if os.environ.get("RAY_USE_TLS", "0") not in ("", "0"):
        return  # a TLS cluster needs its certificates; Ray's own connect checks it
    grpc = importlib.import_module("grpc")
    channel = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT)
    except grpc.FutureTimeoutError:
        raise ClusterError(f"no Ray cluster answers at {address}") from None
    finally:
        channel.close()


# --------------------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]`` and ``--workers N`` on ``corun fetch``."""
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="shard hosts over Ray workers: a local Ray with this machine's cores, or join "
        "ADDRESS (auto, HOST:PORT, ray://HOST:PORT); needs pip install 'corun[ray]'",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="with --ray: N workers (default: one per CPU Ray reports, per node)",
    )


def backend_from_args(args: argparse.Namespace, options: FetchOptions) -> RayBackend | None:
    """The ``RayBackend`` that ``--ray`` asks for, or None without ``--ray``.

    Raises:
        ValueError: ``--workers`` without ``--ray``, or out of range.
    """
    if args.ray is None:
        if args.workers is not None:
            raise ValueError("--workers needs --ray")
        return None
    return RayBackend(options, address=args.ray or None, workers=args.workers)


__all__ = [
    "INSTALL_HINT",
    "NO_BUILD",
    "RAY_BUILT",
    "ClusterError",
    "FetchWorker",
    "RayBackend",
    "WorkerReply",
    "add_arguments",
    "backend_from_args",
    "shard_of",
]
