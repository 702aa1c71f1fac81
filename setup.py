"""Build corun: compiled with mypyc by default, pure Python on request or without a compiler.

``CORUN_PURE=1`` at install time, or a machine without a C compiler, gives the
pure-Python build of the same sources; ``corun.COMPILED`` says which one is
loaded. Everything else about the package lives in pyproject.toml.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from typing import Final

from setuptools import setup

# The folder is the rule: every module of the engine is compiled to C, except
# those named interpreted_* (see src/corun/runtime/engine/__init__.py).
ENGINE: Final = "src/corun/runtime/engine"


def compiled_modules() -> list[str]:
    """The engine's modules that mypyc compiles, in a stable order."""
    return sorted(
        os.path.join(ENGINE, name)
        for name in os.listdir(ENGINE)
        if name.endswith(".py") and name != "__init__.py" and not name.startswith("interpreted_")
    )


def _pure_requested() -> bool:
    return os.environ.get("CORUN_PURE", "").strip().lower() not in ("", "0", "false", "no")


def _have_compiler() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(compiler) is not None


def _ext_modules() -> list[object]:
    if _pure_requested():
        print("corun: CORUN_PURE is set: building pure Python", file=sys.stderr)
        return []
    if not _have_compiler():
        print("corun: no C compiler found: building pure Python", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("corun: mypyc is not available: building pure Python", file=sys.stderr)
        return []
    return list(mypycify(compiled_modules(), opt_level="3", debug_level="1"))


setup(ext_modules=_ext_modules())
