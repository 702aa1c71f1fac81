"""The records of ``OUT.jsonl``, and writing it from the journal, atomically.

The output is written once, when every input line is recorded: to
``OUT.jsonl.tmp``, fsynced, renamed over ``OUT.jsonl``, and the directory
fsynced. A crash at any point leaves either no output (or the previous
one) or the complete new one, never a partial or doubled line.
"""

from __future__ import annotations

import os
from typing import Any

from corun.fetch.input import BadInput, FetchRequest
from corun.fetch.journal import Journal


def output_record(
    item: FetchRequest | BadInput,
    *,
    status: int | None = None,
    error: str | None = None,
    kind: str | None = None,
    attempts: int = 0,
) -> dict[str, Any]:
    """The output record of one input line, without its body; the keys in output order.

    A response sets ``status``; an error, or a bad input line, sets ``error``
    and ``kind``. The fetcher adds ``elapsed_ms`` and the body (or
    ``body_path``), and for a response ``final_url`` and ``content_type``.
    """
    return {
        "line": item.line,
        "id": item.id,
        "url": item.url,
        "method": item.method if isinstance(item, FetchRequest) else None,
        "status": status,
        "error": error,
        "error_kind": kind,
        "attempts": attempts,
        "elapsed_ms": 0.0,
        "body": None,
        "body_base64": False,
    }


def write_output(journal: Journal, path: str) -> int:
    """Write every journal record to ``path``, one line each, in line order; returns the count."""
    tmp = f"{path}.tmp"
    count = 0
    with open(tmp, "w", encoding="utf-8") as stream:
        for _line, record in journal.records():
            stream.write(record)
            stream.write("\n")
            count += 1
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(tmp, path)
    directory = os.path.dirname(os.path.abspath(path))
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return count
