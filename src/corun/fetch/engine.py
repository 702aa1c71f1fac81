"""``FetchEngine``: runs input lines inside a running loop, with every per-host policy.

The engine is what ``run_fetch`` (one machine) and a sharded run (one engine
per worker) share: give it the lines, and it hands each finished record to
a callback. It owns no journal, no output and no progress bar.

Shape. Lines wait in a queue per host. A fixed pool of ``concurrency``
workers takes the next line that may start now, round-robin over the hosts
that have one, sends it (one ``Client.request``: one attempt, one timer),
and settles the outcome with the host's policies, all plain method calls
(no coroutine layer per policy). A host lets a line start when:

* it is not **paused**: a 429 or 503 with ``Retry-After`` pauses the whole
  host for that long (bounded by ``max_retry_after``);
* its **breaker** admits a call: open, it refuses until ``open_duration``
  has passed, then lets one probe through; the probe's success closes it;
* its **adaptive limit** (``corun.resilience.AdaptiveLimit``) has room;
* its token bucket has a token, when a hard ``rate`` is set.

A host that says no keeps its lines (they are *deferred*, not failed) and
is looked at again when the reason may have gone: a timer at the end of the
pause, at the probe time or at the next token, or the end of one of its
calls. A line ends as an error only when its own retries are spent on
errors that count for it (timeouts, connection errors, 5xx), when the
answer is final (a 404, a TLS failure, a body over the cap), or when its
host has been unavailable (breaker not closed) for ``host_give_up``
seconds: then every waiting line of the host ends as ``host_unavailable``,
and so does every later one.

What counts where:

===========================  ========  =======  ======================  ========
outcome                      breaker   limit    the line                host
===========================  ========  =======  ======================  ========
2xx-4xx (but 429)            success   sample   done                    -
429/503 with Retry-After     neither   shrink   again, no retry spent   paused
429 without Retry-After      neither   shrink   a retry                 -
502, 503, 504                failure   shrink   a retry                 -
other 5xx                    failure   -        a retry                 -
timeout                      failure   shrink   a retry                 -
connection error, protocol   failure   -        a retry                 -
the above, breaker not       failure   -        waits (queue's end),    -
closed after it (a probe)                      no retry spent
TLS, body cap, redirects     failure   -        done (error)            -
===========================  ========  =======  ======================  ========

Requests whose method is not idempotent are never retried after an error
(a 429 or 503 with ``Retry-After`` says the server did not act on them).
A line is sent again after a ``Retry-After`` at most ``MAX_PATIENCE``
times; then its last answer is its result.

Memory: at most ``max_held`` lines are held (queued, waiting or in
flight); reading the input waits for room. Beyond ``MAX_HOSTS`` hosts, a
host that holds no line is forgotten.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import time
from collections import deque
from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, final

from corun.fetch.input import BadInput, FetchRequest
from corun.fetch.options import FetchOptions
from corun.fetch.output import output_record
from corun.http import (
    IDEMPOTENT_METHODS,
    Client,
    ConnectError,
    HttpError,
    ProtocolError,
    RequestTimeout,
    Response,
    TLSError,
    host_key,
    parse_url,
)
from corun.resilience import (
    AdaptiveLimit,
    Breaker,
    BreakerOpen,
    BreakerState,
    Cancellable,
    Clock,
    Retry,
    SystemClock,
    TokenBucket,
    retry_after_delay,
)

#: Times one line is sent again because its host asked for patience.
MAX_PATIENCE: Final = 20
#: Statuses that shrink the host's limit (the host is overloaded).
_OVERLOAD: Final = frozenset({429, 502, 503, 504})
#: Lines read from the input per pass before the reader yields to the loop.
_READ_BATCH: Final = 256
#: Hosts kept at most: beyond it, a host is forgotten (its limit and counts
#: with it) as soon as it holds no line, so that an input of a million
#: distinct hosts does not keep a million limits.
MAX_HOSTS: Final = 10_000

#: A finished line: its number and its output record.
OnRecord = Callable[[int, dict[str, Any]], object]
#: The input lines of a run: read from a file, or received (a Ray worker's).
Lines = Iterable[FetchRequest | BadInput] | AsyncIterable[FetchRequest | BadInput]


@final
class _Job:
    """One input line on its way through the engine."""

    __slots__ = (
        "attempts",
        "deferred",
        "epoch",
        "first_sent",
        "host",
        "item",
        "patience",
        "permit",
        "retries",
        "started",
    )

    def __init__(self, item: FetchRequest, host: _Host) -> None:
        self.item = item
        self.host = host
        self.attempts = 0
        self.retries = 0
        self.patience = 0
        self.deferred = False
        # The host's block count when the job was queued: a higher one when it
        # starts means it waited on a pause or an open breaker.
        self.epoch = host.blocks
        self.first_sent: float | None = None
        self.started = 0.0
        self.permit: BreakerState | None = None


@final
class _Host:
    """The per-host state: its queue, its limit, its pause, its availability."""

    __slots__ = (
        "blocks",
        "bucket",
        "given_up",
        "held",
        "key",
        "limit",
        "listed",
        "paused_until",
        "pauses",
        "queue",
        "sent",
        "timer",
        "timer_at",
        "unavailable_reason",
        "unavailable_since",
    )

    def __init__(self, key: str, limit: AdaptiveLimit, bucket: TokenBucket | None) -> None:
        # Invariant: listed is True exactly when the host is in the engine's
        # ready deque; timer is armed for timer_at, or None. unavailable_since
        # is set while the host's breaker is not closed (None otherwise), and
        # given_up only after it stayed so for host_give_up seconds. held
        # counts its lines taken from the input and not yet recorded.
        self.key = key
        self.queue: deque[_Job] = deque()
        self.limit = limit
        self.bucket = bucket
        self.paused_until = 0.0
        self.pauses = 0
        self.blocks = 0
        self.held = 0
        self.sent = 0
        self.unavailable_since: float | None = None
        self.unavailable_reason = ""
        self.given_up = False
        self.listed = False
        self.timer: Cancellable | None = None
        self.timer_at = 0.0


@dataclass(frozen=True, slots=True)
class HostCounts:
    """How the hosts are doing, for the progress bar.

    Attributes:
        healthy: hosts neither paused nor unavailable.
        paused: hosts paused by ``Retry-After`` now.
        paused_until: the latest end of those pauses, in seconds from now
            (None when none is paused).
        unavailable: hosts whose breaker is not closed, or given up.
    """

    healthy: int
    paused: int
    paused_until: float | None
    unavailable: int


@dataclass(frozen=True, slots=True)
class HostReport:
    """One host at the end of a run.

    Attributes:
        requests: attempts sent to it.
        limit: its adaptive limit at the end; peak: the highest it reached.
        decreases: times its limit shrank.
        pauses: times it was paused by a ``Retry-After``.
        unavailable: True when it was given up.
    """

    requests: int
    limit: int
    peak: int
    decreases: int
    pauses: int
    unavailable: bool


@dataclass(frozen=True, slots=True)
class EngineStatistics:
    """Counters of a ``FetchEngine``.

    Attributes:
        attempts: requests sent.
        deferred: lines that waited on a paused host or an open breaker.
        pauses: host pauses by ``Retry-After``.
        breaker_trips: host breakers that opened.
        given_up: lines ended as ``host_unavailable``.
    """

    attempts: int
    deferred: int
    pauses: int
    breaker_trips: int
    given_up: int


class FetchEngine:
    """Fetches lines with per-host policies; hands each finished record to ``on_record``.

    Args:
        options: the run's ``FetchOptions`` (its input and output are not used).
        client: an entered ``Client`` without policies of its own
            (``FetchOptions.client_options()``).
        on_record: called with ``(line, record)`` once per line, when the
            line is finished; the record is the output line as a dict.
        clock: the clock of every policy and timer (default ``SystemClock``).
    """

    def __init__(
        self,
        options: FetchOptions,
        client: Client,
        on_record: OnRecord,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.options = options
        self._client = client
        self._on_record = on_record
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._now = self._clock.now  # bound method cached (hot path)
        self._breaker = Breaker(options.breaker_options(), name="host", clock=self._clock)
        self._retry = Retry(options.retry_options(), clock=self._clock)
        self._limit_options = options.limit_options()
        self.max_held = max(options.concurrency * 64, 10_000)
        # Invariant: _ready holds the hosts that may have a line to start
        # (each once, listed); _idle holds the futures of workers waiting for
        # one. _held counts lines taken from the input and not yet recorded.
        self._hosts: dict[str, _Host] = {}
        self._ready: deque[_Host] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._held = 0
        self._backing_off: dict[_Job, Cancellable] = {}
        self._input_done = False
        self._room: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._attempts = 0
        self._deferred = 0
        self._pauses = 0
        self._given_up = 0

    # ---- running

    async def run(self, items: Lines) -> None:
        """Fetch every item; returns when each one's record was handed over.

        ``items`` may be an async iterable: a Ray worker feeds its engine
        from what the driver sends, and its input never ends. Cancelling it
        stops the workers: lines in flight or waiting are not recorded (a
        later run fetches them again).
        """
        self._loop = loop = asyncio.get_running_loop()
        self._input_done = False
        tasks = [loop.create_task(self._worker()) for _ in range(self.options.concurrency)]
        tasks.append(loop.create_task(self._read(items)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for host in self._hosts.values():
                if host.timer is not None:
                    host.timer.cancel()
                    host.timer = None
            for timer in self._backing_off.values():
                timer.cancel()
            self._backing_off.clear()

    async def _read(self, items: Lines) -> None:
        count = 0
        if isinstance(items, AsyncIterable):
            async for item in items:
                count += 1
                await self._take_in(item, count)
        else:
            for item in items:
                count += 1
                await self._take_in(item, count)
        self._input_done = True
        self._check_done()

    async def _take_in(self, item: FetchRequest | BadInput, count: int) -> None:
        """Queue one input line on its host; waits while ``max_held`` lines are held."""
        if isinstance(item, BadInput):
            self._on_record(item.line, output_record(item, error=item.error, kind=item.kind))
            return
        url = item.parsed
        if url is None:  # built without it (a Ray worker's lines): the key needs it
            try:
                url = parse_url(item.url)
            except HttpError:
                url = None  # the request fails as invalid; its host is its text
        key = host_key(url) if url is not None else item.url
        host = self._hosts.get(key)
        if host is None:
            host = self._hosts[key] = self._new_host(key)
        self._held += 1
        host.held += 1
        job = _Job(item, host)
        if host.given_up:
            self._give_up_job(job)
        else:
            host.queue.append(job)
            self._list(host)
        if self._held >= self.max_held:
            loop = self._loop
            assert loop is not None
            self._room = loop.create_future()
            await self._room
        elif count % _READ_BATCH == 0:
            await asyncio.sleep(0)

    def _new_host(self, key: str) -> _Host:
        rate = self.options.rate
        bucket = None
        if rate is not None:
            bucket = TokenBucket(rate, max(1, int(rate)), self._clock.now())
        return _Host(key, AdaptiveLimit(self._limit_options, clock=self._clock), bucket)

    async def _worker(self) -> None:
        loop = self._loop
        assert loop is not None
        idle = self._idle
        while True:
            job = self._take()
            if job is None:
                if self._input_done and self._held == 0:
                    return
                waiter = loop.create_future()
                idle.append(waiter)
                await waiter
                continue
            if self._ready and idle:
                self._wake_one()
            await self._attempt(job)

    def _check_done(self) -> None:
        if self._input_done and self._held == 0:
            while self._idle:
                self._wake_one()

    def _wake_one(self) -> None:
        idle = self._idle
        while idle:
            waiter = idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _list(self, host: _Host, *, wake: bool = True) -> None:
        """Put ``host`` in the ready deque (it may have a line to start) and wake a worker.

        ``wake=False``: the caller is a worker that looks for a line next.
        """
        if not host.listed and host.queue:
            host.listed = True
            self._ready.append(host)
            if wake and self._idle:
                self._wake_one()

    # ---- choosing the next line

    def _take(self) -> _Job | None:
        """The next line that may start now (its host's slot taken), or None."""
        ready = self._ready
        if not ready:
            return None
        now = self._now()
        for _ in range(len(ready)):
            host = ready[0]
            job, wake_at = self._start(host, now)
            if job is not None:
                if host.queue and not host.limit.full:
                    ready.rotate(-1)  # round-robin between hosts
                else:
                    # Empty or full: listed again when a call of it ends.
                    ready.popleft()
                    host.listed = False
                return job
            ready.popleft()
            host.listed = False
            if wake_at is not None:
                self._wake_at(host, wake_at, now)
        return None

    def _start(self, host: _Host, now: float) -> tuple[_Job | None, float | None]:
        """Start ``host``'s next line if its policies let it: ``(job, None)``.

        Otherwise ``(None, when)``: when to look again, or None to wait for
        one of its calls to end (or a new line).
        """
        if not host.queue:
            return None, None
        if host.paused_until > now:
            host.blocks += 1
            return None, host.paused_until
        limit = host.limit
        if limit.full:
            return None, None
        bucket = host.bucket
        if bucket is not None:
            wait = bucket.wait_time(now)
            if wait > 0.0:
                return None, now + wait
        try:
            permit = self._breaker.acquire(host.key)
        except BreakerOpen as exc:
            host.blocks += 1
            self._unavailable(host, now, exc.state)
            return None, exc.probe_at
        if bucket is not None:
            bucket.take(now)
        job = host.queue.popleft()
        if not job.deferred and job.epoch != host.blocks:
            job.deferred = True
            self._deferred += 1
        job.permit = permit
        started = limit.acquire()
        assert started is not None  # not full, checked above
        job.started = started
        if job.first_sent is None:
            job.first_sent = started
        return job, None

    def _wake_at(self, host: _Host, when: float, now: float) -> None:
        timer = host.timer
        if timer is not None:
            if host.timer_at <= when:
                return
            timer.cancel()
        host.timer_at = when
        host.timer = self._clock.call_later(
            max(0.0, when - now), functools.partial(self._on_timer, host)
        )

    def _on_timer(self, host: _Host) -> None:
        host.timer = None
        if host.unavailable_since is not None and not host.given_up:
            self._check_give_up(host)
        self._list(host)

    # ---- one attempt

    async def _attempt(self, job: _Job) -> None:
        item = job.item
        host = job.host
        job.attempts += 1
        self._attempts += 1
        host.sent += 1
        try:
            response = await self._client.request(
                item.method,
                item.parsed if item.parsed is not None else item.url,
                headers=item.headers or None,
                body=item.body,
            )
        except HttpError as exc:
            self._settle_error(job, exc)
        except asyncio.CancelledError:
            self._end_permit(job, failed=None)
            host.limit.ignored()
            raise
        except Exception as exc:  # a bug must not lose the line: it becomes its error
            self._end_permit(job, failed=None)
            host.limit.ignored()
            record = output_record(
                item, error=f"internal error: {exc!r}", kind="internal", attempts=job.attempts
            )
            self._finish(job, record)
        else:
            self._settle_response(job, response)
        if host.queue:
            self._list(host, wake=False)  # this worker takes the next line itself

    def _end_permit(self, job: _Job, *, failed: bool | None) -> None:
        """Report the attempt to the host's breaker (None: no verdict)."""
        permit = job.permit
        job.permit = None
        if permit is None:
            return
        host = job.host
        breaker = self._breaker
        if failed is None:
            breaker.release(host.key, permit)
            return
        breaker.record(host.key, permit, failed=failed)
        if failed:
            if host.unavailable_since is None and breaker.state(host.key) != "closed":
                self._unavailable(host, self._clock.now(), "open")
        elif host.unavailable_since is not None and breaker.state(host.key) == "closed":
            host.unavailable_since = None
            host.given_up = False

    def _settle_response(self, job: _Job, response: Response) -> None:
        status = response.status
        host = job.host
        limit = host.limit
        if status == 429 or status == 503:
            delay = self._server_delay(response)
            if delay is not None or status == 429:
                # The host asks for patience: not a failure of the host.
                self._end_permit(job, failed=None)
                limit.overloaded(job.started)
                if delay is not None:
                    if job.patience < MAX_PATIENCE:
                        job.patience += 1
                        self._pause(host, delay)
                        host.queue.appendleft(job)
                        return
                elif self._retry_later(job):
                    return
                self._finish(job, self._response_record(job, response))
                return
        if status >= 500:
            self._end_permit(job, failed=True)
            if status in _OVERLOAD:
                limit.overloaded(job.started)
            else:
                limit.ignored()
            if self._again(job):
                return
        else:
            self._end_permit(job, failed=False)
            limit.succeeded(job.started)
        self._finish(job, self._response_record(job, response))

    def _settle_error(self, job: _Job, exc: HttpError) -> None:
        host = job.host
        counts = isinstance(exc, ConnectError | RequestTimeout | ProtocolError)
        self._end_permit(job, failed=counts)
        if isinstance(exc, RequestTimeout):
            host.limit.overloaded(job.started)
        else:
            host.limit.ignored()
        if (
            isinstance(exc, ConnectError | RequestTimeout)
            and not isinstance(exc, TLSError)
            and self._again(job)
        ):
            return
        record = output_record(job.item, error=str(exc), kind=exc.kind, attempts=job.attempts)
        self._finish(job, record)

    def _may_retry(self, job: _Job) -> bool:
        return job.retries < self.options.retries and job.item.method in IDEMPOTENT_METHODS

    def _again(self, job: _Job) -> bool:
        """Queue a failed line again if it may be; False: its failure is its result.

        While its host is unavailable the failure is the host's (the line
        was a probe, or in flight when the breaker opened): the line waits
        for the host, no retry spent. Otherwise a retry is spent, after a
        jittered backoff.
        """
        host = job.host
        if host.unavailable_since is not None and job.item.method in IDEMPOTENT_METHODS:
            if host.given_up:
                self._give_up_job(job)
            else:
                # At the back: the next probe is another line, so that a line
                # that always fails cannot keep a healthy host unavailable.
                host.queue.append(job)
            return True
        return self._retry_later(job)

    def _retry_later(self, job: _Job) -> bool:
        """Spend one of the line's retries: queue it again after a jittered backoff."""
        if not self._may_retry(job):
            return False
        job.retries += 1
        delay = self._retry.backoff(job.retries)
        self._backing_off[job] = self._clock.call_later(
            delay, functools.partial(self._requeue, job)
        )
        return True

    def _requeue(self, job: _Job) -> None:
        del self._backing_off[job]
        host = job.host
        if host.given_up:
            self._give_up_job(job)
            return
        host.queue.appendleft(job)
        self._list(host)

    def _server_delay(self, response: Response) -> float | None:
        wall = getattr(self._clock, "wall", None)
        now = float(wall()) if callable(wall) else time.time()
        return retry_after_delay(response.headers, now, max_delay=self.options.max_retry_after)

    def _pause(self, host: _Host, delay: float) -> None:
        host.pauses += 1
        self._pauses += 1
        until = self._clock.now() + delay
        if until > host.paused_until:
            host.paused_until = until

    # ---- unavailable hosts

    def _unavailable(self, host: _Host, now: float, state: str) -> None:
        if host.unavailable_since is not None:
            return
        host.unavailable_since = now
        host.unavailable_reason = f"its circuit breaker was {state.replace('_', '-')}"
        self._wake_at(host, now + self.options.host_give_up, now)

    def _check_give_up(self, host: _Host) -> None:
        since = host.unavailable_since
        assert since is not None
        now = self._clock.now()
        if now - since < self.options.host_give_up:
            self._wake_at(host, since + self.options.host_give_up, now)
            return
        host.given_up = True
        queue = host.queue
        while queue:
            self._give_up_job(queue.popleft())

    def _give_up_job(self, job: _Job) -> None:
        host = job.host
        since = host.unavailable_since
        ago = self._clock.now() - since if since is not None else 0.0
        wall = time.time() - ago
        error = (
            f"host {host.key} unavailable for {ago:.1f} s (since "
            f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(wall))}: "
            f"{host.unavailable_reason}), longer than --host-give-up "
            f"{self.options.host_give_up:g} s"
        )
        self._given_up += 1
        record = output_record(
            job.item, error=error, kind="host_unavailable", attempts=job.attempts
        )
        self._finish(job, record)

    # ---- records

    def _response_record(self, job: _Job, response: Response) -> dict[str, Any]:
        item = job.item
        record = output_record(item, status=response.status, attempts=job.attempts)
        record["final_url"] = response.url
        record["content_type"] = response.headers.get("Content-Type")
        body = response.body
        save_dir = self.options.save_dir
        if save_dir is not None:
            record["body_path"] = _save_body(save_dir, item.line, body)
        else:
            try:
                record["body"] = body.decode("utf-8")
            except UnicodeDecodeError:
                record["body"] = base64.b64encode(body).decode("ascii")
                record["body_base64"] = True
        return record

    def _finish(self, job: _Job, record: dict[str, Any]) -> None:
        first = job.first_sent
        if first is not None:
            record["elapsed_ms"] = round((self._now() - first) * 1000.0, 3)
        self._held -= 1
        host = job.host
        host.held -= 1
        if host.held == 0 and len(self._hosts) > MAX_HOSTS:
            self._forget(host)
        self._on_record(job.item.line, record)
        room = self._room
        if room is not None and self._held < self.max_held:
            self._room = None
            if not room.done():
                room.set_result(None)
        if self._held == 0:
            self._check_done()

    def _forget(self, host: _Host) -> None:
        """Drop an idle host (no line held: none queued, waiting or in flight)."""
        if host.timer is not None:
            host.timer.cancel()
            host.timer = None
        if self._hosts.get(host.key) is host:
            del self._hosts[host.key]

    # ---- introspection

    def hosts(self) -> HostCounts:
        """How many hosts are healthy, paused (and until when) and unavailable."""
        now = self._clock.now()
        healthy = paused = unavailable = 0
        until = 0.0
        for host in self._hosts.values():
            if host.unavailable_since is not None or host.given_up:
                unavailable += 1
            elif host.paused_until > now:
                paused += 1
                until = max(until, host.paused_until)
            else:
                healthy += 1
        return HostCounts(healthy, paused, until - now if paused else None, unavailable)

    def host_reports(self) -> dict[str, HostReport]:
        """Every host's limit, pauses and requests."""
        reports = {}
        for key, host in self._hosts.items():
            stats = host.limit.statistics()
            reports[key] = HostReport(
                requests=host.sent,
                limit=stats.limit,
                peak=stats.peak,
                decreases=stats.decreases,
                pauses=host.pauses,
                unavailable=host.given_up,
            )
        return reports

    def statistics(self) -> EngineStatistics:
        """Counters of the run so far."""
        return EngineStatistics(
            attempts=self._attempts,
            deferred=self._deferred,
            pauses=self._pauses,
            breaker_trips=self._breaker.statistics().opened,
            given_up=self._given_up,
        )


def _save_body(directory: str, line: int, body: bytes) -> str:
    path = os.path.join(directory, f"{line}.body")
    tmp = path + ".tmp"
    with open(tmp, "wb") as stream:
        stream.write(body)
    os.replace(tmp, path)
    return path
