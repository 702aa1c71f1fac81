"""CPython test_futures2 (IsolatedAsyncioTestCase) under corun's policy.

Its ``CFutureTests``/``PyFutureTests`` are bound to the stdlib's C/Py *Task*
classes and are not collected; ``CORUN_CONFORMANCE_EXTRA=1`` adds the same
test bound to corun's Task (not part of the 398-test set).
"""

from ._harness import bind, extras_enabled, impl

_m = bind(globals(), "test_futures2", exclude={"CFutureTests", "PyFutureTests"})

if extras_enabled():

    class CorunFutureTests(_m.FutureTests, _m.unittest.IsolatedAsyncioTestCase):
        cls = impl().Task
