"""CPython test_sock_lowlevel: ``BaseSockTestsMixin`` bound to corun's loop.

``CorunSockTests`` is bound like CPython's Unix ``EPollEventLoopTests``, with
``create_event_loop()`` returning a corun loop; the stdlib's own bindings are
not collected.
"""

from ._harness import cpython_module, impl

_m = cpython_module(globals(), "test_sock_lowlevel")


class CorunSockTests(_m.BaseSockTestsMixin, _m.test_utils.TestCase):
    def create_event_loop(self):
        return impl().new_event_loop()
