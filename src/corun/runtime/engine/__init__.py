"""The compiled engine: what runs on every step of the loop.

``setup.py`` compiles every module here with mypyc, except those named
``interpreted_*``, which must stay interpreted and say why in their
docstrings (``interpreted_task.Task`` needs a weak-reference slot that only
an interpreted class gets safely; ``interpreted_await.result_of`` is a
generator, which finishes an ``await`` without raising StopIteration).

Modules, bottom up: ``formatting`` (reprs and stacks), ``instruments``
(hooks), ``handles`` (``Handle`` and ``LoopBase``, the loop's ready queue),
``timers`` (``TimerHandle`` and the heap), ``futures``, ``task_core`` (the
task step), ``epoll`` (fd readiness) and ``loop_core`` (``LoopCore``).
"""
