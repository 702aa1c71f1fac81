"""CPython test_asyncio.test_ssl, unchanged, under corun's event loop policy."""

from ._harness import bind

bind(globals(), "test_ssl")
