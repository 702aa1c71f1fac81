"""The compiled engine: what runs on every step of the loop.

``setup.py`` compiles every module here with mypyc, except those named
``interpreted_*``, which must stay interpreted and say why in their
docstrings (``interpreted_task.Task`` is ``Generic`` and takes attributes of
the program's own, which a compiled class cannot soundly;
``interpreted_await.result_of`` is a generator, which finishes an ``await``
without raising StopIteration). Weak references to the compiled Future,
Handle and their subclasses come from ``setup.py``, which adds the slot to
the C that mypyc generates, as it adds ``FutureIter``'s ``am_send`` slot
(``await`` returns without a StopIteration).

Modules, bottom up: ``formatting`` (reprs and stacks), ``instruments``
(hooks), ``handles`` (``Handle`` and ``LoopBase``, the loop's ready queue),
``timers`` (``TimerHandle`` and the heap), ``futures``, ``task_core`` (the
task step), ``epoll`` (fd readiness) and ``loop_core`` (``LoopCore``).
"""
