"""CPython test_futures: the Future mixins bound to corun.Future.

Collected: ``CorunFutureTests`` (BaseFutureTests) and
``CorunFutureDoneCallbackTests`` (BaseFutureDoneCallbackTests), bound like the
stdlib's ``PyFutureTests``/``PyFutureDoneCallbackTests``.  Not collected: the
stdlib's Py/C/CSub bindings, the inheritance tests (they check the stdlib's
"not initialized" guard of its own classes) and ``DuckTests`` (stdlib
``wrap_future``/``ensure_future`` only).  As in CPython, ``self.loop`` is the
stdlib's ``test_utils.TestLoop`` (virtual time); corun's Future must work with
any loop.
"""

from ._harness import cpython_module, impl

_m = cpython_module(globals(), "test_futures")
_impl = impl()


class CorunFutureTests(_m.BaseFutureTests, _m.test_utils.TestCase):
    cls = _impl.Future


class CorunFutureDoneCallbackTests(_m.BaseFutureDoneCallbackTests, _m.test_utils.TestCase):
    def _new_future(self):
        return _impl.Future(loop=self.loop)
