"""CPython test_events: the loop suites bound to corun's loop.

Collected: ``CorunEventLoopTests`` = ``UnixEventLoopTestsMixin`` (i.e.
``EventLoopTestsMixin`` with a ``SafeChildWatcher`` attached to the loop) +
``SubprocessTestsMixin``, bound exactly like CPython's Unix
``EPollEventLoopTests``/``SelectEventLoopTests``, with ``create_event_loop()``
returning a corun loop.  Not collected: the stdlib's Kqueue/EPoll/Poll/Select
bindings and the module's other classes (handles, timers, policies, servers
of the stdlib), which test asyncio itself rather than a loop.
"""

from ._harness import cpython_module, impl

_m = cpython_module(globals(), "test_events")


class CorunEventLoopTests(
    _m.UnixEventLoopTestsMixin, _m.SubprocessTestsMixin, _m.test_utils.TestCase
):
    def create_event_loop(self):
        return impl().new_event_loop()
