"""CPython test_events: the loop suites bound to corun's loop.

Collected: ``CorunEventLoopTests`` = the loop mixin + ``SubprocessTestsMixin``,
bound exactly like CPython's Unix ``EPollEventLoopTests``/``SelectEventLoopTests``,
with ``create_event_loop()`` returning a corun loop.  The loop mixin is
``UnixEventLoopTestsMixin`` (``EventLoopTestsMixin`` with a ``SafeChildWatcher``
attached to the loop) up to 3.13, and ``EventLoopTestsMixin`` itself from 3.14,
which removed child watchers and that mixin with them.  Not collected: the
stdlib's Kqueue/EPoll/Poll/Select bindings and the module's other classes
(handles, timers, policies, servers of the stdlib), which test asyncio itself
rather than a loop.
"""

import sys

from ._harness import cpython_module, impl

_m = cpython_module(globals(), "test_events")

# Named per version, not looked up with a fallback: a reshaped module must
# fail collection rather than silently bind another mixin.
_LoopMixin = _m.UnixEventLoopTestsMixin if sys.version_info < (3, 14) else _m.EventLoopTestsMixin


class CorunEventLoopTests(_LoopMixin, _m.SubprocessTestsMixin, _m.test_utils.TestCase):
    def create_event_loop(self):
        return impl().new_event_loop()
