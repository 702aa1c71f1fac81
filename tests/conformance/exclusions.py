"""Known conformance gaps of corun against CPython's asyncio suites.

Maps a test to the reason it is excluded.  Keys, most specific first:

* ``"test_tasks::CorunTask_CorunFuture_Tests::test_foo"`` -- one test
  (``<CPython module>::<class>::<method>``);
* ``"test_tasks::CorunTask_CorunFuture_Tests"`` -- a whole class;
* ``"test_ssl"`` -- a whole CPython module;
* a full pytest node id (``tests/conformance/test_cpython_tasks.py::...``).

An excluded test is marked ``xfail(strict=True)``: it still runs, it must
still fail, and it turns into a failure the day it starts passing.  Tests that
hang or crash the process cannot run at all; prefix their reason with
``"skip: "`` to skip them instead.  Nothing is dropped silently: every
exclusion shows up as xfailed/skipped with its reason in the pytest summary.

Exclusions apply only when running against corun, never to the stdlib
baseline (``CORUN_CONFORMANCE_LOOP=asyncio``).
"""

SKIP_PREFIX = "skip: "

EXCLUSIONS: dict[str, str] = {}
