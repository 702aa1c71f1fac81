"""CPython test_eager_task_factory (3.12+) bound to corun's Task, on corun's loop.

Collected: ``CorunEagerTaskFactoryLoopTests`` (the loop tests, with
``asyncio.create_eager_task_factory(corun.Task)``), ``CorunNonEagerTests`` and
``CorunEagerTests`` (task counting through factories that take keyword
arguments), bound like the stdlib's ``Py*``/``C*`` classes, and the module's
loop-generic classes unchanged.  Not collected: those stdlib bindings (C and
Python asyncio Tasks).  On 3.11, which has no eager tasks, the module is not
there and this file is skipped.
"""

from ._harness import cpython_module, impl
from ._harness import testcase_classes as _testcase_classes

_m = cpython_module(globals(), "test_eager_task_factory")
_impl = impl()


class CorunEagerTaskFactoryLoopTests(_m.EagerTaskFactoryLoopTests, _m.test_utils.TestCase):
    Task = _impl.Task


class CorunNonEagerTests(_m.BaseNonEagerTaskFactoryTests, _m.test_utils.TestCase):
    Task = _impl.Task


class CorunEagerTests(_m.BaseEagerTaskFactoryTests, _m.test_utils.TestCase):
    Task = _impl.Task


# The classes bound to no Task class of the stdlib's (3.14: the default
# factory given eager_start).
_STDLIB_BINDINGS = {
    "PyEagerTaskFactoryLoopTests",
    "CEagerTaskFactoryLoopTests",
    "NonEagerTests",
    "EagerTests",
    "NonEagerPyTaskTests",
    "EagerPyTaskTests",
    "NonEagerCTaskTests",
    "EagerCTaskTests",
}
for _name, _cls in _testcase_classes(_m).items():
    if _name not in _STDLIB_BINDINGS:
        globals()[_name] = _cls
