"""Reading the plugin's per-test records and turning two runs into the results table."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

OUTCOMES = ("passed", "failed", "skipped")
OUTSIDE = "<outside tests>"


@dataclass(frozen=True)
class TestRecord:
    """One test's outcome on one loop, as written by corun_plugin."""

    nodeid: str
    outcome: str
    message: str = ""
    ran: tuple[str, ...] = ()
    created: tuple[str, ...] = ()


@dataclass
class LoopRun:
    """One pytest run of a suite on one loop."""

    loop: str
    records: dict[str, TestRecord] = field(default_factory=dict)
    #: Loops that ran outside any test (collection, session teardown).
    outside: set[str] = field(default_factory=set)
    exit_code: int | None = None
    seconds: float = 0.0
    timed_out: bool = False

    def counts(self) -> dict[str, int]:
        """passed/failed/skipped totals."""
        totals = dict.fromkeys(OUTCOMES, 0)
        for record in self.records.values():
            totals[record.outcome] += 1
        return totals

    def broken(self) -> bool:
        """True when the run itself went wrong: no tests recorded, or pytest's exit
        code says usage/internal error/interrupted (2, 3, 4) or it was killed."""
        return self.timed_out or not self.records or self.exit_code not in (0, 1)


def parse_records(lines: Iterable[str], loop: str) -> LoopRun:
    """Build a LoopRun from the plugin's JSON lines (the last record of a node id wins)."""
    run = LoopRun(loop=loop)
    for line in lines:
        line = line.strip()
        if not line:
            continue
        data = json.loads(line)
        if data["nodeid"] == OUTSIDE:
            run.outside.update(data.get("ran", ()))
            continue
        outcome = data["outcome"]
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r} for {data['nodeid']}")
        run.records[data["nodeid"]] = TestRecord(
            nodeid=data["nodeid"],
            outcome=outcome,
            message=data.get("message", ""),
            ran=tuple(data.get("ran", ())),
            created=tuple(data.get("created", ())),
        )
    return run


def load_run(path: Path, loop: str) -> LoopRun:
    """parse_records on a report file; a missing file is an empty run."""
    if not path.exists():
        return LoopRun(loop=loop)
    with open(path, encoding="utf-8") as lines:
        return parse_records(lines, loop)


def is_corun_loop(class_name: str) -> bool:
    """Whether a recorded loop class ('module.Qualname') is one of corun's."""
    return class_name == "corun" or class_name.startswith("corun.")


def foreign_loops(run: LoopRun) -> dict[str, list[str]]:
    """Tests of a corun run during which a loop other than corun's ran."""
    found: dict[str, list[str]] = {}
    for record in run.records.values():
        others = [name for name in record.ran if not is_corun_loop(name)]
        if others:
            found[record.nodeid] = others
    others = sorted(name for name in run.outside if not is_corun_loop(name))
    if others:
        found[OUTSIDE] = others
    return found


def corun_only_failures(asyncio_run: LoopRun, corun_run: LoopRun) -> list[TestRecord]:
    """Tests that failed on corun and did not fail on asyncio (passed, skipped, or
    were not run there), in node id order."""
    failures = []
    for nodeid, record in sorted(corun_run.records.items()):
        baseline = asyncio_run.records.get(nodeid)
        if record.outcome == "failed" and (baseline is None or baseline.outcome != "failed"):
            failures.append(record)
    return failures


@dataclass
class SuiteResult:
    """Both runs of one suite."""

    name: str
    version: str
    asyncio: LoopRun
    corun: LoopRun
    #: Node ids allowed to run a loop of their own (Suite.own_loop_tests).
    own_loop_tests: frozenset[str] = frozenset()
    #: Node id -> why it cannot pass on corun (Suite.differences_by_design).
    differences: dict[str, str] = field(default_factory=dict)

    def corun_loop_tests(self) -> int:
        """How many tests of the corun pass ran corun's loop (the rest ran none)."""
        return sum(any(map(is_corun_loop, r.ran)) for r in self.corun.records.values())

    def corun_only(self) -> list[TestRecord]:
        """See corun_only_failures; less the differences by design."""
        found = corun_only_failures(self.asyncio, self.corun)
        return [r for r in found if r.nodeid not in self.differences]

    def by_design(self) -> list[TestRecord]:
        """The corun-only failures that are differences by design (each has its reason)."""
        found = corun_only_failures(self.asyncio, self.corun)
        return [r for r in found if r.nodeid in self.differences]

    def foreign(self) -> dict[str, list[str]]:
        """Tests of the corun run that ran another loop, less the allowed ones."""
        found = foreign_loops(self.corun)
        return {k: v for k, v in found.items() if k not in self.own_loop_tests}

    def expected_foreign(self) -> dict[str, list[str]]:
        """The allowed tests that did run a loop of their own."""
        found = foreign_loops(self.corun)
        return {k: v for k, v in found.items() if k in self.own_loop_tests}

    def ok(self) -> bool:
        """No corun-only failure, corun's loop everywhere, and both runs completed."""
        return (
            not self.corun_only()
            and not self.foreign()
            and not self.asyncio.broken()
            and not self.corun.broken()
        )


