"""CPython test_buffered_proto: the selector binding rebound to corun's loop.

CPython's ``BufferedProtocolSelectorTests`` makes its loop with
``asyncio.SelectorEventLoop()`` rather than from the policy, so it is not
collected as is; ``CorunBufferedProtocolTests`` is the same class with
``new_loop()`` returning a corun loop.  ``BufferedProtocolProactorTests`` is
collected unchanged (Windows only: skipped).
"""

from ._harness import bind, impl

_m = bind(globals(), "test_buffered_proto", exclude={"BufferedProtocolSelectorTests"})


class CorunBufferedProtocolTests(_m.BufferedProtocolSelectorTests):
    def new_loop(self):
        return impl().new_event_loop()
