"""CPython test_sslproto: ``SelectorStartTLSTests`` rebound to corun's loop.

``SslProtoHandshakeTests`` (stdlib ``SSLProtocol`` on a policy loop) and
``ProactorStartTLSTests`` (Windows only: skipped) are collected unchanged.
CPython's ``SelectorStartTLSTests`` makes its loop with
``asyncio.SelectorEventLoop()`` rather than from the policy, so it is not
collected as is; ``CorunStartTLSTests`` is the same class with ``new_loop()``
returning a corun loop.
"""

from ._harness import bind, impl

_m = bind(globals(), "test_sslproto", exclude={"SelectorStartTLSTests"})


class CorunStartTLSTests(_m.SelectorStartTLSTests):
    def new_loop(self):
        return impl().new_event_loop()
