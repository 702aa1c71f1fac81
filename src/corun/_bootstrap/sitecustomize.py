"""``corun run``'s start-up hook for the Python programs it starts (``corun.launch``).

``corun run`` puts this directory first on ``PYTHONPATH``: an interpreter
that a program starts (multiprocessing's spawned workers) imports this
``sitecustomize``, which installs corun there too, and then runs the
``sitecustomize`` that it hides, if there is one.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _start() -> None:
    if os.environ.get("CORUN_RUN") == "1":
        try:
            from corun.launch import child_started
        except ImportError:  # another interpreter, without corun
            pass
        else:
            child_started()
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        hidden = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hidden)


_start()
