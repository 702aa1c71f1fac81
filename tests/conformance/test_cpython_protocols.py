"""CPython test_asyncio.test_protocols, unchanged, under corun's event loop policy."""

from ._harness import bind

bind(globals(), "test_protocols")
