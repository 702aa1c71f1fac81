"""The check that a compiled module is not older than its source (used by conftest.py)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

#: This interpreter's compiled modules end so; another version's, beside them, are not its.
SUFFIX: str = sysconfig.get_config_var("EXT_SUFFIX")


def stale_compiled_modules(engine: Path, suffix: str = SUFFIX) -> list[str]:
    """The sources in ``engine`` (a folder) edited after their compiled modules were built.

    An editable install builds the ``.so`` files beside their sources, and
    Python imports a ``.so`` before a ``.py``: after an edit, tests would
    silently run the old compiled code. Each CPython builds its own (``make
    test PY=3.14``), so only the files with this interpreter's suffix count.
    """
    stale = []
    for built in engine.glob(f"*{suffix}"):
        source = engine / (built.name.split(".", 1)[0] + ".py")
        if source.exists() and source.stat().st_mtime > built.stat().st_mtime:
            stale.append(source.name)
    return sorted(stale)
