"""CPython test_asyncio.test_subprocess, unchanged, under corun's policy.

Every class is collected as CPython runs it on Unix: the ``SubprocessMixin``
tests once per child watcher (threaded, multi-loop -- skipped by CPython,
bpo-38323 --, safe, fast, pidfd), each on a loop from the policy with that
watcher attached, plus ``SubprocessTransportTests`` (stdlib
``BaseSubprocessTransport`` on ``TestLoop``) and ``GenericWatcherTests``.
"""

from ._harness import bind

bind(globals(), "test_subprocess")
