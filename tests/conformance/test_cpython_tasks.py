"""CPython test_tasks: the Task mixins bound to corun.Task and corun.Future.

Collected: ``CorunTask_CorunFuture_Tests`` = BaseTaskTests + SetMethodsTest,
bound like the stdlib's ``PyTask_PyFuture_Tests``.  As in CPython,
``self.loop`` is the stdlib's ``test_utils.TestLoop`` (with corun's Task as
task factory and corun's Future from ``create_future``); the tests that call
``asyncio.new_event_loop()`` get a corun loop from the policy.

Not collected: the stdlib's Py/C/subclass bindings, introspection tests of the
stdlib's ``_register_task``/``_enter_task`` implementations,
``GenericTaskTests``/``CTask_Future_Tests`` (stdlib classes only) and the
gather tests (stdlib ``gather`` on ``TestLoop`` futures).  With
``CORUN_CONFORMANCE_EXTRA=1`` the loop-generic classes that run on the
policy's loop are added (not part of the 398-test set).
"""

import asyncio

from ._harness import cpython_module, extras_enabled, impl

_m = cpython_module(globals(), "test_tasks")
_impl = impl()


class CorunTask_CorunFuture_Tests(_m.BaseTaskTests, _m.SetMethodsTest, _m.test_utils.TestCase):
    Task = _impl.Task
    Future = _impl.Future
    # 3.14's tests ask the binding which registry to read; corun's tasks are in
    # asyncio's own (the public functions, C ones in CPython).
    all_tasks = staticmethod(asyncio.all_tasks)
    current_task = staticmethod(asyncio.current_task)


if extras_enabled():

    class CorunCurrentLoopTests(_m.BaseCurrentLoopTests, _m.test_utils.TestCase):
        def new_task(self, coro):
            return _impl.Task(coro, loop=self.loop)

    RunCoroutineThreadsafeTests = _m.RunCoroutineThreadsafeTests
    SleepTests = _m.SleepTests
