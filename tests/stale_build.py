"""The check that a compiled module is not older than its source (used by conftest.py)."""

from __future__ import annotations

from pathlib import Path


def stale_compiled_modules(engine: Path) -> list[str]:
    """The engine's sources edited after their compiled module was built.

    An editable install builds the ``.so`` files beside their sources, and
    Python imports a ``.so`` before a ``.py``: after an edit, tests would
    silently run the old compiled code.
    """
    stale = []
    for built in engine.glob("*.so"):
        source = engine / (built.name.split(".", 1)[0] + ".py")
        if source.exists() and source.stat().st_mtime > built.stat().st_mtime:
            stale.append(source.name)
    return sorted(stale)
