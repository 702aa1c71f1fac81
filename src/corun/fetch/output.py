"""Writing ``OUT.jsonl`` from the journal, atomically.

The output is written once, when every input line is recorded: to
``OUT.jsonl.tmp``, fsynced, renamed over ``OUT.jsonl``, and the directory
fsynced. A crash at any point leaves either no output (or the previous
one) or the complete new one, never a partial or doubled line.
"""

from __future__ import annotations

import os

from corun.fetch.journal import Journal


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
