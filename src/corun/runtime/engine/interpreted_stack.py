"""Debug mode's source tracebacks: the stack that led into corun.

Deliberately not compiled (setup.py compiles every module in ``engine/`` but
those named ``interpreted_*``): ``sys._getframe(0)`` must return a frame of
this function's own. From compiled code it returns the innermost Python
frame, and when CPython calls into corun while it clears that frame (an
asynchronous generator's finalizer, run as the frame that dropped it ends),
reading it crashed the process on 3.14.
"""

from __future__ import annotations

import os
import sys
import traceback
import types
from typing import Final

from corun.runtime.engine.formatting import DEBUG_STACK_DEPTH

_RUNTIME_DIR: Final = os.path.dirname(os.path.abspath(__file__)) + os.sep


def extract_stack() -> traceback.StackSummary:
    """The stack that led into corun, oldest first, for debug-mode source tracebacks.

    It starts at the innermost frame outside corun's runtime package, so it is
    the same whether corun's own functions are compiled (they then have no
    frames) or interpreted. Source lines are not read here (that is slow);
    they are looked up when the traceback is formatted.
    """
    frame: types.FrameType | None = sys._getframe(0)
    while frame is not None and frame.f_code.co_filename.startswith(_RUNTIME_DIR):
        frame = frame.f_back
    stack = traceback.StackSummary.extract(
        traceback.walk_stack(frame), limit=DEBUG_STACK_DEPTH, lookup_lines=False
    )
    stack.reverse()
    return stack
