"""The end-of-run summary: counts by status and error kind, latency percentiles, retries.

``Tally`` counts as lines are recorded (and over the journal's columns for
lines recorded by earlier runs), so the summary never decodes a record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from corun.fetch.journal import journal_path
from corun.resilience import LatencyHistogram


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    """One worker of a run spread over Ray actors (``corun fetch --ray``).

    Attributes:
        id: the worker's index; it serves the hosts whose shard is ``id``.
        hosts: distinct hosts of the lines it was sent in this run.
        lines: lines it finished in this run.
        requests_per_s: requests it sent (retries included) per second of
            this run.
        restarts: times it died and Ray restarted it.
    """

    id: int
    hosts: int
    lines: int
    requests_per_s: float
    restarts: int


@dataclass(frozen=True, slots=True)
class Summary:
    """What a ``corun fetch`` run did, over every recorded line (earlier runs included).

    Attributes:
        total: input lines.
        done: lines recorded.
        complete: every line is recorded and the output was written.
        interrupted: the run stopped early (signal); re-run to finish.
        by_status: ``"200" -> count``; ``"none"`` for lines without a response.
        by_error: error kind -> count.
        latency_p50_ms, latency_p90_ms, latency_p99_ms: over lines that
            got a response (None when none did).
        retries: attempts beyond the first, summed over lines.
        breaker_trips: breaker openings, summed over runs.
        elapsed_s: this run's wall time.
        output: the output path.
        deferred: lines that waited for their host (paused, or its breaker
            open) in this run.
        host_pauses: host pauses by ``Retry-After``, in this run.
        hosts: per host (``host:port``, the 100 with most requests) in this
            run: requests, its adaptive limit at the end and at its peak,
            its decreases and pauses, and whether it was given up.
        workers: per worker, with ``--ray``; None on one machine (and then
            left out of the JSON).
    """

    total: int
    done: int
    complete: bool
    interrupted: bool
    by_status: dict[str, int]
    by_error: dict[str, int]
    latency_p50_ms: float | None
    latency_p90_ms: float | None
    latency_p99_ms: float | None
    retries: int
    breaker_trips: int
    elapsed_s: float
    output: str
    deferred: int = 0
    host_pauses: int = 0
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    workers: tuple[WorkerSummary, ...] | None = None

    def to_json(self) -> str:
        data = asdict(self)
        if self.workers is None:
            del data["workers"]
        return json.dumps(data, indent=2, sort_keys=True)

    def render(self) -> str:
        """A few human-readable lines."""

        def fmt(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f} ms"

        status = ", ".join(f"{k}: {v}" for k, v in sorted(self.by_status.items())) or "-"
        errors = ", ".join(f"{k}: {v}" for k, v in sorted(self.by_error.items())) or "none"
        state = (
            "complete" if self.complete else ("interrupted" if self.interrupted else "incomplete")
        )
        workers = [
            f"  worker {w.id}: {w.hosts} hosts, {w.lines} lines, {w.requests_per_s:.1f} req/s"
            + (f", {w.restarts} restarts" if w.restarts else "")
            for w in self.workers or ()
        ]
        return "\n".join(
            [
                f"fetch {state}: {self.done}/{self.total} lines in {self.elapsed_s:.1f} s"
                + (f" -> {self.output}" if self.complete else ""),
                f"  status: {status}",
                f"  errors: {errors}",
                f"  latency: p50 {fmt(self.latency_p50_ms)}, p90 {fmt(self.latency_p90_ms)}, "
                f"p99 {fmt(self.latency_p99_ms)}",
                f"  retries: {self.retries}; breaker trips: {self.breaker_trips}; "
                f"deferred lines: {self.deferred}; host pauses: {self.host_pauses}",
                *workers,
                *self._resume_lines(),
            ]
        )

    def _resume_lines(self) -> list[str]:
        if not self.interrupted:
            return []
        return [
            f"  to resume: run the same command again; it fetches only the "
            f"{self.total - self.done} lines not done",
            f"  {self.output} is written once every line is done; until then the "
            f"results are in {journal_path(self.output)}",
        ]


class Tally:
    """Counts of recorded lines, kept as they are recorded; ``summary()`` makes the ``Summary``.

    ``add`` takes a line's status, error kind, attempts and elapsed ms (the
    journal's columns).
    """

    __slots__ = ("by_error", "by_status", "done", "errors", "latency", "retries")

    def __init__(self) -> None:
        # Invariant: every count is over the lines added;
        # errors counts those with an error kind, retries their attempts
        # beyond the first.
        self.by_status: dict[str, int] = {}
        self.by_error: dict[str, int] = {}
        self.latency = LatencyHistogram()
        self.done = self.errors = self.retries = 0

    def add(
        self, status: int | None, kind: str | None, attempts: int, elapsed_ms: float | None
    ) -> None:
        """Count one recorded line."""
        self.done += 1
        key = "none" if status is None else str(status)
        by_status = self.by_status
        by_status[key] = by_status.get(key, 0) + 1
        if kind:
            self.errors += 1
            self.by_error[kind] = self.by_error.get(kind, 0) + 1
        if attempts > 1:
            self.retries += attempts - 1
        if status is not None and elapsed_ms is not None:
            self.latency.record(elapsed_ms / 1000.0)

    def summary(self, **run: Any) -> Summary:
        """The ``Summary``; ``run`` gives its other fields (total, complete, ...)."""
        latency = self.latency
        has = latency.count > 0

        def pct(q: float) -> float | None:
            return round(latency.percentile(q) * 1000.0, 3) if has else None

        run["elapsed_s"] = round(run["elapsed_s"], 3)
        return Summary(
            done=self.done,
            by_status=dict(self.by_status),
            by_error=dict(self.by_error),
            latency_p50_ms=pct(50),
            latency_p90_ms=pct(90),
            latency_p99_ms=pct(99),
            retries=self.retries,
            **run,
        )


def summarize(
    records: Iterable[str],
    *,
    total: int,
    complete: bool,
    interrupted: bool,
    breaker_trips: int,
    elapsed_s: float,
    output: str,
    workers: tuple[WorkerSummary, ...] | None = None,
) -> Summary:
    """A ``Summary`` of output records (JSON strings); streams, with bounded memory."""
    tally = Tally()
    for text in records:
        record: dict[str, Any] = json.loads(text)
        tally.add(
            record.get("status"),
            record.get("error_kind"),
            int(record.get("attempts") or 0),
            record.get("elapsed_ms"),
        )
    return tally.summary(
        total=total,
        complete=complete,
        interrupted=interrupted,
        breaker_trips=breaker_trips,
        elapsed_s=elapsed_s,
        output=output,
        workers=workers,
    )
