"""``EventLoop``: corun's complete event loop.

``LoopCore`` (``core.py``) runs callbacks, timers and fd readiness. This class
adds the network and process half of ``asyncio.AbstractEventLoop``. Each
method here is a thin entry point; the work lives in one module per concept
(``sockets.py``, ``streams.py``, ``datagrams.py``, ``servers.py``, ``tls.py``,
``pipes.py``, ``subprocesses.py``, ``dns.py``), which use only ``LoopCore``'s API.
"""

from __future__ import annotations

from corun.runtime.core import LoopCore


class EventLoop(LoopCore):
    """corun's event loop: a ready queue, a timer heap and epoll.

    Use it wherever an asyncio loop is expected: ``corun.run(main())``,
    ``asyncio.Runner(loop_factory=corun.new_event_loop)``, or ``corun.install()``.
    """
