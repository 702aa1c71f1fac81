"""Run other libraries' own test suites on corun and on asyncio's loop (``make ecosystem``)."""
