"""The journal: the record of which input lines are done, that makes ``corun fetch`` resumable.

Design. The journal is a SQLite database next to the output
(``OUT.jsonl.journal``), in WAL mode. It has one row per *completed* input
line, keyed by the line number (``results(line INTEGER PRIMARY KEY, record
TEXT, status, error_kind, attempts, elapsed_ms)``), where ``record`` is the
finished output line, encoded once, and the four columns copy what the
summary and ``--retry-failed`` need, so that neither decodes a record again.
A ``meta`` table holds a fingerprint of the input (its size and SHA-256) and
the line count. A journal of schema 1 (without the columns) is upgraded in
place when opened.

* **Nothing lost.** A result is recorded only after it is complete. Results
  are committed in small batches (every ``FLUSH_ROWS`` rows or
  ``FLUSH_SECONDS``); a commit is atomic, so after a SIGKILL the journal
  holds every batch committed before it and none of the batch in flight.
  The lines of that batch are simply fetched again by the next run.
* **Nothing doubled.** The line number is the primary key and rows are
  written with ``INSERT OR REPLACE``, so a line fetched twice (committed in
  a batch the process did not know was durable, say) is still one row.
* **No partial line.** The output file is never appended to: it is written
  from the journal, in line order, to a temporary file that is fsynced and
  then renamed over ``OUT.jsonl`` (``output.py``). Readers see the old file
  or the complete new one.
* **Same input only.** A run refuses a journal whose fingerprint differs
  from its input, rather than mixing two inputs' results.

Durability: ``synchronous=NORMAL`` in WAL mode survives the process dying
(SIGKILL included), which is what resumption needs; a power cut may lose
the last batches, which are then fetched again (never half-recorded).

Rejected alternatives: appending JSON lines to the output as results come
(a kill mid-write leaves a partial line, and finding what is done means
re-parsing the file); a sidecar "done" list (two files that can disagree).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from typing import Any, Final, TypeAlias

#: One encoder for every record: json.dumps with non-default options builds one per call.
_ENCODE: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
FLUSH_ROWS: Final = 200
FLUSH_SECONDS: Final = 0.25
SCHEMA_VERSION: Final = "2"
#: The statuses that ``--retry-failed`` fetches again (with every error).
RETRYABLE_STATUSES: Final = (429, 502, 503, 504)
_COLUMNS: Final = ("status", "error_kind", "attempts", "elapsed_ms")
#: One journalled line as the summary reads it: status, error kind, attempts, elapsed ms.
Row: TypeAlias = tuple[int | None, str | None, int, float | None]


def retryable(status: int | None, kind: str | None) -> bool:
    """Whether ``--retry-failed`` fetches a line with this result again: an error, or a retryable status."""
    return kind is not None or status in RETRYABLE_STATUSES


class JournalMismatch(Exception):
    """The journal belongs to a different input (or format); the run refuses to resume."""


def fingerprint(path: str) -> str:
    """``size:sha256`` of the file at ``path``."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            size += len(chunk)
            digest.update(chunk)
    return f"{size}:{digest.hexdigest()}"


class Journal:
    """The SQLite journal of one output file.

    Args:
        path: the database file (``OUT.jsonl.journal``).
        input_fingerprint: ``fingerprint()`` of the input.
        total: the number of input lines.

    Raises:
        JournalMismatch: the journal exists and was made for other input.
    """

    def __init__(self, path: str, input_fingerprint: str, total: int) -> None:
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None)
        # Invariant: _pending holds the rows recorded since the last commit,
        # never a line number twice.
        self._pending: dict[int, tuple[int, str, int | None, str | None, int, float | None]] = {}
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS results (line INTEGER PRIMARY KEY, record TEXT NOT NULL,"
                " status INTEGER, error_kind TEXT, attempts INTEGER, elapsed_ms REAL)"
            )
            self._check_meta(input_fingerprint, total)
        except BaseException:
            self._db.close()
            raise

    def _check_meta(self, input_fingerprint: str, total: int) -> None:
        expected = {
            "schema": SCHEMA_VERSION,
            "fingerprint": input_fingerprint,
            "total": str(total),
        }
        found = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if not found:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT INTO meta VALUES (?, ?)", list(expected.items()))
            self._db.execute("COMMIT")
            return
        if found.get("schema") == "1":
            self._upgrade_from_1()
            found["schema"] = SCHEMA_VERSION
        for key, value in expected.items():
            if found.get(key) != value:
                raise JournalMismatch(
                    f"journal {self.path} was written for different input "
                    f"({key}: {found.get(key)!r}, this input: {value!r}); "
                    "delete it, or choose another --output, to start afresh"
                )

    def _upgrade_from_1(self) -> None:
        """Add the summary columns to a schema-1 journal, from its records (once)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for column, kind in zip(_COLUMNS, ("INTEGER", "TEXT", "INTEGER", "REAL"), strict=True):
                self._db.execute(f"ALTER TABLE results ADD COLUMN {column} {kind}")
            self._db.execute(
                "UPDATE results SET status = json_extract(record, '$.status'),"
                " error_kind = json_extract(record, '$.error_kind'),"
                " attempts = COALESCE(json_extract(record, '$.attempts'), 0),"
                " elapsed_ms = json_extract(record, '$.elapsed_ms')"
            )
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (SCHEMA_VERSION,))
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def retryable_lines(self) -> set[int]:
        """The committed lines whose result ``--retry-failed`` fetches again."""
        return {line for line, (status, kind, _, _) in self.rows() if retryable(status, kind)}

    def rows(self) -> Iterator[tuple[int, Row]]:
        """Every committed line's ``(line, (status, error_kind, attempts, elapsed_ms))``."""
        for line, status, kind, attempts, elapsed in self._db.execute(
            "SELECT line, status, error_kind, attempts, elapsed_ms FROM results"
        ):
            yield line, (status, kind, attempts or 0, elapsed)

    def record(self, line: int, record: dict[str, Any]) -> bool:
        """Add a finished line; True when a flush is due by size."""
        self._pending[line] = (
            line,
            _ENCODE(record),
            record.get("status"),
            record.get("error_kind"),
            record.get("attempts") or 0,
            record.get("elapsed_ms"),
        )
        return len(self._pending) >= FLUSH_ROWS

    def flush(self) -> None:
        """Commit every recorded row, atomically."""
        if not self._pending:
            return
        rows = list(self._pending.values())
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?)", rows)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        self._pending.clear()

    def records(self) -> Iterator[tuple[int, str]]:
        """Every committed ``(line, record JSON)``, in line order (streams)."""
        yield from self._db.execute("SELECT line, record FROM results ORDER BY line")

    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def close(self) -> None:
        """Flush and close."""
        try:
            self.flush()
        finally:
            self._db.close()


def journal_path(output: str) -> str:
    """Where the journal of ``output`` lives."""
    return os.fspath(output) + ".journal"
