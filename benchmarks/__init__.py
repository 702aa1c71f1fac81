"""corun's benchmark suite: corun vs asyncio vs uvloop, every run in a fresh process.

Run it with ``python -m benchmarks`` (``make bench``); see
``benchmarks/README.md`` for what each benchmark measures and how.
"""

from __future__ import annotations

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the suite with command-line ``argv`` (default ``sys.argv[1:]``); the exit code."""
    from benchmarks.driver import main as driver_main

    return driver_main(argv)
