"""CPython test_asyncio.test_pep492, unchanged, under corun's event loop policy."""

from ._harness import bind

bind(globals(), "test_pep492")