def _cell(run: LoopRun) -> str:
    counts = run.counts()
    text = " / ".join(str(counts[o]) for o in OUTCOMES)
    if run.timed_out:
        text += " (killed at deadline)"
    elif run.broken():
        text += f" (pytest exit {run.exit_code})"
    return text


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(results: list[SuiteResult], date: str, corun_build: str) -> str:
    """The results as Markdown: the table, then the corun-only failures per suite."""
    lines = [
        "# corun ecosystem results",
        "",
        f"Run on {date}, corun {corun_build}, by `make ecosystem` (docs/ecosystem.md).",
        "Counts are passed / failed / skipped; errors in setup or teardown count as failed.",
        "The last column counts the tests during which corun's loop ran (the others ran no loop).",
        "",
        "| suite | version | asyncio | corun | fail only on corun | loop check | tests on corun's loop |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in results:
        foreign = result.foreign()
        check = "ok" if not foreign else f"FAILED ({len(foreign)} tests)"
        if result.expected_foreign():
            check += f" ({len(result.expected_foreign())} own-loop tests)"
        lines.append(
            f"| {result.name} | {result.version} | {_cell(result.asyncio)} | "
            f"{_cell(result.corun)} | {len(result.corun_only())} | {check} | "
            f"{result.corun_loop_tests()} |"
        )
    for result in results:
        failures = result.corun_only()
        if failures:
            lines += ["", f"## {result.name}: fail only on corun ({len(failures)})", ""]
            for record in failures:
                baseline = result.asyncio.records.get(record.nodeid)
                note = "" if baseline is not None else " (not run on asyncio)"
                lines.append(f"- `{record.nodeid}`{note}: {_escape(record.message)}")
        foreign = result.foreign()
        if foreign:
            lines += ["", f"## {result.name}: a loop other than corun's ran ({len(foreign)})", ""]
            for nodeid, names in sorted(foreign.items()):
                lines.append(f"- `{nodeid}`: {', '.join(names)}")
        by_design = result.by_design()
        if by_design:
            lines += ["", f"## {result.name}: differences by design ({len(by_design)})", ""]
            for record in by_design:
                lines.append(f"- `{record.nodeid}`: {result.differences[record.nodeid]}")
        expected = result.expected_foreign()
        if expected:
            lines += [
                "",
                f"## {result.name}: tests that run a loop class of their own, by design",
                "",
            ]
            for nodeid, names in sorted(expected.items()):
                lines.append(f"- `{nodeid}`: {', '.join(names)}")
    return "\n".join(lines) + "\n"


def to_json(results: list[SuiteResult], date: str, corun_build: str) -> dict[str, object]:
    """The results as JSON-ready data."""
    suites = []
    for result in results:
        runs: dict[str, object] = {}
        for run in (result.asyncio, result.corun):
            runs[run.loop] = {
                "counts": run.counts(),
                "exit_code": run.exit_code,
                "seconds": round(run.seconds, 1),
                "timed_out": run.timed_out,
            }
        suites.append(
            {
                "name": result.name,
                "version": result.version,
                "runs": runs,
                "corun_only_failures": [
                    {"nodeid": r.nodeid, "message": r.message} for r in result.corun_only()
                ],
                "differences_by_design": {
                    r.nodeid: result.differences[r.nodeid] for r in result.by_design()
                },
                "corun_loop_tests": result.corun_loop_tests(),
                "foreign_loops": result.foreign(),
                "own_loop_tests": result.expected_foreign(),
            }
        )
    return {"date": date, "corun_build": corun_build, "suites": suites}
