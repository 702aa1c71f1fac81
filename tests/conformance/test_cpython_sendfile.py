"""CPython test_sendfile: ``SendfileTestsBase`` bound to corun's loop.

``CorunSendfileTests`` is bound like CPython's Unix ``EPollEventLoopTests``,
with ``create_event_loop()`` returning a corun loop; the stdlib's own bindings
are not collected.

``SendfileBase.setUpClass`` writes its data file (``os_helper.TESTFN``) to the
current directory and removes it in ``tearDownClass``.
"""

from ._harness import cpython_module, impl

_m = cpython_module(globals(), "test_sendfile")


class CorunSendfileTests(_m.SendfileTestsBase, _m.test_utils.TestCase):
    def create_event_loop(self):
        return impl().new_event_loop()
