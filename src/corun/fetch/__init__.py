"""corun.fetch: the crash-safe batch fetcher behind ``corun fetch``.

See docs/fetch.md.
"""

from corun.fetch.engine import EngineStatistics, FetchEngine, HostCounts, HostReport
from corun.fetch.input import BadInput, FetchRequest, count_lines, parse_line, read_requests
from corun.fetch.journal import Journal, JournalMismatch, fingerprint, journal_path
from corun.fetch.options import FetchOptions
from corun.fetch.output import write_output
from corun.fetch.progress import ProgressState
from corun.fetch.runner import run_fetch
from corun.fetch.summary import Summary, Tally, summarize

__all__ = [
    "BadInput",
    "EngineStatistics",
    "FetchEngine",
    "FetchOptions",
    "FetchRequest",
    "HostCounts",
    "HostReport",
    "Journal",
    "JournalMismatch",
    "ProgressState",
    "Summary",
    "Tally",
    "count_lines",
    "fingerprint",
    "journal_path",
    "parse_line",
    "read_requests",
    "run_fetch",
    "summarize",
    "write_output",
]
