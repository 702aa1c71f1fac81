"""The conformance summary: a table of outcomes per CPython module, printed at the end of the run.

A plugin of its own, registered by tests/conftest.py: under pytest-xdist
the process that prints the summary collects no test, so it never loads
tests/conformance/conftest.py.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from typing import Any

import pytest

from . import _harness
from .exclusions import EXCLUSIONS

OUTCOMES = ("passed", "failed", "error", "xfailed", "xpassed", "skipped")

# node id -> CPython module name, for every conformance test reported
_node_module: dict[str, str] = {}
_FILE_MODULE = re.compile(r"(?:^|/)conformance/test_cpython_(\w+)\.py::")
# node id -> final outcome
_outcomes: dict[str, str] = {}


def _classify(report: pytest.TestReport) -> str | None:
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if xfail:
            return "xfailed" if report.skipped else "xpassed"
        return report.outcome
    if report.failed:
        return "error"
    if report.when == "setup" and report.skipped:
        return "xfailed" if xfail else "skipped"
    return None


def _module_of_nodeid(nodeid: str) -> str | None:
    """The CPython module a test id runs, from its file's name (``test_cpython_X.py``: ``test_X``).

    Under pytest-xdist the reports reach a process that collected nothing,
    so the id is all there is.
    """
    match = _FILE_MODULE.search(nodeid)
    return f"test_{match.group(1)}" if match else None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module_name = _module_of_nodeid(report.nodeid)
    if module_name is None:
        return
    _node_module[report.nodeid] = module_name
    outcome = _classify(report)
    if outcome is None:
        return
    if report.nodeid not in _outcomes or outcome in ("failed", "error"):
        _outcomes[report.nodeid] = outcome


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _outcomes:
        return
    per_module: dict[str, Counter[str]] = {}
    for nodeid, outcome in _outcomes.items():
        per_module.setdefault(_node_module[nodeid], Counter())[outcome] += 1

    impl_name = _harness.loop_kind()
    extras = "on" if _harness.extras_enabled() else "off"
    version = ".".join(map(str, sys.version_info[:3]))
    tr = terminalreporter
    tr.write_sep("=", f"CPython {version} test.test_asyncio conformance: loop={impl_name}")
    width = max(12, *(len(m) for m in per_module))
    header = f"{'module':<{width}}" + "".join(f"{o:>9}" for o in (*OUTCOMES, "total"))
    tr.write_line(header)
    totals: Counter[str] = Counter()
    for module_name, counts in per_module.items():
        totals.update(counts)
        row = "".join(f"{counts[o]:>9}" for o in OUTCOMES)
        tr.write_line(f"{module_name:<{width}}{row}{sum(counts.values()):>9}")
    row = "".join(f"{totals[o]:>9}" for o in OUTCOMES)
    tr.write_line(f"{'TOTAL':<{width}}{row}{sum(totals.values()):>9}")
    applied = "applied" if impl_name == "corun" else "not applied to the stdlib baseline"
    tr.write_line(
        f"({_harness.ENV_LOOP}={impl_name}, {_harness.ENV_EXTRA}={extras}, "
        f"{len(EXCLUSIONS)} exclusion entries, {applied})"
    )
