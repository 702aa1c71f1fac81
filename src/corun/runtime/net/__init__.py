"""The loop's network methods, one concept per module.

Each function takes the loop as its first parameter and is bound as a method
in ``EventLoop``'s class body. They use ``LoopCore``'s API, typed as such;
where they call an ``asyncio.AbstractEventLoop`` method (``getaddrinfo``,
through the loop so that a replacement takes effect), ``as_asyncio_loop``
gives the loop that type: every ``LoopCore`` is an ``EventLoop``.
"""
