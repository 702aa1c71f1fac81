"""CPython test_server: ``SelectorStartServerTests`` rebound to corun's loop.

CPython's ``SelectorStartServerTests`` makes its loop with
``asyncio.SelectorEventLoop()`` rather than from the policy, so it is not
collected as is; ``CorunStartServerTests`` is the same class (its extra Unix
test included) with ``new_loop()`` returning a corun loop.
``ProactorStartServerTests`` is collected unchanged (Windows only: skipped).
"""

from ._harness import bind, impl

_m = bind(globals(), "test_server", exclude={"SelectorStartServerTests"})


class CorunStartServerTests(_m.SelectorStartServerTests):
    def new_loop(self):
        return impl().new_event_loop()
