"""corun.testing: tools for testing code built on corun.

* ``MockClock``: virtual time for ``corun.resilience`` policies, advanced by
  hand or jumping to the next deadline when the loop is idle (autojump).
* ``set_testing`` / ``is_testing``: turn retry backoff off (stamina's switch).
* ``EventRecorder``: a listener that records every resilience event.
* ``TaskRecorder``: an instrument that records a corun loop's task hooks.
* ``Nginx``: a throwaway nginx on a loopback port (tests and benchmarks).
"""

from corun.testing.clock import MockClock, MockTimer
from corun.testing.nginx import Nginx, NginxMissing
from corun.testing.recorders import EventRecorder, TaskRecorder
from corun.testing.testmode import TestingSetting, is_testing, set_testing

__all__ = [
    "EventRecorder",
    "MockClock",
    "MockTimer",
    "Nginx",
    "NginxMissing",
    "TaskRecorder",
    "TestingSetting",
    "is_testing",
    "set_testing",
]
