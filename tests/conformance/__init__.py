"""CPython ``test.test_asyncio`` suites run against corun (see _harness.py)."""
