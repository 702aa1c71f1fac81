"""corun's runtime: the event loop and everything under the asyncio API.

The map, bottom layer first. Imports point down only.

``_constants.py``
    asyncio's logger, thresholds and buffer sizes, once.
``engine/``
    The compiled core (see its ``__init__``): handles and ``LoopBase``, the
    timer heap, ``Future``, the task core and its step, epoll, ``LoopCore``
    (run-once, executors, signals, error reporting, debug mode), instruments
    and formatting. Everything above uses the engine's API.
``transports/``
    What protocols talk to: the flow-controlled base, stream (TCP and Unix)
    and datagram sockets, pipes, subprocesses, and TLS (``TLSProtocol`` and
    its ``SSLTransport``, one object in one module).
``net/``
    The loop's network methods: name resolution, the ``sock_*`` calls,
    ``create_connection`` and friends (``connect.py``), servers, ``sendfile``.
``loop.py``
    ``EventLoop``: ``LoopCore`` plus ``asyncio.AbstractEventLoop``, with the
    network and process methods bound from ``net/`` and ``transports/``.
``runner.py``
    ``new_event_loop``, ``run``, ``EventLoopPolicy``, ``install``.

Reading order: ``engine/handles.py``, ``engine/futures.py``,
``engine/task_core.py``, ``engine/loop_core.py``, then ``loop.py`` and
whatever part of the network half you need.

The two mypyc rules, written once:

1. Every module in ``engine/`` is compiled with mypyc, except those named
   ``interpreted_*``; ``setup.py`` compiles the folder, not a list. Compiled
   code follows mypyc's habits: ``Final`` constants, no dynamic attributes on
   its classes, no closures on hot paths, and plain types at the boundary.
2. A compiled annotation is enforced at run time (a ``bool`` parameter
   rejects ``1``, a ``float`` one turns ``7`` into ``7.0``). On the asyncio
   surface, accept what asyncio accepts and hand back what was given: annotate
   such parameters ``object`` or ``Any`` and convert explicitly.
"""
