"""Every ```python block of docs/resilience.md is a complete program; run them all.

Blocks fenced as ```text (diagrams, output) are not run. Each program runs in
a fresh namespace and makes its own loop (``asyncio.run`` or ``corun.run``);
its own ``assert`` statements check what the text around it claims.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "resilience.md"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[int, str]]:
    text = DOC.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


def test_the_doc_has_examples() -> None:
    assert len(blocks()) >= 12


@pytest.mark.parametrize(("line", "code"), blocks(), ids=[f"line{n}" for n, _ in blocks()])
def test_doc_example_runs(line: int, code: str, capsys: pytest.CaptureFixture[str]) -> None:
    # A real module, registered while it runs: dataclasses look their
    # module up in sys.modules. Blank lines keep tracebacks on the doc's lines.
    module = types.ModuleType(f"docs_example_line_{line}")
    sys.modules[module.__name__] = module
    try:
        exec(compile("\n" * (line - 1) + code, str(DOC), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
